"""TLS interop checks against a running Warren with Python clients: pika
over AMQPS (PLAIN, and EXTERNAL with client certificates), python-qpid-
proton over AMQPS (AMQP 1.0), rstream over TLS (PLAIN and EXTERNAL), and
the management API over HTTPS.

Warren must run with the certificates of tools/tls-certs.sh in CERT_DIR,
ssl_options.verify = verify_peer, EXTERNAL among auth_mechanisms and
ssl_cert_login_from = common_name; the user alice is made over HTTPS.

Usage: python3 tls_interop.py AMQPS_PORT STREAMS_PORT HTTPS_PORT CERT_DIR
Prints one line per check and "N passed, M failed"; exits 1 on a failure.
"""

import asyncio
import base64
import json
import ssl
import sys
import traceback
import urllib.request
import uuid

import pika
from proton import Message, SSLDomain
from proton.utils import BlockingConnection
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer
from rstream.constants import SlasMechanism

AMQPS, STREAMS, HTTPS, CERTS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
CA = f"{CERTS}/ca_certificate.pem"
CHECKS = []


def check(f):
    CHECKS.append(f)
    return f


def context(client=None):
    ctx = ssl.create_default_context(cafile=CA)
    if client:
        ctx.load_cert_chain(f"{CERTS}/{client}_certificate.pem", f"{CERTS}/{client}_key.pem")
    return ctx


def pika_connect(credentials, client=None):
    params = pika.ConnectionParameters(
        host="localhost",
        port=AMQPS,
        ssl_options=pika.SSLOptions(context(client), "localhost"),
        credentials=credentials,
    )
    return pika.BlockingConnection(params)


def api(path, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"https://localhost:{HTTPS}{path}", data=data, method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, context=context(), timeout=10) as r:
        text = r.read()
        return json.loads(text) if text else None


def pika_round_trip(conn):
    ch = conn.channel()
    q = f"tls-{uuid.uuid4()}"
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"over TLS" * 1000)
    for _ in range(50):
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method:
            assert body == b"over TLS" * 1000
            return
        conn.sleep(0.02)
    raise AssertionError("the message did not come back")


@check
def pika_plain_login_over_tls():
    conn = pika_connect(pika.PlainCredentials("guest", "guest"))
    pika_round_trip(conn)
    conns = api("/api/connections")
    mine = [c for c in conns if c["port"] == AMQPS and c["user"] == "guest"]
    assert mine and mine[0]["ssl"] is True and mine[0]["ssl_protocol"] == "tlsv1.3", conns
    conn.close()


@check
def pika_external_logs_in_as_the_certificate_cn():
    conn = pika_connect(pika.credentials.ExternalCredentials(), client="client")
    pika_round_trip(conn)
    conns = api("/api/connections")
    alice = [c for c in conns if c["user"] == "alice"]
    assert alice and alice[0]["auth_mechanism"] == "EXTERNAL", conns
    assert alice[0]["peer_cert_subject"] == "CN=alice,O=Warren bench", alice[0]["peer_cert_subject"]
    conn.close()


@check
def pika_external_with_an_unknown_cn_is_refused():
    try:
        pika_connect(pika.credentials.ExternalCredentials(), client="mallory").close()
    except pika.exceptions.AMQPConnectionError:
        return
    raise AssertionError("mallory is no user and must be refused")


@check
def proton_amqp10_over_tls():
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(CA)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    # No virtual_host: proton sends it as the TLS server name too, and
    # rustls refuses "vhost:/" as an SNI host name (the default vhost is
    # taken when the open's hostname names none).
    conn = BlockingConnection(
        f"amqps://localhost:{AMQPS}", ssl_domain=domain, user="guest", password="guest",
        allowed_mechs="PLAIN", timeout=10,
    )
    q = f"p-{uuid.uuid4()}"
    pika_conn = pika_connect(pika.PlainCredentials("guest", "guest"))
    pika_conn.channel().queue_declare(q)
    sender = conn.create_sender(f"/queues/{q}")
    sender.send(Message(body="hello over TLS"))
    receiver = conn.create_receiver(f"/queues/{q}")
    m = receiver.receive(timeout=10)
    receiver.accept()
    assert m.body == "hello over TLS", m.body
    conn.close()
    pika_conn.channel().queue_delete(q)
    pika_conn.close()


async def stream_round_trip(mechanism, client):
    kw = dict(
        host="localhost", port=STREAMS, ssl_context=context(client), username="guest", password="guest",
        sasl_configuration_mechanism=mechanism,
    )
    s = f"tls-stream-{uuid.uuid4()}"
    async with Producer(**kw) as p:
        await p.create_stream(s)
        for i in range(10):
            await p.send_wait(s, f"m{i}".encode())
    got = []
    done = asyncio.Event()

    async def on_message(msg, ctx):
        got.append(bytes(msg.body) if hasattr(msg, "body") else bytes(msg))
        if len(got) == 10:
            done.set()

    async with Consumer(**kw) as c:
        await c.subscribe(
            s, on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        )
        await asyncio.wait_for(done.wait(), 10)
        await c.delete_stream(s)
    assert len(got) == 10, got


@check
def rstream_plain_login_over_tls():
    asyncio.run(asyncio.wait_for(stream_round_trip(SlasMechanism.MechanismPlain, None), 30))


@check
def rstream_external_login():
    asyncio.run(asyncio.wait_for(stream_round_trip(SlasMechanism.MechanismExternal, "client"), 30))


def main():
    api("/api/users/alice", "PUT", {"password": "unused", "tags": ""})
    api("/api/permissions/%2F/alice", "PUT", {"configure": ".*", "write": ".*", "read": ".*"})
    passed = failed = 0
    for f in CHECKS:
        try:
            f()
            print(f"ok   {f.__name__}")
            passed += 1
        except Exception:
            print(f"FAIL {f.__name__}")
            traceback.print_exc()
            failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
