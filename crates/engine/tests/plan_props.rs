//! Every plan returns what a collection scan returns (issue 5): for random documents,
//! indexes, filters, sorts and projections, the query hinted to each index in turn (one
//! solution per index: bounds, residual filters, covered projections, explode for sort), the
//! planner's own choice and a `$natural` scan all return the documents a naive evaluation of
//! the filter over every document returns, in the requested order, and count as many.

use bson::{bson, doc, Bson, Document, RawDocumentBuf};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_query::matcher::Matcher;
use nidus_query::projection::Projection;
use nidus_query::sort::SortPattern;
use proptest::prelude::*;

mod common;
use common::open;

fn small() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (0i32..4).prop_map(Bson::Int32),
        Just(Bson::Double(1.5)),
        Just(Bson::Int64(2)),
        Just(Bson::Null),
    ]
}

/// Documents: `a` may be missing or an array (the only multikey path, so no index meets
/// parallel arrays); `b` and `c` are always present (so covered projections of them are
/// exact); `d.x` is nested.
fn document() -> impl Strategy<Value = Document> {
    let a = prop_oneof![
        small().prop_map(Some),
        Just(None),
        proptest::collection::vec(0i32..4, 0..3)
            .prop_map(|v| Some(Bson::Array(v.into_iter().map(Bson::Int32).collect()))),
    ];
    let c = prop_oneof![
        Just(Bson::String("x".into())),
        Just(Bson::String("y".into())),
        small(),
    ];
    (a, small(), c, proptest::option::of(small())).prop_map(|(a, b, c, dx)| {
        let mut d = Document::new();
        if let Some(a) = a {
            d.insert("a", a);
        }
        d.insert("b", b);
        d.insert("c", c);
        if let Some(x) = dx {
            d.insert("d", doc! {"x": x});
        }
        d
    })
}

const INDEXES: &[&[(&str, i32)]] = &[
    &[("a", 1)],
    &[("b", 1)],
    &[("a", 1), ("b", 1)],
    &[("b", -1), ("a", 1)],
    &[("b", 1), ("c", 1)],
    &[("a", 1), ("b", 1), ("c", -1)],
    &[("d.x", 1)],
    &[("c", -1), ("b", 1)],
];

fn predicate() -> impl Strategy<Value = Document> {
    let v = || (0i32..4).prop_map(Bson::Int32);
    prop_oneof![
        v().prop_map(|x| doc! {"a": x}),
        (v(), v()).prop_map(|(x, y)| doc! {"a": {"$in": [x, y]}}),
        (v(), v(), v()).prop_map(|(x, y, z)| doc! {"b": {"$in": [x, y, z]}}),
        v().prop_map(|x| doc! {"b": {"$gt": x}}),
        v().prop_map(|x| doc! {"b": {"$lte": x}}),
        v().prop_map(|x| doc! {"a": {"$ne": x}}),
        (v(), v()).prop_map(|(x, y)| doc! {"$or": [{"b": x}, {"b": y}]}),
        (v(), v()).prop_map(|(x, y)| doc! {"$or": [{"a": x}, {"c": y}]}),
        any::<bool>().prop_map(|e| doc! {"a": {"$exists": e}}),
        v().prop_map(|x| doc! {"a": {"$elemMatch": {"$gt": x}}}),
        Just(doc! {"a": null}),
        Just(doc! {"c": {"$in": ["x", null]}}),
        v().prop_map(|x| doc! {"d.x": {"$gte": x}}),
        (v(), v()).prop_map(|(x, y)| doc! {"b": {"$nin": [x, y]}}),
        Just(doc! {"c": {"$gte": "x"}}),
    ]
}

fn filter() -> impl Strategy<Value = Document> {
    proptest::collection::vec(predicate(), 0..3).prop_map(|preds| {
        if preds.is_empty() {
            Document::new()
        } else {
            doc! {"$and": preds}
        }
    })
}

/// A query's sort and projection.
type Shape = (Option<Document>, Option<Document>);

/// A sort and projection that keeps the sort fields (so the order can be checked).
fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just((None, None)),
        Just((Some(doc! {"b": 1}), None)),
        Just((Some(doc! {"c": -1}), None)),
        Just((Some(doc! {"a": 1}), None)),
        Just((Some(doc! {"b": 1, "c": 1}), None)),
        Just((Some(doc! {"c": 1}), Some(doc! {"b": 1, "c": 1, "_id": 0}))),
        Just((Some(doc! {"b": -1}), Some(doc! {"b": 1, "c": 1, "_id": 0}))),
        // Not `a`: an index keys a missing field as null, so a covered projection returns
        // `a: null` for it, as MongoDB's does.
        Just((None, Some(doc! {"c": 1, "_id": 0}))),
    ]
}

fn run_find(e: &Engine, ns: &Namespace, spec: &FindSpec) -> Vec<Document> {
    let coll = e.collection(ns);
    let mut exec = e.plan_find(coll.as_ref(), spec).expect("plan");
    let mut out = Vec::new();
    while let Some(d) = exec.next_doc().expect("next") {
        out.push(d.to_document().expect("document"));
    }
    out
}

/// What the query must return: the filter evaluated on every document, projected.
fn expected(docs: &[Document], spec: &FindSpec) -> Vec<Document> {
    let m = Matcher::parse(&spec.filter).expect("filter");
    let p = spec
        .projection
        .as_ref()
        .map(|p| Projection::parse(p).expect("projection"));
    docs.iter()
        .filter(|d| {
            m.matches(&RawDocumentBuf::from_document(d).unwrap())
                .unwrap()
        })
        .map(|d| match &p {
            Some(p) => p.apply(&RawDocumentBuf::from_document(d).unwrap()).unwrap(),
            None => d.clone(),
        })
        .collect()
}

/// Documents as comparable strings, top-level fields sorted: a covered projection returns
/// its fields in key pattern order (as MongoDB's PROJECTION_COVERED does), not the stored
/// document's.
fn sorted_strings(docs: &[Document]) -> Vec<String> {
    let mut v: Vec<String> = docs
        .iter()
        .map(|d| {
            let mut fields: Vec<String> = d.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
            fields.sort();
            fields.join(", ")
        })
        .collect();
    v.sort();
    v
}

fn check(
    e: &Engine,
    ns: &Namespace,
    docs: &[Document],
    spec: &FindSpec,
) -> Result<(), TestCaseError> {
    let want = sorted_strings(&expected(docs, spec));
    let mut hints: Vec<Option<Bson>> = vec![None, Some(bson!({"$natural": 1}))];
    hints.extend(INDEXES.iter().map(|ix| Some(Bson::Document(key(ix)))));
    for hint in hints {
        let spec = FindSpec {
            hint: hint.clone(),
            ..spec.clone()
        };
        let got = run_find(e, ns, &spec);
        prop_assert_eq!(
            &sorted_strings(&got),
            &want,
            "filter {} sort {:?} projection {:?} hint {:?}",
            &spec.filter,
            &spec.sort,
            &spec.projection,
            &hint
        );
        if let Some(sort) = &spec.sort {
            let pattern = SortPattern::parse(sort).expect("sort");
            let raws: Vec<RawDocumentBuf> = got
                .iter()
                .map(|d| RawDocumentBuf::from_document(d).unwrap())
                .collect();
            for w in raws.windows(2) {
                prop_assert!(
                    pattern.compare(&w[0], &w[1]).is_le(),
                    "out of order under {:?} ({} hint {:?}): {:?}",
                    sort,
                    &spec.filter,
                    &hint,
                    got
                );
            }
        }
        // The same filter counted (COUNT over COUNT_SCAN, IXSCAN or FETCH) gives as many.
        let count = FindSpec {
            filter: spec.filter.clone(),
            hint: hint.clone(),
            count: true,
            ..FindSpec::default()
        };
        let coll = e.collection(ns);
        let mut exec = e.plan_find(coll.as_ref(), &count).expect("plan count");
        while exec.get_next().expect("count").is_some() {}
        prop_assert_eq!(
            exec.counted() as usize,
            want.len(),
            "count of {} hint {:?}",
            &spec.filter,
            &hint
        );
    }
    Ok(())
}

fn key(ix: &[(&str, i32)]) -> Document {
    ix.iter()
        .map(|(f, d)| (f.to_string(), Bson::Int32(*d)))
        .collect()
}

fn run(docs: Vec<Document>, queries: Vec<(Document, Shape)>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open(dir.path());
    let ns = Namespace::new("db", "c");
    let specs: Vec<Document> = INDEXES
        .iter()
        .enumerate()
        .map(|(i, ix)| doc! {"key": key(ix), "name": format!("ix{i}")})
        .collect();
    e.create_indexes(&ns, &specs).expect("indexes");
    let coll = e.ensure_collection(&ns).expect("collection");
    let mut stored = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        let mut with_id = doc! {"_id": i as i32};
        with_id.extend(d);
        let raw = RawDocumentBuf::from_document(&with_id).expect("raw");
        e.insert_one(
            &coll,
            &prepare_insert(&raw).expect("prepare"),
            &WriteOpts::default(),
        )
        .expect("insert");
        stored.push(with_id);
    }
    for (filter, (sort, projection)) in queries {
        let spec = FindSpec {
            filter,
            sort,
            projection,
            ..FindSpec::default()
        };
        check(&e, &ns, &stored, &spec)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_plan_returns_what_a_collection_scan_returns(
        docs in proptest::collection::vec(document(), 0..14),
        queries in proptest::collection::vec((filter(), shape()), 1..8),
    ) {
        run(docs, queries)?;
    }
}
