"""Data-driven command tests: tests/cases/*.json (format in tests/cases/README.md)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
from bson import json_util
from bson.json_util import JSONOptions, JSONMode
from pymongo.errors import OperationFailure

from matching import Mismatch, match

CASES_DIR = Path(__file__).resolve().parent / "cases"
JSON_OPTS = JSONOptions(json_mode=JSONMode.RELAXED, tz_aware=False)
CASE_KEYS = {"name", "comment", "setup", "db", "command", "expect", "steps", "skip", "pending"}
# NIDUS_RUN_PENDING=1 runs pending cases as ordinary tests, to see how they fail today.
RUN_PENDING = os.environ.get("NIDUS_RUN_PENDING") == "1"
EXPECT_KEYS = {"reply", "error", "documents", "collection", "unordered", "comment"}


def load_cases():
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        text = path.read_text()
        data = json_util.loads(text, json_options=JSON_OPTS)
        cases = data["cases"] if isinstance(data, dict) else data
        for case in cases:
            unknown = set(case) - CASE_KEYS
            assert not unknown, f"{path.name}: {case.get('name')}: unknown keys {unknown}"
            marks = [pytest.mark.skip(reason=case["skip"])] if case.get("skip") else []
            if case.get("pending") and not RUN_PENDING:
                # Expected to fail until the server implements it; strict, so a pending case that
                # starts passing fails the run and its "pending" must be removed.
                marks.append(pytest.mark.xfail(strict=True, reason=case["pending"]))
            out.append(pytest.param(case, id=f"{path.stem}/{case['name']}", marks=marks))
    return out


def db_name(case_id: str) -> str:
    return ("c_" + re.sub(r"[^A-Za-z0-9_]", "_", case_id))[:60]


def substitute(value, dbname: str, saved: dict):
    """'$$db' inside strings -> the case's database; {"$$var": "x"} -> a value saved by a step."""
    if isinstance(value, str):
        return value.replace("$$db", dbname)
    if isinstance(value, dict):
        if len(value) == 1 and "$$var" in value:
            return saved[value["$$var"]]
        return {k: substitute(v, dbname, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, dbname, saved) for v in value]
    return value


def get_path(doc, dotted: str):
    for part in dotted.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def run_setup(db, setup: dict):
    coll = setup.get("collection")
    if "create" in setup:
        db.command({"create": coll, **setup["create"]})
    for spec in setup.get("indexes", []):
        spec = dict(spec)
        spec.setdefault("name", "_".join(f"{k}_{v}" for k, v in spec["key"].items()))
        db.command({"createIndexes": coll, "indexes": [spec]})
    docs = setup.get("documents", [])
    if docs:
        db.command({"insert": coll, "documents": docs, "ordered": True})
    for extra in setup.get("collections", []):  # more collections: {collection, documents}
        run_setup(db, extra)


def run_step(client, dbname, step, default_coll, saved):
    target_db = client[substitute(step.get("db", dbname), dbname, saved)]
    cmd = substitute(step["command"], dbname, saved)
    expect = substitute(step.get("expect", {}), dbname, saved)
    unknown = set(expect) - EXPECT_KEYS
    assert not unknown, f"unknown expect keys {unknown}"
    reply = None
    try:
        reply = target_db.command(cmd)
    except OperationFailure as e:
        if "error" not in expect:
            raise AssertionError(f"command failed: {e.details}") from None
        try:
            match(expect["error"], e.details or {})
        except Mismatch as m:
            raise AssertionError(f"error reply mismatch: {m}\nactual: {e.details}") from None
    else:
        if "error" in expect:
            raise AssertionError(f"expected error {expect['error']}, got reply {reply}")
    if reply is not None and "reply" in expect:
        try:
            match(expect["reply"], reply)
        except Mismatch as m:
            raise AssertionError(f"reply mismatch: {m}\nactual: {json_util.dumps(reply)}") from None
    if "documents" in expect:
        coll = expect.get("collection", default_coll)
        docs = list(client[dbname][coll].find({}))
        want = expect["documents"]
        if expect.get("unordered"):
            want = {"$$unordered": want}
        try:
            match(want, docs, exact=True)
        except Mismatch as m:
            raise AssertionError(f"documents mismatch: {m}\nactual: {json_util.dumps(docs)}") from None
    for name, dotted in step.get("save", {}).items():
        saved[name] = get_path(reply, dotted)
    return reply


@pytest.mark.parametrize("case", load_cases())
def test_case(client, case, request):
    case = copy.deepcopy(case)
    dbname = db_name(request.node.callspec.id)
    client.drop_database(dbname)
    setup = case.get("setup", {})
    run_setup(client[dbname], substitute(setup, dbname, {}))
    steps = case.get("steps") or [{k: case[k] for k in ("command", "expect", "db") if k in case}]
    saved: dict = {}
    for i, step in enumerate(steps):
        try:
            run_step(client, dbname, step, setup.get("collection"), saved)
        except AssertionError as e:
            raise AssertionError(f"step {i}: {json.dumps(json.loads(json_util.dumps(step['command'])))}\n{e}") from None
    client.drop_database(dbname)
