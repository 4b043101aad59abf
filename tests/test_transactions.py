"""Sessions, multi-document transactions and retryable writes, with pymongo against a
nidus started as a one-member replica set (`--replSet rs0`), its transaction lifetime limit
lowered to 3 s so seed 003's abort-after-the-limit scenario runs in seconds."""

from __future__ import annotations

import re
import threading
import uuid
import time

import bson
import pytest
from bson import Int64, Timestamp
from bson.binary import UUID_SUBTYPE, Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

import wire
from nidus_harness import NidusServer

LIFETIME_SECONDS = 3
TRANSFERS_PER_CLIENT = 1000


@pytest.fixture(scope="module")
def rs_server(nidus_binary, tmp_path_factory):
    server = NidusServer(
        dbpath=tmp_path_factory.mktemp("nidus-txn") / "db",
        binary=nidus_binary,
        log_name="nidus-txn",
        extra_args=["--replSet", "rs0", "--setParameter",
                    f"transactionLifetimeLimitSeconds={LIFETIME_SECONDS}"],
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rs_client(rs_server):
    # Discovered as a replica set, as an application connecting without directConnection is.
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/", serverSelectionTimeoutMS=10000)
    yield client
    client.close()


@pytest.fixture
def tdb(rs_client, request):
    name = "txn_" + re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    rs_client.drop_database(name)
    return rs_client[name]


def test_hello_presents_a_one_member_replica_set(rs_client, rs_server):
    hello = rs_client.admin.command("hello")
    me = f"127.0.0.1:{rs_server.port}"
    assert hello["setName"] == "rs0"
    assert hello["isWritablePrimary"] is True
    assert hello["hosts"] == [me] and hello["primary"] == me and hello["me"] == me
    assert "operationTime" in hello and "$clusterTime" in hello
    assert rs_client.topology_description.topology_type_name == "ReplicaSetWithPrimary"


def test_commit_makes_writes_visible_at_once(tdb, rs_client):
    tdb.accounts.insert_many([{"_id": "a", "balance": 100}, {"_id": "b", "balance": 0}])
    with rs_client.start_session() as s:
        with s.start_transaction():
            tdb.accounts.update_one({"_id": "a"}, {"$inc": {"balance": -30}}, session=s)
            tdb.accounts.update_one({"_id": "b"}, {"$inc": {"balance": 30}}, session=s)
            tdb.accounts.insert_one({"_id": "log1", "amount": 30}, session=s)
            # The transaction reads its own writes; others do not see them yet.
            assert tdb.accounts.find_one({"_id": "a"}, session=s)["balance"] == 70
            assert tdb.accounts.count_documents({}, session=s) == 3
            assert tdb.accounts.find_one({"_id": "a"})["balance"] == 100
            assert tdb.accounts.find_one({"_id": "log1"}) is None
            assert tdb.accounts.count_documents({}) == 2
    assert tdb.accounts.find_one({"_id": "a"})["balance"] == 70
    assert tdb.accounts.find_one({"_id": "b"})["balance"] == 30
    assert tdb.accounts.count_documents({}) == 3
    assert tdb.command("collStats", "accounts")["count"] == 3


def test_abort_discards_writes(tdb, rs_client):
    tdb.items.insert_one({"_id": 1, "v": 1})
    with rs_client.start_session() as s:
        s.start_transaction()
        tdb.items.insert_one({"_id": 2}, session=s)
        tdb.items.delete_one({"_id": 1}, session=s)
        tdb.items.update_one({"_id": 3}, {"$set": {"v": 3}}, upsert=True, session=s)
        assert sorted(d["_id"] for d in tdb.items.find({}, session=s)) == [2, 3]
        s.abort_transaction()
    assert list(tdb.items.find()) == [{"_id": 1, "v": 1}]
    assert tdb.command("collStats", "items")["count"] == 1


def test_snapshot_isolation_hides_later_commits(tdb, rs_client):
    tdb.snap.insert_one({"_id": 1, "v": 1})
    with rs_client.start_session() as s:
        with s.start_transaction(read_concern=ReadConcern("snapshot")):
            assert tdb.snap.find_one({"_id": 1}, session=s)["v"] == 1
            tdb.snap.update_one({"_id": 1}, {"$set": {"v": 2}})  # outside, commits at once
            tdb.snap.insert_one({"_id": 2})
            assert tdb.snap.find_one({"_id": 1}, session=s)["v"] == 1
            assert tdb.snap.find_one({"_id": 2}, session=s) is None
    assert tdb.snap.find_one({"_id": 1})["v"] == 2


def test_write_conflict_inside_transaction_fails_at_once(tdb, rs_client):
    """Seed 003: B's update of a document A's open transaction changed fails at once with
    WriteConflict and the TransientTransactionError label."""
    tdb.demo.insert_one({"_id": "x", "value": 0})
    a = rs_client.start_session()
    b = rs_client.start_session()
    a.start_transaction()
    tdb.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=a)
    b.start_transaction()
    started = time.monotonic()
    with pytest.raises(OperationFailure) as err:
        tdb.demo.update_one({"_id": "x"}, {"$inc": {"value": 4}}, session=b)
    assert time.monotonic() - started < 1.0
    assert err.value.code == 112
    assert err.value.details["codeName"] == "WriteConflict"
    assert "TransientTransactionError" in err.value.details["errorLabels"]
    assert err.value.details["errmsg"] == (
        "Caused by :: Write conflict during plan execution and yielding is disabled. "
        ":: Please retry your operation or multi-document transaction.")
    # The failed statement ended B's transaction.
    with pytest.raises(OperationFailure) as err:
        b.commit_transaction()
    assert err.value.code == 251
    a.abort_transaction()
    a.end_session()
    b.end_session()


def test_seed_003_wait_on_conflict_then_lifetime_abort(tdb, rs_client, rs_server):
    """Seed 003 end to end: A's transaction holds the document; B's update outside a
    transaction waits (internal retries) until A is aborted by the lifetime limit, then
    succeeds; A's commit gets NoSuchTransaction; the document is {_id: 'x', value: 8}."""
    tdb.demo.insert_one({"_id": "x", "value": 0})
    a = rs_client.start_session()
    a.start_transaction()
    tdb.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=a)
    conflicts_before = rs_client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"]
    started = time.monotonic()
    result = tdb.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}})
    waited = time.monotonic() - started
    assert result.matched_count == 1 and result.modified_count == 1
    assert 1.0 < waited < LIFETIME_SECONDS + 5
    conflicts_after = rs_client.admin.command("serverStatus")["metrics"]["operation"]["writeConflicts"]
    assert conflicts_after > conflicts_before
    with pytest.raises(OperationFailure) as err:
        a.commit_transaction()
    assert err.value.code == 251
    assert err.value.details["codeName"] == "NoSuchTransaction"
    assert "TransientTransactionError" in err.value.details["errorLabels"]
    assert err.value.details["errmsg"] == (
        f"Transaction with {{ txnNumber: {a._server_session.transaction_id} }} has been aborted.")
    a.end_session()
    assert list(tdb.demo.find()) == [{"_id": "x", "value": 8}]
    assert "Aborting transactions that exceeded transactionLifetimeLimitSeconds" in rs_server.log_text()


def test_error_in_statement_aborts_the_transaction(tdb, rs_client):
    tdb.dup.insert_one({"_id": 1})
    with rs_client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as err:
            tdb.dup.insert_one({"_id": 1}, session=s)
        assert err.value.code == 11000
        assert "TransientTransactionError" not in (err.value.details.get("errorLabels") or [])
        with pytest.raises(OperationFailure) as err:
            tdb.dup.insert_one({"_id": 2}, session=s)
        assert err.value.code == 251
        assert "TransientTransactionError" in err.value.details["errorLabels"]
        s.abort_transaction()
    assert tdb.dup.count_documents({}) == 1


def new_lsid():
    return {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}


def raw_session_command(port, db, lsid, txn_number, command, **extra):
    """One command on the wire with exactly these session fields (a driver would add its own)."""
    body = dict(command)
    body.update({"lsid": lsid, "txnNumber": Int64(txn_number), "$db": db.name})
    body.update(extra)
    sock = wire.connect(port)
    try:
        return wire.command(sock, body)
    finally:
        sock.close()


@pytest.mark.parametrize("case", [
    # (commands run in order on one session, expected code of the last, expected codeName)
    ("count in a transaction", [({"count": "c"}, {"startTransaction": True, "autocommit": False})],
     263, "OperationNotSupportedInTransaction"),
    ("autocommit true", [({"find": "c"}, {"autocommit": True})], 72, "InvalidOptions"),
    ("continue without start", [({"find": "c"}, {"autocommit": False})], 251, "NoSuchTransaction"),
    ("older transaction number", [({"insert": "c", "documents": [{}]}, {}),
                                  ({"find": "c"}, {"startTransaction": True, "autocommit": False, "txn": 0})],
     225, "TransactionTooOld"),
    ("restart the same number", [({"find": "c"}, {"startTransaction": True, "autocommit": False}),
                                 ({"find": "c"}, {"startTransaction": True, "autocommit": False})],
     117, "ConflictingOperationInProgress"),
    ("$out in a transaction", [({"aggregate": "c", "pipeline": [{"$out": "d"}], "cursor": {}},
                                {"startTransaction": True, "autocommit": False})],
     263, "OperationNotSupportedInTransaction"),
], ids=lambda c: c[0])
def test_session_rule_errors(tdb, rs_server, case):
    _, steps, code, code_name = case
    lsid = new_lsid()
    reply = None
    for command, extra in steps:
        extra = dict(extra)
        txn = extra.pop("txn", 1)
        reply = raw_session_command(rs_server.port, tdb, lsid, txn, command, **extra)
    assert reply["ok"] == 0
    assert (reply["code"], reply["codeName"]) == (code, code_name)


def test_retryable_write_is_applied_once(tdb, rs_server):
    lsid = new_lsid()
    tdb.counter.insert_one({"_id": 1, "n": 0})
    update = {"update": "counter", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]}
    first = raw_session_command(rs_server.port, tdb, lsid, 5, update)
    again = raw_session_command(rs_server.port, tdb, lsid, 5, update)
    assert first["ok"] == 1 and again["ok"] == 1
    assert (first["n"], first["nModified"]) == (again["n"], again["nModified"]) == (1, 1)
    assert tdb.counter.find_one({"_id": 1})["n"] == 1
    newer = raw_session_command(rs_server.port, tdb, lsid, 6, update)
    assert newer["ok"] == 1
    assert tdb.counter.find_one({"_id": 1})["n"] == 2
    older = raw_session_command(rs_server.port, tdb, lsid, 5, update)
    assert older["codeName"] == "TransactionTooOld"


def test_standalone_refuses_transaction_numbers(db, port):
    lsid = new_lsid()
    reply = raw_session_command(port, db, lsid, 1, {"insert": "c", "documents": [{}]})
    assert (reply["code"], reply["codeName"]) == (20, "IllegalOperation")


def test_concurrent_transfers_keep_the_total(tdb, rs_client):
    """The issue's check: 8 clients x 1,000 transfers between 100 accounts in transactions,
    retried on TransientTransactionError: the total never changes and every commit is
    counted once."""
    accounts = 100
    tdb.bank.insert_many([{"_id": i, "balance": 1000} for i in range(accounts)])
    committed = []
    errors = []

    def worker(seed: int):
        import random
        rng = random.Random(seed)
        done = 0
        try:
            with rs_client.start_session() as s:
                for _ in range(TRANSFERS_PER_CLIENT):
                    src, dst = rng.sample(range(accounts), 2)
                    amount = rng.randint(1, 50)

                    def transfer(session):
                        tdb.bank.update_one({"_id": src}, {"$inc": {"balance": -amount}}, session=session)
                        tdb.bank.update_one({"_id": dst}, {"$inc": {"balance": amount}}, session=session)
                        tdb.ledger.insert_one({"src": src, "dst": dst, "amount": amount}, session=session)

                    s.with_transaction(transfer)
                    done += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        committed.append(done)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = sum(d["balance"] for d in tdb.bank.find())
    assert total == accounts * 1000
    assert tdb.ledger.count_documents({}) == sum(committed) == 8 * TRANSFERS_PER_CLIENT


def test_snapshot_session_reads_at_one_point_in_time(tdb, rs_client):
    tdb.snapread.insert_one({"_id": 1, "x": 11})
    with rs_client.start_session(snapshot=True) as s:
        assert tdb.snapread.find_one({"_id": 1}, session=s)["x"] == 11
        assert s._snapshot_time is not None  # the server returned atClusterTime
        tdb.snapread.update_one({"_id": 1}, {"$inc": {"x": 1}})
        tdb.snapread.insert_one({"_id": 2, "x": 22})
        assert tdb.snapread.find_one({"_id": 1}, session=s)["x"] == 11
        assert tdb.snapread.count_documents({}, session=s) == 1
        assert tdb.snapread.distinct("x", session=s) == [11]
        assert list(tdb.snapread.aggregate([{"$match": {}}], session=s)) == [{"_id": 1, "x": 11}]
        # Cursors continued by getMore (pymongo sends the session's read concern with each
        # getMore and killCursors) read at the same point; a document inserted meanwhile
        # stays out.
        tdb.snapread.insert_many([{"_id": i, "x": i} for i in range(3, 8)])
        batches = tdb.snapread.aggregate_raw_batches([{"$sort": {"_id": 1}}], session=s).to_list()
        assert [d["_id"] for b in batches for d in bson.decode_all(b)] == [1]
        assert [d["_id"] for d in tdb.snapread.find({}, session=s, batch_size=1)] == [1]
        cursor = tdb.snapread.find({}, session=s, batch_size=1)
        next(cursor)
        cursor.close()
    assert tdb.snapread.find_one({"_id": 1})["x"] == 12


def test_snapshot_read_concern_errors(tdb):
    reply = tdb.command({"insert": "c", "documents": [{}], "readConcern": {"level": "snapshot"}},
                        check=False)
    assert (reply["ok"], reply["codeName"]) == (0, "InvalidOptions")
    far = Timestamp(2**31, 1)
    reply = tdb.command({"find": "c", "readConcern": {"level": "snapshot", "atClusterTime": far}},
                        check=False)
    assert (reply["ok"], reply["codeName"]) == (0, "InvalidOptions")
    old = Timestamp(1, 1)
    reply = tdb.command({"find": "c", "readConcern": {"level": "snapshot", "atClusterTime": old}},
                        check=False)
    assert (reply["ok"], reply["code"], reply["codeName"]) == (0, 239, "SnapshotTooOld")


def test_unsatisfiable_write_concern_on_one_member(tdb):
    reply = tdb.command({"insert": "wc", "documents": [{"_id": 1}], "writeConcern": {"w": 2}})
    assert reply["n"] == 1
    assert reply["writeConcernError"]["code"] == 100
    assert reply["writeConcernError"]["codeName"] == "UnsatisfiableWriteConcern"
    assert tdb.wc.count_documents({}) == 1
    reply = tdb.command({"insert": "wc", "documents": [{"_id": 2}], "writeConcern": {"w": 1}})
    assert "writeConcernError" not in reply


# Commands that fail after their checks found the work done (or impossible) still wait for
# their write concern, as MongoDB's (jstests/replsets/noop_writes_wait_for_write_concern.js):
# (setup commands, the failing command, its error code).
FAILED_WRITES_WAIT = [
    ([{"create": "a"}, {"create": "b"}], {"renameCollection": "{db}.a", "to": "{db}.b"}, 48),
    ([{"create": "a"}], {"create": "a", "capped": True, "size": 4096}, 48),
    ([{"create": "a"}], {"dropIndexes": "a", "index": "nope_1"}, 27),
    ([{"insert": "a", "documents": [{"_id": 1}]}],
     {"createIndexes": "a", "indexes": [{"key": {"x": 1}, "name": "_id_"}]}, 2),
]


@pytest.mark.parametrize("setup,command,code", FAILED_WRITES_WAIT)
def test_failed_write_commands_wait_for_their_write_concern(tdb, rs_client, setup, command, code):
    for c in setup:
        tdb.command(c)

    def run(cmd):
        cmd = {k: (v.format(db=tdb.name) if isinstance(v, str) else v) for k, v in cmd.items()}
        on = rs_client.admin if "renameCollection" in cmd else tdb
        return on.command(cmd, check=False)

    reply = run({**command, "writeConcern": {"w": 2, "wtimeout": 1}})
    assert (reply["ok"], reply["code"]) == (0, code), reply
    assert reply["writeConcernError"]["codeName"] == "UnsatisfiableWriteConcern", reply
    # Without a write concern, or with one this member satisfies, none.
    for wc in (None, {"w": 1}, {"w": "majority"}):
        reply = run(command if wc is None else {**command, "writeConcern": wc})
        assert (reply["ok"], reply["code"]) == (0, code) and "writeConcernError" not in reply


def test_list_local_sessions(rs_client):
    with rs_client.start_session() as s:
        rs_client.admin.command("ping", session=s)
        ids = [d["_id"]["id"] for d in rs_client.admin.aggregate([{"$listLocalSessions": {}}])]
        assert s.session_id["id"] in ids


def test_server_status_counts_transactions(tdb, rs_client):
    def counts():
        return rs_client.admin.command("serverStatus")["transactions"]

    before = counts()
    tdb.counted.insert_one({"_id": 0})
    with rs_client.start_session() as s:
        with s.start_transaction():
            tdb.counted.insert_one({"_id": 1}, session=s)
        s.start_transaction()
        tdb.counted.insert_one({"_id": 2}, session=s)
        assert counts()["currentOpen"] == before["currentOpen"] + 1
        assert counts()["currentInactive"] == before["currentInactive"] + 1
        s.abort_transaction()
    after = counts()
    assert after["totalStarted"] - before["totalStarted"] == 2
    assert after["totalCommitted"] - before["totalCommitted"] == 1
    assert after["totalAborted"] - before["totalAborted"] == 1
    assert after["currentOpen"] == before["currentOpen"]


# --- Collections and indexes created inside a transaction -----------------------------------


def _names(db):
    return set(db.list_collection_names())


@pytest.mark.parametrize("how", ["create", "insert", "upsert", "findAndModify"])
def test_collection_created_in_transaction_is_invisible_until_commit(tdb, rs_client, how):
    with rs_client.start_session() as s:
        with s.start_transaction():
            if how == "create":
                tdb.create_collection("fresh", session=s)
                tdb.fresh.insert_one({"_id": 1}, session=s)
            elif how == "insert":
                tdb.fresh.insert_one({"_id": 1}, session=s)
            elif how == "upsert":
                tdb.fresh.update_one({"_id": 1}, {"$set": {"v": 1}}, upsert=True, session=s)
            else:
                tdb.fresh.find_one_and_update({"_id": 1}, {"$set": {"v": 1}}, upsert=True,
                                              session=s)
            assert tdb.fresh.find_one({"_id": 1}, session=s) is not None
            assert tdb.fresh.count_documents({}, session=s) == 1
            # Nobody else sees the collection (nor its document) before the commit.
            assert "fresh" not in _names(tdb)
            assert tdb.fresh.find_one({"_id": 1}) is None
    assert "fresh" in _names(tdb)
    assert tdb.fresh.count_documents({}) == 1
    assert tdb.command("collStats", "fresh")["count"] == 1


def test_collection_created_in_aborted_transaction_leaves_nothing(tdb, rs_client):
    with rs_client.start_session() as s:
        s.start_transaction()
        tdb.create_collection("gone", session=s)
        tdb.gone.create_index("x", session=s)
        tdb.gone.insert_many([{"_id": i, "x": i} for i in range(5)], session=s)
        s.abort_transaction()
    assert "gone" not in _names(tdb)
    # The name is free again, with none of the aborted transaction's indexes or documents.
    tdb.create_collection("gone")
    assert tdb.gone.count_documents({}) == 0
    assert [ix["name"] for ix in tdb.gone.list_indexes()] == ["_id_"]


def test_indexes_created_in_transaction_appear_with_the_commit(tdb, rs_client):
    with rs_client.start_session() as s:
        with s.start_transaction():
            tdb.create_collection("ix", session=s)
            name = tdb.ix.create_index([("k", 1)], unique=True, session=s)
            assert name == "k_1"
            tdb.ix.insert_many([{"_id": i, "k": i} for i in range(20)], session=s)
            with pytest.raises(OperationFailure) as err:
                tdb.command("listIndexes", "ix")
            assert err.value.code == 26
        # Implicitly created by createIndexes itself.
        with s.start_transaction():
            reply = tdb.command("createIndexes", "implicit",
                                indexes=[{"key": {"a": 1}, "name": "a_1"}], session=s)
            assert reply["createdCollectionAutomatically"] is True
            assert reply["numIndexesBefore"] == 1 and reply["numIndexesAfter"] == 2
    assert sorted(ix["name"] for ix in tdb.ix.list_indexes()) == ["_id_", "k_1"]
    assert sorted(ix["name"] for ix in tdb.implicit.list_indexes()) == ["_id_", "a_1"]
    # The index holds the keys the transaction wrote, and the unique constraint holds.
    plan = tdb.ix.find({"k": 7}).explain()["queryPlanner"]["winningPlan"]
    assert plan["inputStage"]["stage"] == "IXSCAN"
    assert tdb.ix.find_one({"k": 7})["_id"] == 7
    with pytest.raises(Exception) as dup:
        tdb.ix.insert_one({"_id": 100, "k": 7})
    assert getattr(dup.value, "code", None) == 11000


def test_transaction_ddl_rules(tdb, rs_client):
    tdb.existing.insert_one({"_id": 1})
    cases = [
        # (command, expected code, message fragment)
        ({"create": "existing"}, 48, "Collection txn_test_transaction_ddl_rules.existing already exists."),
        ({"createIndexes": "existing", "indexes": [{"key": {"z": 1}, "name": "z_1"}]}, 263,
         "Cannot create new indexes on existing collection txn_test_transaction_ddl_rules.existing in a multi-document transaction."),
        ({"create": "v", "viewOn": "existing", "pipeline": []}, 263,
         "Cannot create a view in a multi-document transaction."),
    ]
    for command, code, message in cases:
        with rs_client.start_session() as s:
            s.start_transaction()
            with pytest.raises(OperationFailure) as err:
                tdb.command(command, session=s)
            assert (err.value.code, err.value.details["errmsg"]) == (code, message), command
            # The failed statement aborted the transaction.
            with pytest.raises(OperationFailure) as after:
                tdb.existing.find_one({}, session=s)
            assert after.value.code == 251
    # An index that already exists is fine inside a transaction.
    with rs_client.start_session() as s:
        with s.start_transaction():
            reply = tdb.command("createIndexes", "existing",
                                indexes=[{"key": {"_id": 1}, "name": "_id_"}], session=s)
            assert reply["note"] == "all indexes already exist"
    # A collection the transaction created and wrote to can no longer get new indexes.
    with rs_client.start_session() as s:
        s.start_transaction()
        tdb.busy.insert_one({"_id": 1}, session=s)
        with pytest.raises(OperationFailure) as err:
            tdb.busy.create_index("a", session=s)
        assert err.value.code == 263
        assert "Cannot create new indexes on non-empty collection" in err.value.details["errmsg"]


def test_concurrent_creation_makes_the_commit_conflict(tdb, rs_client):
    with rs_client.start_session() as s:
        s.start_transaction()
        tdb.race.insert_one({"_id": "txn"}, session=s)
        tdb.race.insert_one({"_id": "outside"})  # creates and publishes the collection
        with pytest.raises(OperationFailure) as err:
            s.commit_transaction()
        assert err.value.code == 112
        assert "TransientTransactionError" in err.value.details.get("errorLabels", [])
    assert [d["_id"] for d in tdb.race.find()] == ["outside"]


def test_transactions_racing_to_create_a_collection_by_their_writes(tdb, rs_client):
    """Transactions that insert at once into a collection nobody has created yet: each either
    commits or fails with a transient error (a retry would succeed); no statement fails with
    NamespaceExists, and every committed insert is there."""
    threads_n, rounds = 6, 15
    for r in range(rounds):
        coll = tdb[f"burst{r}"]
        barrier = threading.Barrier(threads_n)
        committed, errors = [], []

        def work(i):
            with rs_client.start_session() as s:
                barrier.wait(10)
                try:
                    with s.start_transaction():
                        coll.insert_one({"_id": i}, session=s)
                    committed.append(i)
                except OperationFailure as e:
                    if not e.has_error_label("TransientTransactionError"):
                        errors.append((e.code, str(e)))

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errors, errors
        assert committed, "no transaction committed"
        assert sorted(d["_id"] for d in coll.find()) == sorted(committed)


def test_collection_created_in_transaction_survives_restart(rs_client, rs_server):
    db = rs_client["txn_ddl_restart"]
    rs_client.drop_database(db.name)
    with rs_client.start_session() as s:
        with s.start_transaction():
            db.kept.create_index("k", session=s)
            db.kept.insert_many([{"_id": i, "k": i} for i in range(3)], session=s)
    rs_server.kill()  # a crash: the committed catalog entry and data are in the log
    rs_server.restart()
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/?directConnection=true")
    try:
        kept = client[db.name].kept
        assert sorted(d["_id"] for d in kept.find()) == [0, 1, 2]
        assert sorted(ix["name"] for ix in kept.list_indexes()) == ["_id_", "k_1"]
        assert kept.find({"k": 2}).explain()["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN"
    finally:
        client.close()


def test_retryable_writes_are_applied_once_across_a_crash(rs_client, rs_server):
    """Each executed statement of a retryable write is recorded with its change, so a retry
    arriving after a crash (the replies were lost with the connection) does not run it again
    and gets the first attempt's results; a statement that failed runs again. A retry of a
    number older than the session's last write is refused as too old, as MongoDB refuses it
    once it has reloaded its sessions' last numbers after a restart."""
    db = rs_client["retry_crash"]
    rs_client.drop_database(db.name)
    db.c.insert_many([{"_id": "counter", "n": 0}, {"_id": "victim"}, {"_id": "dup"}])
    port = rs_server.port
    steps = [
        # (session, txnNumber, command, fields of the reply both attempts must agree on)
        (new_lsid(), 1, {"insert": "c", "documents": [{"_id": "a"}, {"_id": "dup"}, {"_id": "b"}],
                         "ordered": False}, ("n",)),
        (new_lsid(), 2, {"update": "c", "updates": [
            {"q": {"_id": "counter"}, "u": {"$inc": {"n": 1}}},
            {"q": {"_id": "new"}, "u": {"$inc": {"n": 5}}, "upsert": True}]},
         ("n", "nModified", "upserted")),
        (new_lsid(), 3, {"delete": "c", "deletes": [{"q": {"_id": "victim"}, "limit": 1}]},
         ("n",)),
        (new_lsid(), 4, {"findAndModify": "c", "query": {"_id": "counter"},
                         "update": {"$inc": {"n": 10}}, "new": True},
         ("lastErrorObject", "value")),
        # Batches stored 64 to a storage transaction, with one record each.
        (new_lsid(), 6, {"insert": "c", "documents": [{"_id": f"r{i}"} for i in range(200)]},
         ("n",)),
        # A failed statement in the middle: its storage transaction's documents go one at a
        # time, the others as whole batches.
        (new_lsid(), 7, {"insert": "c", "ordered": False, "documents":
                         [{"_id": f"s{i}"} for i in range(100)] + [{"_id": "dup"}]
                         + [{"_id": f"s{i}"} for i in range(100, 130)]},
         ("n", "writeErrors")),
    ]
    first = {}
    for lsid, number, command, _ in steps:
        first[number] = raw_session_command(port, db, lsid, number, command)
        assert first[number]["ok"] == 1, first[number]
    assert first[1]["n"] == 2 and first[1]["writeErrors"][0]["index"] == 1
    # A session whose number 5 came after number 4 (both single-statement inserts).
    moved_on = new_lsid()
    for number, doc_id in [(4, "m4"), (5, "m5")]:
        reply = raw_session_command(port, db, moved_on, number,
                                    {"insert": "c", "documents": [{"_id": doc_id}]})
        assert reply["ok"] == 1 and reply["n"] == 1, reply
    rs_server.kill()
    rs_server.restart()
    port = rs_server.port
    # Every session is new to the restarted server: its last number is retried.
    for lsid, number, command, fields in steps:
        again = raw_session_command(port, db, lsid, number, command)
        assert again["ok"] == 1, again
        for f in fields:
            assert again.get(f) == first[number].get(f), (number, f, again)
    stale = raw_session_command(port, db, moved_on, 4,
                                {"insert": "c", "documents": [{"_id": "m4"}]})
    assert stale["ok"] == 0 and stale["code"] == 225, stale
    assert stale["codeName"] == "TransactionTooOld"
    latest = raw_session_command(port, db, moved_on, 5,
                                 {"insert": "c", "documents": [{"_id": "m5"}]})
    assert latest["ok"] == 1 and latest["n"] == 1 and "writeErrors" not in latest, latest
    # The failed statement ran again and failed again, with the same error.
    retried_insert = raw_session_command(port, db, new_lsid(), 1, steps[0][2])
    assert [e["index"] for e in retried_insert["writeErrors"]] == [0, 1, 2]
    client = MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true")
    try:
        c = client[db.name].c
        assert c.find_one({"_id": "counter"})["n"] == 11
        assert c.find_one({"_id": "new"})["n"] == 5
        assert c.find_one({"_id": "victim"}) is None
        batched = {f"r{i}" for i in range(200)} | {f"s{i}" for i in range(130)}
        assert sorted(d["_id"] for d in c.find({"_id": {"$nin": sorted(batched)}})) == [
            "a", "b", "counter", "dup", "m4", "m5", "new"]
        assert {d["_id"] for d in c.find({"_id": {"$in": sorted(batched)}})} == batched
    finally:
        client.close()


def test_multi_statements_are_not_retryable(tdb, rs_server):
    lsid = new_lsid()
    update = raw_session_command(rs_server.port, tdb, lsid, 1, {
        "update": "c", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": True}]})
    assert update["writeErrors"][0]["code"] == 72
    assert update["writeErrors"][0]["errmsg"] == "Cannot use (or request) retryable writes with multi=true"
    delete = raw_session_command(rs_server.port, tdb, lsid, 2, {
        "delete": "c", "deletes": [{"q": {}, "limit": 0}]})
    assert delete["writeErrors"][0]["errmsg"] == "Cannot use (or request) retryable writes with limit=0"


@pytest.mark.parametrize("stage", [{"$out": "dest"}, {"$merge": {"into": "dest"}}], ids=["out", "merge"])
def test_write_stages_refuse_a_linearizable_read_concern(tdb, stage):
    tdb.src.insert_one({"_id": 1})
    name = next(iter(stage))
    reply = tdb.command({"aggregate": "src", "pipeline": [stage], "cursor": {},
                         "readConcern": {"level": "linearizable"}}, check=False)
    assert (reply["ok"], reply["code"], reply["codeName"], reply["errmsg"]) == (
        0, 72, "InvalidOptions", f"{name} cannot be used with a 'linearizable' read concern level")
    assert "dest" not in tdb.list_collection_names()
    # The same read of the pipeline is linearizable without the write stage.
    reply = tdb.command({"aggregate": "src", "pipeline": [], "cursor": {},
                         "readConcern": {"level": "linearizable"}})
    assert reply["cursor"]["firstBatch"] == [{"_id": 1}]
    tdb.command({"aggregate": "src", "pipeline": [stage], "cursor": {}, "readConcern": {"level": "majority"}})
    assert list(tdb.dest.find()) == [{"_id": 1}]
