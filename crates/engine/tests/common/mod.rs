//! Helpers the property-test binaries share (each binary uses a subset of them).
#![allow(dead_code)]

use bson::{Document, RawDocumentBuf};
use nidus_engine::Engine;
use nidus_storage_rocks::RocksEngine;
use std::sync::Arc;

/// Proptest cases per property: 24, or `NIDUS_PLAN_PROPS_CASES` for longer runs.
pub fn cases() -> u32 {
    std::env::var("NIDUS_PLAN_PROPS_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

pub fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(Arc::new(RocksEngine::open(dir).expect("open rocks"))).expect("open engine")
}

pub fn raw(d: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(d).expect("raw")
}

/// The documents' integer `_id`s, sorted (results compared as sets).
pub fn ids(docs: &[Document]) -> Vec<i32> {
    let mut v: Vec<i32> = docs
        .iter()
        .map(|d| d.get_i32("_id").expect("_id"))
        .collect();
    v.sort_unstable();
    v
}

/// A fresh engine in `dir` with collection `db.c`: `specs` built first, then `docs` inserted
/// one at a time (so every index is maintained by the write path, not by a build).
pub fn loaded(
    dir: &std::path::Path,
    specs: &[Document],
    docs: &[Document],
) -> (Arc<Engine>, nidus_engine::namespace::Namespace) {
    use nidus_engine::write::{prepare_insert, WriteOpts};
    let e = open(dir);
    let ns = nidus_engine::namespace::Namespace::new("db", "c");
    e.create_indexes(&ns, specs).expect("indexes");
    let coll = e.ensure_collection(&ns).expect("collection");
    for d in docs {
        e.insert_one(
            &coll,
            &prepare_insert(&raw(d)).expect("prepare"),
            &WriteOpts::default(),
        )
        .expect("insert");
    }
    (e, ns)
}

/// The `$near`/`$nearSphere` of a filter, or None when the filter does not parse (e.g.
/// `$minDistance` above `$maxDistance`, which both paths refuse).
pub fn near_of(filter: &Document) -> Option<nidus_query::matcher::geo::NearQuery> {
    use nidus_query::matcher::{serialize::canonical_conjuncts, Expr, Leaf, Matcher};
    let m = Matcher::parse(filter).ok()?;
    let near = canonical_conjuncts(m.expr()).iter().find_map(|e| match e {
        Expr::Path {
            leaf: Leaf::Geo(g), ..
        } => g.near().cloned(),
        _ => None,
    });
    Some(near.expect("a near filter"))
}
