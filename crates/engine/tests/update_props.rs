//! Properties of updates through the engine (issue 4): after random update sequences on a
//! collection with single-field, multikey and compound indexes, every stored document equals
//! the same updates applied in memory, and every index equals a rebuild from the records
//! (`Engine::validate` recomputes each index from scratch and compares). The indexes cover
//! the options an update's index maintenance treats apart (sparse, partial, collated), and
//! updates of unindexed fields, whose index entries are left as they are.

use bson::{bson, doc, Bson, Document, RawDocumentBuf};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::{Update, UpdateContext};
use proptest::prelude::*;

mod common;
use common::open;

const DOCS: i32 = 4;

fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-2i32..3).prop_map(Bson::Int32),
        Just(Bson::Double(2.5)),
        Just(Bson::String("s".into())),
        Just(Bson::Null),
        Just(bson!([1, 2])),
        Just(bson!({"c": 1})),
    ]
}

fn path() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b.c"), Just("tags"), Just("d")]
}

/// An update (operators or a pipeline) that may fail on some documents (e.g. `$inc` on a
/// string): failures must leave the stored document unchanged, as in memory.
fn update() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (path(), value()).prop_map(|(p, v)| bson!({"$set": {p: v}})),
        path().prop_map(|p| bson!({"$unset": {p: ""}})),
        path().prop_map(|p| bson!({"$inc": {p: 1}})),
        value().prop_map(|v| bson!({"$push": {"tags": v}})),
        value().prop_map(|v| bson!({"$addToSet": {"tags": v}})),
        value().prop_map(|v| bson!({"$pull": {"tags": v}})),
        Just(bson!({"$rename": {"a": "d"}})),
        Just(bson!({"$pop": {"tags": 1}})),
        Just(bson!([{"$set": {"a": {"$ifNull": ["$d", "$a"]}, "b.c": "$a"}}])),
        Just(bson!([{"$unset": "tags"}])),
        Just(bson!([{"$replaceWith": {"$mergeObjects": ["$$ROOT", {"tags": ["x", "y"]}]}}])),
    ]
}

/// The index patterns of the collection under test.
const PATTERNS: &[&[(&str, bool)]] = &[
    &[("a", false)],
    &[("tags", false)],
    &[("a", false), ("b.c", true)],
    &[("d", false), ("a", true)],
];

fn indexable(d: &Document) -> nidus_common::Result<()> {
    let raw = RawDocumentBuf::from_document(d).expect("raw");
    for p in PATTERNS {
        let pattern: Vec<(String, bool)> =
            p.iter().map(|(f, desc)| (f.to_string(), *desc)).collect();
        nidus_doc::keys::index_keys(&raw, &pattern, false)?;
    }
    Ok(())
}

fn stored(e: &Engine, ns: &Namespace) -> Vec<Document> {
    let coll = e.collection(ns);
    let mut exec = e
        .plan_find(coll.as_ref(), &FindSpec::default())
        .expect("plan");
    let mut out = Vec::new();
    while let Some(m) = exec.get_next().expect("next") {
        out.push(m.doc.expect("doc").to_document().expect("document"));
    }
    out
}

fn run(steps: &[(i32, Bson)]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open(dir.path());
    let ns = Namespace::new("db", "c");
    e.create_indexes(
        &ns,
        &[
            doc! {"key": {"a": 1}, "name": "a_1"},
            doc! {"key": {"tags": 1}, "name": "tags_1"},
            doc! {"key": {"a": 1, "b.c": -1}, "name": "a_1_b.c_-1"},
            doc! {"key": {"b.c": 1}, "name": "b.c_1", "sparse": true},
            // Keyed on `d`, holding only documents whose `a` matches: an update of `a`
            // alone moves a document in or out.
            doc! {"key": {"d": 1}, "name": "d_1", "partialFilterExpression": {"a": {"$gt": 0}}},
            doc! {"key": {"d": 1, "a": -1}, "name": "d_1_a_-1",
            "collation": {"locale": "en", "strength": 2}},
        ],
    )
    .expect("indexes");
    let coll = e.ensure_collection(&ns).expect("collection");
    let mut model: Vec<Document> = (0..DOCS)
        .map(|i| doc! {"_id": i, "a": i, "b": {"c": i}, "tags": [i, "t"]})
        .collect();
    for d in &model {
        let raw = RawDocumentBuf::from_document(d).expect("raw");
        e.insert_one(
            &coll,
            &prepare_insert(&raw).expect("prepare"),
            &WriteOpts::default(),
        )
        .expect("insert");
    }
    let ctx = UpdateContext::default();
    for (target, u) in steps {
        let update = Update::parse(u, None).expect("generated updates parse");
        let mut expected = model[*target as usize].clone();
        // A result the indexes cannot key (parallel arrays under the compound index) is
        // refused by the engine, as by MongoDB (CannotIndexParallelArrays).
        let in_memory = update
            .apply(&mut expected, &ctx)
            .and_then(|_| indexable(&expected));
        let spec = UpdateSpec {
            filter: doc! {"_id": *target},
            update,
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        let through_engine = e.update(&coll, &spec, &WriteOpts::default());
        prop_assert_eq!(
            in_memory.is_ok(),
            through_engine.is_ok(),
            "{} on {}",
            u,
            model[*target as usize]
        );
        if in_memory.is_ok() {
            model[*target as usize] = expected;
        }
    }
    prop_assert_eq!(stored(&e, &ns), model);
    let report = e.validate(&coll).expect("validate");
    prop_assert!(report.errors.is_empty(), "{:?}", report.errors);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_updates_equal_in_memory_updates_and_indexes_equal_a_rebuild(
        steps in proptest::collection::vec((0..DOCS, update()), 1..16)
    ) {
        run(&steps)?;
    }
}

/// The index kinds whose keys are not plain values (hashed, `2dsphere`, `2d`, text): after
/// each update, of an indexed field or of another one, every index equals a rebuild.
#[test]
fn updates_keep_hashed_geo_and_text_indexes_equal_to_a_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open(dir.path());
    let ns = Namespace::new("db", "kinds");
    e.create_indexes(
        &ns,
        &[
            doc! {"key": {"h": "hashed"}, "name": "h_hashed"},
            doc! {"key": {"loc": "2dsphere"}, "name": "loc_2dsphere"},
            doc! {"key": {"p": "2d"}, "name": "p_2d"},
            doc! {"key": {"t": "text"}, "name": "t_text"},
        ],
    )
    .expect("indexes");
    let coll = e.ensure_collection(&ns).expect("collection");
    let raw = RawDocumentBuf::from_document(&doc! {
        "_id": 1, "h": 1, "loc": {"type": "Point", "coordinates": [1.0, 2.0]},
        "p": [3.0, 4.0], "t": "quick brown foxes", "other": 0, "language": "english",
    })
    .expect("raw");
    e.insert_one(
        &coll,
        &prepare_insert(&raw).expect("prepare"),
        &WriteOpts::default(),
    )
    .expect("insert");
    let updates = [
        bson!({"$set": {"other": 1}}),
        bson!({"$set": {"h": "changed"}}),
        bson!({"$set": {"loc.coordinates": [5.0, 6.0]}}),
        bson!({"$set": {"p": [7.0, 8.0]}}),
        bson!({"$set": {"t": "lazy dogs sleeping"}}),
        // A text index's keys follow the document's language field too.
        bson!({"$set": {"language": "spanish"}}),
        bson!({"$unset": {"loc": "", "p": ""}}),
        bson!([{"$replaceWith": {"_id": 1, "h": 2, "t": "foxes"}}]),
    ];
    for u in &updates {
        let spec = UpdateSpec {
            filter: doc! {"_id": 1},
            update: Update::parse(u, None).expect("parse"),
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        let outcome = e
            .update(&coll, &spec, &WriteOpts::default())
            .expect("update");
        assert_eq!(outcome.n_modified, 1, "{u}");
        let report = e.validate(&coll).expect("validate");
        assert!(report.errors.is_empty(), "after {u}: {:?}", report.errors);
    }
}
