"""Replicated streams on three Warren nodes with rstream (issue 18): the
Metadata names the leader and two replicas; a producer through another
node publishes on the leader and a consumer reads from a replica; then
the leader's node is killed with SIGKILL under a named producer, a new
leader is listed, and the producer, back under its name, sends every
message again plus more: each confirmed message is read once, in order,
the resent ones deduplicated.

Usage: python3 stream_cluster_interop.py PORT1 PORT2 PORT3 PID1
(the stream ports of the three nodes; PID1 is node 1's process, which
the last check kills). Prints one line per check and "N passed, M
failed"; exits 1 on a failure.
"""

import asyncio
import os
import signal
import sys
import time
import traceback
import uuid

from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

PORTS = [int(p) for p in sys.argv[1:4]]
PID1 = int(sys.argv[4])
AUTH = dict(username="guest", password="guest")
CHECKS = []


def check(f):
    CHECKS.append(f)
    return f


async def members(port, stream):
    """(leader port, sorted replica ports) as node `port` lists them."""
    async with Producer("127.0.0.1", port, **AUTH) as p:
        client = await p.default_client
        leader, replicas = await client.query_leader_and_replicas(stream)
        return leader.port, sorted(r.port for r in replicas)


async def consume(port, stream, n):
    """The first n (offset, body) pairs from the start, read by a consumer
    that connected to `port` (rstream reads from a replica when the
    Metadata lists one)."""
    got = []
    done = asyncio.Event()
    consumer = Consumer("127.0.0.1", port, **AUTH)
    await consumer.start()

    async def on_message(msg: AMQPMessage, ctx: MessageContext):
        if len(got) < n:
            got.append((ctx.offset, bytes(msg.body) if not isinstance(msg.body, list) else b"".join(msg.body)))
        if len(got) >= n:
            done.set()

    await consumer.subscribe(
        stream, on_message, decoder=amqp_decoder,
        offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
    )
    try:
        await asyncio.wait_for(done.wait(), 20)
    finally:
        await consumer.close()
    return got


async def publish_named(port, stream, name, ids):
    """Send ids (explicit publishing ids) under producer `name`; every one
    must be confirmed."""
    confirmed = set()
    async with Producer("127.0.0.1", port, **AUTH) as producer:

        def on_confirm(s: ConfirmationStatus):
            if s.is_confirmed:
                confirmed.add(s.message_id)

        batch = []
        for i in ids:
            # A namedtuple underneath: the id cannot go to the constructor.
            m = AMQPMessage(body=f"k{i}".encode())
            m.publishing_id = i
            batch.append(m)
        for k in range(0, len(batch), 100):
            await producer.send_batch(stream, batch[k:k + 100], publisher_name=name, on_publish_confirm=on_confirm)
        deadline = time.time() + 20
        while len(confirmed) < len(ids) and time.time() < deadline:
            await asyncio.sleep(0.05)
    assert confirmed == set(ids), f"{len(confirmed)} of {len(ids)} confirmed"


@check
async def a_stream_is_replicated_and_a_replica_serves_its_consumer():
    stream = f"pyc-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", PORTS[0], **AUTH) as producer:
        await producer.create_stream(stream)
    deadline = time.time() + 15
    while True:
        listed = [await members(p, stream) for p in PORTS]
        want = (PORTS[0], sorted(PORTS[1:]))
        if all(m == want for m in listed):
            break
        assert time.time() < deadline, listed
        await asyncio.sleep(0.2)
    # Through node 2: rstream publishes on the leader (node 1).
    async with Producer("127.0.0.1", PORTS[1], **AUTH) as producer:
        await producer.send_batch(stream, [AMQPMessage(body=f"r{i}".encode()) for i in range(500)])
        for i in range(500, 600):
            await producer.send_wait(stream, AMQPMessage(body=f"r{i}".encode()))
    got = await consume(PORTS[2], stream, 600)
    assert [b for _, b in got] == [f"r{i}".encode() for i in range(600)], got[:3]
    assert [o for o, _ in got] == list(range(600)), got[:3]


@check
async def the_leaders_kill9_loses_no_confirmed_message_and_resends_are_deduplicated():
    stream = f"pyk-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", PORTS[0], **AUTH) as producer:
        await producer.create_stream(stream)
    deadline = time.time() + 15
    while (await members(PORTS[1], stream)) != (PORTS[0], sorted(PORTS[1:])):
        assert time.time() < deadline
        await asyncio.sleep(0.2)
    await publish_named(PORTS[1], stream, "py-k", range(300))
    os.kill(PID1, signal.SIGKILL)
    deadline = time.time() + 30
    while True:
        try:
            leader, replicas = await members(PORTS[1], stream)
            if leader in PORTS[1:] and replicas == [p for p in PORTS[1:] if p != leader]:
                break
        except Exception:
            pass
        assert time.time() < deadline, "no new leader"
        await asyncio.sleep(0.2)
    # Back under its name: 0..300 again (duplicates) and 300..600.
    await publish_named(PORTS[1], stream, "py-k", range(600))
    got = await consume(PORTS[2], stream, 600)
    assert [b for _, b in got] == [f"k{i}".encode() for i in range(600)], got[:3]
    offsets = [o for o, _ in got]
    assert offsets == sorted(set(offsets)), "offsets only grow"


async def main():
    passed = failed = 0
    for f in CHECKS:
        t = time.time()
        try:
            await asyncio.wait_for(f(), 90)
            passed += 1
            print(f"ok   {f.__name__} ({time.time() - t:.1f}s)", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {f.__name__}", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed", flush=True)
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    asyncio.run(main())
