#!/usr/bin/env bash
# Make a throw-away PKI for the TLS interop tests, benchmarks and anchor
# checks: a CA, a server certificate for localhost / 127.0.0.1 and client
# certificates for CN=alice and CN=mallory (client_certificate.pem is
# alice's), as PEM files in DIR (default bench/out/tls), with openssl.
# Nothing here is committed; the files are made fresh on each run.
# usage: tools/tls-certs.sh [DIR]
set -euo pipefail
dir=${1:-bench/out/tls}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/O=Warren bench/CN=Warren bench CA" -keyout ca_key.pem -out ca_certificate.pem 2>/dev/null
cat > server.ext <<EXT
subjectAltName = DNS:localhost, IP:127.0.0.1
extendedKeyUsage = serverAuth
EXT
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=Warren bench/CN=localhost" \
  -keyout server_key.pem -out server.csr 2>/dev/null
openssl x509 -req -in server.csr -CA ca_certificate.pem -CAkey ca_key.pem -CAcreateserial -days 30 \
  -extfile server.ext -out server_certificate.pem 2>/dev/null
echo "extendedKeyUsage = clientAuth" > client.ext
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=Warren bench/CN=alice" \
  -keyout client_key.pem -out client.csr 2>/dev/null
openssl x509 -req -in client.csr -CA ca_certificate.pem -CAkey ca_key.pem -CAcreateserial -days 30 \
  -extfile client.ext -out client_certificate.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=Warren bench/CN=mallory" \
  -keyout mallory_key.pem -out mallory.csr 2>/dev/null
openssl x509 -req -in mallory.csr -CA ca_certificate.pem -CAkey ca_key.pem -CAcreateserial -days 30 \
  -extfile client.ext -out mallory_certificate.pem 2>/dev/null
# PKCS#12 for Java clients (PerfTest), password "bench".
openssl pkcs12 -export -in client_certificate.pem -inkey client_key.pem -passout pass:bench \
  -out client.p12 2>/dev/null
chmod 644 ./*.pem
rm -f server.csr client.csr mallory.csr server.ext client.ext
echo "certificates in $dir"
