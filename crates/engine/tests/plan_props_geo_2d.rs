//! 2d indexes against a collection scan (issue 22). For random documents (legacy pairs as
//! arrays and as `{x, y}` documents, arrays of pairs, points on the grid's edges, missing,
//! null and non-point values) and 2d indexes of different grids (the default, a coarse
//! `bits: 5` over [-50, 50], a `bits: 32` one over [-40, 40] whose `max` some points sit on),
//! compound with another field after the geo field, every `$geoWithin` (`$box`, `$polygon`,
//! `$center`, `$centerSphere`; with an equality on the other field and sorts) returns what the
//! predicate evaluated on every document returns, through the planner's choice and each
//! index hinted; and every legacy `$near` (flat) and `$nearSphere` (radians) with random
//! `$minDistance`/`$maxDistance` returns the documents distances measured on every document
//! select, nearest first (ties in any order), chosen and hinted.
//!
//! The CI form runs `NIDUS_PLAN_PROPS_CASES` cases (default 24); set it higher for more.

use bson::{doc, Bson, Document};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::Engine;
use nidus_query::matcher::Matcher;
use nidus_query::sort::SortPattern;
use proptest::prelude::*;

mod common;
use common::{cases, ids, loaded, near_of, raw};

/// A coordinate in [-40, 40]: mostly anywhere, sometimes on a coarse grid line or an edge.
fn coord() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -40.0f64..=40.0,
        2 => (-8i32..=8).prop_map(|n| f64::from(n) * 5.0),
        1 => Just(40.0),
        1 => Just(-40.0),
    ]
}

fn point() -> impl Strategy<Value = (f64, f64)> {
    (coord(), coord())
}

fn pt(p: (f64, f64)) -> Bson {
    Bson::Array(vec![Bson::Double(p.0), Bson::Double(p.1)])
}

fn location() -> impl Strategy<Value = Bson> {
    prop_oneof![
        6 => point().prop_map(pt),
        2 => point().prop_map(|p| Bson::Document(doc! {"x": p.0, "y": p.1})),
        1 => (-40i32..=40, -40i32..=40).prop_map(|(x, y)| Bson::Array(vec![Bson::Int32(x), Bson::Int32(y)])),
        2 => proptest::collection::vec(point(), 0..3)
            .prop_map(|ps| Bson::Array(ps.into_iter().map(pt).collect())),
        1 => Just(Bson::Null),
        1 => Just(Bson::String("nowhere".into())),
    ]
}

fn documents() -> impl Strategy<Value = Vec<Document>> {
    let one = (
        proptest::option::of(location()),
        proptest::option::of(prop_oneof![
            (0i32..3).prop_map(Bson::Int32),
            Just(Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)])),
        ]),
    );
    proptest::collection::vec(one, 0..50).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (loc, k))| {
                let mut d = doc! {"_id": i as i32};
                if let Some(k) = k {
                    d.insert("k", k);
                }
                if let Some(l) = loc {
                    d.insert("loc", l);
                }
                d
            })
            .collect()
    })
}

fn index_specs() -> Vec<Document> {
    vec![
        doc! {"key": {"loc": "2d"}, "name": "loc_2d"},
        doc! {"key": {"loc": "2d", "k": 1}, "name": "coarse", "bits": 5, "min": -50, "max": 50},
        doc! {"key": {"loc": "2d", "k": -1}, "name": "fine", "bits": 32, "min": -40.0, "max": 40.0},
    ]
}

/// A simple polygon: vertices at increasing angles around `(x, y)`.
fn star(x: f64, y: f64, radii: &[f64]) -> Bson {
    let n = radii.len();
    Bson::Array(
        radii
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let a = i as f64 / n as f64 * std::f64::consts::TAU;
                pt((x + r * a.cos(), y + r * a.sin()))
            })
            .collect(),
    )
}

fn within() -> impl Strategy<Value = Document> {
    let radii = proptest::collection::vec(1.0f64..25.0, 3..8);
    prop_oneof![
        3 => (point(), point()).prop_map(|(a, b)| doc! {"$geoWithin": {"$box": [pt(a), pt(b)]}}),
        2 => (point(), radii).prop_map(|(c, r)| doc! {"$geoWithin": {"$polygon": star(c.0, c.1, &r)}}),
        2 => (point(), 0.0f64..30.0).prop_map(|(c, r)| doc! {"$geoWithin": {"$center": [pt(c), r]}}),
        2 => (point(), 0.0f64..0.3).prop_map(|(c, r)| doc! {"$geoWithin": {"$centerSphere": [pt(c), r]}}),
    ]
}

#[derive(Debug, Clone)]
struct Query {
    filter: Document,
    sort: Option<Document>,
}

fn query() -> impl Strategy<Value = Query> {
    (
        within(),
        proptest::option::of(0i32..3),
        prop_oneof![
            Just(None),
            Just(Some(doc! {"k": 1})),
            Just(Some(doc! {"k": -1, "_id": 1})),
        ],
    )
        .prop_map(|(geo, k, sort)| {
            let mut filter = doc! {"loc": geo};
            if let Some(k) = k {
                filter.insert("k", k);
            }
            Query { filter, sort }
        })
}

fn hints() -> Vec<Option<Bson>> {
    let mut hints: Vec<Option<Bson>> = vec![None];
    hints.extend(
        index_specs()
            .iter()
            .map(|s| Some(Bson::String(s.get_str("name").expect("n").into()))),
    );
    hints
}

fn run(e: &Engine, ns: &Namespace, find: &FindSpec) -> Result<(Vec<Document>, String), String> {
    let c = e.collection(ns);
    let mut exec = e
        .plan_find(c.as_ref(), find)
        .map_err(|err| err.message.clone())?;
    let mut got = Vec::new();
    while let Some(d) = exec.next_doc().map_err(|err| err.message.clone())? {
        got.push(d.to_document().expect("document"));
    }
    let plan = nidus_engine::plan::explain::plan_document(&exec.root).to_string();
    Ok((got, plan))
}

fn check(e: &Engine, ns: &Namespace, docs: &[Document], q: &Query) -> Result<(), TestCaseError> {
    let m = Matcher::parse(&q.filter).expect("filter");
    let want: Vec<Document> = docs
        .iter()
        .filter(|d| m.matches(&raw(d)).expect("match"))
        .cloned()
        .collect();
    let mut all = hints();
    all.push(Some(Bson::Document(doc! {"$natural": 1})));
    for hint in all {
        let what = format!("filter {} sort {:?} hint {:?}", q.filter, q.sort, hint);
        let find = FindSpec {
            filter: q.filter.clone(),
            sort: q.sort.clone(),
            hint: hint.clone(),
            ..FindSpec::default()
        };
        let (got, plan) =
            run(e, ns, &find).map_err(|m| TestCaseError::fail(format!("{what}: {m}")))?;
        if hint.is_none() {
            prop_assert!(plan.contains("IXSCAN"), "{}: not indexed: {}", &what, &plan);
        }
        prop_assert_eq!(ids(&got), ids(&want), "{}: {}", &what, &plan);
        if let Some(sort) = &q.sort {
            let pattern = SortPattern::parse(sort).expect("sort");
            for w in got.windows(2) {
                prop_assert!(
                    pattern.compare(&raw(&w[0]), &raw(&w[1])).is_le(),
                    "{what}: out of order: {plan}"
                );
            }
        }
    }
    Ok(())
}

fn load(docs: &[Document]) -> (tempfile::TempDir, std::sync::Arc<Engine>, Namespace) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (e, ns) = loaded(dir.path(), &index_specs(), docs);
    (dir, e, ns)
}

fn near_filter() -> impl Strategy<Value = Document> {
    (
        point(),
        any::<bool>(),
        proptest::option::of(0.0f64..30.0),
        proptest::option::of(0.0f64..10.0),
        proptest::option::of(0i32..3),
    )
        .prop_map(|(p, sphere, max, min, k)| {
            // Radians for `$nearSphere` (a degree is 0.01745 rad).
            let scale = if sphere { 0.01745 } else { 1.0 };
            let mut op = if sphere {
                doc! {"$nearSphere": pt(p)}
            } else {
                doc! {"$near": pt(p)}
            };
            if let Some(m) = max {
                op.insert("$maxDistance", m * scale);
            }
            if let Some(m) = min {
                op.insert("$minDistance", m * scale);
            }
            let mut f = doc! {"loc": op};
            if let Some(k) = k {
                f.insert("k", k);
            }
            f
        })
}

/// The documents a near query returns, by distances measured on every document.
fn check_near(
    e: &Engine,
    ns: &Namespace,
    docs: &[Document],
    filter: &Document,
) -> Result<(), TestCaseError> {
    let Some(near) = near_of(filter) else {
        return Ok(());
    };
    let rest = {
        let mut f = filter.clone();
        f.remove("loc");
        Matcher::parse(&f).expect("rest")
    };
    let mut want: Vec<i32> = docs
        .iter()
        .filter_map(|d| {
            let r = raw(d);
            let (dist, _) = nidus_engine::exec::nearest_distance(&near, &r, "loc")?;
            (near.in_range(dist) && rest.matches(&r).expect("match"))
                .then(|| d.get_i32("_id").expect("_id"))
        })
        .collect();
    want.sort_unstable();
    for hint in hints() {
        let what = format!("{filter} hint {hint:?}");
        let find = FindSpec {
            filter: filter.clone(),
            hint: hint.clone(),
            ..FindSpec::default()
        };
        let (got, plan) =
            run(e, ns, &find).map_err(|m| TestCaseError::fail(format!("{what}: {m}")))?;
        prop_assert!(plan.contains("GEO_NEAR_2D\""), "{}: {}", &what, &plan);
        let dists: Vec<f64> = got
            .iter()
            .map(|d| {
                nidus_engine::exec::nearest_distance(&near, &raw(d), "loc")
                    .expect("distance")
                    .0
            })
            .collect();
        prop_assert_eq!(ids(&got), want.clone(), "{}: {}", &what, &plan);
        for w in dists.windows(2) {
            prop_assert!(w[0] <= w[1], "{}: not nearest first: {:?}", &what, &dists);
        }
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
    fn within_queries_through_2d_indexes_agree_with_a_collection_scan(
        docs in documents(),
        queries in proptest::collection::vec(query(), 1..6),
    ) {
        let (_dir, e, ns) = load(&docs);
        for q in &queries {
            check(&e, &ns, &docs, q)?;
        }
    }

    #[test]
    fn near_queries_through_2d_indexes_return_the_nearest_first(
        docs in documents(),
        filters in proptest::collection::vec(near_filter(), 1..6),
    ) {
        let (_dir, e, ns) = load(&docs);
        for f in &filters {
            check_near(&e, &ns, &docs, f)?;
        }
    }
}

#[test]
fn keys_are_mongodb_geohashes() {
    // {loc: [0, 0]} on the default grid: x and y both at 2^31, interleaved → 0xC000...;
    // explain shows BinData(128, ...) bounds.
    let docs = vec![doc! {"_id": 1, "loc": [0.0, 0.0]}];
    let (_dir, e, ns) = load(&docs);
    let find = FindSpec {
        filter: doc! {"loc": {"$geoWithin": {"$box": [[-1.0, -1.0], [1.0, 1.0]]}}},
        hint: Some(Bson::String("loc_2d".into())),
        ..FindSpec::default()
    };
    let (got, plan) = run(&e, &ns, &find).expect("run");
    assert_eq!(ids(&got), vec![1]);
    assert!(plan.contains("BinData(128, "), "{plan}");
    let coll = e.collection(&ns).expect("c");
    let meta = coll.meta.read();
    let ix = meta
        .indexes
        .iter()
        .find(|ix| ix.name == "loc_2d")
        .expect("ix");
    let keys = nidus_engine::index::document_keys(ix, &raw(&docs[0])).expect("keys");
    let (_, (values, _)) = keys.iter().next().expect("key");
    assert_eq!(
        values[0],
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::from(0x80u8),
            bytes: vec![0xC0, 0, 0, 0, 0, 0, 0, 0],
        })
    );
}
