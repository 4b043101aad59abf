//! Clustered collections against a naive evaluation (issue 22). For random documents whose
//! `_id`s mix BSON types (numbers of every type with equal values, strings, null, booleans,
//! dates, ObjectIds, documents, MinKey/MaxKey), every `_id` range query (`$gt`, `$gte`,
//! `$lt`, `$lte`, equality, two bounds of different types) through the clustered scan
//! (`CLUSTERED_IXSCAN` with minRecord/maxRecord, forward and backward by `{_id: ±1}` sort
//! and `$natural`) returns exactly the documents a full evaluation of the filter does, in
//! `_id` order for the scans that provide it.
//!
//! The CI form runs `NIDUS_PLAN_PROPS_CASES` cases (default 24); set it higher for more.

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use nidus_doc::compare::cmp_bson;
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_query::matcher::Matcher;
use nidus_storage_rocks::RocksEngine;
use proptest::prelude::*;
use std::sync::Arc;

mod common;
use common::{cases, raw};

fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-5i32..5).prop_map(Bson::Int32),
        (-5i64..5).prop_map(Bson::Int64),
        (-10i32..10).prop_map(|n| Bson::Double(f64::from(n) / 2.0)),
        prop_oneof![Just("a"), Just("b"), Just("B"), Just(""), Just("ab")]
            .prop_map(|s| Bson::String(s.into())),
        Just(Bson::Null),
        any::<bool>().prop_map(Bson::Boolean),
        (0i64..5).prop_map(|n| Bson::DateTime(DateTime::from_millis(n * 1000))),
        (0u8..4).prop_map(|n| {
            let mut b = [0u8; 12];
            b[11] = n;
            Bson::ObjectId(ObjectId::from_bytes(b))
        }),
        (0i32..3).prop_map(|n| Bson::Document(doc! {"x": n})),
    ]
}

fn bound() -> impl Strategy<Value = Bson> {
    prop_oneof![9 => value(), 1 => Just(Bson::MinKey), 1 => Just(Bson::MaxKey)]
}

fn filter() -> impl Strategy<Value = Document> {
    let op = prop_oneof![
        Just("$gt"),
        Just("$gte"),
        Just("$lt"),
        Just("$lte"),
        Just("$eq")
    ];
    prop_oneof![
        (op.clone(), bound()).prop_map(|(op, v)| doc! {"_id": {op: v}}),
        (op.clone(), bound(), op, bound())
            .prop_map(|(a, x, b, y)| doc! {"$and": [{"_id": {a: x}}, {"_id": {b: y}}]}),
        value().prop_map(|v| doc! {"_id": v}),
        (value(), 0i32..3).prop_map(|(v, k)| doc! {"_id": {"$gte": v}, "k": k}),
    ]
}

fn run(e: &Engine, ns: &Namespace, spec: FindSpec) -> (Vec<Bson>, String) {
    let c = e.collection(ns);
    let mut exec = e.plan_find(c.as_ref(), &spec).expect("plan");
    let mut got = Vec::new();
    while let Some(d) = exec.next_doc().expect("next") {
        got.push(
            d.to_document()
                .expect("doc")
                .get("_id")
                .cloned()
                .expect("_id"),
        );
    }
    let plan = nidus_engine::plan::explain::plan_document(&exec.root).to_string();
    (got, plan)
}

fn check(e: &Engine, ns: &Namespace, docs: &[Document], f: &Document) -> Result<(), TestCaseError> {
    let m = Matcher::parse(f).expect("filter");
    let mut want: Vec<Bson> = docs
        .iter()
        .filter(|d| m.matches(&raw(d)).expect("match"))
        .map(|d| d.get("_id").cloned().expect("_id"))
        .collect();
    want.sort_by(cmp_bson);
    let sorts: [Option<Document>; 5] = [
        None,
        Some(doc! {"_id": 1}),
        Some(doc! {"_id": -1}),
        Some(doc! {"$natural": 1}),
        Some(doc! {"$natural": -1}),
    ];
    for sort in sorts {
        let spec = FindSpec {
            filter: f.clone(),
            sort: sort.clone(),
            ..FindSpec::default()
        };
        let (got, plan) = run(e, ns, spec);
        let backward = sort
            .as_ref()
            .is_some_and(|s| s.values().next() == Some(&Bson::Int32(-1)));
        let mut expected = want.clone();
        if backward {
            expected.reverse();
        }
        // Every scan of a clustered collection is in `_id` order: compare exactly.
        prop_assert_eq!(&got, &expected, "filter {} sort {:?}: {}", f, sort, plan);
        prop_assert!(!plan.contains("\"IXSCAN\""), "no _id IXSCAN: {plan}");
    }
    let hinted = FindSpec {
        filter: f.clone(),
        hint: Some(Bson::Document(doc! {"_id": 1})),
        ..FindSpec::default()
    };
    let (got, plan) = run(e, ns, hinted);
    prop_assert_eq!(&got, &want, "filter {} hinted: {}", f, plan);
    Ok(())
}

fn run_case(ids: Vec<Bson>, filters: Vec<Document>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Engine::open(Arc::new(RocksEngine::open(dir.path()).expect("rocks"))).expect("engine");
    let ns = Namespace::new("db", "c");
    let clustered =
        doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}};
    let coll = e.create_collection(&ns, clustered).expect("create");
    let mut docs: Vec<Document> = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let d = doc! {"_id": id, "k": (i % 3) as i32};
        // Equal `_id`s of different numeric types are duplicates: the insert fails.
        if e.insert_one(
            &coll,
            &prepare_insert(&raw(&d)).expect("prepare"),
            &WriteOpts::default(),
        )
        .is_ok()
        {
            docs.push(d);
        }
    }
    for f in &filters {
        check(&e, &ns, &docs, f)?;
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
    fn clustered_scans_agree_with_a_full_evaluation(
        ids in proptest::collection::vec(value(), 0..30),
        filters in proptest::collection::vec(filter(), 1..8),
    ) {
        run_case(ids, filters)?;
    }
}

/// A bounded scan shows MongoDB's explain fields; an unbounded one is a COLLSCAN.
#[test]
fn explain_names_the_clustered_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Engine::open(Arc::new(RocksEngine::open(dir.path()).expect("rocks"))).expect("engine");
    let ns = Namespace::new("db", "c");
    let clustered =
        doc! {"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}};
    let coll = e.create_collection(&ns, clustered).expect("create");
    for i in 0..10 {
        e.insert_one(
            &coll,
            &prepare_insert(&raw(&doc! {"_id": i})).expect("prepare"),
            &WriteOpts::default(),
        )
        .expect("insert");
    }
    let spec = FindSpec {
        filter: doc! {"_id": {"$gte": 3, "$lt": 6}},
        ..FindSpec::default()
    };
    let (got, plan) = run(&e, &ns, spec);
    assert_eq!(got, vec![Bson::Int32(3), Bson::Int32(4), Bson::Int32(5)]);
    assert!(plan.contains("CLUSTERED_IXSCAN"), "{plan}");
    assert!(
        plan.contains("\"minRecord\": 3") && plan.contains("\"maxRecord\": 6"),
        "{plan}"
    );
    let (_, plan) = run(
        &e,
        &ns,
        FindSpec {
            filter: doc! {"k": 1},
            ..FindSpec::default()
        },
    );
    assert!(
        plan.contains("COLLSCAN") && !plan.contains("minRecord"),
        "{plan}"
    );
}
