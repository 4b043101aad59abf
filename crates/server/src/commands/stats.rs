//! `serverStatus`, `dbStats`, `collStats`, `validate`.

use super::Ctx;
use bson::{doc, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::Collection;
use std::sync::atomic::Ordering;

fn resident_mb() -> (i64, i64) {
    // /proc/self/statm: size resident ... in pages.
    let page_kb = 4;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .map(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<i64>().unwrap_or(0));
            let virt = it.next().unwrap_or(0) * page_kb / 1024;
            let res = it.next().unwrap_or(0) * page_kb / 1024;
            (res, virt)
        })
        .unwrap_or((0, 0))
}

pub fn server_status(ctx: &mut Ctx) -> Result<Document> {
    let st = ctx.state;
    let up = st.started.elapsed();
    let oc = &st.opcounters;
    let (resident, virt) = resident_mb();
    let current = st.connections.current.load(Ordering::Relaxed);
    Ok(doc! {
        "host": nidus_common::hostname(),
        "version": super::info::COMPATIBLE_VERSION,
        "process": "mongod",
        "pid": std::process::id() as i64,
        "uptime": up.as_secs_f64().floor(),
        "uptimeMillis": up.as_millis() as i64,
        "uptimeEstimate": up.as_secs() as i64,
        "localTime": bson::DateTime::now(),
        "connections": {
            "current": current as i32,
            "available": (st.config.max_conns as i64 - current).clamp(0, i32::MAX as i64) as i32,
            "totalCreated": st.connections.total_created.load(Ordering::Relaxed),
            "active": st.connections.active.load(Ordering::Relaxed) as i32,
        },
        "opcounters": {
            "insert": oc.insert.load(Ordering::Relaxed),
            "query": oc.query.load(Ordering::Relaxed),
            "update": oc.update.load(Ordering::Relaxed),
            "delete": oc.delete.load(Ordering::Relaxed),
            "getmore": oc.getmore.load(Ordering::Relaxed),
            "command": oc.command.load(Ordering::Relaxed),
        },
        "mem": { "bits": 64, "resident": resident, "virtual": virt, "supported": true },
        "metrics": {
            "operation": { "writeConflicts": st.engine.metrics.write_conflicts.load(Ordering::Relaxed) as i64 },
            "ttl": {
                "deletedDocuments": st.engine.metrics.ttl_deleted_documents.load(Ordering::Relaxed) as i64,
                "passes": st.engine.metrics.ttl_passes.load(Ordering::Relaxed) as i64,
            },
            "cursor": st.cursors.metrics(),
        },
        "transactions": st.sessions.server_status(),
        "logicalSessionRecordCache": { "activeSessionsCount": st.sessions.active_sessions() as i64 },
        "storageEngine": { "name": "rocksdb", "supportsCommittedReads": true, "persistent": true },
        "security": { "authentication": st.auth.counters.to_document() },
        "nidus": { "walSyncs": st.engine.wal_syncs() as i64 },
    })
}

fn scale(ctx: &Ctx) -> Result<i64> {
    match ctx.opt_i64("scale")? {
        None => Ok(1),
        Some(n) if n >= 1 => Ok(n),
        Some(_) => Err(Error::bad_value("Scale factor must be greater than zero")),
    }
}

pub fn db_stats(ctx: &mut Ctx) -> Result<Document> {
    let scale = scale(ctx)?;
    let colls = ctx.state.engine.collections_in(&ctx.db);
    let objects: i64 = colls.iter().map(|c| c.count.load(Ordering::Relaxed)).sum();
    let data: i64 = colls
        .iter()
        .map(|c| c.data_size.load(Ordering::Relaxed))
        .sum();
    let indexes: i64 = colls
        .iter()
        .map(|c| c.meta.read().indexes.len() as i64)
        .sum();
    Ok(doc! {
        "db": ctx.db.clone(),
        "collections": colls.len() as i64,
        "views": ctx.state.engine.views_in(&ctx.db).len() as i64,
        "objects": objects,
        "avgObjSize": if objects > 0 { data as f64 / objects as f64 } else { 0.0 },
        "dataSize": (data / scale) as f64,
        "storageSize": (data / scale) as f64,
        "indexes": indexes,
        "indexSize": 0.0,
        "totalSize": (data / scale) as f64,
        "scaleFactor": scale,
        "fsUsedSize": 0.0,
        "fsTotalSize": 0.0,
    })
}

fn collection(ctx: &Ctx, field: &str) -> Result<std::sync::Arc<Collection>> {
    let ns = ctx.namespace(field)?;
    ctx.state.engine.collection(&ns).ok_or_else(|| {
        Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Collection [{ns}] not found."),
        )
    })
}

pub fn coll_stats(ctx: &mut Ctx) -> Result<Document> {
    let scale = scale(ctx)?;
    ctx.state
        .engine
        .check_not_view(&ctx.namespace(&ctx.command_name())?)?;
    let coll = collection(ctx, &ctx.command_name())?;
    let count = coll.count.load(Ordering::Relaxed);
    let size = coll.data_size.load(Ordering::Relaxed);
    let meta = coll.meta.read();
    let mut index_sizes = Document::new();
    for ix in &meta.indexes {
        index_sizes.insert(ix.name.clone(), 0i64);
    }
    let mut reply = doc! {
        "ns": coll.ns.full(),
        "size": size / scale,
        "count": count,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": size / scale,
        "nindexes": meta.indexes.len() as i32,
        "indexSizes": index_sizes,
        "totalIndexSize": 0i64,
        "totalSize": size / scale,
        "scaleFactor": scale,
        "capped": meta.options.get_bool("capped").unwrap_or(false),
    };
    if let Some(limits) = nidus_engine::capped::CappedLimits::of(&meta.options) {
        if let Some(max) = limits.max {
            reply.insert("max", max);
        }
        reply.insert("maxSize", limits.size / scale);
    }
    Ok(reply)
}

pub fn validate(ctx: &mut Ctx) -> Result<Document> {
    let coll = collection(ctx, "validate")?;
    let report = ctx.state.engine.validate(&coll)?;
    Ok(doc! {
        "ns": coll.ns.full(),
        "nInvalidDocuments": report.invalid_documents,
        "nNonCompliantDocuments": 0i64,
        "nrecords": report.records,
        "nIndexes": report.index_keys.len() as i32,
        "keysPerIndex": report.index_keys.iter().map(|(n, k)| (n.clone(), bson::Bson::Int64(*k))).collect::<Document>(),
        "valid": report.errors.is_empty(),
        "repaired": false,
        "warnings": [],
        "errors": report.errors.clone(),
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
    })
}
