#!/usr/bin/env python3
"""A/B of two nidus binaries on the request path, side by side: both servers run at once
(one-member replica sets, as bench.py starts them) and the client alternates short rounds
between them, so load from elsewhere on the machine falls on both alike. Prints the median
rate and server CPU per operation of each workload for each binary.

    bench/.venv/bin/python bench/ab.py --a OLD_BIN --b NEW_BIN [--rounds 7] [--ops 2000]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pymongo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import free_port, wait_until  # noqa: E402


class Server:
    def __init__(self, binary, tmp, name, docs=10000):
        self.port = free_port()
        path = os.path.join(tmp, name)
        os.makedirs(path)
        self.log = open(os.path.join(tmp, f"{name}.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind_ip", "127.0.0.1", "--dbpath", path,
             "--replSet", "rs0"], stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.client = pymongo.MongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true", maxPoolSize=32)
        wait_until(lambda: self.client.admin.command("ping")["ok"] == 1, 30, name)
        self.ps = psutil.Process(self.proc.pid)
        self.coll = self.client.bench.docs
        for start in range(0, docs, 10000):
            self.coll.insert_many([{"_id": i, "k": i, "s": "x" * 100}
                                   for i in range(start, min(docs, start + 10000))])

    def cpu(self):
        # Nanoseconds on CPU of every thread (/proc/PID/task/*/schedstat), finer than the
        # 10 ms ticks of cpu_times; threads that ended are missed (the server's are
        # long-lived: runtime workers and blocking-pool threads kept alive between commands).
        total = 0
        base = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
        return total / 1e9

    def stop(self):
        self.client.close()
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


def work(server, name, n, threads=1):
    admin, coll = server.client.admin, server.coll

    def one(t):
        for i in range(n // threads):
            if name == "ping":
                admin.command("ping")
            elif name == "find_one":
                coll.find_one({"_id": i % 10000})
            elif name == "update_one":
                coll.update_one({"_id": i % 10000}, {"$inc": {"n": 1}})
            elif name == "insert_one":
                coll.insert_one({"k": i})
            elif name == "insert_many":
                coll.insert_many([{"k": j} for j in range(1000)])
            elif name == "insert_j":
                coll.with_options(write_concern=pymongo.WriteConcern(j=True)).insert_one(
                    {"k": i})
            elif name == "txn":
                # Commands of a multi-statement transaction (none runs inline).
                with server.client.start_session() as s, s.start_transaction():
                    coll.update_one({"_id": (i + t) % 10000}, {"$inc": {"n": 1}}, session=s)
                    coll.find_one({"_id": (i + t + 1) % 10000}, session=s)
            elif name == "agg_group":
                # A $group reading two fields of the collection (counted per document).
                out = list(coll.aggregate([{"$group": {
                    "_id": {"$mod": ["$k", 16]}, "n": {"$sum": 1}, "avg": {"$avg": "$k"}}}]))
                if len(out) != 16:
                    raise RuntimeError(f"$group returned {len(out)} groups")
            elif name == "agg_full":
                # The same after an $addFields: the stages read whole documents.
                out = list(coll.aggregate([{"$addFields": {"m": {"$mod": ["$k", 16]}}},
                                           {"$group": {"_id": "$m", "n": {"$sum": 1}}}]))
                if len(out) != 16:
                    raise RuntimeError(f"$group returned {len(out)} groups")
            elif name == "find_batch":
                # A find returning 101 documents and its getMore to the end (not inline).
                list(coll.find({"_id": {"$gte": 0, "$lt": 200}}))
    if threads == 1:
        one(0)
    else:
        ts = [threading.Thread(target=one, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--only", default="ping,find_one,update_one,insert_one,insert_many",
                   help="also: agg_group ($group of 10,000 documents, per document), "
                        "agg_full (the same after an $addFields: whole documents), "
                        "insert_j (j:true), txn (a transaction of an update and a "
                        "find), find_batch (a find and its getMore)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--docs", type=int, default=10000,
                   help="documents in the collection (agg_group and agg_full read them all; "
                        "a scan of 32,768 or more may be split between threads)")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="nidus-ab-")
    servers = {}
    try:
        servers = {"a": Server(args.a, tmp, "a", args.docs),
                   "b": Server(args.b, tmp, "b", args.docs)}
        # A replica-set member is busy for its first seconds (election, initial writes).
        time.sleep(5)
        for s in servers.values():
            for name in args.only.split(","):
                work(s, name, 2 if name in ("insert_many", "agg_group", "agg_full") else 200)
        for name in args.only.split(","):
            per_agg = max(2, args.ops * 20 // args.docs)
            n = {"insert_many": max(2, args.ops // 200), "agg_group": per_agg,
                 "agg_full": per_agg}.get(name, args.ops)
            docs = {"insert_many": 1000, "agg_group": args.docs, "agg_full": args.docs}.get(name, 1)
            res = {k: [] for k in servers}
            for r in range(args.rounds):
                for k in (("a", "b") if r % 2 == 0 else ("b", "a")):
                    s = servers[k]
                    c0, t0 = s.cpu(), time.perf_counter()
                    work(s, name, n, args.threads)
                    dt, dc = time.perf_counter() - t0, s.cpu() - c0
                    res[k].append((n * docs / dt, dc / (n * docs) * 1e6))
            line = [f"{name:12s}"]
            for k in servers:
                rate = statistics.median(x[0] for x in res[k])
                cpu = statistics.median(x[1] for x in res[k])
                line.append(f"{k}: {rate:9.0f}/s {cpu:7.1f} us/op")
            ra = statistics.median(x[0] for x in res["a"])
            rb = statistics.median(x[0] for x in res["b"])
            line.append(f"b/a {rb / ra:.2f}")
            print("  ".join(line), flush=True)
    finally:
        for s in servers.values():
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
