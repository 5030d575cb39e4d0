#!/usr/bin/env bash
# Did warren-perf's figures fall when it moved onto warren-client?
# Two warren-perf binaries (OLD, e.g. built at 708aab4 with its private
# client, and NEW) against one Warren (release build, pinned to CPU 1),
# each pinned to CPU 0, alternating OLD NEW OLD NEW per workload; prints
# the rates and the generator's CPU time (user + system) per message
# handled (sent + received), and the broker's. Each run has a broker of
# its own (fresh data directory).
#
#   git worktree add /tmp/wp-old 708aab4 &&
#     cargo build --release -p warren-perf --manifest-path /tmp/wp-old/Cargo.toml --target-dir /tmp/wp-old/target
#   cargo build --release -p warren-perf -p warren-server
#   bench/generator.sh /tmp/wp-old/target/release/warren-perf target/release/warren-perf [SECONDS]
#
# PIN=0 runs both unpinned, sharing the two cores as bench/compare.sh does.
# PROTO=stream runs bench/stream.sh's stream workloads instead (PROTO=amqp10
# AMQP 1.0 ones); ONLY=confirms-1kb runs only workloads whose name holds
# that text; OLD_ARGS and
# NEW_ARGS are added to each binary's (e.g. OLD_ARGS=--warren-client for
# a build from before the stream mode moved onto warren-client, where
# that flag chose it).
#
# Loopback only; the broker is stopped at the end.
set -u
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/generator.sh OLD_BIN NEW_BIN [SECONDS]} NEW=${2:?} SECS=${3:-10}
OUT=bench/out; mkdir -p "$OUT"
if [ "${PIN:-1}" = 1 ]; then BROKER_CPU=(taskset -c 1); GEN_CPU=(taskset -c 0); else BROKER_CPU=(); GEN_CPU=(); fi
D=$(mktemp -d "$OUT/generator.XXXX")
# A fresh broker for each run: streams are kept, and a few stream runs
# at full rate would fill the disk.
WP=
start_broker() {
  rm -rf "$D/data"
  "${BROKER_CPU[@]}" ./target/release/warren --amqp-listen 127.0.0.1:5690 --stream-listen 127.0.0.1:5594 \
    --http-listen 127.0.0.1:15695 --prometheus-listen 127.0.0.1:15696 --data-dir "$D/data" > "$D/warren.log" 2>&1 &
  WP=$!
  sleep 1.5
}
stop_broker() { kill $WP 2>/dev/null; wait $WP 2>/dev/null; rm -rf "$D/data"; }
trap stop_broker EXIT
U=amqp://guest:guest@127.0.0.1:5690/%2f
WORKLOADS=("confirms-1kb:-x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100" "autoack-12b:-x 1 -y 1 -s 12 -a"
           "confirms-12b-20:-x 1 -y 1 -s 12 -c 20 -q 100 -A 10" "publish-12b:-x 1 -y 0 -s 12 -c 1000")
if [ "${PROTO:-amqp091}" = stream ]; then
  # bench/stream.sh's workloads (1 producer, 1 consumer from the start,
  # batches of 100).
  U=rabbitmq-stream://guest:guest@127.0.0.1:5594/%2f
  WORKLOADS=("stream-12b:-P stream -x 1 -y 1 -s 12 --offset first" "stream-1kb:-P stream -x 1 -y 1 -s 1000 --offset first")
fi
if [ "${PROTO:-amqp091}" = amqp10 ]; then
  # AMQP 1.0 on v2 addresses: bench/quiver.sh's durable workload (timed),
  # and the 0-9-1 set's shapes.
  A10="-P amqp10 --amqp10-address /queues/{queue}"
  WORKLOADS=("amqp10-quiver:$A10 -x 1 -y 1 -s 12 -f persistent -c 1000 -q 1000"
             "amqp10-confirms-1kb:$A10 -x 1 -y 1 -s 1000 -c 1000 -q 1000 -A 100"
             "amqp10-autoack-12b:$A10 -x 1 -y 1 -s 12 -a"
             "amqp10-publish-12b:$A10 -x 1 -y 0 -s 12 -c 1000")
fi
for w in "${WORKLOADS[@]}"; do
  name=${w%%:*}; args=${w#*:}
  case "$name" in *"${ONLY:-}"*) ;; *) continue ;; esac
  for bin in OLD NEW OLD NEW; do
    extra=${bin}_ARGS
    start_broker
    # A run that fails leaves no figures (not the last run's).
    rm -f "$D/$name-$bin.json"
    b0=$(awk '{print $14 + $15}' /proc/$WP/stat)
    # shellcheck disable=SC2086
    /usr/bin/time -f "%U %S" -o "$D/time" timeout $((SECS + 30)) "${GEN_CPU[@]}" "${!bin}" -h $U $args ${!extra:-} -z "$SECS" \
      --quiet --json "$D/$name-$bin.json" > "$D/$name-$bin.txt" 2>&1 || tail -n 3 "$D/$name-$bin.txt"
    b1=$(awk '{print $14 + $15}' /proc/$WP/stat)
    stop_broker
    [ -s "$D/$name-$bin.json" ] || continue
    python3 - "$D/$name-$bin.json" "$name" "$bin" "$D/time" "$((b1 - b0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stages"][0]
user, system = map(float, open(sys.argv[4]).read().split()[-2:])
n = s["sent"] + s["received"]
broker = int(sys.argv[5]) / int(sys.argv[6])
print(f"{sys.argv[2]:16} {sys.argv[3]} sent {s['sent_rate']:>10,.0f}/s received {s['received_rate']:>10,.0f}/s"
      f"  CPU {1e6 * (user + system) / max(n, 1):.3f} µs/msg (broker {1e6 * broker / max(n, 1):.3f})")
PY
  done
done
