//! `$lookup`'s hash join against its nested loop join over the same foreign collection:
//! random local and foreign values (arrays, nested arrays, null, missing, mixed numeric
//! types, strings differing in case, embedded documents), dotted paths, with and without a
//! collation, in memory and spilled.

use super::{parse_pipeline, run, ExpCtx, ParseCtx, VecStream};
use crate::namespace::Namespace;
use crate::write::{prepare_insert, WriteOpts};
use crate::Engine;
use bson::{bson, doc, Bson, Decimal128, Document, RawDocumentBuf};
use nidus_storage_rocks::RocksEngine;
use std::sync::Arc;

fn engine() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
    (dir, Engine::open(kv).expect("engine"))
}

fn insert(e: &Arc<Engine>, coll: &str, docs: &[Document]) {
    let ns = Namespace::new("test", coll);
    let c = e.ensure_collection(&ns).expect("collection");
    for d in docs {
        let raw = RawDocumentBuf::from_document(d).expect("raw");
        let prepared = prepare_insert(&raw).expect("prepare");
        e.insert_one(&c, &prepared, &WriteOpts::default())
            .expect("insert");
    }
}

/// How one run is set up.
struct Setup {
    hash_join: bool,
    collation: Option<Document>,
    allow_disk_use: bool,
    max_memory: usize,
}

/// Runs the pipeline over `input`: the output, or the error code, and the `$lookup`
/// stage's reported statistics.
fn run_lookup(
    e: &Arc<Engine>,
    input: &[Document],
    pipeline: Bson,
    s: &Setup,
) -> (Result<Vec<Document>, i32>, Document) {
    let pcx = ParseCtx::new("test");
    let Bson::Array(items) = pipeline else {
        panic!("pipeline must be an array")
    };
    let stages = parse_pipeline(&items, &pcx).expect("parse");
    let mut ctx = ExpCtx::new(e.clone(), "test").with_bindings(&pcx);
    ctx.lookup_hash_join = s.hash_join;
    ctx.collation = s.collation.clone();
    ctx.allow_disk_use = s.allow_disk_use;
    ctx.lookup_max_memory = s.max_memory;
    let opened = match run::open(&ctx, None, &stages, Some(VecStream::boxed(input.to_vec()))) {
        Ok(o) => o,
        Err(err) => return (Err(err.code.code()), Document::new()),
    };
    let stats = opened.stats.first().map(|s| s.lock().clone());
    let out = super::stream::collect(opened.stream).map_err(|e| e.code.code());
    let stats = opened
        .stats
        .first()
        .map(|s| s.lock().clone())
        .or(stats)
        .unwrap_or_default();
    (out, stats)
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse::<Decimal128>().expect("decimal literal"))
}

/// A scalar from a small pool, so that values collide across types and cases.
fn scalar(r: &mut Rng) -> Bson {
    match r.below(14) {
        0 => Bson::Int32(1),
        1 => Bson::Int64(1),
        2 => Bson::Double(1.0),
        3 => dec("1.0"),
        4 => Bson::Int32(2),
        5 => Bson::Double(2.5),
        6 => Bson::String("abc".into()),
        7 => Bson::String("ABC".into()),
        8 => Bson::String("Abc".into()),
        9 => Bson::Null,
        10 => Bson::Document(doc! {"x": 1}),
        11 => Bson::Document(doc! {"x": 1.0}),
        12 => Bson::Double(f64::NAN),
        _ => Bson::String("b".into()),
    }
}

/// A field value: a scalar, an array of them, a nested array or an empty array.
fn value(r: &mut Rng) -> Bson {
    match r.below(10) {
        0..=5 => scalar(r),
        6 | 7 => Bson::Array((0..r.below(4)).map(|_| scalar(r)).collect()),
        8 => Bson::Array(vec![Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)])]),
        _ => Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]),
    }
}

/// A document with `top` (maybe missing) and `top2.sub` (maybe through an array of
/// documents, some without `sub`, or a scalar where the path continues).
fn random_doc(r: &mut Rng, id: i32, top: &str, nested: &str) -> Document {
    let mut d = doc! {"_id": id};
    if r.below(6) != 0 {
        d.insert(top, value(r));
    }
    match r.below(5) {
        0 => {}
        1 => {
            d.insert(nested, doc! {"sub": value(r)});
        }
        2 => {
            let items: Vec<Bson> = (0..r.below(3) + 1)
                .map(|_| {
                    if r.below(3) == 0 {
                        Bson::Document(doc! {"other": 1})
                    } else {
                        Bson::Document(doc! {"sub": value(r)})
                    }
                })
                .collect();
            d.insert(nested, items);
        }
        3 => {
            d.insert(nested, 7);
        }
        _ => {
            d.insert(nested, Bson::Array(vec![Bson::Int32(1)]));
        }
    }
    d
}

#[test]
fn hash_join_returns_what_the_nested_loop_join_returns() {
    let (_dir, e) = engine();
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let foreign: Vec<Document> = (0..120).map(|i| random_doc(&mut r, i, "f", "g")).collect();
    insert(&e, "foreign", &foreign);
    let local: Vec<Document> = (0..150)
        .map(|i| random_doc(&mut r, 1000 + i, "a", "b"))
        .collect();
    let collations = [None, Some(doc! {"locale": "en", "strength": 2})];
    let fields = [
        ("a", "f"),
        ("a", "g.sub"),
        ("b.sub", "f"),
        ("b.sub", "g.sub"),
    ];
    let mut joined_total = 0usize;
    for collation in &collations {
        for (local_field, foreign_field) in fields {
            let pipeline = bson!([{"$lookup": {
                "from": "foreign", "localField": local_field,
                "foreignField": foreign_field, "as": "joined",
            }}]);
            let nested = Setup {
                hash_join: false,
                collation: collation.clone(),
                allow_disk_use: true,
                max_memory: 100 << 20,
            };
            let (expected, stats) = run_lookup(&e, &local, pipeline.clone(), &nested);
            assert_eq!(stats.get_str("strategy"), Ok("NestedLoopJoin"));
            let expected = expected.expect("nested loop join");
            joined_total += expected
                .iter()
                .map(|d| d.get_array("joined").map_or(0, |a| a.len()))
                .sum::<usize>();
            for max_memory in [100 << 20, 1] {
                let hashed = Setup {
                    hash_join: true,
                    collation: collation.clone(),
                    allow_disk_use: true,
                    max_memory,
                };
                let (got, stats) = run_lookup(&e, &local, pipeline.clone(), &hashed);
                assert_eq!(stats.get_str("strategy"), Ok("HashJoin"));
                assert_eq!(
                    stats.get_bool("usedDisk").unwrap_or(false),
                    max_memory == 1,
                    "{stats}"
                );
                let got = got.expect("hash join");
                assert_eq!(got.len(), expected.len());
                for (g, x) in got.iter().zip(&expected) {
                    // Compared as BSON bytes: NaN is not equal to itself as a value.
                    let bytes = |d: &Document| {
                        RawDocumentBuf::from_document(d)
                            .map(|r| r.into_bytes())
                            .ok()
                    };
                    assert!(
                        bytes(g) == bytes(x),
                        "{g} != {x}: {local_field} -> {foreign_field}, collation {collation:?}, memory {max_memory}"
                    );
                }
            }
        }
    }
    // The random data does join (the comparison is not between empty results).
    assert!(joined_total > 500, "only {joined_total} joined documents");
}

#[test]
fn hash_join_equality_follows_query_equality() {
    let (_dir, e) = engine();
    insert(
        &e,
        "foreign",
        &[
            doc! {"_id": 1, "f": 1i64},
            doc! {"_id": 2, "f": 1.0},
            doc! {"_id": 3, "f": null},
            doc! {"_id": 4},
            doc! {"_id": 5, "f": "ABC"},
            doc! {"_id": 6, "f": [2, "abc"]},
            doc! {"_id": 7, "f": [[1, 2]]},
            doc! {"_id": 8, "f": [1, 2]},
        ],
    );
    // local value(s) -> foreign _ids, without and with a case-insensitive collation.
    let cases: Vec<(Bson, Vec<i32>, Vec<i32>)> = vec![
        (bson!(1), vec![1, 2, 8], vec![1, 2, 8]),
        (dec("1"), vec![1, 2, 8], vec![1, 2, 8]),
        (Bson::Null, vec![3, 4], vec![3, 4]),
        (bson!("abc"), vec![6], vec![5, 6]),
        (bson!([2, "ABC"]), vec![5, 6, 8], vec![5, 6, 8]),
        (bson!([[1, 2]]), vec![7, 8], vec![7, 8]),
        (bson!([]), vec![3, 4], vec![3, 4]),
        (bson!(3), vec![], vec![]),
    ];
    for (local, plain, collated) in cases {
        for (collation, want) in [
            (None, &plain),
            (Some(doc! {"locale": "en", "strength": 2}), &collated),
        ] {
            let input = vec![doc! {"_id": 0, "a": local.clone()}];
            let pipeline = bson!([{"$lookup": {
                "from": "foreign", "localField": "a", "foreignField": "f", "as": "j",
            }}]);
            for hash_join in [true, false] {
                let s = Setup {
                    hash_join,
                    collation: collation.clone(),
                    allow_disk_use: true,
                    max_memory: 100 << 20,
                };
                let (out, _) = run_lookup(&e, &input, pipeline.clone(), &s);
                let out = out.expect("lookup");
                let ids: Vec<i32> = out[0]
                    .get_array("j")
                    .expect("j")
                    .iter()
                    .filter_map(|d| d.as_document()?.get_i32("_id").ok())
                    .collect();
                assert_eq!(
                    &ids, want,
                    "a: {local}, collation {collation:?}, hash join {hash_join}"
                );
            }
        }
    }
}

#[test]
fn hash_join_strategy_memory_limit_and_explain_fields() {
    let (_dir, e) = engine();
    insert(
        &e,
        "foreign",
        &[doc! {"_id": 1, "f": 1}, doc! {"_id": 2, "f": 2}],
    );
    let input = vec![doc! {"_id": 0, "a": 1}];
    let lookup = |from: &str| bson!([{"$lookup": {"from": from, "localField": "a", "foreignField": "f", "as": "j"}}]);
    let setup = |allow_disk_use, max_memory| Setup {
        hash_join: true,
        collation: None,
        allow_disk_use,
        max_memory,
    };
    // Past the memory limit without allowDiskUse: QueryExceededMemoryLimitNoDiskUseAllowed.
    let (out, _) = run_lookup(&e, &input, lookup("foreign"), &setup(false, 1));
    assert_eq!(out, Err(292));
    let (out, stats) = run_lookup(&e, &input, lookup("foreign"), &setup(true, 1));
    assert_eq!(out.expect("spilled").len(), 1);
    assert_eq!(stats.get_bool("usedDisk"), Ok(true));
    assert_eq!(stats.get_i64("spilledRecords"), Ok(2));
    let (_, stats) = run_lookup(&e, &input, lookup("missing"), &setup(true, 1 << 20));
    assert_eq!(
        stats.get_str("strategy"),
        Ok("NonExistentForeignCollection")
    );
    e.create_indexes(
        &Namespace::new("test", "foreign"),
        &[doc! {"key": {"f": 1}, "name": "f_1"}],
    )
    .expect("index");
    let (out, stats) = run_lookup(&e, &input, lookup("foreign"), &setup(true, 1 << 20));
    assert_eq!(stats.get_str("strategy"), Ok("IndexedLoopJoin"));
    assert_eq!(stats.get_str("indexName"), Ok("f_1"));
    assert_eq!(
        out.expect("indexed")[0].get_array("j").map(|a| a.len()),
        Ok(1)
    );
}
