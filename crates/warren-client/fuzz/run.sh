#!/usr/bin/env bash
# Fuzz what warren-client parses itself (needs cargo-fuzz and the nightly
# toolchain: `cargo install cargo-fuzz`): URIs, traceparent headers,
# delivered stream chunks and the stream replies read by hand (lists,
# statistics, command versions, consumer updates, metadata), and what
# an AMQP 1.0 client reads (messages, frames applied to a session); the 0-9-1 frames
# from the broker are
# warren-amqp091's, fuzzed in crates/warren-amqp091/fuzz.
#   crates/warren-client/fuzz/run.sh [SECONDS]
# A crash is saved under fuzz/artifacts/TARGET/; turn it into a unit test
# beside the parser it broke.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
for t in uri traceparent stream_chunk stream_replies amqp_frames; do
  cargo +nightly fuzz run "$t" -- -max_total_time="$SECS" -max_len=4096
done
