"""Summarise bench/client.sh's rows: warren-client beside the better of
lapin and amqprs at each point, with CPU time and context switches per
message; dispatch concurrency against its targets; memory. A point run
more than once (REPEAT) reads as its median rate, CPU and switches."""
import statistics
import sys

rows = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    r = {"client": f[0], "workload": f[1]}
    for kv in f[2:]:
        if "=" in kv:
            k, v = kv.split("=", 1)
            r[k] = v
    rows.append(r)


def point(workload, key, size, k):
    """Each client's row at one point; repeated runs as their medians."""
    runs = {}
    for r in rows:
        if r["workload"] == workload and int(r["size"]) == size and int(r[key]) == k:
            runs.setdefault(r["client"], []).append(r)
    at = {}
    for client, rs in runs.items():
        m = dict(rs[-1])
        for f in ("rate", "cpu_us_per_msg", "csw_per_msg"):
            m[f] = str(statistics.median(float(r[f]) for r in rs))
        m["runs"] = len(rs)
        at[client] = m
    return at


def table(workload, key, label):
    points = sorted({(int(r["size"]), int(r[key])) for r in rows if r["workload"] == workload})
    repeats = max((sum(1 for r in rows if r["workload"] == workload and r["client"] == "Warren"
                       and int(r["size"]) == s and int(r[key]) == k) for s, k in points), default=1)
    print(f"\n{label}" + (f" (each figure the median of {repeats} runs)" if repeats > 1 else ""))
    print("| size | %s | warren msg/s | lapin | amqprs | ratio to the better | CPU µs/msg w/l/a | csw/msg w/l/a |" % key)
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for size, k in points:
        at = point(workload, key, size, k)
        if len(at) < 3:
            continue
        w, l, a = (float(at[c]["rate"]) for c in ("Warren", "Lapin", "Amqprs"))
        cpu = "/".join(at[c]["cpu_us_per_msg"] for c in ("Warren", "Lapin", "Amqprs"))
        csw = "/".join(at[c]["csw_per_msg"] for c in ("Warren", "Lapin", "Amqprs"))
        print(f"| {size} | {k} | {w:.0f} | {l:.0f} | {a:.0f} | {w / max(l, a):.2f} | {cpu} | {csw} |")
    floored = [(size, k) for size, k in points
               if any(r["client"] == "Floor" and r["workload"] == workload
                      and int(r["size"]) == size and int(r[key]) == k for r in rows)]
    if floored:
        print(f"\n{label}: the floor (raw frames, a blocking socket, one thread)")
        print("| size | %s | floor msg/s | warren as a share of it | the better of lapin, amqprs as a share | "
              "the most any client could beat that one by | CPU µs/msg |" % key)
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for size, k in floored:
            at = point(workload, key, size, k)
            if not all(c in at for c in ("Floor", "Warren", "Lapin", "Amqprs")):
                continue
            f, w, l, a = (float(at[c]["rate"]) for c in ("Floor", "Warren", "Lapin", "Amqprs"))
            print(f"| {size} | {k} | {f:.0f} | {w / f * 100:.0f} % | {max(l, a) / f * 100:.0f} % | "
                  f"{f / max(l, a):.2f}x | {at['Floor']['cpu_us_per_msg']} |")
    polled = [(size, k) for size, k in points
              if any(r["client"] == "WarrenBusyPoll" and r["workload"] == workload
                     and int(r["size"]) == size and int(r[key]) == k for r in rows)]
    if not polled:
        return
    print(f"\n{label}, warren-client with busy_poll(100 µs)")
    print("| size | %s | warren busy-poll msg/s | as it comes | ratio to the better of lapin, amqprs | CPU µs/msg | csw/msg |" % key)
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size, k in polled:
        at = point(workload, key, size, k)
        if len(at) < 4:
            continue
        p, w, l, a = (float(at[c]["rate"]) for c in ("WarrenBusyPoll", "Warren", "Lapin", "Amqprs"))
        b = at["WarrenBusyPoll"]
        print(f"| {size} | {k} | {p:.0f} | {w:.0f} | {p / max(l, a):.2f} | {b['cpu_us_per_msg']} | {b['csw_per_msg']} |")


for r in rows:
    if r["workload"] == "RoundTrip":
        how = " with busy_poll" if r["client"] == "WarrenBusyPoll" else ""
        print(f"Synchronous round trips (basic.qos, warren-client{how}): {float(r['rate']):.0f} a second, "
              f"{1e6 / float(r['rate']):.0f} µs each: the floor under one publish in flight")
table("Publish", "in_flight", "Confirmed publishing")
table("Consume", "ack_every", "Consuming with acks (multiple every N)")
print("\nDispatch concurrency (warren-client)")
print("| handler | concurrency | msg/s | handler's mean | ideal msg/s | CPU µs/msg |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    if r["workload"] == "Dispatch":
        print(f"| {r['handler_ms']} ms | {r['concurrency']} | {float(r['rate']):.0f} | "
              f"{r.get('handler_mean_ms', '-')} ms | {r.get('ideal_rate', '-')} | {r['cpu_us_per_msg']} |")
zero = {n: [float(r["rate"]) for r in rows
            if r["workload"] == "Dispatch" and r["handler_ms"] == "0" and r["concurrency"] == n]
        for n in ("1", "32")}
if zero["1"] and zero["32"]:
    m1, m32 = (sum(v) / len(v) for v in (zero["1"], zero["32"]))
    print(f"\n0 ms handler, mean of {len(zero['32'])} runs each: {m32:.0f} msg/s at 32, "
          f"{m1:.0f} at 1: {m32 / m1 * 100:.0f} %")
for r in rows:
    if r["workload"] == "Memory":
        a, b = float(r["rss_kib_first_half"]), float(r["rss_kib_second_half"])
        print(f"\nMemory: consumed {r['msgs']}, published {r['published']} in {r['secs']} s; "
              f"RSS {a:.0f} KiB first half, {b:.0f} KiB second half ({(b - a) / a * 100:+.1f} %); "
              f"samples {r['rss_kib_samples']}")
