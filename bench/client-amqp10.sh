#!/usr/bin/env bash
# warren-client's AMQP 1.0 module beside fe2o3-amqp and RabbitMQ's Go
# AMQP 1.0 client (rabbitmq-amqp-go-client, bench/amqp10-go, built here
# with the machine's Go; left out with a note when there is no Go)
# (issue 36), same run, same broker: a release Warren on 127.0.0.1:5680
# (fresh data directory) and bench/client-bench running one client per
# process (the Go client as a child program, its CPU from its rusage):
#
#   P  publishing with outcomes, 12 B and 1 KB, at most IN_FLIGHT (200)
#      awaited, SECS seconds, to a classic queue capped at 10,000
#   C  consuming MSGS messages (12 B) with credit CREDIT (200), each
#      accepted, from a queue filled beforehand over 0-9-1
#
#   bench/client-amqp10.sh [SECS] [MSGS] [REPEAT]   (default 5 s, 100,000, 2)
#
# Loopback only; the broker is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
MSGS=${2:-100000}
REPEAT=${3:-2}
IN_FLIGHT=${IN_FLIGHT:-200}
CREDIT=${CREDIT:-200}
OUT=bench/out
mkdir -p "$OUT"
cargo build -q --release -p warren-server -p client-bench
CLIENTS="warren fe2o3-amqp"
if command -v go >/dev/null 2>&1; then
  (cd bench/amqp10-go && go build -o amqp10-go .)
  export CLIENT_BENCH_GO="$PWD/bench/amqp10-go/amqp10-go"
  CLIENTS="$CLIENTS rabbitmq-amqp-go-client"
else
  echo "no go command: rabbitmq-amqp-go-client left out" >&2
fi
rm -rf "$OUT/warren-amqp10-data"
./target/release/warren --amqp-listen 127.0.0.1:5680 --stream-listen 127.0.0.1:5681 \
  --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 \
  --data-dir "$OUT/warren-amqp10-data" > "$OUT/warren-amqp10.log" 2>&1 &
WARREN_PID=$!
trap 'kill $WARREN_PID 2>/dev/null || true; wait $WARREN_PID 2>/dev/null || true; rm -rf "$OUT/warren-amqp10-data"' EXIT
sleep 1
URI="amqp://guest:guest@127.0.0.1:5680/%2f"
# Each repeat turns the order round by one, so no client always goes first.
order() {
  local n=$1 list=($CLIENTS)
  for i in $(seq 0 $((${#list[@]} - 1))); do
    echo "${list[$(((i + n) % ${#list[@]}))]}"
  done
}
for r in $(seq "$REPEAT"); do
  for size in 12 1000; do
    for c in $(order "$r"); do
      timeout 120 ./target/release/client-bench "$URI" "$c" amqp10-publish --size "$size" --in-flight "$IN_FLIGHT" --secs "$SECS" | cut -f1-3,10-12
    done
  done
  for c in $(order $((r + 1))); do
    timeout 300 ./target/release/client-bench "$URI" "$c" amqp10-consume --size 12 --prefetch "$CREDIT" --messages "$MSGS" | cut -f1-3,10-12
  done
done
