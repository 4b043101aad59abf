"""Comparison of server replies with expectations written in extended JSON.

Two modes:
  subset  (command replies): every key of an expected document must be in the actual one and
          match; extra actual keys are fine. Numbers compare by value across int/long/double.
  exact   (user documents): same keys in the same order, same BSON types (int32 vs int64 vs
          double), same values; arrays element by element.
Inside a reply, the values under EXACT_KEYS (firstBatch, nextBatch, values, value, ...) are user
documents and are compared exactly.

Special operators, allowed anywhere in an expectation:
  {"$$type": "objectId"} / {"$$type": ["int", "long"]}   BSON type name(s) as in $type
  {"$$exists": false}                                     (as a value in a document) key absent / present
  {"$$any": true}                                         anything (key must exist)
  {"$$contains": "text"}                                  a string containing text
  {"$$gte": n} / {"$$lte": n}                             a number >= / <= n
  {"$$unordered": [...]}                                  array with these elements in any order
"""

from __future__ import annotations

import datetime
import re
import uuid

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

EXACT_KEYS = {"firstBatch", "nextBatch", "values", "value", "keyValue", "keyPattern", "key"}

_TYPE_NAMES = {
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "binData": lambda v: isinstance(v, (bytes, Binary, uuid.UUID)),
    "objectId": lambda v: isinstance(v, ObjectId),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, datetime.datetime),
    "null": lambda v: v is None,
    "regex": lambda v: isinstance(v, (Regex, re.Pattern)),
    "javascript": lambda v: isinstance(v, Code),
    "int": lambda v: isinstance(v, int) and not isinstance(v, (bool, Int64)),
    "timestamp": lambda v: isinstance(v, Timestamp),
    "long": lambda v: isinstance(v, Int64),
    "decimal": lambda v: isinstance(v, Decimal128),
    "minKey": lambda v: isinstance(v, MinKey),
    "maxKey": lambda v: isinstance(v, MaxKey),
    "dbPointer": lambda v: isinstance(v, DBRef),
}
_TYPE_NAMES["number"] = lambda v: any(_TYPE_NAMES[t](v) for t in ("int", "long", "double", "decimal"))


class Mismatch(AssertionError):
    pass


def _is_number(v):
    return isinstance(v, (int, float, Decimal128)) and not isinstance(v, bool)


def _num(v):
    return v.to_decimal() if isinstance(v, Decimal128) else v


def _bson_type(v) -> str:
    for name, pred in _TYPE_NAMES.items():
        if name != "number" and pred(v):
            return name
    return type(v).__name__


def _operator(expected):
    if isinstance(expected, dict) and len(expected) == 1:
        (k,) = expected.keys()
        if k.startswith("$$"):
            return k, expected[k]
    return None


def match(expected, actual, exact: bool = False, path: str = "") -> None:
    """Raises Mismatch describing the first difference."""
    op = _operator(expected)
    if op:
        name, arg = op
        if name == "$$type":
            names = arg if isinstance(arg, list) else [arg]
            if not any(_TYPE_NAMES[n](actual) for n in names):
                raise Mismatch(f"{path or '<root>'}: expected type {names}, got {_bson_type(actual)} {actual!r}")
            return
        if name == "$$any":
            return
        if name == "$$contains":
            if not isinstance(actual, str) or arg not in actual:
                raise Mismatch(f"{path}: expected a string containing {arg!r}, got {actual!r}")
            return
        if name == "$$gte":
            if not _is_number(actual) or _num(actual) < arg:
                raise Mismatch(f"{path}: expected a number >= {arg}, got {actual!r}")
            return
        if name == "$$lte":
            if not _is_number(actual) or _num(actual) > arg:
                raise Mismatch(f"{path}: expected a number <= {arg}, got {actual!r}")
            return
        if name == "$$unordered":
            if not isinstance(actual, list) or len(actual) != len(arg):
                raise Mismatch(f"{path}: expected {len(arg)} elements in any order, got {actual!r}")
            remaining = list(actual)
            for e in arg:
                for i, a in enumerate(remaining):
                    try:
                        match(e, a, exact, path)
                    except Mismatch:
                        continue
                    del remaining[i]
                    break
                else:
                    raise Mismatch(f"{path}: no element matches {e!r} in {actual!r}")
            return
        if name == "$$exists":
            raise Mismatch(f"{path}: $$exists is only valid as the value of a document key")
        raise Mismatch(f"{path}: unknown operator {name}")

    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch(f"{path or '<root>'}: expected a document, got {_bson_type(actual)} {actual!r}")
        for k, ev in expected.items():
            sub = f"{path}.{k}" if path else k
            eop = _operator(ev)
            if eop and eop[0] == "$$exists":
                if bool(eop[1]) != (k in actual):
                    raise Mismatch(f"{sub}: expected {'present' if eop[1] else 'absent'}, got {actual.get(k)!r}")
                continue
            if k not in actual:
                raise Mismatch(f"{sub}: missing (actual keys: {list(actual)})")
            match(ev, actual[k], exact or k in EXACT_KEYS, sub)
        if exact:
            exp_keys = [k for k, v in expected.items() if not (_operator(v) or ("", 0))[0] == "$$exists"]
            act_keys = list(actual.keys())
            if exp_keys != act_keys:
                raise Mismatch(f"{path or '<root>'}: keys {act_keys} != expected {exp_keys} (order matters)")
        return

    if isinstance(expected, list):
        if not isinstance(actual, list):
            raise Mismatch(f"{path}: expected an array, got {_bson_type(actual)} {actual!r}")
        if len(expected) != len(actual):
            raise Mismatch(f"{path}: expected {len(expected)} elements, got {len(actual)}: {actual!r}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            match(e, a, exact, f"{path}.{i}")
        return

    if _is_number(expected) and _is_number(actual):
        if exact and _bson_type(expected) != _bson_type(actual):
            raise Mismatch(f"{path}: expected {_bson_type(expected)} {expected!r}, got {_bson_type(actual)} {actual!r}")
        if _num(expected) != _num(actual):
            raise Mismatch(f"{path}: expected {expected!r}, got {actual!r}")
        return

    if type(expected) is not type(actual) and not (
        isinstance(expected, (bytes, Binary)) and isinstance(actual, (bytes, Binary))
    ):
        raise Mismatch(f"{path}: expected {_bson_type(expected)} {expected!r}, got {_bson_type(actual)} {actual!r}")
    if expected != actual:
        raise Mismatch(f"{path}: expected {expected!r}, got {actual!r}")
