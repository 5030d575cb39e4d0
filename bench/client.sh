#!/usr/bin/env bash
# warren-client beside lapin and amqprs (issue 34), same run, same broker:
# a release Warren on 127.0.0.1:5680 (fresh data directory), and
# bench/client-bench running one client per process (so CPU time and
# context switches per message are that client's):
#
#   P  confirmed publishing, 12 B and 1 KB, at most 1, 5, 20, 200, 1,000
#      and 10,000 unconfirmed, SECS seconds each, to a queue capped at
#      10,000 messages (x-max-length); warren-client twice, as it comes
#      and with busy_poll(100 µs) (warren-busy-poll); and `floor`, no
#      client library (raw frames, a blocking socket, one thread): what
#      any client that sleeps while it waits must pay, so the most one
#      client can beat another by at a point is the other's distance
#      from it
#   C  consuming MSGS messages (12 B) with prefetch 1,000, acking with
#      `multiple` every 1, 10 and 100
#   D  warren-client's dispatch concurrency: a 0 ms handler at 1 and 32,
#      a 5 ms handler (tokio sleep) at 1, 8, 32 and 128
#   R  synchronous round trips (basic.qos), the broker's answer time
#   M  warren-client's resident memory over 30 s with a consumer 10x
#      slower than its publisher (1 KB messages)
#
#   bench/client.sh [SECS] [MSGS]        (default 5 s, 50,000 messages)
#   REPEAT=3 bench/client.sh 5 50000     (each publishing point 3 times,
#                                         read as the medians)
#
# Clients take turns in a rotating order at each point. Rows go to
# bench/out/client-bench.tsv; a summary with ratios is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
MSGS=${2:-50000}
OUT=bench/out
mkdir -p "$OUT"
PORT=5680
# One package at a time: built together they unify features and rebuild.
cargo build -q --release -p warren-server
cargo build -q --release -p client-bench
rm -rf "$OUT/warren-data"
./target/release/warren --amqp-listen 127.0.0.1:$PORT --stream-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 \
  --data-dir "$OUT/warren-data" > "$OUT/warren.log" 2>&1 &
WARREN_PID=$!
trap 'kill $WARREN_PID 2>/dev/null || true; wait $WARREN_PID 2>/dev/null || true; rm -rf "$OUT/warren-data"' EXIT
sleep 1
URI="amqp://guest:guest@127.0.0.1:$PORT/%2f"
TSV="$OUT/client-bench.tsv"
: > "$TSV"
bench() { timeout 300 ./target/release/client-bench "$URI" "$@" | tee -a "$TSV" | cut -f1,2,3,4,5,6,7,10,11,12; }
ORDERS=("warren lapin amqprs" "lapin amqprs warren" "amqprs warren lapin")
PUB_ORDERS=("warren warren-busy-poll lapin amqprs floor" "lapin amqprs floor warren warren-busy-poll"
  "floor warren lapin warren-busy-poll amqprs" "amqprs warren-busy-poll warren floor lapin"
  "warren-busy-poll floor amqprs lapin warren")
turn=0
clients() { echo "${ORDERS[$((turn % 3))]}"; turn=$((turn + 1)); }
publishers() { echo "${PUB_ORDERS[$((turn % 5))]}"; turn=$((turn + 1)); }

# The floor under the low in-flight points: the broker's own answer time
# to a synchronous method, through warren-client.
bench warren round-trip --secs "$SECS"
bench warren-busy-poll round-trip --secs "$SECS"
for size in 12 1000; do
  for inflight in 1 5 20 200 1000 10000; do
    for _ in $(seq "${REPEAT:-1}"); do
      for c in $(publishers); do bench "$c" publish --size "$size" --in-flight "$inflight" --secs "$SECS"; done
    done
  done
done
for every in 1 10 100; do
  for c in $(clients); do bench "$c" consume --size 12 --ack-every "$every" --messages "$MSGS" --prefetch 1000; done
done
for n in 1 32 1 32 1 32; do
  bench warren dispatch --concurrency $n --handler-ms 0 --messages $((MSGS * 4)) --secs "$SECS"
done
for n in 1 8 32 128; do
  bench warren dispatch --concurrency $n --handler-ms 5 --messages $((n * 250 * SECS)) --secs "$SECS"
done
bench warren memory --size 1000 --secs 30

python3 bench/client_summary.py "$TSV"
