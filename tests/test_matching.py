"""Unit tests of the case matcher (no server needed)."""

import pytest
from bson import Int64, ObjectId

from matching import Mismatch, match


def test_subset_allows_extra_keys_and_loose_numbers():
    match({"ok": 1, "n": 2}, {"n": Int64(2), "ok": 1.0, "extra": True})


def test_exact_checks_types_order_and_extra_keys():
    match([{"_id": 1, "a": 1.5}], [{"_id": 1, "a": 1.5}], exact=True)
    for actual in ([{"_id": 1, "a": 2}], [{"a": 1.5, "_id": 1}], [{"_id": 1, "a": 1.5, "b": 0}],
                   [{"_id": Int64(1), "a": 1.5}]):
        with pytest.raises(Mismatch):
            match([{"_id": 1, "a": 1.5}], actual, exact=True)


def test_exact_keys_inside_replies():
    reply = {"ok": 1.0, "cursor": {"firstBatch": [{"_id": 1, "x": 2}], "id": Int64(0)}}
    match({"cursor": {"firstBatch": [{"_id": 1, "x": 2}], "id": 0}}, reply)
    with pytest.raises(Mismatch):
        match({"cursor": {"firstBatch": [{"_id": 1}]}}, reply)


def test_operators():
    match({"_id": {"$$type": "objectId"}, "gone": {"$$exists": False}, "s": {"$$contains": "dup"},
           "n": {"$$gte": 3}, "v": {"$$unordered": [2, 1]}, "any": {"$$any": True}},
          {"_id": ObjectId(), "s": "E11000 dup key", "n": 4, "v": [1, 2], "any": None})
    with pytest.raises(Mismatch):
        match({"a": {"$$exists": False}}, {"a": 1})
    with pytest.raises(Mismatch):
        match({"a": {"$$type": "long"}}, {"a": 1})
    with pytest.raises(Mismatch):
        match({"v": {"$$unordered": [1, 1]}}, {"v": [1, 2]})


def test_bool_is_not_a_number():
    with pytest.raises(Mismatch):
        match({"a": 1}, {"a": True})
