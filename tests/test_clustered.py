"""Clustered collections (`create` with `clusteredIndex`), as MongoDB 8.0 behaves: the
options' validation errors, listCollections/listIndexes output, natural order by `_id`,
CLUSTERED_IXSCAN with minRecord/maxRecord for `_id` ranges (COLLSCAN otherwise), and TTL
by `_id` date (its own server with ttlMonitorSleepSecs=1)."""

from __future__ import annotations

import datetime
import time

import pytest
from bson import Int64, ObjectId
from pymongo.errors import OperationFailure

from nidus_harness import NidusServer

CLUSTERED = {"key": {"_id": 1}, "unique": True}

# (create options, error code, error message) as MongoDB 8.0 replies.
CREATE_ERRORS = [
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": False}}, 5979700,
     "The clusteredIndex option requires unique: true to be specified"),
    ({"clusteredIndex": {"key": {"a": 1}, "unique": True}}, 197,
     "The clusteredIndex option is only supported for key: {_id: 1}"),
    ({"clusteredIndex": {"key": {"_id": -1}, "unique": True}}, 197,
     "The clusteredIndex option is only supported for key: {_id: 1}"),
    ({"clusteredIndex": {"key": {"_id": 1, "a": 1}, "unique": True}}, 197,
     "The clusteredIndex option is only supported for key: {_id: 1}"),
    ({"clusteredIndex": {"key": {"_id": 1}}}, 40414,
     "BSON field 'clusteredIndex.unique' is missing but a required field"),
    ({"clusteredIndex": {"unique": True}}, 40414,
     "BSON field 'clusteredIndex.key' is missing but a required field"),
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": True, "foo": 1}}, 40415,
     "BSON field 'clusteredIndex.foo' is an unknown field."),
    ({"clusteredIndex": True}, 5979703, None),
    ({"clusteredIndex": "x"}, 5979702, None),
    ({"clusteredIndex": {"key": {"_id": 1}, "unique": True, "v": 1}}, 5979704, None),
    ({"expireAfterSeconds": 10}, 72,
     "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is specified"),
    ({"clusteredIndex": CLUSTERED, "expireAfterSeconds": -1}, 72,
     "TTL index 'expireAfterSeconds' option cannot be less than 0"),
    ({"clusteredIndex": CLUSTERED, "idIndex": {"key": {"_id": 1}, "name": "_id_", "v": 2}}, 72,
     "The 'clusteredIndex' option is not supported with the 'idIndex' option"),
]


@pytest.mark.parametrize("options,code,message", CREATE_ERRORS)
def test_create_errors(db, options, code, message):
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "c", **options})
    assert e.value.code == code, e.value.details
    if message is not None:
        assert e.value.details["errmsg"] == message
    assert "c" not in db.list_collection_names()


# (clusteredIndex as given, expireAfterSeconds, listCollections options, listIndexes)
CATALOG_CASES = [
    (CLUSTERED, None,
     {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True}},
     [{"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True, "clustered": True}]),
    ({"key": {"_id": 1}, "unique": True, "name": "by_id"}, 3600,
     {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "by_id", "unique": True},
      "expireAfterSeconds": Int64(3600)},
     [{"v": 2, "key": {"_id": 1}, "name": "by_id", "unique": True, "clustered": True}]),
]


@pytest.mark.parametrize("clustered,expire,options,indexes", CATALOG_CASES)
def test_catalog_output(db, clustered, expire, options, indexes):
    cmd = {"create": "c", "clusteredIndex": clustered}
    if expire is not None:
        cmd["expireAfterSeconds"] = expire
    db.command(cmd)
    (info,) = list(db.list_collections(filter={"name": "c"}))
    assert info["type"] == "collection"
    assert info["options"] == options
    assert "idIndex" not in info
    assert list(db.c.list_indexes()) == indexes
    # Re-creating with the same options succeeds; other options are NamespaceExists.
    db.command(cmd)
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "c"})
    assert e.value.code == 48


MIXED_IDS = [5, 2.5, "b", "a", None, ObjectId("000000000000000000000001"), True,
             datetime.datetime(2024, 1, 1), {"x": 1}, -3, Int64(7), "", False, 10]


def sort_key(v):
    # MongoDB's order across the types used above.
    order = {type(None): 1, int: 2, float: 2, Int64: 2, str: 3, dict: 4, ObjectId: 7, bool: 8,
             datetime.datetime: 9}
    return (order[type(v)], v if not isinstance(v, dict) else str(v))


def test_natural_order_is_id_order(db):
    db.create_collection("c", clusteredIndex=CLUSTERED)
    for v in MIXED_IDS:
        db.c.insert_one({"_id": v})
    got = [d["_id"] for d in db.c.find()]
    want = sorted(MIXED_IDS, key=sort_key)
    assert got == want
    assert [d["_id"] for d in db.c.find().sort("$natural", -1)] == want[::-1]
    # A sort on _id is the scan's order: no SORT stage.
    plan = db.c.find().sort("_id", -1).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "COLLSCAN" and plan["direction"] == "backward"
    assert [d["_id"] for d in db.c.find().sort("_id", -1)] == want[::-1]


# (filter, expected winning plan fields, expected _ids)
EXPLAIN_CASES = [
    ({"_id": {"$gte": 3, "$lt": 8}},
     {"stage": "CLUSTERED_IXSCAN", "direction": "forward", "minRecord": 3, "maxRecord": 8}, [5, 7]),
    ({"_id": {"$gt": 5}}, {"stage": "CLUSTERED_IXSCAN", "minRecord": 5}, [7, 10]),
    ({"_id": {"$lte": 2.5}}, {"stage": "CLUSTERED_IXSCAN", "maxRecord": 2.5}, [-3, 2.5]),
    ({"_id": "a"}, {"stage": "CLUSTERED_IXSCAN", "minRecord": "a", "maxRecord": "a"}, ["a"]),
    ({"_id": {"$in": [5, "a"]}}, {"stage": "COLLSCAN"}, [5, "a"]),
    ({"x": 1}, {"stage": "COLLSCAN"}, []),
    ({"$and": [{"_id": {"$gt": 1}}, {"_id": {"$lt": 6}}]},
     {"stage": "CLUSTERED_IXSCAN", "minRecord": 1, "maxRecord": 6}, [2.5, 5]),
]


@pytest.mark.parametrize("filt,plan,ids", EXPLAIN_CASES)
def test_explain_and_results(db, filt, plan, ids):
    db.create_collection("c", clusteredIndex=CLUSTERED)
    db.c.insert_many([{"_id": v} for v in MIXED_IDS])
    winning = db.c.find(filt).explain()["queryPlanner"]["winningPlan"]
    for k, v in plan.items():
        assert winning.get(k) == v, winning
    if plan["stage"] == "COLLSCAN":
        assert "minRecord" not in winning and "maxRecord" not in winning
    assert sorted((d["_id"] for d in db.c.find(filt)), key=sort_key) == sorted(ids, key=sort_key)


def test_no_id_index_for_the_planner(db):
    db.create_collection("c", clusteredIndex=CLUSTERED)
    db.c.create_index("a")
    db.c.insert_many([{"_id": i, "a": i % 3} for i in range(30)])
    plan = db.c.find({"_id": {"$gte": 10}, "a": 1}).explain()["queryPlanner"]
    stages = str(plan)
    assert "'indexName': '_id_'" not in stages
    assert sorted(d["_id"] for d in db.c.find({"_id": {"$gte": 10}, "a": 1})) == [10, 13, 16, 19, 22, 25, 28]
    hinted = db.c.find({"_id": {"$lt": 3}}).hint({"_id": 1}).explain()["queryPlanner"]["winningPlan"]
    assert hinted["stage"] == "CLUSTERED_IXSCAN" and hinted["maxRecord"] == 3
    # Updates and deletes by _id find their documents through the cluster key.
    assert db.c.update_one({"_id": 4}, {"$set": {"b": 1}}).modified_count == 1
    assert db.c.delete_many({"_id": {"$gte": 25}}).deleted_count == 5
    assert db.c.count_documents({}) == 25
    with pytest.raises(OperationFailure) as e:
        db.c.insert_one({"_id": 4})
    assert e.value.code == 11000


@pytest.fixture(scope="module")
def ttl_client(nidus_binary, tmp_path_factory):
    server = NidusServer(dbpath=tmp_path_factory.mktemp("nidus-clustered-ttl") / "db", binary=nidus_binary,
                         log_name="nidus-clustered-ttl", extra_args=["--setParameter", "ttlMonitorSleepSecs=1"])
    server.start()
    client = server.client()
    yield client
    client.close()
    server.stop()


def test_ttl_deletes_by_id_date(ttl_client):
    db = ttl_client.clustered_ttl
    db.c.drop()
    db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=60)
    now = datetime.datetime.now(datetime.timezone.utc)
    old = now - datetime.timedelta(minutes=5)
    db.c.insert_many([
        {"_id": old, "k": "old"},
        {"_id": now, "k": "fresh"},
        {"_id": ObjectId.from_datetime(old), "k": "old-oid"},  # only dates expire
        {"_id": "2000-01-01", "k": "string"},
    ])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and db.c.count_documents({"k": "old"}):
        time.sleep(0.2)
    assert sorted(d["k"] for d in db.c.find()) == ["fresh", "old-oid", "string"]
