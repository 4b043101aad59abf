"""Aggregation `$sort` and `$group` over their memory limits (the server parameters
internalQueryMaxBlockingSortMemoryUsageBytes / internalDocumentSourceGroupMaxMemoryBytes,
lowered here) spill to disk with allowDiskUse (MongoDB 6.0+'s default) and return the same
results as in memory; with allowDiskUse: false they fail with
QueryExceededMemoryLimitNoDiskUseAllowed (292)."""

from __future__ import annotations

import random

import pytest
from pymongo.errors import OperationFailure

PARAMS = ("internalQueryMaxBlockingSortMemoryUsageBytes", "internalDocumentSourceGroupMaxMemoryBytes")


@pytest.fixture
def coll(client):
    c = client.t_agg_spill.c
    c.drop()
    rng = random.Random(11)
    docs = [{"_id": i, "k": rng.randrange(300), "v": rng.randrange(1000), "pad": "x" * 100} for i in range(3000)]
    c.insert_many(docs)
    yield c
    c.drop()


@pytest.fixture
def set_limits(client):
    before = {p: client.admin.command("getParameter", 1, **{p: 1})[p] for p in PARAMS}

    def apply(n):
        for p in PARAMS:
            client.admin.command("setParameter", 1, **{p: n})

    yield apply
    for p, v in before.items():
        client.admin.command("setParameter", 1, **{p: v})


GROUP = [{"$group": {"_id": "$k", "n": {"$sum": 1}, "total": {"$sum": "$v"}, "avg": {"$avg": "$v"},
                     "lo": {"$min": "$v"}, "hi": {"$max": "$v"}, "first": {"$first": "$_id"},
                     "last": {"$last": "$_id"}, "ids": {"$push": "$_id"}, "set": {"$addToSet": {"$mod": ["$v", 3]}},
                     "sd": {"$stdDevPop": "$v"}, "top2": {"$topN": {"n": 2, "sortBy": {"v": -1, "_id": 1}, "output": "$_id"}}}},
         {"$sort": {"_id": 1}}]


def normalize(groups):
    for g in groups:
        g["set"] = sorted(g["set"])
        g["avg"] = round(g["avg"], 9)
        g["sd"] = round(g["sd"], 9)
    return groups


def test_group_spills_and_matches_in_memory(coll, set_limits):
    want = normalize(list(coll.aggregate(GROUP)))
    assert len(want) == 300
    set_limits(20_000)
    got = normalize(list(coll.aggregate(GROUP)))
    assert got == want
    exp = coll.database.command({"explain": {"aggregate": "c", "pipeline": GROUP[:1], "cursor": {}},
                                 "verbosity": "executionStats"})
    group = next(s for s in exp["stages"] if "$group" in s)
    assert group["usedDisk"] is True and group["spills"] > 1
    assert group["nReturned"] == 300


def test_sort_spills_stably(coll, set_limits):
    pipeline = [{"$project": {"k": 1, "pad": 1}}, {"$sort": {"k": -1}}]
    want = [(d["k"], d["_id"]) for d in coll.aggregate(pipeline)]
    set_limits(20_000)
    got = [(d["k"], d["_id"]) for d in coll.aggregate(pipeline)]
    assert got == want
    # Equal keys keep input (natural) order.
    assert got == sorted(want, key=lambda t: (-t[0], t[1]))
    exp = coll.database.command({"explain": {"aggregate": "c", "pipeline": [{"$addFields": {"z": 1}}, {"$sort": {"k": 1}}],
                                             "cursor": {}}, "verbosity": "executionStats"})
    sort = next(s for s in exp["stages"] if "$sort" in s)
    assert sort["usedDisk"] is True and sort["spills"] > 1 and sort["nReturned"] == 3000


def test_top_k_sort_after_spill(coll, set_limits):
    pipeline = [{"$addFields": {"z": 1}}, {"$sort": {"v": 1, "_id": -1}}, {"$limit": 700}]
    want = [d["_id"] for d in coll.aggregate(pipeline)]
    set_limits(20_000)
    assert [d["_id"] for d in coll.aggregate(pipeline)] == want


def test_no_disk_use_fails(coll, set_limits):
    set_limits(20_000)
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate(GROUP, allowDiskUse=False))
    assert e.value.code == 292
    assert e.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
    assert "$group" in e.value.details["errmsg"]
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate([{"$addFields": {"z": 1}}, {"$sort": {"k": 1}}], allowDiskUse=False))
    assert e.value.code == 292
    assert e.value.details["errmsg"] == (
        "Sort exceeded memory limit of 20000 bytes, but did not opt in to external sorting.")


def test_allow_disk_use_by_default_parameter(client, coll, set_limits):
    set_limits(20_000)
    client.admin.command("setParameter", 1, allowDiskUseByDefault=False)
    try:
        with pytest.raises(OperationFailure) as e:
            list(coll.aggregate(GROUP))
        assert e.value.code == 292
        assert len(list(coll.aggregate(GROUP, allowDiskUse=True))) == 300
    finally:
        client.admin.command("setParameter", 1, allowDiskUseByDefault=True)
