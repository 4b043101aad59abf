"""The oplog (`local.oplog.rs`) of a --replSet server: MongoDB-format entries for every write,
written with the change, readable as a capped collection, bounded by --oplogSizeMB.

Each case checks what a write logs against the entry MongoDB 8.0 writes for it."""

from __future__ import annotations

import threading
import time

import pytest
from bson import Int64, Timestamp
from pymongo import CursorType
from pymongo.errors import OperationFailure


@pytest.fixture
def coll(rs_client, request):
    name = "t_" + request.node.name[:50].replace("[", "_").replace("]", "_")
    rs_client.drop_database(name)
    return rs_client[name]["c"]


def oplog(client):
    return client.local["oplog.rs"]


def entries(client, ns, since=None, op=None):
    q = {"ns": ns}
    if since is not None:
        q["ts"] = {"$gt": since}
    if op is not None:
        q["op"] = op
    return list(oplog(client).find(q).sort("$natural", 1))


def last_ts(client):
    last = oplog(client).find().sort("$natural", -1).limit(1)
    docs = list(last)
    return docs[0]["ts"] if docs else Timestamp(0, 0)


def try_next(cur):
    """The next entry of a tailable cursor, or None after an empty getMore."""
    try:
        return next(cur)
    except StopIteration:
        return None


def uuid_of(coll):
    info = coll.database.command("listCollections", filter={"name": coll.name})
    return info["cursor"]["firstBatch"][0]["info"]["uuid"]


def test_crud_entries(rs_client, coll):
    coll.insert_one({"_id": 0})  # creates the collection
    start = last_ts(rs_client)
    coll.insert_one({"_id": 1, "a": 1, "b": {"x": 1}})
    coll.update_one({"_id": 1}, {"$set": {"a": 5}})
    coll.update_one({"_id": 1}, {"$unset": {"b": ""}, "$set": {"c": [1, 2]}})
    coll.update_one({"_id": 1}, {"$push": {"c": 3}})
    coll.replace_one({"_id": 1}, {"z": 1})
    coll.delete_one({"_id": 1})
    got = entries(rs_client, coll.full_name, since=start)
    ui = uuid_of(coll)
    expected = [
        ("i", {"_id": 1, "a": 1, "b": {"x": 1}}, {"_id": 1}),
        ("u", {"$v": 2, "diff": {"u": {"a": 5}}}, {"_id": 1}),
        ("u", {"$v": 2, "diff": {"d": {"b": False}, "i": {"c": [1, 2]}}}, {"_id": 1}),
        ("u", {"$v": 2, "diff": {"sc": {"a": True, "u2": 3}}}, {"_id": 1}),
        ("u", {"_id": 1, "z": 1}, {"_id": 1}),
        ("d", {"_id": 1}, None),
    ]
    assert [(e["op"], e["o"], e.get("o2")) for e in got] == expected
    for e in got:
        assert e["ui"] == ui
        assert e["t"] == 1 and isinstance(e["t"], Int64)
        assert e["v"] == 2 and isinstance(e["v"], Int64)
        assert isinstance(e["ts"], Timestamp)
        assert "wall" in e
    ts = [e["ts"] for e in got]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)


def test_capped_evictions_are_delete_entries(rs_client, coll):
    """MongoDB 5.0+ replicates a capped collection's evictions as explicit deletes: the insert
    that takes the collection over its limits logs its `i` entry, then one `d` entry per
    evicted document (no session fields: they are not the user's statements), and change
    streams see them as delete events."""
    db = coll.database
    db.create_collection("capped", capped=True, size=100000, max=3)
    c = db.capped
    start = last_ts(rs_client)
    with c.watch() as stream:
        for i in range(5):
            c.insert_one({"_id": i, "pad": "x" * i})
        events = []
        deadline = time.monotonic() + 5
        while len(events) < 7 and time.monotonic() < deadline:
            ev = stream.try_next()
            if ev is not None:
                events.append(ev)
    got = entries(rs_client, c.full_name, since=start)
    assert [(e["op"], e["o"]["_id"]) for e in got] == [
        ("i", 0), ("i", 1), ("i", 2), ("i", 3), ("d", 0), ("i", 4), ("d", 1)]
    ui = uuid_of(c)
    for e in got:
        assert e["ui"] == ui
        if e["op"] == "d":
            assert e["o"] == {"_id": e["o"]["_id"]}
            assert "lsid" not in e and "stmtId" not in e
    ts = [e["ts"] for e in got]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert [x["_id"] for x in c.find()] == [2, 3, 4]
    assert [(e["operationType"], e["documentKey"]["_id"]) for e in events] == [
        ("insert", 0), ("insert", 1), ("insert", 2), ("insert", 3), ("delete", 0),
        ("insert", 4), ("delete", 1)]
    # By size too: one large insert evicts several documents, each with its entry.
    db.create_collection("bysize", capped=True, size=4096)
    b = db.bysize
    b.insert_many([{"_id": i, "pad": "y" * 900} for i in range(4)])
    start = last_ts(rs_client)
    b.insert_one({"_id": 9, "pad": "z" * 2500})
    got = entries(rs_client, b.full_name, since=start)
    deleted = [e["o"]["_id"] for e in got if e["op"] == "d"]
    assert got[0]["op"] == "i" and deleted == [0, 1, 2]
    assert [x["_id"] for x in b.find()] == [3, 9]


def test_retryable_write_fields(rs_client, coll):
    coll.insert_one({"_id": 0})
    start = last_ts(rs_client)
    # pymongo sends lsid/txnNumber with every retryable write to a replica set.
    coll.insert_many([{"_id": 1}, {"_id": 2}])
    got = entries(rs_client, coll.full_name, since=start)
    assert [e["o"] for e in got] == [{"_id": 1}, {"_id": 2}]
    assert [e["stmtId"] for e in got] == [0, 1]
    assert got[0]["lsid"] == got[1]["lsid"] and "id" in got[0]["lsid"]
    assert got[0]["txnNumber"] == got[1]["txnNumber"]
    assert got[0]["prevOpTime"] == {"ts": Timestamp(0, 0), "t": -1}
    assert got[1]["prevOpTime"] == {"ts": got[0]["ts"], "t": 1}
    assert list(got[0])[:3] == ["lsid", "txnNumber", "op"]


def test_transaction_is_one_apply_ops_entry(rs_client, coll):
    coll.insert_one({"_id": 0})
    start = last_ts(rs_client)
    with rs_client.start_session() as s:
        with s.start_transaction():
            coll.insert_one({"_id": 1}, session=s)
            coll.update_one({"_id": 0}, {"$set": {"x": 1}}, session=s)
            coll.delete_one({"_id": 1}, session=s)
        lsid = s.session_id
    # An aborted transaction logs nothing.
    with rs_client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": 99}, session=s)
        s.abort_transaction()
    got = list(oplog(rs_client).find({"ts": {"$gt": start}, "ns": "admin.$cmd"}))
    assert len(got) == 1
    e = got[0]
    assert e["op"] == "c" and e["lsid"]["id"] == lsid["id"] and "txnNumber" in e
    ui = uuid_of(coll)
    assert e["o"]["applyOps"] == [
        {"op": "i", "ns": coll.full_name, "ui": ui, "o": {"_id": 1}, "o2": {"_id": 1}},
        {"op": "u", "ns": coll.full_name, "ui": ui, "o": {"$v": 2, "diff": {"i": {"x": 1}}},
         "o2": {"_id": 0}},
        {"op": "d", "ns": coll.full_name, "ui": ui, "o": {"_id": 1}},
    ]
    assert entries(rs_client, coll.full_name, since=start) == []


def test_ddl_entries(rs_client, coll):
    db = coll.database
    start = last_ts(rs_client)
    db.create_collection("c", validator={"a": {"$exists": True}})
    ui = uuid_of(coll)
    coll.create_index("a")
    db.command("collMod", "c", validationLevel="off")
    coll.drop_index("a_1")
    rs_client.admin.command("renameCollection", coll.full_name, to=f"{db.name}.d")
    db["d"].drop()
    db["e"].insert_one({})
    rs_client.drop_database(db.name)
    cmds = [e for e in oplog(rs_client).find({"ts": {"$gt": start}, "op": "c", "ns": f"{db.name}.$cmd"})]
    os = [e["o"] for e in cmds]
    assert os[0] == {"create": "c", "validator": {"a": {"$exists": True}},
                     "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
    assert os[1] == {"createIndexes": "c", "v": 2, "key": {"a": 1}, "name": "a_1"}
    assert os[2] == {"collMod": "c", "validationLevel": "off"}
    assert os[3] == {"dropIndexes": "c", "index": "a_1"}
    assert cmds[3]["o2"] == {"v": 2, "key": {"a": 1}, "name": "a_1"}
    assert os[4] == {"renameCollection": f"{db.name}.c", "to": f"{db.name}.d", "stayTemp": False}
    assert os[5] == {"drop": "d"}
    assert [e["ui"] for e in cmds[:6]] == [ui] * 6
    assert os[6]["create"] == "e"
    assert os[7] == {"drop": "e"}
    assert os[8] == {"dropDatabase": 1}
    assert len(os) == 9


def test_standalone_has_no_oplog(start_nidus):
    s = start_nidus()
    c = s.client()
    c.t.c.insert_one({"a": 1})
    assert "oplog.rs" not in c.local.list_collection_names()
    c.close()


def test_oplog_is_capped_in_list_collections(rs_client):
    info = list(rs_client.local.list_collections(filter={"name": "oplog.rs"}))
    assert len(info) == 1
    opts = info[0]["options"]
    assert opts["capped"] is True and opts["size"] == 990 * 1024 * 1024
    assert rs_client.local.command("collStats", "oplog.rs")["capped"] is True


def test_natural_order_both_ways_and_filters(rs_client, coll):
    coll.insert_many([{"_id": i} for i in range(5)])
    fwd = [e["o"]["_id"] for e in oplog(rs_client).find({"ns": coll.full_name, "op": "i"})]
    back = [e["o"]["_id"] for e in
            oplog(rs_client).find({"ns": coll.full_name, "op": "i"}).sort("$natural", -1)]
    assert fwd == list(range(5)) and back == list(reversed(range(5)))
    got = list(oplog(rs_client).find({"ns": coll.full_name, "o._id": {"$gte": 3}}))
    assert [e["o"]["_id"] for e in got] == [3, 4]


def test_tailable_await_data_cursor_wakes_on_writes(rs_client, coll):
    coll.insert_one({"_id": 0})
    start = last_ts(rs_client)
    cur = oplog(rs_client).find({"ts": {"$gt": start}},
                          cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(5000)
    got = []

    def write():
        time.sleep(0.3)
        coll.insert_one({"_id": 1})

    t = threading.Thread(target=write)
    t.start()
    t0 = time.monotonic()
    while not got and time.monotonic() - t0 < 10:
        doc = try_next(cur)
        if doc is not None:
            got.append(doc)
    t.join()
    # The getMore returned when the entry became visible, not at its 5 s wait.
    assert got and got[0]["o"] == {"_id": 1} and time.monotonic() - t0 < 4
    cur.close()


def test_concurrent_writers_leave_no_hole_for_a_tailer(rs_client, coll):
    """Writers commit out of ts order; a tailing reader must still see every entry."""
    coll.insert_one({"_id": "seed"})
    start = last_ts(rs_client)
    n_threads, per = 6, 150
    done = threading.Event()
    seen = []

    def tail():
        cur = oplog(rs_client).find({"ts": {"$gt": start}, "ns": coll.full_name},
                              cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(200)
        while True:
            doc = try_next(cur)
            if doc is not None:
                seen.append(doc["o"]["_id"])
                continue
            if done.is_set() and len(seen) >= n_threads * per:
                break
            if done.is_set() and time.monotonic() - done.stamp > 5:
                break
        cur.close()

    def write(k):
        for i in range(per):
            coll.insert_one({"_id": f"{k}-{i}"})

    tailer = threading.Thread(target=tail)
    tailer.start()
    writers = [threading.Thread(target=write, args=(k,)) for k in range(n_threads)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.stamp = time.monotonic()
    done.set()
    tailer.join()
    assert sorted(seen) == sorted(f"{k}-{i}" for k in range(n_threads) for i in range(per))


def test_entries_survive_restart_and_ts_keeps_growing(start_nidus):
    s = start_nidus(extra_args=["--replSet", "rs0"])
    c = s.client()
    c.t.c.insert_one({"_id": 1})
    before = list(oplog(c).find({"ns": "t.c"}))
    c.close()
    s.stop()
    s.start()
    c = s.client()
    assert list(oplog(c).find({"ns": "t.c"})) == before
    c.t.c.insert_one({"_id": 2})
    after = list(oplog(c).find({"ns": "t.c"}))
    assert len(after) == 2 and after[1]["ts"] > after[0]["ts"]
    c.close()


def test_size_bound_truncates_oldest_entries(start_nidus):
    s = start_nidus(extra_args=["--replSet", "rs0", "--oplogSizeMB", "1"])
    c = s.client()
    blob = "x" * 10_000
    c.t.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    c.t.p.insert_many([{"_id": i} for i in range(5)])
    c.t.p.delete_many({})  # pre-images of entries soon truncated
    assert c.config["system.preimages"].count_documents({}) == 5
    c.t.c.insert_many([{"_id": i, "blob": blob} for i in range(300)])  # ~3 MB logged
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = c.local.command("collStats", "oplog.rs")
        if stats["size"] <= 1024 * 1024:
            break
        time.sleep(0.1)
    assert stats["size"] <= 1024 * 1024
    first = next(oplog(c).find().sort("$natural", 1).limit(1))
    assert first["op"] == "i" and first["o"]["_id"] > 150
    last = next(oplog(c).find().sort("$natural", -1).limit(1))
    assert last["o"]["_id"] == 299
    # Pre-images live as long as their entries.
    assert c.config["system.preimages"].count_documents({}) == 0
    c.close()


def test_repl_set_resize_oplog(rs_client, start_nidus):
    with pytest.raises(OperationFailure) as e:
        rs_client.admin.command("replSetResizeOplog", 1, size=100)
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        rs_client.admin.command("replSetResizeOplog", 1)
    assert e.value.code == 72
    assert rs_client.admin.command("replSetResizeOplog", 1, size=2000.0)["ok"] == 1
    info = list(rs_client.local.list_collections(filter={"name": "oplog.rs"}))[0]
    assert info["options"]["size"] == 2000 * 1024 * 1024
    rs_client.admin.command("replSetResizeOplog", 1, size=990)
    s = start_nidus()
    c = s.client()
    with pytest.raises(OperationFailure) as e:
        c.admin.command("replSetResizeOplog", 1, size=1000)
    assert e.value.code == 76
    c.close()


def test_oplog_is_protected(rs_client):
    with pytest.raises(OperationFailure) as e:
        rs_client.local.drop_collection("oplog.rs")
    assert e.value.code == 5255000
    with pytest.raises(OperationFailure) as e:
        rs_client.drop_database("local")
    assert e.value.code == 20
    for write in (lambda o: o.insert_one({"x": 1}), lambda o: o.delete_many({}),
                  lambda o: o.update_many({}, {"$set": {"x": 1}})):
        with pytest.raises(OperationFailure) as e:
            write(oplog(rs_client))
        assert e.value.code == 20
    assert "oplog.rs" in rs_client.local.list_collection_names()
