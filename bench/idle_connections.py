#!/usr/bin/env python3
"""Open N idle AMQP 0-9-1 connections (one channel each) to a broker and
report how much the broker's resident memory grew per connection.

usage: idle_connections.py HOST PORT BROKER_PID [N] [CA_FILE]

With CA_FILE the connections are AMQP over TLS (verified against CA_FILE,
server name "localhost"); the time to open them gives a rate of new
connections per second, 250 handshakes in flight at a time.

Each connection does the whole handshake by hand (PLAIN guest/guest,
accepting the broker's tune values, heartbeat included) and opens channel 1;
the script answers heartbeats so nothing times out, holds all connections
for a few seconds, reads VmRSS from /proc, and closes everything. It talks
only to HOST:PORT and stops by itself.
"""
import asyncio
import struct
import sys
import time


def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel, class_id, method_id, args=b""):
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


def shortstr(s):
    return struct.pack(">B", len(s)) + s


def longstr(s):
    return struct.pack(">I", len(s)) + s


async def read_frame(reader):
    head = await reader.readexactly(7)
    kind, channel, size = struct.unpack(">BHI", head)
    payload = await reader.readexactly(size + 1)
    return kind, channel, payload[:-1]


async def read_method(reader):
    while True:
        kind, channel, payload = await read_frame(reader)
        if kind == 1:
            return struct.unpack(">HH", payload[:4]), payload[4:]


async def connect(host, port, tls=None):
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname="localhost" if tls else None)
    writer.write(b"AMQP\x00\x00\x09\x01")
    (c, m), _ = await read_method(reader)
    assert (c, m) == (10, 10), (c, m)
    start_ok = struct.pack(">I", 0) + shortstr(b"PLAIN") + longstr(b"\x00guest\x00guest") + shortstr(b"en_US")
    writer.write(method(0, 10, 11, start_ok))
    (c, m), args = await read_method(reader)
    assert (c, m) == (10, 30), (c, m)
    channel_max, frame_max, heartbeat = struct.unpack(">HIH", args[:8])
    writer.write(method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, heartbeat)))
    writer.write(method(0, 10, 40, shortstr(b"/") + shortstr(b"") + b"\x00"))
    (c, m), _ = await read_method(reader)
    assert (c, m) == (10, 41), (c, m)
    writer.write(method(1, 20, 10, shortstr(b"")))
    (c, m), _ = await read_method(reader)
    assert (c, m) == (20, 11), (c, m)
    return reader, writer, heartbeat


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def main():
    host, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
    tls = None
    if len(sys.argv) > 5:
        import ssl
        tls = ssl.create_default_context(cafile=sys.argv[5])
    before = rss_kib(pid)
    conns = []
    t0 = time.time()
    for i in range(0, n, 250):
        conns += await asyncio.gather(*(connect(host, port, tls) for _ in range(min(250, n - i))))
    opened = time.time() - t0
    heartbeat = conns[0][2]
    # Hold them; answer the broker's heartbeat interval with our own.
    deadline = time.time() + 10
    while time.time() < deadline:
        if heartbeat:
            for _, w, _ in conns:
                w.write(frame(8, 0, b""))
        await asyncio.sleep(2)
    after = rss_kib(pid)
    for _, w, _ in conns:
        w.close()
    print(f"connections={n} opened_in={opened:.1f}s opened_per_s={n / opened:.0f} "
          f"rss_before_kib={before} rss_after_kib={after} "
          f"per_connection_kib={(after - before) / n:.1f}")


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), timeout=300))
