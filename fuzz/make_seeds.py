"""Writes the seed inputs in fuzz/seeds/<target>/ (checked in; rerun after editing).

Structured targets (filter, update, projection, expression, pipeline) read a mode byte 0
followed by BSON documents: the spec first (wrapped as {"spec": ...} when it is not a
document), then documents to apply it to. See fuzz/src/lib.rs.

    python3 fuzz/make_seeds.py      # needs pymongo's bson (tests/requirements.txt)
"""

import os
import shutil
import struct
import zlib

import bson
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import Binary

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = [
    {"_id": 1, "a": 1, "b": "x"},
    {"_id": 2, "a": [1, 2, {"b": 3}], "c": {"d": None}},
    {"_id": 3, "a": {"b": [{"c": 1}, {"c": [2, 3]}]}, "x": 2.5},
    {"_id": ObjectId("0123456789ab0123456789ab"), "a": "str", "b": [[1], []], "d": Decimal128("1.5")},
]


def enc(d):
    return bson.encode(d)


def structured(spec, docs=DOCS):
    first = spec if isinstance(spec, dict) else {"spec": spec}
    return b"\x00" + enc(first) + b"".join(enc(d) for d in docs)


def header(length, op, request_id=1):
    return struct.pack("<iiii", length, request_id, 0, op)


def op_msg(body, flags=0, sequences=(), checksum=False):
    payload = struct.pack("<I", flags | (1 if checksum else 0))
    for name, docs in sequences:
        content = name.encode() + b"\x00" + b"".join(enc(d) for d in docs)
        payload += b"\x01" + struct.pack("<i", len(content) + 4) + content
    payload += b"\x00" + enc(body)
    msg = header(16 + len(payload) + (4 if checksum else 0), 2013) + payload
    if checksum:
        msg += b"\x00\x00\x00\x00"  # wrong on purpose: exercises the mismatch path
    return msg


def op_query(coll, query, extra=b""):
    payload = struct.pack("<I", 0) + coll.encode() + b"\x00" + struct.pack("<ii", 0, -1) + enc(query) + extra
    return header(16 + len(payload), 2004) + payload


def op_compressed(inner, compressor_id, compressed):
    body_len = len(inner) - 16
    op = struct.unpack("<i", inner[12:16])[0]
    payload = struct.pack("<iiB", op, body_len, compressor_id) + compressed
    return header(16 + len(payload), 2012) + payload


def wire_seeds():
    hello = op_msg({"hello": 1, "$db": "admin"})
    out = [
        hello,
        op_msg({"insert": "c", "$db": "t"}, sequences=[("documents", DOCS)]),
        op_msg({"update": "c", "$db": "t"}, sequences=[("updates", [{"q": {}, "u": {"$set": {"a": 1}}}])], flags=2),
        op_msg({"find": "c", "filter": {"a": {"$gt": 1}}, "$db": "t"}, checksum=True),
        op_msg({"ping": 1, "$db": "admin", "a": {"b": {"c": [1, 2]}}}, flags=1 << 16),
        op_query("admin.$cmd", {"isMaster": 1}),
        op_query("admin.$cmd", {"$query": {"hello": 1}}, extra=enc({"x": 1})),
        op_compressed(hello, 0, hello[16:]),
        op_compressed(hello, 2, zlib.compress(hello[16:])),
    ]
    try:
        import snappy

        out.append(op_compressed(hello, 1, snappy.compress(hello[16:])))
    except ImportError:
        pass
    return out


def bson_seeds():
    return [
        enc({}),
        enc(DOCS[1]),
        enc({
            "i": 1, "l": Int64(2), "d": 1.5, "s": "é", "b": True, "n": None, "o": ObjectId(),
            "t": Timestamp(1, 2), "r": Regex("^a", "i"), "bin": Binary(b"\x01\x02", 4),
            "dec": Decimal128("-0"), "min": MinKey(), "max": MaxKey(), "arr": [1, [2, [3]]],
        }),
        enc({"a": {"a": {"a": {"a": {"a": 1}}}}}),
    ]


FILTERS = [
    {"a": 1},
    {"a": {"$gt": 1, "$lt": 10}},
    {"a.b": {"$in": [1, "x", None]}, "c": {"$exists": False}},
    {"$or": [{"a": 1}, {"b": {"$regex": "^x", "$options": "i"}}], "$nor": [{"c": 2}]},
    {"a": {"$elemMatch": {"b": {"$gte": 2}}}, "b": {"$size": 2}},
    {"a": {"$not": {"$type": "string"}}, "x": {"$mod": [2, 1]}},
    {"$expr": {"$gt": ["$a", {"$add": ["$x", 1]}]}},
    {"a": {"$all": [1, 2]}, "b": {"$bitsAllSet": [0, 1]}},
    {"$jsonSchema": {"bsonType": "object", "required": ["a"], "properties": {"a": {"bsonType": "int", "minimum": 0}}}},
    {"a": {"$eq": {"b": 3}}, "_id": {"$ne": 2}},
]

UPDATES = [
    {"$set": {"a.b": 1, "c": [1, 2]}},
    {"$inc": {"a": 1}, "$mul": {"x": 2.5}, "$unset": {"b": ""}},
    {"$push": {"a": {"$each": [3, 4], "$slice": -2, "$sort": 1, "$position": 0}}},
    {"$pull": {"a": {"b": {"$gte": 2}}}, "$addToSet": {"b": {"$each": [1, 1]}}},
    {"$rename": {"a": "z"}, "$currentDate": {"d": {"$type": "timestamp"}}},
    {"$set": {"a.$": 9}},
    {"$set": {"a.$[x].c": 0}},
    {"$min": {"a": 0}, "$max": {"x": 10}, "$pop": {"b": -1}, "$bit": {"_id": {"and": 1}}},
    {"b": 2, "c": {"d": 1}},
    [{"$set": {"s": {"$add": ["$a", 1]}}}, {"$unset": "x"}],
]

PROJECTIONS = [
    {"a": 1},
    {"a": 0, "b.c": 0},
    {"a.b": 1, "_id": 0},
    {"a": {"$slice": [1, 2]}, "b": 1},
    {"a": {"$elemMatch": {"b": 3}}},
    {"a.$": 1},
    {"s": {"$concat": ["$b", "x"]}, "a": 1},
    {"x": {"$literal": 1}, "y": "$a"},
]

EXPRESSIONS = [
    {"$add": ["$a", 1, {"$multiply": [2, "$x"]}]},
    {"$cond": {"if": {"$gt": ["$a", 1]}, "then": "big", "else": "small"}},
    {"$map": {"input": "$a", "as": "v", "in": {"$toString": "$$v"}}},
    {"$reduce": {"input": [1, 2, 3], "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}},
    {"$substrCP": ["$b", 0, 2]},
    {"$dateToString": {"date": "$$NOW", "format": "%Y-%m-%d"}},
    {"$let": {"vars": {"x": 1}, "in": {"$divide": ["$$x", 0]}}},
    {"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": 1}], "default": 0}},
    {"$regexFindAll": {"input": "$b", "regex": "x*"}},
    {"$arrayElemAt": ["$a", -1]},
    {"$convert": {"input": "$x", "to": "int", "onError": None}},
    {"$sortArray": {"input": "$a", "sortBy": 1}},
    {"$setUnion": ["$a", [1, 2]]},
    {"$pow": [2, 1000]},
    "$a.b",
    [1, "$a", {"$literal": "$x"}],
]

PIPELINES = [
    [{"$match": {"a": 1}}, {"$project": {"a": 1}}],
    [{"$group": {"_id": "$a", "n": {"$sum": 1}, "m": {"$max": "$x"}, "t": {"$topN": {"n": 2, "sortBy": {"x": 1}, "output": "$b"}}}}],
    [{"$unwind": {"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": True}}, {"$sort": {"a": -1}}],
    [{"$facet": {"x": [{"$count": "n"}], "y": [{"$sortByCount": "$b"}]}}],
    [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5, 10], "default": "other"}}],
    [{"$bucketAuto": {"groupBy": "$x", "buckets": 3}}],
    [{"$lookup": {"from": "o", "localField": "a", "foreignField": "b", "as": "j"}}],
    [{"$lookup": {"from": "o", "let": {"v": "$a"}, "pipeline": [{"$match": {"$expr": {"$eq": ["$b", "$$v"]}}}], "as": "j"}}],
    [{"$unionWith": {"coll": "o", "pipeline": [{"$limit": 1}]}}, {"$skip": 1}],
    [{"$replaceRoot": {"newRoot": "$c"}}, {"$addFields": {"z": 1}}, {"$unset": ["z"]}],
    [{"$sample": {"size": 2}}, {"$redact": "$$KEEP"}],
    [{"$documents": [{"a": 1}]}, {"$set": {"b": 2}}],
    [{"$match": {}}, {"$out": "o"}],
    [{"$merge": {"into": "o", "on": "_id", "whenMatched": "merge", "whenNotMatched": "insert"}}],
]


def write(target, inputs):
    d = os.path.join(HERE, "seeds", target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i, data in enumerate(inputs):
        with open(os.path.join(d, f"{i:03d}"), "wb") as f:
            f.write(data)


def main():
    write("wire_decode", wire_seeds())
    write("bson_validate", bson_seeds())
    write("filter", [structured(f) for f in FILTERS])
    write("update", [structured(u) for u in UPDATES]
          + [structured({"$set": {"a.$[x].c": 0}}, [{"arrayFilters": [{"x.c": {"$gte": 1}}]}] + DOCS)])
    write("projection", [structured(p) for p in PROJECTIONS])
    write("expression", [structured(e) for e in EXPRESSIONS])
    write("pipeline", [structured(p, []) for p in PIPELINES])


if __name__ == "__main__":
    main()
