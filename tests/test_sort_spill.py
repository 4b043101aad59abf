"""A blocking SORT over internalQueryMaxBlockingSortMemoryUsageBytes spills sorted runs to disk
(MongoDB's allowDiskUse, on by default since 6.0) and still returns the right order; with
allowDiskUse: false it fails with QueryExceededMemoryLimitNoDiskUseAllowed (292)."""

from __future__ import annotations

import random

import pytest
from pymongo.errors import OperationFailure

LIMIT = 20_000


@pytest.fixture
def small_sort_memory(client):
    before = client.admin.command("getParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=1)
    client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=LIMIT)
    try:
        yield
    finally:
        client.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=before[
            "internalQueryMaxBlockingSortMemoryUsageBytes"])


@pytest.fixture
def coll(client):
    c = client.t_sort_spill.c
    c.drop()
    rng = random.Random(7)
    docs = [{"_id": i, "k": rng.randrange(50), "pad": "x" * 200} for i in range(600)]
    c.insert_many(docs)
    yield c
    c.drop()


def test_spilled_sort_returns_sorted_results(coll, small_sort_memory):
    got = [(d["k"], d["_id"]) for d in coll.find({}, {"k": 1}).sort("k", 1)]
    want = sorted((d["k"], d["_id"]) for d in coll.find({}, {"k": 1}).hint({"$natural": 1}))
    assert [k for k, _ in got] == [k for k, _ in want]
    # Equal keys keep their input (natural) order across runs, as a stable sort.
    assert got == want
    exp = coll.database.command({"explain": {"find": "c", "sort": {"k": 1}}, "verbosity": "executionStats"})
    sort = exp["executionStats"]["executionStages"]
    assert sort["stage"] == "SORT"
    assert sort["usedDisk"] is True and sort["spills"] > 1
    assert sort["nReturned"] == 600


def test_spilled_top_k_and_descending(coll, small_sort_memory):
    got = [d["_id"] for d in coll.find({}).sort([("k", -1), ("_id", 1)]).limit(250)]
    want = [d["_id"] for d in sorted(coll.find({}).hint({"$natural": 1}), key=lambda d: (-d["k"], d["_id"]))][:250]
    assert got == want


def test_no_disk_use_fails_over_the_limit(coll, small_sort_memory):
    with pytest.raises(OperationFailure) as e:
        list(coll.find({}).sort("k", 1).allow_disk_use(False))
    assert e.value.code == 292
    assert e.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
