"""Index kinds beyond B-tree keys (issue 22): hashed indexes.

Hash values are MongoDB's (its startup self-test, the `$toHashedIndexKey` manual page, a suite
run against MongoDB); errors, explain shapes and behaviours follow MongoDB's
jstests/core/index/hashed tests.
"""

from __future__ import annotations

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure, WriteError


def hashed(db, value):
    """MongoDB's hash of `value` through `$toHashedIndexKey`."""
    out = list(db.aggregate([{"$documents": [{"v": value}]},
                             {"$project": {"_id": 0, "h": {"$toHashedIndexKey": "$v"}}}]))
    return out[0]["h"]


# (value, MongoDB's hash)
KNOWN_HASHES = [
    (42, -944302157085130861),
    ("hello", 5347277839332858538),
    ("string to hash", 763543691661428748),
]


@pytest.mark.parametrize("value,expected", KNOWN_HASHES)
def test_hash_equals_mongodb(db, value, expected):
    got = hashed(db, value)
    assert isinstance(got, Int64)
    assert got == expected


# Groups of values MongoDB hashes alike (numbers truncate to int64), and values it does not.
SAME_HASH = [
    [1, Int64(1), 1.0, 1.9, Decimal128("1.5")],
    [2, 2.3, 2.9],
    [{"a": 1}, {"a": 1.0}, {"a": Int64(1)}],
    [0, float("nan")],
]
DIFFERENT_HASH = [None, 0, "0", False, {}, [], {"a": 1, "b": 2}, {"b": 2, "a": 1}, [1, 2],
                  ObjectId("5b2be413c06d924ab26ff9ca")]


@pytest.mark.parametrize("group", SAME_HASH, ids=lambda g: repr(g[0]))
def test_hash_canonicalizes_numbers(db, group):
    assert len({hashed(db, v) for v in group}) == 1


def test_hash_distinguishes_types_and_field_order(db):
    hashes = [hashed(db, v) for v in DIFFERENT_HASH]
    assert len(set(hashes)) == len(hashes)


def test_missing_hashes_as_null(db):
    out = list(db.aggregate([{"$documents": [{}]},
                             {"$project": {"_id": 0, "h": {"$toHashedIndexKey": "$nope"}}}]))
    assert out[0]["h"] == hashed(db, None)


# --- index specs -------------------------------------------------------------------------

# (key, options, error code or None)
SPECS = [
    ({"a": "hashed"}, {}, None),
    ({"a": "hashed"}, {"unique": True}, 16764),
    ({"a": "hashed", "b": "hashed"}, {}, 31303),
    ({"a": 1, "b": "hashed", "c": -1}, {}, None),
    ({"a": "hashed"}, {"sparse": True}, None),
    ({"_id": "hashed"}, {}, None),
    ({"a": "hashed"}, {"partialFilterExpression": {"b": {"$gt": 5}}}, None),
    ({"a": "2dsphereX"}, {}, 67),
]


@pytest.mark.parametrize("key,options,code", SPECS, ids=lambda x: repr(x))
def test_create_hashed_index(db, key, options, code):
    if code is None:
        name = db.c.create_index(list(key.items()), **options)
        spec = next(ix for ix in db.c.list_indexes() if ix["name"] == name)
        assert spec["key"] == key
        assert name == "_".join(f"{k}_{v}" for k, v in key.items())
    else:
        with pytest.raises(OperationFailure) as e:
            db.c.create_index(list(key.items()), **options)
        assert e.value.code == code
        assert len(list(db.c.list_indexes())) <= 1


def test_error_messages(db):
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("a", "hashed")], unique=True)
    assert "Currently hashed indexes cannot guarantee uniqueness" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("a", "hashed"), ("b", "hashed")])
    assert "A maximum of one index field is allowed to be hashed but found 2" in str(e.value)


# --- arrays (MongoDB's hashed_index_with_arrays.js) -------------------------------------

ARRAY_DOCS = [
    ({"a": []}, False),
    ({"b": []}, False),
    ({"c": []}, False),
    ({"field1": []}, False),
    ({"field1": {"field2": []}}, False),
    ({"field1": {"field2": {"0": []}}}, False),
    ({"field1": [{"field2": {"0": []}}]}, False),
    ({"field1": {"field2": {"0": {"field4": []}}}}, False),
    ({"field2": []}, False),
    ({"field2": {"0": [0]}}, False),
    ({"field1": {"field2": {"0": {"otherField": []}}}}, True),
    ({"field1": {"field2": {"0": {"field4": 1}}}}, True),
]


@pytest.mark.parametrize("doc,ok", ARRAY_DOCS, ids=lambda x: repr(x))
def test_arrays_refused(db, doc, ok):
    db.c.create_index([("a", 1), ("b", "hashed"), ("c", 1)])
    db.c.create_index([("field1.field2.0.field4", "hashed"), ("field2.0.field4", 1)])
    if ok:
        db.c.insert_one(doc)
    else:
        with pytest.raises(WriteError) as e:
            db.c.insert_one(doc)
        assert e.value.code == 16766
        assert "hashed indexes do not currently support array values" in str(e.value)
        with pytest.raises(WriteError) as e:
            db.c.replace_one({}, doc, upsert=True)
        assert e.value.code == 16766
    assert db.c.count_documents({}) == (1 if ok else 0)


def test_existing_array_fails_the_build(db):
    db.c.insert_one({"a": [1]})
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("a", "hashed")])
    assert e.value.code == 16766


def test_partial_index_admits_arrays_outside_its_filter(db):
    db.c.create_index([("a", "hashed"), ("b", 1)], partialFilterExpression={"b": {"$gt": 5}})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"a": [1], "b": 6})
    assert e.value.code == 16766
    db.c.insert_one({"a": [1], "b": 1})


# --- queries through the index ------------------------------------------------------------

DOCS = [{"_id": i, "a": v, "b": i % 3} for i, v in enumerate(
    [0, 1, 2, 2.3, 2.9, 3, Int64(3), 3.0, "x", "X", None, {"s": 1}, {"s": 1.0}, True])]
DOCS.append({"_id": 100, "b": 1})

# (filter, whether MongoDB answers it through the hashed index)
QUERIES = [
    ({"a": 2}, True),
    ({"a": 2.3}, True),
    ({"a": 3}, True),
    ({"a": "x"}, True),
    ({"a": None}, True),
    ({"a": {"s": 1}}, True),
    ({"a": {"$in": [1, 2.9, "X"]}}, True),
    ({"$and": [{"a": {"$in": [1, 2]}}, {"a": {"$gt": 1}}]}, True),
    ({"a": 3, "b": 0}, True),
    ({"a": {"$gt": 2}}, False),
    ({"a": {"$gte": 0, "$lte": 2}}, False),
    ({"a": {"$regex": "x"}}, False),
    ({"a": {"$ne": 2}}, False),
    ({"a": {"$exists": True}}, False),
    ({"b": 1}, False),
]


def winning_stages(explain):
    stages = []
    node = explain["queryPlanner"]["winningPlan"]
    while node:
        stages.append(node)
        node = node.get("inputStage")
    return stages


@pytest.fixture
def hashed_coll(db):
    db.c.insert_many(DOCS)
    db.c.create_index([("a", "hashed")])
    return db.c


@pytest.mark.parametrize("query,uses_index", QUERIES, ids=lambda x: repr(x))
def test_query_through_hashed_index(db, hashed_coll, query, uses_index):
    scan = sorted(d["_id"] for d in hashed_coll.find(query).hint({"$natural": 1}))
    assert sorted(d["_id"] for d in hashed_coll.find(query)) == scan
    # Hinted, a range scans the whole index and the FETCH filter decides.
    assert sorted(d["_id"] for d in hashed_coll.find(query).hint("a_hashed")) == scan
    assert hashed_coll.count_documents(query, hint="a_hashed") == len(scan)
    stages = winning_stages(db.command("explain", {"find": "c", "filter": query}))
    names = [s["stage"] for s in stages]
    if uses_index:
        assert names == ["FETCH", "IXSCAN"], names
        assert stages[1]["keyPattern"] == {"a": "hashed"}
        assert stages[1]["isMultiKey"] is False
        assert "filter" in stages[0]
    else:
        assert "IXSCAN" not in names


def test_explain_bounds_are_hashes(db, hashed_coll):
    explain = db.command("explain", {"find": "c", "filter": {"a": {"$in": [3, "x"]}}})
    fetch, ixscan = winning_stages(explain)
    assert fetch["filter"] == {"a": {"$in": [3, "x"]}}
    points = sorted([hashed(db, 3), hashed(db, "x")])
    assert ixscan["indexBounds"] == {"a": [f"[{p}, {p}]" for p in points]}
    assert ixscan["indexName"] == "a_hashed"


def test_collisions_are_filtered(db, hashed_coll):
    assert hashed(db, 2) == hashed(db, 2.3)
    assert [d["_id"] for d in hashed_coll.find({"a": 2.3})] == [3]
    stats = db.command("explain", {"find": "c", "filter": {"a": 2.3}},
                       verbosity="executionStats")["executionStats"]
    # 2, 2.3 and 2.9 share a key: three keys examined, one document returned.
    assert stats["totalKeysExamined"] == 3
    assert stats["nReturned"] == 1


def test_sort_on_hashed_field_is_not_from_the_index(db, hashed_coll):
    got = [d["_id"] for d in hashed_coll.find({"a": {"$in": [0, 1, 3]}}).sort("a", -1)]
    want = [d["_id"] for d in hashed_coll.find({"a": {"$in": [0, 1, 3]}})
            .sort("a", -1).hint({"$natural": 1})]
    assert got == want


def test_compound_hashed_equality_and_sort(db):
    db.c.insert_many([{"_id": i, "a": i % 4, "b": i} for i in range(40)])
    db.c.create_index([("a", "hashed"), ("b", -1)])
    got = [d["_id"] for d in db.c.find({"a": 2}).sort("b", 1)]
    assert got == [i for i in range(40) if i % 4 == 2]
    explain = db.command("explain", {"find": "c", "filter": {"a": 2}, "sort": {"b": 1}})
    names = [s["stage"] for s in winning_stages(explain)]
    assert names == ["FETCH", "IXSCAN"], names


def test_updates_move_keys(db, hashed_coll):
    hashed_coll.update_one({"_id": 0}, {"$set": {"a": "moved"}})
    assert [d["_id"] for d in hashed_coll.find({"a": "moved"})] == [0]
    assert [d["_id"] for d in hashed_coll.find({"a": 0})] == []
    hashed_coll.delete_one({"_id": 0})
    assert list(hashed_coll.find({"a": "moved"})) == []
    assert db.command("validate", "c")["valid"] is True


def test_to_hashed_index_key_operand_and_explain(db):
    db.c.insert_one({"_id": 1, "a": [1, 2]})
    # The operand is one expression: an array literal is hashed whole.
    out = list(db.c.aggregate([{"$project": {"_id": 0, "h": {"$toHashedIndexKey": [1, 2]},
                                             "g": {"$toHashedIndexKey": "$a"}}}]))
    assert out == [{"h": hashed(db, [1, 2]), "g": hashed(db, [1, 2])}]
    explain = db.command("explain", {"aggregate": "c", "cursor": {},
                                     "pipeline": [{"$project": {"h": {"$toHashedIndexKey": "$a"}}}]})
    assert explain["queryPlanner"]["winningPlan"]["transformBy"]["h"] == {"$toHashedIndexKey": "$a"}
