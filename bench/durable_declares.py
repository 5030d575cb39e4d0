#!/usr/bin/env python3
"""Declare N durable queues one by one on one channel, each waiting for
its declare-ok (as an application declaring its topology at start does),
then delete them the same way; report the time at every 1,000th.

usage: durable_declares.py HOST PORT [N]

A declare-ok promises the queue survives a restart, so a broker must put
each declaration on disk before answering: what this measures is the cost
of that, and whether it grows with the number of queues already there.
Uses the hand-written handshake of idle_connections.py (no client
library). Talks only to HOST:PORT and stops by itself.
"""
import asyncio
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idle_connections import connect, method, read_method, shortstr  # noqa: E402


async def each(reader, writer, names, build, reply):
    """Send one method per name, awaiting its reply before the next;
    the elapsed seconds at every 1,000th."""
    marks = []
    t0 = time.time()
    for i, name in enumerate(names, 1):
        writer.write(build(name))
        (c, m), _ = await read_method(reader)
        assert (c, m) == reply, (c, m, name)
        if i % 1000 == 0 or i == len(names):
            marks.append((i, time.time() - t0))
    return marks


async def main():
    host, port = sys.argv[1], int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    reader, writer, _ = await connect(host, port)
    names = [f"bench-decl-{i:05}".encode() for i in range(n)]
    # queue.declare: reserved-1, queue, bits (durable = 2), arguments {}.
    declare = lambda q: method(1, 50, 10, struct.pack(">H", 0) + shortstr(q) + b"\x02" + struct.pack(">I", 0))
    # queue.delete: reserved-1, queue, bits (none).
    delete = lambda q: method(1, 50, 40, struct.pack(">H", 0) + shortstr(q) + b"\x00")
    declared = await each(reader, writer, names, declare, (50, 11))
    deleted = await each(reader, writer, names, delete, (50, 41))
    writer.close()
    print("declare " + " ".join(f"{i}:{t:.2f}" for i, t in declared))
    print("delete " + " ".join(f"{i}:{t:.2f}" for i, t in deleted))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), timeout=900))
