#!/usr/bin/env bash
# warren-client's stream module beside RabbitMQ's Java stream client,
# each through its perf tool, same broker, same run (issue 35):
# `warren-perf -P stream` and stream-perf-test (not on
# Maven Central: build it yourself, see bench/stream-perf-test.sh). One
# producer and one consumer from the start of a fresh stream, SECS
# seconds, 12 B and 1 KB messages, batches of 100, each of: plain,
# sub-entries of 100, sub-entries of 100 compressed with zstd; on one
# Warren node (release build) and on three (bench/cluster_lib.sh, the
# stream created through node 1, which leads it; producers go to the
# leader, consumers to a replica, as both clients do). The tools take
# turns, the order alternating; the summary gives medians of REPEAT and
# the ratios (warren / stream-perf-test). Both check each chunk's CRC
# (the Java client always does; warren-perf with --crc-check). Rows go to
# bench/out/client-spt/rows.tsv. Loopback only; the brokers are stopped
# and their data removed at the end.
#
#   bench/client-spt.sh SPT_JAR [SECS] [REPEAT]   (default 10 s, 2)
set -euo pipefail
cd "$(dirname "$0")/.."
SPT=${1:?usage: bench/client-spt.sh STREAM_PERF_TEST_JAR [SECS] [REPEAT]}
SECS=${2:-10}
REPEAT=${3:-2}
OUT=bench/out/client-spt
WARREN_ONLY=1
source bench/cluster_lib.sh
cargo build --release -q -p warren-perf -p warren-server
ROWS="$OUT/rows.tsv"
: > "$ROWS"
MODES=("plain:" "sub100:--sub-entry-size 100" "sub100-zstd:--sub-entry-size 100 --compression zstd")

# One run: NODES SIZE MODE TOOL PORT HTTP_PORT EXTRA... Each stream is
# deleted after its run (through the HTTP API), so the disk holds one.
run() {
  local nodes=$1 size=$2 mode=$3 tool=$4 port=$5 http=$6; shift 6
  local stream="cs-$nodes-$size-$mode-$tool-$RANDOM$RANDOM" uri="rabbitmq-stream://guest:guest@127.0.0.1:$port/%2f"
  local f="$OUT/$nodes-$size-$mode-$tool"
  rm -f "$f.json" "$f.txt"
  if [ "$tool" = warren ]; then
    # shellcheck disable=SC2068
    timeout $((SECS + 60)) ./target/release/warren-perf -P stream --crc-check -h "$uri" -x 1 -y 1 -s "$size" \
      -z "$SECS" --offset first -u "$stream" $@ --quiet --json "$f.json" > "$f.txt" 2>&1 || echo "   (exit $?)"
    python3 - "$f.json" "$nodes" "$size" "$mode" <<'PY' >> "$ROWS"
import json, sys
try:
    s = json.load(open(sys.argv[1]))["stages"][0]
    rates = [f"{s['sent_rate']:.0f}", f"{s['received_rate']:.0f}"]
except OSError:
    rates = ["0", "0"]
print("\t".join(sys.argv[2:5] + ["warren"] + rates))
PY
  else
    # shellcheck disable=SC2068
    timeout $((SECS + 60)) java -jar "$SPT" --uris "$uri" --producers 1 --consumers 1 --size "$size" \
      --time "$SECS" --offset first --streams "$stream" --delete-streams $@ > "$f.txt" 2>&1 || echo "   (exit $?)"
    python3 - "$f.txt" "$nodes" "$size" "$mode" <<'PY' >> "$ROWS"
import re, sys
m = re.findall(r"Summary: published ([\d.,]+) msg/s, confirmed [\d.,]+ msg/s, consumed ([\d.,]+) msg/s", open(sys.argv[1]).read())
p, c = (x.replace(",", "") for x in m[-1]) if m else ("0", "0")
print("\t".join(sys.argv[2:5] + ["stream-perf-test", p, c]))
PY
  fi
  curl -s -o /dev/null -u guest:guest -X DELETE "http://127.0.0.1:$http/api/queues/%2f/$stream" || true
  tail -1 "$ROWS"
}

sweep() {
  local nodes=$1 port=$2 http=$3
  for r in $(seq "$REPEAT"); do
    for size in 12 1000; do
      for m in "${MODES[@]}"; do
        name=${m%%:*}; args=${m#*:}
        if [ $((r % 2)) = 1 ]; then order="warren stream-perf-test"; else order="stream-perf-test warren"; fi
        for tool in $order; do
          # shellcheck disable=SC2086
          run "$nodes" "$size" "$name" "$tool" "$port" "$http" $args
        done
      done
    done
  done
}

# One node: a release Warren of its own.
rm -rf "$OUT/data-single"
./target/release/warren --amqp-listen 127.0.0.1:5684 --stream-listen 127.0.0.1:5685 \
  --http-listen 127.0.0.1:15685 --prometheus-listen 127.0.0.1:0 --data-dir "$OUT/data-single" > "$OUT/single.log" 2>&1 &
SINGLE=$!
PIDS+=("$SINGLE")
sleep 1.5
sweep 1 5685 15685
kill "$SINGLE"; wait "$SINGLE" 2>/dev/null || true; rm -rf "$OUT/data-single"

# Three nodes, through node 1.
start_clusters
sweep 3 5791 15781

python3 - "$ROWS" <<'PY' | tee "$OUT/summary.md"
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    nodes, size, mode, tool, sent, received = line.split()
    rows[(nodes, size, mode, tool)].append((float(sent), float(received)))
print("| nodes | size | entries | warren-client sent / received msg/s | stream-perf-test sent / received msg/s | ratio (sent, received) |")
print("| --- | --- | --- | --- | --- | --- |")
for (nodes, size, mode, tool) in sorted(k for k in rows if k[3] == "warren"):
    w = [statistics.median(x) for x in zip(*rows[(nodes, size, mode, "warren")])]
    j = rows.get((nodes, size, mode, "stream-perf-test"))
    if not j:
        continue
    j = [statistics.median(x) for x in zip(*j)]
    r = lambda a, b: f"{a / b:.2f}x" if b else "n/a"
    print(f"| {nodes} | {size} B | {mode} | {w[0]:,.0f} / {w[1]:,.0f} | {j[0]:,.0f} / {j[1]:,.0f} | {r(w[0], j[0])}, {r(w[1], j[1])} |")
PY
