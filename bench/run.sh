#!/usr/bin/env bash
# Side-by-side benchmark: Warren and RabbitMQ 3.10 (Debian package) on this
# machine, in one run, driven by the real PerfTest (com.rabbitmq:perf-test).
#
#   bench/run.sh [SECONDS]      (default 30 s per workload per broker)
#
# Workloads (issue 2):
#   A  1 producer, 1 consumer, 12-byte transient messages, autoack
#      PerfTest -x 1 -y 1 -s 12 -a -z SECONDS
#   B  1 KB messages, publisher confirms in flight 1000, prefetch 1000,
#      multi-ack every 100
#      PerfTest -x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100 -z SECONDS
#   C  RSS of 5,000 idle connections with one channel each
#      bench/idle_connections.py
# Everything listens on loopback only; both brokers are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
source bench/lib.sh
fetch_perftest
start_brokers

# field NAME FILE: the number after "NAME" in PerfTest's summary.
rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
p99() { grep "consumer latency min/median" "$2" | tail -1 | awk '{print $(NF-1)}' | cut -d/ -f5; }

declare -A R
run() { # name broker port args...
  local name=$1 broker=$2 port=$3; shift 3
  local f="$OUT/$name-$broker.txt"
  echo "== $name on $broker"
  timeout $((SECS + 60)) java -cp "$OUT/lib/*" com.rabbitmq.perf.PerfTest \
    -h "amqp://guest:guest@127.0.0.1:$port" "$@" -z "$SECS" > "$f" 2>&1 || true
  R[$name-$broker-rate]=$(rate receiving "$f")
  R[$name-$broker-p99]=$(p99 x "$f")
  echo "   received ${R[$name-$broker-rate]} msg/s, consumer p99 ${R[$name-$broker-p99]} µs"
}

A=(-x 1 -y 1 -s 12 -a)
B=(-x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100)
run A warren $WARREN_PORT "${A[@]}"
run A rabbitmq $RABBIT_PORT "${A[@]}"
run B warren $WARREN_PORT "${B[@]}"
run B rabbitmq $RABBIT_PORT "${B[@]}"

echo "== C: 5000 idle connections"
CW=$(python3 bench/idle_connections.py 127.0.0.1 $WARREN_PORT "$WARREN_PID" 5000 | tee "$OUT/C-warren.txt")
CR=$(python3 bench/idle_connections.py 127.0.0.1 $RABBIT_PORT "$RABBIT_PID" 5000 | tee "$OUT/C-rabbitmq.txt")
kib() { echo "$1" | grep -o 'per_connection_kib=[0-9.]*' | cut -d= -f2; }

cat <<TABLE | tee "$OUT/summary.md"

| workload | Warren | RabbitMQ 3.10 | ratio |
| --- | --- | --- | --- |
| A 12 B autoack, msg/s | ${R[A-warren-rate]} | ${R[A-rabbitmq-rate]} | $(ratio ${R[A-warren-rate]} ${R[A-rabbitmq-rate]})x |
| A consumer p99 latency, µs | ${R[A-warren-p99]} | ${R[A-rabbitmq-p99]} | |
| B 1 KB confirms/prefetch 1000, msg/s | ${R[B-warren-rate]} | ${R[B-rabbitmq-rate]} | $(ratio ${R[B-warren-rate]} ${R[B-rabbitmq-rate]})x |
| B consumer p99 latency, µs | ${R[B-warren-p99]} | ${R[B-rabbitmq-p99]} | |
| C RSS per idle connection, KiB | $(kib "$CW") | $(kib "$CR") | $(ratio $(kib "$CR") $(kib "$CW"))x less |
TABLE
