#!/usr/bin/env bash
# Is warren-perf trustworthy? The same workloads against RabbitMQ 3.10 with
# the real PerfTest and with warren-perf, one after the other on one node;
# prints both receive rates and how far apart they are.
#
#   bench/crosscheck.sh [SECONDS]   (default 30)
#
# Workloads: durable (1 KB persistent, durable queue, confirms 1000,
# prefetch 1000, ack every 100) and transient (the same, not persistent).
# The node is pinned to CPU 1 and the load generator to CPU 0, so that the
# tools measure the broker, not how much CPU each takes from it (unpinned,
# PerfTest's JVM and the node share two cores, and the lighter tool sees a
# faster node).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
source bench/lib.sh
fetch_perftest
cargo build --release -p warren-perf
trap cleanup EXIT
$ANCHOR start anchor $RABBIT_PORT 5553 15673 25673
RABBIT_PID=$(pgrep -f "beam.smp.*-home /tmp/rmq-anchor" | head -1)
taskset -a -p -c 1 "$RABBIT_PID" > /dev/null
sleep 2
URI="amqp://guest:guest@127.0.0.1:$RABBIT_PORT/%2f"
rate() { grep "receiving rate avg" "$1" | grep -o '[0-9]*' | tail -1; }
echo "| workload | PerfTest msg/s | warren-perf msg/s | difference |"
echo "| --- | --- | --- | --- |"
for w in durable transient; do
  COMMON=(-x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100 -z "$SECS")
  PT=(); WP=()
  if [ $w = durable ]; then PT=(-f persistent -u xcheck-pt -ad false); WP=(-f persistent -u xcheck-wp); fi
  timeout $((SECS + 120)) taskset -c 0 java -cp "$OUT/lib/*" com.rabbitmq.perf.PerfTest -h "$URI" "${COMMON[@]}" "${PT[@]}" > "$OUT/xcheck-$w-perftest.txt" 2>&1 || true
  taskset -c 0 ./target/release/warren-perf -h "$URI" "${COMMON[@]}" "${WP[@]}" --quiet --json "$OUT/xcheck-$w-warren-perf.json" > "$OUT/xcheck-$w-warren-perf.txt"
  a=$(rate "$OUT/xcheck-$w-perftest.txt")
  b=$(python3 -c "import json;print(round(json.load(open('$OUT/xcheck-$w-warren-perf.json'))['stages'][0]['received_rate']))")
  echo "| $w | $a | $b | $(python3 -c "print(f'{($b-$a)/$a*100:+.1f} %')") |"
done
