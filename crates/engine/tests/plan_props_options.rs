//! Every index option, both scan directions and every bound kind against a collection scan
//! (issue 18). For random documents, a random set of indexes (unique, partial, sparse,
//! collated, multikey, compound, descending fields, hidden) and random range queries (open
//! and closed bounds, MinKey/MaxKey, values of other type brackets, sorts in both
//! directions, limits):
//! - the planner's choice returns exactly what a naive evaluation over every document does,
//!   in order, and never uses a hidden index;
//! - each index hinted returns the documents the index holds that match (for a sparse or
//!   partial index only those it holds, as MongoDB's hint does), in order; a hidden index
//!   cannot be hinted;
//! - counts agree.
//!
//! The CI form runs `NIDUS_PLAN_PROPS_CASES` cases (default 24, a few seconds); set it higher
//! for a longer run.

use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_query::matcher::{Matcher, ParseOptions};
use nidus_query::sort::SortPattern;
use proptest::prelude::*;

mod common;
use common::{cases, ids, loaded, raw};

/// Values of several type brackets: numbers, strings (compared under a collation or not),
/// null, booleans.
fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        4 => (0i32..6).prop_map(Bson::Int32),
        1 => Just(Bson::Double(2.5)),
        1 => Just(Bson::Int64(3)),
        2 => prop_oneof![Just("a"), Just("B"), Just("b"), Just("c")]
            .prop_map(|s| Bson::String(s.into())),
        1 => Just(Bson::Null),
        1 => Just(Bson::Boolean(true)),
    ]
}

/// Documents: `u` is unique per document (its position, or a string of it), `a` may be
/// missing or an array (multikey), `b` may be missing, `c` is a string or a number.
fn documents() -> impl Strategy<Value = Vec<Document>> {
    let one = (
        any::<bool>(),
        prop_oneof![
            2 => value().prop_map(Some),
            1 => Just(None),
            1 => proptest::collection::vec(value(), 0..3).prop_map(|v| Some(Bson::Array(v))),
        ],
        proptest::option::of(value()),
        value(),
    );
    proptest::collection::vec(one, 0..16).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (u_str, a, b, c))| {
                let mut d = doc! {"_id": i as i32};
                d.insert(
                    "u",
                    if u_str {
                        Bson::String(format!("u{i:02}"))
                    } else {
                        Bson::Int32(i as i32 * 2)
                    },
                );
                if let Some(a) = a {
                    d.insert("a", a);
                }
                if let Some(b) = b {
                    d.insert("b", b);
                }
                d.insert("c", c);
                d
            })
            .collect()
    })
}

/// Index specs: every option, on single and compound keys, ascending and descending.
fn index_specs() -> Vec<Document> {
    let en2 = doc! {"locale": "en", "strength": 2};
    vec![
        doc! {"key": {"u": 1}, "name": "u_unique", "unique": true},
        doc! {"key": {"u": -1}, "name": "u_unique_desc", "unique": true},
        doc! {"key": {"u": 1, "b": -1}, "name": "u_b_unique", "unique": true},
        doc! {"key": {"b": 1}, "name": "b_sparse", "sparse": true},
        doc! {"key": {"b": -1, "c": 1}, "name": "b_c_sparse", "sparse": true},
        doc! {"key": {"b": 1}, "name": "b_partial", "partialFilterExpression": {"b": {"$gte": 2}}},
        doc! {"key": {"u": 1}, "name": "u_partial_unique", "unique": true,
        "partialFilterExpression": {"b": {"$exists": true}}},
        doc! {"key": {"c": 1}, "name": "c_partial_type",
        "partialFilterExpression": {"c": {"$type": "string"}, "b": {"$lt": 4}}},
        doc! {"key": {"c": 1}, "name": "c_collated", "collation": en2.clone()},
        doc! {"key": {"c": -1, "u": 1}, "name": "c_u_collated", "collation": en2},
        doc! {"key": {"a": 1}, "name": "a_multikey"},
        doc! {"key": {"a": -1, "b": 1}, "name": "a_b_multikey"},
        doc! {"key": {"b": 1, "a": 1}, "name": "b_a"},
        doc! {"key": {"c": 1}, "name": "c_hidden", "hidden": true},
        doc! {"key": {"b": -1}, "name": "b_desc"},
    ]
}

/// A bound on one side: the operator and its value, MinKey and MaxKey included.
fn bound() -> impl Strategy<Value = (&'static str, Bson)> {
    let op = prop_oneof![Just("$lt"), Just("$lte"), Just("$gt"), Just("$gte")];
    let v = prop_oneof![
        6 => value(),
        1 => Just(Bson::MinKey),
        1 => Just(Bson::MaxKey),
    ];
    (op, v)
}

fn predicate() -> impl Strategy<Value = Document> {
    let field = prop_oneof![Just("u"), Just("a"), Just("b"), Just("c")];
    prop_oneof![
        // One bound, or a range with both ends (each open or closed).
        4 => (field.clone(), proptest::collection::vec(bound(), 1..3)).prop_map(|(f, bs)| {
            let mut ops = Document::new();
            for (op, v) in bs {
                ops.insert(op, v);
            }
            doc! {f: ops}
        }),
        2 => (field.clone(), value()).prop_map(|(f, v)| doc! {f: v}),
        1 => (field.clone(), any::<bool>()).prop_map(|(f, e)| doc! {f: {"$exists": e}}),
        1 => (field.clone(), value(), value()).prop_map(|(f, x, y)| doc! {f: {"$in": [x, y]}}),
        1 => (field, value()).prop_map(|(f, v)| doc! {f: {"$ne": v}}),
    ]
}

#[derive(Debug, Clone)]
struct Query {
    filter: Document,
    sort: Option<Document>,
    limit: u64,
    collation: Option<Document>,
}

fn query() -> impl Strategy<Value = Query> {
    let sort = prop_oneof![
        Just(None),
        Just(Some(doc! {"u": 1})),
        Just(Some(doc! {"u": -1})),
        Just(Some(doc! {"b": 1})),
        Just(Some(doc! {"b": -1})),
        Just(Some(doc! {"c": 1})),
        Just(Some(doc! {"c": -1})),
        Just(Some(doc! {"b": -1, "c": 1})),
        Just(Some(doc! {"u": 1, "b": -1})),
    ];
    (
        proptest::collection::vec(predicate(), 0..3),
        sort,
        prop_oneof![Just(0u64), Just(1), Just(3)],
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(doc! {"locale": "en", "strength": 2})),
        ],
    )
        .prop_map(|(preds, sort, limit, collation)| Query {
            filter: if preds.is_empty() {
                Document::new()
            } else {
                doc! {"$and": preds}
            },
            sort,
            limit,
            collation,
        })
}

fn collation(q: &Query) -> Option<nidus_doc::collation::Collation> {
    q.collation
        .as_ref()
        .and_then(|c| nidus_doc::collation::Collation::parse(c).expect("collation"))
}

fn matches(m: &Matcher, d: &Document) -> bool {
    m.matches(&RawDocumentBuf::from_document(d).expect("raw"))
        .expect("match")
}

/// Whether an index holds a document: its partial filter matches, and for a sparse index
/// some key field is present.
fn index_holds(spec: &Document, d: &Document) -> bool {
    if let Ok(f) = spec.get_document("partialFilterExpression") {
        if !matches(&Matcher::parse(f).expect("partial filter"), d) {
            return false;
        }
    }
    if spec.get_bool("sparse").unwrap_or(false) {
        let key = spec.get_document("key").expect("key");
        return key.keys().any(|k| d.contains_key(k));
    }
    true
}

/// Runs a query; Err(message) when planning or execution fails.
fn run(e: &Engine, ns: &Namespace, spec: &FindSpec) -> Result<(Vec<Document>, String), String> {
    let coll = e.collection(ns);
    let mut exec = e
        .plan_find(coll.as_ref(), spec)
        .map_err(|e| e.message.clone())?;
    let mut out = Vec::new();
    while let Some(d) = exec.next_doc().map_err(|e| e.message.clone())? {
        out.push(d.to_document().expect("document"));
    }
    let plan = nidus_engine::plan::explain::plan_document(&exec.root).to_string();
    Ok((out, plan))
}

fn check_order(q: &Query, got: &[Document], what: &str) -> Result<(), TestCaseError> {
    if let Some(sort) = &q.sort {
        let pattern = SortPattern::parse(sort)
            .expect("sort")
            .with_collation(collation(q));
        let raws: Vec<RawDocumentBuf> = got
            .iter()
            .map(|d| RawDocumentBuf::from_document(d).expect("raw"))
            .collect();
        for w in raws.windows(2) {
            prop_assert!(
                pattern.compare(&w[0], &w[1]).is_le(),
                "{what}: out of order under {sort}: {got:?}"
            );
        }
    }
    Ok(())
}

fn check(
    e: &Engine,
    ns: &Namespace,
    docs: &[Document],
    specs: &[Document],
    q: &Query,
) -> Result<(), TestCaseError> {
    let coll = collation(q);
    let opts = ParseOptions {
        collation: coll.as_ref(),
        ..ParseOptions::default()
    };
    let Ok(m) = Matcher::parse_with(&q.filter, &opts) else {
        return Ok(());
    };
    let matching: Vec<&Document> = docs.iter().filter(|d| matches(&m, d)).collect();
    let base = FindSpec {
        filter: q.filter.clone(),
        sort: q.sort.clone(),
        limit: q.limit,
        collation: q.collation.clone(),
        ..FindSpec::default()
    };
    let mut hints: Vec<(Option<Bson>, Option<&Document>)> = vec![
        (None, None),
        (Some(Bson::Document(doc! {"$natural": 1})), None),
    ];
    hints.extend(specs.iter().map(|s| {
        (
            Some(Bson::String(s.get_str("name").expect("name").into())),
            Some(s),
        )
    }));
    for (hint, spec) in hints {
        let what = format!(
            "filter {} sort {:?} limit {} collation {:?} hint {:?}",
            q.filter, q.sort, q.limit, q.collation, hint
        );
        let find = FindSpec {
            hint: hint.clone(),
            ..base.clone()
        };
        let result = run(e, ns, &find);
        if spec.is_some_and(|s| s.get_bool("hidden").unwrap_or(false)) {
            prop_assert!(result.is_err(), "{what}: a hidden index was hinted");
            continue;
        }
        let (got, plan) = match result {
            Ok(r) => r,
            Err(msg) => return Err(TestCaseError::fail(format!("{what}: {msg}"))),
        };
        prop_assert!(
            !plan.contains("c_hidden"),
            "{what}: the planner used a hidden index: {plan}"
        );
        let want: Vec<Document> = matching
            .iter()
            .filter(|d| spec.is_none_or(|s| index_holds(s, d)))
            .map(|d| (*d).clone())
            .collect();
        check_order(q, &got, &what)?;
        if q.limit == 0 {
            prop_assert_eq!(ids(&got), ids(&want), "{}: {}", &what, &plan);
        } else {
            // The first `limit` documents in sort order: the same set when the sort keys
            // differ at the cut, always of the right size and all matching.
            prop_assert_eq!(
                got.len(),
                want.len().min(q.limit as usize),
                "{}: {}",
                &what,
                &plan
            );
            let want_ids = ids(&want);
            prop_assert!(
                ids(&got).iter().all(|i| want_ids.contains(i)),
                "{what}: {got:?} not all in {want_ids:?}: {plan}"
            );
            if let Some(sort) = &q.sort {
                let mut sorted: Vec<Document> = want.clone();
                let pattern = SortPattern::parse(sort)
                    .expect("sort")
                    .with_collation(coll.clone());
                sorted.sort_by(|x, y| {
                    pattern.compare(
                        &RawDocumentBuf::from_document(x).expect("raw"),
                        &RawDocumentBuf::from_document(y).expect("raw"),
                    )
                });
                if let Some(last) = got.last() {
                    // Every document sorting strictly before the last one returned is returned.
                    let last = RawDocumentBuf::from_document(last).expect("raw");
                    let must: Vec<i32> = sorted
                        .iter()
                        .filter(|d| {
                            pattern
                                .compare(&RawDocumentBuf::from_document(d).expect("raw"), &last)
                                .is_lt()
                        })
                        .map(|d| d.get_i32("_id").expect("_id"))
                        .collect();
                    let got_ids = ids(&got);
                    prop_assert!(
                        must.iter().all(|i| got_ids.contains(i)),
                        "{what}: missing some of {must:?} in {got_ids:?}: {plan}"
                    );
                }
            }
        }
        let count = FindSpec {
            count: true,
            sort: None,
            limit: 0,
            ..find.clone()
        };
        let c = e.collection(ns);
        let mut exec = e
            .plan_find(c.as_ref(), &count)
            .map_err(|e| TestCaseError::fail(format!("{what}: count: {}", e.message)))?;
        while exec.get_next().expect("count").is_some() {}
        prop_assert_eq!(exec.counted() as usize, want.len(), "count: {}", &what);
    }
    Ok(())
}

fn run_case(docs: Vec<Document>, queries: Vec<Query>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let specs = index_specs();
    let (e, ns) = loaded(dir.path(), &specs, &[]);
    let coll = e.collection(&ns).expect("collection");
    // The first half goes in as one batch (one storage transaction), the rest one at a time:
    // both insert paths write the index entries the queries below read.
    let raws: Vec<RawDocumentBuf> = docs
        .iter()
        .map(|d| prepare_insert(&raw(d)).expect("prepare"))
        .collect();
    let opts = WriteOpts::default();
    let (batch, single) = raws.split_at(raws.len() / 2);
    let batch: Vec<_> = batch.iter().map(|r| (r.as_ref(), &opts)).collect();
    e.insert_batch(&coll, &batch).expect("insert batch");
    for raw in single {
        e.insert_one(&coll, raw, &opts).expect("insert");
    }
    let report = e.validate(&coll).expect("validate");
    prop_assert!(report.errors.is_empty(), "{:?}", report.errors);
    for q in &queries {
        check(&e, &ns, &docs, &specs, q)?;
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
    fn every_index_option_and_bound_agrees_with_a_collection_scan(
        docs in documents(),
        queries in proptest::collection::vec(query(), 1..6),
    ) {
        run_case(docs, queries)?;
    }
}

/// The class of the unique-index bug (issue 18) pinned down: a backward scan with an
/// exclusive upper bound over every unique index shape.
#[test]
fn backward_exclusive_bound_on_unique_indexes() {
    let docs: Vec<Document> = (0..50)
        .map(|i| doc! {"_id": i, "u": i * 2, "b": i % 7, "c": "x"})
        .collect();
    let q = |filter: Document, sort: Document| Query {
        filter,
        sort: Some(sort),
        limit: 3,
        collation: None,
    };
    let queries = vec![
        q(doc! {"_id": {"$lt": 40}}, doc! {"_id": -1}),
        q(doc! {"u": {"$lt": 40}}, doc! {"u": -1}),
        q(doc! {"u": {"$gt": 40}}, doc! {"u": 1}),
        q(doc! {"u": {"$gt": 40}}, doc! {"u": -1}),
        q(doc! {"u": {"$lt": 40, "$gt": 10}}, doc! {"u": -1}),
        q(doc! {"u": {"$lte": 40, "$gt": 10}}, doc! {"u": 1}),
        q(doc! {"u": {"$lt": 41}}, doc! {"u": -1}),
    ];
    let mut rows = Vec::new();
    for d in docs {
        rows.push(d);
    }
    run_case(rows, queries).expect("unique index scans");
}

/// Inserts racing each other (batches and single documents, unique values colliding across
/// threads) and deletes: every index holds exactly the entries the stored documents generate,
/// and no unique value is stored twice.
#[test]
fn racing_inserts_and_deletes_keep_every_index_exact() {
    const THREADS: i32 = 4;
    const PER_THREAD: i32 = 240;
    let dir = tempfile::tempdir().expect("tempdir");
    let (e, ns) = loaded(dir.path(), &index_specs(), &[]);
    let coll = e.collection(&ns).expect("collection");
    let doc_of = |t: i32, i: i32| {
        // `u` collides across threads for one document in four (unique indexes refuse all
        // but one); `a` is an array for one in three (multikey entries).
        let n = t * PER_THREAD + i;
        let u = if i % 4 == 0 { i } else { 10_000 + n };
        let a = if i % 3 == 0 {
            Bson::Array(vec![Bson::Int32(n % 7), Bson::Int32(n % 5)])
        } else {
            Bson::Int32(n % 11)
        };
        let mut d = doc! {"_id": n, "u": u, "a": a, "c": if n % 2 == 0 { Bson::String(format!("s{}", n % 13)) } else { Bson::Int32(n % 13) }};
        if n % 5 != 0 {
            d.insert("b", n % 6);
        }
        prepare_insert(&raw(&d)).expect("prepare")
    };
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (e, coll) = (&e, &coll);
            scope.spawn(move || {
                let opts = WriteOpts::default();
                let mut i = 0;
                while i < PER_THREAD {
                    let chunk: Vec<RawDocumentBuf> =
                        (i..(i + 8).min(PER_THREAD)).map(|i| doc_of(t, i)).collect();
                    let batch: Vec<_> = chunk.iter().map(|r| (r.as_ref(), &opts)).collect();
                    // As the server does: a batch that fails goes in one document at a time.
                    if (i / 8) % 2 == 1 || e.insert_batch(coll, &batch).is_err() {
                        for raw in &chunk {
                            if let Err(err) = e.insert_one(coll, raw, &opts) {
                                assert_eq!(
                                    err.code,
                                    nidus_common::ErrorCode::DuplicateKey,
                                    "{err:?}"
                                );
                            }
                        }
                    }
                    if i % 48 == 40 {
                        e.delete(
                            coll,
                            &doc! {"_id": t * PER_THREAD + i - 20},
                            false,
                            None,
                            &opts,
                        )
                        .expect("delete");
                    }
                    i += 8;
                }
            });
        }
    });
    let report = e.validate(&coll).expect("validate");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let (stored, _) = run(&e, &ns, &FindSpec::default()).expect("scan");
    let mut us: Vec<i64> = stored
        .iter()
        .map(|d| d.get("u").and_then(Bson::as_i32).expect("u") as i64)
        .collect();
    let n = us.len();
    us.sort_unstable();
    us.dedup();
    assert_eq!(us.len(), n, "a unique value stored twice");
    // Every document without a colliding `u` (720) and one per colliding value (60) went in;
    // the deletes hit colliding ones, up to 20 of them stored.
    assert!((740..=780).contains(&n), "{n} documents");
}
