"""Time-series storage and ingest (issue 22): the same sensor measurements written to a Nidus
time-series collection, a plain Nidus collection and a PostgreSQL table, each system on its
own fresh data directory; reports measurements per second and bytes per measurement.

    bench/.venv/bin/python bench/timeseries.py [--n 200000] [--sensors 100] [--nidus BIN]

Data: `sensors` sensors, one measurement each every 10 s, in time order, as
`{metadata: {sensorId, type}, timestamp, temp, humidity}`; written in batches of 1,000
(`insert_many` for Nidus, `COPY` for PostgreSQL). Indexes: the time-series collection has
its default `{metadata: 1, timestamp: 1}` index; the plain collection gets the same index
(plus `_id`); the PostgreSQL table `(id bigserial primary key, ts timestamptz, sensor_id int,
type text, temp float8, humidity int)` gets `(sensor_id, ts)`. Sizes: the BSON bytes the
collection holds (`collStats.size`, the buckets collection's for the time-series one), and
the bytes on disk: RocksDB's SST files after a clean shutdown, PostgreSQL's
`pg_total_relation_size` of the table and its indexes. Writes
`bench/results/timeseries.md`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402  (Nidus and Postgres process wrappers)


def measurements(n, sensors):
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    for i in range(n):
        s = i % sensors
        yield {
            "metadata": {"sensorId": s, "type": "temperature"},
            "timestamp": start + datetime.timedelta(seconds=10 * (i // sensors)),
            "temp": 20.0 + ((i * 7919) % 200) / 10.0,
            "humidity": (i * 104729) % 100,
        }


def sst_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            if not f.endswith(".sst"):
                continue
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def batches(it, size=1000):
    batch = []
    for d in it:
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_nidus(binary, n, sensors, timeseries):
    tmp = tempfile.mkdtemp(prefix="nidus-ts-bench-")
    try:
        node = bench.Nidus(binary, tmp)
        db = node.db
        if timeseries:
            db.create_collection("m", timeseries={"timeField": "timestamp", "metaField": "metadata"})
        else:
            db.create_collection("m")
            db.m.create_index([("metadata", 1), ("timestamp", 1)])
        t0 = time.perf_counter()
        for b in batches(measurements(n, sensors)):
            db.m.insert_many(b, ordered=True)
        elapsed = time.perf_counter() - t0
        assert db.m.count_documents({}) == n, "every measurement is visible"
        stats = db.command("collStats", "system.buckets.m" if timeseries else "m")
        docs = stats["count"]
        bson_bytes = stats["size"]
        node.stop()
        disk = sst_bytes(node.dbpath)
        return {"rate": n / elapsed, "docs": docs, "bson": bson_bytes / n, "disk": disk / n}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_postgres(n, sensors):
    tmp = tempfile.mkdtemp(prefix="pg-ts-bench-")
    try:
        pg = bench.Postgres(tmp)
        c = pg.conn
        c.execute("CREATE TABLE m (id bigserial PRIMARY KEY, ts timestamptz NOT NULL, "
                  "sensor_id int NOT NULL, type text NOT NULL, temp float8, humidity int)")
        c.execute("CREATE INDEX m_sensor_ts ON m (sensor_id, ts)")
        cur = c.cursor()
        t0 = time.perf_counter()
        for b in batches(measurements(n, sensors)):
            with c.transaction():
                with cur.copy("COPY m (ts, sensor_id, type, temp, humidity) FROM STDIN") as copy:
                    for d in b:
                        copy.write_row((d["timestamp"], d["metadata"]["sensorId"],
                                        d["metadata"]["type"], d["temp"], d["humidity"]))
        elapsed = time.perf_counter() - t0
        c.execute("CHECKPOINT")
        rel = c.execute("SELECT pg_total_relation_size('m')").fetchone()[0]
        count = c.execute("SELECT count(*) FROM m").fetchone()[0]
        assert count == n
        pg.stop()
        return {"rate": n / elapsed, "docs": count, "bson": None, "disk": rel / n}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--sensors", type=int, default=100)
    p.add_argument("--nidus", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "..", "target")), "release", "nidus"))
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--out", default=os.path.join(HERE, "results", "timeseries.md"))
    args = p.parse_args()
    rows = [
        ("Nidus time-series collection", run_nidus(args.nidus, args.n, args.sensors, True)),
        ("Nidus plain collection", run_nidus(args.nidus, args.n, args.sensors, False)),
    ]
    if not args.no_postgres:
        rows.append(("PostgreSQL table", run_postgres(args.n, args.sensors)))
    md = [
        f"# Time-series ingest and storage ({args.n:,} measurements, {args.sensors} sensors)",
        "",
        f"`bench/timeseries.py --n {args.n} --sensors {args.sensors}`, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        "one run on a shared 2-core machine (rates are indicative).",
        "",
        "| system | measurements/s | stored documents | BSON bytes / measurement | "
        "on-disk bytes / measurement |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        bson_col = "n/a" if r["bson"] is None else f"{r['bson']:.1f}"
        md.append(f"| {name} | {r['rate']:,.0f} | {r['docs']:,} | {bson_col} | {r['disk']:.1f} |")
    md += [
        "",
        "BSON bytes: `collStats.size`, the BSON of the stored documents (the bucket documents for",
        "the time-series collection). On disk: Nidus's RocksDB SST files after a clean shutdown",
        "(compressed; records, index entries and the oplog of the single-member replica set, and",
        "bucket versions that compaction has not dropped yet), PostgreSQL's",
        "`pg_total_relation_size` (heap, TOAST and indexes) after a CHECKPOINT.",
    ]
    text = "\n".join(md) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
