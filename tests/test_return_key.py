"""`find`'s `returnKey` and `showRecordId` (MongoDB's jstests/core/returnkey.js and the
command-monitoring spec's find with both): differential against a collection scan, through
each index and `$natural`, both sort directions, in-memory sorts, filters, projections, and
batches continued by getMore."""

from __future__ import annotations

import pytest
from bson import Int64

# Documents with scalar fields, a nested one, and one missing `b` (its `b` key is null).
DOCS = [{"_id": i, "a": (i * 7) % 10, "b": (i * 3) % 5, "c": {"d": -i}} for i in range(20)]
DOCS[5].pop("b")
INDEXES = {"a_1": [("a", 1)], "b_1": [("b", 1)], "c.d_1": [("c.d", 1)], "a_1_b_1": [("a", 1), ("b", 1)]}
FILTERS = [{}, {"a": {"$gte": 3}}, {"b": {"$lt": 3}}, {"a": {"$gte": 2}, "b": {"$ne": 1}}]
SORT_FIELDS = ["a", "b", "c.d", "_id"]


def get(doc, path):
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def matches(doc, filt):
    for field, cond in filt.items():
        v = get(doc, field)
        for op, arg in cond.items():
            ok = {"$gte": v is not None and v >= arg, "$lt": v is not None and v < arg,
                  "$ne": v != arg}[op]
            if not ok:
                return False
    return True


def field_key(doc, field):
    """The sort order of a field's value here: null (missing) before numbers."""
    v = get(doc, field)
    return (v is not None, v if v is not None else 0)


@pytest.fixture
def coll(db):
    c = db.rk
    c.insert_many(DOCS)
    for name, key in INDEXES.items():
        c.create_index(key, name=name)
    return c


@pytest.mark.parametrize("hint", list(INDEXES) + ["$natural"])
@pytest.mark.parametrize("direction", [1, -1])
@pytest.mark.parametrize("filt", FILTERS, ids=str)
def test_return_key_is_each_result_index_key(coll, hint, direction, filt):
    for field in SORT_FIELDS:
        sort = [(field, direction)] + ([("_id", 1)] if field != "_id" else [])
        # Ties on the field keep `_id` ascending: a stable sort, reversed for -1.
        by_id = sorted((d for d in DOCS if matches(d, filt)), key=lambda d: d["_id"])
        want_docs = sorted(by_id, key=lambda d: field_key(d, field), reverse=direction == -1)
        hinted = {"$natural": 1} if hint == "$natural" else hint
        plain = list(coll.find(filt, sort=sort, hint=hinted))
        assert [d["_id"] for d in plain] == [d["_id"] for d in want_docs], (field, direction)
        keys = list(coll.find(filt, sort=sort, hint=hinted, return_key=True, batch_size=3))
        if hint == "$natural":
            want = [{} for _ in plain]
        else:
            want = [{path: get(d, path) for path, _ in INDEXES[hint]} for d in plain]
        assert keys == want, (field, direction)
        # A projection is ignored; the plain query after it is not served a key-only plan.
        assert list(coll.find(filt, {"b": 1}, sort=sort, hint=hinted, return_key=True)) == want
        assert list(coll.find(filt, sort=sort, hint=hinted)) == plain


def test_return_key_plans(coll):
    def plan(**kw):
        return coll.find({}, **kw).explain()["queryPlanner"]["winningPlan"]

    def stages(p):
        out = []
        while p:
            out.append(p["stage"])
            p = p.get("inputStage")
        return out

    # The index answers the sort: its keys alone (as MongoDB's isIndexOnly).
    assert stages(plan(hint="a_1", sort=[("a", 1)], return_key=True)) == ["RETURN_KEY", "IXSCAN"]
    assert stages(plan(hint="a_1", sort=[("a", -1)], return_key=True)) == ["RETURN_KEY", "IXSCAN"]
    # An in-memory sort on a field the index lacks reads the documents.
    assert "FETCH" in stages(plan(hint="a_1", sort=[("b", 1)], return_key=True))
    assert stages(plan(hint={"$natural": 1}, return_key=True)) == ["RETURN_KEY", "COLLSCAN"]
    # The command-monitoring spec's case: sorted by `_id`, through the `_id` index; the key
    # carries no record id.
    got = list(coll.find({}, sort=[("_id", 1)], return_key=True, show_record_id=True))
    assert got == [{"_id": d["_id"]} for d in DOCS]


@pytest.mark.parametrize("hint", ["a_1", "$natural"])
def test_show_record_id_adds_a_long_after_the_projection(coll, hint):
    hinted = {"$natural": 1} if hint == "$natural" else hint
    for projection in (None, {"a": 1}, {"a": 0, "c": 0}):
        plain = list(coll.find({}, projection, hint=hinted, sort=[("a", 1), ("_id", 1)]))
        shown = list(coll.find({}, projection, hint=hinted, sort=[("a", 1), ("_id", 1)],
                               show_record_id=True, batch_size=4))
        assert len(shown) == len(plain) == len(DOCS)
        rids = [d.pop("$recordId") for d in shown]
        assert shown == plain
        assert all(isinstance(r, Int64) and r > 0 for r in rids)
        assert len(set(rids)) == len(rids)
    # The same document has the same record id whatever the plan.
    by_natural = {d["_id"]: d["$recordId"] for d in coll.find({}, show_record_id=True,
                                                               hint={"$natural": 1})}
    by_index = {d["_id"]: d["$recordId"] for d in coll.find({}, show_record_id=True, hint="b_1")}
    assert by_natural == by_index


@pytest.mark.parametrize("filt", FILTERS[1:], ids=str)
def test_return_key_through_the_planner_and_its_cache(coll, filt):
    """Unhinted: the plans race (and a plain query's winner is cached); a returnKey query
    between plain ones neither reuses nor leaves a key-only plan for them."""
    sort = [("a", 1), ("_id", 1)]
    for _ in range(3):
        plain = list(coll.find(filt, sort=sort))
        keys = list(coll.find(filt, sort=sort, return_key=True))
        assert list(coll.find(filt, sort=sort)) == plain
        assert len(keys) == len(plain)
        for key, doc in zip(keys, plain):
            assert list(key) in [[p for p, _ in k] for k in INDEXES.values()] + [[]], key
            assert key == {p: get(doc, p) for p in key}
