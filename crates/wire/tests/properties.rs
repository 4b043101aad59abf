mod common;

use bson::doc;
use common::*;
use nidus_wire::*;
use proptest::prelude::*;

fn compressor() -> impl Strategy<Value = Compressor> {
    prop_oneof![
        Just(Compressor::Noop),
        Just(Compressor::Snappy),
        Just(Compressor::Zlib),
        Just(Compressor::Zstd),
    ]
}

/// A handful of valid messages of every kind, as mutation seeds.
fn seeds() -> Vec<Vec<u8>> {
    let msg = OpMsg {
        flags: 0,
        body: doc! {"update": "c", "ordered": true, "$db": "t", "nested": {"a": [1, 2.5, "s", null]}},
        sequences: vec![
            (
                "updates".into(),
                vec![raw(doc! {"q": {"a": 1}, "u": {"$set": {"b": 2}}})],
            ),
            (
                "other".into(),
                vec![
                    raw(doc! {}),
                    raw(
                        doc! {"x": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] }},
                    ),
                ],
            ),
        ],
        cluster_time: None,
    };
    let q = OpQuery {
        flags: 0,
        full_collection_name: "admin.$cmd".into(),
        number_to_skip: 0,
        number_to_return: -1,
        query: doc! {"isMaster": 1, "compression": ["zstd", "snappy"]},
        return_fields: Some(doc! {"a": 1}),
    };
    let mut out = vec![
        encode_msg_request(1, &msg, false),
        encode_msg_request(1, &msg, true),
        encode_query_request(2, &q),
    ];
    for c in [
        Compressor::Noop,
        Compressor::Snappy,
        Compressor::Zlib,
        Compressor::Zstd,
    ] {
        out.push(wrap_compressed(&out[0].clone(), c));
    }
    out
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Overwrite(usize, i32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Remove(i, n)),
        (any::<usize>(), any::<i32>()).prop_map(|(i, v)| Mutation::Overwrite(i, v)),
    ]
}

fn apply(mut data: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let len = data.len().max(1);
    match m {
        Mutation::Flip(i, b) => {
            if let Some(x) = data.get_mut(i % len) {
                *x ^= b | 1;
            }
        }
        Mutation::Truncate(i) => data.truncate(i % len),
        Mutation::Insert(i, v) => {
            let at = i % len;
            data.splice(at..at, v.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let at = i % len;
            let end = (at + n).min(data.len());
            data.drain(at.min(end)..end);
        }
        Mutation::Overwrite(i, v) => {
            let at = i % len;
            for (k, b) in v.to_le_bytes().iter().enumerate() {
                if let Some(x) = data.get_mut(at + k) {
                    *x = *b;
                }
            }
        }
    }
    data
}

/// Keeps the header's length consistent so mutations reach the body parsers.
fn fix_length(mut data: Vec<u8>) -> Vec<u8> {
    if data.len() >= 4 {
        let n = data.len() as i32;
        data[..4].copy_from_slice(&n.to_le_bytes());
    }
    data
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics_on_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_message(&data);
        let _ = decode_message(&fix_length(data));
    }

    #[test]
    fn decode_never_panics_on_random_bodies(op in prop_oneof![Just(OP_MSG), Just(OP_QUERY), Just(OP_COMPRESSED)],
                                            body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_message(&frame(op, &body));
    }

    #[test]
    fn decode_never_panics_on_mutated_messages(seed in 0usize..7, ms in proptest::collection::vec(mutation(), 1..4), fix in any::<bool>()) {
        let seeds = seeds();
        let mut data = seeds[seed % seeds.len()].clone();
        for m in &ms {
            data = apply(data, m);
        }
        if fix {
            data = fix_length(data);
        }
        // Whatever is accepted must re-encode into a message that decodes the same way.
        if let Ok(decoded) = decode_message(&data) {
            let again = match &decoded.request {
                Request::Msg(m) => encode_msg_request(1, m, false),
                Request::Query(q) => encode_query_request(1, q),
            };
            // Compared as bytes: a document holding a NaN is not equal to itself.
            let twice = match decode_message(&again).unwrap().request {
                Request::Msg(m) => encode_msg_request(1, &m, false),
                Request::Query(q) => encode_query_request(1, &q),
            };
            prop_assert_eq!(twice, again);
        }
    }

    #[test]
    fn compression_round_trips(c in compressor(), data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let packed = compress(c, &data);
        prop_assert_eq!(decompress(c, &packed, data.len()).unwrap(), data.clone());
        // A wrong expected size is an error, never a panic or a silent truncation.
        prop_assert!(decompress(c, &packed, data.len() + 1).is_err());
        if !data.is_empty() {
            prop_assert!(decompress(c, &packed, data.len() - 1).is_err());
        }
    }

    #[test]
    fn compression_round_trips_repetitive(c in compressor(), unit in proptest::collection::vec(any::<u8>(), 1..16), reps in 1usize..2000) {
        let data: Vec<u8> = unit.iter().copied().cycle().take(unit.len() * reps).collect();
        let packed = compress(c, &data);
        prop_assert_eq!(decompress(c, &packed, data.len()).unwrap(), data);
    }

    #[test]
    fn decompress_never_panics_on_garbage(c in compressor(), data in proptest::collection::vec(any::<u8>(), 0..256), size in 0usize..100_000) {
        let _ = decompress(c, &data, size);
    }
}
