"""Server behaviour seen by drivers: handshake, info commands, compression, limits,
concurrency, malformed input, restart persistence, logs."""

from __future__ import annotations

import datetime
import json
import socket
import struct
import threading
import time
import zlib

import bson
import pymongo
import pytest
from pymongo import MongoClient
from pymongo.errors import DocumentTooLarge, DuplicateKeyError, OperationFailure, WriteError

import wire

MiB = 1024 * 1024


# ------------------------------------------------------------------ handshake and info commands
@pytest.mark.parametrize("cmd", ["hello", "isMaster", "ismaster"])
def test_hello_fields(client, cmd):
    r = client.admin.command(cmd)
    assert r["ok"] == 1
    if cmd == "hello":
        assert r["isWritablePrimary"] is True
    else:
        assert r["ismaster"] is True
    assert r["maxBsonObjectSize"] == 16 * MiB
    assert r["maxMessageSizeBytes"] == 48_000_000
    assert r["maxWriteBatchSize"] == 100_000
    assert isinstance(r["localTime"], datetime.datetime)
    assert r["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(r["connectionId"], int) and r["connectionId"] > 0
    assert r["minWireVersion"] == 0
    assert r["maxWireVersion"] == 25, "MongoDB 8.0 is wire version 25"
    assert r["readOnly"] is False


def test_hello_connection_ids_differ(nidus_server):
    ids = set()
    for _ in range(3):
        s = wire.connect(nidus_server.port)
        with s:
            ids.add(wire.command(s, {"hello": 1, "$db": "admin"})["connectionId"])
    assert len(ids) == 3


def test_awaitable_hello_streams_with_exhaust(nidus_server):
    """The drivers' streaming monitor: hello with this server's topologyVersion and
    maxAwaitTimeMS answers after the wait; with exhaustAllowed every reply is flagged
    moreToCome and the next follows after another wait (mongosh's Node driver needs this)."""
    with wire.connect(nidus_server.port) as s:
        tv = wire.command(s, {"hello": 1, "$db": "admin"})["topologyVersion"]
        started = time.monotonic()
        reply = wire.command(s, {"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 300, "$db": "admin"})
        assert reply["isWritablePrimary"] is True
        assert time.monotonic() - started >= 0.25, "an awaitable hello waits maxAwaitTimeMS"
        s.sendall(wire.op_msg({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 200, "$db": "admin"},
                              flags=wire.EXHAUST_ALLOWED))
        times = []
        for _ in range(3):
            opcode, _rto, body = wire.read_message(s)
            flags = struct.unpack("<I", body[:4])[0]
            assert flags & wire.MORE_TO_COME, "each streamed hello reply is flagged moreToCome"
            assert wire.parse_reply(opcode, body)["ok"] == 1.0
            times.append(time.monotonic())
        assert times[2] - times[0] >= 0.3, "replies come one maxAwaitTimeMS apart"
        # A different process's topologyVersion is answered at once.
        with wire.connect(nidus_server.port) as s2:
            started = time.monotonic()
            other = {"processId": bson.ObjectId(), "counter": 0}
            wire.command(s2, {"hello": 1, "topologyVersion": other, "maxAwaitTimeMS": 5000, "$db": "admin"})
            assert time.monotonic() - started < 2


def test_legacy_op_query_handshake(nidus_server):
    """Drivers open every connection with OP_QUERY isMaster on admin.$cmd; the reply is OP_REPLY."""
    with wire.connect(nidus_server.port) as s:
        msg = wire.op_query("admin.$cmd", {"isMaster": 1, "helloOk": True,
                                           "client": {"driver": {"name": "raw", "version": "0"}},
                                           "compression": ["zstd", "snappy", "zlib"]})
        s.sendall(msg)
        opcode, response_to, body = wire.read_message(s)
        assert opcode == wire.OP_REPLY
        assert response_to == struct.unpack("<i", msg[4:8])[0]
        r = wire.parse_reply(opcode, body)
        assert r["ok"] == 1 and r["ismaster"] is True
        assert r.get("helloOk") is True
        assert set(r.get("compression", [])) >= {"zstd", "snappy", "zlib"}, r.get("compression")
        # the same connection then speaks OP_MSG
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1


def test_ping_whatsmyuri_connection_status(client):
    assert client.admin.command("ping")["ok"] == 1
    you = client.admin.command("whatsmyuri")["you"]
    assert you.startswith("127.0.0.1:")
    cs = client.admin.command("connectionStatus")
    assert cs["ok"] == 1 and "authInfo" in cs
    assert cs["authInfo"]["authenticatedUsers"] == []


def test_get_parameter_star(client):
    r = client.admin.command("getParameter", "*")
    assert r["ok"] == 1
    assert "enableTestCommands" in r, "pymongo's test suite reads getParameter('*')['enableTestCommands']"
    assert r["enableTestCommands"] in (True, 1, "1")
    one = client.admin.command({"getParameter": 1, "enableTestCommands": 1})
    assert one["enableTestCommands"] in (True, 1, "1")


def test_get_cmd_line_opts(client, nidus_server):
    r = client.admin.command("getCmdLineOpts")
    assert r["ok"] == 1
    assert isinstance(r["argv"], list) and "--port" in r["argv"]
    assert "parsed" in r
    parsed = r["parsed"]
    assert parsed.get("net", {}).get("port") == nidus_server.port
    # pymongo's test suite falls back to parsed.setParameter.enableTestCommands
    assert parsed.get("setParameter", {}).get("enableTestCommands") in ("1", 1, True)


def test_build_info(client):
    r = client.admin.command("buildInfo")
    assert r["ok"] == 1
    assert r["version"].startswith("8.0."), r["version"]
    va = r["versionArray"]
    assert list(va[:2]) == [8, 0] and len(va) == 4
    assert r["maxBsonObjectSize"] == 16 * MiB
    # lower-case spelling works too (pymongo's test_database uses "buildinfo")
    assert client.admin.command("buildinfo")["version"] == r["version"]
    assert client.server_info()["version"] == r["version"]


def test_host_info(client):
    r = client.admin.command("hostInfo")
    assert r["ok"] == 1
    assert "system" in r and "os" in r
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    assert r["system"]["memSizeMB"] == total_kb // 1024
    # The cgroup's limit when lower, as mongod reports it.
    assert 0 < r["system"]["memLimitMB"] <= r["system"]["memSizeMB"]


def test_server_status(client, db):
    before = client.admin.command("serverStatus")
    for key in ("host", "version", "process", "pid", "uptime", "uptimeMillis", "localTime",
                "connections", "opcounters", "mem"):
        assert key in before, f"serverStatus lacks {key}"
    assert before["version"].startswith("8.0.")
    conns = before["connections"]
    assert conns["current"] >= 1 and "available" in conns and conns["totalCreated"] >= conns["current"]
    for k in ("insert", "query", "update", "delete", "getmore", "command"):
        assert k in before["opcounters"], f"opcounters lacks {k}"
    db.c.insert_many([{"x": i} for i in range(3)])
    db.c.find_one({"x": 1})
    after = client.admin.command("serverStatus")
    assert after["opcounters"]["insert"] - before["opcounters"]["insert"] == 3
    assert after["opcounters"]["query"] > before["opcounters"]["query"]
    assert after["uptimeMillis"] >= before["uptimeMillis"]


def test_list_databases_db_stats_coll_stats_validate(client, db):
    db.c.insert_many([{"_id": i, "pad": "x" * 100} for i in range(10)])
    dbs = client.admin.command("listDatabases")
    assert dbs["ok"] == 1 and "totalSize" in dbs
    assert db.name in [d["name"] for d in dbs["databases"]]
    names = client.admin.command("listDatabases", nameOnly=True)["databases"]
    assert {"name": db.name} in names
    st = db.command("dbStats")
    assert st["ok"] == 1 and st["db"] == db.name and st["collections"] == 1 and st["objects"] == 10
    cs = db.command("collStats", "c")
    assert cs["ok"] == 1 and cs["count"] == 10 and cs["ns"] == f"{db.name}.c" and cs["nindexes"] == 1
    v = db.command("validate", "c")
    assert v["ok"] == 1 and v["valid"] is True and v["nrecords"] == 10


def test_end_sessions_and_sessions(client, db):
    with client.start_session() as s:
        db.c.insert_one({"_id": 1, "x": 1}, session=s)
        assert db.c.find_one({"x": 1}, session=s) == {"_id": 1, "x": 1}
    assert client.admin.command("endSessions", [{"id": bson.Binary(b"\x00" * 16, 4)}])["ok"] == 1


def test_connect_without_direct_connection(nidus_server):
    """What users type: mongodb://127.0.0.1:port/ (topology discovery, no directConnection)."""
    with MongoClient(f"mongodb://127.0.0.1:{nidus_server.port}/", serverSelectionTimeoutMS=10000) as c:
        c.t_nodirect.c.drop()
        c.t_nodirect.c.insert_one({"_id": 1})
        assert c.t_nodirect.c.find_one() == {"_id": 1}
        c.drop_database("t_nodirect")


def test_unacknowledged_writes(nidus_server, db):
    """w:0 uses OP_MSG moreToCome; the server must not reply and must apply the write."""
    with nidus_server.client(w=0) as c:
        c[db.name].c.insert_many([{"_id": i} for i in range(50)])
    deadline = time.time() + 10
    while db.c.count_documents({}) < 50 and time.time() < deadline:
        time.sleep(0.05)
    assert db.c.count_documents({}) == 50


def test_more_to_come_raw_then_ack(nidus_server, db):
    with wire.connect(nidus_server.port) as s:
        s.sendall(wire.op_msg({"insert": "c", "$db": db.name, "documents": [{"_id": 1}],
                               "writeConcern": {"w": 0}}, flags=wire.MORE_TO_COME))
        r = wire.command(s, {"find": "c", "$db": db.name, "filter": {}})
        assert r["cursor"]["firstBatch"] == [{"_id": 1}]


def test_checksum_present_is_accepted(nidus_server):
    with wire.connect(nidus_server.port) as s:
        r = wire.command(s, {"ping": 1, "$db": "admin"}, checksum=True)
        assert r["ok"] == 1


def test_document_sequence_section(nidus_server, db):
    with wire.connect(nidus_server.port) as s:
        r = wire.command(s, {"insert": "c", "$db": db.name},
                         sequences={"documents": [{"_id": i} for i in range(5)]})
        assert r["ok"] == 1 and r["n"] == 5
    assert db.c.count_documents({}) == 5


# ------------------------------------------------------------------ compression
@pytest.mark.parametrize("compressor", ["snappy", "zlib", "zstd"])
def test_driver_compression_round_trip(nidus_server, compressor):
    with nidus_server.client(compressors=compressor) as c:
        coll = c[f"t_compress_{compressor}"].c
        coll.drop()
        docs = [{"_id": i, "text": "lorem ipsum " * 200, "n": i} for i in range(200)]
        coll.insert_many(docs)
        assert list(coll.find({}).sort("_id", 1)) == docs
        assert c.admin.command("ping")["ok"] == 1
        c.drop_database(f"t_compress_{compressor}")


@pytest.mark.parametrize("compressor", ["snappy", "zlib", "zstd"])
def test_raw_op_compressed(nidus_server, compressor):
    with wire.connect(nidus_server.port) as s:
        hello = wire.command(s, {"hello": 1, "$db": "admin", "compression": [compressor]})
        assert hello.get("compression") == [compressor], hello.get("compression")
        msg = wire.op_compressed(wire.op_msg({"ping": 1, "$db": "admin"}), compressor)
        s.sendall(msg)
        opcode, _rto, body = wire.read_message(s)
        assert wire.parse_reply(opcode, body)["ok"] == 1


# ------------------------------------------------------------------ limits
def test_oversized_document_rejected(db):
    """Just over 16 MiB: pymongo sends it (it allows 16 KiB of slack) and MongoDB answers with the
    write error BadValue 'object to insert too large. size in bytes: N, max size: 16777216'.
    Far over: pymongo refuses it itself (DocumentTooLarge)."""
    with pytest.raises(WriteError) as ei:
        db.c.insert_one({"big": "x" * (16 * MiB + 10)})
    assert ei.value.code == 2, ei.value.details
    assert ei.value.details["errmsg"].startswith("object to insert too large. size in bytes: "), ei.value.details
    assert ei.value.details["errmsg"].endswith(", max size: 16777216"), ei.value.details
    with pytest.raises(DocumentTooLarge):
        db.c.insert_one({"big": "x" * (16 * MiB + 64 * 1024)})
    assert db.c.count_documents({}) == 0


def test_oversized_document_rejected_by_server(nidus_server, db):
    """Sent raw, past the driver's check: 16 MiB + 1 KiB is 'object to insert too large' (BadValue 2)."""
    big = {"_id": 1, "big": "x" * (16 * MiB + 1024)}
    with wire.connect(nidus_server.port, timeout=30) as s:
        r = wire.command(s, {"insert": "c", "$db": db.name}, sequences={"documents": [big]})
        errs = r.get("writeErrors") or []
        if r["ok"] == 1:
            assert r["n"] == 0 and errs, r
            assert errs[0]["code"] in (2, 10334), errs
            assert "too large" in errs[0]["errmsg"], errs
        else:
            assert r["code"] in (2, 10334), r
        # the connection keeps working
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
    assert db.c.count_documents({}) == 0


def test_way_oversized_document_in_body(nidus_server, db):
    """17 MiB document inside the command body: an error (BSONObjectTooLarge 10334) or a close."""
    big = {"_id": 1, "big": "x" * (17 * MiB)}
    with wire.connect(nidus_server.port, timeout=30) as s:
        try:
            r = wire.command(s, {"insert": "c", "$db": db.name, "documents": [big]})
        except wire.Closed:
            r = None
        if r is not None:
            assert r["ok"] == 0 or r.get("writeErrors"), r
    assert db.c.count_documents({}) == 0
    assert nidus_server.is_running()


def test_write_batch_size_limit(nidus_server, db):
    """More than maxWriteBatchSize (100,000) ops in one command is refused."""
    docs = [{"_id": i} for i in range(100_001)]
    with wire.connect(nidus_server.port, timeout=60) as s:
        r = wire.command(s, {"insert": "c", "$db": db.name}, sequences={"documents": docs})
        assert r["ok"] == 0, {k: v for k, v in r.items() if k != "writeErrors"}
        # UNSURE of the message; MongoDB: "Write batch sizes must be between 1 and 100000. Got 100001 operations."
        assert r["code"] == 16 and r["codeName"] == "InvalidLength", r
    assert db.c.count_documents({}) == 0


def test_driver_splits_large_insert_many(db):
    docs = [{"_id": i} for i in range(100_001)]
    assert len(db.c.insert_many(docs).inserted_ids) == 100_001
    assert db.c.count_documents({}) == 100_001


def test_sixteen_mib_batches(db):
    """A find returning ~40 MiB is split into batches of at most 16 MiB."""
    pad = "y" * (MiB - 100)
    db.c.insert_many([{"_id": i, "pad": pad} for i in range(40)])
    r = db.command("find", "c")
    first = r["cursor"]["firstBatch"]
    assert 0 < len(first) <= 16
    assert r["cursor"]["id"] != 0
    assert sum(1 for _ in db.c.find({})) == 40


# ------------------------------------------------------------------ concurrency
def test_200_concurrent_connections(nidus_server, client, db):
    n_conns, per_conn = 200, 10
    socks = [wire.connect(nidus_server.port, timeout=60) for _ in range(n_conns)]
    try:
        for s in socks:
            assert wire.command(s, {"hello": 1, "$db": "admin"})["ok"] == 1
        status = client.admin.command("serverStatus")
        assert status["connections"]["current"] >= n_conns
        barrier = threading.Barrier(n_conns)
        errors = []

        def work(i, s):
            try:
                barrier.wait(30)
                for j in range(per_conn):
                    r = wire.command(s, {"insert": "c", "$db": db.name,
                                         "documents": [{"_id": i * 1000 + j, "t": i}]})
                    assert r["ok"] == 1 and r["n"] == 1, r
            except Exception as e:  # noqa: BLE001
                errors.append(f"conn {i}: {e!r}")

        threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(socks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:5]
    finally:
        for s in socks:
            s.close()
    assert db.c.count_documents({}) == n_conns * per_conn


def test_threads_share_a_driver_pool(db):
    errors = []

    def work(i):
        try:
            for j in range(50):
                db.c.insert_one({"_id": f"{i}-{j}"})
                db.c.find_one({"_id": f"{i}-{j}"})
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert db.c.count_documents({}) == 32 * 50


# ------------------------------------------------------------------ malformed input
def _valid_msg_header_with(body: bytes, opcode: int = wire.OP_MSG) -> bytes:
    return wire.header(16 + len(body), wire.next_request_id(), 0, opcode) + body


def _bad_bson_len() -> bytes:
    doc = bson.encode({"ping": 1, "$db": "admin"})
    bad = struct.pack("<i", len(doc) + 100) + doc[4:]  # claims more bytes than it has
    return _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bad)


def _bad_bson_type() -> bytes:
    doc = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
    doc[4] = 0x77  # element type 0x77 does not exist
    return _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bytes(doc))


def _bad_bson_no_terminator() -> bytes:
    doc = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
    doc[-1] = 0x01
    return _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bytes(doc))


def _bad_utf8() -> bytes:
    doc = bytearray(bson.encode({"ping": 1, "$db": "admin", "s": "abc"}))
    i = doc.rindex(b"abc")
    doc[i:i + 3] = b"\xff\xfe\xfd"
    return _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bytes(doc))


def _compressed_wrong_size() -> bytes:
    inner = wire.op_msg({"ping": 1, "$db": "admin"})[16:]
    body = struct.pack("<iiB", wire.OP_MSG, 5, 2) + zlib.compress(inner)  # claims 5 bytes uncompressed
    return _valid_msg_header_with(body, opcode=wire.OP_COMPRESSED)


MALFORMED = {
    "length_below_header": wire.header(4, 1, 0, wire.OP_MSG),
    "negative_length": wire.header(-100, 1, 0, wire.OP_MSG),
    "length_over_48MB": wire.header(0x7FFFFFFF, 1, 0, wire.OP_MSG) + b"\x00" * 64,
    "unknown_opcode": _valid_msg_header_with(b"\x00" * 32, opcode=9999),
    "garbage_body": _valid_msg_header_with(bytes(range(256)) * 2),
    "empty_op_msg": _valid_msg_header_with(b""),
    "op_msg_flags_only": _valid_msg_header_with(struct.pack("<I", 0)),
    "unknown_required_flag_bit": _valid_msg_header_with(struct.pack("<I", 1 << 5) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})),
    "unknown_section_kind": _valid_msg_header_with(struct.pack("<I", 0) + b"\x05" + bson.encode({"ping": 1})),
    "two_body_sections": _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"}) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})),
    "no_body_section": _valid_msg_header_with(struct.pack("<I", 0) + b"\x01" + struct.pack("<i", 4 + 10) + b"documents\x00"),
    "sequence_size_overruns": _valid_msg_header_with(struct.pack("<I", 0) + b"\x00" + bson.encode({"insert": "c", "$db": "x"}) + b"\x01" + struct.pack("<i", 1000) + b"documents\x00"),
    "bson_length_overruns": _bad_bson_len(),
    "bson_bad_type": _bad_bson_type(),
    "bson_no_terminator": _bad_bson_no_terminator(),
    "bson_bad_utf8": _bad_utf8(),
    "checksum_mismatch": wire.op_msg({"ping": 1, "$db": "admin"}, bad_checksum=True),
    "missing_db": wire.op_msg({"ping": 1}),
    "op_compressed_bad_payload": _valid_msg_header_with(struct.pack("<iiB", wire.OP_MSG, 100, 1) + b"not snappy at all", opcode=wire.OP_COMPRESSED),
    "op_compressed_unknown_compressor": _valid_msg_header_with(struct.pack("<iiB", wire.OP_MSG, 10, 42) + b"x" * 10, opcode=wire.OP_COMPRESSED),
    "op_compressed_wrong_size": _compressed_wrong_size(),
    "op_query_garbage": _valid_msg_header_with(b"\x00\x00\x00\x00admin.$cmd", opcode=wire.OP_QUERY),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_message(nidus_server, name):
    """Error reply or clean close, never a hang or a crash; the server keeps serving."""
    data = MALFORMED[name]
    s = wire.connect(nidus_server.port, timeout=10)
    outcome = None
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            outcome = "closed while sending"
        if outcome is None:
            try:
                opcode, _rto, body = wire.read_message(s)
                reply = wire.parse_reply(opcode, body)
                outcome = f"reply {reply}"
                assert reply.get("ok") == 0, f"malformed message {name} got a success reply: {reply}"
            except wire.Closed:
                outcome = "closed"
            except socket.timeout:
                pytest.fail(f"{name}: server neither replied nor closed within 10 s")
    finally:
        s.close()
    assert nidus_server.is_running(), f"server died after {name}: {nidus_server.log_tail()}"
    with wire.connect(nidus_server.port) as s2:
        assert wire.command(s2, {"ping": 1, "$db": "admin"})["ok"] == 1, outcome


def test_truncated_header_then_eof(nidus_server):
    s = wire.connect(nidus_server.port, timeout=10)
    s.sendall(wire.header(100, 1, 0, wire.OP_MSG)[:10])
    s.shutdown(socket.SHUT_WR)
    try:
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    s.close()
    with wire.connect(nidus_server.port) as s2:
        assert wire.command(s2, {"ping": 1, "$db": "admin"})["ok"] == 1


def test_truncated_body_then_eof(nidus_server):
    msg = wire.op_msg({"ping": 1, "$db": "admin"})
    s = wire.connect(nidus_server.port, timeout=10)
    s.sendall(msg[:-5])
    s.shutdown(socket.SHUT_WR)
    try:
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    s.close()
    assert nidus_server.is_running()
    with wire.connect(nidus_server.port) as s2:
        assert wire.command(s2, {"ping": 1, "$db": "admin"})["ok"] == 1


def test_abrupt_disconnects_mid_command(nidus_server, db):
    for _ in range(20):
        s = wire.connect(nidus_server.port)
        s.sendall(wire.op_msg({"insert": "c", "$db": db.name, "documents": [{"x": 1}] * 1000}))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.close()
    with wire.connect(nidus_server.port) as s2:
        assert wire.command(s2, {"ping": 1, "$db": "admin"})["ok"] == 1


@pytest.mark.parametrize("model", ["thread", "task"])
def test_pipelined_and_fragmented_messages(start_nidus, monkeypatch, model):
    """However the client's bytes arrive (several messages in one write, a message a few
    bytes at a time, a message and part of the next), every request gets its reply, in
    order; a moreToCome request gets none. On a connection's own thread (the default for
    plain TCP) and on a tokio task (NIDUS_CONNECTION_THREADS=0, as TLS connections)."""
    if model == "task":
        monkeypatch.setenv("NIDUS_CONNECTION_THREADS", "0")
    server = start_nidus()

    def reply_to(s):
        opcode, response_to, body = wire.read_message(s)
        return response_to, wire.parse_reply(opcode, body)

    def request(doc, **kw):
        msg = wire.op_msg({**doc, "$db": "pipe"}, **kw)
        return msg, struct.unpack("<i", msg[4:8])[0]

    with wire.connect(server.port) as s:
        # Three messages in one write, then their replies in order.
        msgs = [request({"insert": "c", "documents": [{"_id": i}]}) for i in range(3)]
        s.sendall(b"".join(m for m, _ in msgs))
        for i, (_, rid) in enumerate(msgs):
            response_to, doc = reply_to(s)
            assert (response_to, doc["ok"], doc["n"]) == (rid, 1.0, 1), (i, doc)
        # One message a few bytes at a time.
        msg, rid = request({"find": "c", "filter": {"_id": 1}})
        for at in range(0, len(msg), 7):
            s.sendall(msg[at:at + 7])
            time.sleep(0.002)
        response_to, doc = reply_to(s)
        assert response_to == rid
        assert doc["cursor"]["firstBatch"] == [{"_id": 1}]
        # A fire-and-forget insert, a find and half of a ping in one write, then the rest.
        silent, _ = request({"insert": "c", "documents": [{"_id": 9}]}, flags=wire.MORE_TO_COME)
        find, find_id = request({"find": "c", "filter": {"_id": 9}})
        ping, ping_id = request({"ping": 1})
        s.sendall(silent + find + ping[:10])
        response_to, doc = reply_to(s)
        assert response_to == find_id
        assert doc["cursor"]["firstBatch"] == [{"_id": 9}]
        time.sleep(0.05)
        s.sendall(ping[10:])
        response_to, doc = reply_to(s)
        assert (response_to, doc["ok"]) == (ping_id, 1.0)
        # A reply larger than any read buffer: a find of a document of 1 MiB, sent as a
        # document sequence too big for one read.
        big = {"_id": "big", "pad": "x" * (1 << 20)}
        msg, rid = request({"insert": "c"}, sequences={"documents": [big]})
        s.sendall(msg)
        assert reply_to(s) == (rid, {"n": 1, "ok": 1.0})
        msg, rid = request({"find": "c", "filter": {"_id": "big"}})
        s.sendall(msg)
        response_to, doc = reply_to(s)
        assert response_to == rid
        assert doc["cursor"]["firstBatch"] == [big]


def test_command_errors_have_code_name(client):
    with pytest.raises(OperationFailure) as ei:
        client.admin.command("definitelyNotACommand")
    assert ei.value.code == 59
    assert ei.value.details["codeName"] == "CommandNotFound"
    assert ei.value.details["errmsg"] == "no such command: 'definitelyNotACommand'"


# ------------------------------------------------------------------ restart persistence and shutdown
def _snapshot(c):
    return {
        "a": list(c.p.a.find({}).sort("k", 1)),
        "b": list(c.p.b.find({})),
        "p_collections": sorted(c.p.list_collection_names()),
        "p2_collections": sorted(c.p2.list_collection_names()),
        "indexes": sorted((i["name"], tuple(i["key"].items()), bool(i.get("unique"))) for i in c.p.a.list_indexes()),
        "uuids": {i["name"]: i.get("info", {}).get("uuid") for i in c.p.list_collections()},
    }


def test_restart_keeps_data_and_indexes(start_nidus, tmp_path):
    dbpath = tmp_path / "persist"
    srv = start_nidus(dbpath=dbpath)
    with srv.client() as c:
        c.p.a.insert_many([{"_id": i, "k": f"key{i:04d}", "v": i * 1.5} for i in range(1000)])
        c.p.a.create_index("k", unique=True)
        c.p.a.create_index([("v", -1)], name="v_desc")
        c.p.b.insert_one({"_id": "only"})
        c.p.a.update_one({"k": "key0005"}, {"$set": {"updated": True}})
        c.p.a.delete_one({"k": "key0006"})
        c.p2.x.insert_one({"_id": 1})
        c.p2.drop_collection("x")
        before = _snapshot(c)
    rc = srv.stop()
    assert rc == 0, f"SIGTERM exit code {rc}\n{srv.log_tail()}"
    srv.restart()
    with srv.client() as c:
        after = _snapshot(c)
        for key in before:
            assert after[key] == before[key], f"{key} changed across a restart"
        # and the state itself is what was written
        assert len(after["a"]) == 999
        assert {"_id": 5, "k": "key0005", "v": 7.5, "updated": True} in after["a"]
        assert after["p_collections"] == ["a", "b"] and "x" not in after["p2_collections"]
        assert after["indexes"] == [("_id_", (("_id", 1),), False), ("k_1", (("k", 1),), True),
                                    ("v_desc", (("v", -1),), False)]
        with pytest.raises(DuplicateKeyError):
            c.p.a.insert_one({"k": "key0001"})
        assert list(c.p.a.find({"k": "key0007"}, {"_id": 1})) == [{"_id": 7}]
        # new writes after restart do not collide with old record ids
        c.p.a.insert_many([{"_id": 10_000 + i, "k": f"new{i}"} for i in range(10)])
        assert c.p.a.count_documents({}) == 1009
        assert [d["_id"] for d in c.p.a.find({}, {"_id": 1}).limit(3)] == [0, 1, 2], "natural order = insertion order"


def test_sigterm_clean_shutdown_with_open_connections(start_nidus):
    srv = start_nidus()
    c = srv.client()
    c.t.c.insert_one({"_id": 1})
    cur = c.t.c.find({}, batch_size=1)
    next(cur)
    t0 = time.monotonic()
    rc = srv.stop(timeout=20)
    assert rc == 0, f"exit code {rc}\n{srv.log_tail()}"
    assert time.monotonic() - t0 < 20
    c.close()
    assert not srv.panics()


def test_second_server_on_same_dbpath_refused(start_nidus, tmp_path):
    """RocksDB's LOCK file: a second process on the same dbpath must fail, not corrupt."""
    dbpath = tmp_path / "locked"
    first = start_nidus(dbpath=dbpath)
    from nidus_harness import NidusError, NidusServer

    second = NidusServer(dbpath=dbpath, binary=first.binary, log_name="second-on-same-dbpath")
    try:
        with pytest.raises(NidusError):
            second.start(timeout=15)
    finally:
        if second.is_running():
            second.kill()
    with first.client() as c:
        assert c.admin.command("ping")["ok"] == 1


# ------------------------------------------------------------------ logs
def test_log_lines_are_mongodb_shaped_json(nidus_server, client):
    client.admin.command("ping")
    lines = [l for l in nidus_server.log_text().splitlines() if l.strip() and not l.startswith("### ")]
    assert lines, "the server logged nothing"
    bad = []
    for line in lines[:200]:
        try:
            rec = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        missing = {"t", "s", "c", "id", "ctx", "msg"} - set(rec)
        if missing:
            bad.append(f"{line} (missing {missing})")
        elif not isinstance(rec["t"], dict) or "$date" not in rec["t"]:
            bad.append(f"{line} (t is not {{$date: ...}})")
    assert not bad, "log lines not in MongoDB's shape:\n" + "\n".join(bad[:5])


def test_pymongo_version_pinned():
    assert pymongo.version == "4.20.0"


def test_max_time_always_times_out_reaches_getmore_of_a_timed_cursor(client, db):
    """pymongo's test_max_time_ms_getmore: with `maxTimeAlwaysTimeOut` on, a getMore of a
    cursor whose find had maxTimeMS fails with MaxTimeMSExpired (and the cursor is gone); a
    cursor without a time limit is not affected."""
    db.c.insert_many([{"_id": i} for i in range(10)])
    timed = db.command("find", "c", batchSize=2, maxTimeMS=60_000)["cursor"]["id"]
    untimed = db.command("find", "c", batchSize=2)["cursor"]["id"]
    client.admin.command("configureFailPoint", "maxTimeAlwaysTimeOut", mode="alwaysOn")
    try:
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", timed, collection="c", batchSize=2)
        assert (e.value.code, e.value.details["codeName"]) == (50, "MaxTimeMSExpired")
        assert len(db.command("getMore", untimed, collection="c", batchSize=2)["cursor"]["nextBatch"]) == 2
    finally:
        client.admin.command("configureFailPoint", "maxTimeAlwaysTimeOut", mode="off")
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", timed, collection="c")
    assert e.value.code == 43  # CursorNotFound


@pytest.mark.parametrize("configured,command", [("hello", "hello"), ("isMaster", "isMaster"),
                                                ("isMaster", "ismaster")])
def test_fail_command_with_an_app_name_fails_that_applications_handshake(client, nidus_server,
                                                                         configured, command):
    """MongoDB reads a handshake's client metadata before the command runs, so a `failCommand`
    naming an `appName` fails the handshake `hello` of that application (the SDAM spec's
    'monitors sleep between checks' and CMAP's handshake tests rely on it), and only it. A
    command answers `failCommand` under MongoDB's name for it: pymongo's legacy handshake sends
    `ismaster`, which a fail point on `isMaster` fails."""
    client.admin.command({
        "configureFailPoint": "failCommand", "mode": {"times": 1},
        "data": {"failCommands": [configured], "errorCode": 1234, "appName": "handshake-fp"},
    })
    try:
        meta = {"driver": {"name": "t", "version": "1"}, "os": {"type": "Linux"}}
        other = wire.connect(nidus_server.port)
        try:
            reply = wire.command(other, {command: 1, "$db": "admin",
                                         "client": {**meta, "application": {"name": "another-app"}}})
            assert reply["ok"] == 1, reply
        finally:
            other.close()
        sock = wire.connect(nidus_server.port)
        try:
            body = {command: 1, "$db": "admin", "client": {**meta, "application": {"name": "handshake-fp"}}}
            reply = wire.command(sock, body)
            assert (reply["ok"], reply.get("code")) == (0, 1234), reply
        finally:
            sock.close()
        sock = wire.connect(nidus_server.port)
        try:
            assert wire.command(sock, body)["ok"] == 1
        finally:
            sock.close()
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
