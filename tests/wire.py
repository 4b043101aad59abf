"""Raw MongoDB wire protocol for tests that bypass the driver (malformed input, compression).

Only talks to 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import zlib

import bson

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

CHECKSUM_PRESENT = 1
MORE_TO_COME = 2
EXHAUST_ALLOWED = 1 << 16

COMPRESSOR_IDS = {"noop": 0, "snappy": 1, "zlib": 2, "zstd": 3}

_next_id = 1000


def next_request_id() -> int:
    global _next_id
    _next_id += 1
    return _next_id


# ---------------------------------------------------------------- CRC-32C (Castagnoli)
def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# ---------------------------------------------------------------- building messages
def header(length: int, request_id: int, response_to: int, opcode: int) -> bytes:
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_msg(doc: dict, *, flags: int = 0, checksum: bool = False, bad_checksum: bool = False,
           sequences: dict[str, list[dict]] | None = None, request_id: int | None = None) -> bytes:
    """An OP_MSG with a kind-0 body and optional kind-1 document sequences."""
    if checksum or bad_checksum:
        flags |= CHECKSUM_PRESENT
    body = struct.pack("<I", flags) + b"\x00" + bson.encode(doc)
    for ident, docs in (sequences or {}).items():
        payload = ident.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        body += b"\x01" + struct.pack("<i", 4 + len(payload)) + payload
    rid = request_id if request_id is not None else next_request_id()
    length = 16 + len(body) + (4 if flags & CHECKSUM_PRESENT else 0)
    msg = header(length, rid, 0, OP_MSG) + body
    if flags & CHECKSUM_PRESENT:
        crc = crc32c(msg)
        if bad_checksum:
            crc ^= 0xDEADBEEF
        msg += struct.pack("<I", crc)
    return msg


def op_query(collection: str, query: dict, *, flags: int = 0, skip: int = 0, n_return: int = -1,
             request_id: int | None = None) -> bytes:
    body = struct.pack("<i", flags) + collection.encode() + b"\x00" + struct.pack("<ii", skip, n_return) + bson.encode(query)
    rid = request_id if request_id is not None else next_request_id()
    return header(16 + len(body), rid, 0, OP_QUERY) + body


def compress(data: bytes, compressor: str, level: int = -1) -> bytes:
    if compressor == "noop":
        return data
    if compressor == "zlib":
        return zlib.compress(data, level)
    if compressor == "snappy":
        import snappy

        return snappy.compress(data)
    if compressor == "zstd":
        try:
            from compression import zstd  # Python 3.14+
        except ImportError:
            from backports import zstd
        return zstd.compress(data)
    raise ValueError(compressor)


def decompress(data: bytes, compressor_id: int) -> bytes:
    if compressor_id == 0:
        return data
    if compressor_id == 1:
        import snappy

        return snappy.uncompress(data)
    if compressor_id == 2:
        return zlib.decompress(data)
    if compressor_id == 3:
        try:
            from compression import zstd
        except ImportError:
            from backports import zstd
        return zstd.decompress(data)
    raise ValueError(f"unknown compressor id {compressor_id}")


def op_compressed(message: bytes, compressor: str) -> bytes:
    """Wraps a complete message (header included) in OP_COMPRESSED."""
    length, rid, rto, opcode = struct.unpack("<iiii", message[:16])
    inner = message[16:]
    comp = compress(inner, compressor)
    body = struct.pack("<iiB", opcode, len(inner), COMPRESSOR_IDS[compressor]) + comp
    return header(16 + len(body), rid, rto, OP_COMPRESSED) + body


# ---------------------------------------------------------------- reading replies
class Closed(Exception):
    """The server closed the connection (EOF or reset)."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, BrokenPipeError) as e:
            raise Closed(str(e)) from None
        if not chunk:
            raise Closed("EOF")
        buf += chunk
    return buf


def read_message(sock: socket.socket) -> tuple[int, int, bytes]:
    """Returns (opcode, responseTo, body) with OP_COMPRESSED unwrapped (opcode is the inner one)."""
    hdr = recv_exact(sock, 16)
    length, _rid, response_to, opcode = struct.unpack("<iiii", hdr)
    if length < 16 or length > 64 * 1024 * 1024:
        raise ValueError(f"bad reply length {length}")
    body = recv_exact(sock, length - 16)
    if opcode == OP_COMPRESSED:
        orig_opcode, size, cid = struct.unpack("<iiB", body[:9])
        body = decompress(body[9:], cid)
        assert len(body) == size, (len(body), size)
        return orig_opcode, response_to, body
    return opcode, response_to, body


def parse_reply(opcode: int, body: bytes) -> dict:
    if opcode == OP_MSG:
        flags = struct.unpack("<I", body[:4])[0]
        end = len(body) - (4 if flags & CHECKSUM_PRESENT else 0)
        pos = 4
        doc = None
        while pos < end:
            kind = body[pos]
            pos += 1
            size = struct.unpack("<i", body[pos:pos + 4])[0]
            if kind == 0:
                doc = bson.decode(body[pos:pos + size])
            pos += size
        assert doc is not None, "OP_MSG reply without a body section"
        return doc
    if opcode == OP_REPLY:
        # responseFlags, cursorID, startingFrom, numberReturned, documents
        n = struct.unpack("<i", body[16:20])[0]
        assert n >= 1, "OP_REPLY without documents"
        size = struct.unpack("<i", body[20:24])[0]
        return bson.decode(body[20:20 + size])
    raise ValueError(f"unexpected reply opcode {opcode}")


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def command(sock: socket.socket, doc: dict, **kw) -> dict:
    """Sends one OP_MSG command and returns the reply document."""
    msg = op_msg(doc, **kw)
    sock.sendall(msg)
    opcode, _rto, body = read_message(sock)
    return parse_reply(opcode, body)
