"""TTL indexes: the monitor deletes documents whose indexed date is older than
expireAfterSeconds (its own server, with ttlMonitorSleepSecs=1 so a pass comes every second)."""

from __future__ import annotations

import datetime
import time

import pytest

from nidus_harness import NidusServer


@pytest.fixture(scope="module")
def ttl_client(nidus_binary, tmp_path_factory):
    server = NidusServer(dbpath=tmp_path_factory.mktemp("nidus-ttl") / "db", binary=nidus_binary,
                         log_name="nidus-ttl", extra_args=["--setParameter", "ttlMonitorSleepSecs=1"])
    server.start()
    client = server.client()
    yield client
    client.close()
    server.stop()


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_expired_documents_are_deleted(ttl_client):
    coll = ttl_client.ttl.events
    coll.drop()
    coll.create_index("at", expireAfterSeconds=60)
    now = datetime.datetime.now(datetime.timezone.utc)
    old = now - datetime.timedelta(minutes=5)
    coll.insert_many([
        {"_id": "old", "at": old},
        {"_id": "fresh", "at": now},
        {"_id": "old-array", "at": [now, old]},     # the earliest date decides
        {"_id": "fresh-array", "at": [now, now]},
        {"_id": "not-a-date", "at": "2000-01-01"},  # only dates expire
        {"_id": "missing"},
    ])
    passes = ttl_client.admin.command("serverStatus")["metrics"]["ttl"]["passes"]
    assert wait_for(lambda: coll.count_documents({"_id": "old"}) == 0), "the monitor deletes expired documents"
    assert wait_for(lambda: ttl_client.admin.command("serverStatus")["metrics"]["ttl"]["passes"] > passes + 1)
    assert sorted(d["_id"] for d in coll.find()) == ["fresh", "fresh-array", "missing", "not-a-date"]
    assert ttl_client.admin.command("serverStatus")["metrics"]["ttl"]["deletedDocuments"] >= 2


def test_partial_ttl_index_expires_only_its_documents(ttl_client):
    coll = ttl_client.ttl.partial
    coll.drop()
    coll.create_index("at", expireAfterSeconds=0, partialFilterExpression={"kind": "temp"})
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    coll.insert_many([{"_id": 1, "at": old, "kind": "temp"}, {"_id": 2, "at": old, "kind": "keep"}])
    assert wait_for(lambda: coll.count_documents({"_id": 1}) == 0)
    assert [d["_id"] for d in coll.find()] == [2]


def test_disabled_monitor_deletes_nothing(ttl_client):
    coll = ttl_client.ttl.disabled
    coll.drop()
    ttl_client.admin.command("setParameter", 1, ttlMonitorEnabled=False)
    try:
        coll.create_index("at", expireAfterSeconds=0)
        coll.insert_one({"_id": 1, "at": datetime.datetime(2000, 1, 1)})
        time.sleep(2.5)
        assert coll.count_documents({}) == 1
    finally:
        ttl_client.admin.command("setParameter", 1, ttlMonitorEnabled=True)
    assert wait_for(lambda: coll.count_documents({}) == 0)
