"""Aggregation `$sort`, `$group` (and `$bucket`/`$sortByCount`, which are `$group`s),
`$bucketAuto` and `$setWindowFields` over their memory limits (the server parameters
internalQueryMaxBlockingSortMemoryUsageBytes / internalDocumentSourceGroupMaxMemoryBytes /
internalDocumentSourceBucketAutoMaxMemoryBytes / internalDocumentSourceSetWindowFieldsMaxMemoryBytes,
lowered here) spill to disk with allowDiskUse (MongoDB 6.0+'s default) and return the same
results as in memory; with allowDiskUse: false they fail with
QueryExceededMemoryLimitNoDiskUseAllowed (292), or 5643011 for `$setWindowFields`."""

from __future__ import annotations

import random

import pytest
from pymongo.errors import OperationFailure

PARAMS = ("internalQueryMaxBlockingSortMemoryUsageBytes", "internalDocumentSourceGroupMaxMemoryBytes",
          "internalDocumentSourceBucketAutoMaxMemoryBytes", "internalDocumentSourceSetWindowFieldsMaxMemoryBytes")


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

    def apply(n, only=PARAMS):
        for p in only:
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


def stage_stats(coll, pipeline, name, **opts):
    exp = coll.database.command({"explain": {"aggregate": coll.name, "pipeline": pipeline, "cursor": {}, **opts},
                                 "verbosity": "executionStats"})
    return next(s for s in exp["stages"] if name in s)


def test_pushed_down_sort_keeps_the_aggregate_memory_rules(coll, set_limits):
    """A leading $sort runs in the find plan; it spills or fails as the aggregate says."""
    pipeline = [{"$sort": {"k": 1, "_id": 1}}]
    want = sorted((d["k"], d["_id"]) for d in coll.find())
    set_limits(20_000)
    assert [(d["k"], d["_id"]) for d in coll.aggregate(pipeline)] == want
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate(pipeline, allowDiskUse=False))
    assert e.value.code == 292


def test_sort_by_count_and_bucket_spill_through_group(coll, set_limits):
    sbc = [{"$sortByCount": {"$mod": ["$k", 37]}}]
    bucket = [{"$bucket": {"groupBy": "$k", "boundaries": [0, 50, 100, 200], "default": "rest",
                           "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}]
    want_sbc = list(coll.aggregate(sbc))
    want_bucket = list(coll.aggregate(bucket))
    set_limits(2_000, only=PARAMS[1:2])
    got = list(coll.aggregate(sbc))
    # Ties in count come in no particular order: compare as sets, and the counts' order.
    assert [d["count"] for d in got] == [d["count"] for d in want_sbc]
    assert sorted(map(str, got)) == sorted(map(str, want_sbc))
    assert list(coll.aggregate(bucket)) == want_bucket
    assert stage_stats(coll, sbc, "$group")["usedDisk"] is True
    assert stage_stats(coll, bucket, "$group")["usedDisk"] is True


def bucket_auto_reference(docs, key, buckets):
    """MongoDB's bucketing: about n/buckets documents in key order each, equal keys kept
    together, a bucket's max the next one's min (the last: its largest key)."""
    s = sorted(docs, key=lambda d: d[key])  # stable: input order among equal keys
    size = max(1, round(len(s) / buckets))
    out, i = [], 0
    while i < len(s) and len(out) < buckets:
        j = len(s) if len(out) + 1 == buckets else min(i + size, len(s))
        while j < len(s) and s[j][key] == s[j - 1][key]:
            j += 1
        out.append(s[i:j])
        i = j
    return [{"_id": {"min": b[0][key], "max": out[n + 1][0][key] if n + 1 < len(out) else b[-1][key]},
             "n": len(b), "ids": [d["_id"] for d in b]} for n, b in enumerate(out)]


def test_bucket_auto_spills_and_matches_in_memory(coll, set_limits):
    pipeline = [{"$bucketAuto": {"groupBy": "$k", "buckets": 7,
                                 "output": {"n": {"$sum": 1}, "ids": {"$push": "$_id"}}}}]
    want = list(coll.aggregate(pipeline))
    assert want == bucket_auto_reference(list(coll.find().sort("_id", 1)), "k", 7)
    assert stage_stats(coll, pipeline, "$bucketAuto")["usedDisk"] is False
    set_limits(20_000, only=PARAMS[2:3])
    assert list(coll.aggregate(pipeline)) == want
    st = stage_stats(coll, pipeline, "$bucketAuto")
    assert st["usedDisk"] is True and st["spills"] > 1 and st["nReturned"] == 7
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate(pipeline, allowDiskUse=False))
    assert e.value.code == 292
    assert e.value.details["errmsg"] == (
        "Sort exceeded memory limit of 20000 bytes, but did not opt in to external sorting.")


def test_bucket_auto_more_buckets_than_keys(coll, set_limits):
    set_limits(5_000, only=PARAMS[2:3])
    got = list(coll.aggregate([{"$match": {"k": {"$lt": 3}}},
                               {"$bucketAuto": {"groupBy": "$k", "buckets": 10}}]))
    assert [(d["_id"]["min"], d["_id"]["max"]) for d in got] == [(0, 1), (1, 2), (2, 2)]


WINDOW = [{"$set": {"pad": {"$concat": ["$pad", "$pad", "$pad", "$pad", "$pad", "$pad", "$pad", "$pad"]}}},
          {"$setWindowFields": {
    "partitionBy": {"$mod": ["$k", 3]}, "sortBy": {"v": 1},
    "output": {"moving": {"$sum": "$v", "window": {"documents": [-2, 2]}},
               "running": {"$sum": "$v", "window": {"documents": ["unbounded", "current"]}},
               "rank": {"$rank": {}},
               "prev": {"$shift": {"output": "$_id", "by": -1, "default": None}},
               "cov": {"$covariancePop": ["$v", "$k"]},
               "near": {"$push": "$_id", "window": {"range": [-1, 1]}}}}},
    {"$project": {"pad": 0}}, {"$sort": {"_id": 1}}]


def test_set_window_fields_spills_and_matches_in_memory(coll, set_limits):
    want = list(coll.aggregate(WINDOW))
    assert len(want) == 3000
    # A partition's first document: rank 1, no previous one.
    first = min((d for d in want if d["k"] % 3 == 0), key=lambda d: (d["v"], d["_id"]))
    assert first["rank"] == 1 and first["prev"] is None and first["running"] == first["v"]
    set_limits(200_000, only=PARAMS[3:4])
    got = list(coll.aggregate(WINDOW))
    for g, w in zip(got, want):
        g["cov"], w["cov"] = round(g["cov"], 6), round(w["cov"], 6)
    assert got == want
    st = stage_stats(coll, WINDOW, "$_internalSetWindowFields")
    assert st["usedDisk"] is True and st["spills"] >= 3 and st["nReturned"] == 3000
    # The computed partitionBy is set, sorted on and removed as MongoDB desugars it.
    exp = coll.database.command({"explain": {"aggregate": coll.name, "pipeline": WINDOW, "cursor": {}}})
    names = [next(iter(s)) for s in exp["stages"]]
    assert names[2:6] == ["$addFields", "$sort", "$_internalSetWindowFields", "$project"], names
    assert "__internal_setWindowFields_partition_key" not in got[0]


def test_set_window_fields_without_disk_use_fails(coll, set_limits):
    set_limits(200_000, only=PARAMS[3:4])
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate(WINDOW, allowDiskUse=False))
    assert e.value.code == 5643011
    assert e.value.details["errmsg"] == "Exceeded max memory. Set 'allowDiskUse: true' to spill to disk"


def test_set_window_fields_values_over_the_limit_fail(coll, set_limits):
    """What the window functions keep (here every `pad` of a partition) cannot spill."""
    set_limits(200_000, only=PARAMS[3:4])
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate([{"$setWindowFields": {"output": {"all": {"$push": "$pad"}}}}]))
    assert e.value.code == 5414201
    assert e.value.details["errmsg"].startswith("Exceeded memory limit in DocumentSourceSetWindowFields")
