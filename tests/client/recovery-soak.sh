#!/usr/bin/env bash
# warren-client's recovery under kill -9, the long version: the test
# crates/warren-client/tests/recovery.rs with ROUNDS kills of a `warren`
# process (100 by default; `cargo test` runs 3), once failing unconfirmed
# publishes to the application and once publishing them again. It prints
# the acked, reported-unconfirmed, lost and redelivered counts of each.
#
# Then a three-node cluster (tests/cluster_recovery.rs): the node the
# client is on is killed CLUSTER_ROUNDS times (50 by default; `cargo
# test` runs 2) under a publisher and a consumer on a quorum queue.
#
#   tests/client/recovery-soak.sh [ROUNDS] [CLUSTER_ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-100}
CLUSTER_ROUNDS=${2:-50}
cargo build -q -p warren-server --bin warren
WARREN_CLIENT_KILL_ROUNDS=$ROUNDS timeout $((ROUNDS * 30 + 300)) \
  cargo test -q -p warren-client --test recovery -- --nocapture 2>&1 | grep -E "rounds|test result|panicked"
WARREN_CLIENT_CLUSTER_ROUNDS=$CLUSTER_ROUNDS timeout $((CLUSTER_ROUNDS * 30 + 300)) \
  cargo test -q -p warren-client --test cluster_recovery -- --nocapture 2>&1 | grep -E "rounds|test result|panicked"
