#!/usr/bin/env python3
"""The IO-bound point read (issue 21): block reads per `find_one` by `_id` with the data
several times Nidus's block cache, in steady state, for one or more server binaries on the
same data.

One data directory is loaded once (by the first binary) with `--docs` of bench.py's documents
and indexes (`_id` and `k`, `insert_many` of 1,000) and left to finish its flushes and
compactions. Then each binary in turn starts on that directory with a `--cache-gb` block cache
(256 MiB by default, as bench.py and scale.py start Nidus) and serves `--rounds` rounds of
`--reads` random point reads from one bench/pointload client (the MongoDB Go driver; needs
Go). Each round prints the rate, the blocks read from files per read (RocksDB's block-cache
misses from `serverStatus().rocksdb`: data blocks, and index and filter blocks together) and
the server's CPU per read. The first rounds warm the cache; the last ones are the steady state.
The files sit in the OS page cache here, so a block read is a `pread` and a decompression.

    bench/.venv/bin/python bench/io_bound.py --nidus BIN [--nidus OTHER_BIN] [--docs 10000000]

Timing is reported, never asserted.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import free_port, log, make_doc_range, proc_cpu, wait_until  # noqa: E402
from scale import GoClient, settle  # noqa: E402

import pymongo  # noqa: E402


class Server:
    """A Nidus server on a given data directory (bench.py's `Nidus` makes its own)."""
    name = "nidus"

    def __init__(self, binary, dbpath, cache_gb, logf):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind_ip", "127.0.0.1", "--dbpath", dbpath,
             "--cacheSizeGB", cache_gb], stdout=logf, stderr=subprocess.STDOUT)
        self.uri = f"mongodb://127.0.0.1:{self.port}/?directConnection=true"
        self.client = pymongo.MongoClient(self.uri)
        wait_until(lambda: self.client.admin.command("ping")["ok"] == 1, 120, "nidus")

    def pids(self):
        return [self.proc.pid]

    def misses(self):
        rocks = self.client.admin.command("serverStatus")["rocksdb"]
        return (rocks["block.cache.data.miss"],
                rocks["block.cache.index.miss"] + rocks["block.cache.filter.miss"])

    def stop(self):
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nidus", action="append", required=True,
                   help="a server binary (repeat to compare binaries on the same data)")
    p.add_argument("--docs", type=int, default=10_000_000)
    p.add_argument("--cache-gb", default="0.25")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--reads", type=int, default=40_000, help="point reads per round")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="nidus-io-bound-")
    try:
        loader = GoClient(tmp)
        dbpath = os.path.join(tmp, "db")
        os.makedirs(dbpath)
        with open(os.path.join(tmp, "nidus.log"), "ab") as logf:
            s = Server(a.nidus[0], dbpath, a.cache_gb, logf)
            coll = s.client.bench.docs
            coll.create_index("k")
            t0 = time.perf_counter()
            for lo in range(0, a.docs, 1000):
                coll.insert_many(make_doc_range(lo, min(a.docs, lo + 1000)), ordered=True)
            log(f"loaded {a.docs:,} documents in {time.perf_counter() - t0:.0f} s")
            settle(s.pids, 900)
            s.stop()
            for binary in a.nidus:
                s = Server(binary, dbpath, a.cache_gb, logf)
                for r in range(a.rounds):
                    (d0, m0), c0 = s.misses(), proc_cpu(s.pids)
                    n, seconds = loader.run(s, "find_one", a.reads, 1, 0, a.docs, r + 1)
                    (d1, m1), c1 = s.misses(), proc_cpu(s.pids)
                    print(f"{binary} round {r + 1}: {n / seconds:.0f} reads/s, "
                          f"{(d1 - d0) / n:.3f} data and {(m1 - m0) / n:.3f} index/filter "
                          f"blocks read per read, server CPU {(c1 - c0) / n * 1e6:.0f} µs",
                          flush=True)
                s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
