"""A `$group` or a spilling `$sort` straight over a large collection scan is read by several
threads (the scan split into RecordId ranges; the parts' groups folded, their sorted runs
merged, in input order). What a client sees must be what one thread gives: the same groups
in the same order, the same first and last values and pushed arrays, the same order of ties,
the same errors, and the profiler's counters of the one plan. Explain runs on one thread."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure

N = 40_000  # a split needs at least 2 x 16,384 RecordIds


def sale(i):
    d = {"_id": i, "v": (i * 7919) % 1000, "w": i % 9}
    if i % 13 == 3 and i > N * 9 // 10:
        d["k"] = "late"  # a key first seen in the last part
    elif i % 13 == 2:
        d["k"] = [1.0, 1, 1][min(2, i * 3 // N)]  # spelled 1.0 first, then 1
    elif i % 13:
        d["k"] = f"g{i % 5}"
    return d


@pytest.fixture
def sales(db):
    c = db.sales
    for start in range(0, N, 10_000):
        c.insert_many([sale(i) for i in range(start, min(N, start + 10_000))])
    return c


def expected(docs, key):
    """The groups one thread returns: in order of each key's first appearance, with the
    first spelling of the key."""
    groups = {}
    for d in docs:
        k = key(d)
        g = groups.setdefault(repr(float(k)) if isinstance(k, (int, float)) else repr(k),
                              {"_id": k, "total": 0, "n": 0, "lo": None, "hi": None,
                               "first": d["_id"], "last": None, "ids": []})
        g["total"] += d["v"]
        g["n"] += 1
        g["lo"] = d["v"] if g["lo"] is None else min(g["lo"], d["v"])
        g["hi"] = d["v"] if g["hi"] is None else max(g["hi"], d["v"])
        g["last"] = d["_id"]
        g["ids"].append(d["_id"])
    return list(groups.values())


GROUP = {"$group": {"_id": "$k", "total": {"$sum": "$v"}, "n": {"$sum": 1},
                    "lo": {"$min": "$v"}, "hi": {"$max": "$v"}, "first": {"$first": "$_id"},
                    "last": {"$last": "$_id"}, "ids": {"$push": "$_id"}}}


def test_group_of_a_large_scan_is_one_threads_result(sales, db):
    docs = [sale(i) for i in range(N)]
    want = expected(docs, lambda d: d.get("k"))
    db.command("profile", 2)
    try:
        got = list(sales.aggregate([GROUP]))
    finally:
        db.command("profile", 0)
    assert got == want
    assert [type(g["_id"]) for g in got if g["_id"] == 1] == [float]  # 1.0 came first
    [entry] = db.system.profile.find({"command.aggregate": "sales"})
    assert entry["docsExamined"] == N and entry["keysExamined"] == 0
    assert entry["planSummary"] == "COLLSCAN" and entry["nreturned"] == len(want)

    # A $match goes into the scan's filter; the parts filter alike.
    got = list(sales.aggregate([{"$match": {"w": {"$gte": 4}}}, GROUP]))
    assert got == expected([d for d in docs if d["w"] >= 4], lambda d: d.get("k"))

    # Explain (one thread) counts the same scan.
    ex = db.command({"explain": {"aggregate": "sales", "pipeline": [GROUP], "cursor": {}},
                     "verbosity": "executionStats"})
    cursor = ex["stages"][0]["$cursor"]["executionStats"]
    assert cursor["totalDocsExamined"] == N and cursor["nReturned"] == N


def test_parallel_group_spills_in_input_order(sales, client):
    param = "internalDocumentSourceGroupMaxMemoryBytes"
    before = client.admin.command("getParameter", 1, **{param: 1})[param]
    client.admin.command("setParameter", 1, **{param: 200_000})
    try:
        got = list(sales.aggregate([{"$group": {
            "_id": {"$mod": ["$_id", 3000]}, "total": {"$sum": "$v"}, "n": {"$sum": 1},
            "lo": {"$min": "$v"}, "hi": {"$max": "$v"}, "first": {"$first": "$_id"},
            "last": {"$last": "$_id"}, "ids": {"$push": "$_id"}}}]))
    finally:
        client.admin.command("setParameter", 1, **{param: before})
    want = expected([sale(i) for i in range(N)], lambda d: d["_id"] % 3000)
    assert sorted(got, key=lambda g: g["_id"]) == sorted(want, key=lambda g: g["_id"])


def test_the_first_error_in_input_order_is_reported(sales):
    # Documents 25,000 and 35,000 (in different parts of the scan) both fail to convert.
    bad = {"$cond": [{"$in": ["$_id", [25_000, 35_000]]},
                     {"$concat": ["x", {"$toString": "$_id"}]}, 1]}
    with pytest.raises(OperationFailure) as e:
        list(sales.aggregate([{"$group": {"_id": {"$toInt": bad}}}]))
    assert "x25000" in str(e.value.details["errmsg"])


@pytest.mark.parametrize("memory", [None, 300_000])
def test_parallel_sort_is_one_threads_order(sales, client, db, memory):
    """Ties (`w` has 9 values, `v` 1,000) keep input order; with a low memory limit every
    part spills several runs, which merge in input order."""
    param = "internalQueryMaxBlockingSortMemoryUsageBytes"
    before = client.admin.command("getParameter", 1, **{param: 1})[param]
    if memory:
        client.admin.command("setParameter", 1, **{param: memory})
    docs = [sale(i) for i in range(N)]
    db.command("profile", 2)
    try:
        by_w = list(sales.aggregate([{"$sort": {"w": -1}}], allowDiskUse=True))
        by_v = list(sales.aggregate([{"$match": {"w": {"$lt": 7}}}, {"$sort": {"v": 1, "w": -1}},
                                     {"$project": {"v": 1, "w": 1}}], allowDiskUse=True))
        top = list(sales.aggregate([{"$sort": {"v": -1}}, {"$limit": 25}], allowDiskUse=True))
    finally:
        db.command("profile", 0)
        client.admin.command("setParameter", 1, **{param: before})
    assert by_w == sorted(docs, key=lambda d: -d["w"])  # Python's sort is stable
    want = sorted((d for d in docs if d["w"] < 7), key=lambda d: (d["v"], -d["w"]))
    assert by_v == [{"_id": d["_id"], "v": d["v"], "w": d["w"]} for d in want]
    assert top == sorted(docs, key=lambda d: -d["v"])[:25]
    entries = list(db.system.profile.find({"command.aggregate": "sales"}).sort("ts", 1))
    assert [e["docsExamined"] for e in entries] == [N, N, N]
    assert [e["planSummary"] for e in entries] == ["COLLSCAN"] * 3

    # Explain (one thread) spills as MongoDB's one SORT would.
    if memory:
        client.admin.command("setParameter", 1, **{param: memory})
    try:
        ex = db.command({"explain": {"aggregate": "sales", "pipeline": [{"$sort": {"w": -1}}],
                                     "allowDiskUse": True, "cursor": {}},
                         "verbosity": "executionStats"})
    finally:
        client.admin.command("setParameter", 1, **{param: before})
    stats = ex["stages"][0]["$cursor"]["executionStats"] if "stages" in ex else ex["executionStats"]
    assert stats["totalDocsExamined"] == N and stats["nReturned"] == N
    sort = stats["executionStages"]
    while sort["stage"] != "SORT":
        sort = sort["inputStage"]
    assert sort["usedDisk"] is bool(memory)


def test_parallel_sort_without_disk_use_fails_as_one_thread(sales, client):
    param = "internalQueryMaxBlockingSortMemoryUsageBytes"
    before = client.admin.command("getParameter", 1, **{param: 1})[param]
    client.admin.command("setParameter", 1, **{param: 300_000})
    try:
        with pytest.raises(OperationFailure) as e:
            list(sales.aggregate([{"$sort": {"v": 1}}], allowDiskUse=False))
    finally:
        client.admin.command("setParameter", 1, **{param: before})
    assert e.value.code == 292  # QueryExceededMemoryLimitNoDiskUseAllowed


def test_parallel_sort_honours_max_time_ms(sales):
    with pytest.raises(OperationFailure) as e:
        list(sales.aggregate([{"$sort": {"v": 1}}], allowDiskUse=True, maxTimeMS=1))
    assert e.value.code == 50  # MaxTimeMSExpired
