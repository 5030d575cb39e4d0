#!/usr/bin/env bash
# The measurement behind Warren's choice of Raft library (ARCHITECTURE.md,
# "Clustering"): the same workload on raft-rs 0.7 and openraft 0.9, one
# after the other. 3 nodes in one process, G groups with a member on
# each node, one log file per node, fdatasync before anything is reported
# durable; phases: elect, idle 10 s, load 10 s (8 proposals of 1 KiB in
# flight per group). Everything stays in the process; the log files are in
# /tmp/raftcmp and are removed after each run.
#   bench/raft-choice.sh [G]   (default 1000; output in bench/out)
set -euo pipefail
cd "$(dirname "$0")"
G=${1:-1000}
mkdir -p out /tmp/raftcmp
for h in raftrs openraft; do
  (cd raft-choice/$h && CARGO_TARGET_DIR=../../out/raft-choice-$h cargo build --release -q)
done
echo "== raft-rs, G=$G"
timeout 120 out/raft-choice-raftrs/release/raftrs-groups "$G" | tee out/raft-choice-raftrs.txt
echo "== openraft, G=$G (an fdatasync per append call)"
timeout 120 out/raft-choice-openraft/release/openraft-groups "$G" | tee out/raft-choice-openraft.txt
echo "== openraft, G=$G, --group-commit (one fdatasync for every group's pending appends)"
timeout 120 out/raft-choice-openraft/release/openraft-groups "$G" --group-commit | tee out/raft-choice-openraft-gc.txt
