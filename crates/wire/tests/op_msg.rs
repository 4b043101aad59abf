mod common;

use bson::{doc, Document};
use common::*;
use nidus_wire::*;

#[test]
fn round_trips_body_and_sequences() {
    let msg = OpMsg {
        flags: EXHAUST_ALLOWED,
        body: doc! { "insert": "c", "$db": "test" },
        sequences: vec![(
            "documents".into(),
            vec![
                raw(doc! {"_id": 1}),
                raw(doc! {"_id": 2, "a": [1, {"b": "x"}]}),
            ],
        )],
        cluster_time: None,
    };
    for checksum in [false, true] {
        let wire = encode_msg_request(42, &msg, checksum);
        let decoded = decode_message(&wire).unwrap();
        assert_eq!(decoded.compressor, None);
        let Request::Msg(got) = decoded.request else {
            panic!()
        };
        assert_eq!(got.body, msg.body);
        assert_eq!(got.sequences, msg.sequences);
        assert_eq!(got.flags & CHECKSUM_PRESENT != 0, checksum);
        assert!(got.exhaust_allowed());
        assert!(!got.more_to_come());
        assert_eq!(got.sequence("documents").unwrap().len(), 2);
    }
}

#[test]
fn more_to_come_flag_is_reported() {
    let mut msg = OpMsg::new(hello());
    msg.flags = MORE_TO_COME;
    let got = decode_msg(&encode_msg_request(1, &msg, false)).unwrap();
    assert!(got.more_to_come());
}

#[test]
fn reply_encoding_decodes_as_op_msg() {
    let body = doc! { "ok": 1.0, "n": 3 };
    let wire = encode_msg(5, 42, 0, &body, None);
    let header = MsgHeader::parse(wire[..16].try_into().unwrap());
    assert_eq!(header.message_length as usize, wire.len());
    assert_eq!(
        (header.request_id, header.response_to, header.op_code),
        (5, 42, OP_MSG)
    );
    assert_eq!(decode_msg(&wire).unwrap().body, body);

    let exhaust = encode_msg(6, 42, MORE_TO_COME, &body, None);
    assert!(decode_msg(&exhaust).unwrap().more_to_come());
    let checked = encode_msg(7, 42, CHECKSUM_PRESENT, &body, None);
    assert_eq!(decode_msg(&checked).unwrap().body, body);
}

#[test]
fn checksum_mismatch_is_fatal() {
    let mut wire = encode_msg_request(1, &OpMsg::new(hello()), true);
    let last = wire.len() - 1;
    wire[last] ^= 0xff;
    assert_err(decode_message(&wire), 288, true, "checksum does not match");

    // Corrupting a covered byte (the request id in the header) also fails.
    let mut wire = encode_msg_request(1, &OpMsg::new(hello()), true);
    wire[4] ^= 1;
    assert_err(decode_message(&wire), 288, true, "checksum");
}

#[test]
fn checksum_flag_without_room_for_checksum() {
    let wire = frame(OP_MSG, &msg_body(CHECKSUM_PRESENT, &[vec![0, 0, 0, 0]]));
    assert_err(decode_message(&wire), 51251, false, "containing a checksum");
}

#[test]
fn unknown_required_flags_are_rejected() {
    let wire = frame(OP_MSG, &msg_body(1 << 2, &[body_section(&hello())]));
    assert_err(
        decode_message(&wire),
        223,
        false,
        "Message contains illegal flags value: Ob00000000000000000000000000000100",
    );
    // Unknown optional bits (16-31) are ignored.
    let wire = frame(OP_MSG, &msg_body(1 << 20, &[body_section(&hello())]));
    assert_eq!(decode_msg(&wire).unwrap().flags, 1 << 20);
}

#[test]
fn body_section_count() {
    let none = frame(
        OP_MSG,
        &msg_body(0, &[seq_section("documents", &[doc! {}])]),
    );
    assert_err(
        decode_message(&none),
        40587,
        false,
        "OP_MSG messages must have a body",
    );
    let empty = frame(OP_MSG, &msg_body(0, &[]));
    assert_err(decode_message(&empty), 40587, false, "must have a body");
    let two = frame(
        OP_MSG,
        &msg_body(0, &[body_section(&hello()), body_section(&hello())]),
    );
    assert_err(
        decode_message(&two),
        40430,
        false,
        "Multiple body sections in message",
    );
}

#[test]
fn unknown_section_kind() {
    let mut section = body_section(&hello());
    section[0] = 7;
    let wire = frame(OP_MSG, &msg_body(0, &[body_section(&hello()), section]));
    assert_err(
        decode_message(&wire),
        40432,
        false,
        "Unknown section kind 7",
    );
}

#[test]
fn duplicate_sequences() {
    let wire = frame(
        OP_MSG,
        &msg_body(
            0,
            &[
                seq_section("documents", &[]),
                seq_section("documents", &[]),
                body_section(&hello()),
            ],
        ),
    );
    assert_err(
        decode_message(&wire),
        40431,
        false,
        "Duplicate document sequence: documents",
    );
}

#[test]
fn too_many_sequences() {
    let sections = [
        seq_section("a", &[]),
        seq_section("b", &[]),
        seq_section("c", &[]),
        body_section(&hello()),
    ];
    let wire = frame(OP_MSG, &msg_body(0, &sections));
    assert_err(
        decode_message(&wire),
        233,
        false,
        "Too many document sequences",
    );
}

fn with_sequence(body: Document, name: &str) -> Result<OpMsg, WireError> {
    let wire = frame(
        OP_MSG,
        &msg_body(
            0,
            &[seq_section(name, &[doc! {"x": 1}]), body_section(&body)],
        ),
    );
    decode_msg(&wire)
}

#[test]
fn sequence_duplicating_a_body_field() {
    assert_err(
        with_sequence(doc! {"insert": "c", "documents": []}, "documents"),
        40433,
        false,
        "Duplicate field between body and document sequence documents",
    );
    assert_err(
        with_sequence(doc! {"a": {"b": 1}}, "a.b"),
        40433,
        false,
        "a.b",
    );
    assert_err(
        with_sequence(doc! {"a": [{"b": 1}]}, "a.b"),
        40433,
        false,
        "a.b",
    );
    assert!(with_sequence(doc! {"a": 1}, "a.b").is_ok());
    assert!(with_sequence(doc! {"a": {"c": 1}}, "a.b").is_ok());
    assert!(with_sequence(doc! {"ab": 1}, "a").is_ok());
    // A `$clusterTime` the parser sets aside unconverted still counts.
    let ct = doc! {"ping": 1, "$clusterTime": {"clusterTime": bson::Timestamp { time: 1, increment: 1 }}};
    for name in ["$clusterTime", "$clusterTime.clusterTime"] {
        assert_err(with_sequence(ct.clone(), name), 40433, false, name);
    }
    let msg = with_sequence(ct.clone(), "$clusterTime.other").unwrap();
    assert!(msg.cluster_time.is_some());
    assert!(!msg.body.contains_key("$clusterTime"));
    assert_eq!(*msg.full_body(), ct);
}

#[test]
fn invalid_body_bson() {
    let mut doc = bytes(&doc! {"a": 1});
    doc[4] = 0x42; // unknown element type
    let wire = frame(OP_MSG, &msg_body(0, &[body_section_raw(&doc)]));
    assert_err(decode_message(&wire), 22, false, "invalid BSON");

    // Invalid UTF-8 in a string value.
    let mut doc = bytes(&doc! {"a": "xy"});
    let at = doc.len() - 3;
    doc[at] = 0xff;
    let wire = frame(OP_MSG, &msg_body(0, &[body_section_raw(&doc)]));
    assert_err(decode_message(&wire), 22, false, "invalid BSON");
}

#[test]
fn invalid_nested_sequence_document() {
    // A nested document whose length is wrong: only a full walk detects it.
    let mut doc = bytes(&doc! {"a": {"b": 1}});
    doc[7] = 0x40; // nested length (starts after type byte + "a\0")
    let mut content = b"documents\0".to_vec();
    content.extend_from_slice(&doc);
    let mut seq = vec![1u8];
    seq.extend_from_slice(&((content.len() + 4) as i32).to_le_bytes());
    seq.extend_from_slice(&content);
    let wire = frame(OP_MSG, &msg_body(0, &[seq, body_section(&hello())]));
    assert_err(decode_message(&wire), 22, false, "invalid BSON");
}

#[test]
fn bson_length_prefixes() {
    let cases: [(i32, i32); 4] = [
        (-1, 22),
        (3, 22),
        (1000, 22),                                     // past the end of the message
        ((MAX_INTERNAL_OBJECT_SIZE + 1) as i32, 10334), // too large
    ];
    for (len, code) in cases {
        let mut doc = len.to_le_bytes().to_vec();
        doc.extend_from_slice(&[0; 8]);
        let wire = frame(OP_MSG, &msg_body(0, &[body_section_raw(&doc)]));
        assert_err(decode_message(&wire), code, false, "");
    }
}

#[test]
fn deep_nesting_is_rejected_without_overflowing_the_stack() {
    let depth_doc = |levels: usize| {
        let mut d = doc! {"x": 1};
        for _ in 0..levels {
            d = doc! {"x": d};
        }
        d
    };
    assert!(decode_msg(&frame(
        OP_MSG,
        &msg_body(0, &[body_section(&depth_doc(150))])
    ))
    .is_ok());
    // Build a 100k-deep document by hand: bson's own serializer would recurse too.
    let levels = 100_000;
    let mut doc = Vec::new();
    for _ in 0..levels {
        doc.extend_from_slice(&[0, 0, 0, 0, 3, b'x', 0]);
    }
    doc.extend_from_slice(&[5, 0, 0, 0, 0]);
    doc.extend(std::iter::repeat_n(0u8, levels));
    // Level i starts at 7*i and ends at its terminator, before the i outer terminators.
    let total = doc.len();
    for level in 0..levels {
        let start = level * 7;
        let len = total - start - level;
        doc[start..start + 4].copy_from_slice(&(len as i32).to_le_bytes());
    }
    let wire = frame(OP_MSG, &msg_body(0, &[body_section_raw(&doc)]));
    assert_err(
        decode_message(&wire),
        15,
        false,
        "maximum nested object depth: 200",
    );
}

#[test]
fn bad_sequence_sizes() {
    for size in [-5i32, 0, 3, 1_000_000] {
        let mut seq = vec![1u8];
        seq.extend_from_slice(&size.to_le_bytes());
        seq.extend_from_slice(b"documents\0");
        let wire = frame(OP_MSG, &msg_body(0, &[seq, body_section(&hello())]));
        assert_err(decode_message(&wire), 17, false, "");
    }
    // Size covering the name but ending mid-document.
    let mut seq = seq_section("documents", &[doc! {"a": 1}]);
    seq[1] -= 2;
    let wire = frame(OP_MSG, &msg_body(0, &[seq, body_section(&hello())]));
    assert!(decode_message(&wire).is_err());
}

#[test]
fn truncated_messages() {
    let wire = encode_msg_request(1, &OpMsg::new(hello()), false);
    for cut in 16..wire.len() {
        let mut short = wire[..cut].to_vec();
        short[..4].copy_from_slice(&(cut as i32).to_le_bytes());
        let err = decode_message(&short).unwrap_err();
        assert!(!err.is_fatal(), "{err:?}");
    }
}
