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
from pymongo.errors import ConnectionFailure, NotPrimaryError, PyMongoError

from nidus_harness import ReplicaSet, member_state
from nidus_harness import wait_until as harness_wait_until

ELECTION_TIMEOUT_MS = 2000
# A write concern the tests name where they mean w: 1 for commands sent through
# `Database.command` (which attaches none, so the set's implicit default, majority, applies).
W1 = {"w": 1}
SETTINGS = {"electionTimeoutMillis": ELECTION_TIMEOUT_MS, "heartbeatIntervalMillis": 500}



def wait_until(pred, timeout: float, what: str):
    """A wait that counts driver errors (members down or partitioned) as a falsy try."""
    return harness_wait_until(pred, timeout, what, tolerate=(PyMongoError,))


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


def start_lab_set(rs):
    """Initiates the set as seed 000's lab (priorities 3/2/1) and waits until the first member
    is primary and the others secondaries."""
    rs.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    rs.wait_for_state(rs.members[0], "PRIMARY", 30)
    for m in rs.members[1:]:
        rs.wait_for_state(m, "SECONDARY")


def restart_b_and_c(rs):
    """The old primary is down: the two others start again. Either may win the first election
    (c_ when b starts slower); b, the higher priority, then takes over, as in MongoDB."""
    a, b, c_ = rs.members
    b.restart()
    c_.restart()
    assert rs.wait_for_primary(30, exclude=a) in (b, c_)
    rs.wait_for_state(b, "PRIMARY", 30)


def test_rollback_undoes_writes_no_majority_received(rs, monkeypatch):
    a, b, c_ = rs.members
    start_lab_set(rs)
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
    restart_b_and_c(rs)
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


def catalog_state(m, db="test") -> dict:
    """Per collection: UUID, options and index specs."""
    with m.client(serverSelectionTimeoutMS=2000) as c:
        out = {}
        for info in c[db].list_collections(filter={"type": "collection"}):
            name = info["name"]
            out[name] = {
                "uuid": info["info"]["uuid"],
                "options": info.get("options"),
                "indexes": sorted((dict(ix) for ix in c[db][name].list_indexes()), key=lambda ix: ix["name"]),
            }
        return out


def test_rollback_undoes_ddl_no_majority_received(rs):
    """Index builds and drops, collMod (of options and of an index), renames (one over a
    collection it drops) and a drop taken with w:1 while both secondaries were down are undone when the old primary rejoins: its catalog becomes the
    new primary's again (as MongoDB's rollback refetches the catalog state)."""
    a, b, c_ = rs.members
    start_lab_set(rs)
    majority = WriteConcern(w="majority")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        db = client.get_database("test", write_concern=majority)
        db.create_collection("validated", validator={"n": {"$type": "int"}})
        db.validated.insert_many([{"_id": i, "n": i} for i in range(3)])
        db.c.create_index("k")
        db.c.create_index("gone", name="gone_1")
        db.c.insert_many([{"_id": i, "k": i, "gone": i} for i in range(10)])
        db.old_name.insert_many([{"_id": i} for i in range(4)])
        db.dropped.insert_many([{"_id": i, "d": i} for i in range(6)])
        db.dropped.create_index("d")
        db.over.insert_many([{"_id": i, "o": i} for i in range(2)])
        db.target.insert_many([{"_id": i, "t": i} for i in range(5)])
        db.target.create_index("t")
        db.c.insert_one({"_id": "sync"})
    want = catalog_state(a)
    assert {"validated", "c", "old_name", "dropped", "over", "target"} <= set(want)

    b.kill()
    c_.kill()
    with a.client() as ca:
        t = ca.get_database("test", write_concern=WriteConcern(w=1))
        t.command("createIndexes", "c", indexes=[{"key": {"lost": 1}, "name": "lost_1"}], writeConcern=W1)
        t.command("dropIndexes", "c", index="gone_1", writeConcern=W1)
        t.command("collMod", "validated", validator={"n": {"$type": "string"}}, writeConcern=W1)
        t.old_name.rename("new_name")
        t.new_name.insert_one({"_id": "in-renamed"})
        t.dropped.drop()
        t.command("collMod", "c", index={"name": "k_1", "hidden": True}, writeConcern=W1)
        t.over.rename("target", dropTarget=True)
        t.c.insert_one({"_id": "w1", "k": -1})
        assert "lost_1" in t.c.index_information()
        assert "dropped" not in t.list_collection_names()
    a.kill()
    restart_b_and_c(rs)
    with b.client() as cb:
        cb.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": "new-primary", "k": 100})
    assert catalog_state(b) == want

    a.restart()
    wait_until(lambda: my_state(a) in ("SECONDARY", "PRIMARY"), 60, "old primary back")
    got = wait_until(lambda: (lambda s: s if s == want else None)(catalog_state(a)), 30,
                     "old primary's catalog equals the new primary's")
    assert got == want
    for coll in ("c", "validated", "old_name", "dropped", "over", "target"):
        wait_until(lambda coll=coll: docs_of(a, coll) == docs_of(b, coll), 20, f"{coll} equal")
    assert len(docs_of(a, "dropped")) == 6
    assert len(docs_of(a, "target")) == 5
    assert {d["_id"] for d in docs_of(a, "old_name")} == {0, 1, 2, 3}
    with a.client() as ca:
        assert "new_name" not in ca.test.list_collection_names()
        assert ca.test.c.find_one({"_id": "w1"}) is None
        for name in ("c", "dropped", "validated"):
            res = ca.test.command("validate", name)
            assert res["valid"], res
    log = a.log_text()
    assert "rollback drops index lost_1" in log, a.log_tail()
    assert "rollback renames test.new_name back to test.old_name" in log
    assert "rollback recreates test.dropped" in log
    assert "rollback recreates test.target" in log
    # The set goes on with the same catalog everywhere.
    rs.wait_for_state(a, "PRIMARY", 30)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        client.test.get_collection("c", write_concern=majority).insert_one({"_id": "end"})
    for m in rs.members:
        assert catalog_state(m) == want


@pytest.mark.parametrize("divergent_drop", [True, False], ids=["with-ddl", "documents-only"])
def test_rollback_finds_divergent_documents_in_a_collection_renamed_since(rs, divergent_drop):
    """The old primary's divergent insert and update went into a collection the new primary
    renamed after the common point (with or without a divergent drop in the same rollback).
    The divergent versions are in the member's collection under its old name, the source's
    versions under the new name: they must be undone there (saved to the rollback directory)
    with the source's versions, and after the rename reaches the member both hold the same
    documents."""
    a, b, c_ = rs.members
    start_lab_set(rs)
    majority = WriteConcern(w="majority")
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        db = client.get_database("test", write_concern=majority)
        db.x.insert_many([{"_id": i, "v": "committed"} for i in range(3)])
        db.z.insert_one({"_id": 0})
    with a.client() as ca:
        info = ca.test.command("listCollections", filter={"name": "x"})["cursor"]["firstBatch"][0]
        x_uuid = info["info"]["uuid"].as_uuid()

    b.kill()
    c_.kill()
    with a.client() as ca:
        t = ca.get_database("test", write_concern=WriteConcern(w=1))
        t.x.insert_one({"_id": "lost", "v": "divergent"})
        t.x.update_one({"_id": 1}, {"$set": {"v": "divergent"}})
        if divergent_drop:
            t.z.drop()
    a.kill()
    restart_b_and_c(rs)
    with b.client() as cb:
        cb.admin.command("renameCollection", "test.x", to="test.y",
                         writeConcern={"w": "majority", "wtimeout": 20000})
    want = docs_of(b, "y")
    assert want == [{"_id": i, "v": "committed"} for i in range(3)]

    a.restart()
    wait_until(lambda: my_state(a) in ("SECONDARY", "PRIMARY"), 60, "old primary back")
    wait_until(lambda: docs_of(a, "y") == want, 30, "the old primary's y equals the new primary's")
    with a.client() as ca:
        names = ca.test.list_collection_names()
        assert "x" not in names and "z" in names, names
        res = ca.test.command("validate", "y")
        assert res["valid"], res
    saved = [bson.decode_all(f.read_bytes()) for f in rollback_files(a) if f.parent.name == str(x_uuid)]
    assert [(d["_id"], d["v"]) for docs in saved for d in docs] in (
        [(1, "divergent"), ("lost", "divergent")], [("lost", "divergent"), (1, "divergent")]), saved


def roll_back_old_primary(rs, divergent, on_new_primary):
    """Seed 000's rollback: with the two others down, `divergent(client)` writes with w:1 on
    the first member (the primary); it stops; the others elect the second member, where
    `on_new_primary(client, wc)` writes (`wc`: a majority write concern); the first member
    starts again. Returns the new primary's catalog and documents (`member_state`) once the
    old primary, back as a secondary, holds the same."""
    a, b, c_ = rs.members
    b.kill()
    c_.kill()
    with a.client() as ca:
        divergent(ca)
    a.kill()
    restart_b_and_c(rs)
    with b.client() as cb:
        on_new_primary(cb, {"w": "majority", "wtimeout": 20000})
    want = member_state(b)
    a.restart()
    wait_until(lambda: my_state(a) == "SECONDARY", 60, "old primary back as a secondary")
    wait_until(lambda: member_state(a) == want, 30, "the old primary's catalog and documents")
    assert "cannot apply" not in a.log_text(), a.log_tail()
    return want


def test_entries_after_a_rollback_find_their_collection_by_uuid(rs):
    """The old primary's divergent rename of `x` makes its rollback restore the collection's
    name from the new primary, which by then renamed `x` to `y`, wrote to `y` and renamed it
    to `z`. The entries the member applies next (up to minValid) name `x` and `y`, which it no
    longer has: they must find the collection by its UUID (as MongoDB's oplog application
    does), not create a stray `y` or stop at "target namespace exists"."""
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        client.test.get_collection("x", write_concern=WriteConcern(w="majority")).insert_many(
            [{"_id": i} for i in range(3)])

    def divergent(ca):
        ca.admin.command("renameCollection", "test.x", to="test.w", writeConcern={"w": 1})

    def on_new_primary(cb, wc):
        cb.admin.command("renameCollection", "test.x", to="test.y", writeConcern=wc)
        cb.test.command("insert", "y", documents=[{"_id": "in-y"}], writeConcern=wc)
        cb.admin.command("renameCollection", "test.y", to="test2.z", writeConcern=wc)
        cb.test2.command("insert", "z", documents=[{"_id": "in-z"}], writeConcern=wc)

    want = roll_back_old_primary(rs, divergent, on_new_primary)
    assert set(want) == {"test2.z"}, want


def test_rollback_refetches_documents_of_each_collection_a_name_held(rs):
    """On the old primary the name `test.c` holds two collections in turn: its own `c`, whose
    document 1 it updates, then `test2.a`, renamed over it with `dropTarget`, whose document 2
    it upserts and whose document 3 it deletes before renaming it on to `test.d`. Each
    divergent document must be made the new primary's again in its own collection (found by
    UUID), not only in the collection the name held first."""
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        wc = WriteConcern(w="majority")
        client.test.get_collection("c", write_concern=wc).insert_many([{"_id": i, "v": "c"} for i in range(4)])
        client.test2.get_collection("a", write_concern=wc).insert_many([{"_id": i, "v": "a"} for i in (1, 3)])

    def divergent(ca):
        ca.test.get_collection("c", write_concern=WriteConcern(w=1)).update_one(
            {"_id": 1}, {"$set": {"v": "divergent"}})
        ca.admin.command("renameCollection", "test2.a", to="test.c", dropTarget=True, writeConcern={"w": 1})
        moved = ca.test.get_collection("c", write_concern=WriteConcern(w=1))
        moved.update_one({"_id": 2}, {"$set": {"v": "divergent"}}, upsert=True)
        moved.delete_one({"_id": 3})
        # Out of the name's way, so that undoing the rename over `c` renames it back.
        ca.admin.command("renameCollection", "test.c", to="test.d", writeConcern={"w": 1})

    def on_new_primary(cb, wc):
        cb.test.command("insert", "c", documents=[{"_id": "b", "v": "new primary"}], writeConcern=wc)

    want = roll_back_old_primary(rs, divergent, on_new_primary)
    assert [d["_id"] for d in want["test2.a"]["docs"]] == [1, 3], want


def test_rollback_undoes_view_changes(rs):
    """Views have no UUID: their divergent `create`, `collMod` and `drop` are undone by name,
    each view made the new primary's again (a view with a collation included)."""
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        wc = {"w": "majority"}
        client.test.command("insert", "c", documents=[{"_id": i, "v": i} for i in range(4)], writeConcern=wc)
        client.test.command("create", "dropped", viewOn="c", pipeline=[{"$match": {"v": {"$gt": 1}}}], writeConcern=wc)
        client.test.command("create", "changed", viewOn="c", pipeline=[], writeConcern=wc)

    def divergent(ca):
        w1 = {"w": 1}
        ca.test.command("create", "fresh", viewOn="c", pipeline=[], writeConcern=w1)
        ca.test.command("drop", "dropped", writeConcern=w1)
        ca.test.command("collMod", "changed", viewOn="c", pipeline=[{"$match": {"v": 2}}], writeConcern=w1)

    def on_new_primary(cb, wc):
        cb.test.command("create", "folded", viewOn="c", pipeline=[], collation={"locale": "en", "strength": 2},
                        writeConcern=wc)

    want = roll_back_old_primary(rs, divergent, on_new_primary)
    assert sorted(ns for ns, s in want.items() if "view" in s) == ["test.changed", "test.dropped", "test.folded"], want
    assert want["test.folded"]["view"]["collation"]["locale"] == "en", want


def oplog_after(m, ts):
    """(ts, op, ns, o) of each entry of `m`'s oplog after `ts`, in order."""
    with m.client() as c:
        return [(e["ts"], e["op"], e["ns"], e["o"])
                for e in c.local["oplog.rs"].find({"ts": {"$gt": ts}}).sort("ts", 1)]


def test_entries_replayed_after_a_rollback_meet_the_catalog_it_restored(rs):
    """A rollback restores the catalog of collections divergent DDL touched as the new primary
    holds it at the time of the rollback, later than the entries the member applies next (up
    to minValid). Those must still apply, as MongoDB's recovering application does:
    - `u`'s rename to `test2.a` meets `y`, which the rollback had already put at
      `test2.a` (its name at the end): `y` is moved out of the way, and the entries that
      follow put both where the primary has them;
    - inserts into `z`, which the new primary dropped afterwards, find no collection with
      their UUID: skipped, not written into a new `test.z` (whose `create` a secondary would
      log as its own entry, in no other member's oplog)."""
    a, b, c_ = rs.members
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        wc = WriteConcern(w="majority")
        for name in ("u", "y", "z"):
            client.test.get_collection(name, write_concern=wc).insert_many([{"_id": i, "in": name} for i in range(3)])
        common = client.local["oplog.rs"].find_one(sort=[("ts", -1)])["ts"]

    def divergent(ca):
        for name in ("u", "y", "z"):
            ca.test.get_collection(name, write_concern=WriteConcern(w=1)).create_index("divergent")

    def on_new_primary(cb, wc):
        cb.admin.command("renameCollection", "test.u", to="test2.a", writeConcern=wc)
        cb.test2.command("insert", "a", documents=[{"_id": "in-a"}], writeConcern=wc)
        cb.admin.command("renameCollection", "test2.a", to="test.x", writeConcern=wc)
        cb.admin.command("renameCollection", "test.y", to="test2.a", writeConcern=wc)
        cb.test.command("insert", "z", documents=[{"_id": "in-z"}], writeConcern=wc)
        cb.test.command("drop", "z", writeConcern=wc)

    want = roll_back_old_primary(rs, divergent, on_new_primary)
    assert set(want) == {"test.x", "test2.a"}, want
    assert want["test2.a"]["docs"][0]["in"] == "y", want
    wait_until(lambda: oplog_after(a, common) == oplog_after(b, common), 30, "the old primary's oplog")


def test_rollback_whose_source_goes_away_finishes_against_the_next_primary(rs, monkeypatch):
    """The old primary starts its rollback against the new primary, which then stops: the
    member stays in ROLLBACK (it neither stands for election nor applies anything on top of
    its divergent writes), helps elect the third member, and finishes its rollback against
    it (MongoDB's rollback also starts over with another sync source)."""
    a, b, c_ = rs.members
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        client.test.get_collection("c", write_concern=WriteConcern(w="majority")).insert_many(
            [{"_id": i, "v": "committed"} for i in range(3)])
    b.kill()
    c_.kill()
    with a.client() as ca:
        w1 = ca.test.get_collection("c", write_concern=WriteConcern(w=1))
        w1.insert_one({"_id": "lost", "v": "divergent"})
        w1.update_one({"_id": 1}, {"$set": {"v": "divergent"}})
    a.kill()
    restart_b_and_c(rs)
    with b.client() as cb:
        cb.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": "b", "v": "new primary"})

    monkeypatch.setenv("NIDUS_TEST_ROLLBACK_PAUSE_MS", "3000")
    a.restart()
    monkeypatch.delenv("NIDUS_TEST_ROLLBACK_PAUSE_MS")
    wait_until(lambda: my_state(a) == "ROLLBACK", 20, "old primary in ROLLBACK")
    b.kill()
    rs.wait_for_state(c_, "PRIMARY", 40)
    with c_.client() as cc:
        cc.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": "c", "v": "third primary"})
    wait_until(lambda: my_state(a) == "SECONDARY", 40, "old primary back as a secondary")
    want = [{"_id": 0, "v": "committed"}, {"_id": 1, "v": "committed"}, {"_id": 2, "v": "committed"},
            {"_id": "b", "v": "new primary"}, {"_id": "c", "v": "third primary"}]
    wait_until(lambda: docs_of(a) == want, 20, "the old primary holds the set's documents")
    log = a.log_text()
    assert "rollback from" in log and "failed, trying again" in log, a.log_tail()
    assert "rolled back 2 oplog entries" in log, a.log_tail()


def test_rollback_drops_a_collection_it_created_that_the_new_primary_created_too(rs):
    """The old primary created a collection (implicitly, by a w:1 insert) that no majority
    received; the new primary then created one of the same name. The old primary's is
    divergent whatever the source holds under its name: rolled back, its document saved, and
    the member ends with the new primary's collection, UUID and documents (MongoDB drops the
    collections created after the common point and applies the source's creation)."""
    a, b, c_ = rs.members
    start_lab_set(rs)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=20000)) as client:
        client.test.get_collection("base", write_concern=WriteConcern(w="majority")).insert_one({"_id": 0})

    b.kill()
    c_.kill()
    with a.client() as ca:
        ca.get_database("test", write_concern=WriteConcern(w=1)).x.insert_one({"_id": "a-side"})
        a_uuid = ca.test.command("listCollections", filter={"name": "x"})["cursor"]["firstBatch"][0]["info"]["uuid"]
    a.kill()
    restart_b_and_c(rs)
    with b.client() as cb:
        cb.test.get_collection("x", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one(
            {"_id": "b-side"})

    def x_of(m):
        with m.client(serverSelectionTimeoutMS=2000) as c:
            info = c.test.command("listCollections", filter={"name": "x"})["cursor"]["firstBatch"]
            return (info[0]["info"]["uuid"] if info else None), docs_of(m, "x")

    want = x_of(b)
    assert want[1] == [{"_id": "b-side"}] and want[0] != a_uuid
    a.restart()
    wait_until(lambda: my_state(a) in ("SECONDARY", "PRIMARY"), 60, "old primary back")
    wait_until(lambda: x_of(a) == want, 30, "the old primary's x is the new primary's (UUID, documents)")
    saved = [d for f in rollback_files(a) if f.parent.name == str(a_uuid.as_uuid())
             for d in bson.decode_all(f.read_bytes())]
    assert saved == [{"_id": "a-side"}], saved
    assert "rollback drops test.x (created by a divergent entry)" in a.log_text()


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
    start_lab_set(rs)
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
    restart_b_and_c(rs)
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


# ---------------------------------------------------------------- faults through a proxy

@pytest.fixture
def proxied():
    from fault_proxy import ProxiedSet

    r = ReplicaSet(3).start()
    p = ProxiedSet(r)
    try:
        yield p
    finally:
        p.close()
        r.stop()
        for m in r.members:
            assert m.panics() == [], m.log_tail()


def start_proxied(p):
    p.initiate(priorities=[3, 2, 1], settings=SETTINGS)
    a = p.rs.members[0]
    p.rs.wait_for_state(a, "PRIMARY", 30)
    for m in p.rs.members[1:]:
        p.rs.wait_for_state(m, "SECONDARY", 30)
    return a


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def test_seed000_lab_stale_reads_causal_reads_and_majority_cost(proxied):
    """Seed 000's lab: priorities 3/2/1, a client with readPreference=secondaryPreferred,
    w=majority, journal=true, and injected network latency."""
    from pymongo.read_concern import ReadConcern

    start_proxied(proxied)
    delay_ms = 50
    uri = proxied.uri(readPreference="secondaryPreferred", retryWrites="true", w="majority",
                      journal="true", serverSelectionTimeoutMS=20000)
    with MongoClient(uri) as client:
        client.test.c.insert_one({"_id": "warm", "v": 0})
        proxied.faults.delay(delay_ms)
        # w:1 and a plain read from a secondary: the read can miss the write.
        w1 = client.test.get_collection("c", write_concern=WriteConcern(w=1))
        stale = 0
        for i in range(8):
            w1.update_one({"_id": "w1"}, {"$set": {"v": i}}, upsert=True)
            d = client.test.c.find_one({"_id": "w1"})
            if d is None or d["v"] != i:
                stale += 1
        assert stale >= 1, "no stale read from a secondary after w:1 writes under latency"
        # A causally consistent session with majority reads and writes: never stale.
        maj = client.test.get_collection("c", read_concern=ReadConcern("majority"))
        with client.start_session(causal_consistency=True) as s:
            for i in range(8):
                maj.update_one({"_id": "causal"}, {"$set": {"v": i}}, upsert=True, session=s)
                d = maj.find_one({"_id": "causal"}, session=s)
                assert d is not None and d["v"] == i, (i, d)
        # w:majority costs about one replication round trip (2 x delay) more than w:1: the
        # append goes out at once (pipelined, not behind another request's round trip) and the
        # acknowledgement comes back as soon as a secondary persisted it.
        t1, tm = [], []
        for i in range(8):
            t = time.monotonic()
            w1.insert_one({"k": "w1", "i": i})
            t1.append(time.monotonic() - t)
            t = time.monotonic()
            client.test.c.insert_one({"k": "maj", "i": i})
            tm.append(time.monotonic() - t)
        extra = median(tm) - median(t1)
        print(f"\nunder {delay_ms} ms one-way delay: w:1 median {median(t1) * 1000:.0f} ms, "
              f"w:majority median {median(tm) * 1000:.0f} ms (+{extra * 1000:.0f} ms)")
        rtt = 2 * delay_ms / 1000
        # Measured about +105 ms (1.05 round trips; 1.83 before the link was pipelined); the
        # bound is loose because a loaded machine's WAL syncs (w:majority waits for a
        # secondary's) can add a round trip or two.
        assert 0.5 * rtt <= extra <= 4 * rtt, (t1, tm)
        proxied.faults.delay(0)


def test_isolated_primary_steps_down_and_majority_elects(proxied):
    a = start_proxied(proxied)
    rs = proxied.rs
    with MongoClient(proxied.uri(w="majority", serverSelectionTimeoutMS=20000)) as client:
        client.test.c.insert_one({"_id": "before"})
        with a.client() as ca:
            got = ca.test.command("find", "c", readConcern={"level": "linearizable"}, maxTimeMS=5000)
            assert [d["_id"] for d in got["cursor"]["firstBatch"]] == ["before"]
        t0 = time.monotonic()
        proxied.faults.isolate(a.port)
        # A linearizable read cannot be served by a primary that lost its majority (Raft's
        # read index needs a majority's heartbeat acknowledgements).
        time.sleep(0.5)  # the proxies cut open connections within 0.2 s
        with a.client() as ca:
            with pytest.raises(PyMongoError) as e:
                ca.test.command("find", "c", readConcern={"level": "linearizable"}, maxTimeMS=1000)
            assert e.value.details["code"] in (50, 11602, 10107), e.value.details
        # The majority side elects the priority-2 member.
        new = wait_until(lambda: next((m for m in rs.members[1:] if (rs.hello(m) or {}).get("isWritablePrimary")), None),
                         30, "a primary on the majority side")
        assert new is rs.members[1]
        # The isolated primary steps down (it no longer hears a majority).
        wait_until(lambda: (rs.hello(a) or {}).get("isWritablePrimary") is False, 20,
                   "isolated primary stepped down")
        print(f"\npartition -> new primary in {time.monotonic() - t0:.2f} s")
        with new.client() as cn:
            cn.test.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20000)).insert_one({"_id": "during"})
        with a.client() as ca:
            from pymongo.errors import NotPrimaryError
            with pytest.raises(NotPrimaryError):
                ca.test.c.insert_one({"_id": "refused"})
        proxied.faults.heal()
        # The old primary catches up and takes its role back by priority.
        rs.wait_for_state(a, "PRIMARY", 40)
        client.test.c.insert_one({"_id": "after"})
        final = wait_until(lambda: (lambda ds: ds if all(d == ds[0] for d in ds) else None)([docs_of(m) for m in rs.members]), 20, "same data")
        assert [d["_id"] for d in final[0]] == ["after", "before", "during"]


def test_change_stream_resumes_across_failover_exactly_once(rs):
    a = rs.members[0]
    start_lab_set(rs)
    uri = rs.uri(w="majority", retryWrites="true", retryReads="true", serverSelectionTimeoutMS=20000)
    with MongoClient(uri) as client:
        coll = client.test.get_collection("cs")
        coll.insert_one({"_id": -1})
        seen = []
        with coll.watch(max_await_time_ms=200) as stream:
            for i in range(5):
                coll.insert_one({"_id": i})
            while len(seen) < 5:
                ev = stream.try_next()
                if ev is not None:
                    seen.append(ev["documentKey"]["_id"])
            a.kill()
            i = 5
            deadline = time.monotonic() + 40
            while i < 10 and time.monotonic() < deadline:
                try:
                    coll.insert_one({"_id": i})
                    i += 1
                except PyMongoError:
                    time.sleep(0.1)
            assert i == 10, "writes did not resume after the failover"
            while len(seen) < 10 and time.monotonic() < deadline:
                try:
                    ev = stream.try_next()
                except PyMongoError:
                    time.sleep(0.1)
                    continue
                if ev is not None:
                    seen.append(ev["documentKey"]["_id"])
            # Nothing more arrives: no event twice.
            extra = []
            t = time.monotonic()
            while time.monotonic() - t < 1.0:
                ev = stream.try_next()
                if ev is not None:
                    extra.append(ev["documentKey"]["_id"])
    assert seen == list(range(10)), seen
    assert extra == [], extra


def start_jepsen(proxied):
    """Starts the proxied set for a randomized run: its random source (seeded by
    `NIDUS_JEPSEN_SEED`, else the time; printed to replay a failure) and length in seconds
    (`NIDUS_JEPSEN_SECONDS`, default 15)."""
    import random

    seconds = float(os.environ.get("NIDUS_JEPSEN_SECONDS", "15"))
    seed = int(os.environ.get("NIDUS_JEPSEN_SEED", str(int(time.time()))))
    print(f"\nseed {seed}, {seconds} s")
    start_proxied(proxied)
    return random.Random(seed), seconds


def test_randomized_history_keeps_majority_writes_and_causal_order(proxied):
    """A short Jepsen-style run: w:majority inserts and register updates in a causal session
    (reads from secondaries, majority read concern) while a nemesis partitions members, kills
    and restarts them and injects latency. Checked: no acknowledged w:majority insert is lost,
    and reads in the causal session never go backwards or miss the session's own writes.
    `NIDUS_JEPSEN_SECONDS` sets the length (default 15), `NIDUS_JEPSEN_SEED` the seed."""
    from pymongo.read_concern import ReadConcern

    rnd, seconds = start_jepsen(proxied)
    rs = proxied.rs
    uri = proxied.uri(readPreference="secondaryPreferred", retryWrites="true", w="majority",
                      wtimeoutMS="5000", serverSelectionTimeoutMS="5000", socketTimeoutMS="8000",
                      connectTimeoutMS="2000")
    acked: list[int] = []
    history: list[tuple] = []
    killed = None
    with MongoClient(uri) as client:
        coll = client.test.get_collection("h", read_concern=ReadConcern("majority"))
        session = client.start_session(causal_consistency=True)
        last_read = -1
        last_written = -1
        next_id = 0
        next_nemesis = time.monotonic() + 2
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if time.monotonic() >= next_nemesis:
                next_nemesis = time.monotonic() + rnd.uniform(1.5, 3.0)
                proxied.faults.heal()
                proxied.faults.delay(0)
                if killed is not None:
                    killed.restart()
                    history.append(("restart", killed.port))
                    killed = None
                action = rnd.choice(["isolate", "kill", "delay", "none"])
                victim = rnd.choice(rs.members)
                if action == "isolate":
                    proxied.faults.isolate(victim.port)
                elif action == "kill":
                    victim.kill()
                    killed = victim
                elif action == "delay":
                    proxied.faults.delay(rnd.choice([5, 20, 40]))
                history.append((action, victim.port))
            op = rnd.choice(["insert", "insert", "write", "read", "read"])
            try:
                if op == "insert":
                    i = next_id
                    next_id += 1
                    coll.insert_one({"_id": i})
                    acked.append(i)
                elif op == "write":
                    v = last_written + 1
                    coll.update_one({"_id": "reg"}, {"$max": {"v": v}}, upsert=True, session=session)
                    last_written = v
                else:
                    d = coll.find_one({"_id": "reg"}, session=session)
                    v = -1 if d is None else d["v"]
                    history.append(("read", v))
                    assert v >= last_read, f"read went backwards: {v} after {last_read} ({history[-20:]})"
                    assert v >= last_written, f"read {v} misses the session's write {last_written}"
                    last_read = v
            except PyMongoError as e:
                history.append((op, "error", type(e).__name__))
                time.sleep(0.05)
        session.end_session()
    proxied.faults.heal()
    proxied.faults.delay(0)
    if killed is not None:
        killed.restart()
    wait_until(lambda: any((rs.hello(m) or {}).get("isWritablePrimary") for m in rs.members), 40, "a primary")
    for m in rs.members:
        wait_until(lambda: my_state(m) in ("PRIMARY", "SECONDARY"), 60, f"{rs.host(m)} healthy")

    def present_everywhere():
        sets = [{d["_id"] for d in docs_of(m, "h")} for m in rs.members]
        return sets if all(set(acked) <= s for s in sets) else None

    wait_until(present_everywhere, 40, f"every acknowledged insert on every member ({len(acked)} acked)")
    print(f"{len(acked)} acknowledged inserts, {sum(1 for h in history if h[0] == 'read')} causal reads, "
          f"nemesis: {[h for h in history if h[0] in ('isolate', 'kill', 'delay', 'none', 'restart')]}")
    assert len(acked) > 5


def random_w1_write(rnd, client) -> str:
    """One random write of the kinds a rollback must undo (documents, transactions, index
    builds and drops, collMod, create, drop, renames within and across databases, views), with w:1
    on `client` (a direct connection to the member that was primary). Returns its name."""
    names = ["a", "b", "c"]
    db = client.get_database(rnd.choice(["test", "test", "test2"]), write_concern=WriteConcern(w=1))
    name = rnd.choice(names)
    coll = db[name]
    k = rnd.randrange(12)
    op = rnd.choice(["insert", "insert", "insert_many", "update", "update", "update_many", "replace",
                     "delete", "delete_many", "txn", "create_index", "drop_index", "coll_mod",
                     "create", "drop", "rename", "rename_db", "view"])
    if op == "insert":
        coll.insert_one({"_id": k, "v": rnd.randrange(100), "s": f"s{rnd.randrange(6)}"})
    elif op == "insert_many":
        coll.insert_many([{"_id": rnd.randrange(12), "v": rnd.randrange(100)} for _ in range(3)], ordered=False)
    elif op == "update":
        coll.update_one({"_id": k}, {"$inc": {"v": 1}, "$set": {"u": rnd.randrange(9)}}, upsert=rnd.random() < 0.5)
    elif op == "update_many":
        coll.update_many({"v": {"$lt": rnd.randrange(100)}}, {"$inc": {"n": 1}})
    elif op == "replace":
        coll.replace_one({"_id": k}, {"r": rnd.randrange(100)})
    elif op == "delete":
        coll.delete_one({"_id": k})
    elif op == "delete_many":
        coll.delete_many({"v": {"$gt": rnd.randrange(100)}})
    elif op == "txn":
        with client.start_session() as s, s.start_transaction(write_concern=WriteConcern(w=1)):
            coll.update_one({"_id": k}, {"$set": {"t": 1}}, upsert=True, session=s)
            db[rnd.choice(names)].insert_one({"_id": f"t{rnd.randrange(1000)}"}, session=s)
    elif op == "create_index":
        spec = rnd.choice([("v", {}), ("s", {"unique": True}), ("u", {"sparse": True}),
                           ("t", {"expireAfterSeconds": 3600})])
        coll.create_index(spec[0], **spec[1])
    elif op == "drop_index":
        coll.drop_index(rnd.choice(["v_1", "s_1", "u_1", "t_1"]))
    elif op == "coll_mod":
        if rnd.random() < 0.5:
            db.command("collMod", name, index={"name": "v_1", "hidden": rnd.random() < 0.5}, writeConcern=W1)
        else:
            db.command("collMod", name, index={"name": "t_1", "expireAfterSeconds": rnd.randrange(60, 7200)},
                       writeConcern=W1)
    elif op == "create":
        db.create_collection(name)
    elif op == "drop":
        coll.drop()
    elif op == "view":
        view = rnd.choice(["v1", "v2"])
        pipeline = [{"$match": {"v": {"$gt": rnd.randrange(100)}}}]
        action = rnd.choice(["create", "collMod", "drop"])
        if action == "create":
            db.command("create", view, viewOn=name, pipeline=pipeline, writeConcern=W1)
        elif action == "collMod":
            db.command("collMod", view, viewOn=name, pipeline=pipeline, writeConcern=W1)
        else:
            db.drop_collection(view)
    elif op == "rename":
        client.admin.command("renameCollection", f"{db.name}.{name}", to=f"{db.name}.{rnd.choice(names)}",
                             dropTarget=rnd.random() < 0.5, writeConcern={"w": 1})
    else:
        other = "test2" if db.name == "test" else "test"
        client.admin.command("renameCollection", f"{db.name}.{name}", to=f"{other}.{rnd.choice(names)}",
                             dropTarget=rnd.random() < 0.5, writeConcern={"w": 1})
    return op


def test_randomized_w1_history_converges(proxied):
    """A Jepsen-style run of w:1 writes of every kind a rollback undoes, taken by whichever
    member is primary while a nemesis isolates and kills members (the primary most often, so
    its last writes roll back). Checked: once healed, every member holds the same catalog
    (names, UUIDs, options, indexes) and documents, and no member panicked; the w:majority
    markers written along the way all survive. `NIDUS_JEPSEN_SECONDS` sets the length (default
    15), `NIDUS_JEPSEN_SEED` the seed."""
    rnd, seconds = start_jepsen(proxied)
    rs = proxied.rs
    members = rs.members
    direct = {m.port: m.client(serverSelectionTimeoutMS=1000, socketTimeoutMS=3000, connectTimeoutMS=1000)
              for m in members}
    primary = members[0]
    killed = None
    nemesis = []
    done: dict[str, int] = {}
    markers = []
    marker_at = {}
    try:
        t0 = time.monotonic()
        next_nemesis = t0 + 1
        end = t0 + seconds
        while time.monotonic() < end:
            if time.monotonic() >= next_nemesis:
                next_nemesis = time.monotonic() + rnd.uniform(1.0, 3.0)
                proxied.faults.heal()
                if killed is not None:
                    killed.restart()
                    direct[killed.port].close()
                    direct[killed.port] = killed.client(serverSelectionTimeoutMS=1000, socketTimeoutMS=3000,
                                                        connectTimeoutMS=1000)
                    killed = None
                action = rnd.choice(["isolate", "isolate", "kill", "none"])
                victim = primary if primary is not None and rnd.random() < 0.7 else rnd.choice(members)
                if action == "isolate":
                    proxied.faults.isolate(victim.port)
                elif action == "kill":
                    victim.kill()
                    killed = victim
                nemesis.append((round(time.monotonic() - t0, 2), action, victim.port))
            if primary is None or primary is killed:
                found = [m for m in members if m is not killed and (rs.hello(m) or {}).get("isWritablePrimary")]
                if not found:
                    time.sleep(0.1)
                    continue
                primary = found[0]
            try:
                op = random_w1_write(rnd, direct[primary.port])
                done[op] = done.get(op, 0) + 1
                if rnd.random() < 0.1:
                    marker = f"m{len(markers)}"
                    direct[primary.port].test.get_collection(
                        "markers", write_concern=WriteConcern(w="majority", wtimeout=3000)).insert_one({"_id": marker})
                    markers.append(marker)
                    marker_at[marker] = (round(time.monotonic() - t0, 2), primary.port)
            except PyMongoError as e:
                # Not primary any more (or down): found again by `hello` before the next
                # write. Other errors (duplicate keys, missing namespaces) are the workload's.
                if isinstance(e, (ConnectionFailure, NotPrimaryError)) or getattr(e, "code", None) in (
                        10107, 13435, 11602, 189, 91):
                    primary = None
    finally:
        for c in direct.values():
            c.close()
    proxied.faults.heal()
    if killed is not None:
        killed.restart()
    wait_until(lambda: any((rs.hello(m) or {}).get("isWritablePrimary") for m in members), 40, "a primary")
    for m in members:
        wait_until(lambda: my_state(m) in ("PRIMARY", "SECONDARY"), 60, f"{rs.host(m)} healthy")
    with MongoClient(proxied.uri(serverSelectionTimeoutMS=20000)) as client:
        # Retried: a priority takeover after the heal can interrupt it.
        end_marker = client.test.get_collection("markers", write_concern=WriteConcern(w="majority", wtimeout=20000))
        wait_until(lambda: end_marker.update_one({"_id": "end"}, {"$set": {"n": 1}}, upsert=True).acknowledged,
                   60, "the last majority write")
    print(f"writes taken {done}, {len(markers)} majority markers, nemesis {nemesis}")

    def converged():
        states = [member_state(m) for m in members]
        return states if all(s == states[0] for s in states) else None

    try:
        states = wait_until(converged, 60, "every member holds the same catalog and documents")
    except AssertionError:
        states = [member_state(m) for m in members]
        for key in sorted(set().union(*states)):
            views = [s.get(key) for s in states]
            if any(v != views[0] for v in views):
                print(f"differs: {key}: {views}")
                uuid = next(v["uuid"] for v in views if v)
                for m in members:
                    with m.client() as c:
                        print(f"oplog of {rs.host(m)} for {key}:")
                        for e in c.local["oplog.rs"].find({"$or": [{"ui": uuid}, {"o.dropTarget": uuid}]}):
                            print("   ", e["ts"], e.get("t"), e["op"], e["ns"], e.get("o"), e.get("o2", ""))
        raise
    got = {d["_id"] for d in states[0]["test.markers"]["docs"]}
    lost = sorted(set(markers) - got)
    assert not lost, [(m, marker_at[m]) for m in lost]
    for m in members:
        with m.client() as c:
            for ns, held in states[0].items():
                if "view" in held:
                    continue
                db, name = ns.split(".", 1)
                res = c[db].command("validate", name)
                assert res["valid"], (rs.host(m), ns, res)
