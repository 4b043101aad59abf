//! Rollback: a member whose oplog holds entries the set does not (writes it took as primary
//! that no majority received) undoes them, as MongoDB's rollback via refetch does.
//!
//! The common point is found by Raft: when the leader's entries conflict with this member's
//! log, Raft truncates the log from the first conflicting index, and every oplog entry of
//! this member after the newest entry before that index is divergent (entries this member
//! wrote but never proposed come after it too: proposals go in `ts` order). Committed entries
//! are never truncated by Raft, so nothing majority-acknowledged is rolled back.
//!
//! Undo: each document a divergent entry touched is fetched from the sync source (the
//! primary; from its collection with the entry's UUID, whatever its name there) and written
//! back locally, to the collection with that UUID, without being logged (deleted when the
//! source lacks it); the local version is first saved under `<dbpath>/rollback/<collection uuid>/
//! removed.<time>.bson`, as MongoDB does. Collections created by divergent entries are
//! dropped (their documents saved first), also when the source has one of that name: its own,
//! with another UUID, comes back with the source's entries after the common point. Views
//! (which have no UUID) the divergent entries created, changed or dropped are made the
//! source's again by name. Then the oplog is truncated to the common point. The member's data now reflects the source at the time of
//! the fetch, later than the common point; it stays RECOVERING until it applied the source's
//! entries up to that time (MongoDB's minValid), so no read sees a mixed state.
//!
//! The pending common point is persisted (`raft\0rollback`) before Raft's log is truncated,
//! so a member that stops mid-rollback resumes it at start.

use crate::sync_source::SyncSource;
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;
use nidus_storage::Space;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;

const PENDING_KEY: &[u8] = b"raft\0rollback";
/// Documents per `find` on the sync source.
const FETCH_BATCH: usize = 500;

/// Divergent entries named in the log, one line each (MongoDB logs each at a higher
/// verbosity; the first ones are what explains a rollback).
const LOGGED_ENTRIES: usize = 100;

/// The `_id` of the document a CRUD entry wrote (`o2._id` for an update, `o._id` for an
/// insert or delete); `None` for commands and no-ops.
fn document_id(entry: &Document) -> Option<&Bson> {
    let field = match entry.get_str("op").unwrap_or("n") {
        "u" => "o2",
        "i" | "d" => "o",
        _ => return None,
    };
    entry.get_document(field).ok()?.get("_id")
}

/// An entry in one line: optime, kind, namespace, collection UUID, and the `_id` or command.
fn summary(entry: &Document) -> String {
    let what = match entry.get_str("op").unwrap_or("n") {
        "u" | "i" | "d" => document_id(entry).map(|id| format!("_id {id}")),
        _ => entry.get_document("o").ok().map(|o| o.to_string()),
    };
    format!(
        "{} {} {} {} {}",
        entry.get("ts").map(|t| t.to_string()).unwrap_or_default(),
        entry.get_str("op").unwrap_or("?"),
        entry.get_str("ns").unwrap_or_default(),
        crate::apply::ui_of(entry)
            .map(|u| u.to_string())
            .unwrap_or_default(),
        what.unwrap_or_default()
    )
}

/// The persisted common point of a rollback not finished yet.
pub(crate) fn pending(engine: &Engine) -> Option<Timestamp> {
    let v = engine
        .kv()
        .snapshot()
        .get(Space::Catalog, PENDING_KEY)
        .ok()??;
    let n = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    Some(nidus_engine::oplog::u64_to_ts(n))
}

pub(crate) fn set_pending(engine: &Engine, common: Option<Timestamp>) -> Result<()> {
    let mut txn = engine.kv().begin();
    match common {
        Some(ts) => txn.put(
            Space::Catalog,
            PENDING_KEY,
            &nidus_engine::oplog::ts_to_u64(ts).to_be_bytes(),
        )?,
        None => txn.delete(Space::Catalog, PENDING_KEY)?,
    }
    txn.commit()?;
    Ok(())
}

/// Which collection a divergent entry changed documents of: the one with its UUID (`ui`),
/// whatever its name was then (one name can have held several collections, and one
/// collection several names), or the one of its name when it logged no UUID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Uuid(bson::Uuid),
    Name(String),
}

/// What the divergent entries touched.
#[derive(Default, Debug)]
struct Affected {
    /// Per collection: a name the entries gave it and the `_id`s of changed documents.
    docs: BTreeMap<Target, (String, Vec<Bson>)>,
    /// Collections the divergent entries created: name and UUID (a name can be created,
    /// dropped or renamed away, and created again).
    created: BTreeSet<(String, Option<bson::Uuid>)>,
    /// Collections whose catalog state divergent DDL changed (index builds and drops,
    /// `collMod`, renames, drops), by UUID: their state is made the sync source's again.
    ddl: BTreeSet<bson::Uuid>,
    /// Views the divergent entries created, changed or dropped: made the source's again.
    views: BTreeSet<String>,
    /// Commands rolled back only partly (their effect other than on documents stays).
    unsupported: Vec<String>,
}

impl Affected {
    fn note_doc(&mut self, ns: &str, ui: Option<bson::Uuid>, id: Bson) {
        let target = ui.map_or_else(|| Target::Name(ns.to_string()), Target::Uuid);
        let e = self
            .docs
            .entry(target)
            .or_insert_with(|| (ns.to_string(), Vec::new()));
        if !e.1.contains(&id) {
            e.1.push(id);
        }
    }

    fn note(&mut self, entry: &Document) {
        let ns = entry.get_str("ns").unwrap_or_default();
        let ui = crate::apply::ui_of(entry);
        let o = entry.get_document("o").cloned().unwrap_or_default();
        match entry.get_str("op").unwrap_or("n") {
            "i" | "d" | "u" => {
                if let Some(id) = document_id(entry) {
                    self.note_doc(ns, ui, id.clone());
                }
            }
            "c" => {
                let db = ns.split('.').next().unwrap_or_default();
                match o.iter().next() {
                    Some((cmd, Bson::String(c))) if cmd == "create" => {
                        if o.contains_key("viewOn") {
                            self.views.insert(format!("{db}.{c}"));
                        } else {
                            self.created.insert((format!("{db}.{c}"), ui));
                        }
                    }
                    Some((cmd, _)) if cmd == "applyOps" => {
                        for op in o.get_array("applyOps").into_iter().flatten() {
                            if let Bson::Document(op) = op {
                                self.note(op);
                            }
                        }
                    }
                    Some((cmd, _))
                        if matches!(
                            cmd.as_str(),
                            "createIndexes"
                                | "dropIndexes"
                                | "collMod"
                                | "renameCollection"
                                | "drop"
                        ) =>
                    {
                        let Some(uuid) = ui else {
                            // A view has no UUID: its `drop` and `collMod` name none.
                            match (cmd.as_str(), o.get_str(cmd)) {
                                ("drop" | "collMod", Ok(c)) => {
                                    self.views.insert(format!("{db}.{c}"));
                                }
                                _ => self.unsupported.push(format!("{cmd} on {ns}")),
                            }
                            return;
                        };
                        self.ddl.insert(uuid);
                        // A rename that dropped its target names the target's UUID: that
                        // collection comes back as the sync source has it.
                        if let Some(Bson::Binary(b)) = o.get("dropTarget") {
                            if let Ok(dropped) = b.to_uuid() {
                                self.ddl.insert(dropped);
                            }
                        }
                    }
                    Some((cmd, _)) => self.unsupported.push(format!("{cmd} on {ns}")),
                    None => {}
                }
            }
            _ => {}
        }
    }
}

/// Reads of the sync source a rollback needs.
trait RollbackSource {
    fn fetch(&mut self, ns: &Namespace, ids: &[Bson]) -> Result<Vec<Document>>;
    /// How the source's `listCollections` lists `ns` (a collection or a view), if it has it.
    fn listed_info(&mut self, ns: &Namespace) -> Result<Option<Document>>;

    /// Whether the source has `ns` (a collection or a view), and the collection's UUID.
    fn listed(&mut self, ns: &Namespace) -> Result<Option<Option<bson::Uuid>>> {
        Ok(self.listed_info(ns)?.as_ref().map(uuid_of_listed))
    }
}

impl RollbackSource for SyncSource {
    /// The source's documents of `ns` with the given `_id`s.
    fn fetch(&mut self, ns: &Namespace, ids: &[Bson]) -> Result<Vec<Document>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(FETCH_BATCH) {
            let cmd = doc! {
                "find": &ns.coll,
                "filter": { "_id": { "$in": chunk.to_vec() } },
                "batchSize": FETCH_BATCH as i32 * 2,
                "$db": &ns.db,
                "$readPreference": { "mode": "primaryPreferred" },
            };
            out.extend(self.all(&cmd, &ns.db)?);
        }
        Ok(out)
    }

    fn listed_info(&mut self, ns: &Namespace) -> Result<Option<Document>> {
        let reply = self.run(&doc! {
            "listCollections": 1,
            "filter": { "name": &ns.coll },
            "$db": &ns.db,
            "$readPreference": { "mode": "primaryPreferred" },
        })?;
        Ok(reply
            .get_document("cursor")
            .and_then(|c| c.get_array("firstBatch"))
            .ok()
            .and_then(|b| b.first())
            .and_then(Bson::as_document)
            .cloned())
    }
}

/// What one rollback did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub entries: usize,
    pub documents: usize,
    /// The source's optime when its documents were read: the member is consistent once it
    /// applied up to here.
    pub min_valid: Option<Timestamp>,
}

/// `<dbpath>/rollback`: the spill directory is `<dbpath>/_tmp`.
fn rollback_dir(engine: &Engine) -> std::path::PathBuf {
    let spill = engine.spill_dir();
    spill
        .parent()
        .map_or_else(|| spill.clone(), |p| p.to_path_buf())
        .join("rollback")
}

/// MongoDB's file-name time: `2026-11-25T04-10-00.0`.
fn file_time() -> String {
    let t = bson::DateTime::now()
        .try_to_rfc3339_string()
        .unwrap_or_default();
    format!("{}.0", t.get(..19).unwrap_or("unknown").replace(':', "-"))
}

fn save_removed(dir: &std::path::Path, time: &str, docs: &[Document]) -> Result<()> {
    if docs.is_empty() {
        return Ok(());
    }
    let io =
        |e: std::io::Error| Error::internal(format!("rollback file in {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let path = dir.join(format!("removed.{time}.bson"));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io)?;
    for d in docs {
        let raw =
            nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))?;
        f.write_all(raw.as_bytes()).map_err(io)?;
    }
    f.sync_all().map_err(io)
}

/// Rolls this member back to `common` (its oplog's newest entry the set holds), refetching
/// from `source_host`.
pub(crate) fn run(engine: &Engine, common: Timestamp, source_host: &str) -> Result<Outcome> {
    let Some(oplog) = engine.oplog() else {
        return Ok(Outcome::default());
    };
    let entries = oplog.read_after(engine.kv(), common, usize::MAX)?;
    if entries.is_empty() {
        // Raft replaced entries this member had received but not applied: nothing to undo.
        return Ok(Outcome::default());
    }
    let mut affected = Affected::default();
    for (i, raw) in entries.iter().enumerate() {
        let d = Document::try_from(raw.as_ref()).map_err(|e| Error::internal(e.to_string()))?;
        if i < LOGGED_ENTRIES {
            eprintln!("replication: rollback undoes {}", summary(&d));
        }
        affected.note(&d);
    }
    if entries.len() > LOGGED_ENTRIES {
        eprintln!(
            "replication: rollback undoes {} more entries",
            entries.len() - LOGGED_ENTRIES
        );
    }
    for u in &affected.unsupported {
        eprintln!("replication: rollback leaves the effect of {u} in place");
    }
    let mut source = SyncSource::new(source_host);
    let mut out = Outcome {
        entries: entries.len(),
        ..Default::default()
    };
    // Everything is read from the source before anything changes here, so a source that
    // fails midway leaves this member as it was (the rollback is retried); only a collection
    // a divergent entry dropped is copied from the source while it is recreated.
    let catalog = SourceCatalog::read(&mut source, &affected)?;
    let created_uuids: BTreeSet<bson::Uuid> =
        affected.created.iter().filter_map(|(_, ui)| *ui).collect();
    let mut fetched = Vec::new();
    for (target, (ns_str, ids)) in &affected.docs {
        let (ns, docs) = match target {
            // The whole collection is divergent: dropped below.
            Target::Uuid(u) if created_uuids.contains(u) => continue,
            // The source's versions are in its collection with the entries' UUID, whatever
            // its name there (renamed after the common point, here or there).
            Target::Uuid(u) => match catalog.names.get(u) {
                Some(ns) => (ns.clone(), source.fetch(ns, ids)?),
                // The source dropped the collection: it holds none of these documents.
                None => (Namespace::parse(ns_str)?, Vec::new()),
            },
            Target::Name(_) => {
                let ns = Namespace::parse(ns_str)?;
                let docs = source.fetch(&ns, ids)?;
                (ns, docs)
            }
        };
        fetched.push((ns, target, ids, docs));
    }
    let mut drop_created = Vec::new();
    for (ns_str, ui) in &affected.created {
        let ns = Namespace::parse(ns_str)?;
        if ui.is_some() || source.listed(&ns)?.is_none() {
            drop_created.push((ns, *ui));
        }
    }
    // Each view as the source has it (None: it has no view of that name).
    let mut views = Vec::new();
    for ns_str in &affected.views {
        let ns = Namespace::parse(ns_str)?;
        let info = source.listed_info(&ns)?;
        let def = info.filter(|i| i.get_str("type") == Ok("view")).map(|i| {
            let options = i.get_document("options").cloned().unwrap_or_default();
            nidus_engine::view::ViewDef::from_options(&ns, &options)
        });
        views.push((ns, def));
    }
    // The source kept taking writes while it was read: a collection renamed there since its
    // catalog was read means documents were read from whichever collection had the name
    // then. The attempt is given up before anything changed here, and tried again.
    for (ns, target, _, _) in &fetched {
        if let Target::Uuid(u) = target {
            if catalog.names.contains_key(u) && source.listed(ns)?.flatten() != Some(*u) {
                return Err(Error::internal(format!(
                    "rollback: {ns} on the sync source is no longer the collection {u}"
                )));
            }
        }
    }
    let time = file_time();
    let dir = rollback_dir(engine);
    let opts = WriteOpts {
        bypass_document_validation: true,
        ..WriteOpts::default()
    };
    engine.without_oplog(|| {
        for uuid in &affected.ddl {
            restore_collection(engine, &mut source, &catalog, *uuid, &dir, &time)?;
        }
        for &(ref ns, target, ids, ref docs) in &fetched {
            // The documents' collection here is the one with the entries' UUID: its name
            // here can differ from the source's (the source renamed it after the common
            // point, or a divergent rename is undone by a later rollback), and the divergent
            // versions are in it whatever its name. Another collection of that name is not
            // it. A UUID missing here is a collection the source lacks too (one the source
            // has was recreated above).
            let local = match target {
                Target::Uuid(u) => crate::apply::collection_by_uuid(engine, *u),
                Target::Name(_) => engine.collection(ns),
            };
            let mut removed = Vec::new();
            if let Some(coll) = &local {
                for id in ids {
                    let found = crate::apply::find_one(engine, coll, &doc! { "_id": id.clone() })?;
                    removed.extend(found);
                }
            }
            let uuid = match target {
                Target::Uuid(u) => Some(*u),
                Target::Name(_) => local.as_ref().map(|c| c.meta.read().uuid),
            };
            let sub = uuid.map_or_else(|| ns.to_string(), |u| u.to_string());
            save_removed(&dir.join(sub), &time, &removed)?;
            let by_name = matches!(target, Target::Name(_)) && !docs.is_empty();
            let Some(coll) =
                local.or_else(|| by_name.then(|| engine.ensure_collection(ns).ok()).flatten())
            else {
                continue;
            };
            // Deletes first, so a restored document cannot collide on a unique index with
            // a divergent one.
            for id in ids {
                engine.delete(&coll, &doc! { "_id": id.clone() }, false, None, &opts)?;
            }
            for d in docs {
                let Some(id) = d.get("_id") else { continue };
                let spec = UpdateSpec {
                    filter: doc! { "_id": id.clone() },
                    update: Update::Replacement(d.clone()),
                    multi: false,
                    upsert: true,
                    sort: None,
                    hint: None,
                };
                // A unique-key collision with a document this member has not updated yet
                // is resolved by the entries it applies next (up to minValid).
                if let Err(e) = engine.update(&coll, &spec, &opts) {
                    eprintln!(
                        "replication: rollback defers {} {{_id: {id}}}: {}",
                        ns, e.message
                    );
                }
            }
            out.documents += ids.len();
        }
        for (ns, ui) in &drop_created {
            // By UUID: the name may be another collection's by now (one the source has and
            // `restore_collection` brought back).
            let local = match ui {
                Some(u) => crate::apply::collection_by_uuid(engine, *u),
                None => engine.collection(ns),
            };
            if let Some(coll) = local {
                eprintln!(
                    "replication: rollback drops {} (created by a divergent entry)",
                    coll.ns
                );
                drop_saving(engine, &coll.ns, &dir, &time)?;
            }
        }
        // After the collections: a view's name may have been a divergent collection's.
        for (ns, def) in &views {
            restore_view(engine, ns, def.clone())?;
        }
        // Indexes and options last: a unique index the source has may need the restored
        // documents.
        for uuid in &affected.ddl {
            restore_indexes_and_options(engine, &catalog, *uuid)?;
        }
        Ok(())
    })?;
    // Read after everything else read from the source (a recreated collection's copy
    // included): the member's data is consistent once it applied the source's entries up to
    // here.
    let min_valid = source
        .last_oplog_ts()
        .map_err(|e| Error::internal(format!("rollback: {}", e.message)))?;
    oplog.truncate_after(engine.kv(), common)?;
    out.min_valid = min_valid;
    Ok(out)
}

/// The sync source's catalog state of the collections divergent DDL changed.
#[derive(Default)]
struct SourceCatalog {
    /// Every collection of the source's databases (a collection keeps its UUID when renamed,
    /// also into another database): its name on the source.
    names: BTreeMap<bson::Uuid, Namespace>,
    /// The changed ones the source has: options and index specs.
    state: BTreeMap<bson::Uuid, (Document, Vec<Document>)>,
}

impl SourceCatalog {
    fn read(source: &mut SyncSource, affected: &Affected) -> Result<SourceCatalog> {
        let mut out = SourceCatalog::default();
        // A collection keeps its UUID when renamed into another database: all are listed.
        let dbs = if !affected.ddl.is_empty()
            || affected.docs.keys().any(|t| matches!(t, Target::Uuid(_)))
        {
            source.database_names()?
        } else {
            Vec::new()
        };
        for db in &dbs {
            let listed = source.all(
                &doc! {
                    "listCollections": 1,
                    "filter": { "type": "collection" },
                    "$db": db,
                    "$readPreference": { "mode": "primaryPreferred" },
                },
                db,
            )?;
            for info in listed {
                let (Some(uuid), Ok(name)) = (uuid_of_listed(&info), info.get_str("name")) else {
                    continue;
                };
                let ns = Namespace::new(db, name);
                if affected.ddl.contains(&uuid) {
                    let indexes = source.all(
                        &doc! {
                            "listIndexes": name,
                            "$db": db,
                            "$readPreference": { "mode": "primaryPreferred" },
                        },
                        db,
                    )?;
                    let options = info.get_document("options").cloned().unwrap_or_default();
                    out.state.insert(uuid, (options, indexes));
                }
                out.names.insert(uuid, ns);
            }
        }
        Ok(out)
    }
}

/// Makes the view at `ns` the source's (`want`), or removes it when the source has none.
fn restore_view(
    engine: &Engine,
    ns: &Namespace,
    want: Option<nidus_engine::view::ViewDef>,
) -> Result<()> {
    let local = engine.view(ns);
    if local.as_deref() == want.as_ref() {
        return Ok(());
    }
    if local.is_some() {
        eprintln!("replication: rollback drops view {ns}");
        engine.drop_view(ns)?;
    }
    if let Some(def) = want {
        eprintln!("replication: rollback restores view {ns} from the sync source");
        // A view on another view the rollback has not restored yet, or a name a collection
        // still holds, is left to the entries applied next (up to minValid).
        if let Err(e) = engine.create_view(def) {
            eprintln!(
                "replication: rollback cannot restore view {ns}: {}",
                e.message
            );
        }
    }
    Ok(())
}

/// The UUID of a collection as `listCollections` lists it (none for a view).
fn uuid_of_listed(info: &Document) -> Option<bson::Uuid> {
    match info.get_document("info").ok().and_then(|i| i.get("uuid")) {
        Some(Bson::Binary(b)) => b.to_uuid().ok(),
        _ => None,
    }
}

/// Saves the documents of the local collection at `ns` and drops it.
fn drop_saving(engine: &Engine, ns: &Namespace, dir: &std::path::Path, time: &str) -> Result<()> {
    if let Some(coll) = engine.collection(ns) {
        let uuid = coll.meta.read().uuid;
        let docs = all_docs(engine, &coll)?;
        save_removed(&dir.join(uuid.to_string()), time, &docs)?;
        engine.drop_collection(ns)?;
    }
    Ok(())
}

/// Undoes divergent DDL's effect on which collection exists where: a collection the source
/// lacks is dropped, one renamed is renamed back, one dropped is recreated from the source
/// (UUID, options, documents, indexes).
fn restore_collection(
    engine: &Engine,
    source: &mut SyncSource,
    catalog: &SourceCatalog,
    uuid: bson::Uuid,
    dir: &std::path::Path,
    time: &str,
) -> Result<()> {
    let local = crate::apply::collection_by_uuid(engine, uuid);
    let (Some(want), Some((options, indexes))) =
        (catalog.names.get(&uuid), catalog.state.get(&uuid))
    else {
        if let Some(coll) = local {
            eprintln!(
                "replication: rollback drops {} (the sync source lacks it)",
                coll.ns
            );
            drop_saving(engine, &coll.ns, dir, time)?;
        }
        return Ok(());
    };
    // Another collection in the way (created by a divergent entry under this name).
    if let Some(other) = engine.collection(want) {
        if other.meta.read().uuid != uuid {
            drop_saving(engine, want, dir, time)?;
        }
    }
    match local {
        Some(coll) if coll.ns != *want => {
            eprintln!("replication: rollback renames {} back to {want}", coll.ns);
            engine.rename_collection(&coll.ns, want, false)?;
        }
        Some(_) => {}
        None => {
            eprintln!("replication: rollback recreates {want} from the sync source");
            let coll = engine.create_collection_with_uuid(want, options.clone(), uuid)?;
            let opts = WriteOpts {
                bypass_document_validation: true,
                ..WriteOpts::default()
            };
            let cmd = doc! {
                "find": &want.coll,
                "filter": {},
                "batchSize": FETCH_BATCH as i32,
                "$db": &want.db,
                "$readPreference": { "mode": "primaryPreferred" },
            };
            let copied = source
                .each_batch(&cmd, &want.db, |docs| {
                    for d in docs {
                        let raw = nidus_common::encode::document_to_raw(&d)
                            .map_err(|e| Error::internal(e.to_string()))?;
                        engine.insert_one(&coll, &raw, &opts)?;
                    }
                    Ok(())
                })
                .and_then(|()| {
                    // Copied by name: the source may have renamed another collection to it
                    // meanwhile.
                    if source.listed(want)?.flatten() != Some(uuid) {
                        return Err(Error::internal(format!(
                            "rollback: {want} on the sync source is no longer the collection {uuid}"
                        )));
                    }
                    let specs: Vec<Document> = indexes
                        .iter()
                        .filter(|s| s.get_str("name").ok() != Some("_id_"))
                        .cloned()
                        .collect();
                    if specs.is_empty() {
                        Ok(())
                    } else {
                        engine.create_indexes(want, &specs).map(|_| ())
                    }
                });
            if let Err(e) = copied {
                // A copy cut short must not pass for the collection when the rollback is
                // tried again (it would find the UUID here and keep it as it is).
                let _ = engine.drop_collection(want);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Makes the indexes and `collMod` options of the collection with `uuid` the source's: local
/// indexes the source lacks (or has with another spec) are dropped, the source's missing
/// here are built.
fn restore_indexes_and_options(
    engine: &Engine,
    catalog: &SourceCatalog,
    uuid: bson::Uuid,
) -> Result<()> {
    let (Some(ns), Some((options, indexes))) = (catalog.names.get(&uuid), catalog.state.get(&uuid))
    else {
        return Ok(());
    };
    let Some(coll) = engine.collection(ns).filter(|c| c.meta.read().uuid == uuid) else {
        return Ok(());
    };
    let local: Vec<Document> = coll
        .meta
        .read()
        .indexes
        .iter()
        .map(|ix| (*ix.spec).clone())
        .collect();
    for spec in &local {
        let name = spec.get_str("name").unwrap_or_default();
        if name == "_id_" || indexes.contains(spec) {
            continue;
        }
        eprintln!("replication: rollback drops index {name} of {ns}");
        engine.drop_indexes(ns, &Bson::String(name.to_string()))?;
    }
    let missing: Vec<Document> = indexes
        .iter()
        .filter(|s| s.get_str("name").ok() != Some("_id_") && !local.contains(s))
        .cloned()
        .collect();
    for spec in missing {
        let name = spec.get_str("name").unwrap_or_default().to_string();
        eprintln!("replication: rollback builds index {name} of {ns}");
        // A unique index the restored documents still violate is left to the entries
        // applied next (up to minValid), as a deferred document is.
        if let Err(e) = engine.create_indexes(ns, &[spec]) {
            eprintln!(
                "replication: rollback cannot build index {name} of {ns}: {}",
                e.message
            );
        }
    }
    let local_options = coll.meta.read().options.clone();
    let modifiable = |o: &Document| -> Vec<Option<Bson>> {
        [
            "validator",
            "validationLevel",
            "validationAction",
            "changeStreamPreAndPostImages",
            "expireAfterSeconds",
        ]
        .iter()
        .map(|k| o.get(*k).cloned())
        .collect()
    };
    if modifiable(&local_options) != modifiable(options) {
        eprintln!("replication: rollback restores the options of {ns}");
        engine.restore_modifiable_options(ns, options)?;
    }
    Ok(())
}

fn all_docs(engine: &Engine, coll: &nidus_engine::catalog::CollectionRef) -> Result<Vec<Document>> {
    let spec = nidus_engine::find::FindSpec::default();
    let mut exec = engine.plan_find(Some(coll), &spec)?;
    let mut out = Vec::new();
    while let Some(m) = exec.get_next()? {
        out.push(
            Document::try_from(m.doc()?.as_ref()).map_err(|e| Error::internal(e.to_string()))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affected_documents_of_divergent_entries() {
        let mut a = Affected::default();
        let entries = [
            doc! { "op": "i", "ns": "test.c", "o": { "_id": 1, "x": 1 } },
            doc! { "op": "u", "ns": "test.c", "o": { "$v": 2, "diff": {} }, "o2": { "_id": 2 } },
            doc! { "op": "d", "ns": "test.c", "o": { "_id": 1 } },
            doc! { "op": "c", "ns": "test.$cmd", "o": { "create": "fresh" } },
            doc! { "op": "c", "ns": "admin.$cmd", "o": { "applyOps": [
                { "op": "i", "ns": "test.d", "o": { "_id": "t" } },
            ] } },
            doc! { "op": "c", "ns": "test.$cmd", "o": { "dropIndexes": "c", "index": "x_1" } },
            doc! { "op": "n", "ns": "", "o": { "msg": "new primary" } },
        ];
        for e in &entries {
            a.note(e);
        }
        let ids: Vec<(&str, &Vec<Bson>)> = a.docs.values().map(|v| (v.0.as_str(), &v.1)).collect();
        assert_eq!(
            ids,
            vec![
                ("test.c", &vec![Bson::Int32(1), Bson::Int32(2)]),
                ("test.d", &vec![Bson::String("t".into())]),
            ]
        );
        assert_eq!(
            a.created.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            vec!["test.fresh"]
        );
        assert_eq!(a.unsupported, vec!["dropIndexes on test.$cmd".to_string()]);
    }

    #[test]
    fn documents_are_noted_by_collection_uuid_whatever_the_name() {
        let (u1, u2, u3, u4) = (
            bson::Uuid::new(),
            bson::Uuid::new(),
            bson::Uuid::new(),
            bson::Uuid::new(),
        );
        let ui = |u: bson::Uuid| Bson::Binary(bson::Binary::from_uuid(u));
        let mut a = Affected::default();
        for e in [
            // test.c is u1, then u2 (renamed over it), then u2 is test.d.
            doc! { "op": "i", "ns": "test.c", "ui": ui(u1), "o": { "_id": 1 } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u2), "o": { "renameCollection": "test2.a", "to": "test.c", "dropTarget": ui(u1) } },
            doc! { "op": "u", "ns": "test.c", "ui": ui(u2), "o": { "$v": 2, "diff": {} }, "o2": { "_id": 2 } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u2), "o": { "renameCollection": "test.c", "to": "test.d" } },
            doc! { "op": "d", "ns": "test.d", "ui": ui(u2), "o": { "_id": 3 } },
            // test.b created twice, renamed away in between.
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u3), "o": { "create": "b" } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u3), "o": { "renameCollection": "test.b", "to": "test.e" } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u4), "o": { "create": "b" } },
            doc! { "op": "i", "ns": "test.x", "o": { "_id": 4 } },
        ] {
            a.note(&e);
        }
        assert_eq!(a.docs.len(), 3);
        assert_eq!(a.docs[&Target::Uuid(u1)].1, vec![Bson::Int32(1)]);
        assert_eq!(
            a.docs[&Target::Uuid(u2)].1,
            vec![Bson::Int32(2), Bson::Int32(3)]
        );
        assert_eq!(
            a.docs[&Target::Name("test.x".into())].1,
            vec![Bson::Int32(4)]
        );
        let created: BTreeSet<(String, Option<bson::Uuid>)> = [
            ("test.b".to_string(), Some(u3)),
            ("test.b".to_string(), Some(u4)),
        ]
        .into();
        assert_eq!(a.created, created);
    }

    #[test]
    fn ddl_of_divergent_entries_is_noted_by_collection_uuid() {
        let u1 = bson::Uuid::new();
        let u2 = bson::Uuid::new();
        let u3 = bson::Uuid::new();
        let ui = |u: bson::Uuid| Bson::Binary(bson::Binary::from_uuid(u));
        let mut a = Affected::default();
        for e in [
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u1), "o": { "createIndexes": "c", "v": 2, "key": { "x": 1 }, "name": "x_1" } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u1), "o": { "collMod": "c", "validator": {} } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u2), "o": { "renameCollection": "test.a", "to": "other.b" } },
            doc! { "op": "c", "ns": "test.$cmd", "ui": ui(u1), "o": { "renameCollection": "test.c", "to": "test.d", "dropTarget": ui(u3) } },
            doc! { "op": "c", "ns": "test.$cmd", "o": { "dropDatabase": 1 } },
        ] {
            a.note(&e);
        }
        assert_eq!(a.ddl, [u1, u2, u3].into());
        assert_eq!(a.unsupported, vec!["dropDatabase on test.$cmd".to_string()]);
    }

    #[test]
    fn views_of_divergent_entries_are_noted_by_name() {
        let mut a = Affected::default();
        for e in [
            doc! { "op": "c", "ns": "test.$cmd", "o": { "create": "v1", "viewOn": "c", "pipeline": [] } },
            doc! { "op": "c", "ns": "test.$cmd", "o": { "collMod": "v2", "viewOn": "c", "pipeline": [] } },
            doc! { "op": "c", "ns": "test2.$cmd", "o": { "drop": "v3" } },
        ] {
            a.note(&e);
        }
        assert_eq!(
            a.views.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["test.v1", "test.v2", "test2.v3"]
        );
        assert!(a.created.is_empty() && a.unsupported.is_empty(), "{a:?}");
    }
}
