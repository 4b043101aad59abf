//! Shared test helpers and cross-family cases (seed 003's argument-list rules).

use crate::{Expression, ParseContext};
use bson::{bson, doc, Bson, Document};

/// Parses and evaluates `e` against `d`; panics with context unless the result is `want`.
pub(crate) fn case_ok(d: &Document, e: &Bson, want: Option<Bson>) {
    let ctx = ParseContext::new();
    let expr = Expression::parse(e, &ctx).unwrap_or_else(|err| panic!("parse {e}: {err}"));
    let got = expr
        .evaluate_doc(d)
        .unwrap_or_else(|err| panic!("evaluate {e}: {err}"));
    let same = match (&got, &want) {
        (Some(Bson::Double(a)), Some(Bson::Double(b))) => {
            (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() || a == b
        }
        _ => got == want,
    };
    assert!(same, "{e}: got {got:?}, want {want:?}");
    // The raw-document path gives the same answer.
    let raw = bson::RawDocumentBuf::from_document(d).expect("raw");
    let got_raw = expr.evaluate_raw(&raw).expect("raw evaluate");
    assert_eq!(format!("{got_raw:?}"), format!("{got:?}"), "{e} (raw)");
}

/// Parses and evaluates `e` against `d`; panics unless it fails with `code`.
pub(crate) fn case_err(d: &Document, e: &Bson, code: i32) {
    let ctx = ParseContext::new();
    let r = Expression::parse(e, &ctx).and_then(|x| x.evaluate_doc(d));
    match r {
        Ok(v) => panic!("{e}: expected error {code}, got {v:?}"),
        Err(err) => assert_eq!(err.code.code(), code, "{e}: {err}"),
    }
}

/// Parses and evaluates, returning the error message.
pub(crate) fn err_message(d: &Document, e: &Bson) -> String {
    let ctx = ParseContext::new();
    match Expression::parse(e, &ctx).and_then(|x| x.evaluate_doc(d)) {
        Ok(v) => panic!("{e}: expected an error, got {v:?}"),
        Err(err) => err.message.clone(),
    }
}

#[test]
fn seed_003_argument_lists() {
    let d = doc! {"dummy": "x", "field": [42]};
    case_ok(&d, &bson!({"$isNumber": [42]}), Some(bson!(true)));
    case_ok(&d, &bson!({"$isNumber": 42}), Some(bson!(true)));
    case_ok(&d, &bson!({"$isArray": [42]}), Some(bson!(false)));
    case_ok(&d, &bson!({"$isArray": 42}), Some(bson!(false)));
    case_ok(&d, &bson!({"$isArray": [[42]]}), Some(bson!(true)));
    case_ok(&d, &bson!({"$isNumber": [[42]]}), Some(bson!(false)));
    case_ok(
        &d,
        &bson!({"$isArray": {"$literal": [42]}}),
        Some(bson!(true)),
    );
    case_ok(
        &d,
        &bson!({"$isNumber": {"$literal": [42]}}),
        Some(bson!(false)),
    );
    case_ok(&d, &bson!({"$isArray": "$field"}), Some(bson!(true)));
    case_ok(&d, &bson!({"$isArray": ["$field"]}), Some(bson!(true)));
    case_err(&d, &bson!({"$isNumber": [42, 42]}), 16020);
    assert_eq!(
        err_message(&d, &bson!({"$isNumber": [42, 42]})),
        "Expression $isNumber takes exactly 1 arguments. 2 were passed in."
    );
    assert_eq!(
        err_message(&d, &bson!({"$isArray": [42, 42, 42]})),
        "Expression $isArray takes exactly 1 arguments. 3 were passed in."
    );
    let ctx = ParseContext::new();
    let e = Expression::parse(&bson!({"$isNumber": [42, 42]}), &ctx).expect_err("error");
    assert_eq!(e.code.name(), "Location16020");
}

#[test]
fn unknown_operator() {
    let d = doc! {};
    case_err(&d, &bson!({"$foo": 1}), 168);
    assert_eq!(
        err_message(&d, &bson!({"$foo": 1})),
        "Unrecognized expression '$foo'"
    );
}

#[test]
fn messages() {
    let d = doc! {"s": "x", "n": 1};
    assert_eq!(
        err_message(&d, &bson!({"$add": [1, "$s"]})),
        "$add only supports numeric or date types, not string"
    );
    assert_eq!(
        err_message(&d, &bson!({"$size": "$s"})),
        "The argument to $size must be an array. Type of argument: string"
    );
}

#[test]
fn serialize_round_trip() {
    let ctx = ParseContext::new();
    let e = Expression::parse(
        &bson!({"$add": ["$a.b", 1, {"$multiply": ["$$ROOT.x", 2]}]}),
        &ctx,
    )
    .expect("parse");
    assert_eq!(
        e.serialize(),
        bson!({"$add": ["$a.b", {"$const": 1}, {"$multiply": ["$$ROOT.x", {"$const": 2}]}]})
    );
    let deps = e.dependencies();
    assert!(deps.fields.contains("a.b") && deps.fields.contains("x"));
    assert!(!deps.need_whole_document);
}

mod prop {
    use crate::{Expression, ParseContext};
    use bson::{bson, doc, Bson};
    use proptest::prelude::*;

    proptest! {
        // $add/$subtract/$multiply on int32 operands match i64 arithmetic (int when it fits,
        // long otherwise).
        #[test]
        fn int_arithmetic_matches_i64(a in any::<i32>(), b in any::<i32>()) {
            let ctx = ParseContext::new();
            let d = doc! {"a": a, "b": b};
            for (op, want) in [
                ("$add", i64::from(a) + i64::from(b)),
                ("$subtract", i64::from(a) - i64::from(b)),
                ("$multiply", i64::from(a) * i64::from(b)),
            ] {
                let e = Expression::parse(&bson!({op: ["$a", "$b"]}), &ctx).expect("parse");
                let got = e.evaluate_doc(&d).expect("eval");
                let want = match i32::try_from(want) {
                    Ok(i) => Bson::Int32(i),
                    Err(_) => Bson::Int64(want),
                };
                prop_assert_eq!(got, Some(want));
            }
        }

        // $cmp agrees with the total order used by sorts.
        #[test]
        fn cmp_matches_total_order(a in any::<i64>(), b in -1e18f64..1e18) {
            let ctx = ParseContext::new();
            let d = doc! {"a": a, "b": b};
            let e = Expression::parse(&bson!({"$cmp": ["$a", "$b"]}), &ctx).expect("parse");
            let got = e.evaluate_doc(&d).expect("eval");
            let want = match nidus_doc::compare::cmp_bson(&Bson::Int64(a), &Bson::Double(b)) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            };
            prop_assert_eq!(got, Some(Bson::Int32(want)));
        }

        // No input document or expression argument makes evaluation panic.
        #[test]
        fn no_panic_on_odd_arguments(x in prop_oneof![
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            any::<f64>().prop_map(Bson::Double),
            ".{0,8}".prop_map(Bson::String),
            Just(Bson::Null),
        ], op in prop::sample::select(vec![
            "$add", "$subtract", "$multiply", "$divide", "$mod", "$pow", "$log", "$round",
            "$trunc", "$substrCP", "$substrBytes", "$range", "$slice", "$arrayElemAt",
            "$indexOfBytes", "$indexOfCP", "$split", "$strcasecmp", "$toString", "$toInt",
            "$toLong", "$toDouble", "$toDecimal", "$toDate", "$abs", "$sqrt", "$exp", "$ln",
        ])) {
            let ctx = ParseContext::new();
            let d = doc! {"x": x.clone()};
            for args in [bson!(["$x", "$x"]), bson!(["$x", 0, 3]), bson!(["$x"]), bson!([[1, 2], "$x"])] {
                if let Ok(e) = Expression::parse(&bson!({op: args}), &ctx) {
                    let _ = e.evaluate_doc(&d);
                }
            }
        }
    }
}
