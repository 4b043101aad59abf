"""MongoDB's database tools (mongodump, mongorestore, mongoexport, mongoimport) against nidus.

scripts/test.sh builds them (scripts/lib.sh ensure_mongo_tools) from the vendored source in
../shared/tools into tests/.tools/bin; this test runs the same step if they are missing and
skips (with the reason) only when they cannot be built.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Timestamp

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(os.environ.get("NIDUS_TOOLS_DIR", ROOT / "tests" / ".tools"))
NAMES = ("mongodump", "mongorestore", "mongoexport", "mongoimport")


@pytest.fixture(scope="module")
def tools():
    bin_dir = TOOLS / "bin"
    if not all(os.access(bin_dir / n, os.X_OK) for n in NAMES):
        subprocess.run(["bash", "-c", f"source {ROOT}/scripts/lib.sh && ensure_mongo_tools"],
                       capture_output=True, text=True, timeout=1800)
    if not all(os.access(bin_dir / n, os.X_OK) for n in NAMES):
        err = TOOLS / "INSTALL_ERROR"
        pytest.skip(f"MongoDB's tools could not be built: {err.read_text() if err.exists() else '?'}")

    def run(name: str, *args: str) -> str:
        r = subprocess.run([str(bin_dir / name), *args], capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"{name} {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout + r.stderr

    return run


# Documents of every BSON type the tools round-trip; `ts0` is a zero Timestamp that
# mongorestore/mongoimport must keep (they send bypassEmptyTsReplacement).
PEOPLE = [
    {"_id": 1, "name": "ann", "age": 31, "email": "ann@x.org", "tags": ["a", "b"],
     "addr": {"city": "Oslo", "zip": "0150"}},
    {"_id": 2, "name": "bob", "age": Int64(1 << 40), "score": 2.5, "dec": Decimal128("1.10"),
     "when": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)},
    {"_id": 3, "name": "cy", "age": 27, "oid": ObjectId("65a1b2c3d4e5f60718293a4b"),
     "bin": Binary(b"\x00\x01\x02", 0), "ts0": Timestamp(0, 0), "ts": Timestamp(1700000000, 7),
     "nothing": None, "flag": True},
    {"_id": 4, "name": "dee", "age": 45, "nested": {"deep": [{"x": 1}, {"x": [2, 3]}]}},
]


def test_empty_timestamp_replaced_unless_bypassed(db):
    """MongoDB replaces a top-level Timestamp(0, 0) (not `_id`, not nested) of an inserted or
    replacement document by the current time; `bypassEmptyTsReplacement` keeps it."""
    zero = Timestamp(0, 0)
    before = int(time.time()) - 1
    db.command("insert", "c", documents=[{"_id": 1, "a": zero, "n": {"b": zero}},
                                         {"_id": zero, "a": 1}])
    db.command("insert", "c", documents=[{"_id": 2, "a": zero}], bypassEmptyTsReplacement=True)
    db.command("update", "c", updates=[{"q": {"_id": 3}, "u": {"a": zero}, "upsert": True},
                                       {"q": {"_id": 2}, "u": {"$set": {"b": zero}}}])
    db.command("update", "c", updates=[{"q": {"_id": 4}, "u": {"a": zero}, "upsert": True}],
               bypassEmptyTsReplacement=True)
    db.command("findAndModify", "c", query={"_id": 5}, update={"a": zero}, upsert=True)
    db.command("findAndModify", "c", query={"_id": 6}, update={"a": zero}, upsert=True,
               bypassEmptyTsReplacement=True)
    db.command("delete", "c", deletes=[{"q": {"_id": 99}, "limit": 1}], bypassEmptyTsReplacement=True)
    got = {d["_id"] if d["_id"] != zero else "zero": d for d in db.c.find()}
    for replaced in (1, 3, 5):
        ts = got[replaced]["a"]
        assert isinstance(ts, Timestamp) and ts != zero and ts.time >= before, got[replaced]
    assert got[1]["n"] == {"b": zero}
    assert got["zero"] == {"_id": zero, "a": 1}
    assert got[2] == {"_id": 2, "a": zero, "b": zero}
    assert got[4]["a"] == zero and got[6]["a"] == zero


def build_source(db):
    db.people.insert_many(PEOPLE, bypass_document_validation=False)
    # keep the zero timestamp: an insert from pymongo replaces it (MongoDB's rule), so set it
    db.people.update_one({"_id": 3}, {"$set": {"ts0": Timestamp(0, 0)}})
    db.people.create_index([("name", 1), ("age", -1)], name="name_age")
    db.people.create_index("email", unique=True, sparse=True, name="email_unique")
    db.people.create_index("age", partialFilterExpression={"age": {"$gt": 30}}, name="age_partial")
    db.people.create_index("when", expireAfterSeconds=3600 * 24 * 365 * 100, name="when_ttl")
    db.create_collection("checked", validator={"$jsonSchema": {"required": ["qty"],
                                                                "properties": {"qty": {"bsonType": "int"}}}},
                         validationLevel="moderate", validationAction="error")
    db.checked.insert_many([{"_id": i, "qty": i} for i in range(5)])
    db.create_collection("events", capped=True, size=1 << 20, max=100)
    db.events.insert_many([{"_id": i, "e": f"event{i}"} for i in range(10)])
    db.command("create", "adults", viewOn="people", pipeline=[{"$match": {"age": {"$gte": 30}}}])


def docs(coll):
    return list(coll.find_raw_batches(sort=[("_id", 1)]))


def collection_specs(db):
    out = {}
    for c in db.list_collections():
        c.pop("info", None)
        c.pop("idIndex", None)
        out[c["name"]] = c
    return out


def index_specs(coll):
    return sorted((ix for ix in coll.list_indexes()), key=lambda ix: ix["name"])


def test_dump_restore_under_another_name(tools, client, tmp_path, uri):
    src, dst = client["t_tools_src"], client["t_tools_dst"]
    client.drop_database(src.name)
    client.drop_database(dst.name)
    build_source(src)
    dump = tmp_path / "dump"
    tools("mongodump", f"--uri={uri}", f"--db={src.name}", f"--out={dump}")
    assert (dump / src.name / "people.bson").exists()
    tools("mongorestore", f"--uri={uri}", f"--nsFrom={src.name}.*", f"--nsTo={dst.name}.*",
          "--nsInclude", f"{src.name}.*", str(dump))

    assert collection_specs(dst) == collection_specs(src)
    for name in ("people", "checked", "events"):
        assert [dict(ix) for ix in index_specs(dst[name])] == [dict(ix) for ix in index_specs(src[name])], name
        assert docs(dst[name]) == docs(src[name]), name
    restored = dst.people.find_one({"_id": 3})
    assert restored["ts0"] == Timestamp(0, 0)
    assert restored["ts"] == Timestamp(1700000000, 7)
    # the view works and the validator, capped size and max are in force
    assert sorted(d["_id"] for d in dst.adults.find()) == [1, 2, 4]
    with pytest.raises(Exception) as e:
        dst.checked.insert_one({"_id": 9, "qty": "many"})
    assert getattr(e.value, "code", None) == 121
    opts = dst.events.options()
    assert opts["capped"] is True and opts["max"] == 100 and opts["size"] >= 1 << 20
    dst.events.insert_many([{"_id": 100 + i} for i in range(95)])
    assert dst.events.count_documents({}) == 100
    client.drop_database(src.name)
    client.drop_database(dst.name)


def test_export_import_json_and_csv(tools, client, tmp_path, uri):
    src, dst = client["t_tools_exp"], client["t_tools_imp"]
    client.drop_database(src.name)
    client.drop_database(dst.name)
    src.people.insert_many(PEOPLE)
    src.people.update_one({"_id": 3}, {"$set": {"ts0": Timestamp(0, 0)}})

    out = tmp_path / "people.json"
    tools("mongoexport", f"--uri={uri}", f"--db={src.name}", "--collection=people", f"--out={out}",
          "--sort={_id: 1}")
    lines = out.read_text().splitlines()
    assert [json.loads(line)["_id"] for line in lines] == [1, 2, 3, 4]
    tools("mongoimport", f"--uri={uri}", f"--db={dst.name}", "--collection=people", f"--file={out}")
    assert docs(dst.people) == docs(src.people)
    assert dst.people.find_one({"_id": 3})["ts0"] == Timestamp(0, 0)

    csv = tmp_path / "people.csv"
    tools("mongoexport", f"--uri={uri}", f"--db={src.name}", "--collection=people", "--type=csv",
          "--fields=_id,name,age,addr.city", f"--out={csv}", "--sort={_id: 1}")
    assert csv.read_text().splitlines() == [
        "_id,name,age,addr.city",
        "1,ann,31,Oslo",
        f"2,bob,{1 << 40},",
        "3,cy,27,",
        "4,dee,45,",
    ]
    tools("mongoimport", f"--uri={uri}", f"--db={dst.name}", "--collection=fromcsv", "--type=csv",
          "--headerline", f"--file={csv}")
    got = list(dst.fromcsv.find({}, sort=[("_id", 1)]))
    assert got == [
        {"_id": 1, "name": "ann", "age": 31, "addr": {"city": "Oslo"}},
        {"_id": 2, "name": "bob", "age": 1 << 40, "addr": {"city": ""}},
        {"_id": 3, "name": "cy", "age": 27, "addr": {"city": ""}},
        {"_id": 4, "name": "dee", "age": 45, "addr": {"city": ""}},
    ]
    client.drop_database(src.name)
    client.drop_database(dst.name)
