//! `bulkWrite` (MongoDB 8.0): inserts, updates and deletes across namespaces in one command,
//! with one result per operation returned through a cursor.

use super::write::{
    empty_ts_clock, fill_empty_timestamps, fill_replacement_timestamps, opts,
    parse_delete_statement, parse_update_statement, statement_opts, to_document,
};
use super::{wrong_type, Ctx};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::write::prepare_insert;
use std::sync::atomic::Ordering;

#[derive(Default)]
struct Totals {
    errors: i32,
    inserted: i32,
    matched: i32,
    modified: i32,
    upserted: i32,
    deleted: i32,
}

fn namespaces(ctx: &mut Ctx) -> Result<Vec<Namespace>> {
    ctx.documents("nsInfo")?
        .iter()
        .map(|raw| {
            let d = to_document(raw)?;
            match d.get("ns") {
                Some(Bson::String(ns)) => Namespace::parse(ns),
                Some(other) => Err(wrong_type("bulkWrite.nsInfo", "ns", other, "string")),
                None => Err(Error::new(
                    ErrorCode::Location(40414),
                    "BSON field 'bulkWrite.nsInfo.ns' is missing but a required field",
                )),
            }
        })
        .collect()
}

fn ns_index(op: &Document, field: &str, nss: &[Namespace]) -> Result<Namespace> {
    let idx = match op.get(field) {
        Some(Bson::Int32(n)) => *n as i64,
        Some(Bson::Int64(n)) => *n,
        _ => {
            return Err(Error::bad_value(format!(
                "BulkWrite {field} index must be an integer"
            )))
        }
    };
    usize::try_from(idx)
        .ok()
        .and_then(|i| nss.get(i))
        .cloned()
        .ok_or_else(|| {
            Error::bad_value(format!(
                "BulkWrite ops entry {field} index is out of bounds: {idx}"
            ))
        })
}

/// Copies the fields of a bulkWrite op into the shape of an `update`/`delete` statement.
fn statement(op: &Document, renames: &[(&str, &str)]) -> Document {
    let mut out = Document::new();
    for (from, to) in renames {
        if let Some(v) = op.get(*from) {
            out.insert(*to, v.clone());
        }
    }
    out
}

fn run_op(
    ctx: &mut Ctx,
    op: &Document,
    nss: &[Namespace],
    totals: &mut Totals,
) -> Result<Document> {
    let engine = ctx.state.engine.clone();
    let wopts = opts(ctx)?;
    let empty_ts = empty_ts_clock(ctx)?;
    let kind = op.keys().next().cloned().unwrap_or_default();
    match kind.as_str() {
        "insert" => {
            let ns = ns_index(op, "insert", nss)?;
            let mut d = op
                .get_document("document")
                .map_err(|_| Error::bad_value("BulkWrite insert requires 'document'"))?
                .clone();
            fill_empty_timestamps(&mut d, empty_ts);
            ctx.state.opcounters.insert.fetch_add(1, Ordering::Relaxed);
            let raw = nidus_common::encode::document_to_raw(&d)
                .map_err(|e| Error::internal(e.to_string()))?;
            let coll = ctx.ensure_collection(&ns)?;
            engine.insert_one(&coll, &prepare_insert(&raw)?, &wopts)?;
            totals.inserted += 1;
            Ok(doc! { "n": 1 })
        }
        "update" => {
            let ns = ns_index(op, "update", nss)?;
            let stmt = statement(
                op,
                &[
                    ("filter", "q"),
                    ("updateMods", "u"),
                    ("multi", "multi"),
                    ("upsert", "upsert"),
                    ("arrayFilters", "arrayFilters"),
                    ("hint", "hint"),
                    ("collation", "collation"),
                    ("sort", "sort"),
                ],
            );
            let mut spec = parse_update_statement(&stmt, &wopts)?;
            fill_replacement_timestamps(&mut spec.update, empty_ts);
            let wopts = statement_opts(ctx, &wopts, &ns, "bulkWrite.ops", &stmt)?;
            ctx.state.opcounters.update.fetch_add(1, Ordering::Relaxed);
            engine.check_not_view(&ns)?;
            let out = match ctx.collection(&ns) {
                Some(c) => engine.update(&c, &spec, &wopts)?,
                None if spec.upsert => {
                    engine.update(&ctx.ensure_collection(&ns)?, &spec, &wopts)?
                }
                None => Default::default(),
            };
            totals.matched += out.n_matched as i32;
            totals.modified += out.n_modified as i32;
            let mut r = doc! { "n": (out.n_matched + out.upserted_id.is_some() as u64) as i32, "nModified": out.n_modified as i32 };
            if let Some(id) = out.upserted_id {
                totals.upserted += 1;
                r.insert("upserted", doc! { "_id": id });
            }
            Ok(r)
        }
        "delete" => {
            let ns = ns_index(op, "delete", nss)?;
            let multi = matches!(op.get("multi"), Some(Bson::Boolean(true)));
            let mut stmt = statement(
                op,
                &[
                    ("filter", "q"),
                    ("hint", "hint"),
                    ("collation", "collation"),
                ],
            );
            stmt.insert("limit", if multi { 0 } else { 1 });
            let (filter, multi, hint) = parse_delete_statement(&stmt)?;
            let wopts = statement_opts(ctx, &wopts, &ns, "bulkWrite.ops", &stmt)?;
            ctx.state.opcounters.delete.fetch_add(1, Ordering::Relaxed);
            engine.check_not_view(&ns)?;
            let n = match ctx.collection(&ns) {
                Some(c) => engine.delete(&c, &filter, multi, hint, &wopts)?,
                None => 0,
            };
            totals.deleted += n as i32;
            Ok(doc! { "n": n as i32 })
        }
        other => Err(Error::new(
            ErrorCode::FailedToParse,
            format!("Unrecognized bulkWrite operation: {other}"),
        )),
    }
}

pub fn bulk_write(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("bulkWrite")?;
    let nss = namespaces(ctx)?;
    let ops = ctx.documents("ops")?;
    if ops.is_empty() || ops.len() > nidus_wire::MAX_WRITE_BATCH_SIZE {
        return Err(Error::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {}. Got {} operations.",
                nidus_wire::MAX_WRITE_BATCH_SIZE,
                ops.len()
            ),
        ));
    }
    let ordered = ctx.opt_bool("ordered")?.unwrap_or(true);
    let errors_only = ctx.opt_bool("errorsOnly")?.unwrap_or(false);
    let mut totals = Totals::default();
    let mut results = Vec::new();
    for (idx, raw) in ops.iter().enumerate() {
        let outcome = to_document(raw).and_then(|op| run_op(ctx, &op, &nss, &mut totals));
        match outcome {
            Ok(mut r) => {
                if !errors_only {
                    let mut entry = doc! { "ok": 1.0, "idx": idx as i32 };
                    entry.extend(std::mem::take(&mut r));
                    results.push(Bson::Document(entry));
                }
            }
            Err(e) => {
                totals.errors += 1;
                let mut entry = doc! { "ok": 0.0, "idx": idx as i32, "code": e.code.code(), "codeName": e.code.name().into_owned(), "errmsg": e.message.clone() };
                entry.extend(e.extra.clone());
                results.push(Bson::Document(entry));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply =
        super::find::queued_cursor(ctx, Namespace::new("admin", "$cmd.bulkWrite"), results)?;
    reply.extend(doc! {
        "nErrors": totals.errors,
        "nInserted": totals.inserted,
        "nMatched": totals.matched,
        "nModified": totals.modified,
        "nUpserted": totals.upserted,
        "nDeleted": totals.deleted,
    });
    Ok(reply)
}
