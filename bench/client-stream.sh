#!/usr/bin/env bash
# warren-client's stream module beside rabbitmq-stream-client (issue 35),
# same run, same broker: a release Warren on 127.0.0.1 (stream port
# 5681, fresh data directory) and bench/client-bench running one client
# per process (so CPU time and context switches per message are that
# client's):
#
#   SP  publishing, 12 B and 1 KB, batches of 100 with at most 10,000
#       unconfirmed, SECS seconds each, to a fresh stream
#   SC  reading MSGS messages (12 B and 1 KB) from the start of a stream
#       filled beforehand, each body taken out of its AMQP 1.0 encoding
#
#   bench/client-stream.sh [SECS] [MSGS] [REPEAT]   (default 5 s, 2,000,000, 3)
#   NODES=3 bench/client-stream.sh ...   (three Warren nodes, bench/cluster_lib.sh:
#       streams created through node 1, which leads them; each client
#       publishes to the leader and reads from where it chooses)
#
# The clients take turns, the order alternating; the summary gives each
# point's medians (rate; the client's CPU and context switches per
# message; the broker's CPU per message, all its nodes, measured over the
# same timed part) and the ratio. Rows go to bench/out/client-stream.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
MSGS=${2:-2000000}
REPEAT=${3:-3}
OUT=bench/out
mkdir -p "$OUT"
cargo build -q --release -p warren-server
cargo build -q --release -p client-bench
if [ "${NODES:-1}" = 3 ]; then
  OUT=bench/out/client-stream-3
  WARREN_ONLY=1
  source bench/cluster_lib.sh
  start_clusters > "$OUT/start.log" 2>&1
  URI="rabbitmq-stream://guest:guest@127.0.0.1:5791/%2f"
  BROKER_PIDS=$(IFS=,; echo "${PIDS[*]}")
else
  rm -rf "$OUT/warren-stream-data"
  ./target/release/warren --amqp-listen 127.0.0.1:5680 --stream-listen 127.0.0.1:5681 \
    --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 \
    --data-dir "$OUT/warren-stream-data" > "$OUT/warren-stream.log" 2>&1 &
  WARREN_PID=$!
  trap 'kill $WARREN_PID 2>/dev/null || true; wait $WARREN_PID 2>/dev/null || true; rm -rf "$OUT/warren-stream-data"' EXIT
  sleep 1
  URI="rabbitmq-stream://guest:guest@127.0.0.1:5681/%2f"
  BROKER_PIDS=$WARREN_PID
fi
# client-bench also reports the broker's CPU per message (all nodes).
export CLIENT_BENCH_BROKER_PIDS=$BROKER_PIDS
TSV="$OUT/client-stream.tsv"
: > "$TSV"
# Each run starts with what the last one wrote on disk (sync): writeback
# left over from a fill or a publish run otherwise lands in the next run
# (1 KB on three nodes moved 128k-263k msg/s run to run without it).
bench() {
  sync
  timeout 300 ./target/release/client-bench "$URI" "$@" | tee -a "$TSV" | cut -f1,2,3,8,9,10,11,12,13
}
ORDERS=("warren rabbitmq-stream-client" "rabbitmq-stream-client warren")
for r in $(seq "$REPEAT"); do
  for size in 12 1000; do
    for c in ${ORDERS[$((r % 2))]}; do bench "$c" stream-publish --size "$size" --in-flight 10000 --secs "$SECS"; done
    for c in ${ORDERS[$(((r + 1) % 2))]}; do bench "$c" stream-consume --size "$size" --messages "$MSGS"; done
  done
done
python3 - "$TSV" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    kv = dict(x.split("=", 1) for x in f if "=" in x)
    rows[(f[1], kv["size"], f[0])].append((float(kv["rate"]), float(kv["cpu_us_per_msg"]), float(kv["csw_per_msg"]), float(kv.get("broker_cpu_us_per_msg", "nan"))))
print("workload\tsize\twarren msg/s (cpu us, csw; broker cpu us)\trabbitmq-stream-client msg/s (cpu us, csw; broker cpu us)\tratio")
for (w, size) in sorted({(k[0], k[1]) for k in rows}, key=lambda x: (x[0], int(x[1]))):
    med = {}
    for c in ("Warren", "RustStream"):
        v = rows.get((w, size, c), [])
        med[c] = tuple(statistics.median(x[i] for x in v) for i in range(4)) if v else (0, 0, 0, 0)
    a, b = med["Warren"], med["RustStream"]
    ratio = a[0] / b[0] if b[0] else float("nan")
    print(f"{w}\t{size}\t{a[0]:,.0f} ({a[1]:.2f}, {a[2]:.3f}; {a[3]:.2f})\t{b[0]:,.0f} ({b[1]:.2f}, {b[2]:.3f}; {b[3]:.2f})\t{ratio:.2f}x")
PY
