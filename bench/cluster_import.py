#!/usr/bin/env python3
"""Import definitions with Q durable queues, Q/10 direct exchanges and B
bindings through one node's HTTP API; report how long the import took to
answer and how long until another node of the cluster lists every queue
and binding. The caller starts and removes the brokers.

usage: cluster_import.py API_URL OTHER_API_URL [Q] [B]

Talks only to the two URLs given (loopback), with guest:guest; stops by
itself.
"""
import base64
import json
import sys
import time
import urllib.request

AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def call(method, url, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    headers = dict(AUTH, **({"content-type": "application/json"} if data else {}))
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def main():
    api, other = sys.argv[1], sys.argv[2]
    q = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    b = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    nx = max(1, q // 10)
    defs = {
        "exchanges": [
            {"name": f"bench-imp-x{i}", "vhost": "/", "type": "direct", "durable": True,
             "auto_delete": False, "internal": False, "arguments": {}}
            for i in range(nx)
        ],
        "queues": [
            {"name": f"bench-imp-q{i}", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
            for i in range(q)
        ],
        "bindings": [
            {"source": f"bench-imp-x{j % nx}", "vhost": "/", "destination": f"bench-imp-q{j % q}",
             "destination_type": "queue", "routing_key": f"k{j}", "arguments": {}}
            for j in range(b)
        ],
    }
    t0 = time.time()
    call("POST", api + "/api/definitions", defs)
    took = time.time() - t0
    # Seen on another node: every queue and binding (polled, 60 s at most).
    deadline = time.time() + 60
    while True:
        qs = call("GET", other + "/api/queues/%2F?columns=name")
        bs = call("GET", other + "/api/bindings/%2F")
        nq = sum(1 for x in qs if x["name"].startswith("bench-imp-q"))
        nb = sum(1 for x in bs if x["source"].startswith("bench-imp-x"))
        if nq == q and nb == b:
            break
        if time.time() > deadline:
            print(f"import incomplete on the other node: {nq}/{q} queues, {nb}/{b} bindings")
            sys.exit(1)
        time.sleep(0.2)
    seen = time.time() - t0
    print(f"import {q} queues {b} bindings: answered {took:.2f} s, all on another node {seen:.2f} s")


if __name__ == "__main__":
    main()
