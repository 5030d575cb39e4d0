#!/usr/bin/env bash
# Fuzz the quorum queue command and state decoders (needs cargo-fuzz and the
# nightly toolchain: `cargo install cargo-fuzz`).
#   crates/warren-fifo/fuzz/run.sh [SECONDS]
# A crash is saved under fuzz/artifacts/decode/; turn it into a unit test
# beside the decoder it broke.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo +nightly fuzz run decode -- -max_total_time="${1:-60}" -max_len=65536
