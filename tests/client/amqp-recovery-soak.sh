#!/usr/bin/env bash
# warren-client's AMQP 1.0 recovery under kill -9, the long version: the
# test crates/warren-client/tests/amqp_connection_recovery.rs with ROUNDS kills of a
# `warren` process (100 by default; `cargo test` runs 3) under a
# publisher and three consumers (a queue, a stream, an exclusive queue).
# It prints the accepted, reported-lost-in-flight and redelivered counts.
#
#   tests/client/amqp-recovery-soak.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-100}
cargo build -q -p warren-server --bin warren
WARREN_CLIENT_AMQP_KILL_ROUNDS=$ROUNDS timeout $((ROUNDS * 30 + 300)) \
  cargo test -q -p warren-client --test amqp_connection_recovery -- --nocapture 2>&1 | grep -E "rounds|test result|panicked"
