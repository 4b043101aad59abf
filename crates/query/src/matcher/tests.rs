//! Data-driven matcher tests: (filter, document, expected).

use super::*;
use bson::{doc, Bson, RawDocumentBuf};
use nidus_common::ErrorCode;

fn raw(d: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(d).expect("valid document")
}

fn check(cases: &[(Document, Document, bool)]) {
    for (filter, d, want) in cases {
        let m = Matcher::parse(filter).unwrap_or_else(|e| panic!("parse {filter}: {e}"));
        assert_eq!(
            m.matches(&raw(d)).ok(),
            Some(*want),
            "filter {filter} on {d}"
        );
    }
}

fn c003() -> Document {
    doc! {"customer_id": "C003", "contact": [
        {"email": ["narrator@fightclub.com", "tyler.durden@fightclub.com"]},
        {"email": "jack@fightclub.com"},
    ]}
}

#[test]
fn seed_000_contact_email() {
    let c001 = doc! {"customer_id": "C001", "contact": {"email": "marla.singer@fightclub.com", "phone": "555-1010"}};
    let c002 = doc! {"customer_id": "C002", "contact": [{"email": "robert.paulson@fightclub.com"}, {"phone": "555-2020"}]};
    let projected = doc! {"email": [["narrator@fightclub.com", "tyler.durden@fightclub.com"], "jack@fightclub.com"]};
    check(&[
        (
            doc! {"contact.email": "tyler.durden@fightclub.com"},
            c003(),
            true,
        ),
        (doc! {"contact.email": "jack@fightclub.com"}, c003(), true),
        (
            doc! {"contact.email": "marla.singer@fightclub.com"},
            c001.clone(),
            true,
        ),
        (
            doc! {"contact.email": "robert.paulson@fightclub.com"},
            c002.clone(),
            true,
        ),
        (
            doc! {"contact.email": "robert.paulson@fightclub.com"},
            c003(),
            false,
        ),
        (
            doc! {"email": "tyler.durden@fightclub.com"},
            projected.clone(),
            false,
        ),
        (
            doc! {"email": "jack@fightclub.com"},
            projected.clone(),
            true,
        ),
        (
            doc! {"email": ["narrator@fightclub.com", "tyler.durden@fightclub.com"]},
            projected.clone(),
            true,
        ),
        (
            doc! {"email": ["tyler.durden@fightclub.com", "narrator@fightclub.com"]},
            projected,
            false,
        ),
        (
            doc! {"email": ["robert.paulson@fightclub.com"]},
            doc! {"email": ["robert.paulson@fightclub.com"]},
            true,
        ),
        (
            doc! {"email": "robert.paulson@fightclub.com"},
            doc! {"email": ["robert.paulson@fightclub.com"]},
            true,
        ),
    ]);
}

#[test]
fn equality_and_null() {
    check(&[
        (doc! {"a": 1}, doc! {"a": 1.0}, true),
        (doc! {"a": 1}, doc! {"a": [2, 1]}, true),
        (doc! {"a": 1}, doc! {"a": [[1]]}, false),
        (doc! {"a": [1]}, doc! {"a": [[1], 2]}, true),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1.0}}, true),
        (doc! {"a": {"b": 1}}, doc! {"a": {"b": 1, "c": 2}}, false),
        (doc! {"a.b": 1}, doc! {"a": [{"b": 2}, {"b": [1]}]}, true),
        (doc! {"a.1": 5}, doc! {"a": [4, 5]}, true),
        (doc! {"a.0.b": 5}, doc! {"a": [{"b": 5}]}, true),
        // A numeric component is also a field name in the documents of a traversed array,
        // and a document without that field is missing there.
        (doc! {"x.1.y": null}, doc! {"x": [7, {"y": 8}, 9]}, true),
        (doc! {"a.0": null}, doc! {"a": [{"b": 0}]}, true),
        (doc! {"a.1": 4}, doc! {"a": [{"1": 4}, 5]}, true),
        (doc! {"a.1": null}, doc! {"a": [{"1": 4}, 5]}, false),
        (
            doc! {"a.0": {"$exists": false}},
            doc! {"a": [{"b": 0}]},
            false,
        ),
        // An element selected by its index is compared as is, never element by element.
        (doc! {"a.1": 8}, doc! {"a": [[6, 7], [8, 9]]}, false),
        (doc! {"a.1": [8, 9]}, doc! {"a": [7, [8, 9]]}, true),
        (doc! {"a.0": {"$type": "int"}}, doc! {"a": [[1]]}, false),
        // A scalar selected by its index, with path left, is not a missing value.
        (doc! {"a.0.b": null}, doc! {"a": [5]}, false),
        (doc! {"a.0.b": {"$ne": null}}, doc! {"a": [5]}, true),
        (doc! {"a.1.b": null}, doc! {"a": [1, [{"b": 2}], 3]}, false),
        (doc! {"a.1.b": 2}, doc! {"a": [1, [{"b": 2}], 3]}, true),
        (doc! {"a": null}, doc! {}, true),
        (doc! {"a": null}, doc! {"a": null}, true),
        (doc! {"a": null}, doc! {"a": [1, null]}, true),
        (doc! {"a": null}, doc! {"a": 0}, false),
        (doc! {"a": null}, doc! {"a": []}, false),
        (doc! {"a.b": null}, doc! {"a": [{"b": 1}, {"c": 1}]}, true),
        (doc! {"a.b": null}, doc! {"a": [{"b": 1}]}, false),
        (doc! {"a.b": null}, doc! {"a": 5}, true),
        (doc! {"a": {"$eq": null}}, doc! {"b": 1}, true),
        (doc! {"a": {"$ne": null}}, doc! {"b": 1}, false),
        (doc! {"a": {"$ne": 1}}, doc! {"a": [1, 2]}, false),
        (doc! {"a": {"$ne": 3}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": "x"}, doc! {"a": Bson::Symbol("x".into())}, true),
        (doc! {}, doc! {"a": 1}, true),
        (doc! {"a": {}}, doc! {"a": {}}, true),
        (
            doc! {"a": {"$ref": "c", "$id": 1}},
            doc! {"a": {"$ref": "c", "$id": 1}},
            true,
        ),
    ]);
}

#[test]
fn comparisons_stay_in_type_bracket() {
    check(&[
        (doc! {"a": {"$gt": 1}}, doc! {"a": 2}, true),
        (doc! {"a": {"$gt": 1}}, doc! {"a": "2"}, false),
        (doc! {"a": {"$lt": "b"}}, doc! {"a": 1}, false),
        (doc! {"a": {"$gte": 2, "$lt": 3}}, doc! {"a": [1, 5]}, true),
        (doc! {"a": {"$gte": 2, "$lt": 3}}, doc! {"a": [1, 0]}, false),
        (
            doc! {"a": {"$gte": 2, "$lt": 3}},
            doc! {"a": [1, 2.5]},
            true,
        ),
        (doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": null}, true),
        (doc! {"a": {"$gte": null}}, doc! {}, true),
        (doc! {"a": {"$gt": null}}, doc! {}, false),
        (doc! {"a": {"$lte": f64::NAN}}, doc! {"a": f64::NAN}, true),
        (doc! {"a": {"$lt": 5}}, doc! {"a": f64::NAN}, false),
        (doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 5}, false),
        (doc! {"a": {"$gt": [1]}}, doc! {"a": [[2]]}, true),
        (
            doc! {"a": {"$lt": 10}},
            doc! {"a": Bson::Decimal128("9.5".parse().expect("dec"))},
            true,
        ),
        (
            doc! {"a": {"$gt": bson::DateTime::from_millis(0)}},
            doc! {"a": bson::DateTime::from_millis(5)},
            true,
        ),
    ]);
}

#[test]
fn in_nin_and_logical() {
    check(&[
        (doc! {"a": {"$in": [1, "x"]}}, doc! {"a": "x"}, true),
        (doc! {"a": {"$in": [null]}}, doc! {}, true),
        (doc! {"a": {"$in": []}}, doc! {"a": 1}, false),
        (
            doc! {"a": {"$in": [bson::Regex { pattern: "^x".into(), options: String::new() }]}},
            doc! {"a": "xyz"},
            true,
        ),
        (doc! {"a": {"$in": [[1, 2]]}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {"a": [3, 2]}, false),
        (doc! {"a": {"$nin": [1, 2]}}, doc! {}, true),
        (doc! {"$or": [{"a": 1}, {"b": 1}]}, doc! {"b": 1}, true),
        (doc! {"$and": [{"a": 1}, {"b": 1}]}, doc! {"b": 1}, false),
        (doc! {"$nor": [{"a": 1}, {"b": 1}]}, doc! {"c": 1}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3}, true),
        (doc! {"a": {"$not": {"$gt": 5}}}, doc! {}, true),
        (
            doc! {"a": {"$not": bson::Regex { pattern: "^x".into(), options: String::new() }}},
            doc! {"a": "xa"},
            false,
        ),
        (doc! {"$comment": "hi", "a": 1}, doc! {"a": 1}, true),
        (doc! {"$alwaysFalse": 1}, doc! {"a": 1}, false),
        (doc! {"$alwaysTrue": 1}, doc! {"a": 1}, true),
    ]);
}

#[test]
fn element_and_evaluation() {
    let re = |p: &str, o: &str| bson::Regex {
        pattern: p.into(),
        options: o.into(),
    };
    check(&[
        (doc! {"a": {"$exists": true}}, doc! {"a": null}, true),
        (doc! {"a": {"$exists": false}}, doc! {"a": null}, false),
        (doc! {"a.b": {"$exists": false}}, doc! {"a": [1]}, true),
        (
            doc! {"a.b": {"$exists": true}},
            doc! {"a": [{"b": null}]},
            true,
        ),
        (doc! {"a": {"$exists": 0}}, doc! {}, true),
        (doc! {"a": {"$type": "number"}}, doc! {"a": 1i64}, true),
        (doc! {"a": {"$type": 2}}, doc! {"a": "s"}, true),
        (doc! {"a": {"$type": "array"}}, doc! {"a": []}, true),
        (
            doc! {"a": {"$type": ["null", "int"]}},
            doc! {"a": [1.5, 2]},
            true,
        ),
        (doc! {"a": {"$type": "double"}}, doc! {"a": 2}, false),
        (doc! {"a": {"$type": -1}}, doc! {"a": Bson::MinKey}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.7}, true),
        (doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5}, true),
        (doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"}, false),
        (doc! {"a": re("^ab", "")}, doc! {"a": "abc"}, true),
        (doc! {"a": re("^AB", "i")}, doc! {"a": "abc"}, true),
        (
            doc! {"a": {"$regex": "^AB", "$options": "i"}},
            doc! {"a": ["x", "abc"]},
            true,
        ),
        (
            doc! {"a": {"$regex": "c$", "$options": "m"}},
            doc! {"a": "abc\nd"},
            true,
        ),
        (doc! {"a": {"$regex": "c$"}}, doc! {"a": "abc\nd"}, false),
        (
            doc! {"a": re("x", "")},
            doc! {"a": Bson::Symbol("xy".into())},
            true,
        ),
        (
            doc! {"a": {"$eq": re("x", "i")}},
            doc! {"a": re("x", "i")},
            true,
        ),
        (doc! {"a": {"$eq": re("x", "i")}}, doc! {"a": "x"}, false),
        (doc! {"a": re("x", "i")}, doc! {"a": re("x", "i")}, true),
        (doc! {"a": re("(?<=a)b", "")}, doc! {"a": "ab"}, true),
    ]);
}

#[test]
fn array_operators() {
    check(&[
        (doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]}, true),
        (doc! {"a": {"$all": [1, 4]}}, doc! {"a": [2, 3, 1]}, false),
        (doc! {"a": {"$all": []}}, doc! {"a": []}, false),
        (doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [1, 2]}, true),
        (doc! {"a": {"$all": [1]}}, doc! {"a": 1}, true),
        (doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]}, true),
        (doc! {"a": {"$size": 0}}, doc! {"a": []}, true),
        (doc! {"a": {"$size": 1}}, doc! {"a": 1}, false),
        (
            doc! {"a.b": {"$size": 2}},
            doc! {"a": [{"b": [1, 2]}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}},
            doc! {"a": [0, 2.5]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}},
            doc! {"a": [0, 5]},
            false,
        ),
        (doc! {"a": {"$elemMatch": {"$gt": 1}}}, doc! {"a": 5}, false),
        (
            doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}},
            doc! {"a": [{"b": 1}, {"c": 2}]},
            false,
        ),
        (
            doc! {"a": {"$elemMatch": {"b": 1, "c": 2}}},
            doc! {"a": [{"b": 1, "c": 2}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$or": [{"b": 1}, {"c": 2}]}}},
            doc! {"a": [{"c": 2}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"$ne": 1}}},
            doc! {"a": [1, 1]},
            false,
        ),
        (
            doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"b": 2}}]}},
            doc! {"a": [{"b": 2}, {"b": 1}]},
            true,
        ),
        (
            doc! {"a": {"$elemMatch": {"0": 1}}},
            doc! {"a": [[1, 2]]},
            true,
        ),
    ]);
}

#[test]
fn bit_operators() {
    let bin = |b: Vec<u8>| {
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: b,
        })
    };
    check(&[
        (doc! {"a": {"$bitsAllSet": 5}}, doc! {"a": 7}, true),
        (doc! {"a": {"$bitsAllSet": [0, 2]}}, doc! {"a": 6}, false),
        (doc! {"a": {"$bitsAllClear": [1]}}, doc! {"a": 5.0}, true),
        (
            doc! {"a": {"$bitsAnySet": bin(vec![0b10])}},
            doc! {"a": 2},
            true,
        ),
        (
            doc! {"a": {"$bitsAnyClear": [0, 70]}},
            doc! {"a": -1},
            false,
        ),
        (
            doc! {"a": {"$bitsAllSet": [3]}},
            doc! {"a": bin(vec![8])},
            true,
        ),
        (doc! {"a": {"$bitsAllSet": [1]}}, doc! {"a": 2.5}, false),
        (doc! {"a": {"$bitsAllSet": [1]}}, doc! {"a": "2"}, false),
    ]);
}

#[test]
fn parse_errors() {
    let cases: Vec<(Document, ErrorCode, &str)> = vec![
        (
            doc! {"a": {"$foo": 1}},
            ErrorCode::BadValue,
            "unknown operator: $foo",
        ),
        (
            doc! {"$foo": 1},
            ErrorCode::BadValue,
            "unknown top level operator: $foo",
        ),
        (
            doc! {"a": {"$in": 1}},
            ErrorCode::BadValue,
            "$in needs an array",
        ),
        (
            doc! {"a": {"$nin": 1}},
            ErrorCode::BadValue,
            "$nin needs an array",
        ),
        (
            doc! {"$and": []},
            ErrorCode::BadValue,
            "$and/$or/$nor must be a nonempty array",
        ),
        (
            doc! {"$or": [1]},
            ErrorCode::BadValue,
            "$or/$and/$nor entries need to be full objects",
        ),
        (
            doc! {"a": {"$size": "x"}},
            ErrorCode::BadValue,
            "$size needs a number",
        ),
        (
            doc! {"a": {"$not": 1}},
            ErrorCode::BadValue,
            "$not needs a regex or a document",
        ),
        (
            doc! {"a": {"$not": {}}},
            ErrorCode::BadValue,
            "$not cannot be empty",
        ),
        (
            doc! {"a": {"$elemMatch": 1}},
            ErrorCode::BadValue,
            "$elemMatch needs an Object",
        ),
        (
            doc! {"a": {"$all": 1}},
            ErrorCode::BadValue,
            "$all needs an array",
        ),
        (
            doc! {"a": {"$mod": [0, 1]}},
            ErrorCode::BadValue,
            "divisor cannot be 0",
        ),
        (
            doc! {"a": {"$mod": [1]}},
            ErrorCode::BadValue,
            "malformed mod, not enough elements",
        ),
        (
            doc! {"a": {"$type": "foo"}},
            ErrorCode::BadValue,
            "Unknown type name alias: foo",
        ),
        (
            doc! {"a": {"$type": {}}},
            ErrorCode::TypeMismatch,
            "type must be represented",
        ),
        (
            doc! {"a": {"$options": "i"}},
            ErrorCode::BadValue,
            "$options needs a $regex",
        ),
        (
            doc! {"a": {"$regex": 1}},
            ErrorCode::BadValue,
            "$regex has to be a string",
        ),
        (
            doc! {"a": {"$regex": "a", "$options": "z"}},
            ErrorCode::Location(51108),
            "invalid flag",
        ),
        (
            doc! {"a": {"$regex": "("}},
            ErrorCode::Location(51091),
            "Regular expression is invalid",
        ),
        (
            doc! {"a": {"$gt": 1, "b": 1}},
            ErrorCode::BadValue,
            "unknown operator: b",
        ),
        (
            doc! {"a": {"$in": [{"$gt": 1}]}},
            ErrorCode::BadValue,
            "cannot nest $ under $in",
        ),
        (
            doc! {"a": Bson::Undefined},
            ErrorCode::BadValue,
            "cannot compare to undefined",
        ),
        (doc! {"$where": "true"}, ErrorCode::BadValue, "$where"),
        (
            doc! {"$expr": {"$foo": 1}},
            ErrorCode::InvalidPipelineOperator,
            "Unrecognized expression '$foo'",
        ),
        (
            doc! {"a": {"$elemMatch": {"$expr": {"$eq": ["$a", 1]}}}},
            ErrorCode::BadValue,
            "$expr can only be applied to the top-level document",
        ),
        (
            doc! {"a": {"$elemMatch": {"$and": [{"$expr": true}]}}},
            ErrorCode::BadValue,
            "$expr can only be applied to the top-level document",
        ),
        (
            doc! {"a": {"$bitsAllSet": "x"}},
            ErrorCode::BadValue,
            "$bitsAllSet takes an Array",
        ),
        (
            doc! {"a": {"$bitsAllSet": -1}},
            ErrorCode::BadValue,
            "negative",
        ),
        (
            doc! {"a": {"$all": [{"$elemMatch": {}}, 1]}},
            ErrorCode::BadValue,
            "$all/$elemMatch has to be consistent",
        ),
    ];
    for (filter, code, msg) in cases {
        match Matcher::parse(&filter) {
            Ok(_) => panic!("{filter} should fail"),
            Err(e) => {
                assert_eq!(e.code, code, "{filter}: {e}");
                assert!(e.message.contains(msg), "{filter}: {e}");
            }
        }
    }
}

#[test]
fn positions() {
    let cases: Vec<(Document, Document, MatchPos)> = vec![
        (doc! {"a": 2}, doc! {"a": [1, 2, 3]}, Some(Some(1))),
        (
            doc! {"a.b": 5},
            doc! {"a": [{"b": 1}, {"b": [4, 5]}]},
            Some(Some(1)),
        ),
        (
            doc! {"a": {"$elemMatch": {"b": 1}}},
            doc! {"a": [{"b": 0}, {"b": 1}]},
            Some(Some(1)),
        ),
        (doc! {"a": 1}, doc! {"a": 1}, Some(None)),
        (doc! {"a": 9}, doc! {"a": [1]}, None),
        (
            doc! {"x": 1, "a": {"$gt": 2}},
            doc! {"x": 1, "a": [1, 3]},
            Some(Some(1)),
        ),
    ];
    for (filter, d, want) in cases {
        let m = Matcher::parse(&filter).expect("parse");
        assert_eq!(
            m.matches_with_position(&raw(&d)).ok(),
            Some(want),
            "{filter} on {d}"
        );
    }
}

#[test]
fn equality_helpers() {
    let m = Matcher::parse(&doc! {"_id": 5}).expect("parse");
    assert_eq!(m.id_equality(), Some(Bson::Int32(5)));
    let m = Matcher::parse(&doc! {"_id": {"$eq": "k"}}).expect("parse");
    assert_eq!(m.id_equality(), Some(Bson::String("k".into())));
    for f in [
        doc! {"_id": {"$gt": 5}},
        doc! {"_id": {"a": 1}},
        doc! {"_id": 5, "b": 1},
        doc! {"_id": bson::Regex { pattern: "x".into(), options: String::new() }},
    ] {
        assert_eq!(
            Matcher::parse(&f).expect("parse").id_equality(),
            None,
            "{f}"
        );
    }
    let m = Matcher::parse(&doc! {"a": 1, "b.c": {"$eq": 2}, "$and": [{"d": 3}], "e": {"$gt": 1}})
        .expect("parse");
    assert_eq!(
        m.equality_fields(),
        vec![
            ("a".to_string(), Bson::Int32(1)),
            ("b.c".to_string(), Bson::Int32(2)),
            ("d".to_string(), Bson::Int32(3)),
        ]
    );
}

mod prop {
    use super::*;
    use nidus_doc::compare::cmp_bson;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn scalar() -> impl Strategy<Value = Bson> {
        prop_oneof![
            (-3i32..3).prop_map(Bson::Int32),
            (-3i64..3).prop_map(Bson::Int64),
            prop_oneof![Just(-1.5f64), Just(0.0), Just(2.0), Just(f64::NAN)].prop_map(Bson::Double),
            "[ab]{0,2}".prop_map(Bson::String),
            Just(Bson::Null),
            any::<bool>().prop_map(Bson::Boolean),
        ]
    }

    fn op() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("$eq"),
            Just("$ne"),
            Just("$gt"),
            Just("$gte"),
            Just("$lt"),
            Just("$lte")
        ]
    }

    /// The naive evaluator: same canonical type and the comparison holds; null matches
    /// missing for the equality-including operators; NaN only equals NaN.
    fn naive(op: &str, v: Option<&Bson>, rhs: &Bson) -> bool {
        let pos = |v: Option<&Bson>, op: &str| -> bool {
            let Some(v) = v else {
                return matches!(rhs, Bson::Null) && matches!(op, "$eq" | "$gte" | "$lte");
            };
            let same = nidus_doc::compare::canonical_type_bson(v)
                == nidus_doc::compare::canonical_type_bson(rhs);
            let nan = |b: &Bson| matches!(b, Bson::Double(d) if d.is_nan());
            if !same {
                return false;
            }
            if nan(v) || nan(rhs) {
                return nan(v) && nan(rhs) && matches!(op, "$eq" | "$gte" | "$lte");
            }
            let o = cmp_bson(v, rhs);
            match op {
                "$eq" => o == Ordering::Equal,
                "$gt" => o == Ordering::Greater,
                "$gte" => o != Ordering::Less,
                "$lt" => o == Ordering::Less,
                _ => o != Ordering::Greater,
            }
        };
        if op == "$ne" {
            !pos(v, "$eq")
        } else {
            pos(v, op)
        }
    }

    proptest! {
        #[test]
        fn flat_comparisons(a in proptest::option::of(scalar()), b in scalar(),
                            op in op(), rhs in scalar()) {
            if matches!(rhs, Bson::Null) && op != "$eq" && op != "$ne" {
                // covered by the table tests
            }
            let mut d = Document::new();
            if let Some(a) = &a { d.insert("a", a.clone()); }
            d.insert("b", b);
            let m = Matcher::parse(&doc! {"a": {op: rhs.clone()}}).expect("parse");
            prop_assert_eq!(m.matches(&raw(&d)).ok(), Some(naive(op, a.as_ref(), &rhs)));
        }
    }
}

/// An evaluation error inside `$expr` fails the query instead of counting as no match.
#[test]
fn expr_evaluation_errors_fail_the_match() {
    let d = bson::RawDocumentBuf::from_document(&doc! {"a": 1, "z": 0}).expect("raw");
    for filter in [
        doc! {"$expr": {"$divide": ["$a", "$z"]}},
        doc! {"$or": [{"a": 2}, {"$expr": {"$divide": ["$a", "$z"]}}]},
        doc! {"$nor": [{"$expr": {"$toInt": "x"}}]},
    ] {
        let m = Matcher::parse(&filter).expect("parse");
        assert!(m.matches(&d).is_err(), "{filter}");
    }
    // Short-circuit: a decided `$or` does not evaluate the failing branch.
    let m = Matcher::parse(&doc! {"$or": [{"a": 1}, {"$expr": {"$divide": ["$a", "$z"]}}]})
        .expect("parse");
    assert_eq!(m.matches(&d).ok(), Some(true));
}

#[test]
fn expr_uses_the_expression_language() {
    let docs = [
        doc! {"_id": 1, "spent": 120, "budget": 100, "items": [1, 2, 3]},
        doc! {"_id": 2, "spent": 80, "budget": 100, "items": []},
        doc! {"_id": 3, "budget": 100},
    ];
    let cases = [
        (doc! {"$expr": {"$gt": ["$spent", "$budget"]}}, vec![1]),
        (doc! {"$expr": {"$lt": ["$spent", "$budget"]}}, vec![2, 3]),
        (
            doc! {"$expr": {"$size": {"$ifNull": ["$items", []]}}},
            vec![1],
        ),
        (doc! {"$expr": "$spent"}, vec![1, 2]),
        (
            doc! {"_id": {"$gte": 2}, "$expr": {"$eq": ["$budget", 100]}},
            vec![2, 3],
        ),
    ];
    for (filter, want) in cases {
        let m = Matcher::parse(&filter).expect("parse");
        let got: Vec<i32> = docs
            .iter()
            .filter(|d| {
                let raw = bson::RawDocumentBuf::from_document(d).expect("raw");
                m.matches(&raw).expect("no $expr")
            })
            .map(|d| d.get_i32("_id").expect("_id"))
            .collect();
        assert_eq!(got, want, "{filter}");
    }
}
