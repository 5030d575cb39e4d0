#!/usr/bin/env bash
# Streams side by side: warren-perf's stream mode (1 producer, 1 consumer,
# batches of 100, consumer from the start of a fresh stream with
# stream-perf-test's retention, 20 GB in 500 MB segments) against Warren
# and RabbitMQ 3.10's stream plugin in one run, 12-byte and 1 KB messages.
# Both brokers' stream data is deleted at the end.
#
#   bench/stream.sh [SECONDS]   (default 60 per workload and broker)
#   CACHE=0 bench/stream.sh     (a control: Warren with stream_cache_bytes
#                                = 0, the page cache left to the OS as
#                                RabbitMQ leaves it)
#
# Loopback only; both brokers are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
# A fresh stream per run: the anchor keeps its streams between runs.
RUN=$(date +%s)
source bench/lib.sh
if [ -n "${CACHE:-}" ]; then
  echo "stream_cache_bytes = $CACHE" > "$OUT/warren-cache.toml"
  export WARREN_CONFIG="$PWD/$OUT/warren-cache.toml"
fi
cargo build --release -p warren-perf
EXTRA_CLEANUP="drop_anchor_queues perf-stream-12-$RUN perf-stream-1000-$RUN"
start_brokers
for size in 12 1000; do
  for b in warren rabbitmq; do
    port=$WARREN_STREAM_PORT; [ $b = rabbitmq ] && port=5553
    echo "== stream ${size} B on $b"
    ./target/release/warren-perf -P stream -h "rabbitmq-stream://guest:guest@127.0.0.1:$port/%2f" \
      -x 1 -y 1 -s "$size" -z "$SECS" --offset first -u "perf-stream-$size-$RUN" \
      --quiet --json "$OUT/stream-$size-$b.json" > "$OUT/stream-$size-$b.txt"
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/stream-summary.md"
import json, sys
out = sys.argv[1]
print("\n| workload | Warren sent / received msg/s | RabbitMQ 3.10 sent / received msg/s | ratio (received) | Warren p50 / p99 | RabbitMQ p50 / p99 |")
print("| --- | --- | --- | --- | --- | --- |")
for size in (12, 1000):
    w, r = (json.load(open(f"{out}/stream-{size}-{b}.json"))["stages"][0] for b in ("warren", "rabbitmq"))
    lat = lambda s: f"{s['consumer_latency_us']['p50']/1000:.1f} / {s['consumer_latency_us']['p99']/1000:.1f} ms"
    ratio = w["received_rate"] / r["received_rate"] if r["received_rate"] else float("nan")
    print(f"| {size} B | {w['sent_rate']:,.0f} / {w['received_rate']:,.0f} | {r['sent_rate']:,.0f} / {r['received_rate']:,.0f} | {ratio:.2f}x | {lat(w)} | {lat(r)} |")
PY
