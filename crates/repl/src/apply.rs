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

use crate::diff::apply_diff;
use bson::{doc, Bson, Document, RawDocumentBuf};
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
    // The collection a CRUD entry needs is created first, on its own, so the entry goes with
    // the document write itself.
    if matches!(entry.get_str("op"), Ok("i" | "u" | "d")) {
        let ns = Namespace::parse(entry.get_str("ns").unwrap_or_default())?;
        engine.ensure_collection(&ns)?;
    }
    engine.apply_replicated(raw, || apply_op(engine, entry))
}

fn ns_of(entry: &Document) -> Result<Namespace> {
    Namespace::parse(entry.get_str("ns").unwrap_or_default())
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
fn apply_op(engine: &Engine, entry: &Document) -> Result<()> {
    let opts = WriteOpts {
        bypass_document_validation: true,
        statement: statement_of(entry),
        ..WriteOpts::default()
    };
    let o = entry.get_document("o").cloned().unwrap_or_default();
    match entry.get_str("op").unwrap_or("n") {
        "n" => Ok(()),
        "i" => {
            let ns = ns_of(entry)?;
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
            let ns = ns_of(entry)?;
            let Some(coll) = engine.collection(&ns) else {
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
            let ns = ns_of(entry)?;
            let Some(coll) = engine.collection(&ns) else {
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
fn statement_of(entry: &Document) -> Option<nidus_engine::stmt_record::StatementId> {
    let lsid = match entry.get_document("lsid").ok()?.get("id")? {
        Bson::Binary(b) => b.bytes.clone(),
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
    let coll_ns = || match target {
        Bson::String(c) => Ok(Namespace::new(&db, c)),
        _ => Err(Error::bad_value(format!("bad {cmd} oplog entry"))),
    };
    match cmd.as_str() {
        "create" => {
            let mut options = o.clone();
            options.remove("create");
            options.remove("idIndex");
            if let Ok(view_on) = options.get_str("viewOn") {
                // A view (time-series views included) is its own catalog entry.
                let pipeline = options
                    .get_array("pipeline")
                    .map(|a| a.iter().filter_map(|s| s.as_document().cloned()).collect())
                    .unwrap_or_default();
                return engine
                    .create_view(nidus_engine::view::ViewDef {
                        ns: coll_ns()?,
                        view_on: view_on.to_string(),
                        pipeline,
                        collation: options.get_document("collation").ok().cloned(),
                    })
                    .or_else(|e| ignore(e, &[ErrorCode::NamespaceExists]));
            }
            // The collection keeps the primary's UUID (`ui`), as on MongoDB's members.
            let uuid = match entry.get("ui") {
                Some(Bson::Binary(b)) => b.to_uuid().ok(),
                _ => None,
            };
            let created = match uuid {
                Some(u) => engine.create_collection_with_uuid(&coll_ns()?, options, u),
                None => engine.create_collection(&coll_ns()?, options),
            };
            created
                .map(|_| ())
                .or_else(|e| ignore(e, &[ErrorCode::NamespaceExists]))
        }
        "drop" => {
            let ns = coll_ns()?;
            if engine.drop_view(&ns)? {
                return Ok(());
            }
            engine.drop_collection(&ns).map(|_| ())
        }
        "dropDatabase" => engine.drop_database(&db).map(|_| ()),
        "createIndexes" => {
            let mut spec = o.clone();
            spec.remove("createIndexes");
            engine
                .create_indexes(&coll_ns()?, &[spec])
                .map(|_| ())
                .or_else(|e| ignore(e, &[ErrorCode::IndexAlreadyExists]))
        }
        "dropIndexes" => {
            let name = o.get("index").cloned().unwrap_or(Bson::Null);
            engine
                .drop_indexes(&coll_ns()?, &name)
                .map(|_| ())
                .or_else(|e| ignore(e, &[ErrorCode::IndexNotFound, ErrorCode::NamespaceNotFound]))
        }
        "collMod" => {
            let mut changes = o.clone();
            changes.remove("collMod");
            engine
                .set_validation_options(&coll_ns()?, &changes)
                .or_else(|e| ignore(e, &[ErrorCode::NamespaceNotFound]))
        }
        "renameCollection" => {
            let from = Namespace::parse(o.get_str("renameCollection").unwrap_or_default())?;
            let to = Namespace::parse(o.get_str("to").unwrap_or_default())?;
            // MongoDB logs the dropped target's UUID here (a bool in older entries).
            let drop_target = o
                .get("dropTarget")
                .is_some_and(|v| !matches!(v, Bson::Boolean(false) | Bson::Null));
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
                    apply_op(engine, op)?;
                }
            }
            Ok(())
        }
        other => Err(Error::bad_value(format!(
            "oplog command '{other}' is not applied by this member"
        ))),
    }
}
