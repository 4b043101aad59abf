mod common;

use bson::doc;
use common::*;
use nidus_wire::*;

#[test]
fn header_round_trip() {
    let h = MsgHeader {
        message_length: 100,
        request_id: -3,
        response_to: 9,
        op_code: OP_MSG,
    };
    assert_eq!(MsgHeader::parse(&h.to_bytes()), h);
}

#[test]
fn check_length_bounds() {
    let h = |len: i32| MsgHeader {
        message_length: len,
        request_id: 0,
        response_to: 0,
        op_code: OP_MSG,
    };
    assert_eq!(check_length(&h(16)).unwrap(), 0);
    assert_eq!(check_length(&h(100)).unwrap(), 84);
    assert_eq!(
        check_length(&h(MAX_MESSAGE_SIZE_BYTES as i32)).unwrap(),
        MAX_MESSAGE_SIZE_BYTES - 16
    );
    for bad in [
        i32::MIN,
        -1,
        0,
        15,
        MAX_MESSAGE_SIZE_BYTES as i32 + 1,
        i32::MAX,
    ] {
        let err = check_length(&h(bad)).unwrap_err();
        assert!(err.is_fatal());
        let e: nidus_common::Error = err.into();
        assert_eq!(e.code.code(), 17);
        assert!(e.message.contains(&format!("msgLen {bad} is invalid")));
    }
}

#[test]
fn body_length_must_match_header() {
    let mut wire = encode_msg_request(1, &OpMsg::new(hello()), false);
    wire.push(0);
    assert_err(decode_message(&wire), 17, true, "is invalid");
}

#[test]
fn unsupported_opcodes_are_fatal() {
    for op in [OP_REPLY, 2001, 2002, 2005, 0, -1] {
        let wire = frame(op, &bytes(&hello()));
        assert_err(
            decode_message(&wire),
            17,
            true,
            &format!("Unsupported opcode {op}"),
        );
    }
}

fn query(return_fields: Option<bson::Document>) -> OpQuery {
    OpQuery {
        flags: 4,
        full_collection_name: "admin.$cmd".into(),
        number_to_skip: 0,
        number_to_return: -1,
        query: doc! { "isMaster": 1, "client": {"driver": {"name": "x"}} },
        return_fields,
    }
}

#[test]
fn op_query_round_trip() {
    for q in [query(None), query(Some(doc! {"a": 1}))] {
        let decoded = decode_message(&encode_query_request(3, &q)).unwrap();
        assert_eq!(decoded.request, Request::Query(q));
        assert_eq!(decoded.compressor, None);
    }
}

#[test]
fn op_query_malformed() {
    let mut wire = encode_query_request(3, &query(Some(doc! {})));
    wire.extend_from_slice(&[1, 2, 3]);
    let n = wire.len() as i32;
    wire[..4].copy_from_slice(&n.to_le_bytes());
    assert_err(decode_message(&wire), 17, false, "unexpected bytes");

    let body = b"\0\0\0\0admin.$cmd"; // name never terminated
    assert_err(
        decode_message(&frame(OP_QUERY, body)),
        17,
        false,
        "NUL-terminated",
    );

    let mut body = vec![0, 0, 0, 0];
    body.extend_from_slice(b"a.$cmd\0");
    body.extend_from_slice(&[0; 8]);
    body.extend_from_slice(&[9, 0, 0, 0, 0x42, b'a', 0, 0, 0]); // unknown element type
    assert_err(
        decode_message(&frame(OP_QUERY, &body)),
        22,
        false,
        "invalid BSON",
    );
}

#[test]
fn op_reply_layout() {
    let d = doc! { "ismaster": true, "ok": 1.0 };
    let wire = encode_reply(10, 3, &d);
    let h = MsgHeader::parse(wire[..16].try_into().unwrap());
    assert_eq!(
        h,
        MsgHeader {
            message_length: wire.len() as i32,
            request_id: 10,
            response_to: 3,
            op_code: OP_REPLY
        }
    );
    assert_eq!(i32::from_le_bytes(wire[16..20].try_into().unwrap()), 8);
    assert_eq!(i64::from_le_bytes(wire[20..28].try_into().unwrap()), 0);
    assert_eq!(i32::from_le_bytes(wire[28..32].try_into().unwrap()), 0);
    assert_eq!(i32::from_le_bytes(wire[32..36].try_into().unwrap()), 1);
    assert_eq!(bson::Document::from_reader(&wire[36..]).unwrap(), d);
}

#[test]
fn error_conversion_carries_code_and_message() {
    let e: nidus_common::Error = WireError::ChecksumMismatch.into();
    assert_eq!(e.code, nidus_common::ErrorCode::ChecksumMismatch);
    assert_eq!(e.message, "OP_MSG checksum does not match contents");
    let e: nidus_common::Error = WireError::ObjectTooLarge(20_000_000).into();
    assert_eq!(e.code, nidus_common::ErrorCode::BSONObjectTooLarge);
    assert!(e
        .message
        .starts_with("BSONObj size: 20000000 (0x1312D00) is invalid"));
}
