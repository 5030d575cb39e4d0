#!/usr/bin/env bash
# Quorum queues, 3-node Warren beside 3-node RabbitMQ 3.10 in one run:
# seed 003's sweep over the publisher's in-flight limit. For each limit,
# a fresh quorum queue declared through node 1 (so it leads there, as
# client-local places it on both), PerfTest publishing 1 KB persistent
# messages with confirms (at most INFLIGHT outstanding) and consuming
# with acks (prefetch 1000, a multiple ack every 100), both through node
# 1, for SECS seconds; the consumer's rate. Then RSS of each node.
# Loopback only; both clusters are stopped and their data removed at the
# end.
#
# TOOL=warren-perf runs the same workloads with warren-perf (this
# project's load tool, PerfTest's flags) instead of PerfTest.
#
#   bash bench/quorum.sh                    # SECS=20, 1 5 20 200 1000 10000
#   SECS=10 SWEEP="20 1000" bash bench/quorum.sh
#   TOOL=warren-perf bash bench/quorum.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-20}
SWEEP=${SWEEP:-1 5 20 200 1000 10000}
TOOL=${TOOL:-perftest}
OUT=bench/out/quorum
source bench/cluster_lib.sh
start_clusters
case $TOOL in
  perftest)
    fetch_perftest
    perftest() { timeout $((SECS + 60)) java -cp "bench/out/lib/*" com.rabbitmq.perf.PerfTest "$@"; }
    rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
    ;;
  warren-perf)
    cargo build --release -q -p warren-perf
    # The same flags; the consumer's rate from its JSON (received_rate).
    perftest() {
      local f a args=()
      f=$(mktemp)
      # PerfTest's -p (the queue exists already) is warren-perf's way anyway.
      for a in "$@"; do [ "$a" = -p ] || args+=("$a"); done
      timeout $((SECS + 60)) ./target/release/warren-perf --quiet --queue-type quorum --json "$f" "${args[@]}" || true
      python3 -c "import json,sys;print('receiving rate avg: %d msg/s' % json.load(open(sys.argv[1]))['stages'][0]['received_rate'])" "$f" 2>/dev/null || true
      rm -f "$f"
    }
    rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
    ;;
  *) echo "TOOL is perftest or warren-perf" >&2; exit 64 ;;
esac
rss_kib() { ps -o rss= -p "$1" | tr -d ' '; }

# run NAME HTTP AMQP INFLIGHT: one point of the sweep on one side.
run() {
  local name=$1 http=$2 port=$3 inflight=$4 q="qq-$4"
  curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
    -d '{"durable":true,"arguments":{"x-queue-type":"quorum"}}' "$http/api/queues/%2F/$q" >/dev/null
  perftest -h "amqp://guest:guest@127.0.0.1:$port" -x 0 -y 1 -u "$q" -p -q 1000 -A 100 \
    -z "$SECS" > "$OUT/$name-$inflight-consumer.txt" 2>&1 &
  local consumer=$!
  sleep 1
  perftest -h "amqp://guest:guest@127.0.0.1:$port" -x 1 -y 0 -u "$q" -p -s 1000 -c "$inflight" \
    -f persistent -z "$SECS" > "$OUT/$name-$inflight-producer.txt" 2>&1 || true
  wait "$consumer" || true
  curl -sf -u guest:guest -X DELETE "$http/api/queues/%2F/$q" >/dev/null || true
  R[$name-$inflight]=$(rate receiving "$OUT/$name-$inflight-consumer.txt")
}

declare -A R
echo "== quorum queue, 1 KB persistent, confirms and acks, through node 1, ${SECS}s per point, with $TOOL"
for c in $SWEEP; do
  run warren http://127.0.0.1:15781 5781 "$c"
  if [ "$c" = 1000 ]; then
    W_RSS=$(for p in "${PIDS[@]}"; do rss_kib "$p"; done | sort -n | tail -1)
  fi
  run rabbitmq http://127.0.0.1:15701 5701 "$c"
  if [ "$c" = 1000 ]; then
    R_RSS=$(for i in 1 2 3; do rss_kib "$($RMQ pid $i)"; done | sort -n | tail -1)
  fi
  echo "in-flight $c: Warren ${R[warren-$c]} msg/s, RabbitMQ ${R[rabbitmq-$c]} msg/s, Warren/RabbitMQ $(ratio "${R[warren-$c]}" "${R[rabbitmq-$c]}")x"
done
if [ -n "${W_RSS:-}" ]; then
  echo "largest node RSS after the in-flight 1000 run: Warren $((W_RSS / 1024)) MiB, RabbitMQ $((R_RSS / 1024)) MiB"
fi
