#!/usr/bin/env bash
# warren-client's stream sub-entry batches beside RabbitMQ's Java stream
# client, both ways, every codec (crates/warren-client/tests/stream_java.rs):
# fetches the Java client from Maven Central, compiles
# tests/client/java-stream/StreamInterop.java, runs the test against an
# in-process Warren, and with --with-anchor against the RabbitMQ 3.10
# anchor too (through tests/client/rabbitmq.sh). Needs java and mvn.
#
#   tests/client/java-stream.sh [--with-anchor]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=target/java-stream
mkdir -p "$BUILD"
cp tests/client/java-stream/pom.xml "$BUILD/pom.xml"
mvn -q -f "$BUILD/pom.xml" dependency:copy-dependencies -DoutputDirectory=lib
javac -d "$BUILD/classes" -cp "$BUILD/lib/*" tests/client/java-stream/StreamInterop.java
export WARREN_CLIENT_JAVA_CP="$PWD/$BUILD/classes:$PWD/$BUILD/lib/*"
if [ "${1:-}" = --with-anchor ]; then
  bash tests/client/rabbitmq.sh --test stream_java -- --ignored
else
  cargo test -p warren-client --test stream_java -- --ignored
fi
