#!/usr/bin/env bash
# TLS, side by side with RabbitMQ 3.10 configured with the same
# certificates (bench/tls-anchor.sh), in one run:
#   T1  PerfTest over amqps://, 1 KB messages, publisher confirms (1000 in
#       flight), prefetch 1000, multiple ack every 100: received msg/s
#   T2  new AMQP-over-TLS connections per second: N handshakes plus AMQP
#       opens, 250 in flight (warren-connect: a Rust client on rustls,
#       X25519, cheap enough that the broker's side is what is measured)
#   T3  broker RSS per idle TLS connection, N connections held
#       (bench/idle_connections.py with a CA file)
# usage: bench/tls.sh [SECONDS] [N]   (from anywhere; output in bench/out)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
N=${2:-2000}
source bench/lib.sh
fetch_perftest
CERTS=$OUT/tls
# Fresh certificates each run (they are valid for 30 days).
tools/tls-certs.sh "$CERTS" >/dev/null
WARREN_TLS_PORT=5681
RABBIT_TLS_PORT=5674

cargo build --release -p warren-server -p warren-perf
rm -rf "$OUT/warren-data"
./target/release/warren --amqp-listen 127.0.0.1:$WARREN_PORT --amqps-listen 127.0.0.1:$WARREN_TLS_PORT \
  --stream-listen none --stream-tls-listen none --http-listen 127.0.0.1:15680 --https-listen none \
  --prometheus-listen none --ssl-certfile "$CERTS/server_certificate.pem" \
  --ssl-keyfile "$CERTS/server_key.pem" --ssl-cacertfile "$CERTS/ca_certificate.pem" \
  --data-dir "$OUT/warren-data" > "$OUT/warren-tls.log" 2>&1 &
WARREN_PID=$!
EXTRA_CLEANUP="bench/tls-anchor.sh stop tlsanchor $CERTS"
trap cleanup EXIT
bench/tls-anchor.sh start tlsanchor "$CERTS" $RABBIT_PORT $RABBIT_TLS_PORT 5553 5555 15673 15674 25673 15693
RABBIT_PID=$(pgrep -f "beam.smp.*-home /tmp/rmq-tlsanchor" | head -1 || true)
[ -n "$RABBIT_PID" ] || { echo "cannot find the RabbitMQ node's process" >&2; exit 1; }
sleep 2

rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
declare -A R
perftest() { # broker port
  local f="$OUT/T1-$1.txt"
  echo "== T1 on $1"
  # amqps:// makes PerfTest trust the server's certificate as given.
  timeout $((SECS + 60)) java -cp "$OUT/lib/*" com.rabbitmq.perf.PerfTest \
    -h "amqps://guest:guest@127.0.0.1:$2" -x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100 -z "$SECS" > "$f" 2>&1 || true
  R[T1-$1]=$(rate receiving "$f")
  echo "   received ${R[T1-$1]} msg/s"
}
perftest warren $WARREN_TLS_PORT
perftest rabbitmq $RABBIT_TLS_PORT

echo "== T3: $N idle TLS connections"
CW=$(python3 bench/idle_connections.py 127.0.0.1 $WARREN_TLS_PORT "$WARREN_PID" "$N" "$CERTS/ca_certificate.pem" | tee "$OUT/T3-warren.txt")
CR=$(python3 bench/idle_connections.py 127.0.0.1 $RABBIT_TLS_PORT "$RABBIT_PID" "$N" "$CERTS/ca_certificate.pem" | tee "$OUT/T3-rabbitmq.txt")
# After T3: the connections T2 opens would leave the allocators' pools grown.
echo "== T2: $N new TLS connections"
connect() { # broker port
  ./target/release/warren-connect 127.0.0.1:$2 "$N" --cafile "$CERTS/ca_certificate.pem" | tee "$OUT/T2-$1.txt"
}
C2W=$(connect warren $WARREN_TLS_PORT)
C2R=$(connect rabbitmq $RABBIT_TLS_PORT)
field() { echo "$1" | grep -o "$2=[0-9.]*" | cut -d= -f2; }

cat <<TABLE | tee "$OUT/tls-summary.md"

| workload | Warren | RabbitMQ 3.10 | ratio |
| --- | --- | --- | --- |
| T1 amqps 1 KB confirms, received msg/s | ${R[T1-warren]} | ${R[T1-rabbitmq]} | $(ratio ${R[T1-warren]} ${R[T1-rabbitmq]})x |
| T2 new TLS connections/s ($N, 250 in flight) | $(field "$C2W" opened_per_s) | $(field "$C2R" opened_per_s) | $(ratio $(field "$C2W" opened_per_s) $(field "$C2R" opened_per_s))x |
| T3 RSS per idle TLS connection, KiB | $(field "$CW" per_connection_kib) | $(field "$CR" per_connection_kib) | $(ratio $(field "$CR" per_connection_kib) $(field "$CW" per_connection_kib))x less |
TABLE
