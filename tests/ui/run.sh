#!/usr/bin/env bash
# The management UI in a headless browser: builds warren, starts it on
# loopback ports with a fresh data directory, and drives the UI with
# Debian's chromium through playwright-core (tests/ui/ui.test.mjs; no browser
# download). Screenshots of every tab land in target/ui-screenshots/.
#
#   bash tests/ui/run.sh
#
# Overrides: WARREN_UI_{AMQP,STREAM,HTTP,PROMETHEUS}_LISTEN (host:port),
# WARREN_BIN (a prebuilt broker; skips cargo build), CHROMIUM, SCREENSHOT_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."

amqp=${WARREN_UI_AMQP_LISTEN:-127.0.0.1:5680}
stream=${WARREN_UI_STREAM_LISTEN:-127.0.0.1:5560}
http=${WARREN_UI_HTTP_LISTEN:-127.0.0.1:15680}
prometheus=${WARREN_UI_PROMETHEUS_LISTEN:-127.0.0.1:15690}
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "tests/ui needs node >= 20 (playwright-core); found: $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi

# playwright-core only, pinned by the lockfile; it never fetches a browser.
(
  cd tests/ui
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi
)

bin=${WARREN_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q -p warren-server --bin warren
  bin=target/debug/warren
fi

data=$(mktemp -d)
log="$data/warren.log"
pid=
cleanup() {
  status=$?
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -s "$log" ]; then
    echo "--- last lines of the broker's log ---" >&2
    tail -n 40 "$log" >&2
  fi
  rm -rf "$data"
  exit "$status"
}
trap cleanup EXIT

"$bin" --data-dir "$data/store" --amqp-listen "$amqp" --stream-listen "$stream" \
  --http-listen "$http" --prometheus-listen "$prometheus" >"$log" 2>&1 &
pid=$!

# Up to 30 s for the management API to answer.
ready=
deadline=$((SECONDS + 30))
while [ "$SECONDS" -lt "$deadline" ]; do
  if curl -fsS --max-time 2 -o /dev/null -u guest:guest "http://$http/api/overview" 2>/dev/null; then
    ready=1
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "warren exited before its HTTP API answered" >&2
    exit 1
  fi
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "warren's HTTP API did not answer on $http within 30 s" >&2
  exit 1
fi

WARREN_HTTP="http://$http" WARREN_AMQP="$amqp" timeout 180 node tests/ui/ui.test.mjs
