//! Catalog commands on time-series collections (`nidus_engine::timeseries`): the
//! `listCollections` entry, index commands translated to the buckets collection's keys, and
//! `drop` of the view with its buckets.

use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::Result;
use nidus_engine::namespace::Namespace;
use nidus_engine::timeseries::{bucket_index_key, buckets_ns, user_index_key, Timeseries};
use nidus_engine::Engine;

/// The `listCollections` entry of time-series view `ns` (None: not a time-series view).
pub fn list_entry(engine: &Engine, ns: &Namespace, name_only: bool) -> Option<Document> {
    let ts = engine.timeseries(ns)?;
    if name_only {
        return Some(doc! { "name": ns.coll.clone(), "type": "timeseries" });
    }
    let meta = ts.buckets.meta.read();
    let mut options = doc! { "timeseries": ts.options.to_document() };
    if let Some(e) = meta.options.get("expireAfterSeconds") {
        options.insert("expireAfterSeconds", e.clone());
    }
    Some(doc! {
        "name": ns.coll.clone(),
        "type": "timeseries",
        "options": options,
        "info": { "readOnly": false },
    })
}

/// A time-series index spec in the buckets collection's terms (the name kept).
fn bucket_spec(ts: &Timeseries, spec: &Document) -> Result<Document> {
    let mut out = spec.clone();
    if let Ok(key) = spec.get_document("key") {
        out.insert("key", bucket_index_key(key, &ts.options)?);
        if !spec.contains_key("name") {
            out.insert("name", nidus_engine::index_spec::default_name(key));
        }
    }
    Ok(out)
}

/// `createIndexes` on a time-series collection (None: `ns` is not one).
pub fn create_indexes(ctx: &Ctx, ns: &Namespace, specs: &[Document]) -> Result<Option<Document>> {
    let Some(ts) = ctx.state.engine.timeseries(ns) else {
        return Ok(None);
    };
    let specs = specs
        .iter()
        .map(|s| bucket_spec(&ts, s))
        .collect::<Result<Vec<_>>>()?;
    let out = ctx.state.engine.create_indexes(&buckets_ns(ns), &specs)?;
    let mut reply = doc! {
        "numIndexesBefore": out.num_indexes_before as i32,
        "numIndexesAfter": out.num_indexes_after as i32,
    };
    match out.note {
        Some(note) => reply.insert("note", note),
        None => reply.insert("createdCollectionAutomatically", false),
    };
    Ok(Some(reply))
}

/// `listIndexes` on a time-series collection: the buckets indexes with the keys the user
/// gave (None: `ns` is not one).
pub fn list_indexes(ctx: &Ctx, ns: &Namespace) -> Option<Vec<Bson>> {
    let ts = ctx.state.engine.timeseries(ns)?;
    let meta = ts.buckets.meta.read();
    Some(
        meta.indexes
            .iter()
            .filter(|ix| !ix.is_id())
            .map(|ix| {
                let mut spec = (*ix.spec).clone();
                spec.insert("key", user_index_key(&ix.key_document(), &ts.options));
                Bson::Document(spec)
            })
            .collect(),
    )
}

/// `dropIndexes` on a time-series collection: a key pattern in the user's terms.
pub fn drop_index_target(ctx: &Ctx, ns: &Namespace, which: &Bson) -> Result<Option<Bson>> {
    let Some(ts) = ctx.state.engine.timeseries(ns) else {
        return Ok(None);
    };
    Ok(Some(match which {
        Bson::Document(key) => Bson::Document(bucket_index_key(key, &ts.options)?),
        other => other.clone(),
    }))
}

/// `drop` of a time-series collection (the view and its buckets); None when `ns` is not one.
pub fn drop(ctx: &Ctx, ns: &Namespace) -> Result<Option<Document>> {
    match ctx.state.engine.drop_timeseries(ns)? {
        true => Ok(Some(doc! { "ns": ns.full() })),
        false => Ok(None),
    }
}
