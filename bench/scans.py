#!/usr/bin/env python3
"""Queries no index serves (issue 24's table), ArborDB alone, through
pymongo: loads N documents of about 1 KB ({_id, k: random int, s: 900
letters, arr: [2 ints]}) into a fresh server with a 128 MiB cache, then
times each query once. A stopgap until issue 24's benchmark runs
PostgreSQL beside it; its PostgreSQL figures are in docs/performance.md.

    python3 bench/scans.py [--docs 1000000] [--binary target/release/arbordb]
"""

import argparse
import json
import random
import shutil
import socket
import string
import subprocess
import tempfile
import time

from pymongo import MongoClient


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--binary", default="target/release/arbordb")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="arbordb-scans-")
    port = free_port()
    server = subprocess.Popen(
        [args.binary, "serve", "--port", str(port), "--dbpath", data, "--cache-mib", "128"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = MongoClient(port=port, serverSelectionTimeoutMS=10_000).test.t
        rng = random.Random(1)
        letters = "".join(rng.choice(string.ascii_letters) for _ in range(900))
        began = time.time()
        for b in range(0, args.docs, 1000):
            c.insert_many([{"_id": i, "k": rng.randrange(1_000_000), "s": letters, "arr": [i, i + 1]}
                           for i in range(b, min(b + 1000, args.docs))], ordered=False)
            if b % 100_000 == 0:
                print(f"  load: {b}/{args.docs}", flush=True)
        results = {"docs": args.docs, "load_s": round(time.time() - began, 2)}
        queries = {
            "count k < 1000": lambda: c.count_documents({"k": {"$lt": 1000}}),
            "group by k mod 10": lambda: len(list(c.aggregate(
                [{"$group": {"_id": {"$mod": ["$k", 10]}, "n": {"$sum": 1}}}]))),
            "sort by k, limit 5": lambda: len(list(c.find({}, {"_id": 1}).sort("k", -1).limit(5))),
            "count all": lambda: c.count_documents({}),
        }
        for name, run in queries.items():
            began = time.time()
            run()
            results[name] = round(time.time() - began, 3)
            print(f"{name}: {results[name]} s", flush=True)
        print(json.dumps(results))
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
