#!/usr/bin/env bash
# A replica catching up from the leader's files (issue 35): three Warren
# nodes (bench/cluster_lib.sh), warren-client publishing 1 KB messages to
# a fresh stream led by node 1 for 4 s, node 3 paused with SIGSTOP from
# 0.7 s in to the end (node 2 keeps the majority); then node 3 resumes
# and the leader sends it what it missed, far beyond its recent chunks in
# memory, so read back from the segment files. Printed per round: what
# was published, how long node 3 took to hold as much as node 1, and the
# leader's CPU time and minor page faults over that time.
#
#   bench/stream-catchup.sh [ROUNDS]                 (default 3)
#   BINS="/path/a /path/b" bench/stream-catchup.sh 3  (builds side by side,
#                                                     alternating)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
OUT=bench/out/stream-catchup
WARREN_ONLY=1
cargo build -q --release -p warren-server
cargo build -q --release -p client-bench
source bench/cluster_lib.sh
URI="rabbitmq-stream://guest:guest@127.0.0.1:5791/%2f"
stat_of() { awk -v f="$2" '{print $f}' "/proc/$1/stat"; }
for r in $(seq "$ROUNDS"); do
  for bin in ${BINS:-./target/release/warren}; do
    PIDS=()
    WARREN_BIN=$bin start_clusters > "$OUT/start.log" 2>&1
    leader=${PIDS[0]} paused=${PIDS[2]}
    timeout 60 ./target/release/client-bench "$URI" warren stream-publish --size 1000 \
      --in-flight 10000 --secs 4 > "$OUT/publish.out" &
    cb=$!
    sleep 0.7
    kill -STOP "$paused"
    wait "$cb"
    sync
    sleep 1
    cpu0=$(( $(stat_of "$leader" 14) + $(stat_of "$leader" 15) ))
    flt0=$(stat_of "$leader" 10)
    t0=$(date +%s.%N)
    kill -CONT "$paused"
    caught=no
    for _ in $(seq 600); do
      a=$(du -sb "$OUT/data1/streams" | cut -f1)
      c=$(du -sb "$OUT/data3/streams" | cut -f1)
      if [ $((a - c)) -lt 2000000 ]; then caught=yes; break; fi
      sleep 0.1
    done
    t1=$(date +%s.%N)
    cpu1=$(( $(stat_of "$leader" 14) + $(stat_of "$leader" 15) ))
    flt1=$(stat_of "$leader" 10)
    msgs=$(grep -o 'msgs=[0-9]*' "$OUT/publish.out" | cut -d= -f2)
    printf '%s\tpublished=%s\tcaught_up=%s\tseconds=%s\tleader_cpu_s=%s\tleader_faults=%s\n' \
      "$bin" "$msgs" "$caught" "$(python3 -c "print(f'{$t1 - $t0:.2f}')")" \
      "$(python3 -c "print(f'{($cpu1 - $cpu0) / $(getconf CLK_TCK):.2f}')")" "$((flt1 - flt0))"
    if [ "$caught" = no ]; then tail -n 5 "$OUT/node1.log" "$OUT/node3.log"; fi
    cleanup
  done
done
