"""mongosh (the npm package) against nidus: the everyday shell commands.

scripts/test.sh installs mongosh into tests/.node; this test installs it itself if missing
and skips (with the reason) only when npm cannot fetch it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PREFIX = ROOT / "tests" / ".node"
VERSION = os.environ.get("MONGOSH_VERSION", "2.12.0")


def find_mongosh() -> str:
    for cand in (os.environ.get("MONGOSH"), str(PREFIX / "bin" / "mongosh"), shutil.which("mongosh")):
        if cand and os.access(cand, os.X_OK):
            return cand
    npm = shutil.which("npm")
    if not npm:
        pytest.skip("mongosh is not installed and npm is not available to install it")
    PREFIX.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([npm, "install", "-g", "--prefix", str(PREFIX), "--no-audit", "--no-fund",
                        "--loglevel=error", f"mongosh@{VERSION}"],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.skip(f"npm could not install mongosh@{VERSION} (registry unreachable?): {r.stderr[-500:]}")
    return str(PREFIX / "bin" / "mongosh")


@pytest.fixture(scope="module")
def mongosh(tmp_path_factory):
    exe = find_mongosh()
    home = tmp_path_factory.mktemp("mongosh-home")
    # no telemetry, no update checks: the sandbox has no network besides the registries
    cfg = home / ".mongodb" / "mongosh"
    cfg.mkdir(parents=True)
    (cfg / "config").write_text('{"enableTelemetry": false, "userId": "000000000000000000000000", '
                                '"telemetryAnonymousId": "000000000000000000000000", "disableGreetingMessage": true}')
    env = {**os.environ, "HOME": str(home), "MONGOSH_NO_TELEMETRY": "1", "DO_NOT_TRACK": "1"}

    def run(uri: str, script: str, timeout: float = 60) -> str:
        r = subprocess.run([exe, uri, "--quiet", "--eval", script], capture_output=True, text=True,
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"mongosh --eval {script!r} exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
        return r.stdout.strip()

    return run


@pytest.fixture
def shell_db(client, nidus_server):
    name = "t_mongosh"
    client.drop_database(name)
    yield f"mongodb://127.0.0.1:{nidus_server.port}/{name}?directConnection=true&serverSelectionTimeoutMS=10000"
    client.drop_database(name)


def test_mongosh_everyday_commands(mongosh, shell_db, client):
    out = mongosh(shell_db, "db.c.insertOne({a:1})")
    assert "acknowledged: true" in out and "insertedId: ObjectId(" in out, out

    out = mongosh(shell_db, "db.c.find()")
    assert "a: 1" in out and "_id: ObjectId(" in out, out

    out = mongosh(shell_db, "db.c.countDocuments()")
    assert out.splitlines()[-1].strip() == "1", out

    out = mongosh(shell_db, "EJSON.stringify(db.c.find({}, {_id: 0}).toArray())")
    assert out.splitlines()[-1].strip() == '[{"a":1}]', out

    out = mongosh(shell_db, "show dbs")
    assert any(line.split()[:1] == ["t_mongosh"] for line in out.splitlines()), out

    out = mongosh(shell_db, "show collections")
    assert out.splitlines() == ["c"], out

    assert client.t_mongosh.c.count_documents({"a": 1}) == 1


def test_mongosh_without_direct_connection(mongosh, nidus_server, client):
    """mongosh's default connection string (no directConnection)."""
    client.drop_database("t_mongosh2")
    uri = f"mongodb://127.0.0.1:{nidus_server.port}/t_mongosh2?serverSelectionTimeoutMS=10000"
    out = mongosh(uri, "db.c.insertMany([{x:1},{x:2}]); db.c.find({x:{$gt:1}}, {_id:0}).toArray()")
    assert "x: 2" in out and "x: 1" not in out, out
    client.drop_database("t_mongosh2")


def test_mongosh_create_index_and_errors(mongosh, shell_db):
    out = mongosh(shell_db, "db.c.createIndex({a: 1}, {unique: true}); db.c.insertOne({a: 1}); "
                            "try { db.c.insertOne({a: 1}) } catch (e) { print('CODE', e.code) }; "
                            "db.c.getIndexes().map(i => i.name).join(',')")
    assert "CODE 11000" in out, out
    assert out.splitlines()[-1].strip() == "_id_,a_1", out


def test_mongosh_profiler_helpers(mongosh, shell_db, client):
    out = mongosh(shell_db, "db.setProfilingLevel(2); db.c.insertOne({p: 1}); db.c.findOne({p: 1}); "
                            "db.setProfilingLevel(0); "
                            "EJSON.stringify(db.system.profile.find({op: 'query'}, {_id: 0, op: 1, nreturned: 1, planSummary: 1}).toArray())")
    assert out.splitlines()[-1].strip() == '[{"op":"query","nreturned":1,"planSummary":"COLLSCAN"}]', out
    out = mongosh(shell_db, "EJSON.stringify(db.getProfilingStatus())")
    status = out.splitlines()[-1].strip()
    assert status.startswith('{"was":0,"slowms":100,"sampleRate":1') and '"ok":1' in status, out


def test_mongosh_prints_int32_counters_and_admin_helpers(mongosh, shell_db, client):
    """Explain counters print as `3`, not `Long('3')` (MongoDB's appendNumber rule), and the
    shell's admin helpers work: stats() ($collStats), hideIndex, setLogLevel, getLogComponents."""
    mongosh(shell_db, "db.c.insertMany(Array.from({length: 10}, (_, i) => ({_id: i, a: i})));"
                      "db.c.createIndex({a: 1})")
    out = mongosh(shell_db, 'db.c.find({a: {$gte: 7}}).explain("executionStats").executionStats')
    assert "nReturned: 3" in out and "totalKeysExamined: 3" in out, out
    assert "Long(" not in out, out
    out = mongosh(shell_db, "db.c.countDocuments({a: {$lt: 4}})")
    assert out.splitlines()[-1].strip() == "4", out
    out = mongosh(shell_db, "const s = db.c.stats(); print(s.count, s.nindexes, s.ns)")
    assert out.splitlines()[-1].split() == ["10", "2", "t_mongosh.c"], out
    out = mongosh(shell_db, "db.c.hideIndex('a_1'); db.c.getIndexes().filter(i => i.hidden).map(i => i.name)")
    assert "a_1" in out, out
    out = mongosh(shell_db, "db.setLogLevel(1, 'query'); db.getLogComponents().query.verbosity")
    assert out.splitlines()[-1].strip() == "1", out
    mongosh(shell_db, "db.setLogLevel(-1, 'query')")
    out = mongosh(shell_db, "db.c.aggregate([{$indexStats: {}}]).toArray().map(i => i.name).sort()")
    assert "_id_" in out and "a_1" in out, out


def test_mongosh_hashed_index(mongosh, shell_db, client):
    """convertShardKeyToHashed gives MongoDB's values; a hashed index answers equality."""
    out = mongosh(shell_db, "print(convertShardKeyToHashed(42)); print(convertShardKeyToHashed('hello'))")
    assert out.splitlines() == ["Long('-944302157085130861')", "Long('5347277839332858538')"]
    out = mongosh(shell_db, "db.c.createIndex({a: 'hashed'}); db.c.insertMany([{a: 1}, {a: 1.5}, {a: 'x'}]); "
                            "const p = db.c.find({a: 1.5}).explain().queryPlanner.winningPlan; "
                            "print(p.stage, p.inputStage.stage, p.inputStage.indexName, db.c.countDocuments({a: 1.5}))")
    assert out == "FETCH IXSCAN a_hashed 1"
    out = mongosh(shell_db, "try { db.c.insertOne({a: [1]}) } catch (e) { print(e.code) }")
    assert out == "16766"


def test_mongosh_text_index(mongosh, shell_db):
    """The manual's text search from mongosh: createIndex, $text with scores, explain."""
    out = mongosh(shell_db, "db.t.createIndex({subject: 'text'}); "
                            "db.t.insertMany([{_id: 1, subject: 'coffee'}, {_id: 2, subject: 'Coffee Shopping'}, "
                            "{_id: 3, subject: 'Baking a cake'}]); "
                            "db.t.find({$text: {$search: 'coffee'}}, {score: {$meta: 'textScore'}})"
                            ".sort({score: {$meta: 'textScore'}}).forEach(d => print(d._id, d.score)); "
                            "print(db.t.find({$text: {$search: 'cake'}}).explain().queryPlanner.winningPlan.stage); "
                            "print(db.t.getIndexes()[1].key._fts, db.t.getIndexes()[1].weights.subject)")
    assert out.splitlines() == ["1 1", "2 0.75", "TEXT_MATCH", "text 1"]
