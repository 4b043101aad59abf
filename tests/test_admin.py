"""Reply shapes and argument checks administrators and tools see: integer widths of counters,
IDL-style argument parsing, cursor/session rules, roles, and the admin commands.

pymongo decodes a BSON Int64 as `bson.int64.Int64` and an Int32 as a plain `int`, so the
width MongoDB would send is checked with `type(v) is int`.
"""

from __future__ import annotations

import uuid

import pytest
import wire
from bson import Binary, Int64, Timestamp
from pymongo.errors import OperationFailure


def int32(v) -> bool:
    return type(v) is int


def stage_counters(stage: dict):
    """Yields (path, name, value) of every counter in an explain stage tree."""
    for k, v in stage.items():
        if k in ("inputStage",):
            yield from stage_counters(v)
        elif k == "inputStages":
            for s in v:
                yield from stage_counters(s)
        elif isinstance(v, (int, Int64)) and not isinstance(v, bool):
            yield stage.get("stage"), k, v


# ------------------------------------------------------------------ integer widths

def test_explain_counters_are_int32(db):
    db.c.insert_many([{"_id": i, "a": i % 7} for i in range(50)])
    db.c.create_index("a")
    for cmd in (
        {"find": "c", "filter": {"a": {"$gte": 3}}, "sort": {"_id": -1}, "limit": 4},
        {"find": "c", "filter": {"_id": {"$lt": 20}}, "skip": 2},
        {"count": "c", "query": {"a": 2}},
        {"find": "c", "filter": {"$or": [{"a": 1}, {"_id": 3}]}},
    ):
        ex = db.command("explain", cmd, verbosity="allPlansExecution")
        es = ex["executionStats"]
        for k in ("nReturned", "executionTimeMillis", "totalKeysExamined", "totalDocsExamined"):
            assert int32(es[k]), (cmd, k, type(es[k]))
        counters = list(stage_counters(es["executionStages"]))
        assert counters, es
        for stage, k, v in counters:
            assert int32(v), (cmd, stage, k, type(v))
        for plan in es.get("allPlansExecution", []):
            for stage, k, v in stage_counters(plan["executionStages"]):
                assert int32(v), (cmd, "rejected", stage, k, type(v))
        for stage, k, v in stage_counters(ex["queryPlanner"]["winningPlan"]):
            assert int32(v), (cmd, "plan", stage, k, type(v))


def test_count_hello_stats_validate_counters_are_int32(db, client):
    db.c.insert_many([{"_id": i} for i in range(3)])
    assert int32(db.command("count", "c")["n"])
    assert int32(client.admin.command("hello")["connectionId"])
    stats = db.command("dbStats")
    for k in ("collections", "views", "objects", "indexes", "scaleFactor"):
        assert int32(stats[k]), (k, type(stats[k]))
    cs = db.command("collStats", "c")
    for k in ("size", "count", "avgObjSize", "storageSize", "nindexes", "totalIndexSize", "totalSize",
              "scaleFactor"):
        assert int32(cs[k]), (k, type(cs[k]))
    assert all(int32(v) for v in cs["indexSizes"].values()), cs["indexSizes"]
    v = db.command("validate", "c")
    for k in ("nInvalidDocuments", "nNonCompliantDocuments", "nrecords", "nIndexes"):
        assert int32(v[k]), (k, type(v[k]))
    assert v["keysPerIndex"] == {"_id_": 3} and int32(v["keysPerIndex"]["_id_"])


def test_profiler_counters_are_int32(db):
    db.command("profile", 2)
    try:
        db.c.insert_one({"_id": 1})
        list(db.c.find({"_id": {"$gte": 0}}))
    finally:
        db.command("profile", 0)
    entries = list(db.system.profile.find({"op": "query"}))
    assert entries
    for e in entries:
        for k in ("keysExamined", "docsExamined", "nreturned", "responseLength", "millis", "numYield"):
            assert int32(e[k]), (k, type(e[k]), e)
        for stage, k, v in stage_counters(e["execStats"]):
            assert int32(v), (stage, k, type(v))


# ------------------------------------------------------------------ argument parsing

@pytest.mark.parametrize("value,expect", [(2.0, 2), (2.8, 2), (Int64(2), 2)])
def test_numeric_arguments_accept_any_number_type(db, value, expect):
    db.c.insert_many([{"_id": i} for i in range(5)])
    r = db.command("find", "c", batchSize=value)
    assert len(r["cursor"]["firstBatch"]) == expect
    r = db.command("find", "c", limit=value, sort={"_id": 1})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == list(range(expect))
    r = db.command("aggregate", "c", pipeline=[], cursor={"batchSize": value})
    assert len(r["cursor"]["firstBatch"]) == expect
    assert db.command("dbStats", scale=value)["scaleFactor"] == expect


@pytest.mark.parametrize("cmd,field", [
    ({"find": "c", "batchSize": "2"}, "find.batchSize"),
    ({"find": "c", "skip": True}, "find.skip"),
    ({"find": "c", "limit": [1]}, "find.limit"),
    ({"aggregate": "c", "pipeline": [], "cursor": {"batchSize": "x"}}, "aggregate.cursor.batchSize"),
])
def test_numeric_argument_of_wrong_type(db, cmd, field):
    with pytest.raises(OperationFailure) as e:
        db.command(cmd)
    assert e.value.code == 14
    assert f"BSON field '{field}' is the wrong type" in str(e.value)
    assert "expected types '[long, int, decimal, double]'" in str(e.value)


@pytest.mark.parametrize("cmd,field,bound", [
    ({"find": "c", "batchSize": -1}, "batchSize", 0),
    ({"find": "c", "skip": -2.5}, "skip", 0),
    ({"aggregate": "c", "pipeline": [], "cursor": {"batchSize": -1}}, "batchSize", 0),
    ({"dbStats": 1, "scale": 0}, "scale", 1),
])
def test_numeric_argument_out_of_range(db, cmd, field, bound):
    with pytest.raises(OperationFailure) as e:
        db.command(cmd)
    assert e.value.code == 51024, e.value.details
    assert f"BSON field '{field}' value must be >= {bound}" in str(e.value)


@pytest.mark.parametrize("indexes,code,message", [
    ([{"key": {"a": 1}, "name": "a_1"}, {"key": {"a": 1}, "name": "a_1"}], 68,
     "Identical index already exists: a_1"),
    ([{"key": {"b": 1}, "name": "b\x00c"}], 67, "The index name cannot contain null characters"),
    ([{"key": {"$b": 1}, "name": "q"}], 67, "Index key contains an illegal field name"),
    ([{"key": {"a..b": 1}, "name": "q"}], 67, "Index keys cannot contain an empty field."),
])
def test_index_spec_errors(db, indexes, code, message):
    db.c.insert_one({})
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "c", indexes=indexes)
    assert e.value.code == code and message in str(e.value), e.value.details
    assert [ix["name"] for ix in db.c.list_indexes()] == ["_id_"]


# MongoDB's parseMaxTimeMS, in its order: null is "not a number", other non-numbers fail the
# IDL type check, the value read as a (truncated, saturating) long is range-checked, and a
# fractional double in range is refused last.
@pytest.mark.parametrize("value,code,message", [
    (None, 2, "maxTimeMS must be a number"),
    ("string", 14, "BSON field 'aggregate.maxTimeMS' is the wrong type 'string', expected types "
                   "'[long, int, decimal, double]'"),
    (True, 14, "BSON field 'aggregate.maxTimeMS' is the wrong type 'bool', expected types "
               "'[long, int, decimal, double]'"),
    ({"foo": 42}, 14, "BSON field 'aggregate.maxTimeMS' is the wrong type 'object', expected types "
                      "'[long, int, decimal, double]'"),
    (1000.5, 2, "maxTimeMS has non-integral value"),
    (-1123123, 51024, "BSON field 'maxTimeMS' value must be >= 0, actual value '-1123123'"),
    (-1.5, 51024, "BSON field 'maxTimeMS' value must be >= 0, actual value '-1'"),
    (-1.7976931348623157e308, 51024,
     "BSON field 'maxTimeMS' value must be >= 0, actual value '-9223372036854775808'"),
    (2**31, 2, "2147483648 value for maxTimeMS is out of range"),
    (Int64(2**63 - 1), 2, "9223372036854775807 value for maxTimeMS is out of range"),
    (1.7976931348623157e308, 2, "9223372036854775807 value for maxTimeMS is out of range"),
])
def test_max_time_ms_parsing(db, value, code, message):
    with pytest.raises(OperationFailure) as e:
        db.command({"aggregate": "c", "pipeline": [], "cursor": {}, "maxTimeMS": value})
    assert (e.value.code, e.value.details["errmsg"]) == (code, message)


@pytest.mark.parametrize("value", [0, 2**31 - 1, 5.0, Int64(7)])
def test_max_time_ms_accepted(db, value):
    db.c.insert_one({"a": 1})
    reply = db.command({"find": "c", "maxTimeMS": value})
    assert len(reply["cursor"]["firstBatch"]) == 1


# createIndexes names the refused spec: as given for validateIndexSpec's checks, and with the
# `v: 2` normalization added for a partial filter MongoDB refuses afterwards.
@pytest.mark.parametrize("spec,code,message", [
    ({"key": {"email": 1.0}, "name": "email_1", "unique": True,
      "partialFilterExpression": {"email": {"$exists": True, "$ne": None}}}, 67,
     'Error in specification { key: { email: 1.0 }, name: "email_1", unique: true, '
     'partialFilterExpression: { email: { $exists: true, $ne: null } }, v: 2 } :: caused by :: '
     'Expression not supported in partial index: $not\n    email $eq null\n'),
    ({"key": {"v": 1}}, 9,
     "Error in specification { key: { v: 1 } } :: caused by :: "
     "The 'name' field is a required property of an index specification"),
])
def test_index_spec_error_names_the_spec(db, spec, code, message):
    db.c.insert_one({})
    with pytest.raises(OperationFailure) as e:
        db.command("createIndexes", "c", indexes=[spec])
    assert (e.value.code, e.value.details["errmsg"]) == (code, message)


@pytest.mark.parametrize("pipeline,code,message", [
    ([{"$group": {"_id": None, "n": 1}}], 40234, "The field 'n' must be an accumulator object"),
    ([{"$project": {"a.$": 1}}], 31324, "Invalid $project :: caused by :: Cannot use positional projection"),
    ([{"$project": {"a": {"$foo": 1}}}], 31325, "Invalid $project :: caused by :: Unknown expression $foo"),
    ([{"$unset": "$a"}], 16410, "Invalid $unset :: caused by :: FieldPath field names may not start with '$'"),
    ([{"$unset": []}], 31119, "$unset specification must be a string or an array with at least one field"),
    ([{"$unset": [1]}], 31120, "$unset specification must be a string or an array containing only string values"),
])
def test_aggregation_parse_errors(db, pipeline, code, message):
    db.c.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate(pipeline))
    assert e.value.code == code and message in str(e.value), e.value.details


# ------------------------------------------------------------------ cursors and sessions

def test_get_more_checks_the_cursor_session(client, db):
    db.c.insert_many([{"_id": i} for i in range(10)])
    with client.start_session() as s1, client.start_session() as s2:
        cur = db.command("find", "c", batchSize=2, session=s1)["cursor"]
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", cur["id"], collection="c", session=s2)
        assert e.value.code == 50738
        # the cursor is still usable from its own session
        more = db.command("getMore", cur["id"], collection="c", batchSize=2, session=s1)["cursor"]
        assert [d["_id"] for d in more["nextBatch"]] == [2, 3]
        db.command("killCursors", "c", cursors=[cur["id"]], session=s1)


def test_get_more_without_session_on_a_session_cursor(nidus_server, db):
    """Raw OP_MSG (no implicit session): a cursor opened without lsid is not usable with
    one (50736), and one opened with an lsid not without it (50737)."""
    db.c.insert_many([{"_id": i} for i in range(10)])
    lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
    sock = wire.connect(nidus_server.port)
    try:
        r = wire.command(sock, {"find": "c", "batchSize": 2, "$db": db.name})
        r2 = wire.command(sock, {"getMore": r["cursor"]["id"], "collection": "c", "lsid": lsid, "$db": db.name})
        assert r2["code"] == 50736, r2
        r = wire.command(sock, {"find": "c", "batchSize": 2, "lsid": lsid, "$db": db.name})
        r2 = wire.command(sock, {"getMore": r["cursor"]["id"], "collection": "c", "$db": db.name})
        assert r2["code"] == 50737, r2
        assert "without an lsid" in r2["errmsg"]
    finally:
        sock.close()


def test_sasl_over_legacy_op_query(start_nidus):
    """Old drivers authenticate with OP_QUERY saslStart/saslContinue before OP_MSG."""
    srv = start_nidus(extra_args=["--auth"])
    sock = wire.connect(srv.port)
    try:
        wire.command(sock, {"createUser": "u", "pwd": "p", "roles": ["root"], "$db": "admin"})
        sock.sendall(wire.op_query("admin.$cmd", {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                                   "payload": b"n,,n=u,r=abcdefghijklmnop", "autoAuthorize": 1}))
        opcode, _rto, body = wire.read_message(sock)
        reply = wire.parse_reply(opcode, body)
        assert reply.get("ok") == 1.0, reply
        assert reply["done"] is False and reply["conversationId"] == 1, reply
    finally:
        sock.close()


def test_create_role_accepts_every_mongodb_action(db):
    actions = ["impersonate", "useUUID", "anyAction", "listCursors", "dbCheck", "applyOps", "find"]
    db.command("createRole", "r1", privileges=[{"resource": {"db": db.name, "collection": ""},
                                                 "actions": actions}], roles=[])
    info = db.command("rolesInfo", "r1", showPrivileges=True)["roles"][0]
    assert sorted(info["privileges"][0]["actions"]) == sorted(actions)
    with pytest.raises(OperationFailure) as e:
        db.command("createRole", "r2", privileges=[{"resource": {"db": db.name, "collection": ""},
                                                     "actions": ["fly"]}], roles=[])
    assert e.value.code == 9 and "Unrecognized action privilege string: fly" in str(e.value)
    db.command("dropRole", "r1")


# ------------------------------------------------------------------ validation details

def test_validation_error_details_for_any_validator(db):
    db.create_collection("v", validator={"a": {"$gt": 5}, "b": {"$exists": True}})
    with pytest.raises(OperationFailure) as e:
        db.v.insert_one({"_id": 1, "a": 3})
    assert e.value.code == 121
    info = e.value.details["errInfo"]
    assert info["failingDocumentId"] == 1
    details = info["details"]
    assert details["operatorName"] == "$and"
    clauses = {c["details"]["operatorName"]: c["details"] for c in details["clausesNotSatisfied"]}
    assert clauses["$gt"]["reason"] == "comparison failed"
    assert clauses["$gt"]["consideredValue"] == 3
    assert clauses["$exists"]["reason"] == "path does not exist"

    db.create_collection("w", validator={"$or": [{"a": {"$type": "string"}}, {"b": {"$in": [1, 2]}}]})
    with pytest.raises(OperationFailure) as e:
        db.w.insert_one({"_id": 2, "a": 1, "b": 3})
    details = e.value.details["errInfo"]["details"]
    assert details["operatorName"] == "$or"
    reasons = [c["details"]["reason"] for c in details["clausesNotSatisfied"]]
    assert reasons == ["type did not match", "no matching value found in array"]

    db.create_collection("x", validator={"$expr": {"$lt": ["$lo", "$hi"]}})
    with pytest.raises(OperationFailure) as e:
        db.x.insert_one({"_id": 3, "lo": 5, "hi": 1})
    details = e.value.details["errInfo"]["details"]
    assert details["operatorName"] == "$expr"
    assert details["specifiedAs"] == {"$expr": {"$lt": ["$lo", "$hi"]}}
    assert details["reason"] == "expression did not match"


# ------------------------------------------------------------------ admin commands

# Commands that run on the admin database only, each with arguments it would accept there:
# sent to another database, MongoDB refuses them before looking at anything else.
ADMIN_ONLY = [
    {"killOp": 1, "op": 1},
    {"configureFailPoint": "failCommand", "mode": "off"},
    {"renameCollection": "x.a", "to": "x.b"},
    {"replSetResizeOplog": 1, "size": 990},
    {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "x.a"}]},
    {"top": 1},
    {"logRotate": 1},
    {"abortTransaction": 1},
    {"commitTransaction": 1},
    {"replSetGetStatus": 1},
    {"replSetGetConfig": 1},
    {"getClusterParameter": "changeStreamOptions"},
    {"setClusterParameter": {"changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": 10}}}},
    {"getDefaultRWConcern": 1},
    {"setDefaultRWConcern": 1, "defaultReadConcern": {"level": "local"}},
]


@pytest.mark.parametrize("command", ADMIN_ONLY, ids=lambda c: next(iter(c)))
def test_admin_only_commands_elsewhere(db, command):
    name = next(iter(command))
    with pytest.raises(OperationFailure) as e:
        db.command(command)
    assert (e.value.code, e.value.details.get("codeName"), e.value.details.get("errmsg")) == (
        13, "Unauthorized", f"{name} may only be run against the admin database.")


def test_coll_stats_stage_and_index_stats(db, client):
    db.c.insert_many([{"_id": i, "a": i} for i in range(20)])
    db.c.create_index("a")
    list(db.c.find({"a": {"$gt": 15}}))
    list(db.c.find({"a": 3}))
    out = list(db.c.aggregate([{"$collStats": {"storageStats": {}, "count": {}, "latencyStats": {}}}]))
    assert len(out) == 1
    st = out[0]
    assert st["ns"] == f"{db.name}.c"
    assert st["count"] == 20
    assert st["storageStats"]["count"] == 20 and st["storageStats"]["nindexes"] == 2
    assert set(st["storageStats"]["indexSizes"]) == {"_id_", "a_1"}
    lat = st["latencyStats"]
    assert lat["reads"]["ops"] >= 2 and lat["writes"]["ops"] >= 1, lat
    idx = {d["name"]: d for d in db.c.aggregate([{"$indexStats": {}}])}
    assert set(idx) == {"_id_", "a_1"}
    assert idx["a_1"]["accesses"]["ops"] == 2 and idx["a_1"]["key"] == {"a": 1}
    assert idx["_id_"]["accesses"]["ops"] == 0
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$collStats": {"bogus": {}}}]))
    assert e.value.code == 40415


def test_top_dbhash_datasize_compact_connpoolstats(db, client):
    db.c.insert_many([{"_id": i, "a": i} for i in range(10)])
    db.c.find_one({"_id": 1})
    top = client.admin.command("top")["totals"][f"{db.name}.c"]
    assert top["insert"]["count"] >= 1 and top["queries"]["count"] >= 1
    assert top["total"]["count"] >= top["insert"]["count"] + top["queries"]["count"]
    with pytest.raises(OperationFailure):
        db.command("top")

    h1 = db.command("dbHash")
    other = client[db.name + "_copy"]
    client.drop_database(other.name)
    other.c.insert_many(list(db.c.find()))
    h2 = other.command("dbHash")
    assert h1["collections"]["c"] == h2["collections"]["c"] and h1["md5"] == h2["md5"]
    other.c.update_one({"_id": 3}, {"$set": {"a": 30}})
    assert other.command("dbHash")["collections"]["c"] != h1["collections"]["c"]
    client.drop_database(other.name)

    ds = db.command("dataSize", f"{db.name}.c")
    assert ds["numObjects"] == 10 and ds["size"] > 0
    ranged = db.command("dataSize", f"{db.name}.c", keyPattern={"_id": 1}, min={"_id": 2}, max={"_id": 5})
    assert ranged["numObjects"] == 3
    assert db.command("compact", "c")["bytesFreed"] == 0
    with pytest.raises(OperationFailure) as e:
        db.command("compact", "nope")
    assert e.value.code == 26
    pools = client.admin.command("connPoolStats")
    assert pools["totalInUse"] == 0 and pools["pools"] == {}


def test_hide_and_unhide_index(db):
    db.c.insert_many([{"_id": i, "a": i} for i in range(10)])
    db.c.create_index("a")

    def plan():
        return db.c.find({"a": 3}).explain()["queryPlanner"]["winningPlan"]

    assert "IXSCAN" in str(plan())
    r = db.command("collMod", "c", index={"name": "a_1", "hidden": True})
    assert r["hidden_old"] is False and r["hidden_new"] is True
    assert "COLLSCAN" in str(plan())
    assert [ix.get("hidden") for ix in db.c.list_indexes() if ix["name"] == "a_1"] == [True]
    r = db.command("collMod", "c", index={"keyPattern": {"a": 1}, "hidden": False})
    assert r["hidden_old"] is True and r["hidden_new"] is False
    assert "IXSCAN" in str(plan())
    with pytest.raises(OperationFailure) as e:
        db.command("collMod", "c", index={"name": "nope", "hidden": True})
    assert e.value.code == 27


def test_get_parameter_details_and_log_components(client):
    r = client.admin.command("getParameter", {"showDetails": True}, cursorTimeoutMillis=1)
    assert r["cursorTimeoutMillis"]["settableAtRuntime"] is True
    assert "value" in r["cursorTimeoutMillis"]
    allp = client.admin.command("getParameter", {"allParameters": True})
    assert "logComponentVerbosity" in allp and "cursorTimeoutMillis" in allp
    try:
        was = client.admin.command("setParameter", 1, logComponentVerbosity={"storage": {"verbosity": 2}})["was"]
        assert was["storage"]["verbosity"] == -1
        comps = client.admin.command("getParameter", 1, logComponentVerbosity=1)["logComponentVerbosity"]
        assert comps["storage"]["verbosity"] == 2 and comps["verbosity"] == 0
        with pytest.raises(OperationFailure):
            client.admin.command("setParameter", 1, logComponentVerbosity={"nope": {"verbosity": 1}})
    finally:
        client.admin.command("setParameter", 1, logComponentVerbosity={"storage": {"verbosity": -1}})


def memory_limit():
    """The machine's memory, or the cgroup's limit if lower (what mongod sizes its cache by)."""
    with open("/proc/meminfo") as f:
        total = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                return min(total, int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return total


def test_server_status_sections_and_list_databases(client, db):
    db.c.insert_one({})
    st = client.admin.command("serverStatus")
    cat = st["catalogStats"]
    assert cat["collections"] >= 1 and "views" in cat and "internalCollections" in cat
    # WiredTiger's default: the larger of 50% of (memory - 1 GiB) and 256 MiB.
    assert "nidus" in st and st["nidus"]["cache"]["maximum bytes configured"] == max(
        256 << 20, (memory_limit() - (1 << 30)) // 2)
    names = client.list_database_names()
    assert {"admin", "config", "local", db.name} <= set(names)
    assert names == sorted(names)


def test_get_log(client):
    r = client.admin.command("getLog", "global")
    assert r["totalLinesWritten"] >= len(r["log"]) > 0
    assert any("Waiting for connections" in line for line in r["log"])
    assert "log" in client.admin.command("getLog", "startupWarnings")
    assert set(client.admin.command("getLog", "*")["names"]) >= {"global", "startupWarnings"}


def test_mongod_flags(nidus_binary, start_nidus, tmp_path):
    import subprocess

    v = subprocess.run([str(nidus_binary), "--version"], capture_output=True, text=True, timeout=30)
    assert v.returncode == 0 and v.stdout.startswith("nidus version v"), v.stdout
    log = tmp_path / "n.log"
    srv = start_nidus(extra_args=["--logpath", str(log), "--cacheSizeGB", "0.5", "--slowms", "7"])
    c = srv.client()
    try:
        opts = c.admin.command("getCmdLineOpts")
        parsed = opts["parsed"]
        assert parsed["systemLog"] == {"destination": "file", "path": str(log)}
        assert parsed["storage"]["nidus"]["engineConfig"]["cacheSizeGB"] == 0.5
        assert parsed["operationProfiling"]["slowOpThresholdMs"] == 7
        assert parsed["net"]["port"] == srv.port
        assert "--logpath" in opts["argv"]
        st = c.admin.command("serverStatus")
        assert st["nidus"]["cache"]["maximum bytes configured"] == 1 << 29
        assert "Waiting for connections" in log.read_text()
        c.admin.command("logRotate")
        rotated = [p for p in tmp_path.iterdir() if p.name.startswith("n.log.")]
        assert len(rotated) == 1 and "Waiting for connections" in rotated[0].read_text()
        c.admin.command("ping")
        assert log.exists()
    finally:
        c.close()


def test_fork(nidus_binary, tmp_path):
    import signal
    import subprocess
    import time

    from nidus_harness import free_port

    port = free_port()
    log = tmp_path / "fork.log"
    r = subprocess.run([str(nidus_binary), "--fork", "--logpath", str(log), "--port", str(port),
                        "--dbpath", str(tmp_path / "db")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child process started successfully, parent exiting" in r.stdout
    pid = int(r.stdout.split("forked process: ")[1].split()[0])
    try:
        from pymongo import MongoClient

        c = MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=10000)
        assert c.admin.command("ping")["ok"] == 1
        c.close()
    finally:
        os_kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os_kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
    bad = subprocess.run([str(nidus_binary), "--fork", "--port", str(port)], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode != 0 and "--logpath" in bad.stderr


def os_kill(pid, sig):
    import os

    os.kill(pid, sig)


# validate's option combinations (MongoDB's parseValidateOptions), on a standalone and on a
# replica set member: (options, standalone error, replica set error); None = accepted.
def _refused(code, name, *options):
    return (code, name, "Running the validate command with " + "".join(options))


def _both(a, b):
    return _refused(72, "InvalidOptions", f"both {{ {a}: true }} and {{ {b}: true }} is not supported.")


STANDALONE_BACKGROUND = _refused(115, "CommandNotSupported",
                                 "{ background: true } is not supported in standalone mode")
VALIDATE_OPTIONS = [
    ({}, None, None),
    ({"full": True}, None, None),
    ({"background": True}, STANDALONE_BACKGROUND, None),
    ({"background": True, "full": True}, _both("background", "full"), _both("background", "full")),
    ({"background": 1, "enforceFastCount": True}, _both("background", "enforceFastCount"),
     _both("background", "enforceFastCount")),
    ({"enforceFastCount": True, "repair": True}, _both("enforceFastCount", "repair"),
     _both("enforceFastCount", "repair")),
    ({"checkBSONConformance": True, "repair": True}, _both("checkBSONConformance", "repair"),
     _both("checkBSONConformance", "repair")),
    ({"metadata": True, "full": True},
     _refused(72, "InvalidOptions", "{ metadata: true } is not supported with any other options"),
     _refused(72, "InvalidOptions", "{ metadata: true } is not supported with any other options")),
    ({"repair": True}, None,
     _refused(72, "InvalidOptions", "{ repair: true } can only be performed in standalone mode.")),
    ({"background": True, "atClusterTime": Timestamp(1, 1)}, STANDALONE_BACKGROUND,
     _refused(72, "InvalidOptions", "{ background: true } cannot be done with {atClusterTime: ...} "
              "because background already sets a read timestamp.")),
]


@pytest.mark.parametrize("options,standalone,replica_set", VALIDATE_OPTIONS)
def test_validate_option_combinations(client, rs_client, options, standalone, replica_set):
    name = "t_validate_options"
    for c, expected in ((client, standalone), (rs_client, replica_set)):
        c.drop_database(name)
        c[name].c.insert_one({"_id": 1})
        if expected is None:
            assert c[name].command("validate", "c", **options)["valid"] is True
            continue
        with pytest.raises(OperationFailure) as e:
            c[name].command("validate", "c", **options)
        assert (e.value.code, e.value.details["codeName"], e.value.details["errmsg"]) == expected
        # Checked before the collection is looked up.
        with pytest.raises(OperationFailure) as e:
            c[name].command("validate", "missing", **options)
        assert e.value.code == expected[0]
