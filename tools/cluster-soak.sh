#!/usr/bin/env bash
# The cluster fault tests, over and over: three nodes in one process
# (stops, a wrong secret, a blackholing proxy, the metadata log under a
# lost majority) and three `warren` processes (kill -9 and SIGSTOP during
# streams of changes, checked for nothing answered being lost). CI runs
# them once; this runs them ROUNDS times (default 20), one test at a
# time, and stops at the first failure, leaving its output in
# target/cluster-soak.log.
#   tools/cluster-soak.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
LOG=target/cluster-soak.log
cargo test -p warren-server --test it --no-run -q
for r in $(seq 1 "$ROUNDS"); do
  if ! timeout 600 cargo test -q -p warren-server --test it cluster -- --test-threads=1 > "$LOG" 2>&1; then
    echo "round $r of $ROUNDS failed; see $LOG" >&2
    exit 1
  fi
  echo "round $r of $ROUNDS: $(grep -o '[0-9]* passed' "$LOG" | tail -1)"
done
