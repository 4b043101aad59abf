"""Change streams ($changeStream) on a one-member replica set: every event type and option,
checked against the events MongoDB 8.0 sends for the same operations."""

from __future__ import annotations

import threading
import time

import pytest
from bson import Int64, Timestamp
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern


@pytest.fixture
def db(rs_client, request):
    name = ("t_" + request.node.name.replace("[", "_").replace("]", "_"))[:60]
    rs_client.drop_database(name)
    return rs_client[name]


def drain(stream, n, timeout=5.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        ev = stream.try_next()
        if ev is not None:
            out.append(ev)
    return out


def strip(ev, *keep):
    """The event fields that do not vary between runs (no token, times, UUIDs)."""
    return {k: v for k, v in ev.items() if k not in ("_id", "clusterTime", "wallTime", "collectionUUID")
            or k in keep}


def test_crud_events(db):
    c = db.c
    c.insert_one({"_id": 0})
    with c.watch() as s:
        c.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3]})
        c.update_one({"_id": 1}, {"$set": {"a": 2, "n.x": 1}, "$unset": {"zz": ""}})
        c.update_one({"_id": 1}, {"$unset": {"a": ""}})
        c.update_one({"_id": 1}, {"$pop": {"arr": 1}})
        c.replace_one({"_id": 1}, {"b": 1})
        c.delete_one({"_id": 1})
        evs = drain(s, 6)
    ns = {"db": db.name, "coll": "c"}
    assert [strip(e) for e in evs] == [
        {"operationType": "insert", "fullDocument": {"_id": 1, "a": 1, "arr": [1, 2, 3]},
         "ns": ns, "documentKey": {"_id": 1}},
        {"operationType": "update", "ns": ns, "documentKey": {"_id": 1},
         "updateDescription": {"updatedFields": {"a": 2, "n": {"x": 1}}, "removedFields": [],
                               "truncatedArrays": []}},
        {"operationType": "update", "ns": ns, "documentKey": {"_id": 1},
         "updateDescription": {"updatedFields": {}, "removedFields": ["a"], "truncatedArrays": []}},
        {"operationType": "update", "ns": ns, "documentKey": {"_id": 1},
         "updateDescription": {"updatedFields": {}, "removedFields": [],
                               "truncatedArrays": [{"field": "arr", "newSize": 2}]}},
        {"operationType": "replace", "fullDocument": {"_id": 1, "b": 1}, "ns": ns,
         "documentKey": {"_id": 1}},
        {"operationType": "delete", "ns": ns, "documentKey": {"_id": 1}},
    ]
    for e in evs:
        assert isinstance(e["clusterTime"], Timestamp) and "wallTime" in e
        assert set(e["_id"]) == {"_data"} and isinstance(e["_id"]["_data"], str)
    tokens = [e["_id"]["_data"] for e in evs]
    assert tokens == sorted(tokens)


def test_array_element_update_paths(db):
    c = db.c
    c.insert_one({"_id": 1, "arr": [{"q": 1}, 2], "o": {"1": "x"}})
    with c.watch(show_expanded_events=True) as s:
        c.update_one({"_id": 1}, {"$set": {"arr.0.q": 5, "arr.1": 3, "o.1": "y"}})
        ev = drain(s, 1)[0]
    ud = ev["updateDescription"]
    assert ud["updatedFields"] == {"arr.0.q": 5, "arr.1": 3, "o.1": "y"}
    assert ud["disambiguatedPaths"] == {"o.1": ["o", "1"]}
    assert "collectionUUID" in ev


def test_full_document_update_lookup(db):
    c = db.c
    c.insert_one({"_id": 1, "a": 1})
    with c.watch(full_document="updateLookup") as s:
        c.update_one({"_id": 1}, {"$inc": {"a": 1}})
        ev = drain(s, 1)[0]
    assert ev["fullDocument"] == {"_id": 1, "a": 2}


def test_pre_and_post_images(db):
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    c = db.c
    c.insert_one({"_id": 1, "a": 1})
    with c.watch(full_document="whenAvailable", full_document_before_change="required") as s:
        c.update_one({"_id": 1}, {"$set": {"a": 2}})
        c.replace_one({"_id": 1}, {"a": 3})
        c.delete_one({"_id": 1})
        evs = drain(s, 3)
    assert [e.get("fullDocumentBeforeChange") for e in evs] == [
        {"_id": 1, "a": 1}, {"_id": 1, "a": 2}, {"_id": 1, "a": 3}]
    assert evs[0]["fullDocument"] == {"_id": 1, "a": 2}
    # The pre-images are kept where MongoDB keeps them.
    info = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]
    kept = list(db.client.config["system.preimages"].find({"_id.nsUUID": info["info"]["uuid"]}))
    assert [k["preImage"] for k in kept] == [e["fullDocumentBeforeChange"] for e in evs]
    assert [k["_id"]["ts"] for k in kept] == [e["clusterTime"] for e in evs]
    assert all(k["_id"]["applyOpsIndex"] == 0 for k in kept)
    # Without images on the collection: whenAvailable gives null, required fails.
    d = db.d
    d.insert_one({"_id": 1})
    with d.watch(full_document_before_change="whenAvailable", full_document="whenAvailable") as s:
        d.update_one({"_id": 1}, {"$set": {"x": 1}})
        ev = drain(s, 1)[0]
    assert ev["fullDocumentBeforeChange"] is None and ev["fullDocument"] is None
    with d.watch(full_document_before_change="required") as s:
        d.delete_one({"_id": 1})
        with pytest.raises(OperationFailure) as e:
            drain(s, 1)
    assert e.value.code == 47


@pytest.mark.parametrize("options,code", [
    ({}, 2),
    ({"preAndPostImages": {}}, 2),
    ({"preAndPostImages": {"expireAfterSeconds": "unknown"}}, 2),
    ({"preAndPostImages": {"expireAfterSeconds": -1}}, 2),
    ({"preAndPostImages": {"expireAfterSeconds": 0}}, 2),
])
def test_change_stream_options_refused(rs_client, options, code):
    with pytest.raises(OperationFailure) as e:
        rs_client.admin.command({"setClusterParameter": {"changeStreamOptions": options}})
    assert e.value.code == code, e.value.details


def test_cluster_parameters_only_on_admin(rs_client):
    for cmd in ({"setClusterParameter": {"changeStreamOptions": {
                    "preAndPostImages": {"expireAfterSeconds": 10}}}},
                {"getClusterParameter": "changeStreamOptions"}):
        with pytest.raises(OperationFailure) as e:
            rs_client.test.command(cmd)
        assert e.value.code == 13
    with pytest.raises(OperationFailure) as e:
        rs_client.admin.command({"getClusterParameter": "noSuchParameter"})
    assert e.value.code == 4


def test_cluster_parameter_refused_on_standalone(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command({"setClusterParameter": {"changeStreamOptions": {
            "preAndPostImages": {"expireAfterSeconds": 10}}}})
    assert e.value.code == 20


def test_pre_images_expire_after_change_stream_options(start_nidus):
    # Its own member, with a pass of the expiry (the TTL monitor's) every second.
    server = start_nidus(extra_args=["--replSet", "rs0", "--setParameter", "ttlMonitorSleepSecs=1"])
    client = server.client()
    db, admin = client.exp, client.admin
    images = client.config["system.preimages"]
    params = lambda: admin.command({"getClusterParameter": "changeStreamOptions"})["clusterParameters"]
    assert [p["preAndPostImages"] for p in params()] == [{"expireAfterSeconds": "off"}]
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    uuid = db.command("listCollections", filter={"name": "c"})["cursor"]["firstBatch"][0]["info"]["uuid"]
    db.c.insert_one({"_id": 1, "a": 1})
    db.c.update_one({"_id": 1}, {"$set": {"a": 2}})
    db.c.update_one({"_id": 1}, {"$set": {"a": 3}})
    kept = list(images.find({"_id.nsUUID": uuid}).sort("_id.ts", 1))
    assert [k["preImage"]["a"] for k in kept] == [1, 2]
    # "off": kept for as long as the oplog keeps their entries.
    time.sleep(2.5)
    assert images.count_documents({"_id.nsUUID": uuid}) == 2
    admin.command({"setClusterParameter": {"changeStreamOptions": {
        "preAndPostImages": {"expireAfterSeconds": Int64(1)}}}})
    [p] = params()
    assert p["_id"] == "changeStreamOptions"
    assert p["preAndPostImages"] == {"expireAfterSeconds": 1}
    assert isinstance(p["preAndPostImages"]["expireAfterSeconds"], Int64)
    assert isinstance(p["clusterParameterTime"], Timestamp)
    # Stored where MongoDB stores it, so it replicates with the oplog.
    assert client.config.clusterParameters.find_one({"_id": "changeStreamOptions"}) == p
    deadline = time.monotonic() + 15
    while images.count_documents({"_id.nsUUID": uuid}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert images.count_documents({"_id.nsUUID": uuid}) == 0
    # The events are still in the oplog; their pre-images are gone.
    start = kept[0]["_id"]["ts"]
    with db.c.watch(full_document_before_change="whenAvailable", start_at_operation_time=start) as s:
        evs = drain(s, 2)
    assert [e["operationType"] for e in evs] == ["update", "update"]
    assert [e["fullDocumentBeforeChange"] for e in evs] == [None, None]
    client.close()


def test_streams_woken_by_their_scope_see_every_event(db):
    """Streams wake only for entries in their scope and skip reading the rest of the oplog;
    with writers on other collections interleaved, each stream still gets exactly its own
    events, in order, and a stream started in the past reads them all again."""
    start = db.client.admin.command("ping")["operationTime"]
    colls = [db[f"c{i}"] for i in range(4)]
    for c in colls:
        c.insert_one({"_id": "init"})
    with colls[0].watch() as s0, db.watch() as sdb:
        s0.try_next()
        sdb.try_next()

        def writer(c):
            for i in range(50):
                c.insert_one({"_id": i})
                if i % 10 == 0:
                    c.update_one({"_id": i}, {"$set": {"x": 1}})

        threads = [threading.Thread(target=writer, args=(c,)) for c in colls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ev0 = drain(s0, 55, timeout=20)
        evdb = drain(sdb, 220, timeout=20)
    expected0 = []
    for i in range(50):
        expected0.append(("insert", i))
        if i % 10 == 0:
            expected0.append(("update", i))
    assert [(e["operationType"], e["documentKey"]["_id"]) for e in ev0] == expected0
    assert len(evdb) == 220
    for c in colls:
        mine = [(e["operationType"], e["documentKey"]["_id"]) for e in evdb if e["ns"]["coll"] == c.name]
        assert mine == expected0
    with colls[3].watch(start_at_operation_time=start) as s3:
        again = drain(s3, 56, timeout=20)
    assert [(e["operationType"], e["documentKey"]["_id"]) for e in again] == [("insert", "init")] + expected0


def test_coll_mod_enables_pre_images(db):
    db.c.insert_one({"_id": 1, "a": 1})
    db.command("collMod", "c", changeStreamPreAndPostImages={"enabled": True})
    with db.c.watch(full_document_before_change="required") as s:
        db.c.delete_one({"_id": 1})
        ev = drain(s, 1)[0]
    assert ev["fullDocumentBeforeChange"] == {"_id": 1, "a": 1}


def test_drop_invalidates_collection_stream(db):
    db.c.insert_one({})
    with db.c.watch() as s:
        db.c.drop()
        evs = drain(s, 2)
        assert [e["operationType"] for e in evs] == ["drop", "invalidate"]
        assert evs[0]["ns"] == {"db": db.name, "coll": "c"}
        assert not s.alive
    # startAfter the invalidate opens a new stream after it.
    with db.c.watch(start_after=evs[1]["_id"]) as s2:
        db.c.insert_one({"_id": 7})
        assert drain(s2, 1)[0]["documentKey"] == {"_id": 7}
    with pytest.raises(OperationFailure) as e:
        db.c.watch(resume_after=evs[1]["_id"])
    assert e.value.code == 260


def test_rename_and_drop_database(db, rs_client):
    db.c.insert_one({})
    with db.watch() as dbs, db.c.watch() as cs:
        rs_client.admin.command("renameCollection", f"{db.name}.c", to=f"{db.name}.d")
        assert [e["operationType"] for e in drain(cs, 2)] == ["rename", "invalidate"]
        ev = drain(dbs, 1)[0]
        assert ev["operationType"] == "rename"
        assert ev["ns"] == {"db": db.name, "coll": "c"} and ev["to"] == {"db": db.name, "coll": "d"}
        rs_client.drop_database(db.name)
        evs = drain(dbs, 3)
        assert [e["operationType"] for e in evs] == ["drop", "dropDatabase", "invalidate"]
        assert evs[1]["ns"] == {"db": db.name}


def test_expanded_ddl_events(db):
    with db.watch(show_expanded_events=True) as s:
        db.create_collection("c")
        db.c.create_index("a")
        db.command("collMod", "c", validator={"a": {"$type": "int"}})
        db.c.drop_index("a_1")
        evs = drain(s, 4)
    assert [e["operationType"] for e in evs] == ["create", "createIndexes", "modify", "dropIndexes"]
    assert evs[1]["operationDescription"] == {"indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]}
    assert evs[2]["operationDescription"] == {"validator": {"a": {"$type": "int"}}}
    assert all("collectionUUID" in e for e in evs)
    with db.watch(show_expanded_events=True) as s:
        db.create_collection("v", viewOn="c", pipeline=[{"$match": {"a": 1}}])
        ev = drain(s, 1)[0]
    assert ev["operationType"] == "create"
    assert ev["operationDescription"] == {"viewOn": "c", "pipeline": [{"$match": {"a": 1}}]}
    db.d.insert_one({})
    db.f.insert_one({})
    with db.d.watch(show_expanded_events=True) as s:
        db.d.rename("f", dropTarget=True)
        ev = drain(s, 1)[0]
    assert ev["operationType"] == "rename"
    assert ev["operationDescription"]["to"] == {"db": db.name, "coll": "f"}
    assert "dropTarget" in ev["operationDescription"]
    with db.watch() as s:
        db.create_collection("e")
        db.e.insert_one({"_id": 1})
        assert [e["operationType"] for e in drain(s, 1)] == ["insert"]


def test_rename_over_a_collection_is_one_rename_event(rs_client, db):
    """A rename with `dropTarget` is one oplog entry naming the dropped target's UUID, as
    MongoDB logs it: the database's stream sees one `rename` (no `drop`), the target's and
    the source's streams see it and their `invalidate`; the target's documents and indexes
    are gone with it."""
    db.src.insert_many([{"_id": 1, "s": 1}, {"_id": 2, "s": 2}])
    db.tgt.insert_one({"_id": 9, "t": 1})
    db.tgt.create_index("t")
    db.create_collection("marker")
    target_uuid = next(db.list_collections(filter={"name": "tgt"}))["info"]["uuid"]
    source_uuid = next(db.list_collections(filter={"name": "src"}))["info"]["uuid"]
    start = rs_client.admin.command("ping")["operationTime"]
    with db.watch(show_expanded_events=True) as whole, \
            db.tgt.watch(show_expanded_events=True) as on_target, \
            db.src.watch(show_expanded_events=True) as on_source:
        db.src.rename("tgt", dropTarget=True)
        db.marker.insert_one({"_id": "after"})
        got = {"database": drain(whole, 2), "target": drain(on_target, 2),
               "source": drain(on_source, 2)}
    expected_rename = {"db": db.name, "coll": "src"}, {"db": db.name, "coll": "tgt"}
    assert [e["operationType"] for e in got["database"]] == ["rename", "insert"]
    for stream in ("target", "source"):
        assert [e["operationType"] for e in got[stream]] == ["rename", "invalidate"], stream
    for ev in (got["database"][0], got["target"][0], got["source"][0]):
        assert (ev["ns"], ev["to"]) == expected_rename
        assert ev["operationDescription"]["dropTarget"] == target_uuid
        assert ev["collectionUUID"] == source_uuid
    entries = list(rs_client.local["oplog.rs"].find(
        {"ts": {"$gt": start}, "op": "c", "ns": f"{db.name}.$cmd"}))
    assert [list(e["o"])[0] for e in entries] == ["renameCollection"]
    assert entries[0]["o"]["dropTarget"] == target_uuid and entries[0]["ui"] == source_uuid
    assert sorted(d["_id"] for d in db.tgt.find()) == [1, 2]
    assert [ix["name"] for ix in db.tgt.list_indexes()] == ["_id_"]
    assert "src" not in db.list_collection_names()


def test_database_and_cluster_streams(rs_client, db):
    other = rs_client[db.name + "_o"]
    rs_client.drop_database(other.name)
    with db.watch() as dbs, rs_client.watch() as cl:
        db.a.insert_one({"_id": 1})
        other.b.insert_one({"_id": 2})
        assert [e["ns"]["coll"] for e in drain(dbs, 1)] == ["a"]
        got = [(e["ns"]["db"], e["documentKey"]["_id"]) for e in drain(cl, 2)]
        assert got == [(db.name, 1), (other.name, 2)]
        assert dbs.try_next() is None
    rs_client.drop_database(other.name)


def test_transactions_events_after_commit_only(rs_client, db):
    db.c.insert_one({"_id": 0})
    with db.c.watch() as s:
        with rs_client.start_session() as sess:
            with sess.start_transaction():
                db.c.insert_one({"_id": 1}, session=sess)
                db.c.update_one({"_id": 0}, {"$set": {"x": 1}}, session=sess)
                assert s.try_next() is None
            sess.start_transaction()
            db.c.insert_one({"_id": 2}, session=sess)
            sess.abort_transaction()
            lsid = sess.session_id
        db.c.insert_one({"_id": 3})
        evs = drain(s, 3)
    assert [e["operationType"] for e in evs] == ["insert", "update", "insert"]
    assert evs[0]["lsid"] == lsid and evs[1]["lsid"] == lsid and "txnNumber" in evs[0]
    assert evs[0]["clusterTime"] == evs[1]["clusterTime"]
    assert evs[0]["_id"]["_data"] < evs[1]["_id"]["_data"]
    assert evs[2]["documentKey"] == {"_id": 3} and "lsid" not in evs[2]


def test_resume_after_start_after_and_operation_time(rs_client, db):
    c = db.c
    optime = rs_client.admin.command("ping")["operationTime"]
    c.insert_many([{"_id": i} for i in range(4)])
    with c.watch(start_at_operation_time=optime) as s:
        evs = drain(s, 4)
    assert [e["documentKey"]["_id"] for e in evs] == [0, 1, 2, 3]
    with c.watch(resume_after=evs[1]["_id"]) as s:
        assert [e["documentKey"]["_id"] for e in drain(s, 2)] == [2, 3]
    with c.watch(start_after=evs[2]["_id"]) as s:
        assert [e["documentKey"]["_id"] for e in drain(s, 1)] == [3]
    with pytest.raises(OperationFailure) as e:
        db.command("aggregate", "c", cursor={}, pipeline=[
            {"$changeStream": {"resumeAfter": evs[0]["_id"], "startAfter": evs[0]["_id"]}}])
    assert e.value.code == 40674


def test_history_lost(rs_client, db):
    with pytest.raises(OperationFailure) as e:
        db.c.watch(start_at_operation_time=Timestamp(1, 1))
    assert e.value.code == 286


def test_later_stages_and_errors(db):
    c = db.c
    with c.watch([{"$match": {"operationType": "insert", "fullDocument.keep": True}},
                  {"$project": {"fullDocument.keep": 0}},
                  {"$addFields": {"extra": 1}}]) as s:
        c.insert_many([{"_id": 1, "keep": True}, {"_id": 2, "keep": False}])
        c.delete_one({"_id": 1})
        evs = drain(s, 1)
        assert [(e["fullDocument"], e["extra"]) for e in evs] == [({"_id": 1}, 1)]
        assert s.try_next() is None
    for stage, code in [({"$group": {"_id": 1}}, 20), ({"$changeStream": {}}, 40602),
                        ({"$sort": {"a": 1}}, 20), ({"$unsupported": 1}, 40324)]:
        with pytest.raises(OperationFailure) as e:
            c.watch([stage])
        assert e.value.code == code, stage
    with pytest.raises(OperationFailure) as e:
        c.watch(full_document="bogus")
    assert e.value.code == 2
    with c.watch([{"$project": {"_id": 0}}]) as s:
        c.insert_one({"_id": 5})
        with pytest.raises(OperationFailure) as e:
            drain(s, 1)
        assert e.value.code == 280
        assert e.value.has_error_label("NonResumableChangeStreamError")
    with pytest.raises(OperationFailure) as e:
        c.with_options(read_concern=ReadConcern("local")).watch()
    assert e.value.code == 72
    c.with_options(read_concern=ReadConcern("majority")).watch().close()


def test_namespace_errors(rs_client):
    for target, kwargs, code in [(rs_client.admin, {}, 73), (rs_client.local, {}, 73), (rs_client.t.x, {"full_document": "default"}, None)]:
        if code is None:
            target.watch(**kwargs).close()
            continue
        with pytest.raises(OperationFailure) as e:
            target.watch(**kwargs)
        assert e.value.code == code
    with pytest.raises(OperationFailure) as e:
        rs_client.t.command("aggregate", 1, pipeline=[{"$changeStream": {"allChangesForCluster": True}}],
                      cursor={})
    assert e.value.code == 73


def test_standalone_refuses(start_nidus):
    s = start_nidus()
    c = s.client()
    with pytest.raises(OperationFailure) as e:
        c.t.c.watch()
    assert e.value.code == 40573
    c.close()


def test_get_more_waits_and_wakes(db):
    c = db.c
    c.insert_one({"_id": 0})
    with c.watch(max_await_time_ms=3000) as s:
        # Nothing happens: an empty batch after the await time, with a resume token.
        t0 = time.monotonic()
        assert s.try_next() is None
        waited = time.monotonic() - t0
        assert 2.5 < waited < 6
        token = s.resume_token
        assert token is not None and "_data" in token

        def later():
            time.sleep(0.3)
            c.insert_one({"_id": 1})

        th = threading.Thread(target=later)
        th.start()
        t0 = time.monotonic()
        ev = s.try_next()
        th.join()
        assert ev is not None and ev["documentKey"] == {"_id": 1}
        assert time.monotonic() - t0 < 2.5
        assert s.resume_token["_data"] >= token["_data"]


def test_post_batch_resume_token_and_batch_size(rs_client, db):
    c = db.c
    c.insert_one({"_id": -1})
    reply = db.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={"batchSize": 0})
    cur = reply["cursor"]
    assert cur["firstBatch"] == [] and cur["id"] != 0 and "_data" in cur["postBatchResumeToken"]
    c.insert_many([{"_id": i} for i in range(5)])
    more = db.command("getMore", cur["id"], collection="c", batchSize=2, maxTimeMS=1000)["cursor"]
    assert [e["documentKey"]["_id"] for e in more["nextBatch"]] == [0, 1]
    assert more["postBatchResumeToken"] == more["nextBatch"][-1]["_id"]
    more = db.command("getMore", cur["id"], collection="c", maxTimeMS=1000)["cursor"]
    assert [e["documentKey"]["_id"] for e in more["nextBatch"]] == [2, 3, 4]
    db.command("killCursors", "c", cursors=[cur["id"]])


def test_resume_after_restart(start_nidus):
    s = start_nidus(extra_args=["--replSet", "rs0"])
    c = s.client()
    coll = c.t.c
    with coll.watch() as cs:
        coll.insert_one({"_id": 1})
        token = drain(cs, 1)[0]["_id"]
    coll.insert_one({"_id": 2})
    c.close()
    s.stop()
    s.start()
    c = s.client()
    with c.t.c.watch(resume_after=token) as cs:
        assert [e["documentKey"]["_id"] for e in drain(cs, 1)] == [2]
    c.close()


def test_resumable_get_more_error_is_labelled_and_resumed(rs_client, db):
    c = db.c
    with c.watch() as s:
        c.insert_one({"_id": 1})
        assert drain(s, 1)[0]["documentKey"] == {"_id": 1}
        rs_client.admin.command("configureFailPoint", "failGetMoreAfterCursorCheckout",
                          mode={"times": 1}, data={"errorCode": 262})
        c.insert_one({"_id": 2})
        # pymongo resumes after the labelled error, from the last token: no event lost or
        # repeated.
        got = drain(s, 1)
        assert [e["documentKey"]["_id"] for e in got] == [2]
    reply = db.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
    rs_client.admin.command("configureFailPoint", "failGetMoreAfterCursorCheckout",
                      mode={"times": 1}, data={"errorCode": 262})
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", reply["cursor"]["id"], collection="c")
    assert e.value.code == 262 and e.value.has_error_label("ResumableChangeStreamError")


def test_split_large_event(db):
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    c = db.c
    c.insert_one({"_id": 1, "value": "q" * 10 * 1024 * 1024})
    with c.watch([{"$changeStreamSplitLargeEvent": {}}],
                 full_document_before_change="required") as s:
        c.update_one({"_id": 1}, {"$set": {"value": "z" * 10 * 1024 * 1024}})
        frags = drain(s, 2, timeout=20)
    assert [f["splitEvent"] for f in frags] == [{"fragment": 1, "of": 2}, {"fragment": 2, "of": 2}]
    assert frags[0]["operationType"] == "update"
    assert frags[1]["fullDocumentBeforeChange"]["value"][:1] == "q"
    assert frags[0]["_id"]["_data"] < frags[1]["_id"]["_data"]
    # Resuming from the first fragment delivers the second one again.
    with c.watch([{"$changeStreamSplitLargeEvent": {}}], full_document_before_change="required",
                 resume_after=frags[0]["_id"]) as s:
        again = drain(s, 1, timeout=20)
    assert [f["splitEvent"] for f in again] == [{"fragment": 2, "of": 2}]
    # Without the stage, an event over 16 MiB fails the stream.
    with pytest.raises(OperationFailure) as e:
        with c.watch(full_document_before_change="required", start_after=frags[0]["_id"]) as s:
            drain(s, 1, timeout=20)
    assert e.value.code == 10334
    with pytest.raises(OperationFailure) as e:
        c.watch([{"$changeStreamSplitLargeEvent": {}}, {"$match": {}}])
    assert e.value.code == 7182802


def test_waiting_getmores_are_not_slow_operations(db, rs_member):
    """An idle change stream's and a tailable awaitData cursor's `getMore` wait for data; as
    MongoDB, that wait is not part of the duration logged and profiled, so they are not slow
    operations (slowms is 100)."""
    db.create_collection("capped", capped=True, size=4096)
    db.capped.insert_one({"_id": 0})
    db.command("profile", 1, slowms=100)
    try:
        stream = db.command("aggregate", "idle", pipeline=[{"$changeStream": {}}], cursor={})
        tail = db.command("find", "capped", tailable=True, awaitData=True)
        waits = [("idle", stream["cursor"]["id"]), ("capped", tail["cursor"]["id"])]
        for coll, cursor_id in waits:
            started = time.monotonic()
            reply = db.command("getMore", cursor_id, collection=coll, maxTimeMS=400)
            assert reply["cursor"]["nextBatch"] == []
            assert time.monotonic() - started >= 0.35  # it did wait
        assert list(db["system.profile"].find({"op": "getmore"})) == []
        for coll, cursor_id in waits:
            assert f'"getMore":{cursor_id}' not in rs_member.log_text().replace(" ", "")
    finally:
        db.command("profile", 0)


def test_idle_stream_wakes_for_an_event_during_its_wait(db):
    """After a `getMore` that found nothing, the next one waits on the connection (no
    thread); an event in its scope still ends the wait at once, one elsewhere does not."""
    # One explicit session for the stream's commands: implicit sessions come from a pool the
    # writer thread shares, and a getMore in another session than the cursor's is 50738.
    with db.client.start_session() as sess:
        _idle_stream_wakes(db, sess)


def _idle_stream_wakes(db, sess):
    stream = db.command("aggregate", "woken", pipeline=[{"$changeStream": {}}], cursor={}, session=sess)
    cursor_id = stream["cursor"]["id"]

    def get_more(max_ms):
        return db.command("getMore", cursor_id, collection="woken", maxTimeMS=max_ms,
                          session=sess)["cursor"]["nextBatch"]

    assert get_more(200) == []

    def write_later():
        time.sleep(0.3)
        db.elsewhere.insert_one({"_id": "other scope"})
        time.sleep(0.3)
        db.woken.insert_one({"_id": "mine"})

    writer = threading.Thread(target=write_later)
    started = time.monotonic()
    writer.start()
    try:
        batch = get_more(10000)
    finally:
        writer.join(10)
    waited = time.monotonic() - started
    assert [e["documentKey"] for e in batch] == [{"_id": "mine"}]
    assert 0.5 <= waited < 5, waited
    # A full wait with nothing, then the wait the connection does, then an answer on time.
    for max_ms in (300, 300):
        started = time.monotonic()
        assert get_more(max_ms) == []
        assert 0.25 <= time.monotonic() - started < 3
