#!/usr/bin/env bash
# Two builds of Warren on issue 35's hardest point, three nodes' 1 KB
# publishing, warren-client beside rabbitmq-stream-client:
#
#   bench/client-stream-ab.sh A_BIN B_BIN [SESSIONS] [PAIRS] [SIZE] [SECS]
#       (default 6 sessions, 6 pairs, 1000 B, 5 s)
#
# Each session starts a fresh three-node cluster of one build (the builds
# alternate A B B A A B ...), publishes 12 B for SECS first (the
# table in bench/client-stream.sh does; a cluster without it behaves
# differently), then runs PAIRS pairs of SIZE publishing, the two clients
# in alternating order, as bench/client-stream.sh runs them. A pair takes
# about 30 s, against a whole table's 3 minutes for one pair of this
# point: on this machine a build needs about 18 pairs before its median
# means anything.
#
# Besides the clients' and the broker's CPU, each row has the machine's
# busy CPU per message over the run (/proc/stat, the run's stream set-up
# included): kernel threads' work (writeback, extent conversion) shows
# there and in no process. Rows go to bench/out/client-stream-ab.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "${1:?build A: a warren binary}")
B=$(realpath "${2:?build B: a warren binary}")
SESSIONS=${3:-6}
PAIRS=${4:-6}
SIZE=${5:-1000}
SECS=${6:-5}
cargo build -q --release -p client-bench
mkdir -p bench/out
TSV=bench/out/client-stream-ab.tsv
: > "$TSV"
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# A row as it goes by: the build, the client and the fields compared.
shown() {
  awk -F'\t' '{ o = $1 "\t" $2
    for (i = 3; i <= NF; i++) if ($i ~ /^(rate|cpu_us_per_msg|broker_cpu_us_per_msg|busy_ticks)=/) o = o "\t" $i
    print o }'
}
session() { # LABEL BIN
  (
    OUT=bench/out/client-stream-ab WARREN_BIN=$2
    source bench/cluster_lib.sh
    start_stream_nodes
    uri=$STREAM_URI
    sync
    timeout 300 ./target/release/client-bench "$uri" warren stream-publish --size 12 --in-flight 10000 --secs "$SECS" > /dev/null
    for p in $(seq "$PAIRS"); do
      order="warren rabbitmq-stream-client"
      [ $((p % 2)) = 0 ] && order="rabbitmq-stream-client warren"
      for c in $order; do
        sync
        b0=$(busy)
        row=$(timeout 300 ./target/release/client-bench "$uri" "$c" stream-publish --size "$SIZE" --in-flight 10000 --secs "$SECS")
        b1=$(busy)
        printf '%s\t%s\tbusy_ticks=%s\n' "$1" "$row" "$((b1 - b0))" | tee -a "$TSV" | shown
      done
    done
  )
}
for s in $(seq "$SESSIONS"); do
  # A B B A A B ...
  if [ $(((s / 2) % 2)) = 0 ]; then session A "$A"; else session B "$B"; fi
done
python3 - "$TSV" "$(getconf CLK_TCK)" <<'PY'
import collections, statistics, sys
hz = float(sys.argv[2])
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    kv = dict(x.split("=", 1) for x in f if "=" in x)
    busy = float(kv["busy_ticks"]) / hz * 1e6 / float(kv["msgs"])
    rows[(f[0], f[1])].append((float(kv["rate"]), float(kv["cpu_us_per_msg"]), float(kv["broker_cpu_us_per_msg"]), busy))
print("build\tpairs\twarren-client msg/s (client, broker, machine CPU us/msg)\trabbitmq-stream-client msg/s (same)\tratio of medians\tmedian pair (range)")
for b in ("A", "B"):
    w, r = rows.get((b, "Warren"), []), rows.get((b, "RustStream"), [])
    if not w or not r:
        continue
    mw = [statistics.median(x[i] for x in w) for i in range(4)]
    mr = [statistics.median(x[i] for x in r) for i in range(4)]
    pairs = [x[0] / y[0] for x, y in zip(w, r)]
    print(f"{b}\t{len(pairs)}\t{mw[0]:,.0f} ({mw[1]:.2f}, {mw[2]:.2f}, {mw[3]:.2f})\t{mr[0]:,.0f} ({mr[1]:.2f}, {mr[2]:.2f}, {mr[3]:.2f})\t{mw[0] / mr[0]:.2f}x\t{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})")
PY
