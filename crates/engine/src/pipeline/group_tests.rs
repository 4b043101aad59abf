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

/// Inserts `docs` in batches (what a split scan needs: tens of thousands of records).
fn load(e: &Arc<Engine>, ns: &Namespace, docs: &[Document]) {
    let coll = e.ensure_collection(ns).expect("collection");
    let opts = WriteOpts::default();
    for chunk in docs.chunks(500) {
        let prepared: Vec<RawDocumentBuf> = chunk
            .iter()
            .map(|d| prepare_insert(&RawDocumentBuf::from_document(d).expect("raw")).expect("prep"))
            .collect();
        let batch: Vec<_> = prepared.iter().map(|r| (r.as_ref(), &opts)).collect();
        e.insert_batch(&coll, &batch).expect("insert");
    }
}

/// Documents whose groups tell a parallel run from one thread's: keys spelled differently
/// in different parts of the scan (`1.0` first, `1` and `1L` later), keys first seen only in
/// the last part, missing and null keys, and values of every numeric type (doubles that sum
/// exactly), strings, arrays, documents and missing values.
fn mixed_sales(n: i64) -> Vec<Document> {
    let spellings = [bson!(1.0), bson!(1), bson!(1i64)];
    (0..n)
        .map(|i| {
            let mut d = doc! {"_id": i};
            match i % 13 {
                0 => {}
                1 => {
                    d.insert("k", Bson::Null);
                }
                2 => {
                    d.insert("k", spellings[(i as usize * 3 / n as usize).min(2)].clone());
                }
                3 if i > n * 9 / 10 => {
                    d.insert("k", "late");
                }
                3 => {
                    d.insert("k", bson!([1, 2]));
                }
                r => {
                    d.insert("k", format!("g{}", r % 5));
                }
            }
            match i % 7 {
                0 => {}
                1 => {
                    d.insert("v", (i % 1000) as i32);
                }
                2 => {
                    d.insert("v", i * 1_000_003);
                }
                3 => {
                    d.insert("v", (i % 64) as f64 * 0.25);
                }
                4 => {
                    d.insert("v", "text");
                }
                5 => {
                    d.insert("v", doc! {"a": i % 3, "b": format!("b{}", i % 4)});
                }
                _ => {
                    d.insert("v", Bson::Decimal128("1.5".parse().expect("decimal")));
                }
            }
            d.insert("w", (i % 9) as i32);
            d
        })
        .collect()
}

/// The documents a pipeline returns, or its error's code and message.
fn run_group(ns: &Namespace, pipeline: &Bson, ctx: &ExpCtx) -> Result<Vec<Vec<u8>>, String> {
    let Bson::Array(items) = pipeline.clone() else {
        panic!("pipeline")
    };
    let pcx = ParseCtx::new("test");
    let stages = parse_pipeline(&items, &pcx).expect("parse");
    let ctx = ctx.clone().with_bindings(&pcx);
    run::collect(&ctx, Some(ns), &stages, None)
        .map(|docs| bytes(&docs))
        .map_err(|e| format!("{:?}: {}", e.code, e.message))
}

#[test]
fn parallel_group_returns_what_one_thread_returns() {
    let (_dir, e) = engine();
    let ns = Namespace::new("test", "sales");
    load(&e, &ns, &mixed_sales(60_000));
    let pipelines = [
        bson!([{"$group": {"_id": "$k", "s": {"$sum": "$v"}, "n": {"$count": {}}, "a": {"$avg": "$v"}}}]),
        bson!([{"$group": {"_id": "$k", "lo": {"$min": "$v"}, "hi": {"$max": "$v"}}}]),
        bson!([{"$group": {"_id": "$w", "f": {"$first": "$k"}, "l": {"$last": "$v"}, "fid": {"$first": "$_id"}}}]),
        bson!([{"$group": {"_id": "$k", "ids": {"$push": "$_id"}, "set": {"$addToSet": "$w"}}}]),
        bson!([{"$group": {"_id": "$w", "m": {"$mergeObjects": {"$cond": [{"$eq": [{"$type": "$v"}, "object"]}, "$v", null]}}}}]),
        // An error: the first in input order is the one reported.
        bson!([{"$group": {"_id": "$w", "m": {"$mergeObjects": "$v"}}}]),
        bson!([{"$group": {"_id": {"$divide": [1, {"$subtract": ["$_id", 45_000]}]}}}]),
        bson!([{"$group": {"_id": {"$toInt": {"$cond": [{"$in": ["$_id", [25_000, 45_000]]},
            {"$concat": ["x", {"$toString": "$_id"}]}, 1]}}}}]),
        bson!([{"$match": {"w": {"$gte": 3}}}, {"$group": {"_id": {"k": "$k", "w": "$w"}, "s": {"$sum": 1}}}]),
        bson!([{"$group": {"_id": null, "s": {"$sum": "$_id"}, "sd": {"$stdDevPop": "$w"}}}]),
        bson!([{"$group": {"_id": {"$mod": ["$_id", 5000]}, "s": {"$sum": "$v"}, "ids": {"$push": "$_id"}}}]),
    ];
    let mut one = ExpCtx::new(e.clone(), "test");
    one.allow_disk_use = true;
    let mut many = one.clone();
    many.parallelism = 4;
    for p in &pipelines {
        let want = run_group(&ns, p, &one);
        assert!(want.as_ref().map_or(true, |w| !w.is_empty()), "{p}");
        assert_eq!(run_group(&ns, p, &many), want, "{p}");
    }
    // Spilling: both runs spill (the parts publish their memory in 64 KiB steps, past this
    // limit), and the parts' runs must merge in input order.
    let (mut one_spill, mut many_spill) = (one.clone(), many.clone());
    one_spill.group_max_memory = 16 * 1024;
    many_spill.group_max_memory = 16 * 1024;
    for p in &pipelines {
        let want = run_group(&ns, p, &one_spill);
        assert_eq!(run_group(&ns, p, &many_spill), want, "{p} spilling");
    }
}

#[test]
fn a_split_collection_scan_reads_what_one_scan_reads() {
    let (_dir, e) = engine();
    let ns = Namespace::new("test", "sales");
    load(&e, &ns, &mixed_sales(50_000));
    let coll = e.collection_in(&ns, None);
    for filter in [doc! {}, doc! {"w": {"$lt": 4}}] {
        let spec = crate::find::FindSpec {
            filter: filter.clone(),
            ..Default::default()
        };
        let mut whole = e.plan_find(coll.as_ref(), &spec).expect("plan");
        let mut want = Vec::new();
        while let Some(d) = whole.next_doc().expect("next") {
            want.push(d.into_bytes());
        }
        let mut split = e.plan_find(coll.as_ref(), &spec).expect("plan");
        let parts = split.split(4).expect("a scan of 50,000 records splits");
        assert_eq!(
            parts.len(),
            3,
            "50,000 records make three parts of at least 16,384"
        );
        let mut got = Vec::new();
        for mut part in parts {
            while let Some(d) = part.next_doc().expect("next") {
                got.push(d.into_bytes());
            }
        }
        assert_eq!(got.len(), want.len(), "{filter}");
        assert!(
            got == want,
            "the parts in order read the scan's documents ({filter})"
        );
        assert_eq!(
            split.root.total("docsExamined"),
            50_000,
            "the split scan reports its parts' documents examined"
        );
        // A scan that has started does not split.
        let mut started = e.plan_find(coll.as_ref(), &spec).expect("plan");
        started.next_doc().expect("next");
        assert!(started.split(4).is_none());
    }
}
