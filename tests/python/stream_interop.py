"""Stream protocol interop checks against a running Warren with rstream,
the Python RabbitMQ Streams client: create, publish with confirms (plain
and in a compressed sub-entry batch), consume from first / an offset,
server-side offset tracking, and deduplication by producer name; and
streams through RabbitMQ's own AMQP 1.0 client (opened sub-entry
batches, stream filtering by annotation).

Usage: python3 stream_interop.py STREAM_PORT [AMQP_PORT]
Prints one line per check and "N passed, M failed"; exits 1 on a failure.
"""

import asyncio
import os
import sys
import time
import traceback
import uuid

from rstream import (
    AMQPMessage,
    CompressionType,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 5552
AMQP_PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 5672
AUTH = dict(username="guest", password="guest")
CHECKS = []


def check(f):
    CHECKS.append(f)
    return f


async def consume(stream, n, spec, name=None):
    """The first n (offset, body) pairs from spec."""
    got = []
    done = asyncio.Event()
    consumer = Consumer("127.0.0.1", PORT, **AUTH)
    await consumer.start()

    async def on_message(msg: AMQPMessage, ctx: MessageContext):
        if len(got) < n:
            got.append((ctx.offset, bytes(msg.body) if not isinstance(msg.body, list) else b"".join(msg.body)))
        if len(got) >= n:
            done.set()

    await consumer.subscribe(
        stream, on_message, decoder=amqp_decoder, offset_specification=spec, subscriber_name=name
    )
    try:
        await asyncio.wait_for(done.wait(), 15)
    finally:
        await consumer.close()
    return got


@check
async def publish_with_confirms_and_consume_from_first_and_an_offset():
    stream = f"py-{uuid.uuid4().hex[:8]}"
    confirmed = []
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.create_stream(stream, arguments={"max-length-bytes": 100_000_000})

        def on_confirm(s: ConfirmationStatus):
            if s.is_confirmed:
                confirmed.append(s.message_id)

        for i in range(50):
            await producer.send_wait(stream, AMQPMessage(body=f"m{i}".encode()))
        await producer.send_batch(stream, [AMQPMessage(body=f"b{i}".encode()) for i in range(50)])
        # A sub-entry batch, compressed: stored as sent, read back whole.
        await producer.send_sub_entry(
            stream,
            [AMQPMessage(body=f"z{i}".encode()) for i in range(20)],
            compression_type=CompressionType.Gzip,
            on_publish_confirm=on_confirm,
        )
        deadline = time.time() + 10
        while not confirmed and time.time() < deadline:
            await asyncio.sleep(0.05)
        assert confirmed, "the sub-entry batch was confirmed"
    got = await consume(stream, 120, ConsumerOffsetSpecification(OffsetType.FIRST, None))
    bodies = [b for _, b in got]
    assert bodies[:50] == [f"m{i}".encode() for i in range(50)], bodies[:5]
    assert bodies[50:100] == [f"b{i}".encode() for i in range(50)], bodies[50:55]
    assert bodies[100:] == [f"z{i}".encode() for i in range(20)], bodies[100:105]
    offsets = [o for o, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == 120
    mid = await consume(stream, 1, ConsumerOffsetSpecification(OffsetType.OFFSET, 60))
    assert mid[0] == (60, b"b10"), mid
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.delete_stream(stream)


@check
async def offsets_are_tracked_by_the_broker():
    stream = f"py-track-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.create_stream(stream)
        await producer.send_batch(stream, [AMQPMessage(body=b"x") for _ in range(10)])
    consumer = Consumer("127.0.0.1", PORT, **AUTH)
    await consumer.start()
    await consumer.create_stream(stream, exists_ok=True)
    await consumer.store_offset(stream, "py-reader", 7)
    stored = None
    for _ in range(50):
        try:
            stored = await consumer.query_offset(stream, "py-reader")
        except Exception:
            stored = None
        if stored == 7:
            break
        await asyncio.sleep(0.05)
    await consumer.close()
    assert stored == 7, stored


@check
async def a_named_producer_is_deduplicated():
    stream = f"py-dedup-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.create_stream(stream)
        for i in range(5):
            await producer.send_wait(stream, AMQPMessage(body=f"d{i}".encode()), publisher_name="py-writer")
    # A new connection, the same name: ids start after the last stored.
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        for i in range(5, 8):
            await producer.send_wait(stream, AMQPMessage(body=f"d{i}".encode()), publisher_name="py-writer")
    got = await consume(stream, 8, ConsumerOffsetSpecification(OffsetType.FIRST, None))
    assert [b for _, b in got] == [f"d{i}".encode() for i in range(8)], got


@check
async def sub_entry_batches_reach_amqp10_consumers_opened():
    """What rstream sends in compressed sub-entry batches reaches an AMQP
    1.0 consumer (RabbitMQ's own client, offset filter "first") one message
    at a time, decompressed, which RabbitMQ itself does not do."""
    from rabbitmq_amqp_python_client import (
        AddressHelper,
        AMQPMessagingHandler,
        Environment,
        OffsetSpecification,
        StreamConsumerOptions,
    )

    stream = f"py-sub-{uuid.uuid4().hex[:8]}"
    sent = []
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.create_stream(stream)
        # rstream ships the none and gzip codecs (the others are unit-tested
        # in warren-core).
        for codec in (CompressionType.No, CompressionType.Gzip):
            batch = [f"{codec.name}-{i}".encode() for i in range(5)]
            sent += batch
            done = asyncio.Event()
            await producer.send_sub_entry(
                stream,
                [AMQPMessage(body=b) for b in batch],
                compression_type=codec,
                on_publish_confirm=lambda s, d=done: d.set(),
            )
            await asyncio.wait_for(done.wait(), 10)

    def consume_over_amqp10():
        got = []

        class Done(Exception):
            pass

        class Handler(AMQPMessagingHandler):
            def on_amqp_message(self, event):
                got.append(bytes(event.message.body))
                self.delivery_context.accept(event)
                if len(got) == len(sent):
                    raise Done()

        env = Environment(uri=f"amqp://guest:guest@127.0.0.1:{AMQP_PORT}/")
        conn = env.connection()
        conn.dial()
        consumer = conn.consumer(
            AddressHelper.queue_address(stream),
            message_handler=Handler(),
            consumer_options=StreamConsumerOptions(offset_specification=OffsetSpecification.first),
        )
        try:
            consumer.run()
        except Done:
            pass
        consumer.close()
        conn.close()
        env.close()
        return got

    got = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, consume_over_amqp10), 30)
    assert got == sent, (got[:6], sent[:6])


@check
async def amqp10_filter_values_reach_an_amqp10_filtering_consumer():
    """RabbitMQ's own AMQP 1.0 client, both ends: the publisher sets the
    x-stream-filter-value annotation (10 banana, 10 apple, 10 without), the
    consumer attaches from "first" with the stream filter "banana" and gets
    the 10 bananas first (the Rust test checks that nothing follows)."""
    from rabbitmq_amqp_python_client import (
        AddressHelper,
        AMQPMessagingHandler,
        Converter,
        Environment,
        Message,
        OffsetSpecification,
        StreamConsumerOptions,
        StreamFilterOptions,
    )

    stream = f"py-filter-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", PORT, **AUTH) as producer:
        await producer.create_stream(stream)

    def publish_and_consume():
        env = Environment(uri=f"amqp://guest:guest@127.0.0.1:{AMQP_PORT}/")
        conn = env.connection()
        conn.dial()
        publisher = conn.publisher(AddressHelper.queue_address(stream))
        for kind in ("banana", "apple", None):
            for i in range(10):
                annotations = {"x-stream-filter-value": kind} if kind else None
                m = Message(body=Converter.string_to_bytes(f"{kind}-{i}"), annotations=annotations)
                publisher.publish(m)
        publisher.close()
        got = []

        class Done(Exception):
            pass

        class Handler(AMQPMessagingHandler):
            def on_amqp_message(self, event):
                got.append(Converter.bytes_to_string(event.message.body))
                self.delivery_context.accept(event)
                if len(got) == 10:
                    raise Done()

        consumer = conn.consumer(
            AddressHelper.queue_address(stream),
            message_handler=Handler(),
            consumer_options=StreamConsumerOptions(
                offset_specification=OffsetSpecification.first,
                filter_options=StreamFilterOptions(values=["banana"]),
            ),
        )
        try:
            consumer.run()
        except Done:
            pass
        consumer.close()
        conn.close()
        env.close()
        return got

    got = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, publish_and_consume), 30)
    assert got == [f"banana-{i}" for i in range(10)], got


async def main():
    passed = failed = 0
    for f in CHECKS:
        t = time.time()
        try:
            await asyncio.wait_for(f(), 60)
            passed += 1
            print(f"ok   {f.__name__} ({time.time() - t:.1f}s)", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {f.__name__}", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed", flush=True)
    # A check that timed out may leave a client thread blocked: do not
    # wait for it at exit.
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    asyncio.run(main())
