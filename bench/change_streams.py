#!/usr/bin/env python3
"""Cost of open change streams for writers (issue 20): single-client `insert_one` throughput on
a one-member set with no stream open, with 1,000 streams open on another collection (each
parked in a `getMore` waiting for events), and with 1,000 streams on the written collection
(each delivering every insert).

    bench/change_streams.py [--streams 1000] [--inserts 3000] [--rounds 3] [--out FILE.md]

Every stream is a real `$changeStream` cursor in its own session with a client thread
looping on `getMore` (`maxTimeMS` 5 s), as a driver's `watch()` iterates. The server and the
client threads share the machine's cores, so the third row also counts the client's work of
receiving 1,000 copies of each event. Measures; asserts nothing. Only signals the process it
started.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nidus_harness import NidusServer  # noqa: E402
from pymongo import MongoClient  # noqa: E402
from pymongo.errors import PyMongoError  # noqa: E402


def insert_rate(coll, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        coll.insert_one({"i": i, "pad": "x" * 100})
    return n / (time.perf_counter() - start)


class Streams:
    """`count` change streams on `coll_name`, each iterated by its own thread."""

    def __init__(self, client: MongoClient, db: str, coll_name: str, count: int):
        self.stop = threading.Event()
        self.events = 0
        self.errors = 0
        self.lock = threading.Lock()
        self.threads = []
        opened = threading.Barrier(count + 1, timeout=300)
        for _ in range(count):
            t = threading.Thread(target=self.run, args=(client, db, coll_name, opened), daemon=True)
            t.start()
            self.threads.append(t)
        opened.wait()

    def run(self, client, db_name, coll_name, opened):
        db = client[db_name]
        with client.start_session() as s:
            reply = db.command("aggregate", coll_name, pipeline=[{"$changeStream": {}}],
                               cursor={}, session=s)
            cursor_id = reply["cursor"]["id"]
            opened.wait()
            while not self.stop.is_set():
                try:
                    r = db.command("getMore", cursor_id, collection=coll_name, maxTimeMS=5000,
                                   session=s)
                except PyMongoError:
                    with self.lock:
                        self.errors += 1
                    return
                got = len(r["cursor"]["nextBatch"])
                if got:
                    with self.lock:
                        self.events += got
            try:
                db.command("killCursors", coll_name, cursors=[cursor_id], session=s)
            except PyMongoError:
                pass

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--inserts", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = NidusServer(dbpath=Path(tmp) / "db", extra_args=["--replSet", "rs0"],
                             log_name="bench-change-streams")
        server.start()
        try:
            client = MongoClient(server.uri, maxPoolSize=args.streams + 50)
            db = client.bench
            db.drop_collection("w")
            db.drop_collection("other")
            db.create_collection("w")
            db.create_collection("other")

            def measure(label: str, streams: Streams | None):
                rates = [insert_rate(db.w, args.inserts) for _ in range(args.rounds)]
                row = {"label": label, "rate": statistics.median(rates), "rates": rates}
                if streams is not None:
                    row["events"], row["errors"] = streams.events, streams.errors
                rows.append(row)
                print(f"{label}: {row['rate']:.0f} inserts/s {[round(r) for r in rates]}",
                      flush=True)

            insert_rate(db.w, 500)  # warm-up
            measure("no change stream", None)
            s = Streams(client, "bench", "other", args.streams)
            measure(f"{args.streams} streams on another collection", s)
            s.close()
            s = Streams(client, "bench", "w", args.streams)
            measure(f"{args.streams} streams on the written collection", s)
            time.sleep(1)
            s.close()
            rows[-1]["events"] = s.events
            client.close()
        finally:
            server.stop()

    base = rows[0]["rate"]
    lines = [
        "# Change streams: cost for writers",
        "",
        f"`bench/change_streams.py --streams {args.streams} --inserts {args.inserts} "
        f"--rounds {args.rounds}`: single-client `insert_one` (w:1) on a one-member set, median "
        "of the rounds; each stream is a `$changeStream` cursor whose client thread loops on "
        "`getMore` (maxTimeMS 5 s). Server and client threads share the machine's cores.",
        "",
        "| streams open | inserts/s | vs none | events delivered |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['rate']:.0f} | {r['rate'] / base:.2f}x | "
                     f"{r.get('events', '-')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
