//! `$group` reading a collection (the scan decodes only the fields the stage reads, and
//! groups are found by their keys' encoding) against the same `$group` over the whole
//! documents given as input.

use super::{parse_pipeline, run, ExpCtx, ParseCtx, VecStream};
use crate::namespace::Namespace;
use crate::write::{prepare_insert, WriteOpts};
use crate::Engine;
use bson::{bson, doc, Bson, Document, RawDocumentBuf};
use nidus_storage_rocks::RocksEngine;
use std::sync::Arc;

fn engine() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
    (dir, Engine::open(kv).expect("engine"))
}

fn bytes(docs: &[Document]) -> Vec<Vec<u8>> {
    docs.iter()
        .map(|d| RawDocumentBuf::from_document(d).expect("raw").into_bytes())
        .collect()
}

#[test]
fn group_over_a_collection_matches_group_over_whole_documents() {
    let (_dir, e) = engine();
    let ns = Namespace::new("test", "g");
    let coll = e.ensure_collection(&ns).expect("collection");
    let keys = [
        bson!(1),
        bson!(1.0),
        bson!(1i64),
        bson!(2),
        bson!("a"),
        bson!("A"),
        Bson::Null,
        bson!(f64::NAN),
        bson!([1, 2]),
        bson!({"x": 1}),
        bson!({"x": 1.0}),
    ];
    let mut docs = Vec::new();
    for i in 0..200i32 {
        let mut d = doc! {"_id": i, "v": i % 7, "w": {"z": i % 3}, "other": "x"};
        if i % 11 != 0 {
            d.insert("k", keys[i as usize % keys.len()].clone());
        }
        if i % 5 == 0 {
            d.insert("arr", vec![doc! {"b": i % 2}, doc! {"b": 5}]);
        }
        docs.push(d);
    }
    for d in &docs {
        let raw = RawDocumentBuf::from_document(d).expect("raw");
        e.insert_one(
            &coll,
            &prepare_insert(&raw).expect("prepare"),
            &WriteOpts::default(),
        )
        .expect("insert");
    }
    let pipelines = [
        bson!([{"$group": {"_id": "$k", "s": {"$sum": "$v"}, "n": {"$count": {}}}}]),
        bson!([{"$group": {"_id": "$w.z", "first": {"$first": "$k"}, "vs": {"$push": "$v"}}}]),
        bson!([{"$group": {"_id": {"k": "$k", "z": "$w.z"}, "m": {"$max": "$arr.b"}}}]),
        bson!([{"$group": {"_id": "$k", "roots": {"$push": "$$ROOT"}}}]),
        bson!([{"$group": {"_id": null, "top": {"$top": {"sortBy": {"v": -1, "_id": 1}, "output": "$other"}}}}]),
        bson!([{"$group": {"_id": "$$ROOT.w", "avg": {"$avg": "$$CURRENT.v"}}}]),
        bson!([{"$group": {"_id": {"$mod": ["$_id", 4]}, "k": {"$addToSet": "$k"}}}]),
        bson!([{"$group": {"_id": 1, "n": {"$sum": 1}}}]),
    ];
    let mut groups = Vec::new();
    for p in pipelines {
        let Bson::Array(items) = p.clone() else {
            panic!("pipeline")
        };
        let pcx = ParseCtx::new("test");
        let stages = parse_pipeline(&items, &pcx).expect("parse");
        let ctx = ExpCtx::new(e.clone(), "test").with_bindings(&pcx);
        let from_collection = run::collect(&ctx, Some(&ns), &stages, None).expect("collection");
        let from_input =
            run::collect(&ctx, None, &stages, Some(VecStream::boxed(docs.clone()))).expect("input");
        assert_eq!(bytes(&from_collection), bytes(&from_input), "{p}");
        groups.push(from_collection.len());
    }
    // 1, 1.0 and 1L are one group, as are {x: 1} and {x: 1.0}, missing and null; NaN is
    // one group: 8 keys from 11 spellings.
    assert_eq!(groups[0], 8);
    assert_eq!(groups[1], 3);
}
