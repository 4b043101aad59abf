#!/usr/bin/env python3
"""Failover time of a three-member replica set (issue 19): SIGKILL of the primary while a
client writes, to the client's first acknowledged write on the new primary.

    bench/failover.py [--rounds 3] [--election-timeout-ms 10000 2000] [--out FILE.md]

Each round starts three `nidus --replSet rs0` members on free loopback ports (priorities
3/2/1, as seed 000's lab), waits for PRIMARY + two SECONDARYs, writes `w:"majority"` in a
loop, kills the primary and times kill -> first acknowledged write through a driver with
`retryWrites=true`. MongoDB's documented default election timeout (10 s) is printed beside
the measurement; its failover includes that timeout plus the election itself.
Measures; asserts nothing. Only signals the processes it started.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nidus_harness import ReplicaSet  # noqa: E402
from pymongo import MongoClient, WriteConcern  # noqa: E402
from pymongo.errors import PyMongoError  # noqa: E402

MONGODB_DEFAULT_ELECTION_TIMEOUT_MS = 10_000


def one_round(election_timeout_ms: int) -> float:
    rs = ReplicaSet(3).start()
    try:
        rs.initiate(priorities=[3, 2, 1], settings={"electionTimeoutMillis": election_timeout_ms})
        primary = rs.wait_for_primary(60)
        for m in rs.members:
            if m is not primary:
                rs.wait_for_state(m, "SECONDARY", 60)
        with MongoClient(rs.uri(retryWrites="true", serverSelectionTimeoutMS=60000)) as c:
            coll = c.bench.get_collection("failover", write_concern=WriteConcern(w="majority"))
            for i in range(200):
                coll.insert_one({"i": i})
            # The member that acknowledged those writes (a priority takeover may have moved
            # the role since `wait_for_primary`).
            port = c.primary[1]
            primary = next(m for m in rs.members if m.port == port)
            primary.kill()
            killed = time.monotonic()
            deadline = killed + 120
            while time.monotonic() < deadline:
                try:
                    coll.insert_one({"after": True})
                    return time.monotonic() - killed
                except PyMongoError:
                    time.sleep(0.02)
            raise RuntimeError("no write acknowledged within 120 s of the kill")
    finally:
        rs.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--election-timeout-ms", type=int, nargs="+", default=[10_000, 2_000])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for eto in args.election_timeout_ms:
        times = [one_round(eto) for _ in range(args.rounds)]
        rows.append((eto, times))
        print(f"electionTimeoutMillis={eto}: " + ", ".join(f"{t:.2f}" for t in times)
              + f" s (median {statistics.median(times):.2f} s)", flush=True)
    lines = [
        "# Failover: SIGKILL of the primary -> first acknowledged w:majority write",
        "",
        "Three members on loopback, priorities 3/2/1, pymongo with retryWrites; "
        f"{args.rounds} rounds per setting (`bench/failover.py`).",
        "",
        "A killed primary's port refuses connections, so the secondaries leave its lease and the",
        "highest-priority one campaigns at its next Raft tick (`electionTimeoutMillis / 20`)",
        "instead of waiting out the timeout (docs/ARCHITECTURE.md, \"A primary whose process is",
        "gone\"); a stopped or partitioned primary is still replaced only after the timeout.",
        "",
        "| electionTimeoutMillis | median (s) | min (s) | max (s) | MongoDB's default election timeout (s) |",
        "|---|---|---|---|---|",
    ]
    for eto, times in rows:
        lines.append(f"| {eto} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} "
                     f"| {MONGODB_DEFAULT_ELECTION_TIMEOUT_MS / 1000:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
