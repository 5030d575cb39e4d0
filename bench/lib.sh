# Shared by the bench scripts (sourced, from the repository root): where
# output goes, PerfTest from Maven Central, and the two brokers on
# loopback: Warren (release build, fresh data directory) and the RabbitMQ
# 3.10 anchor. Both are stopped when the sourcing script exits.
OUT=bench/out
mkdir -p "$OUT"
ANCHOR=../shared/anchors/rabbitmq-node.sh
WARREN_PORT=5680
WARREN_STREAM_PORT=5554
RABBIT_PORT=5673
WARREN_PID=
EXTRA_CLEANUP=:

fetch_perftest() {
  if [ ! -d "$OUT/lib" ]; then
    cp ../shared/anchors/perftest-pom.xml "$OUT/pom.xml"
    mvn -q -f "$OUT/pom.xml" dependency:copy-dependencies -DoutputDirectory=lib
  fi
}

cleanup() {
  $EXTRA_CLEANUP
  [ -n "$WARREN_PID" ] && kill "$WARREN_PID" 2>/dev/null || true
  $ANCHOR stop anchor >/dev/null 2>&1 || true
  # Runs write gigabytes: leave none of it behind.
  [ -n "$WARREN_PID" ] && wait "$WARREN_PID" 2>/dev/null || true
  rm -rf "$OUT/warren-data"
}

# Start both brokers; sets WARREN_PID and RABBIT_PID.
start_brokers() {
  cargo build --release -p warren-server
  rm -rf "$OUT/warren-data"
  ./target/release/warren --amqp-listen 127.0.0.1:$WARREN_PORT --stream-listen 127.0.0.1:$WARREN_STREAM_PORT --http-listen 127.0.0.1:15680 --prometheus-listen 127.0.0.1:15690 --data-dir "$OUT/warren-data" > "$OUT/warren.log" 2>&1 &
  WARREN_PID=$!
  trap cleanup EXIT
  $ANCHOR start anchor $RABBIT_PORT 5553 15673 25673
  # The node's Erlang VM (its command line has -home /tmp/rmq-anchor).
  RABBIT_PID=$(pgrep -f "beam.smp.*-home /tmp/rmq-anchor" | head -1 || true)
  [ -n "$RABBIT_PID" ] || { echo "cannot find the RabbitMQ node's process" >&2; exit 1; }
  sleep 2
}

# The anchor keeps its streams after it stops: delete the named ones
# (use as EXTRA_CLEANUP="drop_anchor_queues NAME...").
drop_anchor_queues() {
  for q in "$@"; do
    $ANCHOR ctl anchor $RABBIT_PORT 5553 15673 25673 delete_queue "$q" >/dev/null 2>&1 || true
  done
}

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
