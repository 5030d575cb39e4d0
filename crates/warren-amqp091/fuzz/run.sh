#!/usr/bin/env bash
# Fuzz every AMQP 0-9-1 decoder for a while (needs cargo-fuzz and the
# nightly toolchain: `cargo install cargo-fuzz`).
#   crates/warren-amqp091/fuzz/run.sh [SECONDS_PER_TARGET]
# A crash is saved under fuzz/artifacts/TARGET/; turn each into a unit test
# next to the decoder it broke.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
for t in frames method table properties; do
  cargo +nightly fuzz run "$t" -- -max_total_time="$SECS" -max_len=65536
done
