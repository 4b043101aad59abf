#!/usr/bin/env python3
"""Instruction counts of the server's request path under callgrind: repeatable on a shared
machine where wall-clock rates are noise.

Starts a nidus binary (build it with `cargo build --profile profiling` for line tables)
under `valgrind --tool=callgrind` with collection off, as a one-member replica set (as
bench.py starts it) on a free 127.0.0.1 port with a temporary dbpath, loads 10,000
documents, and for each workload: runs it once to warm up, switches collection on
(`callgrind_control -i on`), runs `--ops` operations from one pymongo client, dumps and
switches collection off. Prints the server's instructions per operation (every thread) and
writes `callgrind-<workload>-<tag>.txt` into `--out`: the total, and the functions with the
largest inclusive and self counts per operation (`callgrind_annotate`), the call-graph
summary committed beside each optimization.

    bench/.venv/bin/python bench/callgrind.py --nidus BIN --out bench/results --tag before
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pymongo
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import free_port, make_doc_range, sale, wait_until  # noqa: E402


def workloads(client):
    admin = client.admin
    coll = client["bench"]["docs"]
    wc_j = pymongo.WriteConcern(j=True)

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

    def insert_one(n):
        ins = client["bench"]["ins"]
        for i in range(n):
            ins.insert_one({"k": i, "s": "x" * 100})

    def insert_many(n):
        many = client["bench"]["many"]
        for _ in range(max(1, n // 100)):
            many.insert_many([{"k": i, "s": "x" * 100} for i in range(100)])

    bulk = client["bench"]["bulk"]
    bulk.create_index("k")
    bulk_next = [0]

    def bulk_insert(n):
        # bench.py's bulk insert row: its documents, an index on `k`, 100 per insert_many.
        for _ in range(max(1, n // 100)):
            lo = bulk_next[0]
            bulk_next[0] += 100
            bulk.insert_many(make_doc_range(lo, lo + 100))

    def insert_j1(n):
        ins = client["bench"].get_collection("insj", write_concern=wc_j)
        for i in range(n):
            ins.insert_one({"k": i, "s": "x" * 100})

    def insert_j16(n):
        ins = client["bench"].get_collection("insj16", write_concern=wc_j)

        def one(t):
            for i in range(n // 16):
                ins.insert_one({"k": i, "t": t, "s": "x" * 100})
        ts = [threading.Thread(target=one, args=(t,)) for t in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    accounts = client["bench"]["accounts"]
    branches = client["bench"]["branches"]
    tellers = client["bench"]["tellers"]
    history = client["bench"]["history"]

    def tpcb_txn(n):
        # bench.py's multi-statement TPC-B transaction: three $inc updates, one read, one insert.
        for i in range(n):
            aid, tid, bid, delta = i % 1000, i % 10, 0, (i % 11) - 5
            with client.start_session() as s:
                with s.start_transaction():
                    accounts.update_one({"_id": aid}, {"$inc": {"abalance": delta}}, session=s)
                    accounts.find_one({"_id": aid}, session=s)
                    tellers.update_one({"_id": tid}, {"$inc": {"tbalance": delta}}, session=s)
                    branches.update_one({"_id": bid}, {"$inc": {"bbalance": delta}}, session=s)
                    history.insert_one({"tid": tid, "bid": bid, "aid": aid, "delta": delta},
                                       session=s)

    sales = client["bench"]["sales"]

    def agg_group(n):
        # bench.py's "$group of sales by a 16-value key": n documents grouped, in
        # aggregations over the collection's 10,000.
        for _ in range(max(1, n // 10000)):
            out = list(sales.aggregate([{"$group": {
                "_id": "$k", "total": {"$sum": "$v"}, "n": {"$sum": 1}, "avg": {"$avg": "$v"}}}]))
            if len(out) != 16:
                raise RuntimeError(f"$group returned {len(out)} groups")

    spill = client["bench"].get_collection(
        "spill", codec_options=CodecOptions(document_class=RawBSONDocument))

    def sort_spill(n):
        # bench.py's "$sort of sales beyond the memory limit": n documents sorted, in
        # aggregations over SPILL_SALES documents with a tenth of bench.py's memory limit for a
        # tenth of its documents (two spilled runs and a remainder in memory, as there).
        for _ in range(max(1, n // SPILL_SALES)):
            got = sum(1 for _ in spill.aggregate([{"$sort": {"r": 1}}], allowDiskUse=True,
                                                 batchSize=10_000))
            if got != SPILL_SALES:
                raise RuntimeError(f"$sort returned {got} documents")

    return {"ping": ping, "find_one": find_one, "update_one": update_one,
            "insert_one": insert_one, "insert_many": insert_many, "bulk_insert": bulk_insert,
            "insert_j1": insert_j1,
            "insert_j16": insert_j16, "tpcb_txn": tpcb_txn, "agg_group": agg_group,
            "sort_spill": sort_spill}


# The spilling sort's collection (bench.py's `sale` documents) and sort memory limit.
SPILL_SALES = 100_000
SPILL_MEMORY = 32 * 2**20 // 10


# Seconds left for background work before and after each measured window.
SETTLE_S = 2.0

# Operations each workload counts per call of its function with n (documents for insert_many).
UNIT = {"insert_many": "document", "bulk_insert": "document", "agg_group": "document",
        "sort_spill": "document"}


def total_ir(path):
    """The dump's instructions: the sum of every function's self cost (the file's `summary`
    and `totals` lines count threads that ended and calls still open, so they are not used).
    A cost line right after a `calls=` line is the call's inclusive cost, not self."""
    total, after_call = 0, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("calls="):
                after_call = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if not after_call and len(parts) >= 2:
                    total += int(parts[1])
                after_call = False
    return total


def annotate(path, ops, inclusive, lines=40):
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}",
                          f"--threshold=99", path], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if not m or "PROGRAM TOTALS" in line or ":" not in m.group(2):
            continue
        ir = int(m.group(1).replace(",", ""))
        name = m.group(2)
        # Drop the file part of `file:function` for readability, keep the function.
        fn = name.split(":", 1)[1] if not name.startswith("???") else name
        fn = re.sub(r" \[[^\]]*\]$", "", fn)
        rows.append((ir, fn))
        if len(rows) >= lines:
            break
    return [f"{ir / ops:12.0f}  {fn[:160]}" for ir, fn in rows]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nidus", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", required=True, help="file name suffix, e.g. before or after")
    p.add_argument("--ops", type=int, default=500)
    p.add_argument("--only", default="ping,find_one,update_one,insert_one,insert_many")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="nidus-callgrind-")
    port = args.port or free_port()
    log = open(os.path.join(tmp, "nidus.log"), "wb")
    db = os.path.join(tmp, "db")
    os.makedirs(db)
    out_base = os.path.join(tmp, "callgrind.out")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={out_base}", "--dump-instr=no",
                             args.nidus, "--port", str(port), "--bind_ip", "127.0.0.1",
                             "--dbpath", db, "--replSet", "rs0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    results = []
    try:
        client = pymongo.MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true",
                                     serverSelectionTimeoutMS=120_000)
        wait_until(lambda: client.admin.command("ping")["ok"] == 1, 300, "nidus")
        wait_until(lambda: client.admin.command("hello").get("isWritablePrimary"), 300,
                   "primary")
        client["bench"]["docs"].insert_many(
            [{"_id": i, "k": i, "s": "x" * 100} for i in range(10000)])
        client["bench"]["accounts"].insert_many(
            [{"_id": i, "abalance": 0, "filler": "x" * 80} for i in range(1000)])
        client["bench"]["tellers"].insert_many([{"_id": i, "tbalance": 0} for i in range(10)])
        client["bench"]["branches"].insert_many([{"_id": 0, "bbalance": 0}])
        client["bench"]["history"].insert_one({"warm": 1})
        client["bench"]["sales"].insert_many(
            [{"_id": i, "k": i % 16, "v": i % 1000, "s": "x" * 40} for i in range(10000)])
        if "sort_spill" in args.only.split(","):
            for start in range(0, SPILL_SALES, 10_000):
                client["bench"]["spill"].insert_many(
                    [sale(i, 1_000) for i in range(start, start + 10_000)])
            client.admin.command({"setParameter": 1,
                                  "internalQueryMaxBlockingSortMemoryUsageBytes": SPILL_MEMORY})
        dumps = 0
        for name, fn in workloads(client).items():
            if name not in args.only.split(","):
                continue
            fn(max(16, args.ops // 10))
            # Background work of what ran before (the reaper deleting retryable-write
            # records, every 250 ms) happens outside the window; this workload's own is
            # waited for inside it.
            time.sleep(SETTLE_S)
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                           capture_output=True)
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                           capture_output=True)
            fn(args.ops)
            time.sleep(SETTLE_S)
            subprocess.run(["callgrind_control", "-d", name, str(proc.pid)], check=True,
                           capture_output=True)
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True,
                           capture_output=True)
            dumps += 1
            files = sorted(glob.glob(f"{out_base}*.{dumps}") + glob.glob(f"{out_base}*.{dumps}-*"))
            total = sum(total_ir(f) for f in files)
            # Merge the per-thread dumps (if any) into one file for callgrind_annotate.
            merged = os.path.join(tmp, f"{name}.merged")
            if len(files) == 1:
                shutil.copy(files[0], merged)
            else:
                with open(merged, "w") as m:
                    m.write(open(files[0]).read())
            ops = args.ops
            unit = UNIT.get(name, "operation")
            lines = [f"nidus {name} ({args.tag}): {total / ops:,.0f} instructions per {unit} "
                     f"(server, every thread; {ops} {unit}s from one pymongo client)", "",
                     "Inclusive (instructions per operation):"]
            lines += annotate(merged, ops, True)
            lines += ["", "Self (instructions per operation):"]
            lines += annotate(merged, ops, False, 30)
            with open(os.path.join(args.out, f"callgrind-{name}-{args.tag}.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
            shutil.copy(merged, os.path.join(tmp, f"keep-{name}"))
            results.append((name, total / ops, unit))
            print(f"{name}: {total / ops:,.0f} instructions per {unit}", flush=True)
        client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        keep = os.environ.get("CALLGRIND_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            for f in glob.glob(os.path.join(tmp, "keep-*")):
                shutil.copy(f, keep)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
