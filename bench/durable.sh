#!/usr/bin/env bash
# Durable classic queues side by side: Warren and RabbitMQ 3.10 (Debian
# package) on this machine, in one run, driven by the real PerfTest.
#
#   bench/durable.sh [SECONDS] [BACKLOG]   (defaults: 60 s, 2,000,000 messages)
#
# Workloads (issue 3):
#   D  1 producer, 1 consumer, 1 KB persistent messages on a durable queue,
#      confirms in flight 1000, prefetch 1000, multi-ack every 100
#      PerfTest -x 1 -y 1 -s 1000 -f persistent -c 1000 -q 1000 -A 100 -z SECONDS
#   E  the same producer alone until BACKLOG messages are queued, then one
#      consumer drains them; the broker's resident memory is sampled every
#      0.5 s throughout and its peak reported
#      PerfTest -x 1 -y 0 -s 1000 -f persistent -c 1000 -C BACKLOG
#      PerfTest -x 0 -y 1 -f persistent -q 1000 -A 100 -D BACKLOG
# Everything listens on loopback only; both brokers are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
BACKLOG=${2:-2000000}
source bench/lib.sh
fetch_perftest
SAMPLER=
stop_sampler() { if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2>/dev/null || true; fi; }
EXTRA_CLEANUP=stop_sampler
start_brokers

perftest() { # file port args...
  local f=$1 port=$2; shift 2
  timeout 1800 java -cp "$OUT/lib/*" com.rabbitmq.perf.PerfTest \
    -h "amqp://guest:guest@127.0.0.1:$port" "$@" > "$f" 2>&1 || true
}
rate() { grep "$1 rate avg" "$2" | grep -o '[0-9]*' | tail -1; }
p99() { grep "$1 latency min/median" "$2" | tail -1 | awk '{print $(NF-1)}' | cut -d/ -f5; }

declare -A R
for b in warren rabbitmq; do
  port=$WARREN_PORT; [ $b = rabbitmq ] && port=$RABBIT_PORT
  echo "== D on $b"
  f="$OUT/D-$b.txt"
  perftest "$f" $port -x 1 -y 1 -s 1000 -f persistent -c 1000 -q 1000 -A 100 -z "$SECS" -u perf-durable -ad false
  R[D-$b]=$(rate receiving "$f"); R[D-$b-p99]=$(p99 consumer "$f"); R[D-$b-cp99]=$(p99 confirm "$f")
  echo "   received ${R[D-$b]} msg/s, consumer p99 ${R[D-$b-p99]} µs, confirm p99 ${R[D-$b-cp99]} µs"
done

for b in warren rabbitmq; do
  port=$WARREN_PORT pid=$WARREN_PID
  [ $b = rabbitmq ] && port=$RABBIT_PORT pid=$RABBIT_PID
  echo "== E on $b: $BACKLOG messages"
  rss="$OUT/E-$b-rss.txt"
  (while kill -0 "$pid" 2>/dev/null; do awk '/VmRSS/{print $2}' /proc/"$pid"/status; sleep 0.5; done) > "$rss" &
  SAMPLER=$!
  perftest "$OUT/E-$b-publish.txt" $port -x 1 -y 0 -s 1000 -f persistent -c 1000 -C "$BACKLOG" -u perf-backlog -ad false
  R[E-$b-pub]=$(rate sending "$OUT/E-$b-publish.txt")
  perftest "$OUT/E-$b-drain.txt" $port -x 0 -y 1 -f persistent -q 1000 -A 100 -D "$BACKLOG" -u perf-backlog -ad false
  R[E-$b-drain]=$(rate receiving "$OUT/E-$b-drain.txt")
  kill "$SAMPLER"; SAMPLER=
  R[E-$b-rss]=$(sort -n "$rss" | tail -1)
  echo "   publish ${R[E-$b-pub]} msg/s, drain ${R[E-$b-drain]} msg/s, peak RSS ${R[E-$b-rss]} KiB"
done

mib() { python3 -c "print(f'{$1/1024:.0f}')"; }
cat <<TABLE | tee "$OUT/durable-summary.md"

| workload | Warren | RabbitMQ 3.10 | ratio |
| --- | --- | --- | --- |
| D 1 KB persistent, confirms/prefetch 1000, msg/s | ${R[D-warren]} | ${R[D-rabbitmq]} | $(ratio ${R[D-warren]} ${R[D-rabbitmq]})x |
| D consumer p99 latency, µs | ${R[D-warren-p99]} | ${R[D-rabbitmq-p99]} | |
| D confirm p99 latency, µs | ${R[D-warren-cp99]} | ${R[D-rabbitmq-cp99]} | |
| E publish $BACKLOG, msg/s | ${R[E-warren-pub]} | ${R[E-rabbitmq-pub]} | $(ratio ${R[E-warren-pub]} ${R[E-rabbitmq-pub]})x |
| E drain $BACKLOG, msg/s | ${R[E-warren-drain]} | ${R[E-rabbitmq-drain]} | $(ratio ${R[E-warren-drain]} ${R[E-rabbitmq-drain]})x |
| E peak RSS, MiB | $(mib ${R[E-warren-rss]}) | $(mib ${R[E-rabbitmq-rss]}) | |
TABLE
