//! The oplog applier: a member applies a committed entry it does not hold yet (a secondary's
//! copy of the primary's write) through the engine's ordinary write paths, with the entry
//! written to its own oplog in the same storage transaction ([`Engine::apply_replicated`]).
//!
//! Application is idempotent, as MongoDB's oplog application mode: an insert of an existing
//! `_id` replaces it, an update or delete of a missing document does nothing, `create` of an
//! existing collection and `drop` of a missing one are no-ops; an entry the member's oplog
//! already holds (its own write as primary, or one applied before a restart) is not applied
//! again. A retryable write's entry also writes its executed-statement record
//! (`stmt_record`), so a retry sent to this member after a failover is not run twice.
//!
//! Consecutive inserts into one collection are applied as a group ([`InsertGroup`]), as
//! MongoDB's appliers group them: one storage transaction for the documents, their entries
//! and their statement records, instead of one per entry. A group that fails as a whole
//! (an `_id` already there, a capped collection) is applied one entry at a time, which
//! gives each entry its idempotent meaning and its own error.

use crate::diff::apply_diff;
use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;

/// Applies one committed entry unless this member already holds it.
pub fn apply_entry(engine: &Engine, raw: &RawDocumentBuf, entry: Option<&Document>) -> Result<()> {
    let Some(oplog) = engine.oplog() else {
        return Ok(());
    };
    let ts = raw
        .get_timestamp("ts")
        .map_err(|_| Error::bad_value("oplog entry without a ts"))?;
    // The same entry (byte for byte) is already here; a different one at this `ts` is a
    // local entry that was never replicated (another member's clock) and is replaced.
    if oplog
        .entry_at(engine.kv(), ts)?
        .is_some_and(|held| held == raw.as_bytes())
    {
        return Ok(());
    }
    // Converted only here: a primary applies its own entries, all already held.
    let converted;
    let entry = match entry {
        Some(d) => d,
        None => {
            converted = Document::try_from(raw.as_ref())
                .map_err(|e| Error::bad_value(format!("oplog entry: {e}")))?;
            &converted
        }
    };
    nidus_engine::oplog::clock().advance_to(ts);
    // An insert that names no collection UUID creates its collection first, on its own and
    // not logged (it is no operation of this member's), so the entry goes with the document
    // write itself. With a UUID, the entry's `create` came first.
    if entry.get_str("op") == Ok("i") && ui_of(entry).is_none() {
        let ns = Namespace::parse(entry.get_str("ns").unwrap_or_default())?;
        if engine.collection(&ns).is_none() {
            engine.without_oplog(|| engine.ensure_collection(&ns))?;
        }
    }
    engine.apply_replicated(raw, || apply_op(engine, entry, statement_of(raw)))
}

/// Consecutive insert entries of one collection, applied together: at most 64 entries and
/// 256 KiB of documents, MongoDB's bounds for its appliers' insert groups.
#[derive(Default)]
pub struct InsertGroup {
    entries: Vec<RawDocumentBuf>,
    bytes: usize,
}

impl InsertGroup {
    const MAX_ENTRIES: usize = 64;
    const MAX_BYTES: usize = 256 << 10;

    /// Takes `raw` into the group when it is an insert into the group's collection and the
    /// group has room; otherwise hands it back.
    pub fn push(&mut self, raw: RawDocumentBuf) -> std::result::Result<(), RawDocumentBuf> {
        let Some(ns) = insert_ns(&raw) else {
            return Err(raw);
        };
        let size = raw.as_bytes().len();
        let fits = match self.entries.first() {
            None => true,
            Some(first) => {
                insert_ns(first) == Some(ns)
                    && self.entries.len() < Self::MAX_ENTRIES
                    && self.bytes + size <= Self::MAX_BYTES
            }
        };
        if !fits {
            return Err(raw);
        }
        self.bytes += size;
        self.entries.push(raw);
        Ok(())
    }

    /// The entries, in log order, leaving the group empty.
    pub fn take(&mut self) -> Vec<RawDocumentBuf> {
        self.bytes = 0;
        std::mem::take(&mut self.entries)
    }
}

/// The collection of an insert entry (a transaction's inserts are inside an `applyOps`
/// command entry, never grouped).
fn insert_ns(raw: &RawDocument) -> Option<&str> {
    match raw.get_str("op") {
        Ok("i") => raw.get_str("ns").ok(),
        _ => None,
    }
}

/// Inserts the entries' documents (an [`InsertGroup`]'s) in one storage transaction with
/// the entries and their statement records; a lone entry too (an insert rather than
/// [`apply_entry`]'s upsert, as MongoDB's secondaries insert and turn to an upsert only on a
/// duplicate key). False, with nothing written, when that is not how they apply: this member
/// holds an entry already (a primary applies its own), a document's `_id` is there already,
/// the collection takes its inserts one at a time (capped), or anything fails;
/// [`apply_entry`] then applies them one at a time.
pub fn apply_inserts_at_once(engine: &Engine, entries: &[RawDocumentBuf]) -> bool {
    if entries.is_empty() {
        return false;
    }
    let (Some(oplog), Some(ns)) = (engine.oplog(), entries.first().and_then(|e| insert_ns(e)))
    else {
        return false;
    };
    let mut last = None;
    for raw in entries {
        let Ok(ts) = raw.get_timestamp("ts") else {
            return false;
        };
        if !matches!(oplog.entry_at(engine.kv(), ts), Ok(None)) {
            return false;
        }
        last = Some(ts);
    }
    let ui = match entries.first().map(|e| e.get("ui")) {
        Some(Ok(Some(bson::RawBsonRef::Binary(b)))) => <[u8; 16]>::try_from(b.bytes)
            .ok()
            .map(bson::Uuid::from_bytes),
        _ => None,
    };
    let Some(coll) = Namespace::parse(ns)
        .ok()
        .and_then(|ns| local_ns(engine, ns, ui))
        .and_then(|ns| engine.collection(&ns))
    else {
        return false;
    };
    let mut docs = Vec::with_capacity(entries.len());
    for raw in entries {
        let Ok(doc) = raw.get_document("o") else {
            return false;
        };
        let opts = WriteOpts {
            bypass_document_validation: true,
            statement: statement_of(raw),
            ..WriteOpts::default()
        };
        docs.push((doc, opts));
    }
    let batch: Vec<_> = docs.iter().map(|(d, o)| (*d, o)).collect();
    if let Some(last) = last {
        nidus_engine::oplog::clock().advance_to(last);
    }
    engine
        .apply_replicated_group(entries.to_vec(), || engine.insert_batch(&coll, &batch))
        .is_ok()
}

/// The local namespace of the collection an entry names: the one with the entry's UUID
/// (`ui`) whatever its name here (None when it is not here, see [`local_ns`]), the entry's
/// `ns` when it names no UUID. As MongoDB's oplog application finds collections by UUID:
/// entries applied up to a rollback's minValid can find their collection renamed already
/// (the rollback restored the source's newer catalog).
fn ns_of(engine: &Engine, entry: &Document) -> Result<Option<Namespace>> {
    let ns = Namespace::parse(entry.get_str("ns").unwrap_or_default())?;
    Ok(local_ns(engine, ns, ui_of(entry)))
}

/// The collection UUID an entry names (`ui`), if any.
pub(crate) fn ui_of(entry: &Document) -> Option<bson::Uuid> {
    match entry.get("ui") {
        Some(Bson::Binary(b)) => b.to_uuid().ok(),
        _ => None,
    }
}

/// The local name of the collection with `ui` (`ns` when the entry names none). None when no
/// collection here has the UUID: a later entry drops it (entries applied up to a rollback's
/// or an initial sync's minValid meet data read from the source after them), and the entry
/// is skipped, as MongoDB's recovering application skips it. Never another collection that
/// has the name.
fn local_ns(engine: &Engine, ns: Namespace, ui: Option<bson::Uuid>) -> Option<Namespace> {
    let Some(ui) = ui else { return Some(ns) };
    // The entry's name is the collection's in all but rare cases: checked first.
    if engine
        .collection(&ns)
        .is_some_and(|c| c.meta.read().uuid == ui)
    {
        return Some(ns);
    }
    collection_by_uuid(engine, ui).map(|c| c.ns.clone())
}

/// Makes `ns` free for the collection with `keep`: a collection of another UUID there is
/// renamed out of the way (MongoDB's applier renames such a target to a temporary name too).
/// Only entries applied up to a rollback's minValid meet one: this member's catalog is then
/// newer than the entries, and the entries that follow give that collection its name back.
fn clear_name(engine: &Engine, ns: &Namespace, keep: bson::Uuid) -> Result<()> {
    let Some(other) = engine.collection(ns) else {
        return Ok(());
    };
    let uuid = other.meta.read().uuid;
    if uuid == keep {
        return Ok(());
    }
    let tmp = Namespace::new(
        &ns.db,
        &format!("tmp{}.renameCollection", &uuid.to_string()[..8]),
    );
    eprintln!("replication: {ns} ({uuid}) renamed to {tmp}, out of the way of {keep}");
    engine.rename_collection(ns, &tmp, false)
}

/// The local collection with `uuid`, if any (a walk of the catalog).
pub(crate) fn collection_by_uuid(
    engine: &Engine,
    uuid: bson::Uuid,
) -> Option<nidus_engine::catalog::CollectionRef> {
    engine
        .database_names()
        .iter()
        .flat_map(|db| engine.collections_in(db))
        .find(|c| c.meta.read().uuid == uuid)
}

fn id_filter(d: &Document) -> Result<Document> {
    match d.get("_id") {
        Some(id) => Ok(doc! { "_id": id.clone() }),
        None => Err(Error::bad_value("oplog entry without an _id")),
    }
}

fn ignore(e: Error, codes: &[ErrorCode]) -> Result<()> {
    if codes.contains(&e.code) {
        Ok(())
    } else {
        Err(e)
    }
}

/// One operation (an entry, or an item of an `applyOps`).
fn apply_op(
    engine: &Engine,
    entry: &Document,
    statement: Option<nidus_engine::stmt_record::StatementId>,
) -> Result<()> {
    let opts = WriteOpts {
        bypass_document_validation: true,
        statement,
        ..WriteOpts::default()
    };
    let o = entry.get_document("o").cloned().unwrap_or_default();
    match entry.get_str("op").unwrap_or("n") {
        "n" => Ok(()),
        "i" => {
            let Some(ns) = ns_of(engine, entry)? else {
                return Ok(());
            };
            let coll = engine.ensure_collection(&ns)?;
            let spec = UpdateSpec {
                filter: id_filter(&o)?,
                update: Update::Replacement(o),
                multi: false,
                upsert: true,
                sort: None,
                hint: None,
            };
            engine.update(&coll, &spec, &opts).map(|_| ())
        }
        "u" => {
            let Some(coll) = ns_of(engine, entry)?.and_then(|ns| engine.collection(&ns)) else {
                return Ok(());
            };
            let filter = id_filter(entry.get_document("o2").unwrap_or(&Document::new()))?;
            let new = if o.contains_key("$v") {
                let diff = o.get_document("diff").cloned().unwrap_or_default();
                let Some(current) = find_one(engine, &coll, &filter)? else {
                    return Ok(());
                };
                apply_diff(&current, &diff)
            } else {
                o
            };
            let spec = UpdateSpec {
                filter,
                update: Update::Replacement(new),
                multi: false,
                upsert: false,
                sort: None,
                hint: None,
            };
            engine.update(&coll, &spec, &opts).map(|_| ())
        }
        "d" => {
            let Some(coll) = ns_of(engine, entry)?.and_then(|ns| engine.collection(&ns)) else {
                return Ok(());
            };
            engine
                .delete(&coll, &id_filter(&o)?, false, None, &opts)
                .map(|_| ())
        }
        "c" => apply_command(engine, entry, &o),
        other => Err(Error::bad_value(format!("unknown oplog op '{other}'"))),
    }
}

/// The retryable-write statement an entry records (`lsid`, `txnNumber`, `stmtId`): applied
/// with its record, as on the primary, so a driver that retries the write on this member once
/// it is primary gets the first attempt's result instead of running it again (with the
/// document images when the entry says a findAndModify's reply needs them).
fn statement_of(entry: &RawDocument) -> Option<nidus_engine::stmt_record::StatementId> {
    let lsid = match entry.get_document("lsid").ok()?.get("id").ok()?? {
        bson::RawBsonRef::Binary(b) => b.bytes.to_vec(),
        _ => return None,
    };
    let txn_number = entry.get_i64("txnNumber").ok()?;
    let stmt = u32::try_from(entry.get_i32("stmtId").ok()?).ok()?;
    let images = entry.get_str("needsRetryImage").is_ok();
    let mut statement =
        nidus_engine::stmt_record::StatementId::new(&lsid, txn_number, stmt, images);
    statement.entry_ts = entry.get_timestamp("ts").ok();
    Some(statement)
}

pub(crate) fn find_one(
    engine: &Engine,
    coll: &nidus_engine::catalog::CollectionRef,
    filter: &Document,
) -> Result<Option<Document>> {
    let spec = nidus_engine::find::FindSpec {
        filter: filter.clone(),
        limit: 1,
        ..Default::default()
    };
    let mut exec = engine.plan_find(Some(coll), &spec)?;
    match exec.get_next()? {
        Some(m) => Ok(Some(
            Document::try_from(m.doc()?.as_ref()).map_err(|e| Error::internal(e.to_string()))?,
        )),
        None => Ok(None),
    }
}

fn apply_command(engine: &Engine, entry: &Document, o: &Document) -> Result<()> {
    let db = entry
        .get_str("ns")
        .unwrap_or_default()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    let Some((cmd, target)) = o.iter().next() else {
        return Ok(());
    };
    let named_ns = || match target {
        Bson::String(c) => Ok(Namespace::new(&db, c)),
        _ => Err(Error::bad_value(format!("bad {cmd} oplog entry"))),
    };
    let ui = ui_of(entry);
    // The collection the command names, found by its UUID when the entry has one (None:
    // not here, see `local_ns`).
    let coll_ns = || named_ns().map(|ns| local_ns(engine, ns, ui));
    match cmd.as_str() {
        "create" => {
            let mut options = o.clone();
            options.remove("create");
            options.remove("idIndex");
            if options.contains_key("viewOn") {
                // A view (time-series views included) is its own catalog entry.
                return engine
                    .create_view(nidus_engine::view::ViewDef::from_options(
                        &named_ns()?,
                        &options,
                    ))
                    .or_else(|e| ignore(e, &[ErrorCode::NamespaceExists]));
            }
            // The collection keeps the primary's UUID (`ui`), as on MongoDB's members.
            let ns = named_ns()?;
            let created = match ui {
                Some(u) => {
                    // Up to a rollback's minValid the collection can be here already, under
                    // its later name: it takes this one (later entries rename it again).
                    clear_name(engine, &ns, u)?;
                    if let Some(coll) = collection_by_uuid(engine, u) {
                        return if coll.ns == ns {
                            Ok(())
                        } else {
                            engine.rename_collection(&coll.ns, &ns, false)
                        };
                    }
                    engine.create_collection_with_uuid(&ns, options, u)
                }
                None => engine.create_collection(&ns, options),
            };
            created
                .map(|_| ())
                .or_else(|e| ignore(e, &[ErrorCode::NamespaceExists]))
        }
        "drop" => {
            let Some(ns) = coll_ns()? else {
                return Ok(());
            };
            if engine.drop_view(&ns)? {
                return Ok(());
            }
            engine.drop_collection(&ns).map(|_| ())
        }
        "dropDatabase" => engine.drop_database(&db).map(|_| ()),
        "createIndexes" => {
            let mut spec = o.clone();
            spec.remove("createIndexes");
            let Some(ns) = coll_ns()? else {
                return Ok(());
            };
            engine
                .create_indexes(&ns, &[spec])
                .map(|_| ())
                // Entries up to a rollback's or an initial sync's minValid can meet a catalog
                // that already holds later changes (a collMod since, the index dropped and
                // built again with other options): the entries that follow make it the
                // source's again.
                .or_else(|e| {
                    ignore(
                        e,
                        &[
                            ErrorCode::IndexAlreadyExists,
                            ErrorCode::IndexKeySpecsConflict,
                            ErrorCode::IndexOptionsConflict,
                        ],
                    )
                })
        }
        "dropIndexes" => {
            let name = o.get("index").cloned().unwrap_or(Bson::Null);
            let Some(ns) = coll_ns()? else {
                return Ok(());
            };
            engine
                .drop_indexes(&ns, &name)
                .map(|_| ())
                .or_else(|e| ignore(e, &[ErrorCode::IndexNotFound, ErrorCode::NamespaceNotFound]))
        }
        "collMod" => {
            let mut changes = o.clone();
            changes.remove("collMod");
            let index = changes.remove("index");
            let Some(ns) = coll_ns()? else {
                return Ok(());
            };
            if engine.view(&ns).is_some() {
                let view_on = changes.get_str("viewOn").ok().map(str::to_string);
                let pipeline = changes
                    .get_array("pipeline")
                    .ok()
                    .map(|p| p.iter().filter_map(|s| s.as_document().cloned()).collect());
                return engine.modify_view(&ns, view_on, pipeline);
            }
            if !changes.is_empty() || index.is_none() {
                engine
                    .set_validation_options(&ns, &changes)
                    .or_else(|e| ignore(e, &[ErrorCode::NamespaceNotFound]))?;
            }
            match index {
                Some(Bson::Document(ix)) => engine
                    .modify_index(&ns, &nidus_engine::IndexChange::from_logged(&ix))
                    .map(|_| ())
                    // Up to minValid the index can already have changed since (dropped,
                    // built again without a TTL): the entries after this one tell.
                    .or_else(|e| {
                        ignore(
                            e,
                            &[
                                ErrorCode::NamespaceNotFound,
                                ErrorCode::IndexNotFound,
                                ErrorCode::InvalidOptions,
                            ],
                        )
                    }),
                _ => Ok(()),
            }
        }
        "renameCollection" => {
            // MongoDB logs the UUID of the target a rename dropped (a bool in older entries):
            // that collection goes whatever its name here, even when the source is not here
            // (entries replayed up to a rollback's or an initial sync's minValid), as a drop
            // entry of its own would.
            let dropped = match o.get("dropTarget") {
                Some(Bson::Binary(b)) => b.to_uuid().ok(),
                _ => None,
            };
            let to = Namespace::parse(o.get_str("to").unwrap_or_default())?;
            let dropped_at = dropped
                .and_then(|u| collection_by_uuid(engine, u))
                .map(|c| c.ns.clone());
            let Some(from) = local_ns(
                engine,
                Namespace::parse(o.get_str("renameCollection").unwrap_or_default())?,
                ui,
            ) else {
                if let Some(ns) = dropped_at {
                    engine.drop_collection(&ns)?;
                }
                return Ok(());
            };
            if let Some(ns) = dropped_at.as_ref().filter(|ns| **ns != to && **ns != from) {
                engine.drop_collection(ns)?;
            }
            if from == to {
                // Renamed already (a rollback restored the source's newer name).
                return Ok(());
            }
            // A target of another UUID than the one the primary dropped is moved out of the
            // way instead.
            let drop_target = match (o.get("dropTarget"), ui) {
                (Some(Bson::Binary(_)), Some(u)) => {
                    let at_target = dropped_at.as_ref() == Some(&to);
                    if !at_target {
                        clear_name(engine, &to, u)?;
                    }
                    at_target
                }
                (None | Some(Bson::Boolean(false) | Bson::Null), Some(u)) => {
                    clear_name(engine, &to, u)?;
                    false
                }
                (v, _) => v.is_some_and(|v| !matches!(v, Bson::Boolean(false) | Bson::Null)),
            };
            engine
                .rename_collection(&from, &to, drop_target)
                .or_else(|e| ignore(e, &[ErrorCode::NamespaceNotFound]))
        }
        "applyOps" => {
            for op in o
                .get_array("applyOps")
                .map_err(|_| Error::bad_value("bad applyOps"))?
            {
                if let Bson::Document(op) = op {
                    // Items carry no session fields: a statement is the entry's own.
                    apply_op(engine, op, None)?;
                }
            }
            Ok(())
        }
        other => Err(Error::bad_value(format!(
            "oplog command '{other}' is not applied by this member"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nidus_engine::find::FindSpec;
    use nidus_engine::oplog::u64_to_ts;
    use nidus_engine::stmt_record::StatementId;
    use nidus_engine::write::prepare_insert;
    use std::sync::Arc;

    const LSID: [u8; 16] = [7; 16];
    const STATEMENTS: u32 = 150;

    fn engine() -> (tempfile::TempDir, Arc<Engine>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(nidus_storage_rocks::RocksEngine::open(dir.path()).expect("rocks"));
        let engine = Engine::open(kv).expect("engine");
        engine.enable_oplog(64).expect("oplog");
        (dir, engine)
    }

    fn ns(c: &str) -> Namespace {
        Namespace::new("t", c)
    }

    fn raw(d: Document) -> RawDocumentBuf {
        prepare_insert(&nidus_common::encode::document_to_raw(&d).expect("doc")).expect("prepare")
    }

    fn insert(engine: &Engine, c: &str, docs: Vec<Document>, opts: &[WriteOpts]) {
        let coll = engine.ensure_collection(&ns(c)).expect("coll");
        let docs: Vec<_> = docs.into_iter().map(raw).collect();
        let plain = WriteOpts::default();
        let batch: Vec<_> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.as_ref(), opts.get(i).unwrap_or(&plain)))
            .collect();
        // A capped collection takes its inserts one at a time.
        if batch.len() < 2 || engine.insert_batch(&coll, &batch).is_err() {
            for (d, o) in batch {
                engine.insert_one(&coll, d, o).expect("insert");
            }
        }
    }

    fn doc_of(i: i32) -> Document {
        doc! { "_id": i, "k": i % 7, "u": i, "s": format!("d{i}"), "a": [i, { "x": i }] }
    }

    /// A primary's writes: a retryable `insert_many` past one group's 64 entries, inserts
    /// into two collections taking turns, an update and a delete between inserts, a capped
    /// collection's inserts, plain inserts: its oplog's entries, in order.
    fn primary_entries() -> Vec<RawDocumentBuf> {
        let (_dir, p) = engine();
        p.create_indexes(
            &ns("c"),
            &[
                doc! { "key": { "k": 1 }, "name": "k_1" },
                doc! { "key": { "u": 1 }, "name": "u_1", "unique": true },
            ],
        )
        .expect("indexes");
        p.create_collection(&ns("cap"), doc! { "capped": true, "size": 4096 })
            .expect("capped");
        let stmts: Vec<_> = (0..STATEMENTS)
            .map(|s| WriteOpts {
                statement: Some(StatementId::new(&LSID, 1, s, false)),
                ..WriteOpts::default()
            })
            .collect();
        insert(&p, "c", (0..150).map(doc_of).collect(), &stmts);
        for i in 150..170 {
            insert(&p, if i % 3 == 0 { "d" } else { "c" }, vec![doc_of(i)], &[]);
        }
        let c = p.collection(&ns("c")).expect("c");
        let set = UpdateSpec {
            filter: doc! { "_id": 3 },
            update: Update::parse(&Bson::Document(doc! { "$set": { "s": "updated" } }), None)
                .expect("update"),
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        p.update(&c, &set, &WriteOpts::default()).expect("update");
        insert(&p, "c", (170..180).map(doc_of).collect(), &[]);
        p.delete(&c, &doc! { "_id": 4 }, false, None, &WriteOpts::default())
            .expect("delete");
        insert(&p, "cap", (0..40).map(doc_of).collect(), &[]);
        insert(&p, "c", (180..260).map(doc_of).collect(), &[]);
        p.oplog()
            .expect("oplog")
            .read_after(p.kv(), u64_to_ts(0), usize::MAX)
            .expect("read")
    }

    /// Applies `entries` as the Raft driver does (grouping consecutive inserts) or one at a
    /// time; how many groups went in at once and how many fell back.
    fn apply_all(engine: &Engine, entries: &[RawDocumentBuf], grouped: bool) -> (usize, usize) {
        let (mut at_once, mut fell_back) = (0, 0);
        let mut group = InsertGroup::default();
        let mut flush = |group: &mut InsertGroup| {
            let entries = group.take();
            if apply_inserts_at_once(engine, &entries) {
                at_once += 1;
                return;
            }
            fell_back += usize::from(entries.len() > 1);
            for raw in &entries {
                apply_entry(engine, raw, None).expect("apply");
            }
        };
        for raw in entries {
            if !grouped {
                apply_entry(engine, raw, None).expect("apply");
                continue;
            }
            let Err(raw) = group.push(raw.clone()) else {
                continue;
            };
            flush(&mut group);
            if let Err(raw) = group.push(raw) {
                apply_entry(engine, &raw, None).expect("apply");
            }
        }
        flush(&mut group);
        (at_once, fell_back)
    }

    /// What a member holds: each collection's documents read by a collection scan and by
    /// each index in both directions, its oplog's entries among `logged` (not its own
    /// "initiating set"), the retryable statements' records.
    fn state(engine: &Engine, logged: &[RawDocumentBuf]) -> Vec<String> {
        let mut out = Vec::new();
        for (c, hints) in [
            ("c", vec![None, Some("_id_"), Some("k_1"), Some("u_1")]),
            ("d", vec![None, Some("_id_")]),
            ("cap", vec![None]),
        ] {
            let Some(coll) = engine.collection(&ns(c)) else {
                out.push(format!("{c}: missing"));
                continue;
            };
            for hint in hints {
                for dir in [1, -1] {
                    let spec = FindSpec {
                        hint: hint.map(|h| Bson::String(h.to_string())),
                        sort: Some(doc! { "_id": dir }),
                        ..Default::default()
                    };
                    let mut exec = engine.plan_find(Some(&coll), &spec).expect("plan");
                    let mut docs = Vec::new();
                    while let Some(m) = exec.get_next().expect("next") {
                        docs.push(Document::try_from(m.doc().expect("doc").as_ref()).expect("d"));
                    }
                    if dir == -1 {
                        docs.reverse();
                    }
                    out.push(format!("{c} {hint:?}: {docs:?}"));
                }
            }
        }
        for e in engine
            .oplog()
            .expect("oplog")
            .read_after(engine.kv(), u64_to_ts(0), usize::MAX)
            .expect("read")
            .into_iter()
            .filter(|e| logged.iter().any(|l| l.get("ts").ok() == e.get("ts").ok()))
        {
            out.push(format!(
                "entry {:?}",
                Document::try_from(e.as_ref()).expect("e")
            ));
        }
        for s in 0..STATEMENTS {
            let stmt = StatementId::new(&LSID, 1, s, false);
            out.push(format!("stmt {s}: {:?}", engine.executed_statement(&stmt)));
        }
        out
    }

    /// Grouped application leaves a member exactly as one-at-a-time application does: the
    /// same documents through every index and direction, the same oplog, the same statement
    /// records; also when documents are there already (the group falls back).
    #[test]
    fn grouped_inserts_apply_as_one_at_a_time() {
        let entries = primary_entries();
        let mut states = Vec::new();
        for existing in [false, true] {
            let mut per_mode = Vec::new();
            for grouped in [false, true] {
                let (_dir, s) = engine();
                if existing {
                    // As after an initial sync's copy: documents there before their entries.
                    let creates: Vec<_> = entries
                        .iter()
                        .filter(|e| e.get_str("op").ok() == Some("c"))
                        .cloned()
                        .collect();
                    apply_all(&s, &creates, false);
                    s.without_oplog(|| {
                        insert(
                            &s,
                            "c",
                            vec![doc! { "_id": 200, "u": -1, "old": true }],
                            &[],
                        );
                        Ok(())
                    })
                    .expect("existing");
                }
                let (at_once, fell_back) = apply_all(&s, &entries, grouped);
                if grouped {
                    assert!(at_once >= 4, "{at_once} groups at once");
                    // The capped collection's group, and with a document there the group
                    // holding its `_id`.
                    assert_eq!(fell_back, 1 + usize::from(existing));
                }
                per_mode.push(state(&s, &entries));
            }
            for (one, grouped) in per_mode[0].iter().zip(&per_mode[1]) {
                assert_eq!(one, grouped, "existing {existing}");
            }
            assert_eq!(per_mode[0].len(), per_mode[1].len(), "existing {existing}");
            states.push(per_mode.remove(0));
        }
        // Every entry logged, every statement recorded with its entry's ts; the document
        // there already replaced.
        let applied = &states[0];
        let logged = applied.iter().filter(|l| l.starts_with("entry ")).count();
        assert_eq!(logged, entries.len());
        assert!(applied
            .iter()
            .any(|l| l.starts_with("stmt 149: Ok(Some(Inserted")));
        assert!(!applied.iter().any(|l| l.contains("Ok(None)")));
        assert!(!states[1].iter().any(|l| l.contains("old")));
    }

    /// A rename entry that dropped its target (`dropTarget` naming the target's UUID, with no
    /// `drop` entry of its own) drops that collection wherever it is here, also when the
    /// source is not here; a collection of another UUID at the target name is moved out of
    /// the way. Cases: (collections before as (name, uuid index), the entry's source UUID,
    /// dropTarget UUID, collections after).
    #[test]
    fn a_rename_entry_drops_the_target_it_names_by_uuid() {
        let uuids: Vec<bson::Uuid> = (0..4).map(|_| bson::Uuid::new()).collect();
        let tmp = |i: usize| format!("tmp{}.renameCollection", &uuids[i].to_string()[..8]);
        type Case = (
            Vec<(&'static str, usize)>,
            usize,
            usize,
            Vec<(String, usize)>,
        );
        let cases: Vec<Case> = vec![
            // The target at the entry's name: dropped in the rename.
            (vec![("b", 0), ("a", 1)], 0, 1, vec![("a".into(), 0)]),
            // The target under another name here, another collection at the name.
            (
                vec![("b", 0), ("x", 1), ("a", 2)],
                0,
                1,
                vec![("a".into(), 0), (tmp(2), 2)],
            ),
            // The source is not here: the target goes all the same.
            (vec![("x", 1), ("a", 2)], 3, 1, vec![("a".into(), 2)]),
            // Renamed already: the target goes.
            (vec![("a", 0), ("x", 1)], 0, 1, vec![("a".into(), 0)]),
        ];
        for (i, (before, source, target, after)) in cases.into_iter().enumerate() {
            let (_dir, e) = engine();
            e.without_oplog(|| {
                for (name, u) in &before {
                    e.create_collection_with_uuid(&ns(name), Document::new(), uuids[*u])?;
                }
                Ok(())
            })
            .expect("setup");
            let ui = |u: usize| Bson::Binary(bson::Binary::from_uuid(uuids[u]));
            let entry = doc! {
                "op": "c", "ns": "t.$cmd", "ui": ui(source),
                "o": { "renameCollection": "t.b", "to": "t.a", "stayTemp": false, "dropTarget": ui(target) },
            };
            e.without_oplog(|| apply_op(&e, &entry, None))
                .expect("apply");
            let mut got: Vec<(String, usize)> = e
                .collections_in("t")
                .iter()
                .map(|c| {
                    let u = c.meta.read().uuid;
                    let idx = uuids.iter().position(|x| *x == u).expect("known uuid");
                    (c.ns.coll.clone(), idx)
                })
                .collect();
            got.sort();
            let mut want = after;
            want.sort();
            assert_eq!(got, want, "case {i}");
        }
    }

    /// A primary applying its own entries (all in its oplog) changes nothing.
    #[test]
    fn a_member_holding_the_entries_applies_none() {
        let entries = primary_entries();
        let (_dir, s) = engine();
        apply_all(&s, &entries, true);
        let before = state(&s, &entries);
        assert_eq!(apply_all(&s, &entries, true), (0, 13));
        assert_eq!(state(&s, &entries), before);
    }
}
