#!/usr/bin/env bash
# A 3-node Warren cluster beside a 3-node RabbitMQ 3.10 cluster
# (../shared/anchors/rabbitmq-cluster.sh), the same workloads through
# node 1 of each, one after the other in one run:
#   D: N durable queue.declare one by one on one channel, each awaiting
#      its declare-ok, then N queue.delete (bench/durable_declares.py);
#   I: a definitions import of Q queues, Q/10 exchanges and B bindings
#      through node 1's HTTP API, and the time until node 3 lists them all
#      (bench/cluster_import.py);
#   X: messages across nodes: a durable queue on node 1, PerfTest
#      publishing 1 KB persistent messages with confirms (at most 1000
#      outstanding) through node 2 and consuming with acks (prefetch 1000,
#      an ack per 100) through node 3, for SECS seconds; the consumer's
#      rate.
# Loopback only; both clusters are stopped and their data removed at the
# end.
#
#   bash bench/cluster.sh            # N=10000 Q=1000 B=10000 SECS=30
#   N=2000 Q=200 B=2000 bash bench/cluster.sh
#   ONLY=X SECS=20 bash bench/cluster.sh   # one workload (D, I or X)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
Q=${Q:-1000}
B=${B:-10000}
SECS=${SECS:-30}
ONLY=${ONLY:-}
OUT=bench/out/cluster
source bench/cluster_lib.sh
start_clusters

last() { echo "$1" | grep "^$2 " | awk '{print $NF}' | cut -d: -f2; }

want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

if want D; then
echo "== D: $N durable declares, then deletes, through node 1"
W=$(timeout 900 python3 bench/durable_declares.py 127.0.0.1 5781 "$N"); echo "Warren: $W"
R=$(timeout 900 python3 bench/durable_declares.py 127.0.0.1 5701 "$N"); echo "RabbitMQ: $R"
for op in declare delete; do
  w=$(last "$W" $op); r=$(last "$R" $op)
  echo "D $N sequential durable ${op}s, 3 nodes: Warren ${w} s ($(python3 -c "print(int($N/$w))")/s), RabbitMQ ${r} s ($(python3 -c "print(int($N/$r))")/s), RabbitMQ/Warren $(ratio "$r" "$w")x"
done

fi

if want I; then
echo "== I: import $Q queues, $((Q / 10)) exchanges, $B bindings through node 1"
WI=$(timeout 900 python3 bench/cluster_import.py http://127.0.0.1:15781 http://127.0.0.1:15783 "$Q" "$B"); echo "Warren: $WI"
RI=$(timeout 900 python3 bench/cluster_import.py http://127.0.0.1:15701 http://127.0.0.1:15703 "$Q" "$B"); echo "RabbitMQ: $RI"
wa=$(echo "$WI" | sed -E 's/.*answered ([0-9.]+) s.*/\1/'); ra=$(echo "$RI" | sed -E 's/.*answered ([0-9.]+) s.*/\1/')
ws=$(echo "$WI" | sed -E 's/.*node ([0-9.]+) s$/\1/'); rs=$(echo "$RI" | sed -E 's/.*node ([0-9.]+) s$/\1/')
echo "I import, answered: Warren ${wa} s, RabbitMQ ${ra} s, RabbitMQ/Warren $(ratio "$ra" "$wa")x"
echo "I import, all on node 3: Warren ${ws} s, RabbitMQ ${rs} s, RabbitMQ/Warren $(ratio "$rs" "$ws")x"
fi

if want X; then
fetch_perftest
perftest() { timeout $((SECS + 60)) java -cp "bench/out/lib/*" com.rabbitmq.perf.PerfTest "$@"; }
rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
cross() { # name http1 amqp2 amqp3
  local name=$1 http=$2 p2=$3 p3=$4
  curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
    -d '{"durable":true}' "$http/api/queues/%2F/cross" >/dev/null
  perftest -h "amqp://guest:guest@127.0.0.1:$p3" -x 0 -y 1 -u cross -p -q 1000 -A 100 \
    -z "$SECS" > "$OUT/X-$name-consumer.txt" 2>&1 &
  local consumer=$!
  sleep 1
  perftest -h "amqp://guest:guest@127.0.0.1:$p2" -x 1 -y 0 -u cross -p -s 1000 -c 1000 \
    -f persistent -z "$SECS" > "$OUT/X-$name-producer.txt" 2>&1 || true
  wait "$consumer" || true
  curl -sf -u guest:guest -X DELETE "$http/api/queues/%2F/cross" >/dev/null || true
  X[$name-sent]=$(rate sending "$OUT/X-$name-producer.txt")
  X[$name-got]=$(rate receiving "$OUT/X-$name-consumer.txt")
  echo "$name: sent ${X[$name-sent]} msg/s, received ${X[$name-got]} msg/s"
}
declare -A X
echo "== X: 1 KB persistent, confirms and acks, queue on node 1, publish via node 2, consume via node 3, ${SECS}s"
cross warren http://127.0.0.1:15781 5782 5783
cross rabbitmq http://127.0.0.1:15701 5702 5703
echo "X cross-node 1 KB confirms/acks, received msg/s: Warren ${X[warren-got]}, RabbitMQ ${X[rabbitmq-got]}, Warren/RabbitMQ $(ratio "${X[warren-got]}" "${X[rabbitmq-got]}")x"
fi
