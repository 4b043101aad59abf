"""The Stable API (apiVersion / apiStrict / apiDeprecationErrors), as MongoDB answers it.

Expected replies come from MongoDB's jstests/core/api/api_version_parameters.js,
api_version_pipeline_stages.js and api_params_getmore.js, the server's
initialize_api_parameters.cpp and getmore_cmd.cpp messages, and the drivers' versioned-api
spec tests; results computed ahead of a reply (bulkWrite, listCollections, listIndexes) go
through a cursor whose first batch is bounded as a query's is.
"""

from __future__ import annotations

import uuid

import pytest
from bson import Int64
from bson.binary import UUID_SUBTYPE, Binary
from pymongo.errors import OperationFailure
from pymongo.server_api import ServerApi

import wire

# (command, expected error code or None). The command runs on the test's database.
PARAMETER_CASES = [
    ({"ping": 1, "apiStrict": True}, 4886600),
    ({"ping": 1, "apiDeprecationErrors": False}, 4886600),
    ({"ping": 1, "apiVersion": 1}, 14),
    ({"ping": 1, "apiVersion": "2"}, 322),
    ({"ping": 1, "apiVersion": "server_will_never_support_this_api_version"}, 322),
    ({"ping": 1, "apiVersion": "1", "apiStrict": "true"}, 14),
    ({"ping": 1, "apiVersion": "1", "apiDeprecationErrors": "false"}, 14),
    ({"ping": 1, "apiVersion": "1", "apiStrict": True, "apiDeprecationErrors": True}, None),
    ({"ping": 1, "apiVersion": "1", "apiStrict": False, "apiDeprecationErrors": False}, None),
    ({"listCommands": 1, "apiVersion": "1"}, None),
    ({"listCommands": 1, "apiVersion": "1", "apiStrict": True}, 323),
    ({"isMaster": 1, "apiVersion": "1", "apiStrict": True}, 323),
    ({"hello": 1, "apiVersion": "1", "apiStrict": True}, None),
    ({"buildInfo": 1, "apiVersion": "1", "apiStrict": True}, 323),
    ({"distinct": "c", "key": "a", "apiVersion": "1", "apiStrict": True}, 323),
    ({"count": "c", "apiVersion": "1", "apiStrict": True}, None),
    ({"listCommands": 1, "apiVersion": "1", "apiDeprecationErrors": True}, None),
    ({"testDeprecation": 1, "apiVersion": "1"}, None),
    ({"testDeprecation": 1, "apiVersion": "1", "apiStrict": True}, None),
    ({"testDeprecation": 1, "apiVersion": "1", "apiDeprecationErrors": True}, 324),
    ({"testVersion2": 1, "apiVersion": "1", "apiStrict": True}, 323),
    ({"insert": "system.js", "documents": [{"_id": "f"}], "apiVersion": "1", "apiStrict": True}, 323),
    ({"delete": "system.js", "deletes": [{"q": {}, "limit": 1}], "apiVersion": "1", "apiStrict": True}, 323),
    ({"find": "system.js", "filter": {}, "apiVersion": "1", "apiStrict": True}, None),
    ({"aggregate": "c", "pipeline": [{"$currentOp": {}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$indexStats": {}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$planCacheStats": {}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$unionWith": {"coll": "d", "pipeline": [{"$collStats": {"latencyStats": {}}}]}}],
      "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$lookup": {"from": "d", "pipeline": [{"$indexStats": {}}], "as": "x"}}],
      "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$facet": {"a": [], "b": [{"$indexStats": {}}]}}],
      "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$collStats": {"storageStats": {}}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$collStats": {"count": {}}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, None),
    ({"aggregate": "c", "pipeline": [{"$indexStats": {}}], "cursor": {}, "apiVersion": "1"}, None),
    ({"create": "v", "viewOn": "c", "pipeline": [{"$currentOp": {}}], "apiVersion": "1", "apiStrict": True}, 323),
    ({"aggregate": "c", "pipeline": [{"$match": {}}], "cursor": {}, "apiVersion": "1", "apiStrict": True}, None),
    # Fields MongoDB's IDL marks unstable (api_version_unstable_fields.js).
    *[({"find": "c", field: value, "apiVersion": "1", "apiStrict": True}, 323) for field, value in [
        ("min", {"a": 1}), ("max", {"a": 1}), ("returnKey", False), ("noCursorTimeout", False),
        ("showRecordId", False), ("tailable", False), ("oplogReplay", False), ("awaitData", False),
        ("readOnce", False)]],
    ({"find": "c", "returnKey": False, "apiVersion": "1"}, None),
    *[({"aggregate": "c", "pipeline": [], "cursor": {}, field: value, "apiVersion": "1", "apiStrict": True}, 323)
      for field, value in [("isMapReduceCommand", False), ("explain", True)]],
]

MESSAGES = {
    4886600: "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion",
    322: None,
    14: "is the wrong type",
}


@pytest.mark.parametrize("command,code", PARAMETER_CASES, ids=[str(i) for i in range(len(PARAMETER_CASES))])
def test_api_parameters_are_refused_as_mongodb_refuses_them(db, command, code):
    db.c.insert_one({"a": 1})
    if code is None:
        db.command(command)
        return
    with pytest.raises(OperationFailure) as e:
        db.command(command)
    assert e.value.code == code, e.value.details
    if MESSAGES.get(code):
        assert MESSAGES[code] in e.value.details["errmsg"]


def test_unstable_field_error_names_the_field(db):
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "showRecordId": True, "apiVersion": "1", "apiStrict": True})
    assert e.value.details["errmsg"] == "BSON field 'find.showRecordId' is not allowed with apiStrict:true."


def test_strict_error_names_the_command_and_the_documentation(db):
    with pytest.raises(OperationFailure) as e:
        db.command({"buildInfo": 1, "apiVersion": "1", "apiStrict": True})
    assert e.value.details["codeName"] == "APIStrictError"
    assert e.value.details["errmsg"].startswith(
        "Provided apiStrict:true, but the command buildInfo is not in API Version 1.")
    assert "dochub.mongodb.org" in e.value.details["errmsg"]


def test_a_strict_client_works_and_is_refused_outside_version_1(nidus_server):
    strict = nidus_server.client(server_api=ServerApi("1", strict=True, deprecation_errors=True))
    try:
        coll = strict.stable_api_db.c
        coll.drop()
        coll.insert_many([{"_id": i, "a": i % 3} for i in range(10)])
        coll.create_index("a")
        assert coll.count_documents({"a": 1}) == 3
        # A cursor over several batches: pymongo sends the parameters with each getMore.
        assert [d["_id"] for d in coll.find().sort("_id", 1).batch_size(3)] == list(range(10))
        assert len(list(coll.aggregate([{"$match": {}}], batchSize=2))) == 10
        with pytest.raises(OperationFailure) as e:
            coll.distinct("a")
        assert e.value.code == 323
        with pytest.raises(OperationFailure) as e:
            strict.admin.command("serverStatus")
        assert e.value.code == 323
    finally:
        strict.stable_api_db.c.drop()
        strict.close()


GETMORE_COMBOS = [
    {},
    {"apiVersion": "1"},
    {"apiVersion": "1", "apiDeprecationErrors": True},
    {"apiVersion": "1", "apiStrict": True},
    {"apiVersion": "1", "apiStrict": False},
]


@pytest.mark.parametrize("opened", range(len(GETMORE_COMBOS)))
@pytest.mark.parametrize("continued", range(len(GETMORE_COMBOS)))
def test_get_more_must_repeat_the_cursors_api_parameters(db, opened, continued):
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    reply = db.command({"find": "c", "batchSize": 1, **GETMORE_COMBOS[opened]})
    get_more = {"getMore": Int64(reply["cursor"]["id"]), "collection": "c", **GETMORE_COMBOS[continued]}
    if opened == continued:
        assert db.command(get_more)["cursor"]["nextBatch"] == [{"_id": 2}]
        return
    with pytest.raises(OperationFailure) as e:
        db.command(get_more)
    assert e.value.code == 325
    assert e.value.details["errmsg"].startswith("API parameter mismatch: getMore used params ")
    assert "the cursor-creating command used" in e.value.details["errmsg"]


def test_mismatch_message_prints_both_sets(db):
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    reply = db.command({"find": "c", "batchSize": 1, "apiVersion": "1", "apiStrict": True})
    with pytest.raises(OperationFailure) as e:
        db.command({"getMore": Int64(reply["cursor"]["id"]), "collection": "c"})
    assert e.value.details["errmsg"] == (
        'API parameter mismatch: getMore used params {}, the cursor-creating command used '
        '{ apiVersion: "1", apiStrict: true }')


def test_transaction_statements_must_repeat_the_first_ones_parameters(rs_member, rs_client):
    db = rs_client.stable_api_txn
    db.c.drop()
    db.create_collection("c")
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    sock = wire.connect(rs_member.port)

    def run(body, database="stable_api_txn"):
        return wire.command(sock, {**body, "lsid": lsid, "txnNumber": Int64(1), "autocommit": False,
                                   "$db": database})

    try:
        assert run({"insert": "c", "documents": [{"_id": 1}], "startTransaction": True,
                    "apiVersion": "1"})["ok"] == 1
        assert run({"insert": "c", "documents": [{"_id": 2}], "apiVersion": "1"})["ok"] == 1
        refused = run({"insert": "c", "documents": [{"_id": 3}]})
        assert (refused["ok"], refused["code"]) == (0, 325), refused
        assert refused["errmsg"] == (
            'API parameter mismatch: insert used params {}, the transaction\'s first command '
            'used { apiVersion: "1" }')
        assert run({"commitTransaction": 1, "apiVersion": "1"}, "admin")["ok"] == 1
    finally:
        sock.close()
    assert sorted(d["_id"] for d in db.c.find()) == [1, 2]


def test_list_commands_reports_api_versions(db):
    commands = db.command("listCommands")["commands"]
    assert commands["find"]["apiVersions"] == ["1"]
    assert commands["find"]["deprecatedApiVersions"] == []
    assert commands["serverStatus"]["apiVersions"] == []
    assert commands["testDeprecation"]["apiVersions"] == ["1"]
    assert commands["testDeprecation"]["deprecatedApiVersions"] == ["1"]


READ_CONCERN_CASES = [
    ({"level": "unknown"}, 2, "Enumeration value 'unknown' for field 'readConcern.level' is not a valid value."),
    ({"level": 1}, 14, "BSON field 'readConcern.level' is the wrong type 'int', expected type 'string'"),
]


@pytest.mark.parametrize("rc,code,msg", READ_CONCERN_CASES)
def test_read_concern_level_is_refused_when_unknown(db, rc, code, msg):
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "readConcern": rc})
    assert (e.value.code, e.value.details["errmsg"]) == (code, msg)


def test_read_concern_must_be_a_document(db):
    with pytest.raises(OperationFailure) as e:
        db.command({"find": "c", "readConcern": "majority"})
    assert e.value.code == 14


def test_bulk_write_results_beyond_a_batch_come_by_get_more(client, db):
    # Two results holding 8 MiB _ids each: the first batch holds one, getMore the other.
    big_a, big_b = "a" * (8 * 1024 * 1024), "b" * (8 * 1024 * 1024)
    ns = f"{db.name}.c"
    reply = client.admin.command({
        "bulkWrite": 1,
        "ops": [{"update": 0, "filter": {"_id": big_a}, "updateMods": {"$set": {"x": 1}}, "upsert": True},
                {"update": 0, "filter": {"_id": big_b}, "updateMods": {"$set": {"x": 1}}, "upsert": True}],
        "nsInfo": [{"ns": ns}],
    })
    assert reply["nUpserted"] == 2
    cursor = reply["cursor"]
    assert cursor["ns"] == "admin.$cmd.bulkWrite"
    assert len(cursor["firstBatch"]) == 1 and cursor["id"] != 0
    more = client.admin.command({"getMore": Int64(cursor["id"]), "collection": "$cmd.bulkWrite"})
    assert [r["idx"] for r in more["cursor"]["nextBatch"]] == [1]
    assert more["cursor"]["id"] == 0
    assert db.c.count_documents({}) == 2


@pytest.mark.parametrize("command,field", [
    ({"listCollections": 1}, "name"),
    ({"listIndexes": "c0"}, "name"),
])
def test_catalog_listings_honour_the_cursor_batch_size(db, command, field):
    for i in range(5):
        db[f"c{i}"].insert_one({"_id": 1})
        db.c0.create_index(f"k{i}")
    first = db.command({**command, "cursor": {"batchSize": 2}})
    assert len(first["cursor"]["firstBatch"]) == 2 and first["cursor"]["id"] != 0
    names = [d[field] for d in first["cursor"]["firstBatch"]]
    coll = first["cursor"]["ns"].split(".", 1)[1]
    more = db.command({"getMore": Int64(first["cursor"]["id"]), "collection": coll})
    names += [d[field] for d in more["cursor"]["nextBatch"]]
    everything = [d[field] for d in db.command(command)["cursor"]["firstBatch"]]
    assert sorted(names) == sorted(everything) and len(everything) == 6 - (command.get("listIndexes") is None)
    with pytest.raises(OperationFailure) as e:
        db.command({**command, "cursor": {"batchSize": -1}})
    assert e.value.code == 51024


def test_a_retried_bulk_write_returns_the_first_attempts_results(rs_member, rs_client):
    """A retryable bulkWrite's stored reply holds its per-operation results: the retry (same
    session and txnNumber) answers them without running the operations again."""
    rs_client.stable_api_retry.c.drop()
    lsid = {"id": Binary(uuid.uuid4().bytes, UUID_SUBTYPE)}
    body = {
        "bulkWrite": 1, "errorsOnly": False, "ordered": True,
        "ops": [{"insert": 0, "document": {"_id": 1}},
                {"update": 0, "filter": {"_id": 1}, "updateMods": {"$inc": {"n": 1}}}],
        "nsInfo": [{"ns": "stable_api_retry.c"}],
        "lsid": lsid, "txnNumber": Int64(7), "$db": "admin",
    }
    sock = wire.connect(rs_member.port)
    try:
        first = wire.command(sock, body)
        again = wire.command(sock, body)
    finally:
        sock.close()
    assert first["ok"] == 1 and len(first["cursor"]["firstBatch"]) == 2, first
    assert again["cursor"]["firstBatch"] == first["cursor"]["firstBatch"]
    assert rs_client.stable_api_retry.c.find_one({"_id": 1}) == {"_id": 1, "n": 1}


@pytest.mark.parametrize("alias,canonical,command", [
    ("collstats", "collStats", {}),
    ("dbstats", "dbStats", {}),
    ("buildinfo", "buildInfo", {}),
    ("ismaster", "isMaster", {}),
    ("findandmodify", "findAndModify", {"query": {"_id": 1}, "update": {"$set": {"a": 1}}}),
    ("deleteIndexes", "dropIndexes", {"index": "*"}),
])
def test_an_alias_is_the_command_it_names(db, alias, canonical, command):
    """A lowercase alias answers as its command does, under the Stable API too."""
    db.c.insert_one({"_id": 1})

    def outcome(name):
        target = "c" if name.lower() not in ("buildinfo", "ismaster", "dbstats") else 1
        try:
            db.command({name: target, **command, "apiVersion": "1", "apiStrict": True})
            return "ok"
        except OperationFailure as e:
            return e.code

    assert outcome(alias) == outcome(canonical)


def test_strict_planning_leaves_out_text_and_sparse_indexes(db):
    """MongoDB's jstests/core/api/api_version_unstable_indexes.js: text and sparse indexes
    are outside Stable API Version 1, so under `apiStrict` the planner neither uses nor lets
    a hint name them; without it they are used as usual."""
    db.articles.insert_many([
        {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
        {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
        {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
        {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
    ])
    db.articles.create_index([("subject", "text")])
    db.articles.create_index("views", sparse=True)
    strict = {"apiVersion": "1", "apiStrict": True}
    text = {"find": "articles", "filter": {"$text": {"$search": "coffee"}}}
    plan = db.command("explain", text)["queryPlanner"]["winningPlan"]
    assert "subject_text" in str(plan)
    with pytest.raises(OperationFailure) as e:
        db.command({"explain": text, **strict})
    assert e.value.code == 291
    with pytest.raises(OperationFailure) as e:
        db.command({**text, **strict})
    assert e.value.code == 291
    hinted = {"find": "articles", "filter": {"views": 50}, "hint": {"views": 1}}
    with pytest.raises(OperationFailure) as e:
        db.command({**hinted, **strict})
    assert e.value.code == 2
    assert [d["_id"] for d in db.command(hinted)["cursor"]["firstBatch"]] == [1]
    assert "views_1" in str(db.command("explain", hinted)["queryPlanner"]["winningPlan"])
    # Without a hint the strict query is answered without the sparse index.
    reply = db.command({"find": "articles", "filter": {"views": {"$gte": 90}}, **strict})
    assert sorted(d["_id"] for d in reply["cursor"]["firstBatch"]) == [3, 4]
    plan = db.command({"explain": {"find": "articles", "filter": {"views": {"$gte": 90}}},
                       **strict})["queryPlanner"]["winningPlan"]
    assert "views_1" not in str(plan)
