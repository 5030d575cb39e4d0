#!/usr/bin/env bash
# The publishing gap of a quorum queue when its leader's node fails,
# 3-node Warren beside 3-node RabbitMQ 3.10 in one run. A quorum queue
# declared through node 1 (so node 1 leads, on both); one publisher
# (bench/quorum_gap.py: pika, confirms, 1 KB persistent, one in flight)
# on node 2; after 3 s node 1 is paused with SIGSTOP (silence, no reset:
# as a blackhole partition looks to its peers), or killed with SIGKILL;
# the longest time without a confirm after that. Targets (issue 17):
# after SIGKILL at most RabbitMQ's, after a blackhole at most 5 s.
# Loopback only; both clusters are stopped and their data removed at
# the end.
#
#   bash bench/quorum-failover.sh           # AFTER=20 seconds after each fault
set -euo pipefail
cd "$(dirname "$0")/.."
AFTER=${AFTER:-20}
OUT=bench/out/quorum-failover
source bench/cluster_lib.sh
start_clusters
python3 -c "import pika" 2>/dev/null || pip install -q pika

declare_qq() {
  curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
    -d '{"durable":true,"arguments":{"x-queue-type":"quorum"}}' "$1/api/queues/%2F/$2" >/dev/null
  sleep 2
}
gap() { timeout $((AFTER + 90)) python3 bench/quorum_gap.py "$@" 3 "$AFTER" || echo "gap: run failed"; }

WPID=${PIDS[0]}
RPID=$($RMQ pid 1)
echo "== publishing gap, publisher on node 2, quorum queue led by node 1"

declare_qq http://127.0.0.1:15781 gap-stop
W_STOP=$(gap 5782 gap-stop "kill -STOP $WPID")
kill -CONT "$WPID"
declare_qq http://127.0.0.1:15701 gap-stop
R_STOP=$(gap 5702 gap-stop "kill -STOP $RPID")
kill -CONT "$RPID"
echo "SIGSTOP of the leader's node: Warren: $W_STOP"
echo "SIGSTOP of the leader's node: RabbitMQ: $R_STOP"
sleep 5

declare_qq http://127.0.0.1:15781 gap-kill
W_KILL=$(gap 5782 gap-kill "kill -9 $WPID")
declare_qq http://127.0.0.1:15701 gap-kill
R_KILL=$(gap 5702 gap-kill "kill -9 $RPID")
echo "SIGKILL of the leader's node: Warren: $W_KILL"
echo "SIGKILL of the leader's node: RabbitMQ: $R_KILL"
