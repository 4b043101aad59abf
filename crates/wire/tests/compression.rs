mod common;

use bson::doc;
use common::*;
use nidus_wire::*;

const ALL: [Compressor; 4] = [
    Compressor::Noop,
    Compressor::Snappy,
    Compressor::Zlib,
    Compressor::Zstd,
];

#[test]
fn names_and_ids() {
    for c in ALL {
        assert_eq!(Compressor::from_name(c.name()), Some(c));
        assert_eq!(Compressor::from_id(c.id()), Some(c));
    }
    assert_eq!(Compressor::from_name("lz4"), None);
    assert_eq!(Compressor::Zstd as u8, 3);
}

#[test]
fn compressed_requests_decode_with_their_compressor() {
    let msg = OpMsg {
        flags: 0,
        body: doc! {"insert": "c", "$db": "t"},
        sequences: vec![("documents".into(), vec![raw(doc! {"a": "x".repeat(500)})])],
        cluster_time: None,
    };
    for c in ALL {
        for checksum in [false, true] {
            let wire = wrap_compressed(&encode_msg_request(9, &msg, checksum), c);
            assert_eq!(
                MsgHeader::parse(wire[..16].try_into().unwrap()).op_code,
                OP_COMPRESSED
            );
            let decoded = decode_message(&wire).unwrap();
            assert_eq!(decoded.compressor, Some(c));
            let Request::Msg(got) = decoded.request else {
                panic!()
            };
            assert_eq!(
                (got.body, got.sequences),
                (msg.body.clone(), msg.sequences.clone())
            );
        }
        let q = OpQuery {
            flags: 0,
            full_collection_name: "admin.$cmd".into(),
            number_to_skip: 0,
            number_to_return: -1,
            query: doc! {"hello": 1},
            return_fields: None,
        };
        let decoded = decode_message(&wrap_compressed(&encode_query_request(1, &q), c)).unwrap();
        assert_eq!(decoded.request, Request::Query(q));
    }
}

#[test]
fn compressed_replies_round_trip() {
    let body = doc! {"ok": 1.0, "cursor": {"firstBatch": [{"a": "y".repeat(1000)}]}};
    for c in ALL {
        let wire = encode_msg(4, 9, 0, &body, Some(c));
        let h = MsgHeader::parse(wire[..16].try_into().unwrap());
        assert_eq!(
            (h.request_id, h.response_to, h.op_code),
            (4, 9, OP_COMPRESSED)
        );
        assert_eq!(h.message_length as usize, wire.len());
        assert_eq!(decode_msg(&wire).unwrap().body, body);
    }
}

/// An OP_COMPRESSED message with explicit header fields.
fn compressed(original_op: i32, size: i32, id: u8, data: &[u8]) -> Vec<u8> {
    let mut body = original_op.to_le_bytes().to_vec();
    body.extend_from_slice(&size.to_le_bytes());
    body.push(id);
    body.extend_from_slice(data);
    frame(OP_COMPRESSED, &body)
}

#[test]
fn malformed_compressed_messages_are_fatal() {
    let inner = &encode_msg_request(1, &OpMsg::new(hello()), false)[16..];
    let n = inner.len() as i32;
    let snappy = compress(Compressor::Snappy, inner);
    let zlib = compress(Compressor::Zlib, inner);
    let zstd = compress(Compressor::Zstd, inner);
    // Sanity: the well-formed versions decode.
    assert!(decode_message(&compressed(OP_MSG, n, 1, &snappy)).is_ok());
    assert!(decode_message(&compressed(OP_MSG, n, 2, &zlib)).is_ok());
    assert!(decode_message(&compressed(OP_MSG, n, 3, &zstd)).is_ok());

    let cases: Vec<(Vec<u8>, i32, &str)> = vec![
        (
            frame(OP_COMPRESSED, &[1, 2, 3]),
            2,
            "Invalid compressed message header",
        ),
        (compressed(OP_MSG, n, 9, inner), 1, "not available"),
        (
            compressed(OP_COMPRESSED, n, 0, inner),
            17,
            "another OP_COMPRESSED",
        ),
        (compressed(2002, n, 0, inner), 17, "Unsupported opcode 2002"),
        (
            compressed(OP_MSG, -1, 0, inner),
            2,
            "Invalid uncompressedSize",
        ),
        (
            compressed(OP_MSG, MAX_MESSAGE_SIZE_BYTES as i32, 0, inner),
            2,
            "larger than maximum",
        ),
        (
            compressed(OP_MSG, i32::MAX, 2, &zlib),
            2,
            "larger than maximum",
        ),
        (
            compressed(OP_MSG, n + 1, 0, inner),
            2,
            "less data than expected",
        ),
        (
            compressed(OP_MSG, n + 1, 1, &snappy),
            2,
            "less data than expected",
        ),
        (
            compressed(OP_MSG, n - 1, 2, &zlib),
            2,
            "less data than expected",
        ),
        (
            compressed(OP_MSG, n + 1, 2, &zlib),
            2,
            "less data than expected",
        ),
        (
            compressed(OP_MSG, n - 1, 3, &zstd),
            2,
            "invalid or corrupted",
        ),
        (compressed(OP_MSG, n, 2, &zlib[..zlib.len() / 2]), 2, ""),
        (
            compressed(OP_MSG, n, 3, &[0xde, 0xad, 0xbe, 0xef, 1, 2]),
            2,
            "invalid or corrupted",
        ),
    ];
    for (wire, code, msg) in cases {
        assert_err(decode_message(&wire), code, true, msg);
    }
}

#[test]
fn errors_inside_compressed_messages_keep_their_kind() {
    let inner = msg_body(0, &[]); // no body section
    let wire = compressed(OP_MSG, inner.len() as i32, 0, &inner);
    assert_err(decode_message(&wire), 40587, false, "must have a body");
}

#[test]
fn decompress_checks_size_before_allocating() {
    for c in ALL {
        assert!(decompress(c, b"", MAX_MESSAGE_SIZE_BYTES + 1)
            .unwrap_err()
            .is_fatal());
    }
}
