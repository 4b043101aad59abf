#!/usr/bin/env python3
"""Replicated writes: a three-member set (priorities 2, 1, 1) on free loopback ports, one
client loading N documents with `w: "majority"` (or `--w`: a number of members) (pymongo
`insert_many` of `--batch` documents, a `k` index, as `scale.py`'s load), then `--singles`
`insert_one` calls with the same write concern. Reports the client's rate and each member's server CPU per document (user +
system, from /proc), the secondaries' separately: a secondary applies every entry, so its CPU
bounds how fast a set takes writes on two shared cores.

    bench/.venv/bin/python bench/replset_writes.py [N] --nidus BIN [--nidus BIN2 ...] \
        [--rounds R] [--batch B] [--singles S] [--w W] [--perf-secondary OUT.data]

With several binaries the rounds alternate between them (A B A B ...), so drift on a
shared machine falls on both. `--perf-secondary` records one secondary with `perf record
--call-graph dwarf` during the load (last binary, last round). Measures; asserts only that
each secondary holds every document. Only stops the processes it started.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from nidus_harness import ReplicaSet, wait_until  # noqa: E402
from pymongo import MongoClient  # noqa: E402


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(binary, n, batch, singles, perf_out, w="majority"):
    os.environ["NIDUS_BIN"] = binary
    rs = ReplicaSet(3).start()
    try:
        rs.initiate(priorities=[2, 1, 1])
        primary = rs.wait_for_primary(60)
        secondaries = [m for m in rs.members if m is not primary]
        for m in secondaries:
            rs.wait_for_state(m, "SECONDARY", 60)
        with MongoClient(rs.uri(w=w)) as client:
            coll = client.bench.load
            coll.create_index("k")
            perf = None
            if perf_out:
                perf = subprocess.Popen(
                    ["perf", "record", "-F", "300", "--call-graph", "dwarf,32768",
                     "-p", str(secondaries[0].proc.pid), "-o", perf_out],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            out = {}
            for phase, count in (("insert_many", n), ("insert_one", singles)):
                if count == 0:
                    continue
                before = {m.port: cpu_seconds(m.proc.pid) for m in rs.members}
                start = time.monotonic()
                first = n if phase == "insert_one" else 0
                if phase == "insert_many":
                    for i in range(0, n, batch):
                        coll.insert_many([{"_id": j, "k": j % 1000, "s": "x" * 40, "n": j * 3}
                                          for j in range(i, min(n, i + batch))])
                else:
                    for j in range(first, first + count):
                        coll.insert_one({"_id": j, "k": j % 1000, "s": "x" * 40, "n": j * 3})
                elapsed = time.monotonic() - start
                # w: "majority" acknowledged on one secondary; the other may still apply.
                total = first + count
                for m in secondaries:
                    with m.client() as c:
                        wait_until(lambda: c.bench.load.estimated_document_count() >= total,
                                   120, f"{m.port} holds {total}")
                after = {m.port: cpu_seconds(m.proc.pid) for m in rs.members}
                used = {m.port: (after[m.port] - before[m.port]) / count * 1e6 for m in rs.members}
                out[phase] = {
                    "rate": count / elapsed,
                    "primary_us": used[primary.port],
                    "secondary_us": statistics.mean(used[m.port] for m in secondaries),
                }
            if perf:
                perf.send_signal(2)
                perf.wait(60)
            return out
    finally:
        rs.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=300_000)
    ap.add_argument("--nidus", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--singles", type=int, default=5000)
    ap.add_argument("--perf-secondary")
    ap.add_argument("--w", default="majority", help='"majority" or a number of members')
    args = ap.parse_args()
    w = int(args.w) if args.w.isdigit() else args.w
    results = {b: [] for b in args.nidus}
    for r in range(args.rounds):
        for i, b in enumerate(args.nidus):
            last = r == args.rounds - 1 and i == len(args.nidus) - 1
            res = one_round(b, args.n, args.batch, args.singles, args.perf_secondary if last else None, w)
            results[b].append(res)
            print(f"round {r} {b}: {res}", flush=True)
    print()
    print(f"{args.n} documents (`insert_many` of {args.batch}), {args.singles} `insert_one`, "
          f"`w: {w!r}`, {args.rounds} rounds, medians")
    print()
    print("| binary | phase | docs/s | primary µs/doc | secondaries µs/doc |")
    print("|---|---|---:|---:|---:|")
    for b, runs in results.items():
        for phase in ("insert_many", "insert_one"):
            rows = [run[phase] for run in runs if phase in run]
            if not rows:
                continue
            med = lambda k: statistics.median(x[k] for x in rows)
            print(f"| {Path(b).name} | {phase} | {med('rate'):.0f} | {med('primary_us'):.1f} | "
                  f"{med('secondary_us'):.1f} |")


if __name__ == "__main__":
    main()
