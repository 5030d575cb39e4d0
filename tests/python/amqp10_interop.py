"""AMQP 1.0 interop checks against a running Warren, with two real Python
clients: python-qpid-proton (the Apache Qpid client most 1.0 tools are
built on) and rabbitmq-amqp-python-client (RabbitMQ's own 1.0 client,
which declares topology through the management node at /management).

Usage: python3 amqp10_interop.py PORT
Prints one line per check and "N passed, M failed"; exits 1 on a failure.
"""

import signal
import sys
import time
import traceback
import uuid

from proton import Message
from proton.utils import BlockingConnection, SendException

from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    ClassicQueueSpecification,
    Environment,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    ValidationCodeException,
)
from rabbitmq_amqp_python_client import Message as RMessage

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 5672
URL = f"amqp://guest:guest@127.0.0.1:{PORT}"
CHECKS = []


def check(f):
    CHECKS.append(f)
    return f


def proton_conn():
    return BlockingConnection(URL, timeout=10, allowed_mechs="PLAIN")


def management_env():
    env = Environment(uri=URL + "/")
    conn = env.connection()
    conn.dial()
    return env, conn, conn.management()


def fresh_queue(mgmt, prefix, **kw):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    mgmt.declare_queue(ClassicQueueSpecification(name=name, **kw))
    return name


@check
def management_declares_inspects_binds_purges_and_deletes():
    env, conn, mgmt = management_env()
    try:
        q = fresh_queue(mgmt, "py-mgmt", max_len=1000)
        info = mgmt.queue_info(name=q)
        assert info.name == q, info.name
        assert info.is_durable and not info.is_exclusive and not info.is_auto_delete
        assert info.message_count == 0, info.message_count
        assert info.arguments.get("x-max-length") == 1000, info.arguments
        # The same declaration again is fine; a different one is refused.
        mgmt.declare_queue(ClassicQueueSpecification(name=q, max_len=1000))
        try:
            mgmt.declare_queue(ClassicQueueSpecification(name=q, max_len=5))
            raise AssertionError("an inequivalent redeclare must fail")
        except ValidationCodeException:
            pass
        x = f"py-x-{uuid.uuid4().hex[:8]}"
        mgmt.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.topic))
        binding = mgmt.bind(
            ExchangeToQueueBindingSpecification(source_exchange=x, destination_queue=q, binding_key="a.*")
        )
        publisher = conn.publisher(AddressHelper.exchange_address(x, "a.b"))
        for i in range(10):
            publisher.publish(RMessage(body=f"via-{i}".encode()))
        publisher.close()
        assert mgmt.queue_info(name=q).message_count == 10
        assert mgmt.purge_queue(q) == 10
        mgmt.unbind(binding)
        # Unbound: a publish to the exchange reaches nothing (released).
        publisher = conn.publisher(AddressHelper.exchange_address(x, "a.b"))
        try:
            publisher.publish(RMessage(body=b"nowhere"))
            raise AssertionError("an unroutable message must be released")
        except Exception as e:  # SendException(released)
            assert "AssertionError" not in type(e).__name__, e
        publisher.close()
        assert mgmt.queue_info(name=q).message_count == 0
        mgmt.delete_exchange(x)
        mgmt.delete_queue(q)
        try:
            mgmt.queue_info(name=q)
            raise AssertionError("a deleted queue has no info")
        except ValidationCodeException:
            pass
    finally:
        mgmt.close()
        conn.close()
        env.close()


@check
def rabbitmq_client_publishes_and_consumes_with_settlement():
    env, conn, mgmt = management_env()
    try:
        q = fresh_queue(mgmt, "py-consume")
        publisher = conn.publisher(AddressHelper.queue_address(q))
        for i in range(20):
            publisher.publish(RMessage(body=f"m{i}".encode()))
        publisher.close()

        got = []

        class Done(Exception):
            pass

        class Handler(AMQPMessagingHandler):
            def on_amqp_message(self, event):
                got.append(bytes(event.message.body))
                if len(got) % 2:
                    self.delivery_context.accept(event)
                else:
                    self.delivery_context.discard(event)
                if len(got) == 20:
                    # Leaves consumer.run(), as the client's own tests do.
                    raise Done()

        consumer = conn.consumer(AddressHelper.queue_address(q), message_handler=Handler(), credit=5)
        try:
            consumer.run()
        except Done:
            pass
        consumer.close()
        assert got == [f"m{i}".encode() for i in range(20)], got
        assert mgmt.queue_info(name=q).message_count == 0
        mgmt.delete_queue(q)
    finally:
        mgmt.close()
        conn.close()
        env.close()


@check
def proton_every_address_form_and_bodies_as_sent():
    env, conn, mgmt = management_env()
    q = fresh_queue(mgmt, "py-addr")
    x = f"py-ax-{uuid.uuid4().hex[:8]}"
    mgmt.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.direct))
    mgmt.bind(ExchangeToQueueBindingSpecification(source_exchange=x, destination_queue=q, binding_key="k"))
    c = proton_conn()
    try:
        forms = [f"/queues/{q}", f"/exchanges/{x}/k", f"/amq/queue/{q}", f"/queue/{q}", f"/exchange/{x}/k"]
        sent = []
        for i, addr in enumerate(forms):
            s = c.create_sender(addr)
            m = Message(body=f"text {i}", id=f"id-{i}", properties={"form": addr, "n": i})
            s.send(m)
            sent.append(m)
            s.close()
        # The null target: each message's `to` says where.
        s = c.create_sender(None)
        m = Message(address=f"/queues/{q}", body={"k": "a map body"}, id="id-null")
        s.send(m)
        sent.append(m)
        try:
            s.send(Message(address="/queues/no-such-queue-anywhere", body="lost"))
            raise AssertionError("a message to a missing queue must not be accepted")
        except SendException:
            pass
        s.close()
        # And every source form: two messages through each.
        sources = [f"/queues/{q}", f"/amq/queue/{q}", f"/queue/{q}"]
        for k, m in enumerate(sent):
            r = c.create_receiver(sources[k // 2], credit=1)
            got = r.receive(timeout=5)
            r.accept()
            r.close()
            assert got.body == m.body, (got.body, m.body)
            assert got.id == m.id, (got.id, m.id)
            if m.properties:
                assert got.properties == m.properties, (got.properties, m.properties)
            assert got.durable, "a message without a header is durable"
    finally:
        c.close()
        mgmt.delete_queue(q)
        mgmt.delete_exchange(x)
        mgmt.close()
        conn.close()
        env.close()


@check
def proton_every_property_comes_back_as_sent():
    """Each field of the properties section, set by qpid-proton, reaches a
    proton consumer unchanged (subject, to, group-sequence and the rest
    have no 0-9-1 field)."""
    env, conn, mgmt = management_env()
    q = fresh_queue(mgmt, "py-props")
    c = proton_conn()
    try:
        m = Message(
            body="props",
            id=uuid.UUID(int=42),
            user_id=b"guest",
            address=f"/queues/{q}",
            subject="greeting",
            reply_to="/queues/replies",
            correlation_id=1234,
            content_type="text/plain",
            content_encoding="utf-8",
            expiry_time=4102444800.123,
            creation_time=1764000000.456,
            group_id="g-1",
            group_sequence=7,
            reply_to_group_id="rg-1",
        )
        s = c.create_sender(f"/queues/{q}")
        s.send(m)
        s.close()
        r = c.create_receiver(f"/queues/{q}", credit=1)
        got = r.receive(timeout=5)
        r.accept()
        r.close()
        for field in (
            "id", "user_id", "address", "subject", "reply_to", "correlation_id", "content_type",
            "content_encoding", "expiry_time", "creation_time", "group_id", "group_sequence",
            "reply_to_group_id",
        ):
            assert getattr(got, field) == getattr(m, field), (field, getattr(got, field), getattr(m, field))
    finally:
        c.close()
        mgmt.delete_queue(q)
        mgmt.close()
        conn.close()
        env.close()


@check
def proton_credit_two_outcomes_and_requeue():
    env, conn, mgmt = management_env()
    q = fresh_queue(mgmt, "py-credit")
    c = proton_conn()
    try:
        s = c.create_sender(f"/queues/{q}")
        n = 500
        for i in range(n):
            s.send(Message(body=f"c{i}"))
        s.close()
        r = c.create_receiver(f"/queues/{q}", credit=2)
        for i in range(n - 2):
            got = r.receive(timeout=5)
            assert got.body == f"c{i}", (got.body, i)
            r.accept()
        # The last two: released comes back (redelivered), rejected is gone.
        a = r.receive(timeout=5)
        r.release(delivered=False)
        b = r.receive(timeout=5)
        r.reject()
        again = r.receive(timeout=5)
        assert again.body == a.body, (again.body, a.body)
        assert again.delivery_count == 0 and not again.first_acquirer
        r.accept()
        assert b.body == f"c{n - 1}"
        r.close()
        assert mgmt.queue_info(name=q).message_count == 0
    finally:
        c.close()
        mgmt.delete_queue(q)
        mgmt.close()
        conn.close()
        env.close()


def main():
    passed = failed = 0
    def too_slow(*_):
        raise TimeoutError("the check took over 60 s")

    signal.signal(signal.SIGALRM, too_slow)
    for f in CHECKS:
        t = time.time()
        try:
            signal.alarm(60)
            f()
            signal.alarm(0)
            passed += 1
            print(f"ok   {f.__name__} ({time.time() - t:.1f}s)", flush=True)
        except Exception:
            signal.alarm(0)
            failed += 1
            print(f"FAIL {f.__name__}", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
