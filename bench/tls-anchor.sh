#!/usr/bin/env bash
# A RabbitMQ 3.10 node (Debian package) on loopback with TLS on every
# listener, configured with the certificates tools/tls-certs.sh made: the
# anchor for the TLS benchmarks and for checking TLS behaviour side by side.
# Same shape as ../shared/anchors/rabbitmq-node.sh, plus:
#   AMQPS 5671-like port, stream over TLS, management over HTTPS,
#   EXTERNAL (rabbitmq_auth_mechanism_ssl) with ssl_cert_login_from = common_name.
# usage: bench/tls-anchor.sh start|stop NAME CERT_DIR AMQP AMQPS STREAM STREAMS MGMT MGMTS DIST PROM
set -euo pipefail
cmd=$1; name=${2:-tlsanchor}; certs=$(realpath "${3:-bench/out/tls}")
amqp=${4:-5673}; amqps=${5:-5674}; stream=${6:-5553}; streams=${7:-5554}
mgmt=${8:-15673}; mgmts=${9:-15674}; dist=${10:-25673}; prom=${11:-15693}
base=/tmp/rmq-$name
export RABBITMQ_NODENAME=$name@localhost RABBITMQ_MNESIA_BASE=$base/mnesia RABBITMQ_LOG_BASE=$base/log \
  RABBITMQ_CONFIG_FILE=$base/rabbitmq.conf RABBITMQ_ENABLED_PLUGINS_FILE=$base/enabled_plugins \
  RABBITMQ_PID_FILE=$base/pid RABBITMQ_DIST_PORT=$dist HOME=$base ERL_EPMD_ADDRESS=127.0.0.1
case $cmd in
start)
  if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  fi
  mkdir -p $base
  echo '[rabbitmq_management,rabbitmq_stream,rabbitmq_amqp1_0,rabbitmq_prometheus,rabbitmq_auth_mechanism_ssl].' > $base/enabled_plugins
  cat > $base/rabbitmq.conf <<CONF
listeners.tcp.default = 127.0.0.1:$amqp
listeners.ssl.default = 127.0.0.1:$amqps
ssl_options.cacertfile = $certs/ca_certificate.pem
ssl_options.certfile = $certs/server_certificate.pem
ssl_options.keyfile = $certs/server_key.pem
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
ssl_options.versions.1 = tlsv1.3
ssl_options.versions.2 = tlsv1.2
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
management.tcp.port = $mgmt
management.tcp.ip = 127.0.0.1
management.ssl.port = $mgmts
management.ssl.ip = 127.0.0.1
management.ssl.cacertfile = $certs/ca_certificate.pem
management.ssl.certfile = $certs/server_certificate.pem
management.ssl.keyfile = $certs/server_key.pem
stream.listeners.tcp.1 = 127.0.0.1:$stream
stream.listeners.ssl.1 = 127.0.0.1:$streams
stream.advertised_host = localhost
prometheus.tcp.port = $prom
prometheus.tcp.ip = 127.0.0.1
loopback_users = none
CONF
  : > $base/out.log
  (setsid /usr/lib/rabbitmq/bin/rabbitmq-server > $base/out.log 2>&1 &)
  for i in $(seq 60); do grep -q "completed with" $base/out.log 2>/dev/null && break; sleep 1; done
  grep -q "completed with" $base/out.log && echo "started $name (amqp $amqp amqps $amqps stream $stream/$streams mgmt $mgmt/$mgmts)";;
stop)
  /usr/lib/rabbitmq/bin/rabbitmqctl -n $name@localhost stop 2>/dev/null || true;;
ctl)
  shift 11; /usr/lib/rabbitmq/bin/rabbitmqctl -n $name@localhost "$@";;
esac
