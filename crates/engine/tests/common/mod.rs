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
