#!/usr/bin/env python3
"""Open N idle AMQP 1.0 connections (SASL PLAIN, open, two sessions each)
to a broker and report how much the broker's resident memory grew per
connection.

usage: idle_amqp10.py HOST PORT BROKER_PID [N]

Frames are written by hand (no client library): the protocol headers, a
sasl-init, an open and two begins. The script holds the connections for a
few seconds, reads VmRSS from /proc, and closes everything. It talks only
to HOST:PORT and stops by itself.
"""
import asyncio
import struct
import sys
import time


def sym(s):
    return b"\xa3" + bytes([len(s)]) + s


def vbin(b):
    return b"\xa0" + bytes([len(b)]) + b


def string(s):
    return b"\xa1" + bytes([len(s)]) + s


def uint(v):
    return b"\x70" + struct.pack(">I", v)


def described_list(code, items):
    body = b"".join(items)
    return b"\x00\x53" + bytes([code]) + b"\xc0" + bytes([len(body) + 1, len(items)]) + body


def frame(kind, channel, body):
    return struct.pack(">IBBH", 8 + len(body), 2, kind, channel) + body


async def read_frame(reader):
    size = struct.unpack(">I", await reader.readexactly(4))[0]
    return await reader.readexactly(size - 4)


async def connect(host, port):
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"AMQP\x03\x01\x00\x00")
    assert await reader.readexactly(8) == b"AMQP\x03\x01\x00\x00"
    await read_frame(reader)  # sasl-mechanisms
    writer.write(frame(1, 0, described_list(0x41, [sym(b"PLAIN"), vbin(b"\x00guest\x00guest")])))
    outcome = await read_frame(reader)
    assert outcome[-1] == 0 or b"\x50\x00" in outcome, outcome
    writer.write(b"AMQP\x00\x01\x00\x00")
    assert await reader.readexactly(8) == b"AMQP\x00\x01\x00\x00"
    writer.write(frame(0, 0, described_list(0x10, [string(b"idle")])))
    for ch in (0, 1):
        writer.write(frame(0, ch, described_list(0x11, [b"\x40", uint(0), uint(100), uint(100)])))
    for _ in range(3):  # open, begin, begin
        await read_frame(reader)
    return reader, writer


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def main():
    host, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    before = rss_kib(pid)
    conns = []
    t0 = time.time()
    for i in range(0, n, 250):
        conns += await asyncio.gather(*(connect(host, port) for _ in range(min(250, n - i))))
    opened = time.time() - t0
    await asyncio.sleep(5)
    after = rss_kib(pid)
    for _, w in conns:
        w.close()
    print(f"connections={n} sessions_each=2 opened_in={opened:.1f}s rss_before_kib={before} rss_after_kib={after} "
          f"per_connection_kib={(after - before) / n:.1f}")


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), timeout=600))
