#!/usr/bin/env bash
# A 3-node Warren cluster beside a 3-node RabbitMQ 3.10 cluster
# (../shared/anchors/rabbitmq-cluster.sh), the same workloads through
# node 1 of each, one after the other in one run:
#   D: N durable queue.declare one by one on one channel, each awaiting
#      its declare-ok, then N queue.delete (bench/durable_declares.py);
#   I: a definitions import of Q queues, Q/10 exchanges and B bindings
#      through node 1's HTTP API, and the time until node 3 lists them all
#      (bench/cluster_import.py).
# Loopback only; both clusters are stopped and their data removed at the
# end.
#
#   bash bench/cluster.sh            # N=10000 Q=1000 B=10000
#   N=2000 Q=200 B=2000 bash bench/cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
Q=${Q:-1000}
B=${B:-10000}
OUT=bench/out/cluster
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

cargo build --release -p warren-server
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
stream_listen = "none"
prometheus_listen = "none"

[cluster]
name = "bench"
secret = "bench-secret"
listen = "127.0.0.1:$((25780 + i))"
peers = [ $peers]
TOML
  ./target/release/warren --config "$OUT/node$i.toml" > "$OUT/node$i.log" 2>&1 &
  PIDS+=($!)
done
$RMQ start
# Every Warren node up, with a metadata leader (a change commits).
for t in $(seq 1 100); do
  if curl -sf -u guest:guest -X PUT "http://127.0.0.1:15781/api/vhosts/bench-ready" >/dev/null; then break; fi
  sleep 0.2
done
curl -sf -u guest:guest -X DELETE "http://127.0.0.1:15781/api/vhosts/bench-ready" >/dev/null
sleep 1

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
last() { echo "$1" | grep "^$2 " | awk '{print $NF}' | cut -d: -f2; }

echo "== D: $N durable declares, then deletes, through node 1"
W=$(timeout 900 python3 bench/durable_declares.py 127.0.0.1 5781 "$N"); echo "Warren: $W"
R=$(timeout 900 python3 bench/durable_declares.py 127.0.0.1 5701 "$N"); echo "RabbitMQ: $R"
for op in declare delete; do
  w=$(last "$W" $op); r=$(last "$R" $op)
  echo "D $N sequential durable ${op}s, 3 nodes: Warren ${w} s ($(python3 -c "print(int($N/$w))")/s), RabbitMQ ${r} s ($(python3 -c "print(int($N/$r))")/s), RabbitMQ/Warren $(ratio "$r" "$w")x"
done

echo "== I: import $Q queues, $((Q / 10)) exchanges, $B bindings through node 1"
WI=$(timeout 900 python3 bench/cluster_import.py http://127.0.0.1:15781 http://127.0.0.1:15783 "$Q" "$B"); echo "Warren: $WI"
RI=$(timeout 900 python3 bench/cluster_import.py http://127.0.0.1:15701 http://127.0.0.1:15703 "$Q" "$B"); echo "RabbitMQ: $RI"
wa=$(echo "$WI" | sed -E 's/.*answered ([0-9.]+) s.*/\1/'); ra=$(echo "$RI" | sed -E 's/.*answered ([0-9.]+) s.*/\1/')
ws=$(echo "$WI" | sed -E 's/.*node ([0-9.]+) s$/\1/'); rs=$(echo "$RI" | sed -E 's/.*node ([0-9.]+) s$/\1/')
echo "I import, answered: Warren ${wa} s, RabbitMQ ${ra} s, RabbitMQ/Warren $(ratio "$ra" "$wa")x"
echo "I import, all on node 3: Warren ${ws} s, RabbitMQ ${rs} s, RabbitMQ/Warren $(ratio "$rs" "$ws")x"
