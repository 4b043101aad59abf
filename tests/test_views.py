"""Views (seed 000's customers), capped collections and tailable cursors, through pymongo."""

from __future__ import annotations

import threading
import time

import pytest
from pymongo import CursorType
from pymongo.errors import OperationFailure, WriteError, BulkWriteError

MARLA = "marla.singer@fightclub.com"


@pytest.fixture
def customers(db):
    db.customers.insert_many([
        {"_id": 1, "customer_id": "C001", "contact": {"email": MARLA, "phone": "555-1010"}},
        {"_id": 2, "customer_id": "C002", "contact": [{"email": "robert.paulson@fightclub.com"}]},
        {"_id": 3, "customer_id": "C003", "contact": {"email": "tyler.durden@fightclub.com"}},
    ])
    db.customers.create_index("contact.email")
    return db.customers


def winning_plan_stages(explain: dict) -> list[str]:
    """Stage names of the find plan an aggregate explain ran, top down."""
    if "stages" in explain:
        planner = explain["stages"][0]["$cursor"]["queryPlanner"]
    else:
        planner = explain["queryPlanner"]
    out, node = [], planner["winningPlan"]
    while node:
        out.append(node["stage"])
        node = node.get("inputStage")
    return out


# --- views ------------------------------------------------------------------------------------


def test_view_renaming_email_reads_through_pipeline_and_scans(db, customers):
    db.create_collection("flat", viewOn="customers",
                         pipeline=[{"$project": {"customer_id": 1, "email": "$contact.email"}}])
    assert list(db.flat.find({"email": MARLA})) == [
        {"_id": 1, "customer_id": "C001", "email": MARLA}]
    explain = db.command("explain", {"find": "flat", "filter": {"email": MARLA}})
    # The $match on the renamed field stays after the $project: no index, a COLLSCAN.
    assert winning_plan_stages(explain)[-1] == "COLLSCAN"
    assert explain["stages"][1]["$match"] == {"email": {"$eq": MARLA}}
    assert explain["stages"][0]["$cursor"]["queryPlanner"]["namespace"] == f"{db.name}.customers"


def test_view_with_match_on_source_field_uses_the_index(db, customers):
    db.create_collection("marla", viewOn="customers",
                         pipeline=[{"$match": {"contact.email": MARLA}},
                                   {"$project": {"customer_id": 1, "email": "$contact.email"}}])
    assert [d["_id"] for d in db.marla.find()] == [1]
    explain = db.command("explain", {"find": "marla", "filter": {}})
    assert winning_plan_stages(explain)[-2:] == ["FETCH", "IXSCAN"]
    # The user's filter on a field the view keeps goes before the $project too.
    explain = db.command("explain", {"find": "marla", "filter": {"customer_id": "C001"}})
    assert winning_plan_stages(explain)[-1] == "IXSCAN"
    assert db.marla.count_documents({}) == 1
    assert db.command("count", "marla")["n"] == 1


def test_find_options_become_stages(db, customers):
    db.create_collection("all", viewOn="customers", pipeline=[])
    got = list(db.all.find({}, {"customer_id": 1, "_id": 0}).sort("customer_id", -1).skip(1).limit(1))
    assert got == [{"customer_id": "C002"}]
    assert db.all.distinct("customer_id") == ["C001", "C002", "C003"]
    assert db.command("count", "all", query={"_id": {"$gt": 1}})["n"] == 2
    assert [d["_id"] for d in db.all.aggregate([{"$match": {"_id": {"$lt": 3}}}])] == [1, 2]
    for option, value in [("min", {"_id": 1}), ("returnKey", True), ("showRecordId", True),
                          ("noCursorTimeout", True), ("tailable", True)]:
        with pytest.raises(OperationFailure) as e:
            db.command("find", "all", **{option: value})
        assert e.value.code == 168, option
    with pytest.raises(OperationFailure) as e:
        db.command("find", "all", sort={"$natural": 1})
    assert e.value.details["errmsg"] == "Sort option $natural not supported in aggregation."


def test_list_collections_and_writes_on_views(db, customers):
    pipeline = [{"$match": {"customer_id": "C001"}}]
    db.create_collection("v", viewOn="customers", pipeline=pipeline)
    infos = {c["name"]: c for c in db.list_collections()}
    assert infos["v"]["type"] == "view"
    assert infos["v"]["options"] == {"viewOn": "customers", "pipeline": pipeline}
    assert infos["v"]["info"] == {"readOnly": True}
    assert infos["customers"]["type"] == "collection"
    assert [c["name"] for c in db.list_collections(filter={"type": "view"})] == ["v"]
    msg = f"Namespace {db.name}.v is a view, not a collection"
    with pytest.raises(WriteError) as e:
        db.v.insert_one({"a": 1})
    assert (e.value.code, e.value.details["errmsg"]) == (166, msg)
    with pytest.raises(WriteError) as e:
        db.v.update_one({}, {"$set": {"a": 1}})
    assert e.value.code == 166
    with pytest.raises(WriteError) as e:
        db.v.delete_many({})
    assert e.value.code == 166
    for cmd in [{"findAndModify": "v", "remove": True}, {"createIndexes": "v", "indexes": [{"key": {"a": 1}, "name": "a"}]},
                {"listIndexes": "v"}, {"collMod": "v", "validator": {"a": 1}}]:
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code in (166, 72), cmd
    with pytest.raises(BulkWriteError) as e:
        db.v.insert_many([{"a": 1}, {"a": 2}], ordered=False)
    assert [w["code"] for w in e.value.details["writeErrors"]] == [166, 166]
    # A collection cannot take the view's name; the view can be dropped.
    with pytest.raises(OperationFailure) as e:
        db.command("create", "v")
    assert e.value.code == 48
    db.drop_collection("v")
    assert "v" not in db.list_collection_names()


def test_views_on_views_collmod_cycles_and_depth(db, customers):
    db.create_collection("v1", viewOn="customers", pipeline=[{"$match": {"_id": {"$gte": 2}}}])
    db.create_collection("v2", viewOn="v1", pipeline=[{"$match": {"_id": {"$lte": 2}}}])
    assert [d["_id"] for d in db.v2.find()] == [2]
    db.command("collMod", "v1", viewOn="customers", pipeline=[])
    assert [d["_id"] for d in db.v2.find()] == [1, 2]
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "v1", viewOn="v2", pipeline=[])
    assert e.value.code == 5
    assert e.value.details["errmsg"] == (
        f"View cycle detected: {db.name}.v1 => {db.name}.v1 => {db.name}.v2 => {db.name}.v1")
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "customers", viewOn="v2")
    assert e.value.details["errmsg"] == "option only supported on a view: viewOn"
    prev = "v2"
    for i in range(3, 21):
        db.create_collection(f"v{i}", viewOn=prev)
        prev = f"v{i}"
    with pytest.raises(OperationFailure) as e:
        db.create_collection("v21", viewOn=prev)
    assert e.value.code == 165
    # A view whose pipeline does not parse, or writes, is refused.
    with pytest.raises(OperationFailure) as e:
        db.create_collection("bad", viewOn="customers", pipeline=[{"$nope": 1}])
    assert e.value.code == 40324
    with pytest.raises(OperationFailure) as e:
        db.create_collection("bad", viewOn="customers", pipeline=[{"$out": "x"}])
    assert e.value.code == 167
    with pytest.raises(OperationFailure) as e:
        db.command("create", "bad", pipeline=[])
    assert e.value.code == 72
    with pytest.raises(OperationFailure) as e:
        db.command("create", "bad", viewOn="customers", validator={"a": 1})
    assert e.value.code == 72


def test_lookup_from_a_view(db, customers):
    db.create_collection("emails", viewOn="customers",
                         pipeline=[{"$project": {"email": "$contact.email"}}])
    db.orders.insert_one({"_id": 10, "cust": 1})
    got = list(db.orders.aggregate([{"$lookup": {"from": "emails", "localField": "cust",
                                                 "foreignField": "_id", "as": "c"}}]))
    assert got[0]["c"] == [{"_id": 1, "email": MARLA}]


# (operation on the view, the collation it names or None) -> the ids it reads, or the error
# code: a view's default collation is every read's, and no operation may name another.
FR1 = {"locale": "fr", "strength": 1}


@pytest.mark.parametrize("view_collation", [FR1, None], ids=["fr", "simple"])
def test_a_views_default_collation_applies_and_cannot_be_overridden(db, view_collation):
    db.words.insert_many([{"_id": i, "s": s} for i, s in enumerate(["abc", "ABC", "àbc", "x"])])
    opts = {"collation": view_collation} if view_collation else {}
    db.command("create", "v", viewOn="words", pipeline=[], **opts)
    want = [0, 1, 2] if view_collation else [0]
    assert sorted(d["_id"] for d in db.v.find({"s": "abc"})) == want
    assert db.v.count_documents({"s": "abc"}) == len(want)
    # Values equal under the view's collation are one value.
    assert len(db.v.distinct("s", {"s": "abc"})) == 1
    assert sorted(d["_id"] for d in db.v.aggregate([{"$match": {"s": "abc"}}])) == want
    # Naming the view's own collation is allowed; any other is refused.
    same = view_collation or {"locale": "simple"}
    assert sorted(d["_id"] for d in db.v.find({"s": "abc"}, collation=same)) == want
    other = {"locale": "simple"} if view_collation else FR1
    for run in (lambda: list(db.v.find({"s": "abc"}, collation=other)),
                lambda: list(db.v.aggregate([{"$match": {"s": "abc"}}], collation=other)),
                lambda: db.v.count_documents({}, collation=other)):
        with pytest.raises(OperationFailure) as e:
            run()
        assert (e.value.code, e.value.details["errmsg"]) == (
            167, "Cannot override a view's default collation")
    # A $lookup into the view runs under the pipeline's collation, which must be the view's.
    db.src.insert_one({"_id": 9, "s": "abc"})
    lookup = [{"$lookup": {"from": "v", "localField": "s", "foreignField": "s", "as": "m"}}]
    if view_collation:
        with pytest.raises(OperationFailure) as e:
            list(db.src.aggregate(lookup))
        assert e.value.code == 167
        out = list(db.src.aggregate(lookup, collation=FR1))
        assert sorted(d["_id"] for d in out[0]["m"]) == [0, 1, 2]
    else:
        assert [d["_id"] for d in list(db.src.aggregate(lookup))[0]["m"]] == [0]


def test_a_view_reads_only_views_of_its_own_collation(db):
    """MongoDB's validateCollation: a view on a view, or whose pipeline reads a view, must
    have that view's collation."""
    db.words.insert_one({"_id": 1, "s": "abc"})
    db.command("create", "vfr", viewOn="words", pipeline=[], collation=FR1)
    db.command("create", "vsimple", viewOn="words", pipeline=[])
    name = db.name
    for args, other in [
        ({"viewOn": "vfr", "pipeline": []}, "vfr"),
        ({"viewOn": "vsimple", "pipeline": [], "collation": FR1}, "vsimple"),
        ({"viewOn": "words", "pipeline": [{"$lookup": {"from": "vfr", "localField": "s",
                                                        "foreignField": "s", "as": "m"}}]}, "vfr"),
        ({"viewOn": "words", "pipeline": [{"$unionWith": "vfr"}]}, "vfr"),
    ]:
        with pytest.raises(OperationFailure) as e:
            db.command("create", "v2", **args)
        assert (e.value.code, e.value.details["errmsg"]) == (
            167, f"View {name}.v2 has conflicting collation with view {name}.{other}"), args
    db.command("create", "v2", viewOn="vfr", pipeline=[], collation=FR1)
    assert [d["_id"] for d in db.v2.find({"s": "ABC"})] == [1]


def test_views_survive_restart(start_nidus):
    server = start_nidus()
    client = server.client()
    client.t.c.insert_one({"_id": 1, "a": 1})
    client.t.create_collection("v", viewOn="c", pipeline=[{"$project": {"b": "$a"}}])
    client.close()
    server.stop()
    server.start()
    client = server.client()
    assert list(client.t.v.find()) == [{"_id": 1, "b": 1}]


# --- capped collections -----------------------------------------------------------------------


def test_capped_max_evicts_oldest_in_order(db):
    db.create_collection("log", capped=True, size=100000, max=3)
    for i in range(7):
        db.log.insert_one({"_id": i})
    assert [d["_id"] for d in db.log.find()] == [4, 5, 6]
    assert [d["_id"] for d in db.log.find().sort("$natural", -1)] == [6, 5, 4]
    stats = db.command("collStats", "log")
    assert (stats["capped"], stats["max"], stats["maxSize"], stats["count"]) == (True, 3, 100000, 3)
    opts = db.log.options()
    assert opts == {"capped": True, "size": 100000, "max": 3}
    # Deletes are allowed (MongoDB 5.0+).
    db.log.delete_one({"_id": 5})
    assert [d["_id"] for d in db.log.find()] == [4, 6]
    # Eviction goes on from the oldest document left, past the ones deleted.
    db.log.insert_many([{"_id": 7}, {"_id": 8}, {"_id": 9}])
    assert [d["_id"] for d in db.log.find()] == [7, 8, 9]
    db.log.delete_one({"_id": 9})
    db.log.insert_many([{"_id": 10}, {"_id": 11}])
    assert [d["_id"] for d in db.log.find()] == [8, 10, 11]


def test_capped_size_evicts_by_bytes(db):
    db.create_collection("sized", capped=True, size=1000)
    for i in range(20):
        db.sized.insert_one({"_id": i, "pad": "x" * 100})  # 124 bytes each
    ids = [d["_id"] for d in db.sized.find()]
    assert ids == list(range(12, 20))
    assert db.command("collStats", "sized")["size"] <= 1000
    with pytest.raises(WriteError) as e:
        db.sized.insert_one({"pad": "x" * 2000})
    assert e.value.code == 10334


def test_capped_create_errors(db):
    cases = [({"capped": True}, 72), ({"capped": True, "size": 0}, 51024),
             ({"size": 100}, 72), ({"capped": True, "size": "x"}, 14),
             ({"capped": True, "size": 100, "max": 2 ** 31}, 2)]
    for opts, code in cases:
        with pytest.raises(OperationFailure) as e:
            db.command("create", "bad", **opts)
        assert e.value.code == code, opts
    with pytest.raises(OperationFailure) as e:
        db.command("create", "ts", timeseries={"timeField": "t"}, capped=True, size=100)
    assert e.value.code == 72


def test_concurrent_capped_inserts_keep_the_limit(db):
    db.create_collection("busy", capped=True, size=10 ** 6, max=50)

    def writer(k):
        for i in range(40):
            db.busy.insert_one({"w": k, "i": i})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    docs = list(db.busy.find())
    assert len(docs) == 50
    # Each writer's documents stay in its insertion order.
    for k in range(4):
        seq = [d["i"] for d in docs if d["w"] == k]
        assert seq == sorted(seq)
    assert db.command("validate", "busy")["valid"]


def test_convert_and_clone_to_capped(db):
    db.plain.insert_many([{"_id": i} for i in range(10)])
    db.plain.create_index("x")
    db.command("cloneCollectionAsCapped", "plain", toCollection="copy", size=100000, max=4)
    assert [d["_id"] for d in db.copy.find()] == [6, 7, 8, 9]
    db.command("convertToCapped", "plain", size=100000, max=5)
    assert db.plain.options()["capped"] is True
    assert [d["_id"] for d in db.plain.find()] == [5, 6, 7, 8, 9]
    assert list(db.plain.index_information()) == ["_id_"]
    with pytest.raises(OperationFailure) as e:
        db.command("convertToCapped", "missing", size=100)
    assert e.value.code == 26
    db.command("collMod", "plain", cappedMax=2)
    db.plain.insert_one({"_id": 10})
    assert [d["_id"] for d in db.plain.find()] == [9, 10]


# --- tailable cursors -------------------------------------------------------------------------


def test_tailable_cursor_follows_inserts(db):
    db.create_collection("tail", capped=True, size=100000)
    db.tail.insert_one({"_id": 0})
    cursor = db.tail.find(cursor_type=CursorType.TAILABLE)
    assert [d["_id"] for d in cursor] == [0]
    assert cursor.alive
    db.tail.insert_many([{"_id": 1}, {"_id": 2}])
    assert [d["_id"] for d in cursor] == [1, 2]
    db.plain_coll.insert_one({})
    with pytest.raises(OperationFailure) as e:
        list(db.plain_coll.find(cursor_type=CursorType.TAILABLE))
    assert e.value.code == 2


def test_tailable_on_empty_capped_collection_is_closed(db):
    db.create_collection("empty", capped=True, size=4096)
    reply = db.command("find", "empty", tailable=True)
    assert reply["cursor"]["id"] == 0


def test_await_data_getmore_waits_then_sees_insert_from_other_client(db, client, uri):
    from pymongo import MongoClient
    db.create_collection("feed", capped=True, size=100000)
    db.feed.insert_one({"_id": 0})
    # One session for the cursor and its getMores (MongoDB refuses a getMore from another
    # session with 50738, and implicit sessions may differ between commands).
    session = client.start_session()
    reply = db.command("find", "feed", tailable=True, awaitData=True, session=session)
    cid = reply["cursor"]["id"]
    assert cid != 0
    # Nothing new: the getMore waits about maxTimeMS, then returns an empty batch.
    started = time.monotonic()
    r = db.command("getMore", cid, collection="feed", maxTimeMS=300, session=session)
    waited = time.monotonic() - started
    assert r["cursor"]["nextBatch"] == [] and r["cursor"]["id"] == cid
    assert 0.25 <= waited < 2.0
    other = MongoClient(uri)

    def insert_later():
        time.sleep(0.3)
        other[db.name].feed.insert_one({"_id": 1})

    t = threading.Thread(target=insert_later)
    t.start()
    started = time.monotonic()
    r = db.command("getMore", cid, collection="feed", maxTimeMS=5000, session=session)
    waited = time.monotonic() - started
    t.join()
    other.close()
    session.end_session()
    assert [d["_id"] for d in r["cursor"]["nextBatch"]] == [1]
    assert waited < 3.0


def test_tailable_errors_and_position_lost(db):
    db.create_collection("small", capped=True, size=100000, max=2)
    db.small.insert_many([{"_id": 0}, {"_id": 1}])
    with pytest.raises(OperationFailure) as e:
        db.command("find", "small", awaitData=True)
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        db.command("find", "small", tailable=True, sort={"_id": 1})
    assert e.value.code == 2
    # The cursor's commands share one explicit session (an implicit one may differ between
    # commands, and a getMore in another session than the cursor's is 50738).
    with db.client.start_session() as session:
        reply = db.command("find", "small", tailable=True, session=session)
        cid = reply["cursor"]["id"]
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cid, collection="small", maxTimeMS=10, session=session)
        assert e.value.code == 2
        # The last document the cursor returned is evicted: its position is lost.
        db.small.insert_many([{"_id": 2}, {"_id": 3}])
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cid, collection="small", session=session)
        assert e.value.code == 136


# --- validationAction: warn -------------------------------------------------------------------


def test_validation_warn_accepts_and_logs_20294(start_nidus):
    import json
    server = start_nidus()
    client = server.client()
    client.t.create_collection("w", validator={"a": {"$type": "int"}}, validationAction="warn")
    client.t.w.insert_one({"_id": 7, "a": "x"})
    client.t.w.update_one({"_id": 7}, {"$set": {"a": "y"}})
    assert list(client.t.w.find()) == [{"_id": 7, "a": "y"}]
    deadline = time.monotonic() + 5
    lines = []
    while time.monotonic() < deadline and len(lines) < 2:
        lines = [json.loads(line) for line in server.log_text().splitlines()
                 if '"id":20294' in line]
        time.sleep(0.1)
    assert len(lines) == 2
    first = lines[0]
    assert (first["s"], first["c"], first["msg"]) == ("W", "STORAGE", "Document would fail validation")
    assert first["attr"]["namespace"] == "t.w"
    assert first["attr"]["document"] == {"_id": 7, "a": "x"}
    assert first["attr"]["errInfo"]["failingDocumentId"] == 7
    client.close()
