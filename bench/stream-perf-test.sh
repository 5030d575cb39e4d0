#!/usr/bin/env bash
# The cross-check: RabbitMQ's own stream-perf-test against Warren and
# RabbitMQ 3.10 in one run (1 producer, 1 consumer from the start of a
# fresh stream, 12-byte and 1 KB messages; the tool's defaults otherwise:
# 20 GB retention in 500 MB segments). stream-perf-test is not on Maven
# Central and is not built here: build it yourself from
# github.com/rabbitmq/rabbitmq-stream-perf-test (e.g. tag v1.8.0,
# `mvn -DskipTests package`) and pass its jar.
#
#   bench/stream-perf-test.sh PATH/TO/stream-perf-test.jar [SECONDS]
#
# Each run prints the tool's own summary lines to bench/out/spt-*.txt;
# the table at the end takes the tool's final "Summary" line. Loopback
# only; both brokers are stopped and their stream data deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
JAR=${1:?usage: bench/stream-perf-test.sh STREAM_PERF_TEST_JAR [SECONDS]}
SECS=${2:-60}
RUN=$(date +%s)
source bench/lib.sh
EXTRA_CLEANUP="drop_anchor_queues spt-12-$RUN spt-1000-$RUN"
start_brokers
for size in 12 1000; do
  for b in warren rabbitmq; do
    port=$WARREN_STREAM_PORT; [ $b = rabbitmq ] && port=5553
    echo "== stream-perf-test ${size} B on $b"
    # --load-balancer: connect to the given URI, whatever metadata says
    # (the anchor advertises its host name).
    timeout $((SECS + 60)) java -jar "$JAR" --uris "rabbitmq-stream://guest:guest@127.0.0.1:$port/%2f" \
      --load-balancer --producers 1 --consumers 1 --size "$size" --time "$SECS" \
      --offset first --streams "spt-$size-$RUN" --delete-streams \
      > "$OUT/spt-$size-$b.txt" 2>&1 || echo "   (exit $?)"
    grep -E "Summary|rror" "$OUT/spt-$size-$b.txt" | tail -3 || true
  done
done
