"""Replica set safety under faults: rollback of writes no majority received, read concerns
on a multi-member set, partitions and latency through a fault-injecting proxy.

Three nidus processes on loopback ports (priorities 3/2/1 as in seed 000's lab). Every wait
is bounded; only this test's own processes are signalled (by pid, through the harness)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import bson
import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from nidus_harness import ReplicaSet

ELECTION_TIMEOUT_MS = 2000
SETTINGS = {"electionTimeoutMillis": ELECTION_TIMEOUT_MS, "heartbeatIntervalMillis": 500}


@pytest.fixture
def rs():
    r = ReplicaSet(3).start()
    try:
        yield r
    finally:
        r.stop()
        for m in r.members:
            assert m.panics() == [], m.log_tail()


def wait_until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except PyMongoError as e:
            last = repr(e)
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what} (last: {last!r})")


def my_state(m) -> str | None:
    try:
        with m.client(serverSelectionTimeoutMS=1000) as c:
            return c.admin.command("replSetGetStatus")["members"][
                [x.get("self", False) for x in c.admin.command("replSetGetStatus")["members"]].index(True)
            ]["stateStr"]
    except (PyMongoError, ValueError):
        return None


def docs_of(m, coll="c", db="test"):
    with m.client(serverSelectionTimeoutMS=2000) as c:
        return sorted(c[db][coll].find({}), key=lambda d: str(d["_id"]))


def rollback_files(m) -> list[Path]:
    root = Path(m.dbpath) / "rollback"
    return sorted(root.glob("*/removed.*.bson")) if root.exists() else []


def test_rollback_undoes_writes_no_majority_received(rs, monkeypatch):
    a, b, c_ = rs.members
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    rs.wait_for_state(a, "PRIMARY", 30)
    for m in (b, c_):
        rs.wait_for_state(m, "SECONDARY")
    majority = WriteConcern(w="majority")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        coll = client.test.get_collection("c", write_concern=majority)
        coll.create_index("k", unique=True)
        coll.insert_many([{"_id": i, "k": i, "v": "committed"} for i in range(5)])
    uuid_before = None
    with a.client() as ca:
        info = ca.test.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]
        uuid_before = info["info"]["uuid"]

    # Both secondaries stop; the primary takes w:1 writes before it notices (check-quorum
    # steps it down after the election timeout).
    b.kill()
    c_.kill()
    with a.client() as ca:
        w1 = ca.test.get_collection("c", write_concern=WriteConcern(w=1))
        w1.insert_one({"_id": "lost-insert", "k": 100, "v": "w1"})
        w1.update_one({"_id": 1}, {"$set": {"v": "lost-update"}})
        w1.delete_one({"_id": 2})
        w1.insert_one({"_id": "lost-2", "k": 101})
        ca.test.get_collection("fresh", write_concern=WriteConcern(w=1)).insert_one({"_id": "only-here"})
        assert ca.test.c.find_one({"_id": 1})["v"] == "lost-update"
    a.kill()

    # The others elect a new primary and take writes of their own (reusing a unique key
    # and an _id the lost writes used).
    b.restart()
    c_.restart()
    assert rs.wait_for_primary(30, exclude=a) is b
    with b.client() as cb:
        nb = cb.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000))
        nb.insert_one({"_id": "new-primary", "k": 100})
        nb.update_one({"_id": 3}, {"$set": {"v": "after-failover"}})
        nb.insert_one({"_id": "lost-2", "k": 102, "v": "b's own"})

    # The old primary restarts: it is held in ROLLBACK for a while (test hook) so its state
    # can be seen, undoes its w:1 writes and syncs.
    monkeypatch.setenv("NIDUS_TEST_ROLLBACK_PAUSE_MS", "3000")
    a.restart()
    monkeypatch.delenv("NIDUS_TEST_ROLLBACK_PAUSE_MS")
    wait_until(lambda: my_state(a) == "ROLLBACK", 20, "old primary in ROLLBACK")
    with b.client() as cb:
        seen = wait_until(
            lambda: [x for x in cb.admin.command("replSetGetStatus")["members"] if x["name"] == rs.host(a) and x["stateStr"] in ("ROLLBACK", "SECONDARY", "PRIMARY")],
            20, "primary sees the old primary")
    wait_until(lambda: my_state(a) in ("SECONDARY", "PRIMARY"), 30, "old primary back")

    want = docs_of(b)
    assert {d["_id"] for d in want} == {0, 1, 2, 3, 4, "new-primary", "lost-2"}
    assert next(d for d in want if d["_id"] == 1)["v"] == "committed"
    got = wait_until(lambda: docs_of(a) if docs_of(a) == want else None, 20, "old primary equals the new one")
    assert got == want
    with a.client() as ca:
        # The unique index agrees with the documents (k: 100 belongs to the new primary's).
        assert [d["_id"] for d in ca.test.c.find({"k": 100}).hint("k_1")] == ["new-primary"]
        assert ca.test.c.count_documents({}) == len(want)
        # The collection only the lost writes created is gone.
        assert "fresh" not in ca.test.list_collection_names()
        # Its oplog holds none of the lost entries.
        lost = list(ca.local["oplog.rs"].find({"$or": [{"o._id": "lost-insert"}, {"ns": "test.fresh"}, {"o.create": "fresh"}]}))
        assert lost == [], lost
        res = ca.test.command("validate", "c")
        assert res["valid"], res

    # The local versions of what was rolled back, as MongoDB writes them.
    files = rollback_files(a)
    assert files, "no rollback files"
    saved = []
    for f in files:
        saved += bson.decode_all(f.read_bytes())
    ids = {d["_id"] for d in saved}
    assert {"lost-insert", 1, "lost-2", "only-here"} <= ids, saved
    assert any(d["_id"] == 1 and d["v"] == "lost-update" for d in saved)
    dirs = {f.parent.name for f in files}
    assert all(len(d) == 36 for d in dirs), dirs  # collection UUIDs
    assert "rolled back" in a.log_text()

    # The set goes on: the old primary takes its role back by priority and every member
    # holds the same data; everything majority-acknowledged survived.
    rs.wait_for_state(a, "PRIMARY", 30)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        client.test.get_collection("c", write_concern=majority).insert_one({"_id": "end", "k": 200})
    final = wait_until(lambda: (lambda ds: ds if all(d == ds[0] for d in ds) else None)([docs_of(m) for m in rs.members]), 20, "same data")
    assert {0, 1, 2, 3, 4, "new-primary", "lost-2", "end"} == {d["_id"] for d in final[0]}


# ---------------------------------------------------------------- read concerns

def test_read_concern_combinations_refused_as_mongodb(rs):
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    primary = rs.wait_for_primary(30)
    secondary = rs.members[2]
    rs.wait_for_state(secondary, "SECONDARY")
    from bson import Timestamp
    from pymongo.errors import OperationFailure

    ts = Timestamp(1, 1)
    cases = [
        ({"afterClusterTime": ts, "afterOpTime": {"ts": ts, "t": 1}}, 72),
        ({"level": "available", "afterClusterTime": ts}, 72),
        ({"level": "linearizable", "afterClusterTime": ts}, 72),
        ({"level": "snapshot", "afterOpTime": {"ts": ts, "t": 1}}, 72),
        ({"level": "local", "afterClusterTime": Timestamp(0, 0)}, 72),
        ({"level": "linearizable", "afterOpTime": {"ts": ts, "t": 1}}, 9),
    ]
    with primary.client() as c:
        for rc, code in cases:
            with pytest.raises(OperationFailure) as e:
                c.test.command("find", "c", readConcern=rc)
            assert e.value.code == code, (rc, e.value.details)
        # Fine on the primary.
        c.test.command("find", "c", readConcern={"level": "linearizable"})
        c.test.command("find", "c", readConcern={"level": "majority", "afterClusterTime": ts})
    with secondary.client(readPreference="secondaryPreferred") as c:
        with pytest.raises(PyMongoError) as e:
            c.test.command("find", "c", readConcern={"level": "linearizable"},
                           read_preference=c.read_preference)
        assert e.value.details["code"] == 10107
        assert "linearizable read concern on non-primary" in str(e.value)


def test_majority_read_on_primary_never_shows_a_write_that_rolls_back(rs):
    a, b, c_ = rs.members
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    rs.wait_for_state(a, "PRIMARY", 30)
    for m in (b, c_):
        rs.wait_for_state(m, "SECONDARY")
    with a.client() as ca:
        ca.test.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "kept"})
        # Majority reads see majority-committed writes at once.
        got = ca.test.command("find", "c", readConcern={"level": "majority"})["cursor"]["firstBatch"]
        assert [d["_id"] for d in got] == ["kept"]
        b.kill()
        c_.kill()
        ca.test.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"_id": "doomed"})
        local = ca.test.command("find", "c", readConcern={"level": "local"})["cursor"]["firstBatch"]
        assert {d["_id"] for d in local} == {"kept", "doomed"}
        from pymongo.errors import OperationFailure
        with pytest.raises(OperationFailure) as e:
            ca.test.command("find", "c", readConcern={"level": "majority"}, maxTimeMS=500)
        assert e.value.code in (50, 11602), e.value.details
    a.kill()
    b.restart()
    c_.restart()
    assert rs.wait_for_primary(30, exclude=a) is b
    a.restart()
    wait_until(lambda: my_state(a) in ("SECONDARY", "PRIMARY"), 30, "old primary back")
    assert wait_until(lambda: [d["_id"] for d in docs_of(a)] == ["kept"], 20, "doomed write rolled back")


def test_causal_reads_on_secondaries_wait_for_the_write(rs):
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    primary = rs.wait_for_primary(30)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")
    uri = rs.uri(readPreference="secondary", w="majority", journal="true", serverSelectionTimeoutMS=20000)
    with MongoClient(uri) as client:
        coll = client.test.c
        for i in range(30):
            with client.start_session(causal_consistency=True) as s:
                coll.update_one({"_id": "x"}, {"$set": {"v": i}}, upsert=True, session=s)
                # afterClusterTime from the session: the secondary waits until it applied
                # the write (w:majority alone does not make it visible there).
                d = coll.with_options(read_concern=__import__("pymongo").read_concern.ReadConcern("majority")).find_one({"_id": "x"}, session=s)
                assert d is not None and d["v"] == i, (i, d)
