# Shared by the 3-node bench scripts (sourced, from the repository root):
# three Warren nodes (release build, fresh data directories; AMQP on
# 5781-5783, streams on 5791-5793, HTTP on 15781-15783) beside a 3-node
# RabbitMQ 3.10 cluster (../shared/anchors/rabbitmq-cluster.sh: AMQP
# 5701-5703, streams 5711-5713, HTTP 15701-15703). Both are stopped, and their data removed, when the
# sourcing script exits. The caller sets OUT (refused when empty: the
# cleanup removes "$OUT"/data*).
: "${OUT:?bench/cluster_lib.sh needs OUT, the directory for the node files}"
RMQ=../shared/anchors/rabbitmq-cluster.sh
mkdir -p "$OUT"
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  $RMQ stop >/dev/null 2>&1 || true
  rm -rf "$OUT"/data* /tmp/rmq-c1 /tmp/rmq-c2 /tmp/rmq-c3
}
trap cleanup EXIT

# Start both clusters (WARREN_ONLY=1: Warren's alone; WARREN_BIN: another
# build of warren, used as it is); returns once Warren's metadata group
# commits.
start_clusters() {
  [ -n "${WARREN_BIN:-}" ] || cargo build --release -p warren-server
  rm -rf "$OUT"/data* /tmp/rmq-c1 /tmp/rmq-c2 /tmp/rmq-c3
  for i in 1 2 3; do
    peers=""
    for j in 1 2 3; do
      [ "$j" = "$i" ] && continue
      peers="$peers{ node = \"warren@b$j\", address = \"127.0.0.1:$((25780 + j))\" }, "
    done
    cat > "$OUT/node$i.toml" <<TOML
node_name = "warren@b$i"
data_dir = "$OUT/data$i"
amqp_listen = "127.0.0.1:$((5780 + i))"
http_listen = "127.0.0.1:$((15780 + i))"
stream_listen = "127.0.0.1:$((5790 + i))"
prometheus_listen = "none"

[cluster]
name = "bench"
secret = "bench-secret"
listen = "127.0.0.1:$((25780 + i))"
peers = [ $peers]
TOML
    ${WARREN_BIN:-./target/release/warren} --config "$OUT/node$i.toml" > "$OUT/node$i.log" 2>&1 &
    PIDS+=($!)
  done
  [ "${WARREN_ONLY:-0}" = 1 ] || $RMQ start
  for t in $(seq 1 100); do
    if curl -sf -u guest:guest -X PUT "http://127.0.0.1:15781/api/vhosts/bench-ready" >/dev/null; then break; fi
    sleep 0.2
  done
  curl -sf -u guest:guest -X DELETE "http://127.0.0.1:15781/api/vhosts/bench-ready" >/dev/null
  sleep 1
}

# Warren's three nodes alone for a stream client point run through
# client-bench (bench/client-stream-ab.sh, bench/client-stream-disk.sh):
# the brokers' PIDs exported for client-bench's CPU figures, and
# STREAM_URI, node 1's stream listener.
start_stream_nodes() {
  WARREN_ONLY=1 start_clusters > "$OUT/start.log" 2>&1
  export CLIENT_BENCH_BROKER_PIDS
  CLIENT_BENCH_BROKER_PIDS=$(IFS=,; echo "${PIDS[*]}")
  STREAM_URI="rabbitmq-stream://guest:guest@127.0.0.1:5791/%2f"
}

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

# PerfTest from Maven Central, as bench/run.sh uses it.
fetch_perftest() {
  mkdir -p bench/out
  if [ ! -d bench/out/lib ]; then
    cp ../shared/anchors/perftest-pom.xml bench/out/pom.xml
    mvn -q -f bench/out/pom.xml dependency:copy-dependencies -DoutputDirectory=lib
  fi
}
