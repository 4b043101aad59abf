"""Hardening against bad input: a fault storm while a client writes, limits, slow clients.

The storm sends thousands of malformed, truncated and random messages on many connections
to a dedicated server on 127.0.0.1 while one pymongo client keeps inserting (w:1, some with
j:true) and records what was acknowledged. Afterwards the server must answer, hold every
acknowledged document, and have logged no panic.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
import zlib

import bson
import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.write_concern import WriteConcern

import wire

STORM_SECONDS = float(os.environ.get("NIDUS_FAULT_SECONDS", "12"))
STORM_MIN_MESSAGES = 3000
STORM_THREADS = 8
STORE_DB = "acked_store"  # the writer's database; storm commands only use "fz"


# ----------------------------------------------------------------------------- generators

def random_value(rng: random.Random, depth: int = 0):
    kinds = 14 if depth < 4 else 10
    k = rng.randrange(kinds)
    if k == 0:
        return rng.choice([0, 1, -1, 2**31 - 1, -(2**31)])
    if k == 1:
        return Int64(rng.choice([0, 2**63 - 1, -(2**63), 2**53 + 1]))
    if k == 2:
        return rng.choice([0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, 2.5])
    if k == 3:
        return rng.choice(["", "a", "$a", "$$ROOT", "a.b", "é", "\x01", "$gt", "x" * 300])
    if k == 4:
        return rng.choice([True, False, None])
    if k == 5:
        return Decimal128(rng.choice(["0", "NaN", "-Infinity", "1E+6144", "-1E-6176", "0.1"]))
    if k == 6:
        return rng.choice([MinKey(), MaxKey(), ObjectId(), Timestamp(rng.randrange(2**32), 1)])
    if k == 7:
        return Regex(rng.choice(["a", "(", "^$", "[z-a]"]), rng.choice(["", "i", "q"]))
    if k == 8:
        return Binary(os.urandom(rng.randrange(8)), rng.choice([0, 4, 128]))
    if k == 9:
        return rng.randrange(-1000, 1000)
    if k in (10, 11):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return random_doc(rng, depth + 1)


KEYS = ["a", "b", "_id", "$gt", "$in", "$and", "$expr", "$set", "$inc", "$match", "$group",
        "$project", "a.b", "a.$", "a.$[]", "", "$", "x.0", "$where", "$elemMatch", "$slice"]


def random_doc(rng: random.Random, depth: int = 0) -> dict:
    return {rng.choice(KEYS): random_value(rng, depth) for _ in range(rng.randrange(4))}


def nested(depth: int, leaf=1, key="a"):
    v = leaf
    for _ in range(depth):
        v = {key: v}
    return v


def nested_array(depth: int):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


def random_command(rng: random.Random) -> dict:
    """A known command on the storm database with random arguments."""
    coll = rng.choice(["c", "d", "", "system.x", "$cmd"])
    name = rng.choice(["find", "aggregate", "insert", "update", "delete", "count", "distinct",
                       "findAndModify", "createIndexes", "getMore", "killCursors", "explain",
                       "listCollections", "bogus", "hello", "ping", "serverStatus"])
    body: dict = {name: coll if name not in ("getMore",) else Int64(rng.randrange(2**63))}
    if name == "find":
        body.update(filter=random_doc(rng), projection=random_doc(rng), sort=random_doc(rng))
    elif name == "aggregate":
        body.update(pipeline=[{rng.choice(["$match", "$project", "$group", "$unwind", "$sort",
                                           "$facet", "$lookup", "$bucket", "$addFields"]):
                               random_value(rng)} for _ in range(rng.randrange(3))], cursor={})
    elif name == "insert":
        body.update(documents=[random_doc(rng) for _ in range(rng.randrange(3))])
    elif name == "update":
        body.update(updates=[{"q": random_doc(rng), "u": rng.choice([random_doc(rng), [random_doc(rng)]]),
                              "multi": rng.random() < 0.5, "upsert": rng.random() < 0.3}])
    elif name == "delete":
        body.update(deletes=[{"q": random_doc(rng), "limit": rng.choice([0, 1, 5])}])
    elif name in ("count", "distinct"):
        body.update(query=random_doc(rng), key=rng.choice(["a", "a.b", "", "$a"]))
    elif name == "findAndModify":
        body.update(query=random_doc(rng), update=random_doc(rng), remove=rng.random() < 0.2)
    elif name == "createIndexes":
        body.update(indexes=[{"key": random_doc(rng), "name": "i"}])
    elif name == "explain":
        body = {"explain": {"find": "c", "filter": random_doc(rng)}}
    else:
        body.update(random_doc(rng))
    if rng.random() < 0.3:
        body["maxTimeMS"] = rng.choice([0, 1, 5, -1, "x"])
    body["$db"] = "fz"
    return body


def deep_command(rng: random.Random) -> dict:
    """Commands nested close to and past the limits (180 storage, 200 wire)."""
    d = rng.choice([100, 150, 179, 181, 199, 201, 250])
    kind = rng.randrange(6)
    if kind == 0:
        return {"insert": "c", "documents": [nested(d)], "$db": "fz"}
    if kind == 1:
        return {"find": "c", "filter": {"a": nested(d // 2)}, "$db": "fz"}
    if kind == 2:
        v = 1
        for _ in range(d // 3):
            v = {"$and": [{"a": v} if not isinstance(v, dict) else v]}
        return {"find": "c", "filter": v, "$db": "fz"}
    if kind == 3:
        v = "$a"
        for _ in range(d // 3):
            v = {"$add": [v, 1]}
        return {"aggregate": "c", "pipeline": [{"$project": {"x": v}}], "cursor": {}, "$db": "fz"}
    if kind == 4:
        return {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": nested(d)}}, "upsert": True}],
                "$db": "fz"}
    return {"insert": "c", "documents": [{"a": nested_array(d)}], "$db": "fz"}


def valid_message(rng: random.Random) -> bytes:
    body = random_command(rng) if rng.random() < 0.8 else deep_command(rng)
    try:
        return wire.op_msg(body, checksum=rng.random() < 0.1)
    except Exception:  # noqa: BLE001 - e.g. bson refuses a document nested too deep
        return wire.op_msg({"ping": 1, "$db": "fz"})


def fix_length(msg: bytes) -> bytes:
    return struct.pack("<i", len(msg)) + msg[4:]


def mutate(rng: random.Random, msg: bytes) -> bytes:
    b = bytearray(msg)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(5)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            i = rng.randrange(len(b))
            b[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0x03, 0x04, 0x10, 0x12])
        elif op == 2:
            i = rng.randrange(len(b) + 1)
            b[i:i] = os.urandom(rng.randrange(1, 9))
        elif op == 3 and len(b) > 20:
            i = rng.randrange(16, len(b))
            del b[i:i + rng.randrange(1, 9)]
        elif len(b) >= 24:
            i = rng.randrange(16, len(b) - 3)
            b[i:i + 4] = struct.pack("<i", rng.choice([-1, 0, 5, 2**31 - 1, len(b)]))
    return bytes(b)


def fault_message(rng: random.Random) -> tuple[str, bytes]:
    """(kind, bytes) of one bad input. Kinds in COMPLETE are whole frames, which the server
    answers or closes at once; after the others it may legitimately wait for more bytes."""
    k = rng.randrange(11)
    if k == 0:
        return "random_bytes", os.urandom(rng.randrange(1, 300))
    if k == 1:
        body = os.urandom(rng.randrange(0, 200))
        op = rng.choice([wire.OP_MSG, wire.OP_QUERY, wire.OP_COMPRESSED, 2001, 2002, 2005, 2010, 1, 0, -1])
        return "random_body", wire.header(16 + len(body), 1, 0, op) + body
    if k == 2:
        msg = valid_message(rng)
        return "truncated", msg[:rng.randrange(1, len(msg))]
    if k == 3:
        length = rng.choice([-1, 0, 1, 15, 16, 17, 48_000_001, 2**31 - 1, -(2**31)])
        return "bad_length", wire.header(length, 1, 0, wire.OP_MSG) + os.urandom(rng.randrange(0, 64))
    if k == 4:
        msg = valid_message(rng)
        delta = rng.choice([-3, -1, 1, 7, 1000])
        return "wrong_length", struct.pack("<i", len(msg) + delta) + msg[4:]
    if k == 5:
        return "mutated", fix_length(mutate(rng, valid_message(rng)))
    if k == 6:
        return "mutated_length", mutate(rng, valid_message(rng))
    if k == 7:
        return "random_command", valid_message(rng)
    if k == 8:
        try:
            return "deep", wire.op_msg(deep_command(rng))
        except Exception:  # noqa: BLE001
            return "deep", wire.op_msg({"ping": 1, "$db": "fz"})
    if k == 9:
        inner = valid_message(rng)
        cid = rng.choice([0, 2, 3, 1, 9])
        data = zlib.compress(inner[16:]) if cid == 2 else os.urandom(rng.randrange(1, 64))
        size = rng.choice([len(inner) - 16, 0, 10**8, -5])
        body = struct.pack("<iiB", rng.choice([wire.OP_MSG, wire.OP_QUERY, wire.OP_COMPRESSED, 7]), size, cid) + data
        return "compressed", wire.header(16 + len(body), 1, 0, wire.OP_COMPRESSED) + body
    q = random_doc(rng)
    coll = rng.choice(["admin.$cmd", "fz.c", "", "x"])
    payload = struct.pack("<I", rng.randrange(2**32)) + coll.encode() + b"\x00" + struct.pack("<ii", 0, -1)
    payload += bson.encode(q) + (os.urandom(rng.randrange(0, 8)) if rng.random() < 0.5 else b"")
    return "op_query", wire.header(16 + len(payload), 1, 0, wire.OP_QUERY) + payload


COMPLETE = {"random_body", "mutated", "random_command", "deep", "compressed", "op_query"}

# ----------------------------------------------------------------------------- storm

class Storm:
    def __init__(self, port: int, seed: int):
        self.port = port
        self.seed = seed
        self.sent = 0
        self.kinds: dict[str, int] = {}
        self.outcomes = {"reply": 0, "closed": 0, "no_reply": 0}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def worker(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        sock = None
        while not self.stop.is_set():
            kind, data = fault_message(rng)
            if sock is None:
                try:
                    sock = wire.connect(self.port, timeout=2)
                except OSError:
                    time.sleep(0.01)
                    continue
            outcome = "closed"
            try:
                sock.sendall(data)
                if kind not in COMPLETE or rng.random() < 0.05:
                    # The server may be waiting for the rest: hang up mid-message.
                    raise ConnectionAbortedError
                # A complete frame gets a reply or a close, except under moreToCome
                # (a mutated flag bit), which wants no reply.
                sock.settimeout(1)
                wire.read_message(sock)
                outcome = "reply"
            except socket.timeout:
                outcome = "no_reply"
            except (OSError, wire.Closed, ValueError, ConnectionAbortedError):
                outcome = "closed"
            if outcome != "reply":
                try:
                    sock.close()
                except OSError:
                    pass
                sock = None
            with self.lock:
                self.sent += 1
                self.kinds[kind] = self.kinds.get(kind, 0) + 1
                self.outcomes[outcome] += 1
        if sock is not None:
            sock.close()


class Writer:
    """Inserts documents one at a time and records what was acknowledged."""

    def __init__(self, uri: str):
        self.client = MongoClient(uri, serverSelectionTimeoutMS=10000, retryWrites=False)
        db = self.client[STORE_DB]
        self.w1 = db.get_collection("docs", write_concern=WriteConcern(w=1))
        self.journaled = db.get_collection("docs", write_concern=WriteConcern(w=1, j=True))
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            coll = self.journaled if i % 5 == 0 else self.w1
            try:
                coll.insert_one({"_id": i, "v": "x" * (i % 50), "j": i % 5 == 0})
                self.acked.append(i)
            except PyMongoError as e:
                self.errors.append(f"{i}: {e!r}")
            i += 1


def test_fault_storm_keeps_acknowledged_writes(start_nidus):
    server = start_nidus()
    writer = Writer(server.uri)
    wt = threading.Thread(target=writer.run, daemon=True)
    wt.start()
    storm = Storm(server.port, seed=int(os.environ.get("NIDUS_FAULT_SEED", "1")))
    threads = [threading.Thread(target=storm.worker, args=(n,), daemon=True) for n in range(STORM_THREADS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    while True:
        time.sleep(0.5)
        elapsed = time.monotonic() - start
        if not server.is_running():
            break
        if (elapsed >= STORM_SECONDS and storm.sent >= STORM_MIN_MESSAGES) or elapsed >= 3 * STORM_SECONDS:
            break
    storm.stop.set()
    for t in threads:
        t.join(10)
    writer.stop.set()
    wt.join(30)
    summary = f"sent {storm.sent} bad messages: {storm.kinds}, outcomes {storm.outcomes}; acked {len(writer.acked)}"
    print(summary)

    assert server.is_running(), f"server died during the storm ({summary}):\n{server.log_tail()}"
    assert storm.sent >= STORM_MIN_MESSAGES, summary
    # Frames without a reply are moreToCome messages; far more would mean a stuck server.
    assert storm.outcomes["no_reply"] < storm.sent // 20, summary
    assert not writer.errors, f"writes failed during the storm: {writer.errors[:5]}"
    assert len(writer.acked) > 100, summary

    with MongoClient(server.uri, serverSelectionTimeoutMS=10000) as c:
        assert c.admin.command("ping")["ok"] == 1
        stored = {d["_id"] for d in c[STORE_DB].docs.find({}, {"_id": 1})}
        missing = [i for i in writer.acked if i not in stored]
        assert not missing, f"{len(missing)} acknowledged documents missing, e.g. {missing[:10]}"
        assert c[STORE_DB].docs.count_documents({}) == len(writer.acked)
    writer.client.close()
    assert not server.panics(), "panics in the server log:\n" + "\n".join(server.panics()[:10])


# ----------------------------------------------------------------------------- limits

def test_storage_nesting_limit(db):
    db.c.insert_one({"_id": 1, "x": nested(179)})  # 180 levels with the top-level document
    with pytest.raises(OperationFailure) as e:
        db.c.insert_one({"_id": 2, "x": nested(180)})
    assert e.value.code == 15
    assert "cannot insert document because it exceeds 180 levels of nesting" in str(e.value)
    # Arrays count as levels; empty documents and arrays do not.
    with pytest.raises(OperationFailure) as e:
        db.c.insert_one({"_id": 3, "x": nested_array(180)})
    assert e.value.code == 15
    db.c.insert_one({"_id": 4, "x": nested(179, leaf={})})
    db.c.insert_one({"_id": 5, "x": nested(178, leaf=[])})
    # An update that would nest too deep fails; the document is unchanged.
    with pytest.raises(OperationFailure) as e:
        db.c.update_one({"_id": 4}, {"$set": {"x" + ".a" * 179: {"b": 1}}})
    assert e.value.code == 15
    assert "Document exceeds maximum nesting depth of 180" in str(e.value)
    assert db.c.find_one({"_id": 4}) == {"_id": 4, "x": nested(179, leaf={})}
    # Upserts are inserts.
    with pytest.raises(OperationFailure) as e:
        db.c.update_one({"_id": 6}, {"$set": {"x": nested(180)}}, upsert=True)
    assert e.value.code == 15
    assert db.c.count_documents({}) == 3


def test_wire_nesting_limit(nidus_server):
    """Past maxBSONDepth (200) a command is refused before it runs; the connection stays."""
    deep = {"ping": 1, "$db": "admin", "x": nested(205)}
    with wire.connect(nidus_server.port) as s:
        try:
            msg = wire.op_msg(deep)
        except Exception:  # noqa: BLE001 - an older bson may refuse to encode it
            pytest.skip("bson cannot encode the document")
        s.sendall(msg)
        opcode, _rto, body = wire.read_message(s)
        reply = wire.parse_reply(opcode, body)
        assert reply["ok"] == 0 and reply["code"] == 15, reply
        assert "nested object depth: 200" in reply["errmsg"]
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1


@pytest.fixture(scope="module")
def slow_coll(client):
    db = client["t_faults_maxtime"]
    db.drop_collection("c")
    db.c.insert_many([{"_id": i, "a": i % 100} for i in range(5000)])
    yield db
    client.drop_database("t_faults_maxtime")


# Every document costs a 3000-element $range: seconds for the collection, far over 50 ms.
SLOW_MATCH_NONE = {"$expr": {"$gt": [{"$size": {"$range": [0, 3000]}}, 5000]}}
SLOW_MATCH_ALL = {"$expr": {"$lt": [{"$size": {"$range": [0, 3000]}}, 5000]}}


@pytest.mark.parametrize("name", ["find_none", "find_all", "aggregate", "group", "count", "distinct",
                                  "update", "delete", "findAndModify", "explain", "getMore"])
def test_max_time_ms_honoured(slow_coll, name):
    db = slow_coll
    cmds = {
        "find_none": {"find": "c", "filter": SLOW_MATCH_NONE},
        "find_all": {"find": "c", "filter": SLOW_MATCH_ALL, "batchSize": 100000},
        "aggregate": {"aggregate": "c", "pipeline": [{"$match": SLOW_MATCH_NONE}], "cursor": {}},
        "group": {"aggregate": "c", "pipeline": [{"$group": {"_id": {"$size": {"$range": [0, 3000]}}}}],
                  "cursor": {}},
        "count": {"count": "c", "query": SLOW_MATCH_NONE},
        "distinct": {"distinct": "c", "key": "a", "query": SLOW_MATCH_NONE},
        "update": {"update": "c", "updates": [{"q": SLOW_MATCH_NONE, "u": {"$set": {"z": 1}}, "multi": True}]},
        "delete": {"delete": "c", "deletes": [{"q": SLOW_MATCH_NONE, "limit": 0}]},
        "findAndModify": {"findAndModify": "c", "query": SLOW_MATCH_NONE, "update": {"$set": {"z": 1}}},
        "explain": {"explain": {"find": "c", "filter": SLOW_MATCH_NONE}, "verbosity": "executionStats"},
    }
    start = time.monotonic()
    with pytest.raises(OperationFailure) as e:
        if name == "getMore":
            # The find's time limit binds its getMores (maxTimeMS on the getMore of a
            # non-awaitData cursor is refused, as MongoDB 8.0 does).
            r = db.command({"find": "c", "filter": SLOW_MATCH_ALL, "batchSize": 1, "maxTimeMS": 50})
            db.command({"getMore": r["cursor"]["id"], "collection": "c", "batchSize": 100000})
        else:
            db.command({**cmds[name], "maxTimeMS": 50})
    took = time.monotonic() - start
    assert e.value.code == 50, e.value.details
    assert e.value.details["codeName"] == "MaxTimeMSExpired"
    assert took < 2.5, f"{name} took {took:.2f}s to time out"


def _connect_when_slot_free(port: int, timeout: float = 20) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        s = wire.connect(port)
        try:
            assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
            return s
        except wire.Closed:
            s.close()
            assert time.monotonic() < deadline, "no connection slot became free"
            time.sleep(0.1)


def test_max_conns_closes_extra_connections(start_nidus):
    server = start_nidus(extra_args=["--maxConns", "3"])
    socks = []
    try:
        # The harness's start-up client may hold a slot a little longer (its monitor's
        # awaitable hello ends within maxAwaitTimeMS).
        for _ in range(3):
            socks.append(_connect_when_slot_free(server.port))
        extra = wire.connect(server.port)
        with pytest.raises(wire.Closed):
            wire.command(extra, {"ping": 1, "$db": "admin"})
        extra.close()
        status = wire.command(socks[0], {"serverStatus": 1, "$db": "admin"})
        assert status["connections"]["current"] == 3
        assert status["connections"]["available"] == 0
        socks.pop().close()
        socks.append(_connect_when_slot_free(server.port))
    finally:
        for s in socks:
            s.close()
    assert "too many open connections" in server.log_text()


def test_slow_clients_do_not_stall_others(nidus_server, client, db):
    """Clients stalled mid-header, mid-body or announcing 48 MB do not delay anyone else."""
    msg = wire.op_msg({"insert": "c", "documents": [{"x": 1}], "$db": db.name})
    stalled = []
    try:
        for i in range(30):
            s = wire.connect(nidus_server.port)
            if i % 3 == 0:
                s.sendall(msg[:7])  # part of the header
            elif i % 3 == 1:
                s.sendall(msg[:-9])  # all but the end of the body
            else:
                s.sendall(wire.header(48_000_000, 1, 0, wire.OP_MSG) + b"\x00" * 100)
            stalled.append(s)
        worst = 0.0
        for i in range(200):
            t = time.monotonic()
            db.c.insert_one({"i": i})
            assert db.c.find_one({"i": i})["i"] == i
            worst = max(worst, time.monotonic() - t)
        assert worst < 2.0, f"a round trip took {worst:.2f}s beside stalled clients"
        assert db.c.count_documents({}) == 200  # nothing from the stalled inserts ran
    finally:
        for s in stalled:
            s.close()
    assert nidus_server.is_running()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_announced_size_is_not_allocated_up_front(start_nidus):
    """100 connections announcing 47 MB messages must not cost 4.7 GB."""
    server = start_nidus()
    before = _rss_kib(server.proc.pid)
    socks = []
    try:
        for _ in range(100):
            s = wire.connect(server.port)
            s.sendall(wire.header(47_000_000, 1, 0, wire.OP_MSG) + b"\x00" * 1000)
            socks.append(s)
        with wire.connect(server.port) as s:  # every connection above has been read from
            assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
        time.sleep(0.3)
        grown_mib = (_rss_kib(server.proc.pid) - before) / 1024
        assert grown_mib < 200, f"RSS grew by {grown_mib:.0f} MiB"
    finally:
        for s in socks:
            s.close()


def test_message_over_max_size_closes_connection(nidus_server):
    with wire.connect(nidus_server.port) as s:
        s.sendall(wire.header(48_000_001, 1, 0, wire.OP_MSG) + b"\x00" * 64)
        with pytest.raises(wire.Closed):
            wire.read_message(s)
    assert "message msgLen 48000001 is invalid" in nidus_server.log_text()
    with wire.connect(nidus_server.port) as s:
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1


def test_closed_client_frees_its_connections_at_once(start_nidus):
    """A driver's monitor waits in an awaitable hello (up to 10 s); when the client goes
    away, the server notices at once instead of holding the thread and the slot."""
    server = start_nidus()
    with wire.connect(server.port) as probe:
        def current() -> int:
            return wire.command(probe, {"serverStatus": 1, "$db": "admin"})["connections"]["current"]

        def wait_for_only_probe(limit: float) -> float:
            start = time.monotonic()
            while current() != 1:
                assert time.monotonic() - start < limit, f"{current()} connections still open"
                time.sleep(0.05)
            return time.monotonic() - start

        wait_for_only_probe(30)  # the harness's start-up client
        c = MongoClient(server.uri, serverSelectionTimeoutMS=5000)
        c.admin.command("ping")
        time.sleep(0.5)  # its monitor is now inside an awaitable hello
        assert current() > 1
        c.close()
        took = wait_for_only_probe(3)
    assert took < 3
