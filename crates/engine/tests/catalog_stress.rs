//! Catalog operations racing each other and writes (issue 18), checked against a model.
//!
//! Threads run create, drop, rename (with and without `dropTarget`), dropDatabase,
//! createIndexes, collMod, view create/drop and inserts over a handful of names. Each
//! operation reports what it did (the ids of collections created and dropped, the collection
//! an acknowledged insert went to); afterwards:
//! - every collection created and never dropped is still there, under exactly one name
//!   (a rename never loses or duplicates a collection);
//! - every acknowledged document is in the collection it was written to, unless that
//!   collection was dropped;
//! - no name is both a view and a collection;
//! - `validate` passes for every collection, and reopening the store gives the same catalog
//!   (names, ids, indexes) as the running engine had.
//!
//! `NIDUS_CATALOG_STRESS_ROUNDS` sets the rounds (default 3, a few seconds).

use bson::{doc, Document, RawDocumentBuf};
use nidus_common::ErrorCode;
use nidus_engine::namespace::Namespace;
use nidus_engine::view::ViewDef;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_storage_rocks::RocksEngine;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

const NAMES: &[&str] = &["c0", "c1", "c2", "c3"];
const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 60;

#[derive(Default)]
struct Model {
    created: BTreeSet<u64>,
    dropped: BTreeSet<u64>,
    /// Acknowledged inserts: document `_id` → the id of the collection written.
    written: BTreeMap<i64, u64>,
    /// Collections created implicitly (createIndexes on a missing name, an insert through a
    /// handle dropped meanwhile): not tracked for loss.
    untracked: bool,
}

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(Arc::new(RocksEngine::open(dir).expect("open rocks"))).expect("open engine")
}

/// A small deterministic generator per thread (no shared RNG state between threads).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, names: &[&'a str]) -> &'a str {
        names[(self.next() % names.len() as u64) as usize]
    }
}

fn ns(db: &str, name: &str) -> Namespace {
    Namespace::new(db, name)
}

/// Errors the races may legitimately produce.
fn expected_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NamespaceExists
            | ErrorCode::NamespaceNotFound
            | ErrorCode::CommandNotSupportedOnView
            | ErrorCode::BackgroundOperationInProgressForNamespace
            | ErrorCode::IndexBuildAborted
            | ErrorCode::DuplicateKey
            | ErrorCode::GraphContainsCycle
            | ErrorCode::ViewDepthLimitExceeded
    )
}

fn run_thread(e: &Engine, db: &str, seed: u64, next_doc: &AtomicU64, model: &Mutex<Model>) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for _ in 0..OPS_PER_THREAD {
        let a = rng.pick(NAMES);
        let b = rng.pick(NAMES);
        let result: nidus_common::Result<()> = match rng.next() % 12 {
            0 => e
                .create_collection_if_absent(&ns(db, a), Document::new())
                .map(|c| {
                    if let Some(c) = c {
                        model.lock().created.insert(c.id);
                    }
                }),
            1 => e.drop_collection_reporting(&ns(db, a)).map(|d| {
                if let Some((_, id)) = d {
                    model.lock().dropped.insert(id);
                }
            }),
            2 | 3 if a != b => e
                .rename_collection_reporting(&ns(db, a), &ns(db, b), rng.next().is_multiple_of(2))
                .map(|d| {
                    if let Some(id) = d {
                        model.lock().dropped.insert(id);
                    }
                }),
            4 if rng.next().is_multiple_of(8) => e.drop_database(db).map(|ids| {
                model.lock().dropped.extend(ids);
            }),
            5 => {
                if e.collection(&ns(db, a)).is_none() {
                    model.lock().untracked = true;
                }
                e.create_indexes(&ns(db, a), &[doc! {"key": {"x": 1}, "name": "x_1"}])
                    .map(|_| ())
            }
            6 => e.set_validation_options(&ns(db, a), &doc! {"validationLevel": "moderate"}),
            7 => e.create_view(ViewDef {
                ns: ns(db, a),
                view_on: b.to_string(),
                pipeline: Vec::new(),
                collation: None,
            }),
            8 => e.drop_view(&ns(db, a)).map(|_| ()),
            _ => {
                let id = next_doc.fetch_add(1, Ordering::Relaxed) as i64;
                match e.collection(&ns(db, a)) {
                    None => Ok(()),
                    Some(c) => {
                        let raw =
                            RawDocumentBuf::from_document(&doc! {"_id": id, "x": id}).expect("raw");
                        let doc = prepare_insert(&raw).expect("prepare");
                        e.insert_one(&c, &doc, &WriteOpts::default()).map(|()| {
                            // An insert resolves its collection by name, as MongoDB's: when
                            // the handle was dropped or renamed away before the write, the
                            // document went to whatever collection the name had then (created
                            // implicitly if none), which the model cannot know. `dropped`
                            // only ever goes from false to true, and a drop or rename waits
                            // for a running insert's metadata lock, so a handle still live
                            // after the insert is the collection written.
                            let mut m = model.lock();
                            if c.meta.read().dropped {
                                m.untracked = true;
                            } else {
                                m.written.insert(id, c.id);
                            }
                        })
                    }
                }
            }
        };
        if let Err(err) = result {
            assert!(expected_error(err.code), "unexpected error: {err:?}");
        }
    }
}

/// Name → (collection id, index names), from the engine's running catalog.
fn catalog(e: &Engine, db: &str) -> BTreeMap<String, (u64, Vec<String>)> {
    e.collections_in(db)
        .into_iter()
        .map(|c| {
            let mut names: Vec<String> = c
                .meta
                .read()
                .indexes
                .iter()
                .map(|i| i.name.clone())
                .collect();
            names.sort();
            (c.ns.coll.clone(), (c.id, names))
        })
        .collect()
}

fn round(dir: &std::path::Path, round: u64) {
    let e = open(dir);
    let db = format!("stress{round}");
    let model = Mutex::new(Model::default());
    let next_doc = AtomicU64::new(round * 1_000_000);
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (e, db, model, next_doc, barrier) = (&e, &db, &model, &next_doc, &barrier);
            s.spawn(move || {
                barrier.wait();
                run_thread(e, db, round * 100 + t as u64 + 1, next_doc, model);
            });
        }
    });
    let model = model.into_inner();
    let live = catalog(&e, &db);
    let live_ids: BTreeMap<u64, String> = live
        .iter()
        .map(|(name, (id, _))| (*id, name.clone()))
        .collect();
    assert_eq!(
        live_ids.len(),
        live.len(),
        "a collection under two names: {live:?}"
    );
    for id in &model.created {
        assert!(
            live_ids.contains_key(id) || model.dropped.contains(id),
            "collection {id} was lost (live {live:?}, dropped {:?})",
            model.dropped
        );
    }
    for id in live_ids.keys() {
        assert!(
            !model.dropped.contains(id),
            "dropped collection {id} is live"
        );
        assert!(
            model.created.contains(id) || model.untracked,
            "collection {id} appeared from nowhere"
        );
    }
    for (doc_id, coll_id) in &model.written {
        match live_ids.get(coll_id) {
            Some(name) => {
                let c = e.collection(&ns(&db, name)).expect("live collection");
                let spec = nidus_engine::find::FindSpec {
                    filter: doc! {"_id": doc_id},
                    ..Default::default()
                };
                let mut exec = e.plan_find(Some(&c), &spec).expect("plan");
                assert!(
                    exec.next_doc().expect("read").is_some(),
                    "acknowledged document {doc_id} missing from {name}"
                );
            }
            None => assert!(
                model.dropped.contains(coll_id),
                "document {doc_id}'s collection {coll_id} vanished without a drop"
            ),
        }
    }
    for name in live.keys() {
        assert!(
            e.view(&ns(&db, name)).is_none(),
            "{name} is both a view and a collection"
        );
        let c = e.collection(&ns(&db, name)).expect("collection");
        let report = e.validate(&c).expect("validate");
        assert!(report.errors.is_empty(), "{name}: {:?}", report.errors);
    }
    drop(e);
    let reopened = open(dir);
    assert_eq!(catalog(&reopened, &db), live, "persisted catalog differs");
}

#[test]
fn catalog_operations_racing_each_other_and_writes() {
    let rounds: u64 = std::env::var("NIDUS_CATALOG_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("tempdir");
    for r in 0..rounds {
        round(dir.path(), r);
    }
}

/// 20 concurrent renames of different sources onto one new name: one succeeds, 19 get
/// NamespaceExists, every collection is still there (issue 18's lost collection).
#[test]
fn concurrent_renames_onto_one_new_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open(dir.path());
    for round in 0..10 {
        let db = format!("r{round}");
        let mut ids = BTreeMap::new();
        for i in 0..20 {
            let c = e
                .create_collection(&ns(&db, &format!("src{i}")), Document::new())
                .expect("create");
            ids.insert(i, c.id);
        }
        let barrier = Barrier::new(20);
        let results: Vec<Result<(), ErrorCode>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|i| {
                    let (e, db, barrier) = (&e, &db, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        e.rename_collection(&ns(db, &format!("src{i}")), &ns(db, "dst"), false)
                            .map_err(|err| err.code)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let ok: Vec<usize> = (0..20).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(ok.len(), 1, "{results:?}");
        assert!(results
            .iter()
            .all(|r| matches!(r, Ok(()) | Err(ErrorCode::NamespaceExists))));
        let live = catalog(&e, &db);
        assert_eq!(live.len(), 20, "{live:?}");
        assert_eq!(live["dst"].0, ids[&ok[0]]);
    }
    drop(e);
}

/// An insert through a handle renamed away before the write goes to the collection the name
/// has then (created implicitly), as MongoDB's insert resolves its collection by name; the
/// renamed collection does not receive it.
#[test]
fn insert_through_a_handle_renamed_away_writes_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open(dir.path());
    let (from, to) = (ns("by_name", "a"), ns("by_name", "b"));
    let handle = e
        .create_collection_if_absent(&from, Document::new())
        .expect("create")
        .expect("created");
    e.rename_collection_reporting(&from, &to, false)
        .expect("rename");
    let raw = RawDocumentBuf::from_document(&doc! {"_id": 1, "x": 1}).expect("raw");
    let doc = prepare_insert(&raw).expect("prepare");
    e.insert_one(&handle, &doc, &WriteOpts::default())
        .expect("insert");
    let count = |n: &Namespace| {
        let c = e.collection(n).expect("collection");
        let spec = nidus_engine::find::FindSpec::default();
        let mut exec = e.plan_find(Some(&c), &spec).expect("plan");
        let mut n = 0;
        while exec.next_doc().expect("read").is_some() {
            n += 1;
        }
        (c.id, n)
    };
    let (renamed_id, in_renamed) = count(&to);
    let (recreated_id, in_recreated) = count(&from);
    assert_eq!(
        renamed_id, handle.id,
        "the rename keeps the collection's id"
    );
    assert_ne!(recreated_id, handle.id);
    assert_eq!((in_renamed, in_recreated), (0, 1));
}
