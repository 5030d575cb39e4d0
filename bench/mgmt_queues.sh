#!/usr/bin/env bash
# The management API at scale: GET /api/queues with 10,000 queues, Warren
# against the RabbitMQ 3.10 anchor in one run. Both get the same queues
# from one definitions import (a vhost `bench-mgmt`, N classic queues,
# each with a few messages published through the API), then each endpoint
# is fetched REPS times with curl, one request at a time:
#   /api/queues                       every queue, every field (what
#                                     monitoring scripts and rabbitmqadmin
#                                     list_queues read)
#   /api/queues/bench-mgmt?page=...   one sorted page of 100 (what the
#                                     web UI asks for)
#   /api/overview
# and the median, p90 and max wall times are reported with the ratio.
#
#   bash bench/mgmt_queues.sh            # N=10000 REPS=20
#   N=2000 REPS=5 bash bench/mgmt_queues.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
N=${N:-10000}
REPS=${REPS:-20}
W=http://127.0.0.1:15680
R=http://127.0.0.1:15673

# RabbitMQ deletes a vhost in the background after answering: wait until
# it is gone, or an import right after can lose its vhost to the delete.
drop_vhost() {
  curl -s -o /dev/null -u guest:guest -X DELETE "$R/api/vhosts/bench-mgmt" || true
  for _ in $(seq 1 120); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -u guest:guest "$R/api/vhosts/bench-mgmt")" = 404 ] && return
    sleep 0.5
  done
}
EXTRA_CLEANUP=drop_vhost

start_brokers
drop_vhost

python3 - "$N" > "$OUT/mgmt-defs.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
print(json.dumps({
    "vhosts": [{"name": "bench-mgmt"}],
    "permissions": [{"user": "guest", "vhost": "bench-mgmt",
                     "configure": ".*", "write": ".*", "read": ".*"}],
    "queues": [{"name": f"q-{i:05}", "vhost": "bench-mgmt", "durable": True,
                "auto_delete": False, "arguments": {}} for i in range(n)],
}))
EOF

for base in $W $R; do
  start=$(date +%s.%N)
  curl -fsS -u guest:guest -H 'content-type: application/json' -X POST \
    --data-binary @"$OUT/mgmt-defs.json" "$base/api/definitions" -o /dev/null
  # RabbitMQ may finish declaring after it answers: wait for all N.
  for _ in $(seq 1 600); do
    got=$(curl -fs -u guest:guest "$base/api/queues/bench-mgmt?page=1&page_size=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total_count"])' 2>/dev/null || echo 0)
    [ "$got" -ge "$N" ] && break
    sleep 0.5
  done
  echo "$base: $got queues after $(python3 -c "print(f'{$(date +%s.%N)-$start:.1f}')") s"
  # A few messages in every 10th queue, so counts are not all zero.
  # (RabbitMQ can answer 401 for a moment after the import: retry.)
  for i in $(seq 0 10 $((N - 1)) | head -100); do
    q=$(printf 'q-%05d' "$i")
    for _ in $(seq 1 20); do
      curl -fs -u guest:guest -H 'content-type: application/json' -X POST \
        --data "{\"properties\":{},\"routing_key\":\"$q\",\"payload\":\"m\",\"payload_encoding\":\"string\"}" \
        "$base/api/exchanges/bench-mgmt/amq.default/publish" -o /dev/null && break
      sleep 0.5
    done
  done
done
# RabbitMQ fills queue fields from stats it emits every 5 s.
sleep 6

# time_total of REPS fetches of $2 from $1, one line each: seconds bytes.
fetch() {
  for _ in $(seq 1 "$REPS"); do
    curl -fsS -o /dev/null -w '%{time_total} %{size_download}\n' -u guest:guest "$1$2"
  done
}

summary() {
  python3 - "$@" <<'EOF'
import sys
name, wfile, rfile = sys.argv[1:4]
def stats(path):
    rows = [l.split() for l in open(path) if l.strip()]
    t = sorted(float(r[0]) * 1000 for r in rows)
    return t[len(t) // 2], t[int(len(t) * 0.9) - 1 if len(t) >= 10 else -1], t[-1], int(rows[0][1])
w, r = stats(wfile), stats(rfile)
print(f"| {name} | {w[0]:.1f} / {w[1]:.1f} / {w[2]:.1f} ms ({w[3] / 1e6:.2f} MB) "
      f"| {r[0]:.1f} / {r[1]:.1f} / {r[2]:.1f} ms ({r[3] / 1e6:.2f} MB) | {r[0] / w[0]:.1f}x |")
EOF
}

echo
echo "N=$N queues, $REPS requests each; median / p90 / max (response size)"
echo "| request | Warren | RabbitMQ 3.10 | RabbitMQ / Warren (median) |"
echo "|---|---|---|---|"
for spec in "all:/api/queues" "page:/api/queues/bench-mgmt?page=1&page_size=100&sort=name" "overview:/api/overview"; do
  name=${spec%%:*}
  path=${spec#*:}
  fetch "$W" "$path" > "$OUT/mgmt-$name-warren.txt"
  fetch "$R" "$path" > "$OUT/mgmt-$name-rabbit.txt"
  summary "GET $path" "$OUT/mgmt-$name-warren.txt" "$OUT/mgmt-$name-rabbit.txt"
done
echo
echo "memory: Warren RSS $(($(ps -o rss= -p "$WARREN_PID") / 1024)) MiB, RabbitMQ RSS $(($(ps -o rss= -p "$RABBIT_PID") / 1024)) MiB"
