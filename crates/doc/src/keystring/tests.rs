use super::*;
use crate::compare::cmp_bson;
use crate::number::{encode_decimal, DEC_COEF_LIMIT};
use bson::{doc, Binary, Decimal128, Document};
use proptest::prelude::*;
use std::cmp::Ordering;

fn enc(v: &Bson, desc: bool) -> (Vec<u8>, Vec<u8>) {
    encode_key_bson(&[(v, desc)]).expect("encodable")
}

fn bytes_of(v: &Bson) -> Vec<u8> {
    bson::to_vec(&doc! {"v": v.clone()}).expect("serializable")
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse::<Decimal128>().expect("decimal literal"))
}

fn number() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-5i32..5).prop_map(Bson::Int32),
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        prop_oneof![
            Just(i64::MAX),
            Just(i64::MIN),
            Just((1i64 << 53) + 1),
            Just(-(1i64 << 53) - 1)
        ]
        .prop_map(Bson::Int64),
        (-5i64..5).prop_map(|i| Bson::Double(i as f64)),
        any::<u64>().prop_map(|b| {
            let d = f64::from_bits(b);
            Bson::Double(if d.is_nan() { f64::NAN } else { d })
        }),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(0.1),
            Just(0.5),
            Just(9.223372036854775e18),
            Just(f64::MAX),
            Just(5e-324)
        ]
        .prop_map(Bson::Double),
        prop_oneof![
            Just("0.1"),
            Just("0.5"),
            Just("1.000"),
            Just("-2"),
            Just("0E+5"),
            Just("-0"),
            Just("NaN"),
            Just("Infinity"),
            Just("-Infinity"),
            Just("9223372036854775807"),
            Just("9223372036854775808"),
            Just("1E+400"),
            Just("1E-400"),
            Just("4.9E-324")
        ]
        .prop_map(dec),
        (any::<bool>(), 0u128..DEC_COEF_LIMIT, -6176i32..=6111).prop_map(|(neg, coef, exp)| {
            Bson::Decimal128(Decimal128::from_bytes(encode_decimal(Dec::Finite {
                neg,
                coef,
                exp,
            })))
        }),
        (any::<bool>(), 0u128..2000, -5i32..5).prop_map(|(neg, coef, exp)| {
            Bson::Decimal128(Decimal128::from_bytes(encode_decimal(Dec::Finite {
                neg,
                coef,
                exp,
            })))
        }),
    ]
}

fn leaf() -> impl Strategy<Value = Bson> {
    let opts = prop_oneof![Just(""), Just("i"), Just("im"), Just("msx")];
    prop_oneof![
        4 => number(),
        1 => Just(Bson::Null),
        1 => Just(Bson::Undefined),
        1 => Just(Bson::MinKey),
        1 => Just(Bson::MaxKey),
        2 => "[a\\x00b]{0,3}".prop_map(Bson::String),
        1 => "[ab]{0,2}".prop_map(Bson::Symbol),
        1 => (prop_oneof![Just(0u8), Just(5), Just(0x80)], proptest::collection::vec(any::<u8>(), 0..3))
            .prop_map(|(s, bytes)| Bson::Binary(Binary { subtype: s.into(), bytes })),
        1 => any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
        1 => any::<bool>().prop_map(Bson::Boolean),
        1 => any::<i64>().prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
        1 => ("[ab]{0,2}", opts).prop_map(|(p, o)| Bson::RegularExpression(bson::Regex { pattern: p, options: o.to_string() })),
        1 => "[ab]{0,2}".prop_map(Bson::JavaScriptCode),
        1 => ("[ab]{0,2}", (-2i32..2)).prop_map(|(code, x)| Bson::JavaScriptCodeWithScope(
            bson::JavaScriptCodeWithScope { code, scope: doc! {"x": x} })),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            proptest::collection::vec(("[ab]{0,2}", inner), 0..4).prop_map(|kvs| {
                let mut d = Document::new();
                for (k, v) in kvs {
                    d.insert(k, v);
                }
                Bson::Document(d)
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn order_matches_compare(a in value(), b in value()) {
        let want = cmp_bson(&a, &b);
        prop_assert_eq!(enc(&a, false).0.cmp(&enc(&b, false).0), want, "asc {:?} {:?}", a, b);
        prop_assert_eq!(enc(&a, true).0.cmp(&enc(&b, true).0), want.reverse(), "desc {:?} {:?}", a, b);
    }

    #[test]
    fn numbers_order(a in number(), b in number()) {
        prop_assert_eq!(enc(&a, false).0.cmp(&enc(&b, false).0), cmp_bson(&a, &b), "{:?} {:?}", a, b);
    }

    #[test]
    fn compound_order(a in value(), x in value(), b in value(), y in value(), d1: bool, d2: bool) {
        let ka = encode_key_bson(&[(&a, d1), (&x, d2)]).expect("enc").0;
        let kb = encode_key_bson(&[(&b, d1), (&y, d2)]).expect("enc").0;
        let o1 = cmp_bson(&a, &b);
        let o1 = if d1 { o1.reverse() } else { o1 };
        let o2 = cmp_bson(&x, &y);
        let o2 = if d2 { o2.reverse() } else { o2 };
        prop_assert_eq!(ka.cmp(&kb), o1.then(o2));
    }

    #[test]
    fn round_trip(a in value(), x in value(), d1: bool, d2: bool) {
        let (key, tb) = encode_key_bson(&[(&a, d1), (&x, d2)]).expect("enc");
        let back = decode_key(&key, &tb, &[d1, d2]).expect("decode");
        prop_assert_eq!(bytes_of(&back[0]), bytes_of(&a), "{:?} -> {:?}", a, back[0]);
        prop_assert_eq!(bytes_of(&back[1]), bytes_of(&x), "{:?} -> {:?}", x, back[1]);
        prop_assert_eq!(key_prefix_len(&key, &tb, &[d1, d2]).expect("len"), key.len());
    }

    #[test]
    fn decode_never_panics(key in proptest::collection::vec(any::<u8>(), 0..40),
                           tb in proptest::collection::vec(any::<u8>(), 0..20)) {
        let _ = decode_key(&key, &tb, &[false, true]);
    }
}

#[test]
fn equal_numbers_collide() {
    let one = [
        Bson::Int32(1),
        Bson::Int64(1),
        Bson::Double(1.0),
        dec("1.00"),
        dec("1"),
    ];
    for a in &one {
        for b in &one {
            assert_eq!(enc(a, false).0, enc(b, false).0, "{a:?} {b:?}");
        }
    }
    assert_ne!(enc(&Bson::Double(0.1), false).0, enc(&dec("0.1"), false).0);
    assert_eq!(
        enc(&Bson::Double(0.1), false)
            .0
            .cmp(&enc(&dec("0.1"), false).0),
        Ordering::Greater
    );
}

fn db_pointer(ns: &str, oid: u8) -> Bson {
    let mut raw = ((ns.len() + 1) as i32).to_le_bytes().to_vec();
    raw.extend_from_slice(ns.as_bytes());
    raw.push(0);
    raw.extend_from_slice(&[oid; 12]);
    let total = 4 + 1 + 2 + raw.len() + 1;
    let mut d = (total as i32).to_le_bytes().to_vec();
    d.extend_from_slice(&[0x0C, b'v', 0]);
    d.extend_from_slice(&raw);
    d.push(0);
    let rd = bson::RawDocument::from_bytes(&d).expect("raw doc");
    Bson::try_from(rd.get("v").expect("get").expect("present")).expect("bson")
}

#[test]
fn db_pointers() {
    let vals = [
        db_pointer("b", 9),
        db_pointer("a.b", 1),
        db_pointer("a.c", 0),
        db_pointer("a.c", 1),
    ];
    for (i, a) in vals.iter().enumerate() {
        for (j, b) in vals.iter().enumerate() {
            assert_eq!(cmp_bson(a, b), i.cmp(&j));
            assert_eq!(enc(a, false).0.cmp(&enc(b, false).0), i.cmp(&j));
        }
        let (k, tb) = enc(a, true);
        let back = decode_key(&k, &tb, &[true]).expect("decode");
        assert_eq!(bytes_of(&back[0]), bytes_of(a));
    }
}

/// Integers up to 2^53 (their fast path) encode exactly as the equal double does (the
/// general path), so existing index keys stay valid.
#[test]
fn small_integers_encode_as_their_doubles() {
    let mut samples: Vec<i64> = (-300..300).collect();
    for shift in 0..=53 {
        samples.extend([1i64 << shift, (1i64 << shift) - 1, -(1i64 << shift)]);
    }
    for n in samples {
        let (mut int, mut long, mut double) = (Vec::new(), Vec::new(), Vec::new());
        if let Ok(small) = i32::try_from(n) {
            encode_value(&mut int, RawBsonRef::Int32(small), false);
            assert_eq!(int, {
                encode_value(&mut double, RawBsonRef::Double(n as f64), false);
                double.clone()
            });
            double.clear();
        }
        encode_value(&mut long, RawBsonRef::Int64(n), false);
        encode_value(&mut double, RawBsonRef::Double(n as f64), false);
        assert_eq!(long, double, "{n}");
    }
}
