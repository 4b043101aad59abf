"""Geospatial queries and 2dsphere indexes (issue 22).

Cases follow the MongoDB manual's geospatial pages (the `places` examples of `$near`,
`$nearSphere` and `$geoNear`, the restaurants/neighborhoods tutorial's shapes, the `$box`,
`$polygon`, `$center`, `$centerSphere` pages) on small hand-made data. Every query runs
twice, through the 2dsphere index and as a collection scan (`hint: {$natural: 1}`), and both
must return the documented result. Distances are checked against an independent haversine
with MongoDB's earth radius (6378.1 km).
"""

from __future__ import annotations

import math

import pytest
from pymongo.errors import OperationFailure, WriteError

EARTH_RADIUS_M = 6378.1 * 1000


def meters(a, b):
    """Great-circle distance between [lng, lat] points (haversine)."""
    (lng1, lat1), (lng2, lat2) = [(math.radians(x), math.radians(y)) for x, y in (a, b)]
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lng2 - lng1) / 2) ** 2
    return 2 * math.asin(math.sqrt(h)) * EARTH_RADIUS_M


def pt(x, y):
    return {"type": "Point", "coordinates": [x, y]}


PLACES = [
    {"_id": 1, "name": "Central Park", "location": pt(-73.97, 40.77), "category": "Parks"},
    {"_id": 2, "name": "Sara D. Roosevelt Park", "location": pt(-73.9928, 40.7193), "category": "Parks"},
    {"_id": 3, "name": "Polo Grounds", "location": pt(-73.9375, 40.8303), "category": "Stadiums"},
]

SQUARE = [[[-74.0, 40.7], [-73.9, 40.7], [-73.9, 40.8], [-74.0, 40.8], [-74.0, 40.7]]]
HOLE = [[-73.96, 40.76], [-73.94, 40.76], [-73.94, 40.78], [-73.96, 40.78], [-73.96, 40.76]]

# Shapes of the restaurants/neighborhoods tutorial: neighborhoods are polygons, restaurants
# points (GeoJSON and legacy pairs), one street a LineString.
NEIGHBORHOODS_AND_RESTAURANTS = [
    {"_id": "n1", "geometry": {"type": "Polygon", "coordinates": SQUARE}},
    {"_id": "n2", "geometry": {"type": "Polygon", "coordinates": [
        [[-73.9, 40.7], [-73.8, 40.7], [-73.8, 40.8], [-73.9, 40.8], [-73.9, 40.7]]]}},
    {"_id": "r1", "geometry": pt(-73.95, 40.75)},
    {"_id": "r2", "geometry": pt(-73.95, 40.77)},    # inside HOLE
    {"_id": "r3", "geometry": pt(-73.85, 40.75)},
    {"_id": "r4", "geometry": [-73.99, 40.71]},       # legacy pair
    {"_id": "r5", "geometry": {"lng": -73.5, "lat": 40.5}},  # legacy document pair
    {"_id": "s1", "geometry": {"type": "LineString", "coordinates": [[-73.98, 40.65], [-73.98, 40.72]]}},
    {"_id": "m1", "geometry": {"type": "MultiPoint", "coordinates": [[-73.2, 40.2], [-73.97, 40.79]]}},
    {"_id": "g1", "geometry": {"type": "GeometryCollection", "geometries": [
        pt(10, 10), {"type": "LineString", "coordinates": [[-73.7, 40.9], [-73.6, 40.9]]}]}},
    {"_id": "x1", "name": "no geometry"},
]

QUERY_CASES = [
    ("within polygon", {"geometry": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": SQUARE}}}},
     ["n1", "r1", "r2", "r4"]),
    ("within polygon with hole",
     {"geometry": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": SQUARE + [HOLE]}}}},
     ["r1", "r4"]),
    ("within multipolygon", {"geometry": {"$geoWithin": {"$geometry": {"type": "MultiPolygon", "coordinates": [
        SQUARE, [[[-73.9, 40.7], [-73.8, 40.7], [-73.8, 40.8], [-73.9, 40.8], [-73.9, 40.7]]]]}}}},
     ["n1", "n2", "r1", "r2", "r3", "r4"]),
    ("intersects point", {"geometry": {"$geoIntersects": {"$geometry": pt(-73.93, 40.75)}}}, ["n1"]),
    ("intersects polygon", {"geometry": {"$geoIntersects": {"$geometry": {"type": "Polygon", "coordinates": [
        [[-73.99, 40.69], [-73.97, 40.69], [-73.97, 40.71], [-73.99, 40.71], [-73.99, 40.69]]]}}}},
     ["n1", "r4", "s1"]),
    ("intersects line", {"geometry": {"$geoIntersects": {"$geometry": {"type": "LineString", "coordinates": [
        [-73.65, 40.85], [-73.65, 40.95]]}}}}, ["g1"]),
    ("centerSphere 5 miles", {"geometry": {"$geoWithin": {"$centerSphere": [[-73.95, 40.75], 5 / 3963.2]}}},
     ["n1", "r1", "r2", "r4"]),  # r3 and one end of s1 lie 8.4 and 11.4 km away
    ("within and equality", {"geometry": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": SQUARE}}},
                             "_id": {"$in": ["r1", "n1"]}}, ["n1", "r1"]),
]


@pytest.fixture
def areas(db):
    db.areas.insert_many(NEIGHBORHOODS_AND_RESTAURANTS)
    return db.areas


@pytest.mark.parametrize("name,flt,expected", QUERY_CASES, ids=[c[0] for c in QUERY_CASES])
def test_geo_queries_indexed_and_scanned(areas, name, flt, expected):
    scanned = sorted(d["_id"] for d in areas.find(flt))
    assert scanned == sorted(expected)
    areas.create_index([("geometry", "2dsphere")])
    indexed = sorted(d["_id"] for d in areas.find(flt))
    assert indexed == sorted(expected)
    assert sorted(d["_id"] for d in areas.find(flt).hint({"$natural": 1})) == sorted(expected)
    plan = areas.find(flt).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "FETCH" and plan["inputStage"]["stage"] == "IXSCAN"
    if "_id" not in flt:
        assert plan["inputStage"]["indexName"] == "geometry_2dsphere"


LEGACY = [
    {"_id": 1, "loc": [0, 0]},
    {"_id": 2, "loc": [3, 3]},
    {"_id": 3, "loc": [5, 5]},
    {"_id": 4, "loc": {"x": 1, "y": 4}},
    {"_id": 5, "loc": pt(1, 1)},  # GeoJSON: flat legacy shapes hold legacy pairs only
]

LEGACY_CASES = [
    ("box", {"loc": {"$geoWithin": {"$box": [[0, 0], [3, 3]]}}}, [1, 2]),
    ("polygon", {"loc": {"$geoWithin": {"$polygon": [[0, 0], [0, 5], [5, 0]]}}}, [1, 4]),
    ("center", {"loc": {"$geoWithin": {"$center": [[0, 0], 4.3]}}}, [1, 2, 4]),
    ("within alias", {"loc": {"$within": {"$box": [[2, 2], [6, 6]]}}}, [2, 3]),
    ("centerSphere", {"loc": {"$geoWithin": {"$centerSphere": [[0, 0], math.radians(1.5)]}}}, [1, 5]),
]


@pytest.mark.parametrize("name,flt,expected", LEGACY_CASES, ids=[c[0] for c in LEGACY_CASES])
def test_legacy_shapes(db, name, flt, expected):
    db.legacy.insert_many(LEGACY)
    assert sorted(d["_id"] for d in db.legacy.find(flt)) == expected


def test_list_indexes_shows_index_version(db):
    db.c.create_index([("loc", "2dsphere")])
    db.c.create_index([("category", 1), ("loc", "2dsphere")])
    specs = {s["name"]: s for s in db.c.list_indexes()}
    assert specs["loc_2dsphere"].to_dict() == {"v": 2, "key": {"loc": "2dsphere"}, "name": "loc_2dsphere",
                                               "2dsphereIndexVersion": 3}
    assert specs["category_1_loc_2dsphere"]["2dsphereIndexVersion"] == 3


@pytest.mark.parametrize("bad,reason", [
    (pt(200, 100), "longitude/latitude is out of bounds, lng: 200 lat: 100"),
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]},
     "Loop is not closed, first vertex does not equal last vertex"),
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]}, "cross"),
    ({"type": "Spiral", "coordinates": [0, 0]}, "unknown GeoJSON type"),
    ("nowhere", "Point must only contain numeric elements"),
])
def test_invalid_geometry_is_refused_with_16755(db, bad, reason):
    db.c.create_index([("loc", "2dsphere")])
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 1, "loc": bad})
    assert e.value.code == 16755
    msg = e.value.details["errmsg"]
    assert msg.startswith("Can't extract geo keys: { _id: 1, loc: ")
    assert reason in msg
    assert db.c.count_documents({}) == 0


def test_index_build_over_invalid_geometry_fails(db):
    db.c.insert_many([{"loc": pt(1, 1)}, {"loc": pt(500, 0)}])
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("loc", "2dsphere")])
    assert e.value.code == 16755
    assert [s["name"] for s in db.c.list_indexes()] == ["_id_"]


def test_documents_without_geometry_are_not_indexed(db):
    db.c.create_index([("loc", "2dsphere")])
    db.c.insert_many([{"_id": 1}, {"_id": 2, "loc": None}, {"_id": 3, "loc": pt(1, 1)}])
    assert db.c.count_documents({}) == 3
    stats = db.c.find({"loc": {"$geoWithin": {"$centerSphere": [[1, 1], 0.1]}}}).explain()["executionStats"]
    assert stats["nReturned"] == 1 and stats["totalDocsExamined"] == 1


@pytest.fixture
def places(db):
    db.places.insert_many(PLACES)
    db.places.create_index([("location", "2dsphere")])
    return db.places


def test_near_with_min_and_max_distance(places):
    q = {"location": {"$near": {"$geometry": pt(-73.9667, 40.78), "$minDistance": 1000, "$maxDistance": 5000}}}
    assert [d["name"] for d in places.find(q)] == ["Central Park"]


def test_near_sphere_sorts_by_distance(places):
    here = [-73.9667, 40.78]
    q = {"location": {"$nearSphere": {"$geometry": pt(*here)}}}
    got = [d["_id"] for d in places.find(q)]
    by_distance = sorted(PLACES, key=lambda p: meters(here, p["location"]["coordinates"]))
    assert got == [p["_id"] for p in by_distance] == [1, 3, 2]
    plan = places.find(q).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "GEO_NEAR_2DSPHERE"
    assert plan["indexName"] == "location_2dsphere"
    assert plan["inputStage"]["stage"] == "FETCH"
    assert plan["inputStage"]["inputStage"]["stage"] == "IXSCAN"


def test_near_sphere_legacy_radians(places):
    q = {"location": {"$nearSphere": [-73.9667, 40.78], "$maxDistance": 0.0008}}
    assert [d["name"] for d in places.find(q)] == ["Central Park"]


def test_near_with_other_predicates_and_limit(places):
    q = {"location": {"$near": {"$geometry": pt(-73.99, 40.72)}}, "category": "Parks"}
    assert [d["_id"] for d in places.find(q)] == [2, 1]
    assert [d["_id"] for d in places.find(q).limit(1)] == [2]


def test_near_needs_a_geo_index(db):
    db.c.insert_many(PLACES)
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"location": {"$near": {"$geometry": pt(0, 0)}}}))
    assert e.value.code == 291
    assert "unable to find index for $geoNear query" in str(e.value)


def test_geo_near_stage(places):
    near = [-73.99279, 40.719296]
    out = list(places.aggregate([{"$geoNear": {
        "near": pt(*near), "distanceField": "dist.calculated", "maxDistance": 2,
        "query": {"category": "Parks"}, "includeLocs": "dist.location", "spherical": True}}]))
    assert [d["name"] for d in out] == ["Sara D. Roosevelt Park"]
    assert out[0]["dist"]["location"] == pt(-73.9928, 40.7193)
    assert out[0]["dist"]["calculated"] == pytest.approx(meters(near, [-73.9928, 40.7193]), rel=1e-9)
    out = list(places.aggregate([{"$geoNear": {
        "near": pt(*near), "distanceField": "d", "minDistance": 2, "query": {"category": "Parks"},
        "spherical": True}}]))
    assert [d["name"] for d in out] == ["Central Park"]
    assert out[0]["d"] == pytest.approx(meters(near, [-73.97, 40.77]), rel=1e-9)


def test_geo_near_all_sorted_with_multiplier_and_key(places):
    near = [-73.9667, 40.78]
    out = list(places.aggregate([
        {"$geoNear": {"near": pt(*near), "distanceField": "km", "distanceMultiplier": 0.001,
                      "key": "location"}},
        {"$project": {"_id": 1, "km": 1}}]))
    assert [d["_id"] for d in out] == [1, 3, 2]
    for d in out:
        coords = next(p for p in PLACES if p["_id"] == d["_id"])["location"]["coordinates"]
        assert d["km"] == pytest.approx(meters(near, coords) / 1000, rel=1e-9)


def test_geo_near_must_be_first(places):
    with pytest.raises(OperationFailure) as e:
        list(places.aggregate([{"$match": {}}, {"$geoNear": {"near": pt(0, 0), "distanceField": "d"}}]))
    assert e.value.code == 40603


def test_geo_near_without_index(db):
    db.c.insert_many(PLACES)
    with pytest.raises(OperationFailure) as e:
        list(db.c.aggregate([{"$geoNear": {"near": pt(0, 0), "distanceField": "d"}}]))
    assert e.value.code == 291
