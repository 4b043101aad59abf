#!/usr/bin/env python3
"""How cost grows (issue 21): point reads and inserts as the collection grows, and point
reads as clients are added, Nidus and PostgreSQL (jsonb) side by side on this machine.

For each size (default 100,000 and 10,000,000 documents) both systems start empty on free
127.0.0.1 ports under a temporary directory and load it with bench.py's documents and
indexes (`_id` and `k`; Nidus `insert_many` of 1,000, PostgreSQL `COPY` of 1,000 rows), one
system at a time, each left to finish the load's background work (flushes and compactions,
autovacuum) before anything else runs; that work's CPU is reported with the load. Then,
`--runs` times with the systems interleaved: `find_one` by a random `_id` from 1, 2, 4, 8
and 16 clients, `update_one` `$inc` by a random `_id` and `insert_one` of new documents from
one client (w:1; PostgreSQL `synchronous_commit=off`). Each measurement records the rate, the server's and the client's
CPU per operation and, for Nidus, RocksDB's block-cache data misses per operation (a block
read from a file, from the OS page cache here). Both caches are 256 MiB (Nidus's block cache,
as bench.py starts it, and PostgreSQL's shared_buffers): at 10,000,000 documents neither holds
the data.

The clients are bench/pointload, in Go (the MongoDB Go driver and pgx: compiled clients of
similar cost, so the servers are compared; it needs Go). `--client python` uses pymongo and
psycopg threads as bench.py does: their client CPU differs threefold and the GIL serializes
the threads.

    bench/.venv/bin/python bench/scale.py --nidus BIN [--sizes 100000,10000000] [--runs 3]

Prints a table and writes `bench/results/scale-<UTC date>-<git rev>.json` and `.md` (unless
`--no-save`). Timing is reported, never asserted.
"""
import argparse
import datetime as dt
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (HERE, ROOT, Nidus, Postgres, log, proc_cpu,  # noqa: E402
                   run_threads)
from bench import make_doc_range as documents  # noqa: E402

BATCH = 1000


class NidusSide:
    name = "nidus"

    def __init__(self, binary, tmp, cache_gb):
        self.s = Nidus(binary, tmp, cache_gb)
        self.uri = self.s.uri
        self.coll = self.s.db["docs"]

    def prepare(self):
        self.s.db.drop_collection("docs")
        self.coll.create_index("k")

    def load(self, lo, hi):
        self.coll.insert_many(documents(lo, hi), ordered=True)

    def count(self):
        return self.coll.estimated_document_count()

    def warm(self):
        # A scan of the records and one of the `_id` index, server-side.
        self.coll.count_documents({})
        self.coll.count_documents({"_id": {"$gte": 0}})

    def block_misses(self):
        rocks = self.s.client.admin.command("serverStatus").get("rocksdb", {})
        return rocks.get("block.cache.data.miss", 0)

    def reads(self, ids_per_client):
        # bench.py's point reads of `bench.docs`, one thread per client (pymongo's pool).
        run_threads(len(ids_per_client), lambda t: self.s.find_one(ids_per_client[t]))
        return sum(map(len, ids_per_client)), None

    def updates(self, ids):
        self.s.update_inc(ids)
        return len(ids), None

    def inserts(self, ids):
        c = self.coll
        for i in ids:
            c.insert_one(documents(i, i + 1)[0])
        return len(ids), None


class PostgresSide:
    name = "postgres"

    def __init__(self, tmp):
        self.s = Postgres(tmp)
        self.uri = f"postgres://bench@127.0.0.1:{self.s.port}/postgres"

    def prepare(self):
        c = self.s.conn
        c.execute("DROP TABLE IF EXISTS docs")
        c.execute("CREATE TABLE docs (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
        c.execute("CREATE INDEX docs_k ON docs (((doc->>'k')::bigint))")

    def load(self, lo, hi):
        from psycopg.types.json import Jsonb
        c = self.s.conn
        with c.transaction():
            with c.cursor().copy("COPY docs (id, doc) FROM STDIN") as copy:
                for d in documents(lo, hi):
                    copy.write_row((d["_id"], Jsonb(d)))

    def count(self):
        self.s.conn.execute("ANALYZE docs")
        return self.s.conn.execute("SELECT count(*) FROM docs").fetchone()[0]

    def block_misses(self):
        return None

    def warm(self):
        self.s.conn.execute("SELECT count(*) FROM docs").fetchone()
        self.s.conn.execute("SELECT count(*) FROM docs WHERE id >= 0").fetchone()

    def reads(self, ids_per_client):
        conns = [self.s.connect() for _ in ids_per_client]

        def work(t):
            cur = conns[t].cursor()
            for i in ids_per_client[t]:
                cur.execute("SELECT doc FROM docs WHERE id = %s", (i,))
                if cur.fetchone() is None:
                    raise RuntimeError(f"postgres: id {i} not found")

        try:
            run_threads(len(ids_per_client), work)
        finally:
            for c in conns:
                c.close()
        return sum(map(len, ids_per_client)), None

    def updates(self, ids):
        self.s.update_inc(ids)
        return len(ids), None

    def inserts(self, ids):
        from psycopg.types.json import Jsonb
        cur = self.s.conn.cursor()
        for i in ids:
            d = documents(i, i + 1)[0]
            cur.execute("INSERT INTO docs (id, doc) VALUES (%s, %s)", (d["_id"], Jsonb(d)))
        return len(ids), None


def measure(side, fn):
    """Runs fn once (it returns the operations done): the rate, the server's and the
    client's CPU per operation, and Nidus's block-cache data misses per operation."""
    m0 = side.block_misses()
    c0 = proc_cpu(side.s.pids)
    u0 = client_cpu()
    t0 = time.perf_counter()
    ops, seconds = fn()
    elapsed = time.perf_counter() - t0
    c1 = proc_cpu(side.s.pids)
    u1 = client_cpu()
    m1 = side.block_misses()
    rec = {"rate": ops / (seconds or elapsed), "ops": ops, "seconds": round(seconds or elapsed, 4),
           "server_cpu_us_per_op": (c1 - c0) / ops * 1e6,
           "client_cpu_us_per_op": (u1 - u0) / ops * 1e6}
    if m0 is not None:
        rec["block_misses_per_op"] = (m1 - m0) / ops
    return rec


def client_cpu():
    """CPU seconds of this process and its reaped children (the Go clients)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class GoClient:
    """bench/pointload, built once into the run's temporary directory."""

    def __init__(self, tmp):
        self.bin = os.path.join(tmp, "pointload")
        subprocess.run(["go", "build", "-o", self.bin, "."], check=True,
                       cwd=os.path.join(HERE, "pointload"))

    def run(self, side, op, n, clients, lo, hi=0, seed=0):
        out = subprocess.run(
            [self.bin, "-system", side.name, "-uri", side.uri, "-op", op, "-n", str(n),
             "-clients", str(clients), "-lo", str(lo), "-hi", str(hi), "-seed", str(seed)],
            check=True, capture_output=True, text=True).stdout
        res = json.loads(out)
        return res["ops"], res["seconds"]


def settle(pids, limit):
    """Waits (at most `limit` seconds) until the server's background work after a load
    (RocksDB's flushes and compactions, PostgreSQL's autovacuum and checkpoints) is done:
    its processes (`pids()`) under 5% of a core over two consecutive seconds. Returns the
    seconds waited."""
    t0 = time.perf_counter()
    quiet = 0
    while time.perf_counter() - t0 < limit and quiet < 2:
        c0 = proc_cpu(pids)
        time.sleep(1.0)
        quiet = quiet + 1 if proc_cpu(pids) - c0 < 0.05 else 0
    return time.perf_counter() - t0


def run_size(args, n, tmp, rng):
    log(f"size {n:,}: starting nidus and postgres")
    sides = {"nidus": NidusSide(args.nidus, os.path.join(tmp, "n"), args.nidus_cache_gb),
             "postgres": PostgresSide(os.path.join(tmp, "p"))}
    out = {"docs": n, "load": {}, "reads": {}, "updates": {}, "inserts": {}}
    try:
        for name, side in sides.items():
            side.prepare()
            c0 = proc_cpu(side.s.pids)
            t0 = time.perf_counter()
            for lo in range(0, n, BATCH):
                side.load(lo, min(lo + BATCH, n))
            elapsed = time.perf_counter() - t0
            got = side.count()
            if got != n:
                raise RuntimeError(f"{name}: loaded {got} documents, not {n}")
            c1 = proc_cpu(side.s.pids)
            settled = settle(side.s.pids, args.settle_max)
            out["load"][name] = {
                "rate": n / elapsed, "seconds": round(elapsed, 1),
                "server_cpu_us_per_doc": (c1 - c0) / n * 1e6,
                "settle_seconds": round(settled, 1),
                "settle_cpu_us_per_doc": (proc_cpu(side.s.pids) - c1) / n * 1e6}
            log(f"size {n:,}: {name} loaded at {n / elapsed:,.0f} docs/s, "
                f"background work settled after {settled:.0f} s")
            if args.warm:
                t0 = time.perf_counter()
                side.warm()
                log(f"size {n:,}: {name} read its table and `_id` index in "
                    f"{time.perf_counter() - t0:.0f} s (--warm)")
        go = GoClient(tmp) if args.client == "go" else None
        next_id = n
        for r in range(args.runs):
            for clients in args.clients:
                per = max(1, args.reads // clients)
                ids = [[rng.randrange(n) for _ in range(per)] for _ in range(clients)]
                seed = rng.randrange(1 << 30)
                for name, side in sides.items():
                    if go:
                        fn = (lambda s=side, c=clients, sd=seed:
                              go.run(s, "find_one", args.reads, c, 0, n, sd))
                    else:
                        fn = lambda s=side, i=ids: s.reads(i)  # noqa: E731
                    rec = measure(side, fn)
                    out["reads"].setdefault(str(clients), {}).setdefault(name, []).append(rec)
                log(f"size {n:,} run {r + 1}: reads x{clients}: " + ", ".join(
                    f"{k}={out['reads'][str(clients)][k][-1]['rate']:.0f}/s" for k in sides))
            seed = rng.randrange(1 << 30)
            ids = [rng.randrange(n) for _ in range(args.updates)]
            for name, side in sides.items():
                if go:
                    fn = (lambda s=side, sd=seed:
                          go.run(s, "update_one", args.updates, 1, 0, n, sd))
                else:
                    fn = lambda s=side, i=ids: s.updates(i)  # noqa: E731
                out["updates"].setdefault(name, []).append(measure(side, fn))
            log(f"size {n:,} run {r + 1}: updates: " + ", ".join(
                f"{k}={out['updates'][k][-1]['rate']:.0f}/s" for k in sides))
            for name, side in sides.items():
                if go:
                    fn = lambda s=side, lo=next_id: go.run(s, "insert_one", args.inserts, 1, lo)  # noqa: E731,E501
                else:
                    fn = lambda s=side, i=range(next_id, next_id + args.inserts): s.inserts(i)  # noqa: E731,E501
                out["inserts"].setdefault(name, []).append(measure(side, fn))
            next_id += args.inserts
            log(f"size {n:,} run {r + 1}: inserts: " + ", ".join(
                f"{k}={out['inserts'][k][-1]['rate']:.0f}/s" for k in sides))
        return out
    finally:
        for side in sides.values():
            side.s.stop()


def med(recs, key):
    vals = [r[key] for r in recs if key in r]
    return statistics.median(vals) if vals else None


def table(rep):
    def rate(x):
        return f"{x / 1000:.1f}k" if x >= 10_000 else f"{x:.0f}"

    lines = ["| documents | measurement | Nidus ops/s | PostgreSQL ops/s | Nidus/PostgreSQL "
             "| Nidus CPU µs/op | PostgreSQL CPU µs/op | client CPU µs/op (Nidus / PostgreSQL) "
             "| Nidus block reads/op |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size in rep["sizes"]:
        n = f"{size['docs']:,}"
        ld = size["load"]
        lines.append(
            f"| {n} | load (insert_many x1000; COPY), CPU during + after it | "
            f"{rate(ld['nidus']['rate'])} | {rate(ld['postgres']['rate'])} | "
            f"{ld['nidus']['rate'] / ld['postgres']['rate']:.2f} | "
            f"{ld['nidus']['server_cpu_us_per_doc']:.0f} + "
            f"{ld['nidus'].get('settle_cpu_us_per_doc', 0):.0f} | "
            f"{ld['postgres']['server_cpu_us_per_doc']:.0f} + "
            f"{ld['postgres'].get('settle_cpu_us_per_doc', 0):.0f} | – | – |")
        rows = [(f"find_one by _id, {c} client{'s' if c != '1' else ''}", recs)
                for c, recs in size["reads"].items()]
        if "updates" in size:
            rows.append(("update_one $inc by _id, 1 client", size["updates"]))
        rows.append(("insert_one, 1 client", size["inserts"]))
        for label, recs in rows:
            nr, pr = med(recs["nidus"], "rate"), med(recs["postgres"], "rate")
            miss = med(recs["nidus"], "block_misses_per_op")
            lines.append(
                f"| {n} | {label} | {rate(nr)} | {rate(pr)} | {nr / pr:.2f} | "
                f"{med(recs['nidus'], 'server_cpu_us_per_op'):.0f} | "
                f"{med(recs['postgres'], 'server_cpu_us_per_op'):.0f} | "
                f"{med(recs['nidus'], 'client_cpu_us_per_op'):.0f} / "
                f"{med(recs['postgres'], 'client_cpu_us_per_op'):.0f} | {miss:.2f} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nidus", required=True, help="the nidus server binary")
    p.add_argument("--sizes", default="100000,10000000",
                   type=lambda v: [int(x) for x in v.split(",") if x])
    p.add_argument("--clients", default="1,2,4,8,16",
                   type=lambda v: [int(x) for x in v.split(",") if x])
    p.add_argument("--reads", type=int, default=20000, help="point reads per measurement")
    p.add_argument("--nidus-cache-gb", default="0.25",
                   type=lambda v: None if v == "default" else v,
                   help="Nidus's --cacheSizeGB (default 0.25, PostgreSQL's shared_buffers); "
                        "'default': none, mongod's rule (half of memory less 1 GiB)")
    p.add_argument("--warm", action="store_true",
                   help="after the load, scan each system's records and `_id` index once, so "
                        "reads start with what the caches can hold")
    p.add_argument("--settle-max", type=float, default=900,
                   help="seconds to wait at most for background work after a load")
    p.add_argument("--updates", type=int, default=3000, help="updates per measurement")
    p.add_argument("--inserts", type=int, default=3000, help="inserts per measurement")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--client", choices=["go", "python"], default="go",
                   help="go: bench/pointload (MongoDB Go driver, pgx; needs Go); python: "
                        "pymongo and psycopg threads, as bench.py")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--no-save", action="store_true")
    args = p.parse_args()
    if args.runs < 1 or not args.sizes or not args.clients:
        p.error("--runs, --sizes and --clients need at least one value")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM and SIGHUP unwind like Ctrl-C, so the servers started are stopped.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=10", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    started = dt.datetime.now(dt.timezone.utc)
    rep = {"git_rev": rev, "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cpus": os.cpu_count(), "load_start": list(os.getloadavg()),
           "args": {k: v for k, v in vars(args).items() if k not in ("out", "no_save")},
           "sizes": []}
    rng = random.Random(21)
    for n in args.sizes:
        tmp = tempfile.mkdtemp(prefix="nidus-scale-")
        os.chmod(tmp, 0o755)  # PostgreSQL runs as its own user under it when we are root
        try:
            rep["sizes"].append(run_size(args, n, tmp, rng))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    rep["load_end"] = list(os.getloadavg())
    md = table(rep)
    print(md)
    print(f"load average at start {rep['load_start'][0]:.1f}, at end {rep['load_end'][0]:.1f}")
    if not args.no_save:
        os.makedirs(args.out, exist_ok=True)
        base = os.path.join(args.out, f"scale-{started:%Y-%m-%d}-{rev}")
        with open(base + ".json", "w") as f:
            json.dump(rep, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(f"Nidus `{rev}`, `bench/scale.py`, {rep['date']}, {rep['cpus']} CPUs; "
                    f"medians of {args.runs} runs, systems interleaved.\n\n{md}\n")
        log(f"wrote {base}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
