"""Time-series collections as MongoDB 8.0 shows them: `create` with `timeseries` (and its
validation errors), the `timeseries` view entry and the `system.buckets` collection in
listCollections, measurements stored in bucket documents (control min/max, meta, data
columns), queries and aggregations over the unpacked measurements (the manual's weather
example), predicates on the metaField and the time field pushed into the bucket scan,
secondary indexes translated to bucket keys, deletes and updates of measurements, and TTL."""

from __future__ import annotations

import datetime
import time

import pytest
from bson import Int64
from pymongo.errors import BulkWriteError, OperationFailure

from nidus_harness import NidusServer

UTC = datetime.timezone.utc


def d(*args):
    return datetime.datetime(*args)


# The manual's weather data ("Time Series" tutorial).
WEATHER = [
    {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": d(2021, 5, 18, h), "temp": t}
    for h, t in [(0, 12), (4, 11), (8, 11), (12, 12), (16, 16), (20, 15)]
] + [
    {"metadata": {"sensorId": 5578, "type": "temperature"}, "timestamp": d(2021, 5, 19, h), "temp": t}
    for h, t in [(0, 13), (4, 12), (8, 11), (12, 12), (16, 17), (20, 12)]
]

WEATHER_OPTIONS = {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"}

# (timeseries option, extra create fields, error code, message) as MongoDB 8.0 replies.
CREATE_ERRORS = [
    ({}, {}, 40414, "BSON field 'create.timeseries.timeField' is missing but a required field"),
    ({"timeField": 1}, {}, 14, None),
    ({"timeField": "t", "foo": 1}, {}, 40415, "BSON field 'create.timeseries.foo' is an unknown field."),
    ({"timeField": "t", "granularity": "days"}, {}, 2,
     "Enumeration value 'days' for field 'create.timeseries.granularity' is not a valid value."),
    ({"timeField": "t", "metaField": "t"}, {}, 72, "'metaField' cannot be the same as 'timeField'"),
    ({"timeField": "t", "metaField": "_id"}, {}, 72, "'metaField' cannot be \"_id\""),
    ({"timeField": "a.b"}, {}, 72, None),
    ({"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 100}, {}, 72,
     "Time-series 'bucketMaxSpanSeconds' cannot be set to a value other than the default of 3600 for the provided granularity"),
    ({"timeField": "t", "granularity": "minutes", "bucketRoundingSeconds": 60}, {}, 72,
     "Time-series 'bucketRoundingSeconds' cannot be set alongside the granularity parameter"),
    ({"timeField": "t", "bucketMaxSpanSeconds": 100}, {}, 72,
     "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"),
    ({"timeField": "t", "bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 50}, {}, 72,
     "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"),
    ({"timeField": "t", "bucketMaxSpanSeconds": 0, "bucketRoundingSeconds": 0}, {}, 51024, None),
    ({"timeField": "$t"}, {}, 2, "The 'timeField' or 'metaField' cannot start with '$'"),
    ({"timeField": "t"}, {"capped": True, "size": 100}, 72, None),
    ({"timeField": "t"}, {"validator": {"a": 1}}, 72, None),
]


@pytest.mark.parametrize("ts,extra,code,message", CREATE_ERRORS)
def test_create_errors(db, ts, extra, code, message):
    with pytest.raises(OperationFailure) as e:
        db.command({"create": "w", "timeseries": ts, **extra})
    assert e.value.code == code, e.value.details
    if message is not None:
        assert e.value.details["errmsg"] == message
    assert db.list_collection_names() == []


# (timeseries option as given, as listCollections shows it)
OPTION_CASES = [
    ({"timeField": "t"}, {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}),
    ({"timeField": "t", "metaField": "m", "granularity": "minutes"},
     {"timeField": "t", "metaField": "m", "granularity": "minutes", "bucketMaxSpanSeconds": 86400}),
    ({"timeField": "t", "granularity": "hours"},
     {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2592000}),
    ({"timeField": "t", "bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 100},
     {"timeField": "t", "bucketRoundingSeconds": 100, "bucketMaxSpanSeconds": 100}),
]


@pytest.mark.parametrize("given,shown", OPTION_CASES)
def test_list_collections(db, given, shown):
    db.command({"create": "w", "timeseries": given, "expireAfterSeconds": 600})
    infos = {c["name"]: c for c in db.list_collections()}
    assert set(infos) == {"w", "system.buckets.w"}
    assert infos["w"]["type"] == "timeseries"
    assert infos["w"]["options"] == {"timeseries": shown, "expireAfterSeconds": Int64(600)}
    assert infos["w"]["info"] == {"readOnly": False}
    assert list(infos["w"]["options"]["timeseries"]) == list(shown)
    buckets = infos["system.buckets.w"]
    assert buckets["type"] == "collection"
    assert buckets["options"]["clusteredIndex"] is True
    assert buckets["options"]["timeseries"] == shown
    assert [c["name"] for c in db.list_collections(filter={"type": "timeseries"})] == ["w"]
    # Re-creating with the same options succeeds.
    db.command({"create": "w", "timeseries": given, "expireAfterSeconds": 600})


@pytest.fixture
def weather(db):
    db.create_collection("weather", timeseries=WEATHER_OPTIONS)
    db.weather.insert_many(WEATHER)
    return db.weather


def test_weather_queries(weather, db):
    doc = weather.find_one({"timestamp": d(2021, 5, 18)})
    # Unpacked: the time field, the metaField, then the data columns in the order the
    # measurement had them (pymongo puts the `_id` it generates first).
    assert list(doc) == ["timestamp", "metadata", "_id", "temp"]
    assert {k: v for k, v in doc.items() if k != "_id"} == {
        "timestamp": d(2021, 5, 18), "metadata": {"sensorId": 5578, "type": "temperature"}, "temp": 12}
    assert weather.count_documents({}) == 12
    assert weather.count_documents({"temp": {"$gte": 15}}) == 3
    got = list(weather.aggregate([
        {"$project": {"date": {"$dateToParts": {"date": "$timestamp"}}, "temp": 1}},
        {"$group": {"_id": {"date": {"year": "$date.year", "month": "$date.month", "day": "$date.day"}},
                    "avgTmp": {"$avg": "$temp"}}},
        {"$sort": {"_id.date.day": 1}},
    ]))
    assert got == [
        {"_id": {"date": {"year": 2021, "month": 5, "day": 18}}, "avgTmp": 12.833333333333334},
        {"_id": {"date": {"year": 2021, "month": 5, "day": 19}}, "avgTmp": 12.833333333333334},
    ]
    assert [x["temp"] for x in weather.find({"timestamp": {"$gte": d(2021, 5, 19, 12)}}).sort("timestamp", 1)] \
        == [12, 17, 12]
    assert weather.distinct("metadata.type") == ["temperature"]


def test_bucket_documents(weather, db):
    (bucket,) = list(db["system.buckets.weather"].find())
    # granularity hours: buckets round down to the day and span 30 days.
    assert bucket["control"]["version"] == 1
    assert bucket["control"]["min"]["timestamp"] == d(2021, 5, 18)
    assert bucket["control"]["max"]["timestamp"] == d(2021, 5, 19, 20)
    assert bucket["control"]["min"]["temp"] == 11 and bucket["control"]["max"]["temp"] == 17
    assert bucket["meta"] == {"sensorId": 5578, "type": "temperature"}
    assert bucket["data"]["temp"] == {str(i): w["temp"] for i, w in enumerate(WEATHER)}
    assert bucket["_id"].generation_time == datetime.datetime(2021, 5, 18, tzinfo=UTC)
    assert "metadata" not in bucket["data"]


def test_buckets_split_by_meta_and_span(db):
    db.create_collection("w", timeseries={"timeField": "t", "metaField": "m"})
    base = d(2024, 1, 1, 10, 0, 30)
    db.w.insert_many([
        {"t": base, "m": "a", "v": 1},
        {"t": base + datetime.timedelta(minutes=30), "m": "a", "v": 2},
        {"t": base, "m": "b", "v": 3},
        {"t": base + datetime.timedelta(hours=2), "m": "a", "v": 4},  # outside a's first span
    ])
    buckets = list(db["system.buckets.w"].find().sort("_id", 1))
    assert sorted((b["meta"], len(b["data"]["v"])) for b in buckets) == [("a", 1), ("a", 2), ("b", 1)]
    for b in buckets:
        # seconds granularity: rounded down to the minute.
        assert b["control"]["min"]["t"].second == 0
    assert sorted(x["v"] for x in db.w.find()) == [1, 2, 3, 4]
    assert sorted(x["v"] for x in db.w.find({"m": "a"})) == [1, 2, 4]


def test_explain_pushes_meta_and_time_into_the_bucket_scan(weather):
    explain = weather.find({"metadata.sensorId": 5578, "timestamp": {"$gte": d(2021, 5, 19)}}).explain()
    stages = explain["stages"]
    names = [next(iter(s)) for s in stages]
    assert names[:2] == ["$cursor", "$_internalUnpackBucket"]
    query = str(stages[0]["$cursor"]["queryPlanner"]["parsedQuery"])
    assert "meta.sensorId" in query and "control.max.timestamp" in query
    unpack = stages[1]["$_internalUnpackBucket"]
    assert unpack["timeField"] == "timestamp" and unpack["metaField"] == "metadata"
    assert unpack["bucketMaxSpanSeconds"] == 2592000
    assert "eventFilter" in unpack
    assert len(list(weather.find({"metadata.sensorId": 5578, "timestamp": {"$gte": d(2021, 5, 19)}}))) == 6
    assert list(weather.find({"metadata.sensorId": 1})) == []


def test_secondary_indexes(weather, db):
    assert [i["key"] for i in weather.list_indexes()] == [{"metadata": 1, "timestamp": 1}]
    weather.create_index([("metadata.sensorId", 1), ("timestamp", -1)])
    keys = [dict(i["key"]) for i in weather.list_indexes()]
    assert keys == [{"metadata": 1, "timestamp": 1}, {"metadata.sensorId": 1, "timestamp": -1}]
    bucket_keys = [dict(i["key"]) for i in db["system.buckets.weather"].list_indexes()]
    assert {"meta.sensorId": 1, "control.max.timestamp": -1, "control.min.timestamp": -1} in bucket_keys
    plan = str(weather.find({"metadata.sensorId": 5578}).explain())
    assert "IXSCAN" in plan
    weather.drop_index("metadata.sensorId_1_timestamp_-1")
    assert len(list(weather.list_indexes())) == 1


def test_insert_errors(db):
    db.create_collection("w", timeseries={"timeField": "t"})
    with pytest.raises(BulkWriteError) as e:
        db.w.insert_many([{"t": d(2024, 1, 1), "v": 1}, {"v": 2}, {"t": "x"}, {"t": d(2024, 1, 2)}],
                         ordered=False)
    errors = e.value.details["writeErrors"]
    assert [(x["index"], x["code"]) for x in errors] == [(1, 2), (2, 2)]
    assert errors[0]["errmsg"] == "'t' must be present and contain a valid BSON UTC datetime value"
    assert e.value.details["nInserted"] == 2
    assert db.w.count_documents({}) == 2


def test_deletes(weather, db):
    assert weather.delete_many({"temp": {"$gte": 15}}).deleted_count == 3
    assert weather.count_documents({}) == 9
    assert weather.delete_one({"temp": 12}).deleted_count == 1
    assert weather.count_documents({"temp": 12}) == 4
    assert weather.delete_many({"metadata.sensorId": 5578}).deleted_count == 8
    assert db["system.buckets.weather"].count_documents({}) == 0
    weather.insert_one({"metadata": {"sensorId": 1}, "timestamp": d(2021, 5, 18), "temp": 1})
    assert [x["temp"] for x in weather.find()] == [1]


def test_updates(weather, db):
    r = weather.update_many({"metadata.sensorId": 5578}, {"$set": {"metadata.type": "t"}})
    assert (r.matched_count, r.modified_count) == (12, 12)
    assert weather.distinct("metadata.type") == ["t"]
    assert db["system.buckets.weather"].distinct("meta.type") == ["t"]
    r = weather.update_many({"temp": {"$gt": 15}}, {"$inc": {"temp": 100}})
    assert (r.matched_count, r.modified_count) == (2, 2)
    assert sorted(x["temp"] for x in weather.find({"temp": {"$gt": 100}})) == [116, 117]
    assert weather.count_documents({}) == 12
    with pytest.raises(OperationFailure) as e:
        weather.update_one({"temp": 11}, {"$set": {"timestamp": "soon"}})
    assert e.value.code == 2


def test_drop(weather, db):
    weather.drop()
    assert db.list_collection_names() == []


@pytest.fixture(scope="module")
def ttl_client(nidus_binary, tmp_path_factory):
    server = NidusServer(dbpath=tmp_path_factory.mktemp("nidus-ts-ttl") / "db", binary=nidus_binary,
                         log_name="nidus-ts-ttl", extra_args=["--setParameter", "ttlMonitorSleepSecs=1"])
    server.start()
    client = server.client()
    yield client
    client.close()
    server.stop()


def test_ttl_expires_whole_buckets(ttl_client):
    db = ttl_client.ts_ttl
    db.w.drop()
    db.create_collection("w", timeseries={"timeField": "t", "metaField": "m"}, expireAfterSeconds=60)
    now = datetime.datetime.now(UTC)
    db.w.insert_many([
        {"t": now - datetime.timedelta(days=1), "m": "old"},
        {"t": now, "m": "fresh"},
    ])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and db.w.count_documents({"m": "old"}):
        time.sleep(0.2)
    assert [x["m"] for x in db.w.find()] == ["fresh"]


def test_replicated_to_secondaries(rs):
    """The buckets collection, the view and the bucket writes go through the oplog: a
    secondary lists the time-series collection and reads the same measurements."""
    from pymongo import MongoClient

    from nidus_harness import wait_until

    rs.initiate(priorities=[3, 2, 1], settings={"electionTimeoutMillis": 2000,
                                                "heartbeatIntervalMillis": 500})
    primary = rs.wait_for_primary(30)
    with MongoClient(rs.uri(serverSelectionTimeoutMS=15000)) as c:
        c.ts.create_collection("weather", timeseries=WEATHER_OPTIONS)
        c.ts.weather.insert_many(WEATHER)
        c.ts.weather.delete_many({"temp": {"$gte": 16}})
        c.ts.create_collection("cl", clusteredIndex={"key": {"_id": 1}, "unique": True})
        c.ts.cl.insert_many([{"_id": 3}, {"_id": 1}, {"_id": 2}])
        want = sorted(x["temp"] for x in c.ts.weather.find())
    secondary = next(m for m in rs.members if m is not primary)
    with secondary.client(readPreference="secondaryPreferred") as s:
        wait_until(lambda: sorted(x["temp"] for x in s.ts.weather.find()) == want, 20,
                   "the secondary's measurements")
        # `cl` was created after the measurements' writes: the secondary may apply it later.
        types = {"weather": "timeseries", "system.buckets.weather": "collection",
                 "cl": "collection"}
        wait_until(lambda: {x["name"]: x["type"] for x in s.ts.list_collections()} == types,
                   20, "the secondary's collections")
        wait_until(lambda: [x["_id"] for x in s.ts.cl.find()] == [1, 2, 3], 20,
                   "the secondary's clustered collection in _id order")


def test_buckets_reopen_after_restart(start_nidus):
    """After a restart (the open buckets are in memory only) a measurement joins the stored
    bucket of its meta value when its time fits the bucket's span and the bucket has room,
    as MongoDB's bucket reopening does; one outside every stored span opens a new bucket."""
    server = start_nidus()
    base = d(2024, 1, 1, 10, 0, 0)
    minute = datetime.timedelta(minutes=1)
    with server.client() as c:
        db = c.ts
        db.create_collection("w", timeseries={"timeField": "t", "metaField": "m"})
        db.create_collection("nometa", timeseries={"timeField": "t"})
        db.w.insert_many([{"t": base + i * minute, "m": m, "v": i} for i in range(3) for m in "ab"])
        db.nometa.insert_many([{"t": base + i * minute, "v": i} for i in range(3)])
        assert db["system.buckets.w"].count_documents({}) == 2
    server.stop()
    server.restart()
    with server.client() as c:
        db = c.ts
        db.w.insert_many([{"t": base + (10 + i) * minute, "m": m, "v": 10 + i}
                          for i in range(3) for m in "ab"])
        # An earlier time in the same span also fits (the bucket's start stays its start).
        db.w.insert_one({"t": base + 30 * datetime.timedelta(seconds=1), "m": "a", "v": 99})
        db.nometa.insert_one({"t": base + 20 * minute, "v": 20})
        buckets = list(db["system.buckets.w"].find().sort("meta", 1))
        assert [(b["meta"], len(b["data"]["v"])) for b in buckets] == [("a", 7), ("b", 6)]
        assert buckets[0]["control"]["min"]["t"] == base
        assert buckets[0]["control"]["max"]["t"] == base + 12 * minute
        assert db["system.buckets.nometa"].count_documents({}) == 1
        assert sorted(x["v"] for x in db.nometa.find()) == [0, 1, 2, 20]
        assert sorted(x["v"] for x in db.w.find({"m": "a"})) == [0, 1, 2, 10, 11, 12, 99]
        # A delete clears the open buckets too: later measurements still find theirs.
        db.w.delete_one({"v": 99})
        db.w.insert_one({"t": base + 40 * minute, "m": "a", "v": 40})
        assert db["system.buckets.w"].count_documents({}) == 2
        # Outside the span (seconds granularity: one hour) a new bucket opens.
        db.w.insert_one({"t": base + 2 * datetime.timedelta(hours=1), "m": "a", "v": 120})
        assert db["system.buckets.w"].count_documents({"meta": "a"}) == 2
        assert sorted(x["v"] for x in db.w.find({"m": "a"})) == [0, 1, 2, 10, 11, 12, 40, 120]
