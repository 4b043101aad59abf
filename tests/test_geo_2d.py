"""2d indexes (issue 22): flat legacy coordinate pairs, MongoDB's GeoHash keys, `$geoWithin`
(`$box`, `$polygon`, `$center`, `$centerSphere`), legacy `$near`/`$nearSphere` as GEO_NEAR_2D
and `$geoNear` with `spherical: false`.

Cases follow the MongoDB manual's 2d pages (the `contacts` examples of "Create a 2d index",
"Query for locations near a point / within a shape on a flat surface", "Location range" and
"Location precision"; the `$box`, `$polygon`, `$center`, `$centerSphere`, `$near` pages) on
small hand-made data. Every query runs through the 2d index and as a collection scan where
MongoDB allows one (`$geoWithin` needs no index; `$near` does), with the documented result.
"""

from __future__ import annotations

import math

import pytest
from pymongo.errors import OperationFailure, WriteError

CONTACTS = [
    {"_id": 1, "name": "Evander Otylia", "phone": "202-555-0193", "address": [55.5, 42.3]},
    {"_id": 2, "name": "Georgine Lestaw", "phone": "714-555-0107", "address": [-74, 44.74]},
]


@pytest.fixture
def contacts(db):
    db.contacts.insert_many(CONTACTS)
    db.contacts.create_index({"address": "2d"})
    return db.contacts


def names(cur):
    return [d["name"] for d in cur]


def test_create_2d_index_and_list_it(contacts):
    specs = {s["name"]: s.to_dict() for s in contacts.list_indexes()}
    assert specs["address_2d"] == {"v": 2, "key": {"address": "2d"}, "name": "address_2d"}


def test_near_a_point_on_a_flat_surface(contacts):
    q = {"address": {"$near": [-73.92, 40.78], "$maxDistance": 5}}
    assert names(contacts.find(q)) == ["Georgine Lestaw"]
    plan = contacts.find(q).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "GEO_NEAR_2D"
    assert plan["keyPattern"] == {"address": "2d"} and plan["indexName"] == "address_2d"
    # Without a limit every point, nearest first (distances in the index's flat units).
    q = {"address": {"$near": [50, 40]}}
    assert names(contacts.find(q)) == ["Evander Otylia", "Georgine Lestaw"]
    q = {"address": {"$near": [50, 40], "$minDistance": 10}}
    assert names(contacts.find(q)) == ["Georgine Lestaw"]


def test_within_a_shape_on_a_flat_surface(contacts):
    q = {"address": {"$geoWithin": {"$box": [[49, 40], [60, 60]]}}}
    assert names(contacts.find(q)) == ["Evander Otylia"]
    assert names(contacts.find(q).hint({"$natural": 1})) == ["Evander Otylia"]
    plan = contacts.find(q).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "FETCH" and plan["inputStage"]["stage"] == "IXSCAN"
    ixscan = plan["inputStage"]
    assert ixscan["keyPattern"] == {"address": "2d"}
    bounds = ixscan["indexBounds"]["address"]
    assert bounds and all(b.startswith("[BinData(128, ") and b.endswith(")]") for b in bounds)


PLACES = [
    {"_id": 1, "loc": [0, 0]},
    {"_id": 2, "loc": [3, 3]},
    {"_id": 3, "loc": [5, 5]},
    {"_id": 4, "loc": {"x": 1, "y": 4}},
    {"_id": 5, "loc": [[50, 50], [-74, 40.74]]},  # several locations: any of them counts
    {"_id": 6, "loc": [-88.1, 30.05]},
    {"_id": 7, "name": "no location"},
    {"_id": 8, "loc": [180, -180]},  # max is inside the range
]

WITHIN_CASES = [
    ("box", {"loc": {"$geoWithin": {"$box": [[0, 0], [100, 100]]}}}, [1, 2, 3, 4, 5]),
    ("box corners any order", {"loc": {"$geoWithin": {"$box": [[3, 3], [0, 0]]}}}, [1, 2]),
    ("polygon", {"loc": {"$geoWithin": {"$polygon": [[0, 0], [3, 6], [6, 0]]}}}, [1, 2]),
    ("center", {"loc": {"$geoWithin": {"$center": [[-74, 40.74], 10]}}}, [5]),
    ("center small", {"loc": {"$geoWithin": {"$center": [[0, 0], 4.3]}}}, [1, 2, 4]),
    ("centerSphere 10 miles", {"loc": {"$geoWithin": {"$centerSphere": [[-88, 30], 10 / 3963.2]}}}, [6]),
    ("within alias", {"loc": {"$within": {"$box": [[2, 2], [6, 6]]}}}, [2, 3]),
    ("box and equality", {"loc": {"$geoWithin": {"$box": [[0, 0], [100, 100]]}}, "_id": {"$gt": 2}}, [3, 4, 5]),
]


@pytest.fixture
def places(db):
    db.places.insert_many(PLACES)
    return db.places


@pytest.mark.parametrize("name,flt,expected", WITHIN_CASES, ids=[c[0] for c in WITHIN_CASES])
def test_within_indexed_and_scanned(places, name, flt, expected):
    assert sorted(d["_id"] for d in places.find(flt)) == expected
    places.create_index({"loc": "2d"})
    assert sorted(d["_id"] for d in places.find(flt)) == expected
    assert sorted(d["_id"] for d in places.find(flt).hint("loc_2d")) == expected
    assert sorted(d["_id"] for d in places.find(flt).hint({"$natural": 1})) == expected
    plan = places.find(flt).hint("loc_2d").explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "FETCH" and plan["inputStage"]["stage"] == "IXSCAN"


def test_explain_bounds_are_geohash_ranges(db):
    db.c.create_index({"loc": "2d"})
    db.c.insert_one({"loc": [0, 0]})
    q = {"loc": {"$geoWithin": {"$box": [[0.5, 0.5], [10, 20]]}}}
    ixscan = db.c.find(q).explain()["queryPlanner"]["winningPlan"]["inputStage"]
    bounds = ixscan["indexBounds"]["loc"]
    # At most 16 cells (MongoDB's internalGeoPredicateQuery2DMaxCoveringCells), as ordered,
    # disjoint key ranges of 8-byte GeoHashes.
    assert 1 <= len(bounds) <= 16
    ranges = []
    for b in bounds:
        lo, hi = b[1:-1].split(", BinData")
        lo = int(lo.removeprefix("BinData(128, ").removesuffix(")"), 16)
        hi = int(hi.removeprefix("(128, ").removesuffix(")"), 16)
        ranges.append((lo, hi))
    assert all(lo <= hi for lo, hi in ranges)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))
    # The query's interior point (5, 10) lies in a range: x = 5 and y = 10 on the default
    # grid, 26 bits each, interleaved x first from the top of the 64-bit hash.
    def grid(v):
        return int((v + 180) * (2**32 / 360)) >> 6 << 6

    x, y = grid(5), grid(10)
    h = 0
    for i in range(32):
        h |= ((x >> (31 - i)) & 1) << (63 - 2 * i)
        h |= ((y >> (31 - i)) & 1) << (63 - 2 * i - 1)
    assert any(lo <= h <= hi for lo, hi in ranges)
    # With no maxDistance a $near scans the whole index.
    plan = db.c.find({"loc": {"$near": [0, 0]}}).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "GEO_NEAR_2D"


def test_near_sorts_by_flat_distance(places):
    places.create_index({"loc": "2d"})
    here = [1, 1]

    def dist(d):
        locs = d["loc"]
        pts = [locs] if not isinstance(locs, list) or not isinstance(locs[0], list) else locs
        pts = [[p["x"], p["y"]] if isinstance(p, dict) else p for p in pts]
        return min(math.dist(here, p) for p in pts)

    got = list(places.find({"loc": {"$near": here}}))
    assert [d["_id"] for d in got] == [1, 2, 4, 3, 5, 6, 8]
    ds = [dist(d) for d in got]
    assert ds == sorted(ds)
    assert [d["_id"] for d in places.find({"loc": {"$near": here, "$maxDistance": 3}})] == [1, 2, 4]
    assert [d["_id"] for d in places.find({"loc": {"$near": here}}).limit(2)] == [1, 2]


def test_near_sphere_on_a_2d_index_uses_radians(places):
    places.create_index({"loc": "2d"})
    q = {"loc": {"$nearSphere": [-88, 30], "$maxDistance": 10 / 3963.2}}
    assert [d["_id"] for d in places.find(q)] == [6]
    assert places.find(q).explain()["queryPlanner"]["winningPlan"]["stage"] == "GEO_NEAR_2D"


def test_near_needs_a_2d_index_for_legacy_points(places):
    with pytest.raises(OperationFailure) as e:
        list(places.find({"loc": {"$near": [0, 0]}}))
    assert e.value.code == 291
    places.create_index({"loc": "2d"})
    # A GeoJSON point makes a spherical (wrapping) query a 2d index cannot answer.
    with pytest.raises(OperationFailure) as e:
        list(places.find({"loc": {"$near": {"$geometry": {"type": "Point", "coordinates": [0, 0]}}}}))
    assert e.value.code == 291


def test_geo_near_stage_flat(places):
    places.create_index({"loc": "2d"})
    out = list(places.aggregate([{"$geoNear": {
        "near": [1, 1], "distanceField": "dist", "spherical": False, "maxDistance": 4,
        "includeLocs": "where"}}]))
    assert [d["_id"] for d in out] == [1, 2, 4]
    assert [d["dist"] for d in out] == pytest.approx([math.sqrt(2), math.sqrt(8), 3.0])
    assert out[2]["where"] == {"x": 1, "y": 4}
    out = list(places.aggregate([{"$geoNear": {
        "near": [1, 1], "distanceField": "dist", "query": {"_id": {"$gte": 3}}, "key": "loc"}},
        {"$limit": 2}]))
    assert [d["_id"] for d in out] == [4, 3]


def test_location_range(db):
    db.c.create_index({"loc": "2d"}, min=-75, max=60)
    specs = {s["name"]: s.to_dict() for s in db.c.list_indexes()}
    assert specs["loc_2d"] == {"v": 2, "key": {"loc": "2d"}, "name": "loc_2d", "min": -75, "max": 60}
    db.c.insert_one({"_id": 1, "loc": [60, -75]})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 2, "loc": [61, 0]})
    assert e.value.code == 13027
    assert e.value.details["errmsg"] == "point not in interval of [ -75, 60 ] :: caused by :: { _id: 2, loc: [ 61, 0 ] }"
    assert db.c.count_documents({}) == 1


def test_default_range_refuses_points_outside(db):
    db.c.create_index({"loc": "2d"})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 1, "loc": [200, 200]})
    assert e.value.code == 13027
    assert e.value.details["errmsg"].startswith("point not in interval of [ -180, 180 ]")


def test_location_precision_bits(db):
    db.c.create_index({"loc": "2d"}, bits=32)
    db.c.insert_many([{"_id": 1, "loc": [1e-7, 1e-7]}, {"_id": 2, "loc": [-1e-7, -1e-7]}])
    q = {"loc": {"$geoWithin": {"$box": [[0, 0], [1e-6, 1e-6]]}}}
    assert [d["_id"] for d in db.c.find(q)] == [1]
    db.c2.create_index({"loc": "2d"}, bits=1)
    db.c2.insert_many([{"_id": 1, "loc": [10, 10]}, {"_id": 2, "loc": [-10, -10]}])
    assert [d["_id"] for d in db.c2.find(q)] == []
    assert [d["_id"] for d in db.c2.find({"loc": {"$near": [9, 9]}})] == [1, 2]


@pytest.mark.parametrize("doc,code,msg", [
    ({"_id": 1, "loc": [1]}, 13068, "geo field only has 1 element :: caused by :: { _id: 1, loc: [ 1 ] }"),
    ({"_id": 1, "loc": [1, "x"]}, 13026,
     "geo values must be 'legacy coordinate pairs' for 2d indexes :: caused by :: { _id: 1, loc: [ 1, \"x\" ] }"),
    ({"_id": 1, "loc": {"type": "Point", "coordinates": [1, 1]}}, 16804,
     "location object expected, location array not in correct format"),
    ({"_id": 1, "loc": [[1, 1], 5]}, 16804, "location object expected, location array not in correct format"),
])
def test_bad_locations_are_refused(db, doc, code, msg):
    db.c.create_index({"loc": "2d"})
    with pytest.raises(WriteError) as e:
        db.c.insert_one(doc)
    assert e.value.code == code
    assert e.value.details["errmsg"] == msg
    # Values that hold no location are not indexed, not refused.
    db.c.insert_many([{"loc": None}, {"loc": "here"}, {"loc": []}, {"other": 1}])
    assert db.c.count_documents({}) == 4


@pytest.mark.parametrize("key,opts,code,msg", [
    ({"loc": "2d"}, {"bits": 0}, 72, "bits for hash must be > 0 and <= 32, but 0 bits were specified"),
    ({"loc": "2d"}, {"bits": 33}, 72, "bits for hash must be > 0 and <= 32, but 33 bits were specified"),
    ({"loc": "2d"}, {"min": 10, "max": 10}, 72,
     "region for hash must be valid and have positive area, but [10, 10] was specified"),
    ({"a": 1, "loc": "2d"}, {}, 16801, "2d has to be first in index"),
    ({"loc": "2d", "b": "2d"}, {}, 16800, "can't have 2 geo fields"),
    ({"loc": "2d", "b": "2dsphere"}, {}, 67, "Can't use more than one index plugin for a single index."),
])
def test_bad_index_specs(db, key, opts, code, msg):
    with pytest.raises(OperationFailure) as e:
        db.c.create_index(list(key.items()), **opts)
    assert e.value.code == code
    assert msg in str(e.value.details.get("errmsg"))


def test_compound_2d_index(db):
    db.c.create_index([("loc", "2d"), ("type", 1)])
    db.c.insert_many([
        {"_id": 1, "loc": [1, 1], "type": "cafe"},
        {"_id": 2, "loc": [2, 2], "type": ["bar", "cafe"]},
        {"_id": 3, "loc": [3, 3], "type": "bar"},
        {"_id": 4, "loc": [50, 50], "type": "cafe"},
    ])
    q = {"loc": {"$geoWithin": {"$box": [[0, 0], [10, 10]]}}, "type": "cafe"}
    assert sorted(d["_id"] for d in db.c.find(q)) == [1, 2]
    assert [d["_id"] for d in db.c.find({"loc": {"$near": [0, 0]}, "type": "bar"})] == [2, 3]
    got = list(db.c.find(q, {"_id": 0, "type": 1}).sort("_id", 1))
    assert got == [{"type": "cafe"}, {"type": ["bar", "cafe"]}]
    plan = db.c.find(q).explain()["queryPlanner"]["winningPlan"]
    assert plan["inputStage"]["indexBounds"]["type"] == ["[MinKey, MaxKey]"]


def test_index_build_over_bad_points_fails(db):
    db.c.insert_many([{"loc": [1, 1]}, {"loc": [500, 0]}])
    with pytest.raises(OperationFailure) as e:
        db.c.create_index({"loc": "2d"})
    assert e.value.code == 13027
    assert [s["name"] for s in db.c.list_indexes()] == ["_id_"]
