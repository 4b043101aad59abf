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
    let mut reply = doc! {
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
        "nidus": {
            "walSyncs": st.engine.wal_syncs() as i64,
            "cache": {
                "maximum bytes configured": st.config.cache_bytes() as i64,
            },
        },
        "catalogStats": catalog_stats(ctx),
    };
    // RocksDB's statistics tickers, by their RocksDB names less the `rocksdb.` prefix.
    let mut rocks = Document::new();
    for (name, count) in st.engine.kv().statistics() {
        let name = name.strip_prefix("rocksdb.").unwrap_or(name);
        rocks.insert(name, i64::try_from(count).unwrap_or(i64::MAX));
    }
    reply.insert("rocksdb", rocks);
    if let Some(set) = &st.config.repl_set {
        let me = format!("{}:{}", nidus_common::hostname(), st.config.port);
        reply.insert(
            "repl",
            doc! {
                "topologyVersion": { "processId": st.process_id, "counter": 0i64 },
                "hosts": [me.clone()],
                "setName": set.clone(),
                "setVersion": 1,
                "isWritablePrimary": true,
                "secondary": false,
                "primary": me.clone(),
                "me": me,
                "rbid": 1,
            },
        );
    }
    Ok(reply)
}

/// `serverStatus().catalogStats`: how many collections and views exist, user and internal
/// (`system.*` and the `admin`, `config` and `local` databases).
fn catalog_stats(ctx: &Ctx) -> Document {
    let engine = &ctx.state.engine;
    let (mut colls, mut capped, mut internal_colls, mut views, mut internal_views) =
        (0i32, 0i32, 0i32, 0i32, 0i32);
    for db in engine.database_names() {
        let internal_db = matches!(db.as_str(), "admin" | "config" | "local");
        for c in engine.collections_in(&db) {
            if internal_db || c.ns.coll.starts_with("system.") {
                internal_colls += 1;
            } else {
                colls += 1;
                capped += i32::from(c.is_capped());
            }
        }
        let n = engine.views_in(&db).len() as i32;
        if internal_db {
            internal_views += n;
        } else {
            views += n;
        }
    }
    doc! {
        "collections": colls,
        "capped": capped,
        "clustered": 0,
        "timeseries": 0,
        "views": views,
        "internalCollections": internal_colls,
        "internalViews": internal_views,
        "csfle": 0,
        "queryableEncryption": 0,
    }
}

fn scale(ctx: &Ctx) -> Result<i64> {
    match ctx.opt_i64("scale")? {
        None => Ok(1),
        Some(n) if n >= 1 => Ok(n),
        Some(n) => Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'scale' value must be >= 1, actual value '{n}'"),
        )),
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
    let mut reply = doc! {
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
    };
    nidus_common::narrow_counters(&mut reply);
    Ok(reply)
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
    let ns = ctx.namespace(&ctx.command_name())?;
    ctx.state.engine.check_not_view(&ns)?;
    let mut reply = doc! { "ns": ns.full() };
    reply.extend(super::admin::storage_stats(ctx, &ns, scale)?);
    Ok(reply)
}

/// MongoDB's `parseValidateOptions`: combinations of options it refuses, checked before the
/// collection is looked up. Each option counts as set when truthy, as `trueValue()` reads it.
fn validate_options(ctx: &Ctx, ns: &nidus_engine::namespace::Namespace) -> Result<()> {
    let on = |k: &str| {
        ctx.body
            .get(k)
            .is_some_and(nidus_query::matcher::element::true_value)
    };
    let refused = |what: String| {
        Error::new(
            ErrorCode::InvalidOptions,
            format!("Running the validate command with {what}"),
        )
    };
    let replica_set = ctx.state.repl.is_some();
    // Pairs refused together, in MongoDB's order of checks.
    const EXCLUSIVE: [(&str, &str); 5] = [
        ("background", "full"),
        ("background", "enforceFastCount"),
        ("background", "repair"),
        ("enforceFastCount", "repair"),
        ("checkBSONConformance", "repair"),
    ];
    if let Some((a, b)) = EXCLUSIVE.iter().find(|(a, b)| on(a) && on(b)) {
        return Err(refused(format!(
            "both {{ {a}: true }} and {{ {b}: true }} is not supported."
        )));
    }
    let (background, full) = (on("background"), on("full"));
    let (fast_count, repair) = (on("enforceFastCount"), on("repair"));
    let check_bson = on("checkBSONConformance");
    if let Some(k) = ["repair", "fixMultikey"]
        .into_iter()
        .find(|k| on(k) && replica_set)
    {
        return Err(refused(format!(
            "{{ {k}: true }} can only be performed in standalone mode."
        )));
    }
    if ctx.body.contains_key("fixMultikey") && !on("fixMultikey") && repair {
        return Err(refused(
            "both { fixMultikey: false } and { repair: true } is not supported.".into(),
        ));
    }
    if on("metadata") && (background || full || fast_count || check_bson || repair) {
        return Err(refused(
            "{ metadata: true } is not supported with any other options".into(),
        ));
    }
    if background && !replica_set {
        return Err(Error::new(
            ErrorCode::CommandNotSupported,
            "Running the validate command with { background: true } is not supported in standalone mode",
        ));
    }
    if background && !ctx.state.engine.is_replicated(ns) {
        return Err(Error::new(
            ErrorCode::CommandNotSupported,
            "Running the validate command with { background: true } is not supported on unreplicated collections",
        ));
    }
    if background && ctx.body.contains_key("atClusterTime") {
        return Err(refused(
            "{ background: true } cannot be done with {atClusterTime: ...} because background already sets a read timestamp.".into(),
        ));
    }
    Ok(())
}

pub fn validate(ctx: &mut Ctx) -> Result<Document> {
    validate_options(ctx, &ctx.namespace("validate")?)?;
    let coll = collection(ctx, "validate")?;
    let report = ctx.state.engine.validate(&coll)?;
    let mut reply = doc! {
        "ns": coll.ns.full(),
        "nInvalidDocuments": report.invalid_documents,
        "nNonCompliantDocuments": 0i64,
        "nrecords": report.records,
        "nIndexes": report.index_keys.len() as i32,
        "keysPerIndex": report.index_keys.iter().map(|(n, k)| (n.clone(), nidus_common::number(*k))).collect::<Document>(),
        "valid": report.errors.is_empty(),
        "repaired": false,
        "warnings": [],
        "errors": report.errors.clone(),
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
    };
    nidus_common::narrow_counters(&mut reply);
    Ok(reply)
}
