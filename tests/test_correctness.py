"""Wrong results and lost data (issue 18): each case failed before its fix.

Scans of unique indexes in both directions under every bound kind, partial indexes (keys,
hints, planner use, updates across the filter), concurrent renames onto one name, repeated
field names, comparison/`$mod` argument errors, an upsert changing `_id`, Decimal128
`$inc`/`$mul`.
"""

from __future__ import annotations

import datetime
import operator
import struct
import threading
import time
from decimal import Decimal

import bson
import pytest
from bson import json_util
from bson.decimal128 import Decimal128
from bson.raw_bson import RawBSONDocument
from bson.son import SON
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

# --- backward scans of unique indexes ---------------------------------------------------------

# (index key, index options); `_id` is the collection's own unique index.
UNIQUE_INDEXES = [
    ("_id", None),
    ("k", {"unique": True}),
    ("kd", {"unique": True, "desc": True}),
    ("k", {"unique": False}),
]

# (operator, bound): every bound kind, open and closed on both sides.
BOUNDS = [
    {"$lt": 40},
    {"$lte": 40},
    {"$gt": 10},
    {"$gte": 10},
    {"$gt": 10, "$lt": 40},
    {"$gte": 10, "$lte": 40},
    {"$gt": 10.5, "$lt": 39.5},
    {"$lt": 0},
    {"$gt": 49},
    {"$lte": 0},
    {"$gte": 49},
]


def predicate(bound: dict, v: int) -> bool:
    ops = {"$lt": operator.lt, "$lte": operator.le, "$gt": operator.gt, "$gte": operator.ge}
    return all(ops[op](v, x) for op, x in bound.items())


@pytest.fixture
def fifty(db):
    docs = [{"_id": i, "k": i, "kd": i} for i in range(50)]
    db.c.insert_many(docs)
    return db.c


@pytest.mark.parametrize("field,opts", UNIQUE_INDEXES)
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("direction", [1, -1])
def test_unique_index_scan_with_every_bound_in_both_directions(fifty, field, opts, bound, direction):
    if opts is not None:
        fifty.create_index([(field, -1 if opts.get("desc") else 1)], unique=opts["unique"],
                           name="ix")
    hint = "_id_" if opts is None else "ix"
    want = sorted((i for i in range(50) if predicate(bound, i)), reverse=direction == -1)
    filt = {field: bound}
    got = [d["_id"] for d in fifty.find(filt).sort(field, direction).hint(hint)]
    assert got == want
    got = [d["_id"] for d in fifty.find(filt).sort(field, direction).limit(3)]
    assert got == want[:3]
    got = [d["_id"] for d in fifty.aggregate([{"$match": filt}, {"$sort": {field: direction}},
                                               {"$limit": 3}])]
    assert got == want[:3]


def test_older_page_query_on_id(fifty):
    assert [d["_id"] for d in fifty.find({"_id": {"$lt": 40}}).sort("_id", -1).limit(3)] == [
        39, 38, 37]
    doc = fifty.find_one_and_update({"_id": {"$lt": 40}}, {"$set": {"seen": True}},
                                    sort=[("_id", -1)], return_document=ReturnDocument.AFTER)
    assert doc == {"_id": 39, "k": 39, "kd": 39, "seen": True}
    assert fifty.count_documents({"seen": True}) == 1


# --- partial indexes --------------------------------------------------------------------------


def test_unique_partial_index_accepts_many_documents_without_the_field(db):
    db.u.create_index("email", unique=True,
                      partialFilterExpression={"email": {"$exists": True}})
    db.u.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3, "email": "a@x"}])
    with pytest.raises(DuplicateKeyError):
        db.u.insert_one({"_id": 4, "email": "a@x"})
    # An update moving a document into the filter meets the unique constraint; out of it,
    # frees its key.
    with pytest.raises(DuplicateKeyError):
        db.u.update_one({"_id": 1}, {"$set": {"email": "a@x"}})
    db.u.update_one({"_id": 3}, {"$unset": {"email": 1}})
    db.u.update_one({"_id": 1}, {"$set": {"email": "a@x"}})
    assert db.command("validate", "u")["valid"]
    assert [d["_id"] for d in db.u.find({"email": "a@x"})] == [1]


SEED_003_DEMO = [
    {"_id": 1, "name": "Alice", "age": 30},
    {"_id": 2, "name": "Bob"},
    {"_id": 3, "name": "Charlie", "age": None},
    {"_id": 4, "name": "Dave", "age": 35, "status": "active"},
    {"_id": 5, "name": "Eve", "age": 28, "status": "inactive"},
]


def test_seed_003_hint_of_a_partial_index_returns_only_its_documents(db):
    db.demo.insert_many(SEED_003_DEMO)
    db.demo.create_index("age", sparse=True, name="age_sparse")
    db.demo.create_index("age", partialFilterExpression={"status": "active"},
                         name="age_active_partial")
    assert [d["_id"] for d in db.demo.find().sort("age", 1)] == [2, 3, 5, 1, 4]
    assert [d["_id"] for d in db.demo.find().hint("age_sparse").sort("age", 1)] == [3, 5, 1, 4]
    assert list(db.demo.find().hint("age_active_partial").sort("age", 1)) == [SEED_003_DEMO[3]]
    assert db.demo.count_documents({}, hint="age_active_partial") == 1


def winning_index(explain: dict) -> str | None:
    """The index the winning plan scans (the first one met, depth first)."""
    nodes = [explain["queryPlanner"]["winningPlan"]]
    while nodes:
        node = nodes.pop(0)
        if "indexName" in node:
            return node["indexName"]
        nodes[:0] = ([node["inputStage"]] if "inputStage" in node else []) + node.get(
            "inputStages", [])
    return None


# (query, whether it implies {status: "active", age: {$gte: 18}})
PARTIAL_USE = [
    ({"status": "active", "age": {"$gte": 18}}, True),
    ({"status": "active", "age": {"$gt": 20}}, True),
    ({"status": "active", "age": 30}, True),
    ({"status": "active", "age": {"$in": [20, 30]}}, True),
    ({"status": "active", "age": {"$gte": 10}}, False),
    ({"status": "inactive", "age": 30}, False),
    ({"age": 30}, False),
    ({"status": "active"}, False),
    ({"$or": [{"status": "active", "age": 30}, {"status": "active", "age": 40}]}, True),
]


@pytest.mark.parametrize("query,implied", PARTIAL_USE)
def test_planner_uses_a_partial_index_when_the_query_implies_its_filter(db, query, implied):
    docs = [{"_id": i, "age": i % 50, "status": ["active", "inactive"][i % 3 == 0]}
            for i in range(300)]
    db.p.insert_many(docs)
    db.p.create_index("age", name="age_partial",
                      partialFilterExpression={"status": "active", "age": {"$gte": 18}})
    explain = db.command("explain", {"find": "p", "filter": query})
    assert (winning_index(explain) == "age_partial") == implied
    want = sorted(d["_id"] for d in db.p.find(query, hint={"$natural": 1}))
    assert sorted(d["_id"] for d in db.p.find(query)) == want
    # Twice: a cached plan of the same shape must not carry the index to a query that does
    # not imply its filter.
    assert sorted(d["_id"] for d in db.p.find(query)) == want


def test_partial_index_keys_follow_updates_across_the_filter(db):
    db.m.create_index("x", partialFilterExpression={"x": {"$gt": 5}}, name="x_gt5")
    db.m.insert_many([{"_id": i, "x": i} for i in range(10)])
    db.m.update_many({"x": {"$lt": 3}}, {"$inc": {"x": 10}})  # moved in
    db.m.update_many({"x": {"$in": [8, 9]}}, {"$set": {"x": 0}})  # moved out
    assert db.command("validate", "m")["valid"]
    hinted = sorted(d["x"] for d in db.m.find({}, hint="x_gt5"))
    assert hinted == sorted(d["x"] for d in db.m.find() if d["x"] > 5)
    stats = db.command("validate", "m")
    assert stats["keysPerIndex"]["x_gt5"] == len(hinted)


@pytest.mark.parametrize("options,code", [
    ({"partialFilterExpression": {"a": {"$exists": False}}}, 67),
    ({"partialFilterExpression": {"a": {"$ne": 1}}}, 67),
    ({"partialFilterExpression": {"a": {"$regex": "x"}}}, 67),
    ({"partialFilterExpression": {"a": {"$gt": 1}}, "sparse": True}, 67),
])
def test_partial_filters_mongodb_refuses(db, options, code):
    with pytest.raises(OperationFailure) as e:
        db.r.create_index("a", **options)
    assert e.value.code == code


def test_partial_index_built_over_existing_documents(db):
    db.b.insert_many([{"_id": i, "a": i} for i in range(20)])
    db.b.create_index("a", partialFilterExpression={"a": {"$lt": 5}}, unique=True, name="a_lt5")
    db.b.insert_many([{"_id": 100 + i, "a": 7} for i in range(3)])  # outside: no conflict
    assert sorted(d["_id"] for d in db.b.find({}, hint="a_lt5")) == [0, 1, 2, 3, 4]
    assert db.command("validate", "b")["keysPerIndex"]["a_lt5"] == 5


def test_hidden_index_is_never_used_nor_hinted_but_still_expires(start_nidus):
    server = start_nidus(extra_args=["--setParameter", "ttlMonitorSleepSecs=1"])
    db = server.client().t
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    db.h.insert_many([{"_id": i, "at": old if i < 3 else datetime.datetime.now(
        datetime.timezone.utc), "k": i} for i in range(6)])
    db.h.create_index("k", hidden=True, name="k_hidden")
    db.h.create_index("at", expireAfterSeconds=60, hidden=True, name="at_hidden")
    explain = db.command("explain", {"find": "h", "filter": {"k": 4}})
    assert winning_index(explain) is None
    with pytest.raises(OperationFailure) as e:
        list(db.h.find({"k": 4}).hint("k_hidden"))
    assert e.value.code == 2
    deadline = time.monotonic() + 15
    while db.h.count_documents({}) > 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(d["_id"] for d in db.h.find()) == [3, 4, 5]


@pytest.mark.parametrize("filt,want", [
    ({"c": {"$gte": "a", "$lt": "B"}}, [1, 2]),
    ({"c": {"$in": ["B", "a"]}}, [1, 2, 3, 4]),
    ({"c": {"$gt": "A", "$lte": "c"}}, [3, 4, 5]),
])
@pytest.mark.parametrize("direction", [1, -1])
def test_collated_index_bounds_follow_the_collation_order(db, filt, want, direction):
    db.s.insert_many([{"_id": i, "c": c} for i, c in enumerate("aAbBc", start=1)])
    en2 = {"locale": "en", "strength": 2}
    db.s.create_index("c", collation=en2, name="c_en2")
    for hint in ("c_en2", None):
        cursor = db.s.find(filt, collation=en2).sort("c", direction)
        if hint:
            cursor = cursor.hint(hint)
        assert sorted(d["_id"] for d in cursor) == want
    assert sorted(d["_id"] for d in db.s.find(filt, collation=en2, hint={"$natural": 1})) == want



# --- collection default collations -----------------------------------------------------------
# A collection created with `collation` runs every operation without one under it, and its
# indexes (the `_id` index too) are built with it: the same as naming the collation on each
# operation and index of a collection without a default (the reference here), for every plan
# (each index hinted, and a collection scan) in both directions.

FR1 = {"locale": "fr", "strength": 1}
WORDS = ["abc", "ABC", "àbc", "Abd", "abd", "b", "B", "ç", "c", "C", "é", "e", "zz", None, 5]
DEFAULT_COLLATION_FILTERS = [
    {"s": "abc"},
    {"s": {"$in": ["B", "ABD"]}},
    {"s": {"$gte": "ABD", "$lt": "C"}},
    {"s": {"$gt": "b"}},
    {"s": {"$ne": "E"}},
    {"s": {"$nin": ["abc", "c"]}},
    {"_id": {"$in": ["k0", "K1"]}},
    {},
]


def _default_collation_pair(db):
    """`d`: created with FR1 as its default; `r`: no default, indexes named with FR1."""
    db.create_collection("d", collation=FR1)
    db.create_collection("r")
    docs = [{"_id": f"k{i}", "s": w, "n": i} for i, w in enumerate(WORDS)]
    db.d.insert_many(docs)
    db.r.insert_many(docs)
    db.d.create_index("s", name="s_1")
    db.r.create_index("s", name="s_1", collation=FR1)
    db.d.create_index([("s", 1), ("n", 1)], name="s_n")
    db.r.create_index([("s", 1), ("n", 1)], name="s_n", collation=FR1)
    return db.d, db.r


def _ids(cursor):
    return [d["_id"] for d in cursor]


@pytest.mark.parametrize("filt", DEFAULT_COLLATION_FILTERS, ids=lambda f: json_util.dumps(f))
def test_a_collection_default_collation_is_every_operations_collation(db, filt):
    d, r = _default_collation_pair(db)
    for hint in (None, "s_1", "s_n", "_id_", {"$natural": 1}):
        for direction in (1, -1):
            def run(coll, **kw):
                cursor = coll.find(filt, **kw).sort([("s", direction), ("n", direction)])
                if hint is not None:
                    cursor = cursor.hint(hint)
                return _ids(cursor)
            want = run(r, collation=FR1)
            assert run(d) == want, (hint, direction)
            # An explicit collation still wins over the default: the simple one here.
            assert run(d, collation={"locale": "simple"}) == run(r), (hint, direction)
    assert d.count_documents(filt) == r.count_documents(filt, collation=FR1)
    assert len(d.distinct("s", filt)) == len(r.distinct("s", filt, collation=FR1))
    pipeline = [{"$match": filt}, {"$sort": {"n": 1}}, {"$project": {"_id": 1}}]
    assert _ids(d.aggregate(pipeline)) == _ids(r.aggregate(pipeline, collation=FR1))
    # Writes: the same documents matched, updated and deleted.
    ud = d.update_many(filt, {"$set": {"u": 1}})
    ur = r.update_many(filt, {"$set": {"u": 1}}, collation=FR1)
    assert (ud.matched_count, ud.modified_count) == (ur.matched_count, ur.modified_count)
    assert _ids(d.find({"u": 1}).sort("n", 1)) == _ids(r.find({"u": 1}).sort("n", 1))
    fd = d.find_one_and_update(filt, {"$set": {"f": 1}}, sort=[("n", -1)])
    fr = r.find_one_and_update(filt, {"$set": {"f": 1}}, sort=[("n", -1)], collation=FR1)
    assert fd == fr
    assert d.delete_many(filt).deleted_count == r.delete_many(filt, collation=FR1).deleted_count
    assert _ids(d.find().sort("n", 1)) == _ids(r.find().sort("n", 1))


def test_a_sub_pipeline_runs_under_its_pipelines_collation(db):
    """MongoDB: a pipeline's collation (the command's, or its collection's default) is that
    of every stage; a `$lookup`/`$unionWith` collection does not bring its own default."""
    db.create_collection("fr", collation=FR1)
    db.fr.insert_many([{"_id": 1, "s": "abc"}, {"_id": 2, "s": "ABC"}])
    db.plain.insert_one({"_id": 0, "s": "ABC"})
    sub = [{"$match": {"s": "abc"}}, {"$project": {"_id": 1}}]
    out = list(db.plain.aggregate([{"$lookup": {"from": "fr", "pipeline": sub, "as": "m"}}]))
    assert out[0]["m"] == [{"_id": 1}]
    out = list(db.plain.aggregate([{"$unionWith": {"coll": "fr", "pipeline": [{"$match": {"s": "ABC"}}]}}]))
    assert sorted(d["_id"] for d in out) == [0, 2]
    out = list(db.plain.aggregate(
        [{"$lookup": {"from": "fr", "localField": "s", "foreignField": "s", "as": "m"}}]))
    assert [d["_id"] for d in out[0]["m"]] == [2]
    out = list(db.fr.aggregate([{"$match": {"_id": 1}}, {"$lookup": {
        "from": "plain", "localField": "s", "foreignField": "s", "as": "m"}}]))
    assert [d["_id"] for d in out[0]["m"]] == [0]
    # A view on the collated collection has the simple collation (its own, here none).
    db.command("create", "fr_view", viewOn="fr", pipeline=[])
    assert [d["_id"] for d in db.fr_view.find({"s": "abc"})] == [1]


def test_a_collection_default_collation_in_the_catalog(db):
    db.create_collection("d", collation=FR1)
    info = next(db.list_collections(filter={"name": "d"}))
    full = info["options"]["collation"]
    assert full["locale"] == "fr" and full["strength"] == 1 and full["caseFirst"] == "off"
    # The `_id` index and an index created without a collation take the default; one that
    # names the simple collation has none.
    assert info["idIndex"]["collation"] == full
    db.d.create_index("s", name="s_1")
    db.d.create_index([("s", 1), ("t", 1)], name="s_t", collation={"locale": "simple"})
    indexes = {ix["name"]: ix for ix in db.d.list_indexes()}
    assert indexes["_id_"]["collation"] == full
    assert indexes["s_1"]["collation"] == full
    assert "collation" not in indexes["s_t"]
    # `_id` is unique under the default collation, as its index is.
    db.d.insert_one({"_id": "abc"})
    with pytest.raises(DuplicateKeyError):
        db.d.insert_one({"_id": "ÂBC"})
    # The simple collation is no default at all.
    db.create_collection("plain", collation={"locale": "simple"})
    assert "collation" not in next(db.list_collections(filter={"name": "plain"}))["options"]
    with pytest.raises(OperationFailure) as e:
        db.command("create", "bad", collation="fr")
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        db.command("create", "bad", collation={"locale": "xx-nope"})
    assert e.value.code == 2


# --- concurrent catalog operations ------------------------------------------------------------


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_renames_onto_one_name(client, db, round_):
    for i in range(20):
        db[f"src{i}"].insert_one({"_id": i})
    barrier = threading.Barrier(20)
    results: list = [None] * 20

    def rename(i):
        barrier.wait()
        try:
            client.admin.command("renameCollection", f"{db.name}.src{i}", to=f"{db.name}.dst")
            results[i] = "ok"
        except OperationFailure as e:
            results[i] = e.code

    threads = [threading.Thread(target=rename, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1, results
    assert results.count(48) == 19, results
    winner = results.index("ok")
    names = set(db.list_collection_names())
    assert names == {"dst"} | {f"src{i}" for i in range(20) if i != winner}
    assert list(db.dst.find()) == [{"_id": winner}]
    for i in range(20):
        if i != winner:
            assert list(db[f"src{i}"].find()) == [{"_id": i}]


def test_rename_onto_a_view_name_is_refused(client, db):
    db.s.insert_one({"_id": 1})
    db.create_collection("v", viewOn="s", pipeline=[])
    with pytest.raises(OperationFailure) as e:
        client.admin.command("renameCollection", f"{db.name}.s", to=f"{db.name}.v")
    assert e.value.code == 48


# --- repeated field names ---------------------------------------------------------------------


def raw_doc(*pairs) -> RawBSONDocument:
    """A BSON document with the fields in order, names possibly repeated."""
    body = b"".join(bson.encode({k: v})[4:-1] for k, v in pairs)
    return RawBSONDocument(struct.pack("<i", len(body) + 5) + body + b"\x00")


def test_repeated_field_in_a_filter_ands_both_conditions(db):
    db.d.insert_many([{"_id": i, "a": i} for i in range(10)])
    f = raw_doc(("a", {"$gt": 5}), ("a", {"$lt": 8}))
    reply = db.command(SON([("find", "d"), ("filter", f)]))
    assert [d["_id"] for d in reply["cursor"]["firstBatch"]] == [6, 7]
    f = raw_doc(("a", 1), ("a", {"$gt": 5}))
    assert db.command(SON([("find", "d"), ("filter", f)]))["cursor"]["firstBatch"] == []
    f = raw_doc(("a", raw_doc(("$gt", 2), ("$gt", 6))))
    reply = db.command(SON([("count", "d"), ("query", f)]))
    assert reply["n"] == 3
    # In a write statement (sent as a document sequence by the driver).
    res = db.d.delete_many(raw_doc(("a", {"$gte": 3}), ("a", {"$lte": 4})))
    assert res.deleted_count == 2


def test_insert_with_a_repeated_id_is_refused(db):
    with pytest.raises(WriteError) as e:
        db.i.insert_one(raw_doc(("_id", 3), ("_id", 4)))
    assert e.value.code == 2
    assert "can't have multiple _id fields in one document" in str(e.value)
    reply = db.command(SON([("insert", "i"), ("documents", [raw_doc(("_id", 5), ("_id", 6))])]))
    assert reply["writeErrors"][0]["code"] == 2
    assert db.i.count_documents({}) == 0


def test_repeated_fields_in_updates_and_upserts(db):
    db.w.insert_one({"_id": 1})
    stmt = SON([("q", {"_id": 1}), ("u", raw_doc(("$set", raw_doc(("a", 1), ("a", 2)))))])
    reply = db.command(SON([("update", "w"), ("updates", [stmt])]))
    assert reply["writeErrors"][0]["code"] == 40
    stmt = SON([("q", raw_doc(("a", 1), ("a", 2))), ("u", {"$set": {"b": 1}}), ("upsert", True)])
    reply = db.command(SON([("update", "w"), ("updates", [stmt])]))
    assert reply["writeErrors"][0]["code"] == 54
    assert list(db.w.find()) == [{"_id": 1}]
    # A repeated name inside a stored value is stored under its own name (no mark leaks
    # into stored documents, through inserts or updates).
    db.command(SON([("insert", "w"), ("documents", [raw_doc(("_id", 2), ("o", raw_doc(
        ("x", 1), ("x", 2))))])]))
    stmt = SON([("q", {"_id": 2}), ("u", {"$set": {"p": raw_doc(("y", 1), ("y", 2))}})])
    db.command(SON([("update", "w"), ("updates", [stmt])]))
    stored = db.w.find_one({"_id": 2})
    assert list(stored["o"]) == ["x"] and list(stored["p"]) == ["y"]


def test_group_id_object_with_a_repeated_field(db):
    db.g.insert_one({"_id": 1, "x": 1, "y": 2})
    group_id = raw_doc(("a", "$x"), ("a", "$y"))
    with pytest.raises(OperationFailure) as e:
        db.command(SON([("aggregate", "g"),
                        ("pipeline", [SON([("$group", SON([("_id", group_id)]))])]),
                        ("cursor", {})]))
    assert e.value.code == 16406


@pytest.mark.parametrize("op", ["$lt", "$lte", "$gt", "$gte"])
def test_comparison_with_a_regex_operand(db, op):
    db.x.insert_one({"_id": 1, "a": "abc"})
    with pytest.raises(OperationFailure) as e:
        list(db.x.find({"a": {op: bson.Regex("^a")}}))
    assert e.value.code == 2
    assert e.value.details["errmsg"] == "Can't have RegEx as arg to predicate over field 'a'."


@pytest.mark.parametrize("args,message", [
    ([1e19, 0], "malformed mod, divisor value is invalid :: caused by :: "
                "Out of bounds coercing to integral value"),
    ([-1e19, 0], "malformed mod, divisor value is invalid :: caused by :: "
                 "Out of bounds coercing to integral value"),
    ([3, 1e19], "malformed mod, remainder value is invalid :: caused by :: "
                "Out of bounds coercing to integral value"),
    ([float("nan"), 0], "malformed mod, divisor value is invalid :: caused by :: "
                        "Unable to coerce NaN/Inf to integral type"),
    ([Decimal128("1E+30"), 0], "malformed mod, divisor value is invalid :: caused by :: "
                               "Out of bounds coercing to integral value"),
])
def test_mod_with_overflowing_arguments(db, args, message):
    db.x.insert_one({"_id": 1, "a": 4})
    with pytest.raises(OperationFailure) as e:
        list(db.x.find({"a": {"$mod": args}}))
    assert e.value.code == 2
    assert e.value.details["errmsg"] == message


def test_mod_with_large_but_valid_divisors(db):
    db.x.insert_many([{"_id": 1, "a": 0}, {"_id": 2, "a": 5}, {"_id": 3, "a": -(2**63)}])
    assert [d["_id"] for d in db.x.find({"a": {"$mod": [2**62, 5]}})] == [2]
    # 2^63 as a double wraps to the smallest 64-bit integer, as in MongoDB.
    assert [d["_id"] for d in db.x.find({"a": {"$mod": [float(2**63), 0]}})] == [1, 3]
    assert [d["_id"] for d in db.x.find({"a": {"$mod": [-1, 0]}})] == [1, 2, 3]


def test_find_and_modify_upsert_changing_the_queried_id(db):
    with pytest.raises(OperationFailure) as e:
        db.command("findAndModify", "f", query={"_id": 1}, update={"$set": {"_id": 2}},
                   upsert=True)
    assert e.value.code == 66
    assert db.f.count_documents({}) == 0
    # An `_id` not taken from the query may be set by the upsert.
    db.command("findAndModify", "f", query={"a": 1}, update={"$set": {"_id": 2}}, upsert=True)
    assert list(db.f.find()) == [{"_id": 2, "a": 1}]


# --- Decimal128 $inc / $mul -------------------------------------------------------------------

D = Decimal128

# (stored value, update, expected value, expected type)
DECIMAL_ARITHMETIC = [
    (D("1.5"), {"$inc": {"v": 1}}, Decimal("2.5"), Decimal128),
    (D("1.5"), {"$inc": {"v": D("0.25")}}, Decimal("1.75"), Decimal128),
    (5, {"$inc": {"v": D("0.1")}}, Decimal("5.1"), Decimal128),
    (2**40, {"$inc": {"v": D("1")}}, Decimal(2**40 + 1), Decimal128),
    (D("1.5"), {"$inc": {"v": 0.5}}, Decimal("2"), Decimal128),
    (D("1.5"), {"$mul": {"v": 2}}, Decimal("3"), Decimal128),
    (D("-2.5"), {"$mul": {"v": D("4")}}, Decimal("-10"), Decimal128),
    (3.0, {"$mul": {"v": D("0.5")}}, Decimal("1.5"), Decimal128),
    (None, {"$inc": {"v": D("7.25")}}, Decimal("7.25"), Decimal128),
    (None, {"$mul": {"v": D("7.25")}}, Decimal("0"), Decimal128),
]


@pytest.mark.parametrize("stored,update,want,kind", DECIMAL_ARITHMETIC)
def test_decimal_inc_and_mul(db, stored, update, want, kind):
    db.n.insert_one({"_id": 1} if stored is None else {"_id": 1, "v": stored})
    db.n.update_one({"_id": 1}, update)
    got = db.n.find_one({"_id": 1})["v"]
    assert isinstance(got, kind)
    assert got.to_decimal() == want


@pytest.mark.parametrize("when_matched", ["merge", "replace", "keepExisting", "fail"])
def test_merge_gives_results_without_id_a_new_object_id(db, when_matched):
    """pymongo's test_database_aggregation_fake_cursor: `$merge` on `_id` of results without
    one inserts each with a new ObjectId (it failed with error 51132)."""
    db.src.insert_many([{"_id": i, "a": i} for i in range(3)])
    db.command("aggregate", "src", cursor={}, pipeline=[
        {"$project": {"_id": 0, "a": 1}},
        {"$merge": {"into": "dest", "whenMatched": when_matched}}])
    got = list(db.dest.find())
    assert sorted(d["a"] for d in got) == [0, 1, 2]
    assert all(isinstance(d["_id"], bson.ObjectId) and list(d) == ["_id", "a"] for d in got)
    assert len({d["_id"] for d in got}) == 3
