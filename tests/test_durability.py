"""Crash durability: every write acknowledged with j:true survives SIGKILL."""

from __future__ import annotations

import threading
import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import PyMongoError

THREADS = 4


def _insert_until_killed(srv, acked: list, stop: threading.Event, errors: list, tid: int, base: int):
    c = srv.client(serverSelectionTimeoutMS=2000, socketTimeoutMS=5000, retryWrites=False)
    coll = c.dur.get_collection("c", write_concern=WriteConcern(w=1, j=True))
    i = 0
    try:
        while not stop.is_set():
            _id = base + tid * 10_000_000 + i
            try:
                if i % 10 == 0:  # some batches too
                    ids = [_id + k for k in range(5)]
                    coll.insert_many([{"_id": x, "t": tid, "pad": "p" * 200} for x in ids], ordered=True)
                    acked.extend(ids)
                    i += 5
                else:
                    coll.insert_one({"_id": _id, "t": tid, "pad": "p" * 200})
                    acked.append(_id)
                    i += 1
            except PyMongoError as e:
                if not stop.is_set():
                    errors.append(repr(e))
                return
    finally:
        c.close()


def _wait_writable(srv, timeout=30.0):
    deadline = time.monotonic() + timeout
    with srv.client() as c:
        while time.monotonic() < deadline:
            if c.admin.command("hello").get("isWritablePrimary"):
                return
            time.sleep(0.1)
    raise AssertionError("the member did not become primary again")


def _fill_until_a_wal_file_is_reused(srv, dbpath, limit_mb=1200):
    """Writes until RocksDB writes its WAL into a reused file (the LOG says so), whose old
    records past the new ones must not be replayed after a crash."""
    log = dbpath / "LOG"
    pad = "f" * 60_000
    with srv.client() as c:
        coll = c.dur.get_collection("fill", write_concern=WriteConcern(w=1, j=False))
        for batch in range(limit_mb // 6):  # 100 documents of 60 KB
            coll.insert_many([{"b": batch, "pad": pad} for _ in range(100)])
            if batch % 5 == 4 and "from recycle list" in log.read_text(errors="replace"):
                return
    raise AssertionError(f"no WAL file was reused after {limit_mb} MB of writes")


# "initiated": a one-member replica set with Raft, where a j:true write is journaled by the
# synced Raft append of its oplog entry, and the Raft commit and applied indexes are written
# without syncs of their own (a restart after SIGKILL must recover from whatever of them the
# WAL kept). "reused_wal": the first crash comes while the WAL is a reused file (RocksDB keeps
# WAL files it no longer needs and overwrites them), its tail still holding older records.
@pytest.mark.parametrize("rounds,initiated,reused_wal", [(3, False, False), (2, True, False),
                                                         (1, False, True)])
def test_sigkill_loses_no_acknowledged_write(start_nidus, tmp_path, rounds, initiated, reused_wal):
    extra = ["--replSet", "dur"] if initiated else None
    srv = start_nidus(dbpath=tmp_path / "dur", extra_args=extra)
    if reused_wal:
        _fill_until_a_wal_file_is_reused(srv, tmp_path / "dur")
    if initiated:
        with srv.client() as c:
            c.admin.command("replSetInitiate", {
                "_id": "dur", "members": [{"_id": 0, "host": f"127.0.0.1:{srv.port}"}]})
        _wait_writable(srv)
    all_acked: list[int] = []
    for rnd in range(rounds):
        acked: list[int] = []
        stop = threading.Event()
        errors: list[str] = []
        threads = [threading.Thread(target=_insert_until_killed,
                                    args=(srv, acked, stop, errors, t, rnd * 1_000_000_000))
                   for t in range(THREADS)]
        for t in threads:
            t.start()
        time.sleep(2.5 + rnd)  # let writes flow, then crash mid-stream
        stop.set()
        rc = srv.kill()
        for t in threads:
            t.join(30)
        assert not errors, f"round {rnd}: errors before the kill: {errors[:3]}"
        assert rc == -9
        assert len(acked) > 50, f"round {rnd}: only {len(acked)} acknowledged writes in the window (too slow?)"
        all_acked.extend(acked)
        srv.restart()
        if initiated:
            _wait_writable(srv)
        with srv.client() as c:
            present = {d["_id"] for d in c.dur.c.find({}, {"_id": 1})}
            missing = [x for x in all_acked if x not in present]
            assert not missing, (f"round {rnd}: {len(missing)} of {len(all_acked)} acknowledged j:true writes "
                                 f"lost after SIGKILL, e.g. {missing[:5]}")
            # indexes and catalog survive crashes too, and the server accepts writes again
            assert c.dur.c.count_documents({}) == len(present)
            c.dur.c.insert_one({"_id": f"after-{rnd}"}, )
            if initiated:
                # The oplog holds every acknowledged write once, and the member's Raft state
                # came back (it is the primary of its set again).
                ops = c.local.oplog.rs.count_documents({"ns": "dur.c", "op": "i"})
                assert ops >= len(all_acked) + rnd + 1
                assert c.admin.command("replSetGetStatus")["myState"] == 1
    assert not srv.panics()


def test_clean_shutdown_closes_the_store_under_connected_clients(start_nidus, tmp_path):
    """SIGTERM ends idle connections (one holding an open cursor) and closes RocksDB on the
    main thread: its LOG ends with the close, and nothing is left for WAL recovery to redo
    that was acknowledged."""
    srv = start_nidus(dbpath=tmp_path / "connected")
    client = srv.client()
    coll = client.d.get_collection("c", write_concern=WriteConcern(w=1, j=False))
    coll.insert_many([{"_id": i} for i in range(200)])
    cursor = coll.find().batch_size(2)
    next(cursor)
    started = time.monotonic()
    assert srv.stop() == 0
    # Ending the connections does not wait for the clients.
    assert time.monotonic() - started < 10
    rocks_log = (tmp_path / "connected" / "LOG").read_text().splitlines()
    assert rocks_log and "Shutdown complete" in rocks_log[-1], rocks_log[-3:]
    client.close()
    srv.restart()
    with srv.client() as c:
        assert c.d.c.count_documents({}) == 200


def test_unjournaled_writes_survive_clean_shutdown(start_nidus, tmp_path):
    srv = start_nidus(dbpath=tmp_path / "nojournal")
    with srv.client() as c:
        coll = c.d.get_collection("c", write_concern=WriteConcern(w=1, j=False))
        for i in range(500):
            coll.insert_one({"_id": i})
    assert srv.stop() == 0
    srv.restart()
    with srv.client() as c:
        assert c.d.c.count_documents({}) == 500


def test_unjournaled_writes_synced_within_100ms(start_nidus, tmp_path):
    """DESIGN.md: with j:false the WAL is synced at least every 100 ms; writes acknowledged
    more than a second before a SIGKILL must survive."""
    srv = start_nidus(dbpath=tmp_path / "periodic")
    with srv.client() as c:
        coll = c.d.get_collection("c", write_concern=WriteConcern(w=1, j=False))
        coll.insert_many([{"_id": i} for i in range(1000)])
    time.sleep(1.0)
    srv.kill()
    srv.restart()
    with srv.client() as c:
        assert c.d.c.count_documents({}) == 1000


def _transfer_until_killed(srv, committed: list, stop: threading.Event, errors: list, seed: int):
    """Transfers between accounts, one transaction each, committed with j:true; records the
    transfers whose commit was acknowledged."""
    import random

    from pymongo.errors import ConnectionFailure, OperationFailure

    rng = random.Random(seed)
    c = srv.client(serverSelectionTimeoutMS=2000, socketTimeoutMS=5000)
    db = c.get_database("bank", write_concern=WriteConcern(w=1, j=True))
    try:
        with c.start_session() as s:
            while not stop.is_set():
                src, dst = rng.sample(range(ACCOUNTS), 2)
                amount = rng.randint(1, 20)
                tag = f"{seed}-{rng.getrandbits(48)}"
                try:
                    with s.start_transaction():
                        db.accounts.update_one({"_id": src}, {"$inc": {"balance": -amount}}, session=s)
                        db.accounts.update_one({"_id": dst}, {"$inc": {"balance": amount}}, session=s)
                        db.ledger.insert_one({"_id": tag, "amount": amount}, session=s)
                    committed.append(tag)
                except OperationFailure as e:
                    if not e.has_error_label("TransientTransactionError"):
                        if not stop.is_set():
                            errors.append(repr(e))
                        return
                except (ConnectionFailure, PyMongoError) as e:
                    if not stop.is_set():
                        errors.append(repr(e))
                    return
    except PyMongoError:
        pass  # the session's end after the kill
    finally:
        c.close()


ACCOUNTS = 50


def test_sigkill_loses_no_committed_transaction(start_nidus, tmp_path):
    """Issue 7: clients transfer money in transactions while the server is SIGKILLed; after
    the restart every acknowledged commit is there, no uncommitted one is, and the total
    balance is what it was."""
    srv = start_nidus(dbpath=tmp_path / "txn-dur", extra_args=["--replSet", "rs0"])
    with srv.client() as c:
        c.bank.accounts.insert_many([{"_id": i, "balance": 1000} for i in range(ACCOUNTS)])
    committed: list[str] = []
    stop = threading.Event()
    errors: list[str] = []
    threads = [threading.Thread(target=_transfer_until_killed, args=(srv, committed, stop, errors, t))
               for t in range(THREADS)]
    for t in threads:
        t.start()
    time.sleep(3)
    stop.set()
    assert srv.kill() == -9
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    assert len(committed) > 20, f"only {len(committed)} transactions committed before the kill"
    srv.restart()
    with srv.client() as c:
        ledger = {d["_id"] for d in c.bank.ledger.find({}, {"_id": 1})}
        missing = [t for t in committed if t not in ledger]
        assert not missing, f"{len(missing)} acknowledged transactions lost, e.g. {missing[:3]}"
        total = sum(d["balance"] for d in c.bank.accounts.find())
        assert total == ACCOUNTS * 1000
        moved = sum(d["amount"] for d in c.bank.ledger.find())
        assert moved > 0
    assert not srv.panics()
