#!/usr/bin/env bash
# 1,000 idle quorum queues on 3 nodes, Warren beside RabbitMQ 3.10 in one
# run: N quorum queues declared through node 1 (every node a member),
# then, once they settle, each node's CPU over SECS seconds (user+system
# from /proc, as a share of the whole machine) and its RSS growth per
# replica (RSS after the declarations less RSS before, over N). Targets
# (issue 17): at most 5 % of the machine, at most 64 KiB per replica.
# Loopback only; both clusters are stopped and their data removed at
# the end.
#
#   bash bench/quorum-idle.sh               # N=1000 SECS=30
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
SECS=${SECS:-30}
SETTLE=${SETTLE:-10}
OUT=bench/out/quorum-idle
source bench/cluster_lib.sh
start_clusters

rss_kib() { ps -o rss= -p "$1" | tr -d ' '; }
# CPU ticks (user + system) of a process.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
CORES=$(nproc)

# declare HTTP: N quorum queues through node 1's API, 8 at a time.
declare_all() {
  seq 1 "$N" | xargs -P 8 -I{} curl -sf -u guest:guest -X PUT -H 'content-type: application/json' \
    -d '{"durable":true,"arguments":{"x-queue-type":"quorum"}}' "$1/api/queues/%2F/idle-{}" >/dev/null
}

# measure NAME PID...: RSS before is in BEFORE[pid]; CPU over SECS.
measure() {
  local name=$1; shift
  local t0=() p total=0 rss=0 i=0
  for p in "$@"; do t0+=("$(ticks "$p")"); done
  sleep "$SECS"
  for p in "$@"; do
    total=$((total + $(ticks "$p") - t0[i]))
    local grown=$(( $(rss_kib "$p") - BEFORE[$p] ))
    [ "$grown" -gt "$rss" ] && rss=$grown
    i=$((i + 1))
  done
  CPU[$name]=$(python3 -c "print(f'{100 * $total / $HZ / $SECS / $CORES:.2f}')")
  PER[$name]=$(python3 -c "print(f'{$rss / $N:.1f}')")
}

declare -A BEFORE CPU PER
RPIDS=()
for i in 1 2 3; do RPIDS+=("$($RMQ pid $i)"); done
for p in "${PIDS[@]}" "${RPIDS[@]}"; do BEFORE[$p]=$(rss_kib "$p"); done

echo "== $N idle quorum queues on 3 nodes; CPU over ${SECS}s after ${SETTLE}s to settle"
start=$(date +%s.%N)
declare_all http://127.0.0.1:15781
echo "Warren: $N declared in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
start=$(date +%s.%N)
declare_all http://127.0.0.1:15701
echo "RabbitMQ: $N declared in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
sleep "$SETTLE"
# One side at a time, so neither's CPU is measured while the other's
# burst shares the cores.
measure warren "${PIDS[@]}"
measure rabbitmq "${RPIDS[@]}"
echo "CPU, 3 nodes together, share of the machine ($CORES cores): Warren ${CPU[warren]} %, RabbitMQ ${CPU[rabbitmq]} %"
echo "RSS growth per replica (largest node): Warren ${PER[warren]} KiB, RabbitMQ ${PER[rabbitmq]} KiB"
