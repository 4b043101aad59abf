//! Logical initial sync (MongoDB's `initialSyncMethod: "logical"`): a member that receives a
//! snapshot of a compacted Raft log (a new member, or one whose log ends before the leader's
//! first entry) copies the data the snapshot stands for from the primary.
//!
//! One attempt: drop every database but `local` and empty the oplog; note the source's term
//! and its newest oplog entry (the begin-applying time); clone every database and collection
//! (with the source's UUIDs and options), their documents and indexes, and views, over the
//! wire protocol; note the source's newest entry again (minValid); wait until the source's
//! majority commit point reaches minValid and the snapshot's optime, then fetch and apply the
//! source's oplog from the begin time through that commit point (idempotently, as MongoDB's
//! initial sync applies it). A source whose term changed meanwhile may have rolled back what
//! was copied: the attempt fails. A failed attempt, or a member stopped during one, starts
//! again from scratch (`LogStore::initial_sync_pending` survives a restart).
//!
//! The driver keeps running Raft meanwhile (STARTUP2): it appends and acknowledges entries,
//! and holds the committed ones until the sync is done; then committed entries at or before
//! the newest applied `ts` are skipped (the copied data holds them) and the rest applied.

use crate::state::OpTime;
use crate::sync_source::{SyncSource, BATCH};
use crate::{Coordinator, Input};
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::write::WriteOpts;
use nidus_engine::Engine;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long an attempt waits for the source's commit point to reach minValid.
const COMMIT_WAIT: Duration = Duration::from_secs(60);

/// What a finished initial sync applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// The newest oplog entry applied (the member's optime).
    pub applied: OpTime,
    /// The source's newest entry when the clone ended.
    pub min_valid: Timestamp,
}

/// Per-collection progress of the attempt running.
#[derive(Debug, Clone, Default)]
struct CollectionProgress {
    ns: String,
    documents_copied: i64,
    indexes: i32,
}

#[derive(Debug, Clone, Default)]
struct DatabaseProgress {
    name: String,
    collections: i32,
    cloned: Vec<CollectionProgress>,
}

/// `replSetGetStatus.initialSyncStatus` (MongoDB's fields where they are cheap).
#[derive(Debug, Clone)]
pub(crate) struct Status {
    /// `logical` or `fileCopyBased`.
    method: &'static str,
    /// A file copy's total and copied bytes.
    pub(crate) file_copy: Option<(i64, i64)>,
    start: bson::DateTime,
    started: Instant,
    failed_attempts: i32,
    attempts: Vec<Document>,
    attempt_started: Instant,
    oplog_start: Option<Timestamp>,
    oplog_end: Option<Timestamp>,
    applied_ops: i64,
    databases_to_clone: i32,
    databases: Vec<DatabaseProgress>,
}

/// The initial sync in progress on this member, if any.
#[derive(Default)]
pub(crate) struct Progress(Mutex<Option<Status>>);

impl Progress {
    fn begin(&self, method: &'static str) {
        let now = Instant::now();
        let mut g = self.0.lock();
        if g.is_none() {
            *g = Some(Status {
                method,
                file_copy: None,
                start: bson::DateTime::now(),
                started: now,
                failed_attempts: 0,
                attempts: Vec::new(),
                attempt_started: now,
                oplog_start: None,
                oplog_end: None,
                applied_ops: 0,
                databases_to_clone: 0,
                databases: Vec::new(),
            });
        }
        if let Some(s) = g.as_mut() {
            s.method = method;
            s.file_copy = None;
            s.attempt_started = now;
            s.oplog_start = None;
            s.oplog_end = None;
            s.applied_ops = 0;
            s.databases_to_clone = 0;
            s.databases.clear();
        }
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut Status)) {
        if let Some(s) = self.0.lock().as_mut() {
            f(s);
        }
    }

    fn failed(&self, source: &str, e: &Error) {
        self.update(|s| {
            s.failed_attempts += 1;
            s.attempts.push(doc! {
                "durationMillis": s.attempt_started.elapsed().as_millis() as i64,
                "status": format!("{}: {}", e.code.name(), e.message),
                "syncSource": source,
            });
        });
    }

    fn finish(&self) {
        *self.0.lock() = None;
    }

    /// The `initialSyncStatus` document while an initial sync runs.
    pub(crate) fn document(&self) -> Option<Document> {
        let g = self.0.lock();
        let s = g.as_ref()?;
        let mut dbs = doc! {
            "databasesToClone": s.databases_to_clone,
            "databasesCloned": s.databases.iter().filter(|d| d.cloned.len() as i32 >= d.collections).count() as i32,
        };
        for d in &s.databases {
            let mut db = doc! {
                "collections": d.collections,
                "clonedCollections": d.cloned.len() as i32,
            };
            for c in &d.cloned {
                db.insert(
                    c.ns.clone(),
                    doc! { "documentsCopied": c.documents_copied, "indexes": c.indexes },
                );
            }
            dbs.insert(d.name.clone(), db);
        }
        let mut out = doc! {
            "method": s.method,
            "failedInitialSyncAttempts": s.failed_attempts,
            "initialSyncStart": s.start,
            "totalInitialSyncElapsedMillis": s.started.elapsed().as_millis() as i64,
            "initialSyncAttempts": s.attempts.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            "appliedOps": s.applied_ops,
        };
        if let Some(ts) = s.oplog_start {
            out.insert("initialSyncOplogStart", ts);
        }
        if let Some(ts) = s.oplog_end {
            out.insert("initialSyncOplogEnd", ts);
        }
        match s.file_copy {
            Some((total, copied)) => {
                out.insert("approxTotalDataSize", total);
                out.insert("approxTotalBytesCopied", copied);
            }
            None if s.method == "logical" => {
                out.insert("databases", dbs);
            }
            None => {}
        }
        Some(out)
    }
}

/// Starts the initial sync on its own thread; it reports to the driver when done and retries
/// failed attempts (from scratch) until it succeeds or the member stops.
pub(crate) fn spawn(coord: Weak<Coordinator>) {
    let _ = std::thread::Builder::new()
        .name("repl-initial-sync".to_string())
        .spawn(move || run(coord));
}

fn run(weak: Weak<Coordinator>) {
    let mut failures: u32 = 0;
    loop {
        let Some(coord) = weak.upgrade() else { return };
        if coord.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Installed files of a file copy (this process restarted for them): their oplog
        // phase; else a new attempt of the configured method.
        let installed = coord.store.file_copy_state().ok().flatten();
        let file_copy = installed.is_some() || crate::file_copy::file_copy_method();
        coord.initial_sync.begin(if file_copy {
            "fileCopyBased"
        } else {
            "logical"
        });
        let Some(host) = source_host(&coord) else {
            drop(coord);
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let result = match &installed {
            Some(marker) => {
                eprintln!("replication: file copy initial sync: applying the oplog from {host}");
                let done = finish_file_copy(&coord, &host, marker);
                if done.is_err() {
                    // The next attempt starts over.
                    let _ = coord.store.clear_file_copy_state();
                }
                done
            }
            None if file_copy => {
                eprintln!(
                    "replication: file copy initial sync from {host} (attempt {})",
                    failures + 1
                );
                match crate::file_copy::download(&coord, &host) {
                    Ok(()) => Err(crate::file_copy::restart(coord.engine())),
                    Err(e) => Err(e),
                }
            }
            None => {
                eprintln!(
                    "replication: initial sync from {host} (attempt {})",
                    failures + 1
                );
                attempt(&coord, &host)
            }
        };
        match result {
            Ok(out) => {
                eprintln!(
                    "replication: initial sync done: applied through {:?}",
                    out.applied.ts
                );
                coord.send_input(Input::InitialSyncDone(out));
                return;
            }
            Err(e) => {
                if coord.stopping.load(Ordering::SeqCst) {
                    return;
                }
                eprintln!("replication: initial sync attempt failed: {}", e.message);
                coord.initial_sync.failed(&host, &e);
                failures += 1;
            }
        }
        drop(coord);
        std::thread::sleep(Duration::from_millis((200 * failures as u64).min(2000)));
    }
}

/// The sync source: the primary (it sent the snapshot).
fn source_host(coord: &Coordinator) -> Option<String> {
    let v = coord.view();
    (v.leader != 0 && v.leader != v.id)
        .then(|| coord.host_of(v.leader))
        .flatten()
}

fn ts_u64(ts: Timestamp) -> u64 {
    nidus_engine::oplog::ts_to_u64(ts)
}

pub(crate) fn stopped(coord: &Coordinator) -> Result<()> {
    if coord.stopping.load(Ordering::SeqCst) {
        return Err(Error::new(
            ErrorCode::InterruptedAtShutdown,
            "initial sync interrupted by shutdown",
        ));
    }
    Ok(())
}

fn attempt(coord: &Coordinator, host: &str) -> Result<Outcome> {
    let engine = coord.engine().clone();
    let oplog = engine
        .oplog()
        .cloned()
        .ok_or_else(|| Error::internal("initial sync without an oplog"))?;
    let mut src = SyncSource::new(host);
    drop_replicated_data(&engine)?;
    oplog.truncate_after(
        engine.kv(),
        Timestamp {
            time: 0,
            increment: 0,
        },
    )?;
    let (term, _) = src.term_and_commit_point()?;
    let begin = src
        .last_oplog_ts()?
        .ok_or_else(|| Error::internal("the sync source's oplog is empty"))?;
    coord.initial_sync.update(|s| s.oplog_start = Some(begin));

    let names = src.database_names()?;
    coord
        .initial_sync
        .update(|s| s.databases_to_clone = names.len() as i32);
    let pause = std::env::var("NIDUS_TEST_INITIAL_SYNC_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut paused = false;
    for db in &names {
        clone_database(coord, &engine, &mut src, db, &mut || {
            // A test hook (MongoDB's tests hang initial sync with fail points): holds the
            // clone after its first collection so a test can stop the member in the middle.
            if let (Some(ms), false) = (pause, paused) {
                paused = true;
                std::thread::sleep(Duration::from_millis(ms.min(60_000)));
            }
        })?;
    }

    apply_phase(coord, &engine, &mut src, term, begin)
}

/// The last phase of a file copy (its files are installed and carry the source's data as of
/// `begin` or later): this member's configuration document, then the source's oplog as the
/// logical sync applies it.
fn finish_file_copy(coord: &Coordinator, host: &str, marker: &[u8]) -> Result<Outcome> {
    let (source, begin, term) = crate::file_copy::parse_marker(marker)
        .ok_or_else(|| Error::internal("unreadable file copy marker"))?;
    if source != host {
        eprintln!("replication: file copy from {source}, its oplog from {host}");
    }
    let engine = coord.engine().clone();
    if let Some(config) = coord.store.config().map_err(crate::store_error)? {
        let config = bson::Document::from_reader(&config[..])
            .map_err(|e| Error::internal(e.to_string()))
            .and_then(|d| crate::config::ReplSetConfig::parse(&d))?;
        coord.save_config_document(&config)?;
    }
    coord.observe_timestamp(begin);
    coord.initial_sync.update(|s| s.oplog_start = Some(begin));
    let mut src = SyncSource::new(host);
    let (t, _) = src.term_and_commit_point()?;
    if t != term {
        return Err(Error::internal(format!(
            "the sync source's term changed from {term} to {t} since its files were copied"
        )));
    }
    apply_phase(coord, &engine, &mut src, term, begin)
}

/// Applies the source's oplog from `begin` (the data holds every write up to it) through the
/// source's majority commit point once it passed minValid (its newest entry now).
fn apply_phase(
    coord: &Coordinator,
    engine: &Arc<Engine>,
    src: &mut SyncSource,
    term: i64,
    begin: Timestamp,
) -> Result<Outcome> {
    let min_valid = src.last_oplog_ts()?.unwrap_or(begin);
    let target = coord
        .store
        .snapshot_data()
        .optime
        .map_or(0, |o| ts_u64(o.ts));
    let need = ts_u64(min_valid).max(target);
    coord
        .initial_sync
        .update(|s| s.oplog_end = Some(nidus_engine::oplog::u64_to_ts(need)));
    // Only majority-committed entries are applied (nothing a source's rollback could undo).
    let deadline = Instant::now() + COMMIT_WAIT;
    let committed = loop {
        stopped(coord)?;
        let (t, committed) = src.term_and_commit_point()?;
        if t != term {
            return Err(Error::internal(format!(
                "the sync source's term changed from {term} to {t} during the initial sync"
            )));
        }
        if ts_u64(committed) >= need {
            break committed;
        }
        if Instant::now() > deadline {
            return Err(Error::new(
                ErrorCode::ExceededTimeLimit,
                "the sync source's majority commit point did not reach minValid in time",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if src
        .first_oplog_ts()?
        .is_none_or(|first| ts_u64(first) > ts_u64(begin))
    {
        return Err(Error::new(
            ErrorCode::OplogStartMissing,
            format!("the sync source's oplog no longer holds the begin-applying time {begin:?}"),
        ));
    }
    let applied = apply_oplog(coord, engine, src, begin, committed)?;
    let (t, _) = src.term_and_commit_point()?;
    if t != term {
        return Err(Error::internal(format!(
            "the sync source's term changed from {term} to {t} during the initial sync"
        )));
    }
    coord.initial_sync.finish();
    Ok(Outcome { applied, min_valid })
}

/// Drops every database but `local` (without logging): what a previous attempt copied, or
/// the data of a member that fell too far behind.
fn drop_replicated_data(engine: &Engine) -> Result<()> {
    engine.without_oplog(|| {
        for db in engine.database_names() {
            match db.as_str() {
                "local" => {}
                // Pre-images are this member's own (written with its oplog entries).
                "config" => {
                    for coll in engine.collections_in(&db) {
                        if !nidus_engine::preimages::is_preimages(&coll.ns) {
                            engine.drop_collection(&coll.ns)?;
                        }
                    }
                    for view in engine.views_in(&db) {
                        engine.drop_view(&view.ns)?;
                    }
                }
                _ => {
                    engine.drop_database(&db)?;
                }
            }
        }
        Ok(())
    })
}

fn clone_database(
    coord: &Coordinator,
    engine: &Engine,
    src: &mut SyncSource,
    db: &str,
    after_collection: &mut dyn FnMut(),
) -> Result<()> {
    let listed = src.all(
        &doc! {
            "listCollections": 1,
            "$db": db,
            "$readPreference": { "mode": "primaryPreferred" },
        },
        db,
    )?;
    coord.initial_sync.update(|s| {
        s.databases.push(DatabaseProgress {
            name: db.to_string(),
            collections: listed.len() as i32,
            cloned: Vec::new(),
        })
    });
    for info in &listed {
        stopped(coord)?;
        let name = info.get_str("name").unwrap_or_default();
        let ns = Namespace::new(db, name);
        let options = info.get_document("options").cloned().unwrap_or_default();
        let mut progress = CollectionProgress {
            ns: ns.full(),
            ..Default::default()
        };
        match info.get_str("type").unwrap_or("collection") {
            "view" => {
                let def = nidus_engine::view::ViewDef::from_options(&ns, &options);
                engine.without_oplog(|| engine.create_view(def))?;
            }
            // A time-series collection: its buckets collection is listed (and cloned) before
            // it; the view over it is made here.
            "timeseries" => {
                let ts = options
                    .get_document("timeseries")
                    .ok()
                    .and_then(nidus_engine::timeseries::options::TimeseriesOptions::from_document)
                    .ok_or_else(|| {
                        Error::internal(format!("{ns}: the source lists no time-series options"))
                    })?;
                let def = nidus_engine::view::ViewDef {
                    ns: ns.clone(),
                    view_on: nidus_engine::timeseries::buckets_ns(&ns).coll,
                    pipeline: ts.view_pipeline(),
                    collation: None,
                };
                engine.without_oplog(|| engine.create_view(def))?;
            }
            "collection" if nidus_engine::preimages::is_preimages(&ns) => {}
            "collection" => {
                progress.documents_copied = clone_collection(coord, engine, src, &ns, info)?;
                progress.indexes = clone_indexes(engine, src, &ns)?;
            }
            other => {
                eprintln!("replication: initial sync skips {ns} of type {other}");
            }
        }
        coord.initial_sync.update(|s| {
            if let Some(d) = s.databases.iter_mut().find(|d| d.name == db) {
                d.cloned.push(progress);
            }
        });
        after_collection();
    }
    Ok(())
}

/// Creates the collection with the source's UUID and options and copies its documents.
/// Returns how many.
fn clone_collection(
    coord: &Coordinator,
    engine: &Engine,
    src: &mut SyncSource,
    ns: &Namespace,
    info: &Document,
) -> Result<i64> {
    let options = info.get_document("options").cloned().unwrap_or_default();
    let uuid = match info.get_document("info").ok().and_then(|i| i.get("uuid")) {
        Some(Bson::Binary(b)) => b.to_uuid().ok(),
        _ => None,
    };
    let coll = engine.without_oplog(|| match uuid {
        Some(u) => engine.create_collection_with_uuid(ns, options.clone(), u),
        None => engine.create_collection(ns, options.clone()),
    })?;
    let opts = WriteOpts {
        bypass_document_validation: true,
        ..WriteOpts::default()
    };
    let capped = matches!(options.get("capped"), Some(Bson::Boolean(true)));
    let mut copied = 0i64;
    let cmd = doc! {
        "find": &ns.coll,
        "filter": {},
        "batchSize": BATCH,
        "$db": &ns.db,
        "$readPreference": { "mode": "primaryPreferred" },
    };
    src.each_batch(&cmd, &ns.db, |docs| {
        stopped(coord)?;
        let raws = docs
            .iter()
            .map(|d| {
                nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let batch: Vec<(&bson::RawDocument, &WriteOpts)> =
            raws.iter().map(|r| (r.as_ref(), &opts)).collect();
        engine.without_oplog(|| {
            // A capped collection (refused by a batch insert) takes them one at a time, in
            // the source's order.
            if capped || engine.insert_batch(&coll, &batch).is_err() {
                for r in &raws {
                    engine.insert_one(&coll, r, &opts)?;
                }
            }
            Ok(())
        })?;
        copied += raws.len() as i64;
        Ok(())
    })?;
    Ok(copied)
}

/// Builds the source's indexes of `ns` (the `_id` index exists with the collection).
fn clone_indexes(engine: &Engine, src: &mut SyncSource, ns: &Namespace) -> Result<i32> {
    let specs = src.all(
        &doc! {
            "listIndexes": &ns.coll,
            "$db": &ns.db,
            "$readPreference": { "mode": "primaryPreferred" },
        },
        &ns.db,
    )?;
    let count = specs.len() as i32;
    let specs: Vec<Document> = specs
        .into_iter()
        .filter(|s| s.get_str("name").ok() != Some("_id_"))
        .collect();
    if !specs.is_empty() {
        engine.without_oplog(|| engine.create_indexes(ns, &specs).map(|_| ()))?;
    }
    Ok(count)
}

/// Applies the source's oplog entries after `begin` through `through` (the entry at `begin`
/// itself is in the cloned data and is only written to the oplog). Returns the newest
/// entry's optime.
fn apply_oplog(
    coord: &Coordinator,
    engine: &Arc<Engine>,
    src: &mut SyncSource,
    begin: Timestamp,
    through: Timestamp,
) -> Result<OpTime> {
    let mut applied = OpTime::default();
    let cmd = doc! {
        "find": "oplog.rs",
        "filter": { "ts": { "$gte": begin, "$lte": through } },
        "batchSize": BATCH,
        "$db": "local",
        "$readPreference": { "mode": "primaryPreferred" },
    };
    src.each_batch(&cmd, "local", |entries| {
        stopped(coord)?;
        for entry in entries {
            let raw = nidus_common::encode::document_to_raw(&entry)
                .map_err(|e| Error::internal(e.to_string()))?;
            let ts = entry
                .get_timestamp("ts")
                .map_err(|_| Error::bad_value("oplog entry without a ts"))?;
            if ts_u64(ts) <= ts_u64(begin) {
                engine.apply_replicated(&raw, || Ok(()))?;
            } else {
                crate::apply::apply_entry(engine, &raw, Some(&entry)).map_err(|e| {
                    Error::internal(format!("cannot apply oplog entry {entry}: {}", e.message))
                })?;
                coord.initial_sync.update(|s| s.applied_ops += 1);
            }
            if let Some(op) = OpTime::of_raw(&raw) {
                applied = op;
                coord.observe_timestamp(op.ts);
            }
        }
        Ok(())
    })?;
    if applied.term < 0 && applied.ts.time == 0 {
        return Err(Error::new(
            ErrorCode::OplogStartMissing,
            "the sync source's oplog returned no entry from the begin-applying time",
        ));
    }
    Ok(applied)
}
