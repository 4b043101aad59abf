"""Batched inserts and the inline request path.

An `insert` writes up to 64 documents (MongoDB's internalInsertMaxBatchSize) in one storage
transaction and falls back to one at a time on any error. Each case runs an insert against a
model of MongoDB's per-document semantics (ordered stops at the first error, unordered goes
on; writeErrors carry the document's index) and compares the reply and the collection.

Cheap commands (ping, point reads and writes by `_id`) run on the connection's task instead of
the blocking pool; a write that must wait behind an open transaction leaves the executor's
worker so other connections are still served."""

from __future__ import annotations

import threading
import time

import pytest
from pymongo import MongoClient
from pymongo.errors import BulkWriteError

from nidus_harness import NidusServer


def model_insert(existing_ids, docs, ordered, unique_k=False, existing_k=()):
    """What MongoDB inserts and reports: (inserted docs, [(index, code)])."""
    ids = set(existing_ids)
    ks = set(existing_k)
    inserted, errors = [], []
    for i, d in enumerate(docs):
        dup = d["_id"] in ids or (unique_k and "k" in d and d["k"] in ks)
        if dup:
            errors.append((i, 11000))
            if ordered:
                break
            continue
        ids.add(d["_id"])
        if unique_k and "k" in d:
            ks.add(d["k"])
        inserted.append(d)
    return inserted, errors


def run_insert(coll, docs, ordered):
    try:
        res = coll.insert_many(docs, ordered=ordered)
        return len(res.inserted_ids), []
    except BulkWriteError as e:
        det = e.details
        return det["nInserted"], [(w["index"], w["code"]) for w in det["writeErrors"]]


def dup_cases():
    cases = []
    for n in (2, 63, 64, 65, 130):
        for pos in sorted({1, n // 2, 63, 64, 65, n - 1}):
            if pos >= n:
                continue
            for ordered in (True, False):
                cases.append((n, pos, ordered))
    return cases


@pytest.mark.parametrize("n,pos,ordered", dup_cases())
def test_duplicate_id_within_the_command(db, n, pos, ordered):
    """Document `pos` repeats document 0's `_id`: in the same batch or a later one."""
    docs = [{"_id": i, "v": i} for i in range(n)]
    docs[pos] = {"_id": 0, "v": "dup"}
    want_docs, want_errors = model_insert([], docs, ordered)
    got_n, got_errors = run_insert(db.c, docs, ordered)
    assert (got_n, got_errors) == (len(want_docs), want_errors)
    assert list(db.c.find().sort("_id", 1)) == sorted(want_docs, key=lambda d: d["_id"])


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("existing", [[0], [5, 70], [63, 64], list(range(0, 140, 7))])
def test_duplicates_of_existing_documents(db, existing, ordered):
    db.c.insert_many([{"_id": i, "old": True} for i in existing])
    docs = [{"_id": i, "v": i} for i in range(140)]
    want_docs, want_errors = model_insert(existing, docs, ordered)
    got_n, got_errors = run_insert(db.c, docs, ordered)
    assert (got_n, got_errors) == (len(want_docs), want_errors)
    want = {i: {"_id": i, "old": True} for i in existing}
    want.update({d["_id"]: d for d in want_docs})
    assert list(db.c.find().sort("_id", 1)) == [want[k] for k in sorted(want)]


@pytest.mark.parametrize("ordered", [True, False])
def test_unique_secondary_index_duplicates(db, ordered):
    db.c.create_index("k", unique=True)
    db.c.insert_one({"_id": -1, "k": 50})
    # k repeats inside a batch (3 and 10), across batches (100 and 20) and an existing key.
    docs = [{"_id": i, "k": i} for i in range(150)]
    docs[10]["k"] = 3
    docs[100]["k"] = 20
    docs[50]["k"] = 9999
    docs[120]["k"] = 50
    want_docs, want_errors = model_insert([-1], docs, ordered, unique_k=True, existing_k=[50])
    got_n, got_errors = run_insert(db.c, docs, ordered)
    assert (got_n, got_errors) == (len(want_docs), want_errors)
    got = list(db.c.find({"_id": {"$gte": 0}}).sort("_id", 1))
    assert got == sorted(want_docs, key=lambda d: d["_id"])
    # The unique index holds exactly the inserted documents' keys.
    assert sorted(d["k"] for d in db.c.find({}, {"k": 1}).hint("k_1")) == sorted(
        [50] + [d["k"] for d in want_docs])


@pytest.mark.parametrize("ordered", [True, False])
def test_validator_failure_mid_batch(db, ordered):
    db.create_collection("c", validator={"v": {"$type": "int"}})
    docs = [{"_id": i, "v": i} for i in range(100)]
    docs[30]["v"] = "bad"
    docs[70]["v"] = "bad"
    try:
        db.c.insert_many(docs, ordered=ordered)
        pytest.fail("validation errors expected")
    except BulkWriteError as e:
        errs = [(w["index"], w["code"]) for w in e.details["writeErrors"]]
        n = e.details["nInserted"]
    if ordered:
        assert (n, errs) == (30, [(30, 121)])
    else:
        assert (n, errs) == (98, [(30, 121), (70, 121)])
    assert db.c.count_documents({}) == n


def leaf_stage(explain):
    stage = explain["queryPlanner"]["winningPlan"]
    while "inputStage" in stage:
        stage = stage["inputStage"]
    return stage


def test_multikey_learned_in_a_batch_survives_restart(start_nidus):
    """Index `a` becomes multikey in a batch that commits, index `b` in a batch that fails
    (a duplicate `_id`) and is then inserted one at a time: both stay multikey after a
    restart, so range predicates on arrays are not intersected into one interval."""
    server = start_nidus()
    client = server.client()
    c = client.t.c
    c.create_index("a")
    c.create_index("b")
    docs = [{"_id": i, "a": i} for i in range(100)]
    docs[40]["a"] = [1000, 2000]
    c.insert_many(docs)
    more = [{"_id": 200 + i, "b": [2000 + i, 3000 + i]} for i in range(10)] + [{"_id": 0}]
    with pytest.raises(BulkWriteError):
        c.insert_many(more, ordered=False)
    client.close()
    server.stop()
    server = start_nidus(dbpath=server.dbpath)
    client = server.client()
    c = client.t.c
    cases = [
        ("a_1", {"a": 2000}, [40]),
        ("a_1", {"a": {"$gt": 1500, "$lt": 1600}}, [40]),
        ("a_1", {"a": {"$elemMatch": {"$gt": 1500, "$lt": 1600}}}, []),
        ("b_1", {"b": 3005}, [205]),
        ("b_1", {"b": {"$gt": 2500, "$lt": 2600}}, list(range(200, 210))),
        ("b_1", {"b": {"$elemMatch": {"$gt": 2998, "$lt": 3001}}}, [200]),
    ]
    for hint, q, want in cases:
        assert sorted(d["_id"] for d in c.find(q).hint(hint)) == want, q
        assert sorted(d["_id"] for d in c.find(q).hint({"$natural": 1})) == want, q
        assert leaf_stage(c.find(q).hint(hint).explain())["isMultiKey"] is True, q
    client.close()


def test_oplog_has_one_entry_per_document(rs_client):
    c = rs_client.t_write_batch.c
    c.drop()
    start = rs_client.local["oplog.rs"].find().sort("$natural", -1).limit(1)[0]["ts"]
    docs = [{"_id": i} for i in range(150)]
    docs[100] = {"_id": 5}
    with pytest.raises(BulkWriteError):
        c.insert_many(docs, ordered=False)
    entries = list(rs_client.local["oplog.rs"].find(
        {"ns": "t_write_batch.c", "op": "i", "ts": {"$gt": start}}).sort("$natural", 1))
    assert [e["o"]["_id"] for e in entries] == [i for i in range(150) if i != 100]
    ts = [e["ts"] for e in entries]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)


def test_retried_insert_many_is_not_applied_twice(rs_member):
    """The same retryable insert sent twice (same lsid and txnNumber) inserts once; every
    statement of a batch is recorded with the batch."""
    import uuid

    from bson.binary import UUID_SUBTYPE, Binary
    from bson.int64 import Int64

    client = rs_member.client()
    db = client.t_write_batch_retry
    db.c.drop()
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    cmd = {"insert": "c", "documents": [{"_id": i} for i in range(100)], "ordered": True,
           "lsid": lsid, "txnNumber": Int64(1)}
    first = db.command(dict(cmd))
    second = db.command(dict(cmd))
    assert first["n"] == 100 and second["n"] == 100
    assert db.c.count_documents({}) == 100
    client.close()


def test_waiting_writes_do_not_stall_other_connections(nidus_binary, tmp_path):
    """Updates by `_id` (inline commands) that wait behind an open transaction's write, more
    of them than the server has executor threads, while other connections still get answers;
    then the transaction commits and every update completes."""
    server = NidusServer(dbpath=tmp_path / "db", binary=nidus_binary, log_name="nidus-inline",
                         extra_args=["--replSet", "rs0"])
    server.start()
    try:
        client = server.client()
        c = client.t.c
        c.insert_many([{"_id": i, "n": 0} for i in range(8)])
        s = client.start_session()
        s.start_transaction()
        for i in range(8):
            c.update_one({"_id": i}, {"$inc": {"n": 100}}, session=s)
        done = []

        def update(i):
            other = MongoClient(f"mongodb://127.0.0.1:{server.port}/?directConnection=true",
                                socketTimeoutMS=60000)
            other.t.c.update_one({"_id": i}, {"$inc": {"n": 1}})
            done.append(i)
            other.close()

        threads = [threading.Thread(target=update, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        assert done == []
        probe = MongoClient(f"mongodb://127.0.0.1:{server.port}/?directConnection=true",
                            socketTimeoutMS=10000, serverSelectionTimeoutMS=10000)
        for _ in range(20):
            assert probe.admin.command("ping")["ok"] == 1
            assert probe.t.c.find_one({"_id": 0}) == {"_id": 0, "n": 0}
        probe.close()
        s.commit_transaction()
        for t in threads:
            t.join(30)
        assert sorted(done) == list(range(8))
        assert sorted((d["_id"], d["n"]) for d in c.find()) == [(i, 101) for i in range(8)]
        s.end_session()
        client.close()
    finally:
        server.stop()
