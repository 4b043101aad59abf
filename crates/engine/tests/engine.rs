//! Engine behaviour over a real RocksDB store: persistence, index maintenance, conflicts.

use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_common::ErrorCode;
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;
use nidus_storage_rocks::RocksEngine;
use std::sync::Arc;

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(Arc::new(RocksEngine::open(dir).expect("open rocks"))).expect("open engine")
}

fn raw(d: Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(&d).unwrap()
}

fn insert(e: &Engine, ns: &Namespace, d: Document) -> nidus_common::Result<()> {
    let coll = e.ensure_collection(ns)?;
    let prepared = prepare_insert(&raw(d))?;
    e.insert_one(&coll, &prepared, &WriteOpts::default())
}

fn find(e: &Engine, ns: &Namespace, spec: FindSpec) -> Vec<Document> {
    let coll = e.collection(ns);
    let mut exec = e.plan_find(coll.as_ref(), &spec).unwrap();
    let mut out = Vec::new();
    while let Some(m) = exec.get_next().unwrap() {
        out.push(m.doc.unwrap().to_document().unwrap());
    }
    out
}

fn all(e: &Engine, ns: &Namespace) -> Vec<Document> {
    find(e, ns, FindSpec::default())
}

#[test]
fn id_is_generated_first_and_duplicates_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("test", "c");
    insert(&e, &ns, doc! {"a": 1}).unwrap();
    insert(&e, &ns, doc! {"a": 2, "_id": 7}).unwrap();
    let docs = all(&e, &ns);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].keys().next().unwrap(), "_id");
    assert!(matches!(docs[0].get("_id"), Some(Bson::ObjectId(_))));
    assert_eq!(docs[1], doc! {"_id": 7, "a": 2});
    let err = insert(&e, &ns, doc! {"_id": 7.0}).unwrap_err();
    assert_eq!(err.code, ErrorCode::DuplicateKey);
    assert_eq!(
        err.message,
        "E11000 duplicate key error collection: test.c index: _id_ dup key: { _id: 7.0 }"
    );
    assert_eq!(
        err.extra.get_document("keyValue").unwrap(),
        &doc! {"_id": 7.0}
    );
}

/// What `prepare_insert` stores or refuses, for documents its byte walk answers (`_id`
/// first and once) and for those it leaves to the element iterator.
#[test]
fn prepare_insert_puts_id_first_and_refuses_bad_ids() {
    let regex = Bson::RegularExpression(bson::Regex {
        pattern: "x".into(),
        options: String::new(),
    });
    let stored = [
        (doc! {"_id": 1, "a": 2}, doc! {"_id": 1, "a": 2}),
        (doc! {"a": 2, "_id": 1}, doc! {"_id": 1, "a": 2}),
        (
            doc! {"_id": {"x": 1}, "r": regex.clone()},
            doc! {"_id": {"x": 1}, "r": regex.clone()},
        ),
        (
            doc! {"_id": "s", "d": {"_id": 2}},
            doc! {"_id": "s", "d": {"_id": 2}},
        ),
    ];
    for (input, expected) in stored {
        let out = prepare_insert(&raw(input.clone())).expect("prepared");
        assert_eq!(out.to_document().unwrap(), expected, "{input}");
    }
    let generated = prepare_insert(&raw(doc! {"a": 1})).expect("prepared");
    let generated = generated.to_document().unwrap();
    assert!(matches!(generated.iter().next(), Some((k, Bson::ObjectId(_))) if k == "_id"));
    let mut twice = RawDocumentBuf::new();
    twice.append("_id", 1);
    twice.append("_id", 2);
    let mut twice_after_regex = RawDocumentBuf::new();
    twice_after_regex.append("_id", 1);
    twice_after_regex.append("r", bson::RawBson::try_from(regex.clone()).unwrap());
    twice_after_regex.append("_id", 2);
    let refused = [
        (twice, "can't have multiple _id fields in one document"),
        (
            twice_after_regex,
            "can't have multiple _id fields in one document",
        ),
        (raw(doc! {"_id": [1]}), "can't use an array for _id"),
        (raw(doc! {"_id": regex}), "can't use a regex for _id"),
        (
            raw(doc! {"_id": Bson::Undefined}),
            "can't use a undefined for _id",
        ),
        (
            raw(doc! {"_id": {"$x": 1}}),
            "_id fields may not contain '$'-prefixed fields: $x is not valid for storage.",
        ),
    ];
    for (input, message) in refused {
        let e = prepare_insert(&input).expect_err("refused");
        assert_eq!(e.message, message, "{input:?}");
    }
}

#[test]
fn data_catalog_and_indexes_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("db", "people");
    {
        let e = open(dir.path());
        e.create_indexes(
            &ns,
            &[doc! {"key": {"email": 1}, "name": "email_1", "unique": true}],
        )
        .unwrap();
        for i in 0..300 {
            insert(&e, &ns, doc! {"_id": i, "email": format!("u{i}@x")}).unwrap();
        }
        e.shutdown().unwrap();
    }
    let e = open(dir.path());
    assert_eq!(all(&e, &ns).len(), 300);
    let err = insert(&e, &ns, doc! {"_id": 1000, "email": "u5@x"}).unwrap_err();
    assert_eq!(err.code, ErrorCode::DuplicateKey);
    assert_eq!(
        err.extra.get_document("keyPattern").unwrap(),
        &doc! {"email": 1}
    );
    // New record ids continue after the old ones: natural order stays insertion order.
    insert(&e, &ns, doc! {"_id": 1001, "email": "new"}).unwrap();
    assert_eq!(all(&e, &ns).last().unwrap().get_i32("_id").unwrap(), 1001);
    let coll = e.collection(&ns).unwrap();
    let report = e.validate(&coll).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

#[test]
fn updates_rewrite_changed_index_keys_only_and_validate_stays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "c");
    e.create_indexes(&ns, &[doc! {"key": {"a": 1}, "name": "a_1"}])
        .unwrap();
    for i in 0..10 {
        insert(&e, &ns, doc! {"_id": i, "a": i % 3, "tags": [i, i + 1]}).unwrap();
    }
    let coll = e.collection(&ns).unwrap();
    let spec = UpdateSpec {
        filter: doc! {"a": 1},
        update: Update::parse(&Bson::Document(doc! {"$inc": {"a": 10}}), None).unwrap(),
        multi: true,
        upsert: false,
        sort: None,
        hint: None,
    };
    let out = e.update(&coll, &spec, &WriteOpts::default()).unwrap();
    assert_eq!((out.n_matched, out.n_modified), (3, 3));
    assert!(e.validate(&coll).unwrap().errors.is_empty());
    let n = e
        .delete(&coll, &doc! {"a": 11}, true, None, &WriteOpts::default())
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(all(&e, &ns).len(), 7);
    assert!(e.validate(&coll).unwrap().errors.is_empty());
}

#[test]
fn upsert_seeds_from_equality_fields() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "c");
    let coll = e.ensure_collection(&ns).unwrap();
    let spec = UpdateSpec {
        filter: doc! {"_id": 5, "x": 1},
        update: Update::parse(&Bson::Document(doc! {"$set": {"y": 2}}), None).unwrap(),
        multi: false,
        upsert: true,
        sort: None,
        hint: None,
    };
    let out = e.update(&coll, &spec, &WriteOpts::default()).unwrap();
    assert_eq!(out.upserted_id, Some(Bson::Int32(5)));
    assert_eq!(all(&e, &ns), vec![doc! {"_id": 5, "x": 1, "y": 2}]);
}

#[test]
fn sort_skip_limit_and_express_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "c");
    for i in 0..20 {
        insert(&e, &ns, doc! {"_id": i, "v": (i * 7) % 20}).unwrap();
    }
    let spec = FindSpec {
        sort: Some(doc! {"v": -1}),
        skip: 2,
        limit: 3,
        ..FindSpec::default()
    };
    let vs: Vec<i32> = find(&e, &ns, spec)
        .iter()
        .map(|d| d.get_i32("v").unwrap())
        .collect();
    assert_eq!(vs, vec![17, 16, 15]);
    let coll = e.collection(&ns);
    let exec = e
        .plan_find(
            coll.as_ref(),
            &FindSpec {
                filter: doc! {"_id": 3},
                ..FindSpec::default()
            },
        )
        .unwrap();
    assert_eq!(exec.root.name(), "EXPRESS_IXSCAN");
    // The express stage answers its summary and index name without the generic explain path;
    // twice, as the formatted key pattern is cached on the index.
    for _ in 0..2 {
        assert_eq!(exec.root.plan_summary(), "EXPRESS_IXSCAN { _id: 1 }");
        assert_eq!(exec.root.index_name().as_deref(), Some("_id_"));
    }
    assert_eq!(
        find(
            &e,
            &ns,
            FindSpec {
                filter: doc! {"_id": 3},
                ..FindSpec::default()
            }
        ),
        vec![doc! {"_id": 3, "v": 1}]
    );
}

/// Inserts `docs` from a thread each, all at once; how many were acknowledged.
fn racing_inserts(e: &Arc<Engine>, ns: &Namespace, docs: Vec<Document>) -> usize {
    let handles: Vec<_> = docs
        .into_iter()
        .map(|d| {
            let (e, ns) = (e.clone(), ns.clone());
            std::thread::spawn(move || insert(&e, &ns, d).is_ok())
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|ok| *ok)
        .count()
}

#[test]
fn concurrent_inserts_of_the_same_id_admit_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "race");
    e.ensure_collection(&ns).unwrap();
    for round in 0..20 {
        let docs = (0..4).map(|_| doc! {"_id": round}).collect();
        assert_eq!(racing_inserts(&e, &ns, docs), 1, "round {round}");
    }
    assert_eq!(all(&e, &ns).len(), 20);
}

/// The same race on a unique secondary index (different `_id`s, one `u`): one writer wins
/// each round, and the index holds exactly the collection's documents (`validate`).
#[test]
fn concurrent_writes_of_the_same_unique_key_admit_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "race_unique");
    e.ensure_collection(&ns).unwrap();
    e.create_indexes(
        &ns,
        &[doc! {"key": {"u": 1}, "name": "u_1", "unique": true}],
    )
    .unwrap();
    for round in 0..20i32 {
        let docs = (0..4i32)
            .map(|t| doc! {"_id": round * 10 + t, "u": round})
            .collect();
        assert_eq!(racing_inserts(&e, &ns, docs), 1, "round {round}");
    }
    let docs = all(&e, &ns);
    assert_eq!(docs.len(), 20);
    let mut us: Vec<i32> = docs.iter().map(|d| d.get_i32("u").unwrap()).collect();
    us.sort();
    assert_eq!(us, (0..20).collect::<Vec<_>>());
    let coll = e.collection(&ns).unwrap();
    let report = e.validate(&coll).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

#[test]
fn concurrent_increments_lose_no_update_and_count_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("db", "counter");
    insert(&e, &ns, doc! {"_id": 1, "n": 0}).unwrap();
    let (threads, per_thread) = (4, 50);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let e = e.clone();
            let ns = ns.clone();
            std::thread::spawn(move || {
                let coll = e.collection(&ns).unwrap();
                let spec = UpdateSpec {
                    filter: doc! {"_id": 1},
                    update: Update::parse(&Bson::Document(doc! {"$inc": {"n": 1}}), None).unwrap(),
                    multi: false,
                    upsert: false,
                    sort: None,
                    hint: None,
                };
                for _ in 0..per_thread {
                    let out = e.update(&coll, &spec, &WriteOpts::default()).unwrap();
                    assert_eq!(out.n_modified, 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        all(&e, &ns),
        vec![doc! {"_id": 1, "n": threads * per_thread}]
    );
}

/// Records are keyed by (session, statement index) and hold the txnNumber: a session's next
/// write overwrites them, a retry finds only its own number's, an older number is too old.
#[test]
fn statement_records_survive_restart_and_are_overwritten_by_the_next_write() {
    use nidus_engine::stmt_record::{Executed, StatementId};
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("test", "c");
    let lsid = [7u8; 16];
    let other = [8u8; 16];
    {
        let e = open(dir.path());
        let coll = e.ensure_collection(&ns).unwrap();
        let writes = [
            (&lsid, 3, 0, 1),
            (&lsid, 3, 1, 10),
            (&lsid, 4, 0, 2),
            (&other, 3, 0, 3),
        ];
        for (session, number, stmt, id) in writes {
            let opts = WriteOpts {
                statement: Some(StatementId::new(session, number, stmt, false)),
                ..WriteOpts::default()
            };
            let d = prepare_insert(&raw(doc! {"_id": id})).unwrap();
            e.insert_one(&coll, &d, &opts).unwrap();
        }
        // A write that failed (duplicate _id) records nothing.
        let opts = WriteOpts {
            statement: Some(StatementId::new(&lsid, 5, 0, false)),
            ..WriteOpts::default()
        };
        let d = prepare_insert(&raw(doc! {"_id": 1})).unwrap();
        assert!(e.insert_one(&coll, &d, &opts).is_err());
        e.shutdown().unwrap();
    }
    let e = open(dir.path());
    let executed = |s: &[u8], n, i| e.executed_statement(&StatementId::new(s, n, i, false));
    let inserted = |id: i32| {
        Some(Executed::Inserted {
            id: Some(Bson::Int32(id)),
            doc: None,
            entry_ts: None,
        })
    };
    assert_eq!(executed(&lsid, 4, 0).unwrap(), inserted(2));
    // Statement 1 of number 3 was not overwritten by number 4 (one statement).
    assert_eq!(executed(&lsid, 3, 1).unwrap(), inserted(10));
    assert_eq!(
        executed(&lsid, 4, 1).unwrap(),
        None,
        "an earlier write's record"
    );
    assert_eq!(executed(&lsid, 5, 0).unwrap(), None, "the failed write");
    assert_eq!(
        executed(&lsid, 3, 0).unwrap_err().code,
        nidus_common::ErrorCode::TransactionTooOld
    );
    // The batch check: a write's statements "may have run" when a record of its number or
    // a newer one lies among them.
    let stmts = |s: &[u8], n, range: std::ops::Range<u32>| -> Vec<StatementId> {
        range.map(|i| StatementId::new(s, n, i, false)).collect()
    };
    let recorded = |v: Vec<StatementId>| e.any_statement_recorded(&v).unwrap();
    assert!(recorded(stmts(&lsid, 4, 0..2)), "number 4's statement 0");
    assert!(recorded(stmts(&lsid, 3, 1..2)), "number 3's statement 1");
    assert!(recorded(stmts(&lsid, 2, 0..1)), "a newer number");
    assert!(!recorded(stmts(&lsid, 5, 0..8)), "only older numbers");
    assert!(!recorded(stmts(&lsid, 4, 2..64)), "no records there");
    assert!(!recorded(stmts(&[9u8; 16], 1, 0..4)), "another session");
    assert!(!recorded(Vec::new()));
    assert_eq!(
        e.forget_session(
            &lsid,
            std::time::SystemTime::now() + std::time::Duration::from_secs(1)
        )
        .unwrap(),
        2
    );
    assert_eq!(executed(&lsid, 4, 0).unwrap(), None);
    assert_eq!(executed(&lsid, 3, 1).unwrap(), None);
    assert_eq!(
        executed(&other, 3, 0).unwrap(),
        inserted(3),
        "other sessions keep theirs"
    );
    // Everything is younger than an hour; nothing is older than zero seconds.
    assert_eq!(
        e.sweep_statements(std::time::Duration::from_secs(3600))
            .unwrap(),
        0
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(e.sweep_statements(std::time::Duration::ZERO).unwrap(), 1);
    assert_eq!(executed(&other, 3, 0).unwrap(), None);
}

/// An insert holding a collection handle that a drop or a rename invalidated lands in the
/// collection of that name, created again, as MongoDB's insert after the drop would; it is
/// not refused (issue 18: inserts racing a drop got NamespaceNotFound).
#[test]
fn insert_through_a_dropped_or_renamed_handle_recreates_the_collection() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let ns = Namespace::new("test", "c");
    insert(&e, &ns, doc! {"_id": 1}).unwrap();
    let stale = e.ensure_collection(&ns).unwrap();
    e.drop_collection(&ns).unwrap();
    let prepared = prepare_insert(&raw(doc! {"_id": 2})).unwrap();
    e.insert_one(&stale, &prepared, &WriteOpts::default())
        .unwrap();
    assert_eq!(all(&e, &ns), vec![doc! {"_id": 2}]);
    let fresh = e.collection(&ns).expect("recreated");
    assert_ne!(fresh.id, stale.id);

    let stale = fresh;
    let to = Namespace::new("test", "moved");
    e.rename_collection(&ns, &to, false).unwrap();
    let prepared = prepare_insert(&raw(doc! {"_id": 3})).unwrap();
    e.insert_one(&stale, &prepared, &WriteOpts::default())
        .unwrap();
    assert_eq!(all(&e, &ns), vec![doc! {"_id": 3}]);
    assert_eq!(all(&e, &to), vec![doc! {"_id": 2}]);
}

/// Each collection's documents by every plan (collection scan both ways, the `x_1` index both
/// ways when it exists), sorted by `_id` for comparison; and `validate` clean.
fn reads_by_every_plan(e: &Engine, ns: &Namespace) -> Vec<Vec<Document>> {
    let coll = e.collection(ns).expect("collection");
    assert!(
        e.validate(&coll).unwrap().errors.is_empty(),
        "{ns} validate"
    );
    let has_x = coll.meta.read().indexes.iter().any(|ix| ix.name == "x_1");
    let mut hints = vec![(doc! {"$natural": 1}, None), (doc! {"$natural": -1}, None)];
    if has_x {
        hints.push((doc! {"x": 1}, Some(doc! {"x": 1})));
        hints.push((doc! {"x": 1}, Some(doc! {"x": -1})));
    }
    hints
        .into_iter()
        .map(|(hint, sort)| {
            let mut docs = find(
                e,
                ns,
                FindSpec {
                    hint: Some(Bson::Document(hint)),
                    sort,
                    ..FindSpec::default()
                },
            );
            docs.sort_by_key(|d| d.get_i32("_id").unwrap());
            docs
        })
        .collect()
}

#[test]
fn drops_remove_exactly_their_data_and_every_plan_of_the_rest_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c"];
    let docs = |tag: &str, n: i32| -> Vec<Document> {
        (0..n)
            .map(|i| doc! {"_id": i, "x": (i * 7) % n, "tag": tag})
            .collect()
    };
    let mut expected: Vec<(Namespace, Vec<Document>)> = Vec::new();
    {
        let e = open(dir.path());
        for name in names {
            let ns = Namespace::new("test", name);
            e.create_indexes(&ns, &[doc! {"key": {"x": 1}, "name": "x_1"}])
                .unwrap();
            for d in docs(name, 50) {
                insert(&e, &ns, d).unwrap();
            }
        }
        // b dropped and made again with other documents under the same name; c's index
        // dropped and built again; a untouched.
        let b = Namespace::new("test", "b");
        let old_b = e.collection(&b).unwrap().id;
        assert_eq!(e.drop_collection(&b).unwrap(), Some(2));
        e.create_indexes(&b, &[doc! {"key": {"x": 1}, "name": "x_1"}])
            .unwrap();
        for d in docs("b2", 10) {
            insert(&e, &b, d).unwrap();
        }
        assert_ne!(e.collection(&b).unwrap().id, old_b);
        let c = Namespace::new("test", "c");
        e.drop_indexes(&c, &Bson::String("x_1".into())).unwrap();
        assert_eq!(reads_by_every_plan(&e, &c).len(), 2);
        e.create_indexes(&c, &[doc! {"key": {"x": 1}, "name": "x_1"}])
            .unwrap();
        expected.push((Namespace::new("test", "a"), docs("a", 50)));
        expected.push((b, docs("b2", 10)));
        expected.push((c, docs("c", 50)));
        for (ns, want) in &expected {
            for got in reads_by_every_plan(&e, ns) {
                assert_eq!(&got, want, "{ns}");
            }
        }
    }
    // The same after a restart (the removals were logged, not only in memory).
    let e = open(dir.path());
    for (ns, want) in &expected {
        let plans = reads_by_every_plan(&e, ns);
        assert_eq!(plans.len(), 4);
        for got in plans {
            assert_eq!(&got, want, "{ns} after restart");
        }
    }
}
