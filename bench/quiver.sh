#!/usr/bin/env bash
# The seed-000 quiver workload over AMQP 1.0, side by side: N durable
# 12-byte messages to a durable classic queue, receiver credit 1000, every
# delivery accepted, with warren-perf against Warren (v2 address
# /queues/NAME) and RabbitMQ 3.10 (its 1.0 plugin's v1 address
# /amq/queue/NAME) in one run.
#
#   bench/quiver.sh [N]   (default 1,000,000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
source bench/lib.sh
cargo build --release -p warren-perf
start_brokers
run() { # name port address
  ./target/release/warren-perf -P amqp10 -h "amqp://guest:guest@127.0.0.1:$2/%2f" --amqp10-address "$3" \
    -x 1 -y 1 -s 12 -f persistent -C "$N" -c 1000 -q 1000 -u quiver --quiet --json "$OUT/quiver-$1.json" > "$OUT/quiver-$1.txt"
  python3 -c "
import json; s=json.load(open('$OUT/quiver-$1.json'))['stages'][0]; l=s['consumer_latency_us']
print(f\"$1: {s['received']} received, {s['received_rate']:.0f} msg/s, latency p50 {l['p50']/1000:.1f} ms p99 {l['p99']/1000:.1f} ms\")"
}
run warren $WARREN_PORT '/queues/{queue}'
run rabbitmq $RABBIT_PORT '/amq/queue/{queue}'
python3 - "$OUT/quiver-warren.json" "$OUT/quiver-rabbitmq.json" <<'PY'
import json, sys
w, r = (json.load(open(p))["stages"][0] for p in sys.argv[1:3])
print(f"ratio {w['received_rate']/r['received_rate']:.2f}x")
PY
