#!/usr/bin/env bash
# How much of the machine's disk and CPU each stream client uses on
# issue 35's three-node publishing point:
#
#   bench/client-stream-disk.sh [PAIRS] [SIZE] [SECS]
#       (default 2 pairs, 1000 B, 5 s)
#
# One fresh three-node Warren cluster (bench/cluster_lib.sh), 12 B
# publishing for SECS first as bench/client-stream.sh does, then PAIRS
# pairs of SIZE publishing with 10,000 unconfirmed, warren-client first.
# Each row adds the MB/s the run wrote to the disk holding the nodes'
# data (/proc/diskstats; the run's stream set-up included), the MB the
# `sync` after it wrote, and the machine's busy, iowait and idle ticks
# over the run (/proc/stat). NODES_DIR=/dev/shm/x puts the nodes' data
# on tmpfs (keep SECS small: three copies of what a run writes stay in
# memory until the next run's stream replaces it).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-2}
SIZE=${2:-1000}
SECS=${3:-5}
cargo build -q --release -p warren-server -p client-bench
OUT=${NODES_DIR:-bench/out/client-stream-disk}
source bench/cluster_lib.sh
start_stream_nodes
uri=$STREAM_URI
dev=$(basename "$(df --output=source "$OUT" | tail -1)")
# 512 B sectors written (0 on tmpfs, which has no disk), printed as read:
# awk's arithmetic would print a count past 2^31 in exponent form.
written() { awk -v d="$dev" '$3 == d { n = $10 } END { print (n == "" ? 0 : n) }' /proc/diskstats; }
ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $6, $5 }' /proc/stat; }
timeout 300 ./target/release/client-bench "$uri" warren stream-publish --size 12 --in-flight 10000 --secs "$SECS" > /dev/null
for _ in $(seq "$PAIRS"); do
  for c in warren rabbitmq-stream-client; do
    sync
    w0=$(written); t0=$(ticks); s0=$(date +%s.%N)
    row=$(timeout 300 ./target/release/client-bench "$uri" "$c" stream-publish --size "$SIZE" --in-flight 10000 --secs "$SECS")
    w1=$(written); t1=$(ticks); s1=$(date +%s.%N)
    sync
    w2=$(written)
    python3 - "$c" "$row" "$w0" "$w1" "$w2" "$s0" "$s1" "$t0" "$t1" <<'PY'
import sys
c, row, w0, w1, w2, s0, s1, t0, t1 = sys.argv[1:]
kv = dict(x.split("=", 1) for x in row.split("\t") if "=" in x)
mbs = (int(w1) - int(w0)) * 512 / 1e6 / (float(s1) - float(s0))
after = (int(w2) - int(w1)) * 512 / 1e6
busy, iowait, idle = (int(b) - int(a) for a, b in zip(t0.split(), t1.split()))
print(f"{c}\trate={kv['rate']}\tdisk_mb_per_s={mbs:.0f}\tdisk_mb_after={after:.0f}\tbusy_ticks={busy}\tiowait_ticks={iowait}\tidle_ticks={idle}")
PY
  done
done
