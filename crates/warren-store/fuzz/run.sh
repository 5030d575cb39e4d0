#!/usr/bin/env bash
# Fuzz the message store's record decoder (needs cargo-fuzz and the nightly
# toolchain: `cargo install cargo-fuzz`).
#   crates/warren-store/fuzz/run.sh [SECONDS]
# A crash is saved under fuzz/artifacts/records/; turn it into a unit test
# in src/record.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo +nightly fuzz run records -- -max_total_time="${1:-60}" -max_len=65536
