"""`currentOp`, the `$currentOp` stage and `killOp`: seed 003's waiting update is visible
while it retries against an open transaction (with its write conflicts so far), the open
transaction shows as an idle session, and `killOp` ends the update with Interrupted."""

from __future__ import annotations

import threading
import time

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from nidus_harness import NidusServer


@pytest.fixture(scope="module")
def rs_server(nidus_binary, tmp_path_factory):
    server = NidusServer(
        dbpath=tmp_path_factory.mktemp("nidus-currentop") / "db",
        binary=nidus_binary,
        log_name="nidus-currentop",
        extra_args=["--replSet", "rs0", "--setParameter", "transactionLifetimeLimitSeconds=60"],
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rs_client(rs_server):
    client = MongoClient(f"mongodb://127.0.0.1:{rs_server.port}/", appName="curop-test",
                         serverSelectionTimeoutMS=10000)
    yield client
    client.close()


def test_current_op_lists_itself(rs_client):
    inprog = rs_client.admin.command("currentOp")["inprog"]
    [me] = [op for op in inprog if op.get("command", {}).get("currentOp") == 1]
    assert me["active"] is True and me["type"] == "op"
    assert me["op"] == "command" and me["ns"] == "admin.$cmd"
    assert isinstance(me["opid"], int) and me["opid"] > 0
    assert me["appName"] == "curop-test"
    assert me["client"].startswith("127.0.0.1:")
    assert me["waitingForLock"] is False
    assert me["secs_running"] == 0 and me["microsecs_running"] >= 0
    assert "lsid" in me


def test_current_op_filter(rs_client):
    assert rs_client.admin.command({"currentOp": 1, "op": "no-such-op"})["inprog"] == []
    mine = rs_client.admin.command({"currentOp": 1, "command.currentOp": 1})["inprog"]
    assert len(mine) == 1


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_waiting_update_is_visible_and_kill_op_interrupts_it(rs_client):
    db = rs_client.test_curop
    db.demo.drop()
    db.demo.insert_one({"_id": "x", "value": 0})
    a = rs_client.start_session()
    a.start_transaction()
    db.demo.update_one({"_id": "x"}, {"$inc": {"value": 2}}, session=a)
    outcome = {}

    def b():
        try:
            outcome["result"] = db.demo.update_one({"_id": "x"}, {"$inc": {"value": 8}})
        except OperationFailure as e:
            outcome["error"] = e

    t = threading.Thread(target=b)
    t.start()
    try:
        def find_update():
            ops = rs_client.admin.command({"currentOp": 1, "op": "update", "ns": "test_curop.demo"})
            ops = [o for o in ops["inprog"] if o.get("writeConflicts", 0) > 5]
            return ops[0] if ops else None

        op = wait_for(find_update)
        assert op["active"] is True and op["command"]["update"] == "demo"
        assert op["numYields"] == op["writeConflicts"]
        assert op["appName"] == "curop-test" and op["waitingForLock"] is False
        # A's transaction: open, no command running on it.
        idle = rs_client.admin.command("currentOp")["inprog"]
        [txn] = [o for o in idle if o.get("type") == "idleSession"
                 and o["lsid"]["id"] == a.session_id["id"]]
        assert txn["active"] is False
        assert txn["transaction"]["parameters"]["txnNumber"] == a._server_session.transaction_id
        assert txn["transaction"]["parameters"]["autocommit"] is False
        assert txn["transaction"]["timeOpenMicros"] > 0
        # The same through the aggregation stage.
        agg = list(rs_client.admin.aggregate([
            {"$currentOp": {}}, {"$match": {"opid": op["opid"]}}, {"$project": {"op": 1, "ns": 1}}]))
        assert agg == [{"op": "update", "ns": "test_curop.demo"}]

        reply = rs_client.admin.command("killOp", op=op["opid"])
        assert reply["info"] == "attempting to kill op"
        t.join(timeout=10)
        assert not t.is_alive()
        err = outcome["error"]
        assert err.code == 11601 and err.details["codeName"] == "Interrupted"
        assert err.details["errmsg"] == "operation was interrupted"
    finally:
        t.join(timeout=10)
        a.abort_transaction()
        a.end_session()
    # The killed update changed nothing; the aborted transaction neither.
    assert db.demo.find_one() == {"_id": "x", "value": 0}
    assert rs_client.admin.command({"currentOp": 1, "op": "update"})["inprog"] == []


def test_kill_op_errors(rs_client):
    with pytest.raises(OperationFailure) as err:
        rs_client.test_curop.command("killOp", op=1)
    assert err.value.code == 13
    with pytest.raises(OperationFailure) as err:
        rs_client.admin.command("killOp")
    assert err.value.code == 2
    # An opid that is not running: nothing to do, as MongoDB.
    assert rs_client.admin.command("killOp", op=2_000_000_000)["ok"] == 1.0


def test_current_op_stage_needs_admin_and_aggregate_1(rs_client):
    with pytest.raises(OperationFailure) as err:
        list(rs_client.test_curop.aggregate([{"$currentOp": {}}]))
    assert err.value.code == 73
