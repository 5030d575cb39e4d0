#!/usr/bin/env bash
# The quorum queue fault run at length: three `warren` processes, a
# quorum queue, a publisher (confirms, unique ids) and a consumer (acks)
# reconnecting to live nodes, while random nodes are killed with SIGKILL
# and restarted KILLS times and paused with SIGSTOP for 3 s PAUSES times;
# then the checker's one line: confirmed, nacked, received, lost (must be
# 0) and duplicates. CI runs the same test with 3 kills and 1 pause.
#   tools/quorum-faults.sh [KILLS] [PAUSES]      # default 100 and 20
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-100}
PAUSES=${2:-20}
cargo test -p warren-server --test it --no-run -q
QUORUM_FAULT_KILLS=$KILLS QUORUM_FAULT_PAUSES=$PAUSES \
  timeout $((KILLS * 30 + PAUSES * 30 + 600)) \
  cargo test -q -p warren-server --test it quorum_faults -- --nocapture 2>&1 \
  | grep -E "quorum faults:|panicked|test result"
