#!/usr/bin/env bash
# The Python interop checks against a Warren started here on free loopback
# ports with a fresh data directory: AMQP 1.0 with python-qpid-proton and
# RabbitMQ's rabbitmq-amqp-python-client, streams with rstream (all from
# PyPI); then TLS with pika, proton and rstream against a second Warren
# whose certificates tools/tls-certs.sh makes here; then replicated
# streams with rstream on three clustered nodes. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${WARREN_PY_VENV:-target/py-venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { apt-get update -qq && apt-get install -y -qq python3-venv && python3 -m venv "$venv"; }
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt
cargo build -q -p warren-server --bin warren
data=$(mktemp -d)
free_port() { "$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
sport=$(free_port)
target/debug/warren --amqp-listen "127.0.0.1:$port" --stream-listen "127.0.0.1:$sport" --http-listen 127.0.0.1:0 --prometheus-listen 127.0.0.1:0 --data-dir "$data" --log warn &
pid=$!
tls_pid=
tls_dir=$(mktemp -d)
trap 'kill "$pid" $tls_pid 2>/dev/null; wait "$pid" $tls_pid 2>/dev/null; rm -rf "$data" "$tls_dir"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$sport") 2>/dev/null && break
  sleep 0.1
done
out=$(mktemp)
status=0
timeout 600 "$venv/bin/python" tests/python/amqp10_interop.py "$port" | tee "$out" || status=1
timeout 600 "$venv/bin/python" tests/python/stream_interop.py "$sport" "$port" | tee -a "$out" || status=1
# TLS: a Warren with only TLS listeners (the plain ones off, as an
# operator would), verifying client certificates and offering EXTERNAL.
bash tools/tls-certs.sh "$tls_dir/certs" >/dev/null
aport=$(free_port); stport=$(free_port); hport=$(free_port)
cat > "$tls_dir/warren.toml" <<TOML
amqp_listen = "none"
stream_listen = "none"
http_listen = "none"
prometheus_listen = "none"
amqps_listen = "127.0.0.1:$aport"
stream_tls_listen = "127.0.0.1:$stport"
https_listen = "127.0.0.1:$hport"
data_dir = "$tls_dir/data"
auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]
ssl_cert_login_from = "common_name"
[ssl_options]
certfile = "$tls_dir/certs/server_certificate.pem"
keyfile = "$tls_dir/certs/server_key.pem"
cacertfile = "$tls_dir/certs/ca_certificate.pem"
verify = "verify_peer"
TOML
target/debug/warren --config "$tls_dir/warren.toml" --log warn &
tls_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$aport") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$hport") 2>/dev/null && break
  sleep 0.1
done
timeout 600 "$venv/bin/python" tests/python/tls_interop.py "$aport" "$stport" "$hport" "$tls_dir/certs" | tee -a "$out" || status=1
# Replicated streams: three clustered nodes on loopback; the last check
# kills node 1 (the leader of its streams) with SIGKILL.
cl_dir=$(mktemp -d)
cl_pids=()
trap 'kill "$pid" $tls_pid "${cl_pids[@]}" 2>/dev/null; wait "$pid" $tls_pid 2>/dev/null; rm -rf "$data" "$tls_dir" "$cl_dir"' EXIT
cports=(); sports=()
for i in 0 1 2; do cports+=("$(free_port)"); sports+=("$(free_port)"); done
for i in 0 1 2; do
  peers=""
  for j in 0 1 2; do
    [ "$j" = "$i" ] && continue
    peers+="${peers:+, }{ node = \"warren@py$j\", address = \"127.0.0.1:${cports[$j]}\" }"
  done
  cat > "$cl_dir/node$i.toml" <<TOML
node_name = "warren@py$i"
data_dir = "$cl_dir/data$i"
amqp_listen = "none"
amqps_listen = "none"
stream_listen = "127.0.0.1:${sports[$i]}"
stream_tls_listen = "none"
http_listen = "none"
https_listen = "none"
prometheus_listen = "none"
[cluster]
name = "pytest"
secret = "s3cret"
listen = "127.0.0.1:${cports[$i]}"
ping_interval = 200
down_after = 1000
peers = [$peers]
TOML
  target/debug/warren --config "$cl_dir/node$i.toml" --log error &
  cl_pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/${sports[$i]}") 2>/dev/null && break
    sleep 0.1
  done
done
timeout 600 "$venv/bin/python" tests/python/stream_cluster_interop.py "${sports[@]}" "${cl_pids[0]}" | tee -a "$out" || status=1
# One closing line for all scripts.
awk '/^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 } END { printf "%d passed, %d failed\n", p, f }' "$out"
rm -f "$out"
exit $status
