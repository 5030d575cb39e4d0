#!/usr/bin/env bash
# warren-client's recovery under kill -9, the long version: the test
# crates/warren-client/tests/recovery.rs with ROUNDS kills of a `warren`
# process (100 by default; `cargo test` runs 3), once failing unconfirmed
# publishes to the application and once publishing them again. It prints
# the acked, reported-unconfirmed, lost and redelivered counts of each.
#
#   tests/client/recovery-soak.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-100}
cargo build -q -p warren-server --bin warren
WARREN_CLIENT_KILL_ROUNDS=$ROUNDS timeout $((ROUNDS * 30 + 300)) \
  cargo test -q -p warren-client --test recovery -- --nocapture 2>&1 | grep -E "rounds|test result|panicked"
