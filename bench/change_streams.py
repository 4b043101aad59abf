#!/usr/bin/env python3
"""Cost of open change streams for writers (issue 20): single-client `insert_one` throughput on
a one-member set with no stream open, with 1,000 streams open on another collection (each
parked in a `getMore` waiting for events), and with 1,000 streams on the written collection
(each delivering every insert).

    bench/change_streams.py [--streams 1000] [--inserts 3000] [--rounds 3] [--max-await-ms 1000]
                            [--written-inserts 300] [--out FILE.md] [--flame DIR --tag TAG]

Every stream is a real `$changeStream` cursor iterated with `getMore` (`--max-await-ms`, 1 s
by default, as a driver's `watch()`), held by asyncio tasks in a second client process. The
server and both clients share the machine's cores, so the insert rate moves with the load;
the server's CPU per insert does not. Measures; asserts nothing. Only signals the processes
it started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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


def holder(uri: str, db_name: str, coll_name: str, count: int, max_await_ms: int) -> int:
    """The streams' side, in its own process: `count` `$changeStream` cursors iterated by
    asyncio tasks on one connection pool (as an application's event loop would), so the
    writer's process does not share an interpreter with them. Prints "ready", then runs
    until its stdin closes, printing the events and errors seen so far for each "count"
    line; prints them once more at the end."""
    import asyncio

    from pymongo import AsyncMongoClient

    async def run() -> tuple[int, int]:
        client = AsyncMongoClient(uri, maxPoolSize=count + 10)
        db = client[db_name]
        stop = asyncio.Event()
        counts = {"events": 0, "errors": 0}

        async def one(opened: asyncio.Queue):
            reply = await db.command("aggregate", coll_name, pipeline=[{"$changeStream": {}}],
                                     cursor={})
            cursor_id = reply["cursor"]["id"]
            await opened.put(None)
            while not stop.is_set():
                try:
                    r = await db.command("getMore", cursor_id, collection=coll_name,
                                         maxTimeMS=max_await_ms)
                except PyMongoError:
                    counts["errors"] += 1
                    return
                counts["events"] += len(r["cursor"]["nextBatch"])

        opened: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(one(opened)) for _ in range(count)]
        for _ in range(count):
            await asyncio.wait_for(opened.get(), 300)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        # Each line on stdin asks for the counts so far; its end stops the streams.
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "count":
            print(f"events {counts['events']} errors {counts['errors']}", flush=True)
        stop.set()
        await asyncio.wait(tasks, timeout=max_await_ms / 1000 + 10)
        await client.close()
        return counts["events"], counts["errors"]

    events, errors = asyncio.run(run())
    print(f"events {events} errors {errors}", flush=True)
    return 0


class Streams:
    """`count` change streams on `coll_name`, held by a `holder` process."""

    def __init__(self, uri: str, db: str, coll_name: str, count: int, max_await_ms: int):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--holder", uri, db, coll_name, str(count),
             str(max_await_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"stream holder did not start: {line!r}")
        self.events = self.errors = 0

    def count(self) -> int:
        """The events the streams received so far."""
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self):
        out, _ = self.proc.communicate("", timeout=120)
        for line in out.splitlines():
            parts = line.split()
            if parts[:1] == ["events"]:
                self.events, self.errors = int(parts[1]), int(parts[3])


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    if len(sys.argv) == 7 and sys.argv[1] == "--holder":
        return holder(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--inserts", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-await-ms", type=int, default=1000,
                    help="each stream's getMore maxTimeMS (drivers' default is the server's 1 s)")
    ap.add_argument("--written-inserts", type=int, default=300,
                    help="inserts per round while every stream delivers each of them")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--flame", type=Path,
                    help="also record the server with perf (after each measurement, so the "
                    "numbers are not disturbed) and write flame-cs-{idle,written}-TAG.svg "
                    "here: 3 s of the idle streams on another collection, and one more round of "
                    "inserts delivered to the streams on the written collection")
    ap.add_argument("--tag", default="now", help="the flame graphs' file name suffix")
    args = ap.parse_args()

    def flame(pid: int, name: str, work) -> None:
        """Runs `work` under `perf record` and writes its flame graph (bench/flame.py's)."""
        if not args.flame:
            return
        sys.path.insert(0, str(ROOT / "bench"))
        from flame import record_flame
        with tempfile.TemporaryDirectory() as ptmp:
            svg = record_flame(pid, work, f"nidus {name} ({args.tag})",
                               os.path.join(ptmp, "perf.data"))
        args.flame.mkdir(parents=True, exist_ok=True)
        (args.flame / f"flame-cs-{name}-{args.tag}.svg").write_bytes(svg)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = NidusServer(dbpath=Path(tmp) / "db", extra_args=["--replSet", "rs0"],
                             log_name="bench-change-streams")
        server.start()
        pid = server.proc.pid
        try:
            client = MongoClient(server.uri)
            db = client.bench
            for name in ("w", "other"):
                db.drop_collection(name)
                db.create_collection(name)

            def measure(label: str, inserts: int | None = None,
                        streams: Streams | None = None) -> dict:
                """Insert rate and the server's CPU per insert (which the load of other work
                on the machine does not change), over the rounds. With `streams` watching
                the written collection, the CPU is counted until they have received every
                insert (the delivery goes on after the last insert when they fall behind)."""
                n = inserts or args.inserts
                rates, cpus, drains = [], [], []
                for _ in range(args.rounds):
                    expected = streams.count() + n * args.streams if streams else 0
                    cpu0 = cpu_seconds(pid)
                    t0 = time.monotonic()
                    rate = insert_rate(db.w, n)
                    rates.append(rate)
                    if streams:
                        t1 = time.monotonic()
                        deadline = t1 + 300
                        while streams.count() < expected and time.monotonic() < deadline:
                            time.sleep(0.01)
                        drains.append(time.monotonic() - t1)
                    cpus.append((cpu_seconds(pid) - cpu0) / n * 1e6)
                row = {"label": label, "rate": statistics.median(rates),
                       "cpu_us": statistics.median(cpus)}
                if streams:
                    row["drain"] = statistics.median(drains)
                print(f"{label}: {row['rate']:.0f} inserts/s, server CPU {row['cpu_us']:.0f} us "
                      f"per insert {[round(r) for r in rates]} {[round(c) for c in cpus]}"
                      + (f", delivered {[round(d, 2) for d in drains]} s after the last insert"
                         if streams else ""), flush=True)
                return row

            def idle_cpu(seconds: float = 5.0) -> float:
                """The server's CPU share while the streams wait and nothing is written."""
                cpu0, t0 = cpu_seconds(pid), time.monotonic()
                time.sleep(seconds)
                return (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)

            insert_rate(db.w, 500)  # warm-up
            rows.append(measure("no change stream") | {"idle": idle_cpu()})
            for coll, label, inserts in (
                ("other", "on another collection", args.inserts),
                ("w", "on the written collection", args.written_inserts),
            ):
                streams = Streams(server.uri, "bench", coll, args.streams, args.max_await_ms)
                try:
                    idle = idle_cpu()
                    row = measure(f"{args.streams} streams {label}", inserts,
                                  streams if coll == "w" else None) | {"idle": idle}
                    # Interleaved baseline: the machine's load drifts between rounds.
                    rows.append(row)
                    if coll == "other":
                        flame(pid, "idle", lambda: time.sleep(3.0))
                    else:
                        def deliver(n=inserts, streams=streams):
                            expected = streams.count() + n * args.streams
                            insert_rate(db.w, n)
                            deadline = time.monotonic() + 300
                            while streams.count() < expected and time.monotonic() < deadline:
                                time.sleep(0.01)
                        flame(pid, "written", deliver)
                finally:
                    streams.close()
                row["events"], row["errors"] = streams.events, streams.errors
                rows.append(measure("no change stream (again)") | {"idle": idle_cpu(2.0)})
            client.close()
        finally:
            server.stop()

    base = rows[0]
    lines = [
        "# Change streams: cost for writers",
        "",
        f"`bench/change_streams.py --streams {args.streams} --inserts {args.inserts} "
        f"--rounds {args.rounds} --max-await-ms {args.max_await_ms} --written-inserts "
        f"{args.written_inserts}`: single-client `insert_one` "
        "(w:1) on a one-member set, median of the rounds. The streams are `$changeStream` "
        "cursors iterated by asyncio tasks in a separate client process (`getMore` with "
        f"maxTimeMS {args.max_await_ms} ms, as drivers' `watch()` with the server's default "
        "await). Server CPU per insert comes from /proc (it does not move with the machine's "
        "other load; the insert rate does); with streams on the written collection it is "
        "counted until every stream has received every insert (\"delivered after\": how long "
        "after the last insert that was). Idle CPU is the server's share of one core while "
        "the streams wait and nothing is written.",
        "",
        "| streams open | inserts/s | vs none | server CPU µs/insert | vs none | idle server CPU "
        "| events delivered | delivered after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        drain = f"{r['drain']:.2f} s" if "drain" in r else "-"
        lines.append(f"| {r['label']} | {r['rate']:.0f} | {r['rate'] / base['rate']:.2f}x | "
                     f"{r['cpu_us']:.0f} | {r['cpu_us'] / base['cpu_us']:.2f}x | "
                     f"{r['idle'] * 100:.1f}% | {r.get('events', '-')} | {drain} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
