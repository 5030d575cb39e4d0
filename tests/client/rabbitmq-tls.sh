#!/usr/bin/env bash
# warren-client's TLS tests against the RabbitMQ 3.10 anchor with TLS
# (bench/tls-anchor.sh, certificates from tools/tls-certs.sh, made fresh):
# PLAIN over amqps, EXTERNAL as the client certificate's CN (alice, added
# here), a certificate for an unknown user and an untrusted CA refused.
# Loopback only; the node is stopped at the end.
#
#   tests/client/rabbitmq-tls.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=bench/out/client-tls
NODE=warren-client-tls
PORTS=(5675 5676 5557 5558 15677 15678 25677 15698)
bash tools/tls-certs.sh "$DIR"
bash bench/tls-anchor.sh start "$NODE" "$DIR" "${PORTS[@]}"
trap 'bash bench/tls-anchor.sh stop "$NODE" "$DIR" "${PORTS[@]}"' EXIT
ctl() { bash bench/tls-anchor.sh ctl "$NODE" "$DIR" "${PORTS[@]}" "$@"; }
# The node keeps its database between runs: alice may be there already.
ctl delete_user alice > /dev/null 2>&1 || true
ctl add_user alice "$(head -c 24 /dev/urandom | base64)" > /dev/null
ctl set_permissions -p / alice '.*' '.*' '.*' > /dev/null
export WARREN_CLIENT_RABBITMQ_TLS_DIR="$PWD/$DIR"
export WARREN_CLIENT_RABBITMQ_AMQPS_PORT="${PORTS[1]}"
cargo test -p warren-client --test tls -- --nocapture
