"""The publishing gap of a quorum queue when its leader's node fails.

One publisher (pika, confirms, one message in flight) on a node that
survives, publishing to a quorum queue whose leader is on another node;
after WARMUP seconds the script runs FAULT (a shell command: kill -9, or
SIGSTOP, of the leader's node) and goes on for AFTER seconds. It prints
the longest time between two confirmed publishes after the fault (the
gap), how many were confirmed before and after, and how many were nacked
or failed. A nack or a channel error is retried on a new channel; the
clock keeps running, so the gap includes them.

    python3 bench/quorum_gap.py PORT QUEUE 'kill -9 1234' [WARMUP] [AFTER]
"""

import subprocess
import sys
import time

import pika


def main():
    port, queue, fault = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    warmup = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
    after = float(sys.argv[5]) if len(sys.argv) > 5 else 20.0
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=0,
        blocked_connection_timeout=60,
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    body = b"x" * 1000
    start = time.monotonic()
    faulted_at = None
    last_ok = None
    gap = 0.0
    before = after_n = failed = 0
    while True:
        now = time.monotonic()
        if faulted_at is None and now - start >= warmup:
            subprocess.run(fault, shell=True, check=True)
            faulted_at = time.monotonic()
        if faulted_at is not None and now - faulted_at >= after:
            break
        try:
            ch.basic_publish(
                "", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=False
            )
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
            failed += 1
            continue
        except pika.exceptions.AMQPError:
            failed += 1
            time.sleep(0.05)
            try:
                if conn.is_closed:
                    conn = pika.BlockingConnection(params)
                ch = conn.channel()
                ch.confirm_delivery()
            except pika.exceptions.AMQPError:
                pass
            continue
        t = time.monotonic()
        if faulted_at is None:
            before += 1
        else:
            after_n += 1
            gap = max(gap, t - max(last_ok, faulted_at) if last_ok else t - faulted_at)
        last_ok = t
    if after_n == 0:
        gap = time.monotonic() - faulted_at
    print(
        f"gap {gap:.3f} s; confirmed {before} before, {after_n} after; "
        f"nacked or failed {failed}"
    )


if __name__ == "__main__":
    main()
