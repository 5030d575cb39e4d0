#!/usr/bin/env bash
# Replicated streams, 3-node Warren beside 3-node RabbitMQ 3.10 in one
# run: one producer and one consumer (warren-perf's stream mode, batches
# of 100, the consumer from the start) on a fresh stream created through
# node 1, so it leads there and has a member on every node (both
# brokers' default), 12-byte and 1 KB messages, SECS seconds each. A
# confirm means a majority of the three members has the chunk on both.
# Loopback only; both clusters are stopped and their data removed.
#
#   bash bench/stream-cluster.sh [SECS]    # default 30
#
# stream-perf-test (RabbitMQ's own tool, not on Maven Central: build it
# yourself, see bench/stream-perf-test.sh) runs the same workloads when
# SPT=PATH/TO/stream-perf-test.jar is given; it connects through node 1
# and, as the Java client does, its consumer reads from a replica.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
OUT=bench/out/stream-cluster
RUN=$(date +%s)
source bench/cluster_lib.sh
cargo build --release -q -p warren-perf
start_clusters
sleep 2
for size in 12 1000; do
  for b in warren rabbitmq; do
    port=5791; [ $b = rabbitmq ] && port=5711
    echo "== replicated stream ${size} B on $b (warren-perf)"
    timeout $((SECS + 60)) ./target/release/warren-perf -P stream \
      -h "rabbitmq-stream://guest:guest@127.0.0.1:$port/%2f" \
      -x 1 -y 1 -s "$size" -z "$SECS" --offset first -u "rs-$size-$RUN-$b" \
      --quiet --json "$OUT/wp-$size-$b.json" > "$OUT/wp-$size-$b.txt" || echo "   (exit $?)"
    if [ -n "${SPT:-}" ]; then
      echo "== replicated stream ${size} B on $b (stream-perf-test)"
      # Connect through node 1; the advertised hosts differ (127.0.0.1,
      # localhost), both loopback.
      timeout $((SECS + 60)) java -jar "$SPT" --uris "rabbitmq-stream://guest:guest@127.0.0.1:$port/%2f" \
        --producers 1 --consumers 1 --size "$size" --time "$SECS" --offset first \
        --streams "spt-$size-$RUN-$b" --delete-streams > "$OUT/spt-$size-$b.txt" 2>&1 || echo "   (exit $?)"
      grep -E "Summary" "$OUT/spt-$size-$b.txt" | tail -1 || true
    fi
  done
done
python3 - "$OUT" "${SPT:-}" <<'PY' | tee "$OUT/summary.md"
import json, re, sys
out, spt = sys.argv[1], sys.argv[2]
print("\n| workload | Warren sent / received msg/s | RabbitMQ 3.10 sent / received msg/s | ratio (received) | Warren p50 / p99 | RabbitMQ p50 / p99 |")
print("| --- | --- | --- | --- | --- | --- |")
for size in (12, 1000):
    try:
        w, r = (json.load(open(f"{out}/wp-{size}-{b}.json"))["stages"][0] for b in ("warren", "rabbitmq"))
    except Exception as e:
        print(f"| {size} B | missing: {e} |"); continue
    lat = lambda s: f"{s['consumer_latency_us']['p50']/1000:.1f} / {s['consumer_latency_us']['p99']/1000:.1f} ms"
    ratio = w["received_rate"] / r["received_rate"] if r["received_rate"] else float("nan")
    print(f"| warren-perf {size} B | {w['sent_rate']:,.0f} / {w['received_rate']:,.0f} | {r['sent_rate']:,.0f} / {r['received_rate']:,.0f} | {ratio:.2f}x | {lat(w)} | {lat(r)} |")
if spt:
    for size in (12, 1000):
        rates = {}
        for b in ("warren", "rabbitmq"):
            txt = open(f"{out}/spt-{size}-{b}.txt").read()
            m = re.findall(r"Summary: published ([\d.,]+) msg/s, confirmed ([\d.,]+) msg/s, consumed ([\d.,]+) msg/s", txt)
            rates[b] = [float(x.replace(",", "")) for x in m[-1]] if m else None
        w, r = rates["warren"], rates["rabbitmq"]
        if w and r:
            print(f"| stream-perf-test {size} B | {w[0]:,.0f} / {w[2]:,.0f} | {r[0]:,.0f} / {r[2]:,.0f} | {w[2]/r[2]:.2f}x | | |")
        else:
            print(f"| stream-perf-test {size} B | {w} | {r} | | | |")
PY
