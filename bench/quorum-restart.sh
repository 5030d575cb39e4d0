#!/usr/bin/env bash
# Restart of a node holding many quorum queues: QUEUES queues (default
# 1,000) holding PER messages each (default 1,000: one million), SIZE
# bytes each (default 100), filled by warren-perf with confirms; then the
# node is killed with SIGKILL and started again. Reported: the time from
# the start until it listens, and until it serves (every queue's messages
# counted again by the API, and a basic.get answered from the last
# queue). Also the node's RSS full, and after the restart. The issue's
# target: serving within 10 s. Single node, loopback only; its data is
# removed at the end.
#
#   bash bench/quorum-restart.sh
#   QUEUES=100 PER=1000 bash bench/quorum-restart.sh
#   KEEP=1 bash bench/quorum-restart.sh   # leave the data directory
set -euo pipefail
cd "$(dirname "$0")/.."
QUEUES=${QUEUES:-1000}
PER=${PER:-1000}
SIZE=${SIZE:-100}
OUT=bench/out/quorum-restart
PORT=5684
HTTP=15684
mkdir -p "$OUT"
cargo build --release -p warren-server -p warren-perf
DATA="$OUT/data"
rm -rf "$DATA"
start() {
  ./target/release/warren --amqp-listen 127.0.0.1:$PORT --stream-listen none --http-listen 127.0.0.1:$HTTP \
    --prometheus-listen none --data-dir "$DATA" > "$OUT/node-$1.log" 2>&1 &
  PID=$!
}
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$DATA"' EXIT
start 1
until grep -q "listener on" "$OUT/node-1.log"; do sleep 0.05; done
total() {
  curl -sf -u guest:guest "http://127.0.0.1:$HTTP/api/queues?columns=name,messages" |
    python3 -c 'import json,sys; q=json.load(sys.stdin); print(len(q), sum(x.get("messages") or 0 for x in q))'
}
# check WHEN: fail unless every queue holds PER messages, naming some that do not.
check() {
  [ "$(total)" = "$want" ] && return 0
  echo "FAILED $1: $(total) (queues, messages), not $want"
  curl -sf -u guest:guest "http://127.0.0.1:$HTTP/api/queues?columns=name,messages" |
    python3 -c "import json,sys; q=json.load(sys.stdin); print([(x['name'], x.get('messages')) for x in q if x.get('messages') != $PER][:20])"
  exit 1
}
want="$QUEUES $((QUEUES * PER))"
echo "== filling $QUEUES quorum queues with $PER messages of $SIZE B each"
timeout 1200 ./target/release/warren-perf --uri "amqp://guest:guest@127.0.0.1:$PORT" -x "$QUEUES" -y 0 \
  --queues "$QUEUES" -u 'qr-%d' --queue-type quorum --persistent -s "$SIZE" -C "$PER" -c 100 --quiet \
  > "$OUT/fill.txt" 2>&1
tail -3 "$OUT/fill.txt"
for t in $(seq 1 60); do
  [ "$(total)" = "$want" ] && break
  sleep 1
done
check "after the fill"
echo "before: $(total) (queues, messages); RSS $(( $(ps -o rss= -p $PID) / 1024 )) MiB; $(du -sh "$DATA/quorum" | cut -f1) in DATA_DIR/quorum"
kill -9 $PID
wait $PID 2>/dev/null || true
sync
T0=$(date +%s.%N)
start 2
until grep -q "listener on" "$OUT/node-2.log"; do sleep 0.01; done
T1=$(date +%s.%N)
for t in $(seq 1 1200); do
  [ "$(total 2>/dev/null)" = "$want" ] && break
  sleep 0.05
done
check "after the restart"
python3 - "$PORT" "qr-$((QUEUES - 1))" <<'PY'
import sys, pika
c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(sys.argv[1])))
ch = c.channel()
m = ch.basic_get(sys.argv[2], auto_ack=False)
assert m[0] is not None, "no message"
c.close()
PY
T2=$(date +%s.%N)
echo "after: $(total) (queues, messages); RSS $(( $(ps -o rss= -p $PID) / 1024 )) MiB"
python3 -c "print(f'restart: listening after {$T1-$T0:.2f} s, serving every queue after {$T2-$T0:.2f} s (target: 10 s)')"
