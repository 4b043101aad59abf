//! 2dsphere indexes against a collection scan (issue 22). For random documents (GeoJSON
//! points, legacy pairs, small LineStrings and Polygons, arrays of points, missing fields)
//! around a few centres (one on a face edge, one near a pole, one on the antimeridian) and
//! a set of 2dsphere indexes (single, compound with the geo field first or second), every
//! geo query (`$geoWithin` a star-shaped polygon with or without a hole, a MultiPolygon or a
//! `$centerSphere`; `$geoIntersects` a point, a line or a polygon; with an equality on
//! another field and sorts both ways) returns exactly what the same predicate evaluated on
//! every document returns: the planner's choice and each index hinted.
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

const CENTRES: [(f64, f64); 4] = [(-73.97, 40.77), (45.0, 0.0), (10.0, 88.5), (179.9, -20.0)];

fn clamp(lng: f64, lat: f64) -> (f64, f64) {
    let lng = if lng > 180.0 {
        lng - 360.0
    } else if lng < -180.0 {
        lng + 360.0
    } else {
        lng
    };
    (lng, lat.clamp(-90.0, 90.0))
}

/// A point within `spread` degrees of centre `c`.
fn near(c: usize, spread: f64) -> impl Strategy<Value = (f64, f64)> {
    (-1.0f64..1.0, -1.0f64..1.0).prop_map(move |(dx, dy)| {
        let (x, y) = CENTRES[c];
        clamp(x + dx * spread, y + dy * spread * 0.5)
    })
}

fn pt(p: (f64, f64)) -> Bson {
    Bson::Array(vec![Bson::Double(p.0), Bson::Double(p.1)])
}

/// A simple polygon: vertices at increasing angles around `(x, y)`.
fn star(x: f64, y: f64, radii: &[f64]) -> Vec<Bson> {
    let n = radii.len();
    let mut ring: Vec<Bson> = radii
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let a = i as f64 / n as f64 * std::f64::consts::TAU;
            pt(clamp(
                x + r * a.cos(),
                (y + r * a.sin() * 0.5).clamp(-89.9, 89.9),
            ))
        })
        .collect();
    ring.push(ring[0].clone());
    ring
}

fn geometry(c: usize) -> impl Strategy<Value = Bson> {
    prop_oneof![
        6 => near(c, 1.0).prop_map(|p| Bson::Document(doc! {"type": "Point", "coordinates": pt(p)})),
        3 => near(c, 1.0).prop_map(pt),
        1 => near(c, 1.0).prop_map(|p| Bson::Document(doc! {"x": p.0, "y": p.1})),
        1 => (near(c, 1.0), near(c, 1.0)).prop_map(|(a, b)| Bson::Document(
            doc! {"type": "LineString", "coordinates": [pt(a), pt(b)]})),
        1 => (near(c, 1.0), proptest::collection::vec(0.01f64..0.3, 3..6)).prop_map(|(p, radii)| {
            Bson::Document(doc! {"type": "Polygon", "coordinates": [star(p.0, p.1, &radii)]})
        }),
        1 => (near(c, 1.0), near(c, 1.0)).prop_map(|(a, b)| Bson::Array(vec![
            Bson::Document(doc! {"type": "Point", "coordinates": pt(a)}),
            Bson::Document(doc! {"type": "Point", "coordinates": pt(b)}),
        ])),
    ]
}

fn documents(c: usize) -> impl Strategy<Value = Vec<Document>> {
    let one = (proptest::option::of(geometry(c)), 0i32..3);
    proptest::collection::vec(one, 0..40).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (g, k))| {
                let mut d = doc! {"_id": i as i32, "k": k};
                if let Some(g) = g {
                    d.insert("loc", g);
                }
                d
            })
            .collect()
    })
}

fn index_specs() -> Vec<Document> {
    vec![
        doc! {"key": {"loc": "2dsphere"}, "name": "loc_2dsphere"},
        doc! {"key": {"k": 1, "loc": "2dsphere"}, "name": "k_1_loc_2dsphere"},
        doc! {"key": {"loc": "2dsphere", "k": -1}, "name": "loc_2dsphere_k_-1"},
    ]
}

fn geo_predicate(c: usize) -> impl Strategy<Value = Document> {
    let radii = proptest::collection::vec(0.1f64..1.2, 3..8);
    prop_oneof![
        3 => (near(c, 0.8), radii.clone()).prop_map(|(p, r)| doc! {"$geoWithin": {"$geometry":
            {"type": "Polygon", "coordinates": [star(p.0, p.1, &r)]}}}),
        1 => (near(c, 0.5), radii.clone()).prop_map(|(p, r)| {
            let outer: Vec<f64> = r.iter().map(|x| x + 0.5).collect();
            let hole: Vec<f64> = r.iter().map(|x| x * 0.3).collect();
            doc! {"$geoWithin": {"$geometry": {"type": "Polygon",
                "coordinates": [star(p.0, p.1, &outer), star(p.0, p.1, &hole)]}}}
        }),
        1 => (near(c, 0.8), near(c, 0.8), radii.clone()).prop_map(|(p, q, r)| doc! {"$geoWithin": {"$geometry":
            {"type": "MultiPolygon", "coordinates": [[star(p.0, p.1, &r)], [star(q.0, q.1, &r)]]}}}),
        2 => (near(c, 0.8), 0.001f64..0.03).prop_map(|(p, r)| doc! {"$geoWithin": {"$centerSphere": [pt(p), r]}}),
        2 => (near(c, 0.8), radii).prop_map(|(p, r)| doc! {"$geoIntersects": {"$geometry":
            {"type": "Polygon", "coordinates": [star(p.0, p.1, &r)]}}}),
        1 => (near(c, 1.0), near(c, 1.0)).prop_map(|(a, b)| doc! {"$geoIntersects": {"$geometry":
            {"type": "LineString", "coordinates": [pt(a), pt(b)]}}}),
        1 => near(c, 1.0).prop_map(|p| doc! {"$geoIntersects": {"$geometry":
            {"type": "Point", "coordinates": pt(p)}}}),
    ]
}

#[derive(Debug, Clone)]
struct Query {
    filter: Document,
    sort: Option<Document>,
}

fn query(c: usize) -> impl Strategy<Value = Query> {
    (
        geo_predicate(c),
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

fn check(e: &Engine, ns: &Namespace, docs: &[Document], q: &Query) -> Result<(), TestCaseError> {
    // A random ring whose geodesic edges cross (near the pole) is refused by both paths.
    let Ok(m) = Matcher::parse(&q.filter) else {
        return Ok(());
    };
    let want: Vec<Document> = docs
        .iter()
        .filter(|d| m.matches(&raw(d)).expect("match"))
        .cloned()
        .collect();
    let mut hints: Vec<Option<Bson>> = vec![None, Some(Bson::Document(doc! {"$natural": 1}))];
    hints.extend(
        index_specs()
            .iter()
            .map(|s| Some(Bson::String(s.get_str("name").expect("n").into()))),
    );
    let c = e.collection(ns);
    for hint in hints {
        let what = format!("filter {} sort {:?} hint {:?}", q.filter, q.sort, hint);
        let find = FindSpec {
            filter: q.filter.clone(),
            sort: q.sort.clone(),
            hint: hint.clone(),
            ..FindSpec::default()
        };
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

fn run_case(docs: Vec<Document>, queries: Vec<Query>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (e, ns) = loaded(dir.path(), &index_specs(), &docs);
    for q in &queries {
        check(&e, &ns, &docs, q)?;
    }
    Ok(())
}

/// `$nearSphere` (GeoJSON: meters; legacy: radians) with random limits against distances
/// measured on every document: the same documents, in nondecreasing distance.
fn check_near(
    e: &Engine,
    ns: &Namespace,
    docs: &[Document],
    filter: &Document,
) -> Result<(), TestCaseError> {
    let Some(near) = near_of(filter) else {
        return Ok(());
    };
    let mut want: Vec<(f64, i32)> = docs
        .iter()
        .filter_map(|d| {
            let r = raw(d);
            let (dist, _) = nidus_engine::exec::nearest_distance(&near, &r, "loc")?;
            let others =
                d.get_i32("k").ok() == filter.get_i32("k").ok() || !filter.contains_key("k");
            (near.in_range(dist) && others).then(|| (dist, d.get_i32("_id").expect("_id")))
        })
        .collect();
    want.sort_by(|a, b| a.0.total_cmp(&b.0));
    let c = e.collection(ns);
    let find = FindSpec {
        filter: filter.clone(),
        ..FindSpec::default()
    };
    let mut exec = e
        .plan_find(c.as_ref(), &find)
        .map_err(|err| TestCaseError::fail(format!("{filter}: {}", err.message)))?;
    let mut got = Vec::new();
    while let Some(d) = exec.next_doc().expect("next") {
        let (dist, _) = nidus_engine::exec::nearest_distance(&near, &d, "loc").expect("distance");
        got.push((dist, d.get_i32("_id").expect("_id")));
    }
    let plan = nidus_engine::plan::explain::plan_document(&exec.root).to_string();
    prop_assert!(plan.contains("GEO_NEAR_2DSPHERE"), "{}", plan);
    let mut got_ids: Vec<i32> = got.iter().map(|x| x.1).collect();
    let mut want_ids: Vec<i32> = want.iter().map(|x| x.1).collect();
    got_ids.sort_unstable();
    want_ids.sort_unstable();
    prop_assert_eq!(got_ids, want_ids, "{}: {}", filter, plan);
    for w in got.windows(2) {
        prop_assert!(w[0].0 <= w[1].0, "{}: not nearest first: {:?}", filter, got);
    }
    Ok(())
}

fn near_filter(c: usize) -> impl Strategy<Value = Document> {
    (
        near(c, 1.0),
        any::<bool>(),
        proptest::option::of(0.0f64..0.02),
        proptest::option::of(0.0f64..0.01),
        proptest::option::of(0i32..3),
    )
        .prop_map(|(p, geojson, max, min, k)| {
            let mut f = if geojson {
                let mut inner = doc! {"$geometry": {"type": "Point", "coordinates": pt(p)}};
                if let Some(m) = max {
                    inner.insert("$maxDistance", m * 6378100.0);
                }
                if let Some(m) = min {
                    inner.insert("$minDistance", m * 6378100.0);
                }
                doc! {"loc": {"$nearSphere": inner}}
            } else {
                let mut op = doc! {"$nearSphere": pt(p)};
                if let Some(m) = max {
                    op.insert("$maxDistance", m);
                }
                if let Some(m) = min {
                    op.insert("$minDistance", m);
                }
                doc! {"loc": op}
            };
            if let Some(k) = k {
                f.insert("k", k);
            }
            f
        })
}

fn near_case() -> impl Strategy<Value = (Vec<Document>, Vec<Document>)> {
    (0usize..CENTRES.len()).prop_flat_map(|c| {
        (
            documents(c),
            proptest::collection::vec(near_filter(c), 1..5),
        )
    })
}

fn case() -> impl Strategy<Value = (Vec<Document>, Vec<Query>)> {
    (0usize..CENTRES.len())
        .prop_flat_map(|c| (documents(c), proptest::collection::vec(query(c), 1..6)))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn geo_queries_through_2dsphere_indexes_agree_with_a_collection_scan((docs, queries) in case()) {
        run_case(docs, queries)?;
    }

    #[test]
    fn near_queries_return_what_distances_on_every_document_say((docs, filters) in near_case()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (e, ns) = loaded(dir.path(), &index_specs()[..1], &docs);
        for f in &filters {
            check_near(&e, &ns, &docs, f)?;
        }
    }
}
