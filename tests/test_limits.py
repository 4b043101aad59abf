"""Limits: sub-pipeline nesting, idle cursor timeouts, clients that stall or never read.

Codes and messages are MongoDB's; each test says where they come from.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import bson
import pytest
from pymongo.errors import OperationFailure

import wire

# MongoDB: error_codes.yml MaxSubPipelineDepthExceeded = 232; the message is built in
# makeCopyForSubPipelineFromExpressionContext (expression_context.cpp) from
# internalMaxSubPipelineViewDepth (default 20).
MAX_DEPTH_MSG = "Maximum number of nested sub-pipelines exceeded. Limit is 20"


def lookup_n_deep(coll: str, n: int) -> dict:
    """n + 1 nested `$lookup`s (jstests/aggregation/sources/lookup/max_subpipeline_depth.js)."""
    spec = {"$lookup": {"from": coll, "as": "results", "pipeline": []}}
    for _ in range(n):
        spec = {"$lookup": {"from": coll, "as": "results", "pipeline": [spec]}}
    return spec


def union_n_deep(coll: str, n: int) -> dict:
    spec = {"$unionWith": {"coll": coll, "pipeline": []}}
    for _ in range(n):
        spec = {"$unionWith": {"coll": coll, "pipeline": [spec]}}
    return spec


def nested_lookups(foreign: str, levels: int) -> list:
    """`levels` nested `$lookup`s over `foreign` (generateNestedPipeline in jstests'
    lookup.js)."""
    pipeline = [{"$lookup": {"pipeline": [], "from": foreign, "as": "same"}}]
    for _ in range(1, levels):
        pipeline = [{"$lookup": {"pipeline": pipeline, "from": foreign, "as": "same"}}]
    return pipeline


def assert_too_deep(db, coll: str, pipeline: list):
    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", coll, pipeline=pipeline, cursor={})
    assert e.value.code == 232
    assert e.value.details["codeName"] == "MaxSubPipelineDepthExceeded"
    assert e.value.details["errmsg"] == MAX_DEPTH_MSG


@pytest.mark.parametrize("make", [lookup_n_deep, union_n_deep])
def test_sub_pipeline_depth_limit(db, make):
    db.c.insert_one({"_id": 1})  # one: each level nests the whole collection
    # 20 levels run (max_subpipeline_depth.js: makeXNDeep(maxDepth - 1) works) ...
    out = db.command("aggregate", "c", pipeline=[make("c", 19)], cursor={})
    assert out["ok"] == 1
    # ... 21 do not, whether or not the collection has documents (a parse-time check).
    assert_too_deep(db, "c", [make("c", 20)])
    assert_too_deep(db, "empty", [make("empty", 20)])


def test_sub_pipeline_depth_mixes_stages_and_ignores_facet(db):
    db.c.insert_one({"_id": 1})
    spec = {"$lookup": {"from": "c", "as": "r", "localField": "_id", "foreignField": "_id"}}
    for i in range(19):
        spec = ({"$unionWith": {"coll": "c", "pipeline": [spec]}} if i % 2
                else {"$lookup": {"from": "c", "as": "r", "pipeline": [spec]}})
    # A localField/foreignField $lookup is a level too: 20 here.
    assert db.command("aggregate", "c", pipeline=[spec], cursor={})["ok"] == 1
    # $facet shares its parent's context: it adds no level.
    faceted = [{"$facet": {"a": [spec], "b": [{"$count": "n"}]}}]
    assert db.command("aggregate", "c", pipeline=faceted, cursor={})["ok"] == 1
    assert_too_deep(db, "c", [{"$lookup": {"from": "c", "as": "r", "pipeline": [spec]}}])
    assert_too_deep(db, "c", [{"$facet": {"a": [{"$lookup": {"from": "c", "as": "r", "pipeline": [spec]}}]}}])


def test_sub_pipeline_depth_counts_view_pipelines(db):
    """jstests/aggregation/sources/lookup/lookup.js: views whose combined nesting is 20 run,
    21 fail."""
    db.lookup.insert_one({"_id": 1})
    db.command("create", "view1", viewOn="lookup", pipeline=nested_lookups("lookup", 10))
    db.command("create", "view2", viewOn="view1", pipeline=nested_lookups("view1", 10))
    assert db.command("aggregate", "view2", pipeline=[], cursor={})["ok"] == 1
    db.command("create", "view3", viewOn="view2", pipeline=nested_lookups("view2", 1))
    assert_too_deep(db, "view3", [])
    # The same depth reached from a pipeline over a collection.
    assert_too_deep(db, "lookup", nested_lookups("view2", 1))
    db.command("create", "view_empty", viewOn="nothing", pipeline=[])
    assert_too_deep(db, "view_empty", nested_lookups("view2", 1))


def test_sub_pipeline_depth_parameter(start_nidus):
    """internalMaxSubPipelineViewDepth is a parameter (start-up and setParameter), as in
    MongoDB (jstests raise it to 100 with setParameter)."""
    server = start_nidus(extra_args=["--setParameter", "internalMaxSubPipelineViewDepth=22"])
    client = server.client()
    try:
        db = client.t
        db.c.insert_one({"_id": 1})
        assert client.admin.command("getParameter", 1, internalMaxSubPipelineViewDepth=1)[
            "internalMaxSubPipelineViewDepth"] == 22
        assert db.command("aggregate", "c", pipeline=[lookup_n_deep("c", 21)], cursor={})["ok"] == 1
        client.admin.command("setParameter", 1, internalMaxSubPipelineViewDepth=3)
        assert db.command("aggregate", "c", pipeline=[union_n_deep("c", 2)], cursor={})["ok"] == 1
        with pytest.raises(OperationFailure) as e:
            db.command("aggregate", "c", pipeline=[union_n_deep("c", 3)], cursor={})
        assert e.value.code == 232
        assert e.value.details["errmsg"] == "Maximum number of nested sub-pipelines exceeded. Limit is 3"
    finally:
        client.close()


# ------------------------------------------------------------------------ idle cursors
def _params(*pairs: str) -> list:
    args = []
    for p in pairs:
        args += ["--setParameter", p]
    return args


def test_cursor_timeout_parameters(client):
    p = client.admin.command("getParameter", 1, cursorTimeoutMillis=1,
                             clientCursorMonitorFrequencySecs=1,
                             enableTimeoutOfInactiveSessionCursors=1)
    # MongoDB's defaults (cursor_server_params.idl / query_knobs).
    assert p["cursorTimeoutMillis"] == 600000
    assert p["clientCursorMonitorFrequencySecs"] == 4
    assert p["enableTimeoutOfInactiveSessionCursors"] is False


def _open_cursor(sock, db, coll, **extra):
    reply = wire.command(sock, {"find": coll, "batchSize": 1, "$db": db, **extra})
    assert reply["ok"] == 1, reply
    cid = reply["cursor"]["id"]
    assert cid != 0
    return cid


def _get_more(sock, db, coll, cid):
    return wire.command(sock, {"getMore": bson.Int64(cid), "collection": coll, "batchSize": 1,
                               "$db": db})


def _cursor_metrics(client):
    return client.admin.command("serverStatus")["metrics"]["cursor"]


def test_idle_cursors_time_out(start_nidus):
    server = start_nidus(extra_args=_params("cursorTimeoutMillis=600",
                                            "clientCursorMonitorFrequencySecs=1"))
    client = server.client()
    client.t.c.insert_many([{"_id": i} for i in range(100)])
    sock = wire.connect(server.port)
    try:
        before = _cursor_metrics(client)
        idle = _open_cursor(sock, "t", "c")
        kept = _open_cursor(sock, "t", "c", noCursorTimeout=True)
        busy = _open_cursor(sock, "t", "c")
        m = _cursor_metrics(client)
        assert m["open"]["total"] == before["open"]["total"] + 3
        assert m["open"]["noTimeout"] == 1
        assert m["totalOpened"] == before["totalOpened"] + 3
        # `busy` is used every 200 ms: only idle time counts.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            assert _get_more(sock, "t", "c", busy)["ok"] == 1
            time.sleep(0.2)
        reply = _get_more(sock, "t", "c", idle)
        # MongoDB: CursorManager::pinCursor "cursor id <id> not found".
        assert reply["ok"] == 0
        assert reply["code"] == 43 and reply["codeName"] == "CursorNotFound"
        assert reply["errmsg"] == f"cursor id {idle} not found"
        assert _get_more(sock, "t", "c", kept)["ok"] == 1
        m = _cursor_metrics(client)
        assert m["timedOut"] == before["timedOut"] + 1
        assert m["open"]["noTimeout"] == 1
        assert "Cursors timed out" in server.log_text()
        # setParameter changes the timeout at run time.
        client.admin.command("setParameter", 1, cursorTimeoutMillis=600000)
        again = _open_cursor(sock, "t", "c")
        time.sleep(2.0)
        assert _get_more(sock, "t", "c", again)["ok"] == 1
    finally:
        sock.close()
        client.close()


def test_session_cursors_live_with_their_session(start_nidus):
    """Cursors opened in a session (drivers send an implicit one) do not time out unless
    enableTimeoutOfInactiveSessionCursors is set; they close when the session ends
    (MongoDB 5.0: CursorManager::cursorShouldTimeout_inlock)."""
    server = start_nidus(extra_args=_params("cursorTimeoutMillis=300",
                                            "clientCursorMonitorFrequencySecs=1"))
    client = server.client()
    coll = client.t.c
    coll.insert_many([{"_id": i} for i in range(10)])
    try:
        cur = coll.find(batch_size=2)  # the driver's implicit session
        assert next(cur)["_id"] == 0
        time.sleep(2.0)
        assert [d["_id"] for d in cur] == list(range(1, 10))

        client.admin.command("setParameter", 1, enableTimeoutOfInactiveSessionCursors=True)
        cur = coll.find(batch_size=2)
        next(cur)
        time.sleep(2.0)
        with pytest.raises(OperationFailure) as e:
            list(cur)
        assert e.value.code == 43
        client.admin.command("setParameter", 1, enableTimeoutOfInactiveSessionCursors=False)

        sock = wire.connect(server.port)
        try:
            lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
            cid = _open_cursor(sock, "t", "c", lsid=lsid)
            assert wire.command(sock, {"endSessions": [lsid], "$db": "admin"})["ok"] == 1
            time.sleep(2.0)
            reply = _get_more(sock, "t", "c", cid)
            assert reply["code"] == 43, reply
        finally:
            sock.close()
    finally:
        client.close()


def test_pinned_cursor_metric(client, db):
    db.create_collection("capped", capped=True, size=4096)
    db.capped.insert_one({"x": 1})
    # The cursor's commands share one explicit session: an implicit one comes from the pool
    # the main thread's serverStatus draws from too, and a getMore in another session is 50738.
    session = client.start_session()
    reply = db.command("find", "capped", tailable=True, awaitData=True, batchSize=1, session=session)
    cid = reply["cursor"]["id"]
    assert cid != 0
    done = threading.Event()

    def wait_for_data():
        try:
            db.command("getMore", bson.Int64(cid), collection="capped", maxTimeMS=2500,
                       session=session)
        finally:
            done.set()

    t = threading.Thread(target=wait_for_data)
    t.start()
    try:
        pinned = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not pinned:
            pinned = _cursor_metrics(client)["open"]["pinned"]
            time.sleep(0.05)
        assert pinned >= 1
    finally:
        t.join()
    assert done.is_set()
    assert _cursor_metrics(client)["open"]["pinned"] == 0
    db.command("killCursors", "capped", cursors=[bson.Int64(cid)], session=session)
    session.end_session()


# ------------------------------------------------------------------------ slow clients
def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_client_that_never_reads_does_not_stall_others(nidus_server, client, db):
    """One client pipelines thousands of requests with large replies and reads none of them:
    its connection blocks on writing, nobody else's does."""
    db.big.insert_one({"_id": 1, "pad": "x" * 200_000})
    msg = wire.op_msg({"find": "big", "filter": {}, "$db": db.name})
    hog = wire.connect(nidus_server.port)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sent = 0
    stop = threading.Event()

    def flood():
        nonlocal sent
        hog.settimeout(0.5)
        while not stop.is_set():
            try:
                hog.sendall(msg)
                sent += 1
            except (socket.timeout, OSError):
                # Our send buffer is full: the server stopped reading us (back-pressure).
                continue

    rss_before = _rss_kib(nidus_server.proc.pid)
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    try:
        time.sleep(1.0)
        worst = 0.0
        for _ in range(100):
            start = time.monotonic()
            assert client.admin.command("ping")["ok"] == 1
            worst = max(worst, time.monotonic() - start)
        assert worst < 1.0, f"a ping took {worst:.2f}s beside a client that reads nothing"
        # The hog's replies are not buffered without bound: its requests wait in the
        # kernel's buffers, unread, instead of becoming 200 KB replies in the server.
        grown = _rss_kib(nidus_server.proc.pid) - rss_before
        print(f"hog sent {sent} requests; server grew {grown} KiB; worst ping {worst:.3f}s")
        assert sent > 100
        assert grown < 200_000, f"{sent} unread requests grew the server by {grown} KiB"
    finally:
        stop.set()
        t.join(timeout=5)
        hog.close()
    assert client.admin.command("ping")["ok"] == 1
    assert nidus_server.is_running()
