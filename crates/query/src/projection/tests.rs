//! Data-driven tests: (document, projection, expected output or error code).

use super::*;
use bson::{doc, RawDocumentBuf};

fn project(d: &Document, spec: Document, pos: Option<usize>) -> Result<Document> {
    let p = Projection::parse(&spec)?;
    let raw = RawDocumentBuf::from_document(d).map_err(|e| Error::internal(e.to_string()))?;
    p.apply_with_position(&raw, pos)
}

fn ok_cases() -> Vec<(Document, Document, Document)> {
    let d = doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3, 4, 5]};
    vec![
        (d.clone(), doc! {}, d.clone()),
        (d.clone(), doc! {"a": 1}, doc! {"_id": 1, "a": 1}),
        (d.clone(), doc! {"a": true, "_id": 0}, doc! {"a": 1}),
        (
            d.clone(),
            doc! {"_id": 0},
            doc! {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3, 4, 5]},
        ),
        (
            d.clone(),
            doc! {"a": 0, "e": 0},
            doc! {"_id": 1, "b": {"c": 2, "d": 3}},
        ),
        (d.clone(), doc! {"b.c": 1}, doc! {"_id": 1, "b": {"c": 2}}),
        (
            d.clone(),
            doc! {"b": {"d": 1}},
            doc! {"_id": 1, "b": {"d": 3}},
        ),
        (
            d.clone(),
            doc! {"b.c": 0},
            doc! {"_id": 1, "a": 1, "b": {"d": 3}, "e": [1, 2, 3, 4, 5]},
        ),
        (d.clone(), doc! {"_id": 1}, doc! {"_id": 1}),
        (d.clone(), doc! {"zz": 1}, doc! {"_id": 1}),
        // Field order follows the document, not the projection.
        (
            d.clone(),
            doc! {"b": 1, "a": 1},
            doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}},
        ),
        // Through arrays of subdocuments; scalars dropped in inclusion, kept in exclusion.
        (
            doc! {"_id": 1, "a": [{"b": 1, "c": 2}, {"b": 3}]},
            doc! {"a.b": 1},
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 3}]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1, "c": 2}, 5, {"c": 1}]},
            doc! {"a.b": 1},
            doc! {"_id": 1, "a": [{"b": 1}, {}]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1, "c": 2}, 5]},
            doc! {"a.b": 0},
            doc! {"_id": 1, "a": [{"c": 2}, 5]},
        ),
        (doc! {"_id": 1, "a": 5}, doc! {"a.b": 1}, doc! {"_id": 1}),
        // $slice
        (
            d.clone(),
            doc! {"e": {"$slice": 2}},
            doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]},
        ),
        (
            d.clone(),
            doc! {"e": {"$slice": -2}, "a": 1},
            doc! {"_id": 1, "a": 1, "e": [4, 5]},
        ),
        (
            d.clone(),
            doc! {"e": {"$slice": [1, 2]}, "_id": 0, "a": 1},
            doc! {"a": 1, "e": [2, 3]},
        ),
        (
            d.clone(),
            doc! {"e": {"$slice": [-2, 5]}, "_id": 0, "a": 1},
            doc! {"a": 1, "e": [4, 5]},
        ),
        (
            d.clone(),
            doc! {"a": {"$slice": 1}, "e": 1},
            doc! {"_id": 1, "a": 1, "e": [1, 2, 3, 4, 5]},
        ),
        // Literals and field paths.
        (
            d.clone(),
            doc! {"x": "lit", "a": 1},
            doc! {"_id": 1, "a": 1, "x": "lit"},
        ),
        (d.clone(), doc! {"x": "$b.c", "_id": 0}, doc! {"x": 2}),
        (
            d.clone(),
            doc! {"x": {"$literal": 1}, "_id": 0},
            doc! {"x": 1},
        ),
        (d.clone(), doc! {"x": "$nope", "_id": 0}, doc! {}),
        (
            d.clone(),
            doc! {"x": ["$a", 7], "_id": 0},
            doc! {"x": [1, 7]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}, 3]},
            doc! {"x": "$a.b", "_id": 0},
            doc! {"x": [1, 2]},
        ),
        (
            doc! {"_id": 1},
            doc! {"a.b": "x", "_id": 0},
            doc! {"a": {"b": "x"}},
        ),
        (
            doc! {"_id": 1, "a": [{"c": 1}, 2]},
            doc! {"a.b": "x", "_id": 0},
            doc! {"a": [{"b": "x"}, {"b": "x"}]},
        ),
        (
            doc! {"_id": 1, "n": null},
            doc! {"n": null, "_id": 0},
            doc! {"n": null},
        ),
    ]
}

#[test]
fn projection_cases() {
    for (d, spec, expected) in ok_cases() {
        match project(&d, spec.clone(), None) {
            Ok(got) => assert_eq!(got, expected, "{d} with {spec}"),
            Err(e) => panic!("{d} with {spec}: {e:?}"),
        }
    }
}

#[test]
fn positional_and_elem_match() {
    let d = doc! {"_id": 1, "a": [{"x": 1}, {"x": 5}, {"x": 7}], "b": 2};
    assert_eq!(
        project(&d, doc! {"a.$": 1}, Some(1)).ok(),
        Some(doc! {"_id": 1, "a": [{"x": 5}]})
    );
    let e = project(&d, doc! {"a.$": 1}, None).expect_err("no match position");
    assert_eq!(e.code.code(), 51246);
    assert_eq!(
        project(&d, doc! {"a": {"$elemMatch": {"x": {"$gt": 2}}}}, None).ok(),
        Some(doc! {"_id": 1, "a": [{"x": 5}]})
    );
    assert_eq!(
        project(&d, doc! {"a": {"$elemMatch": {"x": 100}}, "b": 1}, None).ok(),
        Some(doc! {"_id": 1, "b": 2})
    );
    assert_eq!(
        project(&d, doc! {"a": {"$elemMatch": {"x": 7}}, "_id": 0}, None).ok(),
        Some(doc! {"a": [{"x": 7}]})
    );
}

#[test]
fn projection_errors() {
    let cases: Vec<(Document, i32, &str)> = vec![
        (
            doc! {"a": 1, "b": 0},
            31254,
            "Cannot do exclusion on field b in inclusion projection",
        ),
        (
            doc! {"a": 0, "b": 1},
            31253,
            "Cannot do inclusion on field b in exclusion projection",
        ),
        (
            doc! {"a": 1, "a.b": 1},
            31249,
            "Path collision at a.b remaining portion b",
        ),
        (doc! {"a.b": 1, "a": 1}, 31250, "Path collision at a"),
        (
            doc! {"a": 0, "b": "x"},
            31310,
            "Cannot use an expression b: \"x\" in an exclusion projection",
        ),
        (
            doc! {"a.$": 1, "b.$": 1},
            31276,
            "Cannot specify more than one positional projection per query.",
        ),
        (
            doc! {"a.b": {"$elemMatch": {"x": 1}}},
            31275,
            "Cannot use $elemMatch projection on a nested field.",
        ),
        (
            doc! {"a": {"$elemMatch": 1}},
            31274,
            "elemMatch: Invalid argument, object required",
        ),
        (
            doc! {"a": {"$slice": [1]}},
            31272,
            "$slice array argument should be of form [skip, limit]",
        ),
        (
            doc! {"a": {"$slice": [1, 0]}},
            31259,
            "$slice limit must be positive, got 0",
        ),
        (
            doc! {"a": {"$slice": "x"}},
            31273,
            "$slice only supports numbers",
        ),
        (
            doc! {"a": {}},
            51270,
            "An empty sub-projection is not a valid value",
        ),
        (
            doc! {"a": {"$meta": "textScore"}},
            40218,
            "query requires text score metadata, but it is not available",
        ),
        (
            doc! {"a": {"$meta": "bogus"}},
            17308,
            "Unsupported argument to $meta: bogus",
        ),
        (
            doc! {"a": {"$foo": [1, 2]}},
            31325,
            "Unknown expression $foo",
        ),
        (
            doc! {"a": 0, "b": {"$add": [1, 2]}},
            31310,
            "Cannot use an expression b: { $add: [ 1, 2 ] } in an exclusion projection",
        ),
        (
            doc! {"a": {"$add": [1], "b": 1}},
            15983,
            "An object representing an expression must have exactly one field",
        ),
        (
            doc! {"a": "$$nope"},
            17276,
            "Use of undefined variable: nope",
        ),
        (
            doc! {"a.$": {"x": 1}},
            31271,
            "positional projection cannot be used with an expression or sub object",
        ),
    ];
    for (spec, code, msg) in cases {
        match Projection::parse(&spec) {
            Ok(p) => panic!("{spec}: expected error {code}, got {p:?}"),
            Err(e) => {
                assert_eq!(e.code.code(), code, "{spec}: {}", e.message);
                assert!(e.message.contains(msg), "{spec}: {}", e.message);
            }
        }
    }
}

#[test]
fn explain_hooks() {
    let simple = Projection::parse(&doc! {"a": 1, "b": 1}).expect("parses");
    assert!(simple.is_simple_inclusion());
    assert_eq!(
        simple.required_fields(),
        Some(vec!["_id".to_string(), "a".to_string(), "b".to_string()])
    );
    let excl = Projection::parse(&doc! {"a": 0}).expect("parses");
    assert!(excl.is_exclusion() && excl.is_simple() && excl.includes_id());
    let dotted = Projection::parse(&doc! {"a.b": 1, "_id": 0}).expect("parses");
    assert!(!dotted.is_simple() && !dotted.includes_id());
    assert_eq!(dotted.required_fields(), Some(vec!["a.b".to_string()]));
    let slice = Projection::parse(&doc! {"a": {"$slice": 1}}).expect("parses");
    assert!(slice.is_exclusion() && !slice.is_simple());
    let pos = Projection::parse(&doc! {"a.$": 1}).expect("parses");
    assert!(pos.requires_match_details() && pos.is_inclusion());
}

/// Computed fields: any aggregation expression, evaluated against the whole document.
#[test]
fn computed_fields() {
    let d = doc! {"_id": 1, "a": 2, "b": {"c": 3}, "arr": [{"x": 1}, {"x": 2}], "s": "Hi"};
    let cases: Vec<(Document, Document)> = vec![
        (
            doc! {"sum": {"$add": ["$a", "$b.c"]}},
            doc! {"_id": 1, "sum": 5},
        ),
        (
            doc! {"_id": 0, "u": {"$toUpper": "$s"}, "a": 1},
            doc! {"a": 2, "u": "HI"},
        ),
        (
            doc! {"_id": 0, "xs": "$arr.x", "lit": {"$literal": "$a"}},
            doc! {"xs": [1, 2], "lit": "$a"},
        ),
        (
            doc! {"_id": 0, "arr": {"y": {"$multiply": ["$a", 10]}}},
            doc! {"arr": [{"y": 20}, {"y": 20}]},
        ),
        (
            doc! {"_id": 0, "n": {"$size": "$arr"}, "gone": "$$REMOVE", "r": "$$ROOT.a"},
            doc! {"n": 2, "r": 2},
        ),
        (
            doc! {"_id": 0, "t": "text", "nul": null, "arrlit": [1, "$a"]},
            doc! {"t": "text", "nul": null, "arrlit": [1, 2]},
        ),
        // `$meta` adds a field to an exclusion; absent metadata is missing.
        (
            doc! {"arr": 0, "k": {"$meta": "indexKey"}, "s": 0},
            doc! {"_id": 1, "a": 2, "b": {"c": 3}},
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(project(&d, spec.clone(), None).ok(), Some(want), "{spec}");
    }
}

/// `$project` (aggregate policy): `$slice` is the expression, `$elemMatch` an unknown one, and
/// a positional `.$` is refused.
#[test]
fn aggregate_policy() {
    let scope = nidus_expr::LetScope::new(Some(&doc! {"two": 2})).expect("let");
    let parse = |spec: &Document| Projection::parse_with(spec, Policy::Aggregate, &scope);
    let d = RawDocumentBuf::from_document(&doc! {"_id": 1, "arr": [1, 2, 3]}).expect("raw");
    let p = parse(&doc! {"first": {"$slice": ["$arr", "$$two"]}}).expect("parses");
    assert_eq!(p.apply(&d).ok(), Some(doc! {"_id": 1, "first": [1, 2]}));
    let e = parse(&doc! {}).expect_err("empty");
    assert_eq!(e.code.code(), 51272);
    let e = parse(&doc! {"a": {"$elemMatch": {"x": 1}}}).expect_err("no $elemMatch");
    assert_eq!(e.code.code(), 31325);
    let e = parse(&doc! {"a.$": 1}).expect_err("no positional");
    assert_eq!(e.code.code(), 31324);
}

/// `$addFields`: existing fields replaced in place, new ones appended, dotted paths through
/// arrays and scalars, `$$REMOVE` drops.
#[test]
fn add_fields() {
    use super::add_fields::AddFields;
    let scope = nidus_expr::LetScope::empty();
    let d = doc! {"_id": 1, "a": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "t": 4};
    let cases: Vec<(Document, Document)> = vec![
        (
            doc! {"s": {"$add": ["$s", 1]}, "n": 1},
            doc! {"_id": 1, "a": [{"x": 1}, 5, [{"x": 2}]], "s": 4, "t": 4, "n": 1},
        ),
        (
            doc! {"a.y": "$s"},
            doc! {"_id": 1, "a": [{"x": 1, "y": 3}, {"y": 3}, [{"x": 2, "y": 3}]], "s": 3, "t": 4},
        ),
        (
            doc! {"s": {"k": 1}, "t": "$$REMOVE"},
            doc! {"_id": 1, "a": [{"x": 1}, 5, [{"x": 2}]], "s": {"k": 1}},
        ),
        (
            doc! {"e": {}, "o": {"$literal": {"$x": 1}}},
            doc! {"_id": 1, "a": [{"x": 1}, 5, [{"x": 2}]], "s": 3, "t": 4, "e": {}, "o": {"$x": 1}},
        ),
    ];
    let raw = RawDocumentBuf::from_document(&d).expect("raw");
    for (spec, want) in cases {
        let a = AddFields::parse("$addFields", &spec, &scope).expect("parses");
        assert_eq!(a.apply(&raw).ok(), Some(want), "{spec}");
    }
    let errors = [
        (doc! {}, 40177),
        (doc! {"a.b": 1, "a": 2}, 31250),
        (doc! {"$x": 1}, 16410),
    ];
    for (spec, code) in errors {
        let e = AddFields::parse("$addFields", &spec, &scope).expect_err("bad spec");
        assert_eq!(e.code.code(), code, "{spec}: {}", e.message);
    }
}
