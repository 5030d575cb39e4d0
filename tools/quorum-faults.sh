#!/usr/bin/env bash
# The quorum queue fault run at length: three `warren` processes, a
# quorum queue, a publisher (confirms, unique ids) and a consumer (acks)
# reconnecting to live nodes, while random nodes are killed with SIGKILL
# and restarted KILLS times, paused with SIGSTOP for 3 s PAUSES times and
# cut off from the others (a blackholing proxy on each link) for 5 s
# PARTITIONS times, a publisher on the cut-off node checked never to be
# confirmed; then the checker's one line: confirmed by a minority (must
# be 0), confirmed, nacked, received, lost (must be 0) and duplicates.
# CI runs the same test with 3 kills, 1 pause and 2 partitions.
#   tools/quorum-faults.sh [KILLS] [PAUSES] [PARTITIONS]   # default 100, 20, 100
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-100}
PAUSES=${2:-20}
PARTITIONS=${3:-100}
cargo test -p warren-server --test it --no-run -q
QUORUM_FAULT_KILLS=$KILLS QUORUM_FAULT_PAUSES=$PAUSES QUORUM_FAULT_PARTITIONS=$PARTITIONS \
  timeout $((KILLS * 30 + PAUSES * 30 + PARTITIONS * 30 + 600)) \
  cargo test -q -p warren-server --test it quorum_faults -- --nocapture 2>&1 \
  | grep -E "quorum faults:|panicked|test result"
