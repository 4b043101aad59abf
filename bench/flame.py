#!/usr/bin/env python3
"""Flame graphs of the server's request path: `ping`, point `find_one` by `_id`,
`update_one`, `insert_many` (and bench.py's bulk row), `insert_one` with `j: true`, and the `$group` and spilling `$sort`
of bench.py's sales.

Starts a nidus binary on a free 127.0.0.1 port with a temporary dbpath (as bench.py does:
a one-member replica set), inserts documents, then records the server with `perf record`
(DWARF call graphs) while one client runs each workload, and writes one SVG per workload
with `inferno-collapse-perf` and `inferno-flamegraph` (`cargo install inferno`). Also
prints the server CPU per operation and the client's rate for each workload.

    bench/.venv/bin/python bench/flame.py --nidus BIN --out bench/results --tag before
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import pymongo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import customer, free_port, make_docs, sale, wait_until  # noqa: E402
from bson.codec_options import CodecOptions  # noqa: E402
from bson.raw_bson import RawBSONDocument  # noqa: E402
from pymongo.write_concern import WriteConcern  # noqa: E402


def workloads(client):
    admin = client.admin
    coll = client["bench"]["docs"]

    def ping(n):
        for _ in range(n):
            admin.command("ping")

    def find_one(n):
        for i in range(n):
            if coll.find_one({"_id": i % 10000}) is None:
                raise RuntimeError(f"_id {i % 10000} not found")

    def update_one(n):
        for i in range(n):
            coll.update_one({"_id": i % 10000}, {"$inc": {"n": 1}})

    def insert_many(n):
        many = client["bench"]["many"]
        for _ in range(max(1, n // 1000)):
            many.insert_many([{"k": i, "s": "x" * 100} for i in range(1000)])

    def bulk_insert(n):
        # bench.py's bulk row: its documents, an index on `k`, batches of 1,000.
        bulk = client["bench"]["bulk"]
        bulk.drop()
        bulk.create_index("k")
        docs = make_docs(max(1000, n))
        for i in range(0, len(docs), 1000):
            bulk.insert_many(docs[i:i + 1000], ordered=True)

    sales = client["bench"]["sales"]

    def agg_group(n):
        # n is in documents grouped: whole passes over the sales collection.
        for _ in range(max(1, n // SALES)):
            out = list(sales.aggregate([{"$group": {
                "_id": "$k", "total": {"$sum": "$v"}, "n": {"$sum": 1}, "avg": {"$avg": "$v"}}}]))
            if len(out) != 16:
                raise RuntimeError(f"$group returned {len(out)} groups")

    def sort_spill(n):
        raw = sales.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
        for _ in range(max(1, n // SALES)):
            got = sum(1 for _ in raw.aggregate([{"$sort": {"r": 1}}], allowDiskUse=True,
                                               batchSize=10_000))
            if got != SALES:
                raise RuntimeError(f"$sort returned {got} documents")

    def lookup_noix(n):
        # n is in sales joined: 100 per query, as bench.py's row.
        for q in range(max(1, n // 100)):
            s = (q * 100) % SALES
            out = list(sales.aggregate([
                {"$match": {"_id": {"$gte": s, "$lt": s + 100}}},
                {"$lookup": {"from": "cust_noix", "localField": "cust", "foreignField": "cid",
                             "as": "customer"}}]))
            if len(out) != 100 or any(len(d["customer"]) != 1 for d in out):
                raise RuntimeError("$lookup returned the wrong customers")

    journaled = client["bench"].get_collection("insj", write_concern=WriteConcern(j=True))

    def insert_j1(n):
        # bench.py's `insert_one j:true` row: each insert waits for the WAL sync.
        for i in range(n):
            journaled.insert_one({"k": i, "s": "x" * 100})

    return {"ping": ping, "find_one": find_one, "update_one": update_one,
            "insert_many": insert_many, "bulk_insert": bulk_insert, "agg_group": agg_group, "sort_spill": sort_spill,
            "lookup_noix": lookup_noix, "insert_j1": insert_j1}


# The aggregation workloads' collection (bench.py's `sale` documents) and the sort memory
# limit that makes the sort spill (about five runs).
SALES = 200_000
SORT_MEMORY = 4 << 20


def record_flame(pid: int, work, title: str, data: str, freq: int = 999) -> bytes:
    """Runs `work` while `perf record` samples process `pid` (into the file `data`), and
    returns the flame graph (SVG) of the samples."""
    rec = subprocess.Popen(["perf", "record", "-q", "-F", str(freq), "--call-graph",
                            "dwarf,16384", "-p", str(pid), "-o", data],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    work()
    rec.send_signal(2)
    rec.wait()
    script = subprocess.run(["perf", "script", "-i", data], capture_output=True,
                            check=True).stdout
    folded = subprocess.run(["inferno-collapse-perf"], input=script,
                            capture_output=True, check=True).stdout
    return subprocess.run(["inferno-flamegraph", "--title", title], input=folded,
                          capture_output=True, check=True).stdout


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nidus", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", required=True, help="file name suffix, e.g. before or after")
    p.add_argument("--ops", type=int, default=20000)
    p.add_argument("--only", default="ping,find_one,update_one,insert_many")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="nidus-flame-")
    port = free_port()
    log = open(os.path.join(tmp, "nidus.log"), "wb")
    proc = subprocess.Popen([args.nidus, "--port", str(port), "--bind_ip", "127.0.0.1",
                             "--dbpath", tmp, "--replSet", "rs0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true")
        wait_until(lambda: client.admin.command("ping")["ok"] == 1, 30, "nidus")
        coll = client["bench"]["docs"]
        coll.insert_many([{"_id": i, "k": i, "s": "x" * 100} for i in range(10000)])
        if {"agg_group", "sort_spill", "lookup_noix"} & set(args.only.split(",")):
            client["bench"]["cust_noix"].insert_many([customer(c) for c in range(10_000)])
            for start in range(0, SALES, 10_000):
                client["bench"]["sales"].insert_many(
                    [sale(i, 10_000) for i in range(start, start + 10_000)])
            client.admin.command({"setParameter": 1,
                                  "internalQueryMaxBlockingSortMemoryUsageBytes": SORT_MEMORY})
        server = psutil.Process(proc.pid)
        for name, fn in workloads(client).items():
            if name not in args.only.split(","):
                continue
            fn(1000)
            c0 = sum(server.cpu_times()[:2])
            t0 = time.perf_counter()
            fn(args.ops)
            elapsed = time.perf_counter() - t0
            cpu = sum(server.cpu_times()[:2]) - c0
            print(f"{name}: {args.ops / elapsed:.0f} ops/s, server CPU "
                  f"{cpu / args.ops * 1e6:.1f} us/op", flush=True)
            data = os.path.join(tmp, f"{name}.data")
            svg = record_flame(proc.pid, lambda: fn(args.ops // 2), f"nidus {name} ({args.tag})",
                               data, freq=499)
            with open(os.path.join(args.out, f"flame-{name}-{args.tag}.svg"), "wb") as f:
                f.write(svg)
        client.close()
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
