#!/usr/bin/env bash
# warren-client's stream recovery under kill -9, the long version:
# crates/warren-client/tests/stream_recovery.rs with KILLS kills of a
# `warren` process (100 by default; `cargo test` runs 3), then
# tests/stream_cluster_recovery.rs on three nodes with the node leading
# the stream killed LEADER_KILLS times (100 by default; `cargo test` runs
# 2), each under a named producer and a consumer. Each prints its
# confirmed and stored counts; it fails if a confirmed message is lost,
# stored twice, or not seen once and in order by the consumer.
#
#   tests/client/stream-recovery-soak.sh [KILLS] [LEADER_KILLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
KILLS=${1:-100}
LEADER_KILLS=${2:-100}
cargo build -q -p warren-server --bin warren
WARREN_CLIENT_STREAM_KILL_ROUNDS=$KILLS timeout $((KILLS * 20 + 300)) \
  cargo test -q -p warren-client --test stream_recovery -- --nocapture 2>&1 | grep -E "stream recovery:|test result|panicked"
WARREN_CLIENT_STREAM_CLUSTER_KILLS=$LEADER_KILLS timeout $((LEADER_KILLS * 30 + 300)) \
  cargo test -q -p warren-client --test stream_cluster_recovery -- --nocapture 2>&1 | grep -E "stream cluster recovery:|test result|panicked"
