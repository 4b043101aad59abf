"""The database profiler (`profile`, `system.profile`) and the slow-operation log lines,
with seed 003's profiler scenario end to end: B's update waits on A's open transaction,
retrying, until the transaction lifetime limit aborts A; its profile document then shows
the retries as `writeConflicts`."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from bson import Timestamp
from pymongo import ASCENDING, MongoClient
from pymongo.errors import OperationFailure

from nidus_harness import NidusServer

LIFETIME_SECONDS = 3


def profile(db, level, **kw):
    return db.command("profile", level, **kw)


def entries(db, **query):
    return list(db.system.profile.find(query).sort("ts", ASCENDING))


@pytest.fixture
def reset_globals(db):
    """slowms and sampleRate are server-wide: put them back after the test."""
    yield
    db.command("profile", -1, slowms=100, sampleRate=1.0)


def test_profile_command_replies_with_the_previous_settings(db, reset_globals):
    assert profile(db, -1) == {"was": 0, "slowms": 100, "sampleRate": 1.0, "ok": 1.0}
    assert profile(db, 2)["was"] == 0
    reply = profile(db, -1)
    assert reply["was"] == 2 and reply["slowms"] == 100
    # slowms and sampleRate change globally; the reply shows the values before the change.
    reply = profile(db, 1, slowms=250, sampleRate=0.5)
    assert reply["was"] == 2 and reply["slowms"] == 100 and reply["sampleRate"] == 1.0
    reply = profile(db.client["other_profiler_db"], -1)
    assert reply["was"] == 0 and reply["slowms"] == 250 and reply["sampleRate"] == 0.5
    assert profile(db, 0)["was"] == 1
    assert profile(db, -1)["was"] == 0


def test_profile_command_errors(db):
    with pytest.raises(OperationFailure) as err:
        profile(db, 1, sampleRate=1.5)
    assert err.value.code == 2
    assert err.value.details["errmsg"] == "'sampleRate' must be between 0.0 and 1.0 inclusive"
    with pytest.raises(OperationFailure) as err:
        profile(db, "all")
    assert err.value.code == 14
    with pytest.raises(OperationFailure) as err:
        profile(db, 1, filter=5)
    assert err.value.code == 2
    with pytest.raises(OperationFailure) as err:
        profile(db, 1, bogus=1)
    assert err.value.code == 40415
    assert profile(db, -1)["was"] == 0


def test_level_2_profiles_every_operation_with_its_metrics(db):
    db.c.insert_many([{"a": i} for i in range(10)])
    db.c.create_index("a")
    profile(db, 2)
    db.c.insert_many([{"a": 100}, {"a": 101}])
    assert len(list(db.c.find({"a": {"$gt": 5}}))) == 6
    assert len(list(db.c.find({"b": 1}))) == 0
    db.c.update_many({"a": {"$lt": 3}}, {"$set": {"b": 1}})
    db.c.delete_one({"a": 9})
    assert db.command("count", "c", query={"a": {"$gte": 100}})["n"] == 2
    assert db.c.count_documents({"a": {"$gte": 100}}) == 2
    profile(db, 0)
    ns = f"{db.name}.c"

    [ins] = entries(db, op="insert")
    assert ins["ns"] == ns and ins["ninserted"] == 2
    assert ins["keysInserted"] == 4  # _id_ and a_1 for each document
    assert ins["command"]["insert"] == "c"

    ix, coll = entries(db, op="query")
    assert ix["command"]["filter"] == {"a": {"$gt": 5}}
    assert ix["nreturned"] == 6 and ix["keysExamined"] == 6 and ix["docsExamined"] == 6
    assert ix["planSummary"] == "IXSCAN { a: 1 }"
    assert ix["execStats"]["stage"] == "FETCH"
    assert ix["execStats"]["inputStage"]["stage"] == "IXSCAN"
    assert ix["responseLength"] > 0 and ix["numYield"] == 0
    assert coll["planSummary"] == "COLLSCAN" and coll["docsExamined"] == 12
    assert coll["nreturned"] == 0 and coll["keysExamined"] == 0

    [upd] = entries(db, op="update")
    assert upd["command"] == {"q": {"a": {"$lt": 3}}, "u": {"$set": {"b": 1}},
                              "multi": True, "upsert": False}
    assert (upd["nMatched"], upd["nModified"], upd["nUpserted"]) == (3, 3, 0)
    assert upd["keysExamined"] == 3 and upd["docsExamined"] == 3
    assert upd["planSummary"] == "IXSCAN { a: 1 }"
    assert upd["execStats"]["stage"] == "UPDATE" and upd["execStats"]["nWouldModify"] == 3
    assert upd["execStats"]["inputStage"]["stage"] == "FETCH"
    assert "writeConflicts" not in upd

    [rm] = entries(db, op="remove")
    assert rm["command"] == {"q": {"a": 9}, "limit": 1}
    assert rm["ndeleted"] == 1 and rm["keysDeleted"] == 2
    assert rm["execStats"]["stage"] == "DELETE"

    [count] = entries(db, op="command", **{"command.count": "c"})
    assert count["planSummary"] == "COUNT_SCAN { a: 1 }" and count["keysExamined"] == 2
    [agg] = entries(db, op="command", **{"command.aggregate": "c"})
    assert agg["nreturned"] == 1 and agg["responseLength"] > 0

    for e in entries(db):
        assert e["client"] == "127.0.0.1"
        assert e["allUsers"] == [] and e["user"] == ""
        assert isinstance(e["millis"], int) and e["ts"] is not None
    # system.profile: capped, 1 MiB, created by the profiler.
    stats = db.command("collStats", "system.profile")
    assert stats["capped"] is True and stats["maxSize"] == 1024 * 1024


def test_each_update_statement_is_profiled(db):
    db.c.insert_many([{"_id": 1, "v": 0}, {"_id": 2, "v": 0}])
    profile(db, 2)
    db.command("update", "c", updates=[
        {"q": {"_id": 1}, "u": {"$inc": {"v": 1}}},
        {"q": {"_id": 3}, "u": {"$set": {"v": 5}}, "upsert": True},
    ])
    profile(db, 0)
    first, second = entries(db, op="update")
    assert first["command"] == {"q": {"_id": 1}, "u": {"$inc": {"v": 1}}, "multi": False,
                                "upsert": False}
    assert (first["nMatched"], first["nModified"], first["nUpserted"]) == (1, 1, 0)
    assert first["planSummary"] == "EXPRESS_IXSCAN { _id: 1 },EXPRESS_UPDATE"
    assert first["execStats"]["stage"] == "EXPRESS_UPDATE"
    assert first["execStats"]["keyPattern"] == "{ _id: 1 }"
    assert first["execStats"]["indexName"] == "_id_"
    assert second["command"]["upsert"] is True
    assert (second["nMatched"], second["nModified"], second["nUpserted"]) == (0, 0, 1)
    assert second["keysInserted"] == 1


def test_level_1_profiles_only_slow_operations(db, reset_globals):
    db.c.insert_one({"a": 1})
    profile(db, 1, slowms=100000)
    db.c.find_one({"a": 1})
    profile(db, 1, slowms=0)
    db.c.find_one({"a": 1})
    profile(db, 0)
    found = entries(db, op="query")
    assert len(found) == 1 and found[0]["nreturned"] == 1


def test_sample_rate_zero_profiles_nothing_at_level_1(db, reset_globals):
    db.c.insert_one({"a": 1})
    profile(db, 1, slowms=0, sampleRate=0.0)
    for _ in range(5):
        db.c.find_one({"a": 1})
    profile(db, 0, sampleRate=1.0)
    assert entries(db, op="query") == []


def test_filter_selects_what_is_profiled(db):
    db.c.insert_many([{"a": i} for i in range(3)])
    reply = profile(db, 1, filter={"op": "update"})
    assert reply["note"].startswith("When a filter expression is set")
    db.c.find_one({"a": 1})
    db.c.update_one({"a": 1}, {"$set": {"b": 1}})
    reply = profile(db, 0, filter="unset")
    assert reply["filter"] == {"op": "update"} and reply["was"] == 1
    assert [e["op"] for e in entries(db)] == ["update"]
    assert "filter" not in profile(db, -1)


def test_getmore_is_profiled_with_its_batch(db):
    db.c.insert_many([{"i": i} for i in range(10)])
    profile(db, 2)
    docs = list(db.c.find({}, batch_size=4))
    profile(db, 0)
    assert len(docs) == 10
    [query] = entries(db, op="query")
    assert query["nreturned"] == 4 and query["cursorid"] != 0
    more = entries(db, op="getmore")
    assert [m["nreturned"] for m in more] == [4, 2]
    assert sum(m["docsExamined"] for m in more) + query["docsExamined"] == 10
    assert all(m["ns"] == f"{db.name}.c" for m in more)


@pytest.fixture(scope="module")
def rs_server(nidus_binary, tmp_path_factory):
    server = NidusServer(
        dbpath=tmp_path_factory.mktemp("nidus-profiler") / "db",
        binary=nidus_binary,
        log_name="nidus-profiler",
        extra_args=["--replSet", "rs0", "--slowms", "500", "--setParameter",
                    f"transactionLifetimeLimitSeconds={LIFETIME_SECONDS}"],
    )
    server.start()
    yield server
    server.stop()


def slow_lines(server):
    out = []
    for line in server.log_text().splitlines():
        if '"Slow query"' in line:
            out.append(json.loads(line))
    return out


def test_seed_003_profiler_entry_shows_the_write_conflicts(rs_server):
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/", appName="seed003",
                         serverSelectionTimeoutMS=10000)
    try:
        db = client.test_seed003
        db.demo.drop()
        db.demo.insert_one({"_id": "x", "value": 0})
        assert profile(db, -1)["slowms"] == 500  # --slowms
        a = client.start_session()
        a.start_transaction()
        db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=a)
        profile(db, 2)
        started = time.monotonic()
        result = db.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}})
        waited = time.monotonic() - started
        profile(db, 0)
        assert result.matched_count == 1 and result.modified_count == 1
        assert waited > 1.0
        [last] = db.system.profile.find().sort("ts", -1).limit(1)
        assert last["op"] == "update" and last["ns"] == "test_seed003.demo"
        assert last["command"] == {"q": {"_id": "x"}, "u": {"$inc": {"value": 8}},
                                   "multi": False, "upsert": False}
        assert last["nMatched"] == 1 and last["nModified"] == 1 and last["nUpserted"] == 0
        assert last["keysInserted"] == 0 and last["keysDeleted"] == 0
        assert last["writeConflicts"] > 10
        assert last["numYield"] == last["writeConflicts"]
        assert last["docsExamined"] == last["writeConflicts"] + 1  # one read per attempt
        assert last["millis"] >= 1000
        assert last["planSummary"] == "EXPRESS_IXSCAN { _id: 1 },EXPRESS_UPDATE"
        assert last["execStats"]["stage"] == "EXPRESS_UPDATE"
        assert last["execStats"]["nWouldModify"] == 1
        assert last["client"] == "127.0.0.1" and last["appName"] == "seed003"
        with pytest.raises(OperationFailure) as err:
            a.commit_transaction()
        assert err.value.code == 251
        a.end_session()
        assert list(db.demo.find()) == [{"_id": "x", "value": 8}]

        # The same operation's slow-query line (51803) carries the same metrics.
        lines = [l for l in slow_lines(rs_server)
                 if l["attr"].get("ns") == "test_seed003.demo" and l["attr"]["type"] == "update"]
        assert lines, rs_server.log_tail()
        attr = lines[-1]["attr"]
        assert lines[-1]["id"] == 51803 and lines[-1]["c"] == "WRITE"
        assert attr["command"] == {"q": {"_id": "x"}, "u": {"$inc": {"value": 8}},
                                   "multi": False, "upsert": False}
        assert attr["writeConflicts"] == last["writeConflicts"]
        assert attr["numYields"] == last["writeConflicts"]
        assert attr["planSummary"] == last["planSummary"]
        assert attr["nMatched"] == 1 and attr["nModified"] == 1
        assert attr["durationMillis"] >= 1000 and attr["appName"] == "seed003"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", attr["remote"])
        # ... and the command's own line (type "command").
        commands = [l["attr"] for l in slow_lines(rs_server)
                    if l["attr"]["type"] == "command" and l["attr"]["command"].get("update") == "demo"]
        assert commands and commands[-1]["writeConflicts"] == last["writeConflicts"]
        assert commands[-1]["reslen"] > 0
    finally:
        client.close()


def test_fast_operations_leave_no_slow_query_line(rs_server):
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/", serverSelectionTimeoutMS=10000)
    try:
        db = client.test_fastops
        db.fast.insert_one({"marker": "fast_marker_op"})
        db.fast.find_one({"marker": "fast_marker_op"})
        assert "fast_marker_op" not in rs_server.log_text()
        db.command("profile", -1, slowms=0)
        try:
            db.fast.find_one({"marker": "slow_marker_op"})
        finally:
            db.command("profile", -1, slowms=500)
        [line] = [l for l in slow_lines(rs_server) if "slow_marker_op" in json.dumps(l)]
        attr = line["attr"]
        assert attr["type"] == "command" and attr["ns"] == "test_fastops.fast"
        assert attr["planSummary"] == "COLLSCAN" and attr["docsExamined"] == 1
        assert attr["nreturned"] == 0 and attr["cursorExhausted"] is True
        assert attr["command"]["filter"] == {"marker": "slow_marker_op"}
    finally:
        client.close()


def test_point_read_reports_its_express_plan_and_index_use(rs_server):
    """A find by `_id` (the express path): its plan summary in the slow-query line (profiler
    off) and in `system.profile`, and its use of `_id_` in `$indexStats`, one per read."""
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/", serverSelectionTimeoutMS=10000)
    try:
        db = client.test_pointread
        db.pr.insert_many([{"_id": i, "v": i} for i in range(3)])

        def id_accesses():
            stats = {s["name"]: s for s in db.pr.aggregate([{"$indexStats": {}}])}
            return stats["_id_"]["accesses"]["ops"]

        before = id_accesses()
        for i in range(3):
            assert db.pr.find_one({"_id": i}) == {"_id": i, "v": i}
        assert id_accesses() == before + 3

        db.command("profile", 0, slowms=0)
        try:
            assert db.pr.find_one({"_id": 2}, comment="point_slow_marker") == {"_id": 2, "v": 2}
        finally:
            db.command("profile", 0, slowms=500)
        [line] = [l for l in slow_lines(rs_server) if "point_slow_marker" in json.dumps(l)]
        attr = line["attr"]
        assert attr["type"] == "command" and attr["ns"] == "test_pointread.pr"
        assert attr["planSummary"] == "EXPRESS_IXSCAN { _id: 1 }"
        assert attr["keysExamined"] == 1 and attr["docsExamined"] == 1
        assert attr["nreturned"] == 1

        profile(db, 2)
        try:
            assert db.pr.find_one({"_id": 1}, comment="point_profiled") == {"_id": 1, "v": 1}
        finally:
            profile(db, 0)
        [entry] = entries(db, **{"command.comment": "point_profiled"})
        assert entry["op"] == "query" and entry["planSummary"] == "EXPRESS_IXSCAN { _id: 1 }"
        assert entry["keysExamined"] == 1 and entry["docsExamined"] == 1
        assert entry["nreturned"] == 1
        assert "isCached" in entry["execStats"]
    finally:
        client.close()


def test_the_command_shown_keeps_the_cluster_time_the_driver_sent(rs_server):
    """A replica set member's driver sends `$clusterTime` with each command; the profiler and
    `currentOp` show the command with it, in the place the driver put it."""
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/",
                         serverSelectionTimeoutMS=10000)
    try:
        db = client.test_shown_cluster_time
        db.c.drop()
        db.c.insert_one({"_id": 1})
        profile(db, 2)
        assert db.c.find_one({"_id": 1}) == {"_id": 1}
        profile(db, 0)
        [entry] = db.system.profile.find({"op": "query"})
        command = entry["command"]
        keys = list(command)
        assert keys[:2] == ["find", "filter"], keys
        assert keys.index("lsid") < keys.index("$clusterTime") < keys.index("$db"), keys
        sent = command["$clusterTime"]
        assert list(sent) == ["clusterTime", "signature"], sent
        assert isinstance(sent["clusterTime"], Timestamp)
        assert sent["signature"] == {"hash": b"\0" * 20, "keyId": 0}
        # The reply's cluster time, which the driver sends back with its next command.
        reply = db.command("ping")
        assert reply["$clusterTime"]["clusterTime"] == reply["operationTime"]
        ops = client.admin.command("currentOp")["inprog"]
        [own] = [op for op in ops if "currentOp" in op.get("command", {})]
        keys = list(own["command"])
        assert keys.index("$clusterTime") < keys.index("$db"), keys
        assert own["command"]["$clusterTime"]["clusterTime"] >= reply["operationTime"]
    finally:
        client.close()
