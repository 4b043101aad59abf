//! The `_id` express path decided before the filter is parsed (`Engine::express_read`) is
//! the plan the full planner builds for the same request: for random `_id` values of every
//! type an `_id` may hold (numbers of each type that compare equal, strings, ObjectIds,
//! dates, null, documents; -0.0 queried as 0), filters `{_id: v}` and `{_id: {$eq: v}}`, skips and limits, it
//! returns the documents a collection scan returns, and its executed stages and counters
//! (the explain and profiler fields) equal the full planner's. The full planner is reached
//! with an empty `let`, which the shortcut declines and the planner ignores.

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Decimal128, Document, RawDocumentBuf};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::plan::explain::stats_document;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use proptest::prelude::*;
use std::str::FromStr;

mod common;
use common::{cases, open};

/// `_id` values: several that compare equal across numeric types (1, 1L, 1.0, 1 as a
/// decimal), -0.0 against 0, and one of each other type an `_id` can be.
fn id_pool() -> Vec<Bson> {
    vec![
        Bson::Int32(1),
        Bson::Int64(2),
        Bson::Double(3.0),
        Bson::Double(0.5),
        Bson::Double(-0.0),
        Bson::Decimal128(Decimal128::from_str("4").expect("decimal")),
        Bson::String("a".into()),
        Bson::String("A".into()),
        Bson::Boolean(true),
        Bson::Null,
        Bson::ObjectId(ObjectId::from_bytes([7; 12])),
        Bson::DateTime(DateTime::from_millis(86_400_000)),
        Bson::Document(doc! {"k": 1}),
    ]
}

/// Query values: the pool plus values equal to its members under another type.
fn query_pool() -> Vec<Bson> {
    let mut v = id_pool();
    v.extend([
        Bson::Int64(1),
        Bson::Double(1.0),
        Bson::Int32(2),
        Bson::Int32(3),
        Bson::Double(0.0),
        Bson::Int32(0),
        Bson::Int64(4),
        Bson::Document(doc! {"$eq": 1}),
        Bson::Int32(99),
        Bson::String("b".into()),
    ]);
    v
}

fn filter() -> impl Strategy<Value = Document> {
    let n = query_pool().len();
    (0..n, any::<bool>()).prop_map(|(i, wrapped)| {
        let v = query_pool()[i].clone();
        if wrapped {
            doc! {"_id": {"$eq": v}}
        } else {
            doc! {"_id": v}
        }
    })
}

/// The executed plan: stage names, counters and index fields (as explain prints them).
fn run(e: &Engine, ns: &Namespace, spec: &FindSpec) -> (Vec<Document>, Document) {
    let coll = e.collection(ns);
    let mut exec = e.plan_find(coll.as_ref(), spec).expect("plan");
    let mut out = Vec::new();
    if spec.record_ids_only {
        while let Some(m) = exec.get_next().expect("next") {
            out.push(doc! {"rid": m.rid.map(|r| r as i64)});
        }
    } else {
        while let Some(d) = exec.next_doc().expect("next") {
            out.push(d.to_document().expect("document"));
        }
    }
    let mut stats = stats_document(&exec.root);
    // Time is the only field that may differ between two runs.
    strip_times(&mut stats);
    (out, stats)
}

fn strip_times(d: &mut Document) {
    d.remove("executionTimeMillisEstimate");
    for (_, v) in d.iter_mut() {
        match v {
            Bson::Document(c) => strip_times(c),
            Bson::Array(a) => a.iter_mut().for_each(|x| {
                if let Bson::Document(c) = x {
                    strip_times(c)
                }
            }),
            _ => {}
        }
    }
}

fn check(
    e: &Engine,
    ns: &Namespace,
    stored: &[Document],
    filter: Document,
    skip: u64,
    limit: u64,
    record_ids_only: bool,
) -> Result<(), TestCaseError> {
    let spec = FindSpec {
        filter: filter.clone(),
        skip,
        limit,
        record_ids_only,
        ..FindSpec::default()
    };
    let planned = FindSpec {
        let_vars: Some(Document::new()),
        ..spec.clone()
    };
    let (got, stats) = run(e, ns, &spec);
    let (want, want_stats) = run(e, ns, &planned);
    prop_assert_eq!(&got, &want, "{} skip {} limit {}", &filter, skip, limit);
    prop_assert_eq!(
        &stats,
        &want_stats,
        "{} skip {} limit {}",
        &filter,
        skip,
        limit
    );
    if record_ids_only {
        return Ok(());
    }
    // And what a collection scan returns (the shortcut declines a hinted request).
    let scan = FindSpec {
        hint: Some(Bson::Document(doc! {"$natural": 1})),
        ..spec.clone()
    };
    let (scanned, _) = run(e, ns, &scan);
    prop_assert_eq!(&got, &scanned, "{} against a collection scan", &filter);
    // Every stored document the filter names is found (the scan is not trivially empty).
    if skip == 0 && limit != 0 {
        let m = nidus_query::matcher::Matcher::parse(&filter).expect("filter");
        let matching = stored
            .iter()
            .filter(|d| {
                m.matches(&RawDocumentBuf::from_document(d).expect("raw"))
                    .expect("match")
            })
            .count();
        prop_assert_eq!(got.len(), matching.min(limit as usize), "{}", &filter);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases() * 2,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_express_path_is_the_planned_express_path(
        picks in proptest::sample::subsequence((0..id_pool().len()).collect::<Vec<_>>(), 0..=id_pool().len()),
        queries in proptest::collection::vec(
            (filter(), 0u64..2, prop_oneof![Just(0u64), Just(1u64), Just(2u64)], any::<bool>()),
            1..10,
        ),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = open(dir.path());
        let ns = Namespace::new("db", "c");
        let coll = e.ensure_collection(&ns).expect("collection");
        let mut stored = Vec::new();
        for (n, i) in picks.into_iter().enumerate() {
            let d = doc! {"_id": id_pool()[i].clone(), "n": n as i32};
            let raw = RawDocumentBuf::from_document(&d).expect("raw");
            e.insert_one(&coll, &prepare_insert(&raw).expect("prepare"), &WriteOpts::default())
                .expect("insert");
            stored.push(d);
        }
        for (filter, skip, limit, ids_only) in queries {
            check(&e, &ns, &stored, filter, skip, limit, ids_only)?;
        }
    }
}
