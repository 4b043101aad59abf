//! Hashed indexes against a collection scan (issue 22). For random documents (values whose
//! hashes collide: 2, 2.3 and 2.9; 3 as int32, int64 and double; equal documents of different
//! numeric types; strings under a case-insensitive collation; null and missing) and a set of
//! hashed indexes (single field, compound with the hash first or second, sparse, partial,
//! collated), every query (equality, `$in`, ranges, `$exists`, `$ne`, sorts in both
//! directions, with and without a collation) returns exactly what a naive evaluation does:
//! the planner's choice, each index hinted (a sparse or partial index returning only what it
//! holds), and counts.
//!
//! The CI form runs `NIDUS_PLAN_PROPS_CASES` cases (default 24); set it higher for more.

use bson::{doc, Bson, Document};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::Engine;
use nidus_query::matcher::{Matcher, ParseOptions};
use nidus_query::sort::SortPattern;
use proptest::prelude::*;

mod common;
use common::{cases, ids, loaded, raw};

fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        Just(Bson::Int32(2)),
        Just(Bson::Double(2.3)),
        Just(Bson::Double(2.9)),
        Just(Bson::Int32(3)),
        Just(Bson::Int64(3)),
        Just(Bson::Double(3.0)),
        Just(Bson::Int32(-1)),
        Just(Bson::String("a".into())),
        Just(Bson::String("A".into())),
        Just(Bson::String("b".into())),
        Just(Bson::Null),
        Just(Bson::Boolean(true)),
        Just(Bson::Document(doc! {"x": 1})),
        Just(Bson::Document(doc! {"x": 1.0})),
        Just(Bson::Document(doc! {"x": "a"})),
    ]
}

fn documents() -> impl Strategy<Value = Vec<Document>> {
    let one = (proptest::option::of(value()), proptest::option::of(value()));
    proptest::collection::vec(one, 0..20).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (h, k))| {
                let mut d = doc! {"_id": i as i32};
                if let Some(h) = h {
                    d.insert("h", h);
                }
                if let Some(k) = k {
                    d.insert("k", k);
                }
                d
            })
            .collect()
    })
}

fn index_specs() -> Vec<Document> {
    vec![
        doc! {"key": {"h": "hashed"}, "name": "h_hashed"},
        doc! {"key": {"h": "hashed", "k": -1}, "name": "h_hashed_k"},
        doc! {"key": {"k": 1, "h": "hashed"}, "name": "k_h_hashed"},
        doc! {"key": {"k": "hashed"}, "name": "k_hashed_sparse", "sparse": true},
        doc! {"key": {"h": "hashed"}, "name": "h_hashed_partial",
        "partialFilterExpression": {"k": {"$gte": 2}}},
        doc! {"key": {"h": "hashed"}, "name": "h_hashed_collated",
        "collation": {"locale": "en", "strength": 2}},
    ]
}

fn predicate() -> impl Strategy<Value = Document> {
    let field = prop_oneof![Just("h"), Just("k")];
    let op = prop_oneof![Just("$lt"), Just("$lte"), Just("$gt"), Just("$gte")];
    prop_oneof![
        4 => (field.clone(), value()).prop_map(|(f, v)| doc! {f: v}),
        2 => (field.clone(), value(), value()).prop_map(|(f, x, y)| doc! {f: {"$in": [x, y]}}),
        2 => (field.clone(), op, value()).prop_map(|(f, op, v)| doc! {f: {op: v}}),
        1 => (field.clone(), any::<bool>()).prop_map(|(f, e)| doc! {f: {"$exists": e}}),
        1 => (field, value()).prop_map(|(f, v)| doc! {f: {"$ne": v}}),
    ]
}

#[derive(Debug, Clone)]
struct Query {
    filter: Document,
    sort: Option<Document>,
    collation: Option<Document>,
}

fn query() -> impl Strategy<Value = Query> {
    let sort = prop_oneof![
        Just(None),
        Just(Some(doc! {"h": 1})),
        Just(Some(doc! {"h": -1})),
        Just(Some(doc! {"k": 1})),
        Just(Some(doc! {"k": -1})),
        Just(Some(doc! {"k": 1, "h": 1})),
    ];
    (
        proptest::collection::vec(predicate(), 0..3),
        sort,
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(doc! {"locale": "en", "strength": 2})),
        ],
    )
        .prop_map(|(preds, sort, collation)| Query {
            filter: if preds.is_empty() {
                Document::new()
            } else {
                doc! {"$and": preds}
            },
            sort,
            collation,
        })
}

fn collation(q: &Query) -> Option<nidus_doc::collation::Collation> {
    q.collation
        .as_ref()
        .and_then(|c| nidus_doc::collation::Collation::parse(c).expect("collation"))
}

fn index_holds(spec: &Document, d: &Document) -> bool {
    if let Ok(f) = spec.get_document("partialFilterExpression") {
        if !Matcher::parse(f)
            .expect("filter")
            .matches(&raw(d))
            .expect("m")
        {
            return false;
        }
    }
    if spec.get_bool("sparse").unwrap_or(false) {
        let key = spec.get_document("key").expect("key");
        return key.keys().any(|k| d.contains_key(k));
    }
    true
}

fn check(e: &Engine, ns: &Namespace, docs: &[Document], q: &Query) -> Result<(), TestCaseError> {
    let coll = collation(q);
    let opts = ParseOptions {
        collation: coll.as_ref(),
        ..ParseOptions::default()
    };
    let Ok(m) = Matcher::parse_with(&q.filter, &opts) else {
        return Ok(());
    };
    let matching: Vec<&Document> = docs
        .iter()
        .filter(|d| m.matches(&raw(d)).expect("match"))
        .collect();
    let specs = index_specs();
    let mut hints: Vec<(Option<Bson>, Option<&Document>)> = vec![(None, None)];
    hints.extend(specs.iter().map(|s| {
        (
            Some(Bson::String(s.get_str("name").expect("n").into())),
            Some(s),
        )
    }));
    for (hint, spec) in hints {
        let what = format!(
            "filter {} sort {:?} collation {:?} hint {:?}",
            q.filter, q.sort, q.collation, hint
        );
        let find = FindSpec {
            filter: q.filter.clone(),
            sort: q.sort.clone(),
            collation: q.collation.clone(),
            hint: hint.clone(),
            ..FindSpec::default()
        };
        let c = e.collection(ns);
        let mut exec = e
            .plan_find(c.as_ref(), &find)
            .map_err(|err| TestCaseError::fail(format!("{what}: {}", err.message)))?;
        let mut got = Vec::new();
        while let Some(d) = exec
            .next_doc()
            .map_err(|err| TestCaseError::fail(format!("{what}: {}", err.message)))?
        {
            got.push(d.to_document().expect("document"));
        }
        let plan = nidus_engine::plan::explain::plan_document(&exec.root).to_string();
        let want: Vec<Document> = matching
            .iter()
            .filter(|d| spec.is_none_or(|s| index_holds(s, d)))
            .map(|d| (*d).clone())
            .collect();
        prop_assert_eq!(ids(&got), ids(&want), "{}: {}", &what, &plan);
        if let Some(sort) = &q.sort {
            let pattern = SortPattern::parse(sort)
                .expect("sort")
                .with_collation(coll.clone());
            for w in got.windows(2) {
                prop_assert!(
                    pattern.compare(&raw(&w[0]), &raw(&w[1])).is_le(),
                    "{what}: out of order: {got:?}: {plan}"
                );
            }
        }
        let count = FindSpec {
            count: true,
            sort: None,
            ..find.clone()
        };
        let mut exec = e
            .plan_find(c.as_ref(), &count)
            .map_err(|err| TestCaseError::fail(format!("{what}: count: {}", err.message)))?;
        while exec.get_next().expect("count").is_some() {}
        prop_assert_eq!(exec.counted() as usize, want.len(), "count: {}", &what);
    }
    Ok(())
}

fn run_case(docs: Vec<Document>, queries: Vec<Query>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (e, ns) = loaded(dir.path(), &index_specs(), &docs);
    for q in &queries {
        check(&e, &ns, &docs, q)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn hashed_indexes_agree_with_a_collection_scan(
        docs in documents(),
        queries in proptest::collection::vec(query(), 1..6),
    ) {
        run_case(docs, queries)?;
    }
}

/// Values sharing a hash (2, 2.3, 2.9) are told apart by the FETCH filter; numbers of every
/// type with one value are found by one point.
#[test]
fn colliding_hashes_and_numeric_types() {
    let docs = vec![
        doc! {"_id": 0, "h": 2},
        doc! {"_id": 1, "h": 2.3},
        doc! {"_id": 2, "h": 2.9},
        doc! {"_id": 3, "h": 3},
        doc! {"_id": 4, "h": 3i64},
        doc! {"_id": 5, "h": 3.0},
        doc! {"_id": 6, "h": Bson::Null},
        doc! {"_id": 7},
    ];
    let q = |filter: Document| Query {
        filter,
        sort: None,
        collation: None,
    };
    run_case(
        docs,
        vec![
            q(doc! {"h": 2.3}),
            q(doc! {"h": 2}),
            q(doc! {"h": 3}),
            q(doc! {"h": {"$in": [2.9, 3i64]}}),
            q(doc! {"h": Bson::Null}),
            q(doc! {"h": {"$gt": 2}}),
        ],
    )
    .expect("hashed lookups");
}

/// A sort on the hashed field after an equality prefix (`{k: 1, h: "hashed"}` with
/// `k: {$in: [...]}`) cannot merge scans by the index order: the keys run in hash order.
#[test]
fn sort_on_hashed_field_after_point_prefix() {
    let docs: Vec<Document> = (0..12)
        .map(|i| doc! {"_id": i, "k": i % 2, "h": i})
        .collect();
    let q = |sort: Document| Query {
        filter: doc! {"k": {"$in": [0, 1]}},
        sort: Some(sort),
        collation: None,
    };
    run_case(docs, vec![q(doc! {"h": 1}), q(doc! {"h": -1})]).expect("sorted by value");
}
