#!/usr/bin/env python3
"""Nidus against its peers and its floors, measured side by side in one run.

Started by bench/run.sh (which installs and builds what is needed); it can also be run
directly:  python bench/bench.py --nidus BIN --floor BIN [--size tiny|small|large]

Systems, all on 127.0.0.1 of this machine, driven by one Python client process:
  nidus       the server under test, through pymongo
  postgres    PostgreSQL with a jsonb table, through psycopg 3 (GIN / expression btree indexes)
  sqlite      SQLite's JSON functions through Python's sqlite3 (embedded)
Floors:
  ping        a round trip of each system's protocol (pymongo `ping`, `SELECT 1`)
  rocksdb     the project's RocksDB engine on its own (crates/storage-rocks/examples/floor.rs)

Durability is matched: unacknowledged-to-disk writes (MongoDB's default w:1, j:false) are
compared with PostgreSQL's synchronous_commit=off and SQLite's WAL + synchronous=NORMAL;
the j:true workloads with synchronous_commit=on and synchronous=FULL.
"""

import argparse
import datetime as dt
import heapq
import json
import math
import os
import platform
import random
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import pymongo

try:  # optional for a smoke run without peers (scripts/test.sh uses the tests' venv)
    import psutil
except ImportError:
    psutil = None
from pymongo import WriteConcern

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Every count scales with the size; `runs` repetitions of each measurement.
SIZES = {
    "tiny": dict(docs=5_000, points=400, ranges=60, range_len=100, updates=400, groups=2,
                 j1=60, j16=320, orders=3_000, order_queries=100, tpcb=400, pings=1_000,
                 floor_ops=5_000, sales=20_000, customers=1_000, lookup_queries=20,
                 sort_mem=256 * 1024, pg_work_mem="256kB", large_docs=16),
    "small": dict(docs=100_000, points=5_000, ranges=500, range_len=100, updates=5_000,
                  groups=3, j1=500, j16=3_200, orders=100_000, order_queries=1_000,
                  tpcb=5_000, pings=5_000, floor_ops=20_000, sales=1_000_000,
                  customers=10_000, lookup_queries=300, sort_mem=32 * 2**20,
                  pg_work_mem="4MB", large_docs=300),
    "large": dict(docs=1_000_000, points=20_000, ranges=2_000, range_len=100, updates=20_000,
                  groups=3, j1=1_000, j16=8_000, orders=1_000_000, order_queries=3_000,
                  tpcb=20_000, pings=20_000, floor_ops=100_000, sales=1_000_000,
                  customers=100_000, lookup_queries=1_000, sort_mem=32 * 2**20,
                  pg_work_mem="4MB", large_docs=1_000),
}

SYSTEMS = ("nidus", "postgres", "sqlite")
LABEL = {"nidus": "Nidus", "postgres": "PostgreSQL", "sqlite": "SQLite"}

# (key, title, unit, protocol floor, storage floor key in the floor binary's output)
WORKLOADS = [
    ("bulk_insert", "bulk insert (insert_many x1000; PostgreSQL COPY)", "docs/s", None, "put_batch_per_s"),
    ("find_one", "point find_one by _id", "ops/s", "ping", "get_per_s"),
    ("range", "indexed range query, 100 docs iterated", "docs/s", None, "scan_per_s"),
    ("update_inc", "update_one $inc", "ops/s", "ping", "rmw_per_s"),
    ("group", "$group over the collection", "docs/s", None, "scan_per_s"),
    ("agg_group", "$group of sales by a 16-value key, $sum+$avg", "docs/s", None, "scan_per_s"),
    ("lookup_ix", "$lookup 100 sales -> customers, foreign index", "queries/s", "ping", None),
    ("lookup_noix", "$lookup 100 sales -> customers, no index", "queries/s", "ping", None),
    ("sort_spill", "$sort of sales beyond the memory limit, allowDiskUse", "docs/s", None,
     "scan_per_s"),
    ("insert_one", "insert_one w:1, 1 client", "ops/s", "ping", "put_per_s"),
    ("insert_j1", "insert_one j:true, 1 client", "ops/s", "ping", "put_sync_per_s"),
    ("insert_j16", "insert_one j:true, 16 clients", "ops/s", "ping16",
     "put_sync_mt_syncer_per_s"),
    ("orders", "orders $elemMatch+sort+limit 10 (seed 004)", "queries/s", "ping", None),
    ("orders_collscan", "the same orders query as a COLLSCAN (hint $natural)", "queries/s",
     "ping", None),
    ("tpcb_doc", "TPC-B-like, single-document design (seed 003)", "tx/s", "ping", "put_per_s"),
    ("tpcb_multi", "TPC-B-like, multi-statement transaction", "tx/s", "ping", None),
    ("large_insert", "insert_one of 1 MiB documents (seed 002; PostgreSQL TOAST)", "docs/s",
     "ping", None),
    ("large_read", "find_one of 1 MiB documents by _id", "docs/s", "ping", None),
]
NA = {("orders_collscan", "postgres"): "n/a (Nidus only)",
      ("orders_collscan", "sqlite"): "n/a (Nidus only)"}
# Storage-floor measurements run along with a workload's own floor, for the record.
FLOOR_EXTRAS = {"put_sync_mt_syncer_per_s": ["put_sync_mt"]}


class Interrupted(Exception):
    pass


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - still starting
            last = e
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up in {timeout} s ({last})")


def own_cpu():
    """CPU seconds (user+system) of this process, every thread: the benchmark's client."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pids):
    """CPU seconds (user+system) of processes and their reaped children."""
    total = 0.0
    for pid in pids():
        if psutil is None:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError):
                pass
            continue
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


# Slow peers (SQLite's json_each over a country's orders) must not stretch the default run:
# a budgeted measurement stops after this many seconds and counts what it did.
BUDGET_S = 5.0


def within_budget(items, budget=BUDGET_S):
    deadline = time.perf_counter() + budget
    for x in items:
        yield x
        if time.perf_counter() > deadline:
            return


def check_orders(system, queries, docs):
    """Every orders query returns at most 10 documents, and they find some."""
    if docs > 10 * queries or docs == 0:
        raise RuntimeError(f"{system}: {queries} orders queries returned {docs} documents")
    return queries


def run_threads(n_threads, fn):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- data


def make_docs(n):
    return make_doc_range(0, n)


def make_doc_range(lo, hi):
    """The documents with `_id` lo..hi (bench/scale.py loads large sizes a batch at a time)."""
    colors = ["red", "green", "blue", "cyan", "magenta"]
    return [
        {
            "_id": i,
            "k": i,
            "grp": i % 100,
            "name": f"user{i:07d}",
            "n": 0,
            "nested": {"a": i % 1000, "b": "xyz", "c": i % 2 == 0},
            "tags": [colors[i % 5], colors[(i + 1) % 5], colors[(i + 2) % 5]],
        }
        for i in range(lo, hi)
    ]


def order_batches(n, seed=4, batch=1000):
    """Seed 004's orders, 10 lines each with product ids of log-distributed popularity, in
    batches of `batch` (generated again, identically, for each system: 1M orders would not
    fit in memory at once)."""
    rng = random.Random(seed)
    base = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(n):
        details = [
            {
                "line": line,
                "product_id": int(math.log2(1 + i * rng.random())),
                "quantity": int(100 * rng.random()),
            }
            for line in range(1, 11)
        ]
        out.append({
            "country_id": int(10 * rng.random()),
            "created_at": base + dt.timedelta(seconds=i),
            "order_details": details,
        })
        if len(out) == batch:
            yield out
            out = []
    if out:
        yield out


# The aggregation rows' data: `sales` documents (a 16-value key `k`, an amount `v`, a customer
# id `cust`, a distinct pseudo-random sort key `r`) and `customers` joined on `cid`. Every system
# holds the same values: Nidus gets them from here, PostgreSQL and SQLite generate them with
# the same formulas in SQL (SALE_SQL).
SALE_R = 2654435761  # odd: i -> i * SALE_R mod 2^32 is a bijection, so `r` is distinct


def sale(i, customers):
    return {"_id": i, "k": f"g{i % 16:02d}", "v": (i * 7919) % 1000, "cust": (i * 31) % customers,
            "r": (i * SALE_R) % 2**32, "name": f"item{i:07d}"}


def customer(c):
    return {"_id": c, "cid": c, "name": f"cust{c:06d}", "tier": c % 5}


def sales_expected(n):
    """What the $group row must return: key -> (sum, count, avg)."""
    sums, counts = [0] * 16, [0] * 16
    for i in range(n):
        sums[i % 16] += (i * 7919) % 1000
        counts[i % 16] += 1
    return {f"g{g:02d}": (sums[g], counts[g], sums[g] / counts[g]) for g in range(16) if counts[g]}


def check_groups(system, got, expected):
    if set(got) != set(expected):
        raise RuntimeError(f"{system}: $group returned keys {sorted(got)}")
    for k, (total, count, avg) in expected.items():
        t, c, a = got[k]
        if int(t) != total or int(c) != count or abs(float(a) - avg) > 1e-6 * max(1, avg):
            raise RuntimeError(f"{system}: group {k} is {got[k]}, expected {expected[k]}")


def check_lookup(system, pairs, window):
    """pairs: (order's cust, [joined customers' cid]) for one query's orders."""
    if len(pairs) != window:
        raise RuntimeError(f"{system}: $lookup query returned {len(pairs)} orders")
    for cust, cids in pairs:
        if cids != [cust]:
            raise RuntimeError(f"{system}: order of customer {cust} joined {cids}")


def check_sorted(system, count, first, expected):
    if count != expected["n"] or first != expected["first"]:
        raise RuntimeError(f"{system}: sort returned {count} documents starting {first}, "
                           f"expected {expected['n']} starting {expected['first']}")


LOOKUP_WINDOW = 100  # orders per $lookup query (an _id range of sales)


LARGE_BYTES = 2**20


def large_payloads(k=8):
    """`k` different 1 MiB strings (base64 of random bytes: barely compressible, as a
    blob of media or ciphertext); document i carries payload i % k."""
    import base64
    rng = random.Random(2)
    return [base64.b64encode(rng.randbytes(LARGE_BYTES * 3 // 4)).decode() for _ in range(k)]


def large_doc(i, payloads):
    return {"_id": i, "name": f"blob-{i}", "b": payloads[i % len(payloads)]}


def jsonable(doc):
    d = dict(doc)
    if isinstance(d.get("created_at"), dt.datetime):
        d["created_at"] = d["created_at"].isoformat()
    if isinstance(d.get("mtime"), dt.datetime):
        d["mtime"] = d["mtime"].isoformat()
    return d


# ---------------------------------------------------------------- systems


class Nidus:
    name = "nidus"

    def __init__(self, binary, tmp, cache_gb="0.25"):
        self.port = free_port()
        self.dbpath = os.path.join(tmp, "nidus")
        os.makedirs(self.dbpath)
        self.logf = open(os.path.join(tmp, "nidus.log"), "wb")
        # The block cache as the peers' caches (256 MiB), not mongod's default share of
        # memory: the rows compare engines with equal caches (`cache_gb=None`: the default).
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind_ip", "127.0.0.1", "--dbpath", self.dbpath,
             "--replSet", "rs0"] + (["--cacheSizeGB", cache_gb] if cache_gb else []),
            stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.uri = f"mongodb://127.0.0.1:{self.port}/?directConnection=true"
        self.client = pymongo.MongoClient(self.uri, maxPoolSize=64)
        wait_until(lambda: self.client.admin.command("ping")["ok"] == 1, 30, "nidus")
        self.db = self.client["bench"]
        self.version = self.client.admin.command("buildInfo").get("version")

    def pids(self):
        return [self.proc.pid]

    def write_conflicts(self):
        ss = self.client.admin.command("serverStatus")
        return ss.get("metrics", {}).get("operation", {}).get("writeConflicts", 0)

    def stop(self):
        try:
            self.client.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.logf.close()

    # protocol floor
    def ping(self, n):
        cmd = self.client.admin.command
        for _ in range(n):
            cmd("ping")

    def ping_threads(self, n, threads):
        per = n // threads
        run_threads(threads, lambda _i: self.ping(per))
        return per * threads

    def bulk_insert(self, docs):
        self.db.drop_collection("docs")
        c = self.db["docs"]
        c.create_index("k")
        for i in range(0, len(docs), 1000):
            c.insert_many(docs[i:i + 1000], ordered=True)
        assert c.estimated_document_count() == len(docs)

    def find_one(self, ids):
        c = self.db["docs"]
        for i in ids:
            if c.find_one({"_id": i}) is None:
                raise RuntimeError(f"nidus: _id {i} not found")

    def range(self, starts, length):
        c = self.db["docs"]
        n = 0
        for s in starts:
            n += len(list(c.find({"k": {"$gte": s, "$lt": s + length}})))
        return n

    def update_inc(self, ids):
        c = self.db["docs"]
        for i in ids:
            if c.update_one({"_id": i}, {"$inc": {"n": 1}}).matched_count != 1:
                raise RuntimeError(f"nidus: update of {i} matched nothing")

    def group(self, runs):
        c = self.db["docs"]
        for _ in range(runs):
            out = list(c.aggregate([{"$group": {"_id": "$grp", "total": {"$sum": "$n"},
                                                 "count": {"$sum": 1}}}]))
            if len(out) != 100:
                raise RuntimeError(f"nidus: $group returned {len(out)} groups")

    def load_sales(self, n, customers):
        for name in ("sales", "cust_ix", "cust_noix"):
            self.db.drop_collection(name)
        c = self.db["sales"]
        for start in range(0, n, 10_000):
            c.insert_many([sale(i, customers) for i in range(start, min(n, start + 10_000))])
        custs = [customer(i) for i in range(customers)]
        self.db["cust_ix"].create_index("cid")
        self.db["cust_ix"].insert_many(custs)
        self.db["cust_noix"].insert_many(custs)
        assert c.estimated_document_count() == n

    def agg_group(self):
        out = self.db["sales"].aggregate([{"$group": {
            "_id": "$k", "total": {"$sum": "$v"}, "n": {"$sum": 1}, "avg": {"$avg": "$v"}}}])
        return {d["_id"]: (d["total"], d["n"], d["avg"]) for d in out}

    def lookup(self, starts, indexed, check):
        c = self.db["sales"]
        frm = "cust_ix" if indexed else "cust_noix"
        n = 0
        for s in within_budget(starts, 2.0):
            out = c.aggregate([
                {"$match": {"_id": {"$gte": s, "$lt": s + LOOKUP_WINDOW}}},
                {"$lookup": {"from": frm, "localField": "cust", "foreignField": "cid",
                             "as": "customer"}}])
            check([(d["cust"], [x["cid"] for x in d["customer"]]) for d in out])
            n += 1
        return n

    def set_sort_memory(self, limit):
        """Returns the previous internalQueryMaxBlockingSortMemoryUsageBytes."""
        r = self.client.admin.command(
            {"setParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": limit})
        return r.get("was")

    def sort_spill(self, _work_mem):
        from bson.codec_options import CodecOptions
        from bson.raw_bson import RawBSONDocument
        c = self.db.get_collection("sales",
                                   codec_options=CodecOptions(document_class=RawBSONDocument))
        n, first = 0, []
        for d in c.aggregate([{"$sort": {"r": 1}}], allowDiskUse=True, batchSize=10_000):
            if n < 5:
                first.append(d["_id"])
            n += 1
        return n, first

    def sort_explain(self):
        r = self.db.command({"explain": {"aggregate": "sales", "pipeline": [{"$sort": {"r": 1}}],
                                         "allowDiskUse": True, "cursor": {}},
                             "verbosity": "executionStats"})
        found = {}

        def walk(x):
            if isinstance(x, dict):
                if "usedDisk" in x and not found:
                    found.update({k: x[k] for k in ("usedDisk", "spills",
                                                    "spilledDataStorageSize") if k in x})
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(r)
        return found

    def reset_jlog(self):
        self.db.drop_collection("jlog")
        self.db.create_collection("jlog")

    def insert_j(self, n, threads, journal=True):
        c = self.db.get_collection("jlog", write_concern=WriteConcern(w=1, j=journal))
        per = n // threads

        def work(t):
            for i in range(per):
                c.insert_one({"client": t, "i": i, "payload": "x" * 64})

        run_threads(threads, work)
        return per * threads

    def large_insert(self, n, payloads):
        self.db.drop_collection("blobs")
        c = self.db["blobs"]
        for i in range(n):
            c.insert_one(large_doc(i, payloads))
        return n

    def large_read(self, ids):
        c = self.db["blobs"]
        for i in ids:
            d = c.find_one({"_id": i})
            if d is None or len(d["b"]) != LARGE_BYTES:
                raise RuntimeError(f"nidus: blob {i} missing or cut")
        return len(ids)

    def rocksdb_bytes(self):
        """Bytes RocksDB wrote to its WAL, flushes and compactions (and blob files), from
        `serverStatus().rocksdb`."""
        r = self.client.admin.command("serverStatus").get("rocksdb", {})
        return {k: r.get(k, 0) for k in ("wal.bytes", "flush.write.bytes", "compact.write.bytes",
                                         "blobdb.blob.file.bytes.written")}

    def load_orders(self, orders):
        self.db.drop_collection("orders")
        c = self.db["orders"]
        c.create_index([("country_id", 1), ("order_details.product_id", 1), ("created_at", -1)])
        for batch in orders:
            c.insert_many(batch)

    def orders_query(self, params, hint=None):
        c = self.db["orders"]
        n = docs = 0
        for country, product in within_budget(params):
            n += 1
            cursor = c.find({"country_id": country,
                             "order_details": {"$elemMatch": {"product_id": product}}})
            cursor = cursor.sort("created_at", -1).limit(10)
            if hint:
                cursor = cursor.hint(hint)
            docs += len(list(cursor))
        return check_orders("nidus", n, docs)

    def orders_explain(self, country, product, hint=None):
        find = {"find": "orders",
                "filter": {"country_id": country,
                           "order_details": {"$elemMatch": {"product_id": product}}},
                "sort": {"created_at": -1}, "limit": 10}
        if hint:
            find["hint"] = hint
        r = self.db.command({"explain": find, "verbosity": "executionStats"})
        es = r.get("executionStats", {})
        stages = []
        node = r.get("queryPlanner", {}).get("winningPlan", {})
        while isinstance(node, dict) and node.get("stage"):
            stages.append(node["stage"])
            node = node.get("inputStage")
        return {"nReturned": es.get("nReturned"), "keysExamined": es.get("totalKeysExamined"),
                "docsExamined": es.get("totalDocsExamined"), "plan": " <- ".join(stages)}

    def reset_tpcb(self):
        for name in ("history", "pgb_accounts", "pgb_tellers", "pgb_branches", "pgb_history"):
            self.db.drop_collection(name)
            self.db.create_collection(name)
        self.db.pgb_branches.insert_one({"_id": 1, "bbalance": 0})
        self.db.pgb_tellers.insert_many([{"_id": t, "bid": 1, "tbalance": 0} for t in range(1, 11)])
        for start in range(1, 100_001, 10_000):
            self.db.pgb_accounts.insert_many(
                [{"_id": a, "bid": 1, "abalance": 0} for a in range(start, start + 10_000)])

    def tpcb_multi(self, txs):
        """pgbench's TPC-B statements as one multi-document transaction each."""
        db = self.db
        with self.client.start_session() as s:
            for aid, tid, delta in txs:
                with s.start_transaction():
                    db.pgb_accounts.update_one({"_id": aid}, {"$inc": {"abalance": delta}},
                                               session=s)
                    db.pgb_accounts.find_one({"_id": aid}, {"abalance": 1}, session=s)
                    db.pgb_tellers.update_one({"_id": tid}, {"$inc": {"tbalance": delta}},
                                              session=s)
                    db.pgb_branches.update_one({"_id": 1}, {"$inc": {"bbalance": delta}},
                                               session=s)
                    db.pgb_history.insert_one({"tid": tid, "bid": 1, "aid": aid, "delta": delta,
                                               "mtime": dt.datetime.now(dt.timezone.utc)},
                                              session=s)

    def tpcb_doc(self, txs):
        c = self.db["history"]
        for aid, tid, delta in txs:
            c.insert_one({"tid": tid, "bid": 1, "aid": aid, "delta": delta,
                          "mtime": dt.datetime.now(dt.timezone.utc), "to_apply": True})


class Postgres:
    name = "postgres"

    def __init__(self, tmp):
        import psycopg  # noqa: F401 - fail early if missing
        if psutil is None:
            raise RuntimeError("psutil is needed to measure PostgreSQL's CPU (bench/run.sh)")
        self.bindir = find_pg_bindir()
        self.port = free_port()
        self.datadir = os.path.join(tmp, "pgdata")
        self.sockdir = os.path.join(tmp, "pgsock")
        os.makedirs(self.sockdir)
        self.user = None
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root: run it as the `postgres` system user.
            self.user = "postgres"
            os.chmod(tmp, 0o755)
            os.makedirs(self.datadir, mode=0o700)
            for d in (self.sockdir, self.datadir):
                shutil.chown(d, self.user)
        self.logf = open(os.path.join(tmp, "postgres.log"), "wb")
        subprocess.run([os.path.join(self.bindir, "initdb"), "-D", self.datadir, "-U", "bench",
                        "-A", "trust", "-E", "UTF8", "--no-sync"],
                       check=True, stdout=self.logf, stderr=subprocess.STDOUT, user=self.user)
        self.proc = subprocess.Popen(
            [os.path.join(self.bindir, "postgres"), "-D", self.datadir, "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.sockdir}",
             "-c", "shared_buffers=256MB", "-c", "synchronous_commit=off",
             "-c", "max_connections=60"],
            stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True, user=self.user)
        self.dsn = f"host=127.0.0.1 port={self.port} user=bench dbname=postgres"
        wait_until(lambda: self.connect().close() is None, 30, "postgres")
        self.conn = self.connect()
        self.version = self.conn.execute("SHOW server_version").fetchone()[0]

    def connect(self, sync=False):
        import psycopg
        conn = psycopg.connect(self.dsn, autocommit=True)
        if sync:
            conn.execute("SET synchronous_commit = on")
        return conn

    def pids(self):
        return [self.proc.pid] + [c.pid for c in psutil.Process(self.proc.pid).children()]

    def stop(self):
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()

    def ping(self, n, conn=None):
        cur = (conn or self.conn).cursor()
        for _ in range(n):
            cur.execute("SELECT 1")
            cur.fetchone()

    def ping_threads(self, n, threads):
        per = n // threads
        conns = [self.connect() for _ in range(threads)]
        try:
            run_threads(threads, lambda i: self.ping(per, conns[i]))
        finally:
            for c in conns:
                c.close()
        return per * threads

    def bulk_insert(self, docs):
        from psycopg.types.json import Jsonb
        c = self.conn
        c.execute("DROP TABLE IF EXISTS docs")
        c.execute("CREATE TABLE docs (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
        c.execute("CREATE INDEX docs_k ON docs (((doc->>'k')::bigint))")
        cur = c.cursor()
        # COPY: PostgreSQL's fastest load path, one statement per 1,000-document batch.
        for i in range(0, len(docs), 1000):
            with c.transaction():
                with cur.copy("COPY docs (id, doc) FROM STDIN") as copy:
                    for d in docs[i:i + 1000]:
                        copy.write_row((d["_id"], Jsonb(d)))
        c.execute("ANALYZE docs")

    def find_one(self, ids):
        cur = self.conn.cursor()
        for i in ids:
            cur.execute("SELECT doc FROM docs WHERE id = %s", (i,))
            if cur.fetchone() is None:
                raise RuntimeError(f"postgres: id {i} not found")

    def range(self, starts, length):
        cur = self.conn.cursor()
        n = 0
        for s in starts:
            cur.execute("SELECT doc FROM docs WHERE (doc->>'k')::bigint >= %s "
                        "AND (doc->>'k')::bigint < %s", (s, s + length))
            n += len(cur.fetchall())
        return n

    def update_inc(self, ids):
        cur = self.conn.cursor()
        for i in ids:
            cur.execute("UPDATE docs SET doc = jsonb_set(doc, '{n}', "
                        "to_jsonb((doc->>'n')::bigint + 1)) WHERE id = %s", (i,))
            if cur.rowcount != 1:
                raise RuntimeError(f"postgres: update of {i} matched nothing")

    def group(self, runs):
        cur = self.conn.cursor()
        for _ in range(runs):
            cur.execute("SELECT doc->'grp', sum((doc->>'n')::bigint), count(*) FROM docs "
                        "GROUP BY doc->'grp'")
            if len(cur.fetchall()) != 100:
                raise RuntimeError("postgres: GROUP BY returned the wrong number of groups")

    def load_sales(self, n, customers):
        c = self.conn
        for t in ("sales", "cust_ix", "cust_noix"):
            c.execute(f"DROP TABLE IF EXISTS {t}")
            c.execute(f"CREATE TABLE {t} (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
        c.execute("INSERT INTO sales SELECT i, jsonb_build_object('_id', i, "
                  "'k', 'g' || lpad((i %% 16)::text, 2, '0'), 'v', (i * 7919) %% 1000, "
                  "'cust', (i * 31) %% %s, 'r', (i * %s) %% 4294967296, "
                  "'name', 'item' || lpad(i::text, 7, '0')) "
                  "FROM generate_series(0::bigint, %s) i", (customers, SALE_R, n - 1))
        for t in ("cust_ix", "cust_noix"):
            c.execute(f"INSERT INTO {t} SELECT i, jsonb_build_object('_id', i, 'cid', i, "
                      "'name', 'cust' || lpad(i::text, 6, '0'), 'tier', i %% 5) "
                      "FROM generate_series(0, %s) i", (customers - 1,))
        c.execute("CREATE INDEX cust_ix_cid ON cust_ix ((doc->'cid'))")
        c.execute("VACUUM ANALYZE sales")
        c.execute("VACUUM ANALYZE cust_ix")
        c.execute("VACUUM ANALYZE cust_noix")

    def agg_group(self):
        cur = self.conn.cursor()
        cur.execute("SELECT doc->>'k', sum((doc->>'v')::bigint), count(*), "
                    "avg((doc->>'v')::bigint) FROM sales GROUP BY doc->>'k'")
        return {k: (t, n, a) for k, t, n, a in cur.fetchall()}

    LOOKUP_SQL = ("SELECT o.doc, c.doc FROM sales o LEFT JOIN {} c ON c.doc->'cid' = o.doc->'cust' "
                  "WHERE o.id >= %s AND o.id < %s")

    def lookup(self, starts, indexed, check):
        cur = self.conn.cursor()
        sql = self.LOOKUP_SQL.format("cust_ix" if indexed else "cust_noix")
        n = 0
        for s in within_budget(starts, 2.0):
            cur.execute(sql, (s, s + LOOKUP_WINDOW))
            check([(o["cust"], [c["cid"]] if c else []) for o, c in cur.fetchall()])
            n += 1
        return n

    def lookup_explain(self, indexed):
        cur = self.conn.cursor()
        cur.execute("EXPLAIN (FORMAT JSON) " +
                    self.LOOKUP_SQL.format("cust_ix" if indexed else "cust_noix"), (0, 100))
        return plan_nodes(cur.fetchone()[0][0]["Plan"])

    SORT_SQL = "SELECT doc::text FROM sales ORDER BY (doc->>'r')::bigint"

    def sort_spill(self, work_mem):
        conn = self.connect()
        try:
            conn.execute(f"SET work_mem = '{work_mem}'")
            n, first = 0, []
            with conn.transaction(), conn.cursor(name="sort_spill") as cur:
                cur.itersize = 10_000
                cur.execute(self.SORT_SQL)
                for (text,) in cur:
                    if n < 5:
                        first.append(json.loads(text)["_id"])
                    n += 1
            return n, first
        finally:
            conn.close()

    def sort_explain(self, work_mem):
        conn = self.connect()
        try:
            conn.execute(f"SET work_mem = '{work_mem}'")
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " +
                                self.SORT_SQL).fetchone()[0][0]["Plan"]
        finally:
            conn.close()
        found = {"plan": plan_nodes(plan)}

        def walk(p):
            if p["Node Type"] == "Sort" and "sortMethod" not in found:
                found.update({"sortMethod": p.get("Sort Method"),
                              "sortSpaceType": p.get("Sort Space Type"),
                              "sortSpaceUsedKB": p.get("Sort Space Used")})
            for k in p.get("Plans", []):
                walk(k)

        walk(plan)
        return found

    def reset_jlog(self):
        self.conn.execute("DROP TABLE IF EXISTS jlog")
        self.conn.execute("CREATE TABLE jlog (id bigserial PRIMARY KEY, doc jsonb NOT NULL)")

    def insert_j(self, n, threads, journal=True):
        from psycopg.types.json import Jsonb
        per = n // threads
        conns = [self.connect(sync=journal) for _ in range(threads)]

        def work(t):
            cur = conns[t].cursor()
            for i in range(per):
                cur.execute("INSERT INTO jlog (doc) VALUES (%s)",
                            (Jsonb({"client": t, "i": i, "payload": "x" * 64}),))

        try:
            run_threads(threads, work)
        finally:
            for c in conns:
                c.close()
        return per * threads

    def large_insert(self, n, payloads):
        from psycopg.types.json import Jsonb
        self.conn.execute("DROP TABLE IF EXISTS blobs")
        self.conn.execute("CREATE TABLE blobs (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
        cur = self.conn.cursor()
        for i in range(n):
            cur.execute("INSERT INTO blobs (id, doc) VALUES (%s, %s)",
                        (i, Jsonb(large_doc(i, payloads))))
        return n

    def large_read(self, ids):
        cur = self.conn.cursor()
        for i in ids:
            cur.execute("SELECT doc FROM blobs WHERE id = %s", (i,))
            row = cur.fetchone()
            if row is None or len(row[0]["b"]) != LARGE_BYTES:
                raise RuntimeError(f"postgres: blob {i} missing or cut")
        return len(ids)

    def load_orders(self, orders):
        from psycopg.types.json import Jsonb
        c = self.conn
        c.execute("DROP TABLE IF EXISTS orders")
        c.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, doc jsonb NOT NULL)")
        # What a jsonb user does for containment queries: a GIN index on the document.
        c.execute("CREATE INDEX orders_gin ON orders USING gin (doc jsonb_path_ops)")
        cur = c.cursor()
        for batch in orders:
            with c.transaction():
                cur.executemany("INSERT INTO orders (doc) VALUES (%s)",
                                [(Jsonb(jsonable(o)),) for o in batch])
        c.execute("ANALYZE orders")

    ORDERS_SQL = ("SELECT doc FROM orders WHERE doc @> %s "
                  "ORDER BY doc->>'created_at' DESC LIMIT 10")

    def orders_query(self, params):
        from psycopg.types.json import Jsonb
        cur = self.conn.cursor()
        n = docs = 0
        for country, product in within_budget(params):
            cur.execute(self.ORDERS_SQL, (Jsonb({"country_id": country,
                                                 "order_details": [{"product_id": product}]}),))
            n += 1
            docs += len(cur.fetchall())
        return check_orders("postgres", n, docs)

    def orders_explain(self, country, product):
        from psycopg.types.json import Jsonb
        cur = self.conn.cursor()
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + self.ORDERS_SQL,
                    (Jsonb({"country_id": country, "order_details": [{"product_id": product}]}),))
        plan = cur.fetchone()[0][0]["Plan"]
        nodes, rows_read = [], 0

        def walk(p):
            nonlocal rows_read
            nodes.append(p["Node Type"])
            kids = p.get("Plans", [])
            if not kids or p["Node Type"] == "Bitmap Heap Scan":
                rows_read += p.get("Actual Rows", 0) * p.get("Actual Loops", 1) + \
                    p.get("Rows Removed by Index Recheck", 0) + p.get("Rows Removed by Filter", 0)
            for k in kids:
                if p["Node Type"] != "Bitmap Heap Scan":
                    walk(k)
                else:
                    nodes.append(k["Node Type"])

        walk(plan)
        return {"nReturned": plan.get("Actual Rows"), "rowsRead": rows_read,
                "plan": " <- ".join(nodes)}

    def reset_tpcb(self):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS history")
        c.execute("CREATE TABLE history (id bigserial PRIMARY KEY, doc jsonb NOT NULL)")
        for t in ("pgb_accounts", "pgb_tellers", "pgb_branches", "pgb_history"):
            c.execute(f"DROP TABLE IF EXISTS {t}")
        c.execute("CREATE TABLE pgb_branches (bid int PRIMARY KEY, bbalance int NOT NULL)")
        c.execute("CREATE TABLE pgb_tellers (tid int PRIMARY KEY, bid int, tbalance int NOT NULL)")
        c.execute("CREATE TABLE pgb_accounts (aid int PRIMARY KEY, bid int, "
                  "abalance int NOT NULL)")
        c.execute("CREATE TABLE pgb_history (tid int, bid int, aid int, delta int, "
                  "mtime timestamptz)")
        c.execute("INSERT INTO pgb_branches VALUES (1, 0)")
        c.execute("INSERT INTO pgb_tellers SELECT g, 1, 0 FROM generate_series(1, 10) g")
        c.execute("INSERT INTO pgb_accounts SELECT g, 1, 0 FROM generate_series(1, 100000) g")
        c.execute("VACUUM ANALYZE pgb_accounts")

    def tpcb_doc(self, txs):
        from psycopg.types.json import Jsonb
        cur = self.conn.cursor()
        for aid, tid, delta in txs:
            cur.execute("INSERT INTO history (doc) VALUES (%s)",
                        (Jsonb({"tid": tid, "bid": 1, "aid": aid, "delta": delta,
                                "mtime": dt.datetime.now(dt.timezone.utc).isoformat(),
                                "to_apply": True}),))

    def tpcb_multi(self, txs):
        c = self.conn
        cur = c.cursor()
        for aid, tid, delta in txs:
            with c.transaction():
                cur.execute("UPDATE pgb_accounts SET abalance = abalance + %s WHERE aid = %s",
                            (delta, aid))
                cur.execute("SELECT abalance FROM pgb_accounts WHERE aid = %s", (aid,))
                cur.fetchone()
                cur.execute("UPDATE pgb_tellers SET tbalance = tbalance + %s WHERE tid = %s",
                            (delta, tid))
                cur.execute("UPDATE pgb_branches SET bbalance = bbalance + %s WHERE bid = 1",
                            (delta,))
                cur.execute("INSERT INTO pgb_history (tid, bid, aid, delta, mtime) "
                            "VALUES (%s, 1, %s, %s, CURRENT_TIMESTAMP)", (tid, aid, delta))


class Sqlite:
    name = "sqlite"

    def __init__(self, tmp):
        self.path = os.path.join(tmp, "bench.sqlite")
        self.conn = self.connect()
        self.version = sqlite3.sqlite_version

    def connect(self, sync=False):
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
        conn.execute("PRAGMA cache_size=-262144")  # 256 MiB, as the other systems' caches
        return conn

    def pids(self):
        return []

    def stop(self):
        self.conn.close()

    def ping(self, n, conn=None):
        cur = (conn or self.conn).cursor()
        for _ in range(n):
            cur.execute("SELECT 1").fetchone()

    def ping_threads(self, n, threads):
        per = n // threads
        conns = [self.connect() for _ in range(threads)]
        try:
            run_threads(threads, lambda i: self.ping(per, conns[i]))
        finally:
            for c in conns:
                c.close()
        return per * threads

    def bulk_insert(self, docs):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS docs")
        c.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        c.execute("CREATE INDEX docs_k ON docs (json_extract(doc, '$.k'))")
        for i in range(0, len(docs), 1000):
            c.execute("BEGIN")
            c.executemany("INSERT INTO docs (id, doc) VALUES (?, json(?))",
                          [(d["_id"], json.dumps(d)) for d in docs[i:i + 1000]])
            c.execute("COMMIT")
        c.execute("ANALYZE")

    def find_one(self, ids):
        c = self.conn
        for i in ids:
            row = c.execute("SELECT doc FROM docs WHERE id = ?", (i,)).fetchone()
            if row is None:
                raise RuntimeError(f"sqlite: id {i} not found")
            json.loads(row[0])

    def range(self, starts, length):
        c = self.conn
        n = 0
        for s in starts:
            rows = c.execute("SELECT doc FROM docs WHERE json_extract(doc, '$.k') >= ? "
                             "AND json_extract(doc, '$.k') < ?", (s, s + length)).fetchall()
            n += len([json.loads(r[0]) for r in rows])
        return n

    def update_inc(self, ids):
        c = self.conn
        for i in ids:
            cur = c.execute("UPDATE docs SET doc = json_set(doc, '$.n', "
                            "json_extract(doc, '$.n') + 1) WHERE id = ?", (i,))
            if cur.rowcount != 1:
                raise RuntimeError(f"sqlite: update of {i} matched nothing")

    def group(self, runs):
        c = self.conn
        for _ in range(runs):
            rows = c.execute("SELECT json_extract(doc, '$.grp') AS g, "
                             "sum(json_extract(doc, '$.n')), count(*) FROM docs "
                             "GROUP BY g").fetchall()
            if len(rows) != 100:
                raise RuntimeError("sqlite: GROUP BY returned the wrong number of groups")

    def load_sales(self, n, customers):
        c = self.conn
        for t in ("sales", "cust_ix", "cust_noix"):
            c.execute(f"DROP TABLE IF EXISTS {t}")
            c.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        c.execute("BEGIN")
        c.execute("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
                  "INSERT INTO sales SELECT i, json_object('_id', i, 'k', printf('g%02d', i % 16), "
                  "'v', (i * 7919) % 1000, 'cust', (i * 31) % ?, 'r', (i * ?) % 4294967296, "
                  "'name', printf('item%07d', i)) FROM s", (n - 1, customers, SALE_R))
        for t in ("cust_ix", "cust_noix"):
            c.execute("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
                      f"WHERE i < ?) INSERT INTO {t} SELECT i, json_object('_id', i, 'cid', i, "
                      "'name', printf('cust%06d', i), 'tier', i % 5) FROM s", (customers - 1,))
        c.execute("COMMIT")
        c.execute("CREATE INDEX cust_ix_cid ON cust_ix (json_extract(doc, '$.cid'))")
        c.execute("ANALYZE")

    def agg_group(self):
        rows = self.conn.execute(
            "SELECT json_extract(doc, '$.k') AS g, sum(json_extract(doc, '$.v')), count(*), "
            "avg(json_extract(doc, '$.v')) FROM sales GROUP BY g").fetchall()
        return {k: (t, n, a) for k, t, n, a in rows}

    LOOKUP_SQL = ("SELECT o.doc, c.doc FROM sales o LEFT JOIN {} c "
                  "ON json_extract(c.doc, '$.cid') = json_extract(o.doc, '$.cust') "
                  "WHERE o.id >= ? AND o.id < ?")

    def lookup(self, starts, indexed, check):
        sql = self.LOOKUP_SQL.format("cust_ix" if indexed else "cust_noix")
        n = 0
        for s in within_budget(starts, 2.0):
            rows = self.conn.execute(sql, (s, s + LOOKUP_WINDOW)).fetchall()
            pairs = []
            for o, c in rows:
                o, c = json.loads(o), json.loads(c) if c else None
                pairs.append((o["cust"], [c["cid"]] if c else []))
            check(pairs)
            n += 1
        return n

    def lookup_explain(self, indexed):
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + self.LOOKUP_SQL.format(
            "cust_ix" if indexed else "cust_noix"), (0, 100)).fetchall()
        return " ; ".join(r[-1] for r in rows)

    def sort_spill(self, _work_mem):
        n, first = 0, []
        cur = self.conn.execute("SELECT doc FROM sales ORDER BY json_extract(doc, '$.r')")
        for (text,) in cur:
            if n < 5:
                first.append(json.loads(text)["_id"])
            n += 1
        return n, first

    def reset_jlog(self):
        self.conn.execute("DROP TABLE IF EXISTS jlog")
        self.conn.execute("CREATE TABLE jlog (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")

    def insert_j(self, n, threads, journal=True):
        per = n // threads
        conns = [self.connect(sync=journal) for _ in range(threads)]

        def work(t):
            for i in range(per):
                conns[t].execute("INSERT INTO jlog (doc) VALUES (?)",
                                 (json.dumps({"client": t, "i": i, "payload": "x" * 64}),))

        try:
            run_threads(threads, work)
        finally:
            for c in conns:
                c.close()
        return per * threads

    def large_insert(self, n, payloads):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS blobs")
        c.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        for i in range(n):
            c.execute("INSERT INTO blobs (id, doc) VALUES (?, json(?))",
                      (i, json.dumps(large_doc(i, payloads))))
        return n

    def large_read(self, ids):
        c = self.conn
        for i in ids:
            row = c.execute("SELECT doc FROM blobs WHERE id = ?", (i,)).fetchone()
            if row is None or len(json.loads(row[0])["b"]) != LARGE_BYTES:
                raise RuntimeError(f"sqlite: blob {i} missing or cut")
        return len(ids)

    def load_orders(self, orders):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS orders")
        c.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        c.execute("CREATE INDEX orders_cc ON orders (json_extract(doc, '$.country_id'), "
                  "json_extract(doc, '$.created_at') DESC)")
        for batch in orders:
            c.execute("BEGIN")
            c.executemany("INSERT INTO orders (doc) VALUES (?)",
                          [(json.dumps(jsonable(o)),) for o in batch])
            c.execute("COMMIT")
        c.execute("ANALYZE")

    ORDERS_SQL = ("SELECT doc FROM orders WHERE json_extract(doc, '$.country_id') = ? "
                  "AND EXISTS (SELECT 1 FROM json_each(doc, '$.order_details') "
                  "WHERE json_extract(value, '$.product_id') = ?) "
                  "ORDER BY json_extract(doc, '$.created_at') DESC LIMIT 10")

    def orders_query(self, params):
        c = self.conn
        n = docs = 0
        for country, product in within_budget(params):
            rows = c.execute(self.ORDERS_SQL, (country, product)).fetchall()
            n += 1
            docs += len([json.loads(r[0]) for r in rows])
        return check_orders("sqlite", n, docs)

    def orders_explain(self, country, product):
        rows = self.conn.execute("EXPLAIN QUERY PLAN " + self.ORDERS_SQL,
                                 (country, product)).fetchall()
        return {"plan": " ; ".join(r[-1] for r in rows)}

    def reset_tpcb(self):
        c = self.conn
        c.execute("DROP TABLE IF EXISTS history")
        c.execute("CREATE TABLE history (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        for t in ("pgb_accounts", "pgb_tellers", "pgb_branches", "pgb_history"):
            c.execute(f"DROP TABLE IF EXISTS {t}")
        c.execute("CREATE TABLE pgb_branches (bid INTEGER PRIMARY KEY, bbalance INT)")
        c.execute("CREATE TABLE pgb_tellers (tid INTEGER PRIMARY KEY, bid INT, tbalance INT)")
        c.execute("CREATE TABLE pgb_accounts (aid INTEGER PRIMARY KEY, bid INT, abalance INT)")
        c.execute("CREATE TABLE pgb_history (tid INT, bid INT, aid INT, delta INT, mtime TEXT)")
        c.execute("BEGIN")
        c.execute("INSERT INTO pgb_branches VALUES (1, 0)")
        c.executemany("INSERT INTO pgb_tellers VALUES (?, 1, 0)", [(i,) for i in range(1, 11)])
        c.executemany("INSERT INTO pgb_accounts VALUES (?, 1, 0)",
                      [(i,) for i in range(1, 100_001)])
        c.execute("COMMIT")

    def tpcb_doc(self, txs):
        c = self.conn
        for aid, tid, delta in txs:
            c.execute("INSERT INTO history (doc) VALUES (?)",
                      (json.dumps({"tid": tid, "bid": 1, "aid": aid, "delta": delta,
                                   "mtime": dt.datetime.now(dt.timezone.utc).isoformat(),
                                   "to_apply": True}),))

    def tpcb_multi(self, txs):
        c = self.conn
        for aid, tid, delta in txs:
            c.execute("BEGIN IMMEDIATE")
            c.execute("UPDATE pgb_accounts SET abalance = abalance + ? WHERE aid = ?",
                      (delta, aid))
            c.execute("SELECT abalance FROM pgb_accounts WHERE aid = ?", (aid,)).fetchone()
            c.execute("UPDATE pgb_tellers SET tbalance = tbalance + ? WHERE tid = ?",
                      (delta, tid))
            c.execute("UPDATE pgb_branches SET bbalance = bbalance + ? WHERE bid = 1", (delta,))
            c.execute("INSERT INTO pgb_history VALUES (?, 1, ?, ?, datetime('now'))",
                      (tid, aid, delta))
            c.execute("COMMIT")


def plan_nodes(plan):
    """A PostgreSQL plan as `Node <- Child <- ...` (first child at each level)."""
    nodes = []
    while plan:
        nodes.append(plan["Node Type"] + (f" ({plan['Join Type']})" if "Join Type" in plan
                                          else ""))
        kids = plan.get("Plans", [])
        if len(kids) > 1:
            nodes.append("[" + " | ".join(plan_nodes(k) for k in kids) + "]")
            break
        plan = kids[0] if kids else None
    return " <- ".join(nodes)


def find_pg_bindir():
    base = "/usr/lib/postgresql"
    if os.path.isdir(base):
        versions = sorted((v for v in os.listdir(base) if v.isdigit()), key=int, reverse=True)
        for v in versions:
            d = os.path.join(base, v, "bin")
            if os.path.exists(os.path.join(d, "postgres")):
                return d
    exe = shutil.which("postgres")
    if exe:
        return os.path.dirname(os.path.realpath(exe))
    raise RuntimeError("PostgreSQL is not installed (apt-get install -y postgresql)")


# ---------------------------------------------------------------- measuring


class Bench:
    def __init__(self, args):
        self.args = args
        self.size = SIZES[args.size]
        self.runs = args.runs
        self.systems = {}
        self.results = {}  # workload -> system -> list of {rate, cpu_us}
        self.floors = {}   # floor name -> system -> list of rates
        self.explain = {}
        self.explain_collscan = None
        self.agg_explain = {}  # plans and spill evidence of the aggregation rows
        self.floor_cpu = {}  # system -> server CPU µs per ping
        self.load_start = list(os.getloadavg())
        self.floor_conflicts = []  # write conflicts retried by the 16-writer storage floors
        self.rng = random.Random(8)

    def measure(self, workload, system, fn, ops=None):
        """Runs fn once, timing it; fn returns the op count unless `ops` is given."""
        s = self.systems[system]
        wc0 = s.write_conflicts() if hasattr(s, "write_conflicts") else None
        c0 = proc_cpu(s.pids)
        u0 = own_cpu()
        t0 = time.perf_counter()
        n = fn()
        elapsed = time.perf_counter() - t0
        u1 = own_cpu()
        c1 = proc_cpu(s.pids)
        n = ops if ops is not None else n
        rec = {"rate": n / elapsed, "ops": n, "seconds": round(elapsed, 4)}
        if s.pids():
            rec["server_cpu_us_per_op"] = (c1 - c0) / n * 1e6
            # The client is this process (pymongo or psycopg); SQLite runs in it, so its
            # client time is the whole operation and is not recorded as a client's.
            rec["client_cpu_us_per_op"] = (u1 - u0) / n * 1e6
        if wc0 is not None:
            rec["write_conflicts"] = s.write_conflicts() - wc0
        self.results.setdefault(workload, {}).setdefault(system, []).append(rec)
        return rec

    def each(self, workload, make_fn):
        """`runs` repetitions, systems interleaved within each repetition."""
        if not self.wants(workload):
            return
        proto = next(w[3] for w in WORKLOADS if w[0] == workload)
        for r in range(self.runs):
            self.storage_floor(workload)
            if proto:
                self.protocol_floor(proto, min(self.size["pings"] // 4, 1000))
            for name in self.systems:
                fn = make_fn(self.systems[name], r)
                if fn is not None:
                    self.measure(workload, name, *fn)
            self.storage_floor(workload)
            fl = [max(v["rocksdb"][-2:]) for k, v in self.floors.items()
                  if k == next(w[4] for w in WORKLOADS if w[0] == workload)]
            if workload not in self.results:
                continue
            log(f"{workload} run {r + 1}/{self.runs}: " + ", ".join(
                f"{n}={self.results[workload][n][-1]['rate']:.0f}"
                for n in self.systems if n in self.results.get(workload, {})) +
                (f", rocksdb floor={fl[0]:.0f}" if fl else ""))

    def protocol_floor(self, proto, n):
        for name, s in self.systems.items():
            c0 = proc_cpu(s.pids)
            t0 = time.perf_counter()
            if proto == "ping":
                s.ping(n)
                done = n
            else:
                done = s.ping_threads(n, 16)
            self.floors.setdefault(proto, {}).setdefault(name, []).append(
                done / (time.perf_counter() - t0))
            if proto == "ping" and s.pids():
                self.floor_cpu.setdefault(name, []).append((proc_cpu(s.pids) - c0) / n * 1e6)

    def storage_floor(self, workload):
        """The RocksDB floor of a workload, run before and after the systems in each
        repetition (fsync latency on a shared disk swings with what else is writing)."""
        key = next(w[4] for w in WORKLOADS if w[0] == workload)
        if key is None:
            return
        z = self.size
        sync_ops = {"put_sync_per_s": z["j1"], "put_sync_mt_syncer_per_s": z["j16"] // 4}.get(
            key, 100)
        only = [k.removesuffix("_per_s") for k in FLOOR_EXTRAS.get(key, []) + [key]]
        d = os.path.join(self.tmp, "floor")
        try:
            p = subprocess.run(
                [self.args.floor, "--dir", d, "--n", str(z["docs"]), "--value-size", "160",
                 "--gets", str(z["floor_ops"]), "--puts", str(z["floor_ops"]),
                 "--sync-ops", str(max(sync_ops, 16)), "--threads", "16",
                 "--only", ",".join(only)],
                capture_output=True, text=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if p.returncode != 0:
            raise RuntimeError(f"storage floor failed ({p.returncode}): {p.stderr.strip()}")
        for k, v in json.loads(p.stdout).items():
            if k.endswith("_per_s"):
                self.floors.setdefault(k, {}).setdefault("rocksdb", []).append(v)
            elif k == "write_conflicts_retried":
                self.floor_conflicts.append(v)

    def run(self, tmp):
        self.tmp = tmp
        a, z = self.args, self.size
        log(f"size {a.size}: {z}")
        self.systems["nidus"] = Nidus(a.nidus, tmp)
        if not a.no_peers:
            self.systems["postgres"] = Postgres(tmp)
            self.systems["sqlite"] = Sqlite(tmp)

        # Protocol floors: a round trip of each system's protocol, from 1 and 16 clients;
        # measured again next to every workload that uses them.
        for proto in ("ping", "ping16"):
            self.protocol_floor(proto, z["pings"])
        log("protocol floors: " + ", ".join(
            f"{k}={statistics.median(v[s]):.0f}({s})" for k, v in self.floors.items() for s in v))

        if self.wants("bulk_insert", "find_one", "range", "update_inc", "group", "insert_one",
                      "insert_j1", "insert_j16"):
            self.documents()
        if self.wants("orders", "orders_collscan"):
            self.orders()
        if self.wants("agg_group", "lookup_ix", "lookup_noix", "sort_spill"):
            self.aggregation()
        if self.wants("tpcb_doc", "tpcb_multi"):
            self.tpcb()
        if self.wants("large_insert", "large_read"):
            self.large()

    def wants(self, *workloads):
        return not self.args.only or any(w in self.args.only for w in workloads)

    def documents(self):
        z = self.size
        docs = make_docs(z["docs"])
        self.each("bulk_insert", lambda s, r: (lambda: s.bulk_insert(docs), len(docs)))
        if not self.wants("bulk_insert"):
            # The other rows read and write these documents: load them, unmeasured.
            for s in self.systems.values():
                s.bulk_insert(docs)

        def ids(n):
            return [self.rng.randrange(z["docs"]) for _ in range(n)]

        self.each("find_one", lambda s, r: (lambda p=ids(z["points"]): s.find_one(p),
                                             z["points"]))
        starts = lambda: [self.rng.randrange(z["docs"] - z["range_len"])  # noqa: E731
                          for _ in range(z["ranges"])]
        self.each("range", lambda s, r: (lambda p=starts(): s.range(p, z["range_len"]),))
        self.each("update_inc", lambda s, r: (lambda p=ids(z["updates"]): s.update_inc(p),
                                               z["updates"]))
        self.each("group", lambda s, r: (lambda: s.group(z["groups"]),
                                          z["groups"] * z["docs"]))
        for s in self.systems.values():
            s.reset_jlog()
        self.each("insert_one", lambda s, r: (lambda: s.insert_j(z["updates"], 1, False),))
        self.each("insert_j1", lambda s, r: (lambda: s.insert_j(z["j1"], 1),))
        self.each("insert_j16", lambda s, r: (lambda: s.insert_j(z["j16"], 16),))
        del docs

    def orders(self):
        z = self.size
        for name, s in self.systems.items():
            t0 = time.perf_counter()
            s.load_orders(order_batches(z["orders"]))
            log(f"orders generated and loaded into {name}: "
                f"{z['orders'] / (time.perf_counter() - t0):.0f} docs/s")
        for name, s in self.systems.items():
            self.explain[name] = s.orders_explain(1, 5)
        log(f"orders explain (country 1, product 5): {self.explain}")
        # The planner's choice beside a collection scan of the same query (issue 5).
        self.explain_collscan = self.systems["nidus"].orders_explain(1, 5, {"$natural": 1})
        log(f"orders explain as a COLLSCAN in nidus: {self.explain_collscan}")

        def order_params():
            return [(self.rng.randrange(10), self.rng.randrange(5, 13))
                    for _ in range(z["order_queries"])]

        self.each("orders", lambda s, r: (lambda p=order_params(): s.orders_query(p),))
        natural = {"$natural": 1}
        self.each("orders_collscan", lambda s, r: (
            (lambda p=order_params(): s.orders_query(p, natural),) if isinstance(s, Nidus)
            else None))

    def tpcb(self):
        z = self.size
        for s in self.systems.values():
            s.reset_tpcb()

        def txs():
            return [(self.rng.randint(1, 100_000), self.rng.randint(1, 10),
                     self.rng.randint(-5000, 5000)) for _ in range(z["tpcb"])]

        self.each("tpcb_doc", lambda s, r: (lambda p=txs(): s.tpcb_doc(p), z["tpcb"]))
        self.each("tpcb_multi", lambda s, r: (
            (lambda p=txs(): s.tpcb_multi(p), z["tpcb"]) if hasattr(s, "tpcb_multi") else None))

    def aggregation(self):
        """Issue 6's rows over one `sales` collection (and two `customers`), loaded once."""
        z = self.size
        n = z["sales"]
        for name, s in self.systems.items():
            t0 = time.perf_counter()
            s.load_sales(n, z["customers"])
            log(f"{n} sales and {z['customers']} customers x2 loaded into {name} in "
                f"{time.perf_counter() - t0:.1f} s")
        expected = sales_expected(n)

        def group(s):
            def run():
                check_groups(s.name, s.agg_group(), expected)
            return run

        self.each("agg_group", lambda s, r: (group(s), n))

        def lookup(s, indexed):
            starts = [self.rng.randrange(n - LOOKUP_WINDOW) for _ in range(z["lookup_queries"])]

            def check(pairs):
                check_lookup(s.name, pairs, LOOKUP_WINDOW)

            return (lambda: s.lookup(starts, indexed, check),)

        self.each("lookup_ix", lambda s, r: lookup(s, True))
        self.each("lookup_noix", lambda s, r: lookup(s, False))
        for name, s in self.systems.items():
            if hasattr(s, "lookup_explain"):
                self.agg_explain[f"lookup_{name}"] = {
                    "index": s.lookup_explain(True), "no index": s.lookup_explain(False)}

        # The sort must spill: the sort memory limit is lowered for the run (1M sales are
        # ~90 MB, under the default 100 MiB), and explain must say the server used the disk.
        nidus = self.systems["nidus"]
        first = heapq.nsmallest(5, range(n), key=lambda i: (i * SALE_R) % 2**32)
        want = {"n": n, "first": first}
        was = nidus.set_sort_memory(z["sort_mem"])
        try:
            ex = nidus.sort_explain()
            if not ex.get("usedDisk"):
                raise RuntimeError(f"nidus: the $sort did not spill ({ex})")
            self.agg_explain["sort_nidus"] = ex | {"sortMemoryLimit": z["sort_mem"]}
            if "postgres" in self.systems:
                ex = self.systems["postgres"].sort_explain(z["pg_work_mem"])
                if ex.get("sortSpaceType") != "Disk":
                    raise RuntimeError(f"postgres: the ORDER BY did not spill ({ex})")
                self.agg_explain["sort_postgres"] = ex | {"work_mem": z["pg_work_mem"]}

            def sort(s):
                def run():
                    check_sorted(s.name, *s.sort_spill(z["pg_work_mem"]), want)
                return run

            self.each("sort_spill", lambda s, r: (sort(s), n))
        finally:
            nidus.set_sort_memory(was if was is not None else 104_857_600)
        log(f"aggregation explains: {self.agg_explain}")

    def large(self):
        """Seed 002's large documents: 1 MiB each, inserted one by one, then read back by
        `_id`; Nidus's write amplification (bytes RocksDB wrote per logical byte) noted."""
        z = self.size
        n = z["large_docs"]
        payloads = large_payloads()
        nidus = self.systems["nidus"]
        before = nidus.rocksdb_bytes()
        self.each("large_insert", lambda s, r: (lambda: s.large_insert(n, payloads),))
        after = nidus.rocksdb_bytes()
        logical = n * LARGE_BYTES * self.runs
        self.large_write_amp = {k: round((after[k] - before[k]) / logical, 2) for k in before}
        log(f"large documents: RocksDB bytes written per logical byte {self.large_write_amp}")
        self.each("large_read", lambda s, r: (
            lambda p=[self.rng.randrange(n) for _ in range(n)]: s.large_read(p),))

    def stop(self):
        for name, s in reversed(list(self.systems.items())):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                log(f"stopping {name}: {e}")


# ---------------------------------------------------------------- reporting


def summarize(values):
    v = sorted(values)
    return {"runs": [round(x, 1) for x in values], "min": round(v[0], 1),
            "median": round(statistics.median(v), 1), "max": round(v[-1], 1)}


def build_report(b, started, elapsed):
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=10", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "crates"],
                                capture_output=True, text=True).stdout.strip())
    floors = {k: {s: summarize(v) for s, v in per.items()} for k, per in b.floors.items()}
    for s, cpu in b.floor_cpu.items():
        floors["ping"][s]["server_cpu_us_per_op"] = round(statistics.median(cpu), 1)
    rows = {}
    for key, title, unit, _proto, _storage in WORKLOADS:
        if not b.wants(key):
            continue
        per = b.results.get(key, {})
        row = {"title": title, "unit": unit, "systems": {}, "ratios": {}}
        for s in SYSTEMS:
            if (key, s) in NA and s in b.systems:
                row["systems"][s] = {"na": NA[(key, s)]}
                continue
            if s not in per:
                continue
            rates = [x["rate"] for x in per[s]]
            e = summarize(rates)
            cpu = [x["server_cpu_us_per_op"] for x in per[s] if "server_cpu_us_per_op" in x]
            if cpu:
                e["server_cpu_us_per_op"] = round(statistics.median(cpu), 1)
            ccpu = [x["client_cpu_us_per_op"] for x in per[s] if "client_cpu_us_per_op" in x]
            if ccpu:
                e["client_cpu_us_per_op"] = round(statistics.median(ccpu), 1)
            wc = [x["write_conflicts"] for x in per[s] if "write_conflicts" in x]
            if any(wc):
                e["write_conflicts_per_run"] = wc
            row["systems"][s] = e
        rows[key] = row
    return {
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_rev": rev,
        "crates_dirty": dirty,
        "size": b.args.size,
        "size_params": b.size,
        "runs": b.runs,
        "elapsed_s": round(elapsed, 1),
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_model(), "kernel": platform.release(),
                    "loadavg_start": b.load_start, "loadavg_end": list(os.getloadavg()),
                    "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                    / 2**30, 1),
                    "python": platform.python_version()},
        "versions": {n: getattr(s, "version", None) for n, s in b.systems.items()} |
                    {"pymongo": pymongo.version},
        "floors": floors,
        "floor_write_conflicts_retried": b.floor_conflicts,
        "workloads": rows,
        "orders_explain": b.explain,
        "orders_explain_collscan": getattr(b, "explain_collscan", None),
        "agg_explain": b.agg_explain,
        "large_write_amp": getattr(b, "large_write_amp", None),
    }


def derive(rep):
    """Ratios and floor warnings from the medians and the floors' runs (also redone by
    --report). A floor is the best of its runs: it bounds what its layer can deliver."""
    floors = rep["floors"]
    warnings = []
    for key, _title, unit, proto, storage in WORKLOADS:
        row = rep["workloads"].get(key)
        if row is None:
            continue
        row["ratios"] = {}
        row.pop("protocol_floor", None)
        row.pop("storage_floor", None)
        med = {s: e["median"] for s, e in row["systems"].items() if "median" in e}
        if "nidus" in med:
            for s in ("postgres", "sqlite"):
                if s in med:
                    row["ratios"][f"nidus/{s}"] = round(med["nidus"] / med[s], 3)
            if proto and "nidus" in floors.get(proto, {}):
                row["protocol_floor"] = {"name": proto, "rate": floors[proto]["nidus"]["max"]}
                row["ratios"]["nidus/ping"] = round(med["nidus"] / row["protocol_floor"]["rate"], 3)
            if storage and storage in floors:
                row["storage_floor"] = {"name": storage, "rate": floors[storage]["rocksdb"]["max"]}
                row["ratios"]["nidus/rocksdb"] = round(
                    med["nidus"] / row["storage_floor"]["rate"], 3)
        # Sanity: nobody beats its own floors (median against the floor's best run).
        for s, e in row["systems"].items():
            if "median" not in e:
                continue
            checks = []
            if proto and s in floors.get(proto, {}):
                checks.append((f"{proto} of {LABEL[s]}", floors[proto][s]["max"]))
            if s == "nidus" and storage and storage in floors:
                checks.append((f"RocksDB {storage}", floors[storage]["rocksdb"]["max"]))
            for fname, frate in checks:
                if e["median"] > frate:
                    warnings.append(f"{LABEL[s]} {key} ({e['median']:.0f} {unit}) is faster "
                                    f"than its floor {fname} ({frate:.0f})")
    rep["warnings"] = warnings
    return rep


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fmt_rate(x):
    if x >= 100_000:
        return f"{x / 1000:.0f}k"
    if x >= 10_000:
        return f"{x / 1000:.1f}k"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}"


def markdown_table(rep):
    peers = [s for s in ("postgres", "sqlite")
             if any(s in r["systems"] for r in rep["workloads"].values())]
    head = ["workload", "unit", "Nidus"] + [LABEL[p] for p in peers] + \
        [f"Nidus/{LABEL[p]}" for p in peers] + \
        ["ping floor", "Nidus/ping", "RocksDB floor", "Nidus/RocksDB", "Nidus CPU µs/op"] + \
        (["PostgreSQL CPU µs/op"] if "postgres" in peers else []) + \
        ["client CPU µs/op (" + " / ".join(LABEL[s] for s in ["nidus"] + peers[:1]) + ")"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, r in rep["workloads"].items():
        sy = r["systems"]

        def cell(s):
            e = sy.get(s)
            if e is None:
                return "–"
            if "na" in e:
                return e["na"]
            return fmt_rate(e["median"])

        def ratio(k):
            v = r["ratios"].get(k)
            return "–" if v is None else (f"{v:.2f}" if v >= 0.1 else f"{v:.2g}")

        cells = [r["title"], r["unit"], cell("nidus")] + [cell(p) for p in peers] + \
            [ratio(f"nidus/{p}") for p in peers]
        pf, sf = r.get("protocol_floor"), r.get("storage_floor")
        cells += [fmt_rate(pf["rate"]) if pf else "–", ratio("nidus/ping"),
                  fmt_rate(sf["rate"]) if sf else "–", ratio("nidus/rocksdb")]
        for s in ["nidus"] + (["postgres"] if "postgres" in peers else []):
            cpu = sy.get(s, {}).get("server_cpu_us_per_op")
            cells.append("–" if cpu is None else f"{cpu:.0f}")
        client = [sy.get(s, {}).get("client_cpu_us_per_op")
                  for s in ["nidus"] + (["postgres"] if "postgres" in peers else [])]
        cells.append("–" if client[0] is None else
                     " / ".join("–" if c is None else f"{c:.0f}" for c in client))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def client_bound_rows(rep):
    """Rows whose Nidus client CPU per operation is at least PostgreSQL's time per operation.
    Only rows driven by one client thread (not the 16-client rows): there an operation's
    time is at least its client's CPU time, so 1 / client CPU bounds Nidus's rate."""
    threaded = {w[0] for w in WORKLOADS if w[3] == "ping16"}
    out = []
    for key, r in rep["workloads"].items():
        sy = r["systems"]
        client = sy.get("nidus", {}).get("client_cpu_us_per_op")
        pg = sy.get("postgres", {}).get("median")
        if key in threaded or client is None or not pg:
            continue
        pg_us = 1e6 / pg
        if client >= pg_us:
            out.append(f"{key} {client:.0f} µs ≥ {pg_us:.0f} µs")
    return out


def explain_lines(rep):
    out = []
    ping = rep["floors"].get("ping", {})
    cpu = {s: e["server_cpu_us_per_op"] for s, e in ping.items() if "server_cpu_us_per_op" in e}
    if cpu:
        out.append("- server CPU per `ping` round trip: " + ", ".join(
            f"{LABEL[s]} {v:.0f} µs" for s, v in cpu.items()))
    bound = client_bound_rows(rep)
    if bound:
        out.append("- client-bound rows (one client thread, so an operation takes at least its "
                   "client's CPU time): the Nidus client alone spends as much CPU per operation "
                   "as PostgreSQL's whole operation takes (1 / its rate), so no server could "
                   "bring these to 1.0× with this client: " + "; ".join(bound))
    wc = {k: r["systems"]["nidus"]["write_conflicts_per_run"]
          for k, r in rep["workloads"].items()
          if "write_conflicts_per_run" in r["systems"].get("nidus", {})}
    if wc:
        out.append("- Nidus write conflicts retried (serverStatus), per run: " + "; ".join(
            f"{k} {v}" for k, v in wc.items()))
    if any(rep.get("floor_write_conflicts_retried", [])):
        out.append("- RocksDB floor, 16 writers of distinct keys: write conflicts retried per "
                   f"run {[int(x) for x in rep['floor_write_conflicts_retried']]}")
    m = rep["machine"]
    out.append(f"- load average at start {m['loadavg_start'][0]:.1f}, at end "
               f"{m['loadavg_end'][0]:.1f} (the machine is shared; ratios are measured "
               "side by side)")
    for s, e in rep["orders_explain"].items():
        bits = [f"{k}={v}" for k, v in e.items() if k != "plan"]
        out.append(f"- orders query (country 1, product 5) in {LABEL[s]}: {', '.join(bits)}"
                   f"{'; ' if bits else ''}plan `{e.get('plan')}`")
    e = rep.get("orders_explain_collscan")
    if e:
        bits = [f"{k}={v}" for k, v in e.items() if k != "plan"]
        out.append(f"- the same query in Nidus as a COLLSCAN (hint $natural): {', '.join(bits)}; "
                   f"plan `{e.get('plan')}`")
    ax = rep.get("agg_explain", {})
    z = rep.get("size_params", {})
    if "sales" in z and any(k in rep["workloads"] for k in ("agg_group", "lookup_ix",
                                                              "lookup_noix", "sort_spill")):
        out.append(f"- aggregation rows: {z['sales']} sales documents, {z['customers']} customers "
                   f"(in two collections, one with an index on `cid`); a $lookup query joins "
                   f"{LOOKUP_WINDOW} sales (an `_id` range); the sort iterates every document "
                   "(raw BSON / jsonb text, not decoded)")
    e = ax.get("sort_nidus")
    if e:
        out.append(f"- $sort in Nidus with internalQueryMaxBlockingSortMemoryUsageBytes lowered "
                   f"to {e['sortMemoryLimit']} by setParameter for the row: explain usedDisk="
                   f"{e.get('usedDisk')}, spills={e.get('spills')}, spilledDataStorageSize="
                   f"{e.get('spilledDataStorageSize')}")
    e = ax.get("sort_postgres")
    if e:
        out.append(f"- ORDER BY in PostgreSQL with work_mem={e['work_mem']}: Sort Method "
                   f"{e.get('sortMethod')}, {e.get('sortSpaceType')} {e.get('sortSpaceUsedKB')} kB;"
                   f" plan `{e.get('plan')}`")
    for s in ("postgres", "sqlite"):
        e = ax.get(f"lookup_{s}")
        if e:
            out.append(f"- the join in {LABEL[s]}: with an index `{e['index']}`, without "
                       f"`{e['no index']}`")
    wa = rep.get("large_write_amp")
    if wa:
        out.append(f"- 1 MiB documents ({z.get('large_docs')} per run, base64 of random bytes, "
                   "PostgreSQL jsonb with TOAST): Nidus's RocksDB wrote per logical byte WAL "
                   "(the document and its oplog entry, which holds it too, as MongoDB's) "
                   f"{wa['wal.bytes']}, flushes {wa['flush.write.bytes']}, compactions "
                   f"{wa['compact.write.bytes']}, blob files {wa['blobdb.blob.file.bytes.written']} "
                   "(what is still in the memtable at the end is not counted)")
    return out


def write_chart(rep, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("nidus/postgres", "Nidus / PostgreSQL"), ("nidus/sqlite", "Nidus / SQLite"),
              ("nidus/ping", "Nidus / ping (protocol floor)"),
              ("nidus/rocksdb", "Nidus / RocksDB (storage floor)")]
    series = [s for s in series if any(s[0] in r["ratios"] for r in rep["workloads"].values())]
    keys = list(rep["workloads"])
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.22 * len(keys) * max(1, len(series))))
    h = 0.8 / max(1, len(series))
    for i, (k, label) in enumerate(series):
        ys = [j + i * h for j in range(len(keys))]
        vals = [rep["workloads"][w]["ratios"].get(k, 0) or 0 for w in keys]
        ax.barh(ys, [v if v > 0 else float("nan") for v in vals], height=h, label=label)
    for j, w in enumerate(keys):
        na = [e["na"] for e in rep["workloads"][w]["systems"].values() if "na" in e]
        if na:
            ax.text(0.01, j + h * (len(series) - 1) / 2, "Nidus: " + na[0], va="center",
                    fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_yticks([j + h * (len(series) - 1) / 2 for j in range(len(keys))])
    ax.set_yticklabels([rep["workloads"][w]["title"] for w in keys], fontsize=8)
    ax.set_ylim(len(keys) - 0.05, -0.25)  # top to bottom in table order
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ratio of rates (> 1: Nidus faster; floors are upper bounds)")
    fig.suptitle(f"Nidus {rep['git_rev']} — size {rep['size']}, median of {rep['runs']} runs, "
                 f"{rep['date']}", fontsize=10)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=2)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_readme(md):
    path = os.path.join(ROOT, "README.md")
    with open(path) as f:
        text = f.read()
    start, end = "<!-- bench:latest -->", "<!-- /bench:latest -->"
    if start not in text or end not in text:
        log("README.md has no bench markers; not updated")
        return
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{start}\n{md}\n{end}{tail}")
    log("README.md updated")


def publish(rep, name, args):
    """Prints the table; unless --no-save writes latest.md and latest.png (and the README)."""
    table = markdown_table(rep)
    print()
    print(table)
    print()
    print("notes:")
    print("\n".join(explain_lines(rep)))
    for w in rep["warnings"]:
        print(f"WARNING: {w}")
    print(f"\n{rep['elapsed_s']} s, size {rep['size']}, {rep['runs']} runs")
    if args.no_save:
        return
    md = [f"Nidus `{rep['git_rev']}`, `bench/run.sh --size {rep['size']}`, "
          f"{rep['date']}, {rep['machine']['cpus']} CPUs ({rep['machine']['cpu']}); "
          f"rates are medians of {rep['runs']} runs (all runs in "
          f"`bench/results/{name}`).", "", table, "",
          "Notes:", ""] + explain_lines(rep)
    if rep["warnings"]:
        md += [""] + [f"WARNING: {w}" for w in rep["warnings"]]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    write_chart(rep, os.path.join(args.out, "latest.png"))
    if args.update_readme:
        update_readme("\n".join(md))
    print(f"wrote latest.md and latest.png in {args.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=list(SIZES), default="small")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nidus", help="the nidus server binary")
    p.add_argument("--floor", help="the storage floor binary (examples/floor)")
    p.add_argument("--no-peers", action="store_true", help="skip PostgreSQL and SQLite")
    p.add_argument("--only", type=lambda v: [w for w in v.split(",") if w],
                   help="comma-separated workloads to run (" +
                        ",".join(w[0] for w in WORKLOADS) + "); default all")
    p.add_argument("--out", default=os.path.join(HERE, "results"),
                   help="directory for the JSON, latest.md and latest.png")
    p.add_argument("--no-save", action="store_true", help="print the table only")
    p.add_argument("--update-readme", action="store_true",
                   help="also put latest.md between the bench markers of README.md")
    p.add_argument("--report", metavar="JSON",
                   help="measure nothing: redo the table, latest.md and latest.png from a "
                        "results file")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be >= 1")
    unknown = set(args.only or []) - {w[0] for w in WORKLOADS}
    if unknown:
        p.error(f"unknown workloads {sorted(unknown)}")
    if args.report:
        with open(args.report) as f:
            publish(derive(json.load(f)), os.path.basename(args.report), args)
        return 0
    if not args.nidus or not args.floor:
        p.error("--nidus and --floor are required (bench/run.sh passes them)")

    def on_signal(signum, _frame):
        raise Interrupted(f"signal {signum}")

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="nidus-bench-")
    b = Bench(args)
    try:
        b.run(tmp)
    except (KeyboardInterrupt, Interrupted) as e:
        log(f"interrupted ({str(e) or 'Ctrl-C'}); stopping what was started")
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        return 130
    except BaseException:
        b.stop()
        log(f"failed; logs kept in {tmp}")
        raise
    b.stop()
    shutil.rmtree(tmp, ignore_errors=True)

    rep = derive(build_report(b, started, time.time() - t0))
    name = f"{started.strftime('%Y-%m-%d')}-{rep['git_rev']}.json"
    if not args.no_save:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(rep, f, indent=1)
            f.write("\n")
        print(f"wrote {os.path.join(args.out, name)}")
    publish(rep, name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
