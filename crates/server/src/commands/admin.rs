//! Administration commands: `top`, `dbHash`, `dataSize`, `compact`, `connPoolStats`,
//! `logRotate`, and the `$collStats`/`$indexStats` stages (computed here, handed to the
//! pipeline as `$documents`).

use super::{wrong_type, Ctx};
use bson::{doc, Bson, Document};
use md5::{Digest, Md5};
use nidus_common::{number, Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use std::sync::atomic::Ordering;
use std::time::Instant;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn top(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("top")?;
    Ok(doc! { "totals": ctx.state.top.totals() })
}

/// The documents of a collection in `_id` order, fed to `f` as raw BSON.
fn each_document(ctx: &Ctx, ns: &Namespace, mut f: impl FnMut(&[u8])) -> Result<()> {
    let coll = ctx.state.engine.collection(ns);
    let spec = FindSpec {
        hint: Some(Bson::Document(doc! { "_id": 1 })),
        deadline: ctx.deadline,
        ..FindSpec::default()
    };
    let mut exec = ctx.state.engine.plan_find(coll.as_ref(), &spec)?;
    while let Some(d) = exec.next_doc()? {
        f(d.as_bytes());
    }
    Ok(())
}

/// `dbHash`: an md5 of each collection's documents in `_id` order and one of them all, so
/// that two databases with the same contents (e.g. after a restore) hash alike.
pub fn db_hash(ctx: &mut Ctx) -> Result<Document> {
    let started = Instant::now();
    let only: Option<Vec<String>> = match ctx.body.get("collections") {
        None | Some(Bson::Null) => None,
        Some(Bson::Array(a)) => Some(
            a.iter()
                .map(|v| match v {
                    Bson::String(s) => Ok(s.clone()),
                    other => Err(wrong_type("dbHash", "collections", other, "string")),
                })
                .collect::<Result<_>>()?,
        ),
        Some(other) => return Err(wrong_type("dbHash", "collections", other, "array")),
    };
    let mut colls = ctx.state.engine.collections_in(&ctx.db);
    colls.sort_by(|a, b| a.ns.coll.cmp(&b.ns.coll));
    let mut hashes = Document::new();
    let mut uuids = Document::new();
    let mut capped = Vec::new();
    let mut all = Md5::new();
    for c in colls {
        let name = c.ns.coll.clone();
        if name.starts_with("system.") && name != "system.js" && name != "system.views" {
            continue;
        }
        if only.as_ref().is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        let mut h = Md5::new();
        each_document(ctx, &c.ns, |bytes| h.update(bytes))?;
        let digest = hex(&h.finalize());
        all.update(name.as_bytes());
        all.update(digest.as_bytes());
        if c.is_capped() {
            capped.push(Bson::String(name.clone()));
        }
        if let Some(uuid) = c.meta.read().options.get("uuid").cloned() {
            uuids.insert(name.clone(), uuid);
        }
        hashes.insert(name, digest);
    }
    Ok(doc! {
        "host": format!("{}:{}", nidus_common::hostname(), ctx.state.config.port),
        "collections": hashes,
        "capped": capped,
        "uuids": uuids,
        "md5": hex(&all.finalize()),
        "timeMillis": number(started.elapsed().as_millis() as u64),
        "fromCache": [],
    })
}

/// `dataSize: "db.coll"` (with optional `keyPattern`, `min`, `max`, `estimate`): the BSON
/// size and count of the documents, in the index range when one is given.
pub fn data_size(ctx: &mut Ctx) -> Result<Document> {
    let started = Instant::now();
    let full = match ctx.body.get(ctx.command_name()) {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => return Err(wrong_type("dataSize", "dataSize", other, "string")),
        None => String::new(),
    };
    let ns = Namespace::parse(&full)?;
    let key_pattern = ctx.opt_document("keyPattern")?;
    let min = ctx.opt_document("min")?.filter(|d| !d.is_empty());
    let max = ctx.opt_document("max")?.filter(|d| !d.is_empty());
    if (min.is_some() || max.is_some()) && key_pattern.is_none() {
        return Err(Error::bad_value(
            "only key pattern can be specified with min and max",
        ));
    }
    let Some(coll) = ctx.state.engine.collection(&ns) else {
        return Ok(
            doc! { "size": 0, "numObjects": 0, "millis": number(started.elapsed().as_millis() as u64) },
        );
    };
    let (mut size, mut n) = (0i64, 0i64);
    if key_pattern.is_none() {
        size = coll.data_size.load(Ordering::Relaxed);
        n = coll.count.load(Ordering::Relaxed);
    } else {
        let spec = FindSpec {
            hint: key_pattern.map(Bson::Document),
            min,
            max,
            deadline: ctx.deadline,
            ..FindSpec::default()
        };
        let mut exec = ctx.state.engine.plan_find(Some(&coll), &spec)?;
        while let Some(d) = exec.next_doc()? {
            size += d.as_bytes().len() as i64;
            n += 1;
        }
    }
    Ok(doc! {
        "estimate": ctx.opt_bool("estimate")?.unwrap_or(false),
        "size": number(size),
        "numObjects": number(n),
        "millis": number(started.elapsed().as_millis() as u64),
    })
}

/// `compact`: RocksDB compacts in the background, so there is nothing to reclaim on
/// request; MongoDB's reply shape with what was freed.
pub fn compact(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("compact")?;
    ctx.state.engine.check_not_view(&ns)?;
    if ctx.state.engine.collection(&ns).is_none() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("collection does not exist: {ns}"),
        ));
    }
    for (k, v) in ctx.body.iter().skip(1) {
        match k.as_str() {
            "force" | "dryRun" | "freeSpaceTargetMB" | "comment" => {}
            k if super::is_generic_arg(k) => {}
            other => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'compact.{other}' is an unknown field."),
                ))
            }
        }
        if k == "dryRun" && !matches!(v, Bson::Boolean(_)) {
            return Err(wrong_type("compact", k, v, "bool"));
        }
    }
    let key = if ctx.opt_bool("dryRun")?.unwrap_or(false) {
        "estimatedBytesFreed"
    } else {
        "bytesFreed"
    };
    Ok(doc! { key: 0 })
}

/// `connPoolStats`: Nidus keeps no outgoing connection pools (no sharding, no remote
/// replica set members), so every pool count is zero.
pub fn conn_pool_stats(_ctx: &mut Ctx) -> Result<Document> {
    Ok(doc! {
        "numClientConnections": 0,
        "numAScopedConnections": 0,
        "totalInUse": 0,
        "totalAvailable": 0,
        "totalLeased": 0,
        "totalCreated": 0,
        "totalRefreshing": 0,
        "totalRefreshed": 0,
        "totalWasNeverUsed": 0,
        "totalWasUsedOnce": 0,
        "totalConnUsageTimeMillis": 0,
        "replicaSetMatchingStrategy": "automatic",
        "pools": {},
        "hosts": {},
        "replicaSetPingTimesMillis": {},
        "numReplicaSetMonitorsCreated": 0,
    })
}

pub fn log_rotate(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("logRotate")?;
    crate::log::rotate().map_err(|e| Error::new(ErrorCode::FileRenameFailed, e))?;
    Ok(Document::new())
}

/// `storageStats` of `$collStats` and the `collStats` command.
pub fn storage_stats(ctx: &Ctx, ns: &Namespace, scale: i64) -> Result<Document> {
    let coll = ctx.state.engine.collection(ns).ok_or_else(|| {
        Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Collection [{ns}] not found."),
        )
    })?;
    let count = coll.count.load(Ordering::Relaxed);
    let size = coll.data_size.load(Ordering::Relaxed);
    let meta = coll.meta.read();
    let mut index_sizes = Document::new();
    for ix in &meta.indexes {
        index_sizes.insert(ix.name.clone(), 0i32);
    }
    let mut d = doc! {
        "size": number(size / scale),
        "count": number(count),
        "avgObjSize": number(if count > 0 { size / count } else { 0 }),
        "numOrphanDocs": 0,
        "storageSize": number(size / scale),
        "freeStorageSize": 0,
        "capped": coll.is_capped(),
        "nindexes": meta.indexes.len() as i32,
        "indexDetails": {},
        "indexBuilds": meta.building.iter().map(|ix| Bson::String(ix.name.clone())).collect::<Vec<_>>(),
        "totalIndexSize": 0,
        "totalSize": number(size / scale),
        "indexSizes": index_sizes,
        "scaleFactor": number(scale),
    };
    if let Some(limits) = nidus_engine::capped::CappedLimits::of(&meta.options) {
        if let Some(max) = limits.max {
            d.insert("max", number(max));
        }
        d.insert("maxSize", number(limits.size / scale));
    }
    Ok(d)
}

/// A leading `$collStats` or `$indexStats` stage becomes `$documents` holding what it
/// reports for the aggregated collection.
pub fn stats_stage(ctx: &Ctx, coll: Option<&Namespace>, mut items: Vec<Bson>) -> Result<Vec<Bson>> {
    let Some(Bson::Document(first)) = items.first() else {
        return Ok(items);
    };
    let Some((name, spec)) = first.iter().next() else {
        return Ok(items);
    };
    let docs = match name.as_str() {
        "$collStats" => {
            let ns = stats_namespace(coll, name)?;
            let Bson::Document(spec) = spec else {
                return Err(Error::new(
                    ErrorCode::Location(5447000),
                    format!("$collStats must take a nested object but found: {spec}"),
                ));
            };
            vec![coll_stats_document(ctx, ns, spec)?]
        }
        "$indexStats" => {
            let ns = stats_namespace(coll, name)?;
            if !matches!(spec, Bson::Document(d) if d.is_empty()) {
                return Err(Error::new(
                    ErrorCode::Location(28803),
                    "The $indexStats stage specification must be an empty object",
                ));
            }
            index_stats_documents(ctx, ns)
        }
        _ => return Ok(items),
    };
    let docs: Vec<Bson> = docs.into_iter().map(Bson::Document).collect();
    items[0] = Bson::Document(doc! { "$documents": { "$literal": docs } });
    Ok(items)
}

fn stats_namespace<'a>(coll: Option<&'a Namespace>, stage: &str) -> Result<&'a Namespace> {
    coll.ok_or_else(|| {
        Error::new(
            ErrorCode::InvalidNamespace,
            format!("{stage} must be run against a collection: {{aggregate: 1}} is not valid"),
        )
    })
}

fn coll_stats_document(ctx: &Ctx, ns: &Namespace, spec: &Document) -> Result<Document> {
    let mut out = doc! {
        "ns": ns.full(),
        "host": format!("{}:{}", nidus_common::hostname(), ctx.state.config.port),
        "localTime": bson::DateTime::now(),
    };
    for (k, v) in spec {
        match k.as_str() {
            "latencyStats" => {
                let mut l = ctx.state.top.latency_stats(&ns.full());
                if matches!(v, Bson::Document(d) if d.get_bool("histograms").unwrap_or(false)) {
                    for (_, class) in l.iter_mut() {
                        if let Bson::Document(c) = class {
                            c.insert("histogram", Vec::<Bson>::new());
                        }
                    }
                }
                out.insert("latencyStats", l);
            }
            "storageStats" => {
                let scale = match v {
                    Bson::Document(d) => {
                        super::opt_i64("$collStats.storageStats", d, "scale")?.unwrap_or(1)
                    }
                    _ => 1,
                };
                if scale < 1 {
                    return Err(Error::new(
                        ErrorCode::Location(51024),
                        format!("BSON field 'scale' value must be >= 1, actual value '{scale}'"),
                    ));
                }
                if ctx.state.engine.view(ns).is_some() {
                    return Err(Error::new(
                        ErrorCode::CommandNotSupportedOnView,
                        "Namespace is a view, not a collection",
                    ));
                }
                out.insert("storageStats", storage_stats(ctx, ns, scale)?);
            }
            "count" => {
                let n = ctx
                    .state
                    .engine
                    .collection(ns)
                    .map_or(0, |c| c.count.load(Ordering::Relaxed));
                out.insert("count", number(n));
            }
            "queryExecStats" => {
                out.insert(
                    "queryExecStats",
                    doc! { "collectionScans": { "total": 0i64, "nonTailable": 0i64 } },
                );
            }
            other => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field '$collStats.{other}' is an unknown field."),
                ))
            }
        }
    }
    Ok(out)
}

fn index_stats_documents(ctx: &Ctx, ns: &Namespace) -> Vec<Document> {
    let Some(coll) = ctx.state.engine.collection(ns) else {
        return Vec::new();
    };
    let host = format!("{}:{}", nidus_common::hostname(), ctx.state.config.port);
    let meta = coll.meta.read();
    meta.indexes
        .iter()
        .map(|ix| {
            doc! {
                "name": ix.name.clone(),
                "key": ix.key_document(),
                "host": host.clone(),
                "accesses": ctx.state.top.index_accesses(&ns.full(), &ix.name, ctx.state.started_at),
                "spec": (*ix.spec).clone(),
            }
        })
        .collect()
}
