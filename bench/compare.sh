#!/usr/bin/env bash
# One warren-perf workload against Warren and RabbitMQ 3.10 (Debian package)
# in one run, on this machine; prints a table with both figures and the
# ratio, and keeps the JSON and SVG of each side in bench/out/.
#
#   bench/compare.sh WORKLOAD [SECONDS]
#
# WORKLOAD is a seed-003 scenario (inflight, prefetch, ack-interval,
# no-confirms-no-acks; SECONDS per stage, default 10) or one of:
#   confirms-1kb  -x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100   (default 30 s)
#   autoack-12b   -x 1 -y 1 -s 12 -a                         (default 30 s)
#   durable-1kb   the first, persistent on a durable queue   (default 30 s)
# Loopback only; both brokers are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKLOAD=${1:?usage: bench/compare.sh WORKLOAD [SECONDS]}
source bench/lib.sh
case "$WORKLOAD" in
  inflight|prefetch|ack-interval|no-confirms-no-acks)
    SECS=${2:-10}; ARGS=(--scenario "$WORKLOAD" --stage-time "$SECS" -s 1000) ;;
  confirms-1kb) SECS=${2:-30}; ARGS=(-x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100 -z "$SECS") ;;
  autoack-12b) SECS=${2:-30}; ARGS=(-x 1 -y 1 -s 12 -a -z "$SECS") ;;
  durable-1kb) SECS=${2:-30}; ARGS=(-x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100 -f persistent -u perf-durable-cmp -z "$SECS") ;;
  *) echo "unknown workload $WORKLOAD" >&2; exit 2 ;;
esac
cargo build --release -p warren-perf
start_brokers
for b in warren rabbitmq; do
  port=$WARREN_PORT; [ $b = rabbitmq ] && port=$RABBIT_PORT
  echo "== $WORKLOAD on $b"
  ./target/release/warren-perf -h "amqp://guest:guest@127.0.0.1:$port/%2f" "${ARGS[@]}" \
    --quiet --json "$OUT/$WORKLOAD-$b.json" --svg "$OUT/$WORKLOAD-$b.svg" > "$OUT/$WORKLOAD-$b.txt"
done
python3 - "$OUT/$WORKLOAD-warren.json" "$OUT/$WORKLOAD-rabbitmq.json" <<'PY' | tee "$OUT/$WORKLOAD-summary.md"
import json, sys
w, r = (json.load(open(p))["stages"] for p in sys.argv[1:3])
print("\n| stage | Warren msg/s | RabbitMQ 3.10 msg/s | ratio | Warren p50 / p99 | RabbitMQ p50 / p99 |")
print("| --- | --- | --- | --- | --- | --- |")
def lat(s):
    l = s["consumer_latency_us"]
    return f"{l['p50']/1000:.1f} / {l['p99']/1000:.1f} ms"
for a, b in zip(w, r):
    ra, rb = a["received_rate"], b["received_rate"]
    ratio = f"{ra/rb:.2f}x" if rb else "n/a"
    print(f"| {a['stage']} | {ra:,.0f} | {rb:,.0f} | {ratio} | {lat(a)} | {lat(b)} |")
PY
