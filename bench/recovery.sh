#!/usr/bin/env bash
# Recovery time of a durable queue holding N 1 KB persistent messages after
# a crash: Warren is filled by the real PerfTest (confirms in flight 1000),
# killed with SIGKILL, and started again; the time until it listens and its
# own "recovered" log line are reported, with the page cache dropped
# first when run as root. Loopback only.
#
#   bench/recovery.sh [N]   (default 1,000,000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
OUT=bench/out
PORT=5680
mkdir -p "$OUT"
if [ ! -d "$OUT/lib" ]; then
  cp ../shared/anchors/perftest-pom.xml "$OUT/pom.xml"
  mvn -q -f "$OUT/pom.xml" dependency:copy-dependencies -DoutputDirectory=lib
fi
cargo build --release -p warren-server
DATA="$OUT/recovery-data"
rm -rf "$DATA"
./target/release/warren --amqp-listen 127.0.0.1:$PORT --stream-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 --data-dir "$DATA" > "$OUT/recovery-1.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
sleep 1
timeout 1200 java -cp "$OUT/lib/*" com.rabbitmq.perf.PerfTest -h "amqp://guest:guest@127.0.0.1:$PORT" \
  -x 1 -y 0 -s 1000 -f persistent -c 1000 -C "$N" -u perf-recovery -ad false > "$OUT/recovery-fill.txt" 2>&1
grep "sending rate avg" "$OUT/recovery-fill.txt"
kill -9 $PID
wait $PID 2>/dev/null || true
echo "killed with $(du -sh "$DATA/queues" | cut -f1) in the store"
sync
# Cold cache, as after a real crash of the machine (needs root; skipped if not).
if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "page cache dropped"; else echo "page cache NOT dropped (not root)"; fi
START=$(date +%s.%N)
./target/release/warren --amqp-listen 127.0.0.1:$PORT --stream-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 --data-dir "$DATA" > "$OUT/recovery-2.log" 2>&1 &
PID=$!
until grep -q "listener on" "$OUT/recovery-2.log"; do sleep 0.01; done
END=$(date +%s.%N)
grep "recovered" "$OUT/recovery-2.log" | sed 's/^.*queue/queue/'
python3 -c "print(f'listening again {($END - $START):.2f} s after the restart')"
kill $PID
wait $PID 2>/dev/null || true
rm -rf "$DATA"
