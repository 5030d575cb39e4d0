#!/usr/bin/env bash
# Run warren-client's interop tests against Warren (in-process, as
# `cargo test` does) and the RabbitMQ 3.10 anchor too: starts the anchor
# from ../shared/anchors on loopback, points the tests at it, stops it.
#
#   tests/client/rabbitmq.sh [cargo test filters...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ANCHOR=../shared/anchors/rabbitmq-node.sh
NODE=warren-client-anchor
PORTS=(5674 5553 15674 25674)
export PROM_PORT=15694
bash "$ANCHOR" start "$NODE" "${PORTS[@]}"
trap 'bash "$ANCHOR" stop "$NODE" "${PORTS[@]}"' EXIT
export WARREN_CLIENT_RABBITMQ_URI="amqp://guest:guest@127.0.0.1:${PORTS[0]}/%2f"
export WARREN_CLIENT_RABBITMQ_STREAM_URI="rabbitmq-stream://guest:guest@127.0.0.1:${PORTS[1]}/%2f"
export WARREN_CLIENT_RABBITMQ_API="http://127.0.0.1:${PORTS[2]}"
cargo test -p warren-client "$@"
