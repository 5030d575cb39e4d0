#!/usr/bin/env bash
# Declaring durable queues one by one, Warren against the RabbitMQ 3.10
# anchor in one run: N sequential queue.declare (durable), each awaiting
# its declare-ok, then N queue.delete, on one channel
# (bench/durable_declares.py, no client library). Reports the time at
# every 1,000th: a broker that rewrites all its definitions per declare
# slows down as queues accumulate. Loopback only.
#
#   bash bench/durable_declares.sh        # N=10000
#   N=4000 bash bench/durable_declares.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
N=${N:-10000}

# Queues left by an interrupted run would make declares redeclares.
drop_leftovers() {
  python3 - "$N" <<'PY' || true
import json, subprocess, sys, urllib.request, base64
req = urllib.request.Request("http://127.0.0.1:15673/api/queues/%2F?columns=name",
    headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
for q in json.load(urllib.request.urlopen(req, timeout=30)):
    if q["name"].startswith("bench-decl-"):
        d = urllib.request.Request("http://127.0.0.1:15673/api/queues/%2F/" + q["name"], method="DELETE",
            headers=req.headers)
        urllib.request.urlopen(d, timeout=30)
PY
}
EXTRA_CLEANUP=drop_leftovers

start_brokers
drop_leftovers

run() { timeout 900 python3 bench/durable_declares.py 127.0.0.1 "$1" "$N"; }
echo "== Warren"
W=$(run $WARREN_PORT); echo "$W"
echo "== RabbitMQ 3.10"
R=$(run $RABBIT_PORT); echo "$R"

last() { echo "$1" | grep "^$2 " | awk '{print $NF}' | cut -d: -f2; }
for op in declare delete; do
  w=$(last "$W" $op); r=$(last "$R" $op)
  echo "$N sequential durable ${op}s: Warren ${w} s, RabbitMQ ${r} s, RabbitMQ/Warren $(ratio "$r" "$w")x"
done
ls -la "$OUT/warren-data" | grep definitions || true
