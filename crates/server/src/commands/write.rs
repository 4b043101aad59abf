//! `insert`, `update`, `delete`: batches of statements, ordered or not, with per-statement
//! `writeErrors`. Each document is its own atomic write (MongoDB's per-document atomicity).

use super::find::check_fields;
use super::{wrong_type, Ctx};
use crate::state::ClusterClock;
use bson::{doc, Bson, Document, RawBsonRef, RawDocument, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::stmt_record::{Executed, StatementId};
use nidus_engine::write::{prepare_insert, UpdateSpec, WriteOpts};
use nidus_expr::LetScope;
use nidus_query::update::Update;
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) fn check_batch_size(n: usize) -> Result<()> {
    if n == 0 || n > nidus_wire::MAX_WRITE_BATCH_SIZE {
        return Err(Error::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {}. Got {n} operations.",
                nidus_wire::MAX_WRITE_BATCH_SIZE
            ),
        ));
    }
    Ok(())
}

/// Collects per-statement results: stop at the first error when ordered.
struct BatchErrors {
    ordered: bool,
    errors: Vec<Bson>,
}

impl BatchErrors {
    fn new(ctx: &Ctx) -> Result<BatchErrors> {
        Ok(BatchErrors {
            ordered: ctx.opt_bool("ordered")?.unwrap_or(true),
            errors: Vec::new(),
        })
    }

    /// Records an error; returns true when the batch must stop. An interruption (`killOp`,
    /// `maxTimeMS`) fails the whole command instead, as MongoDB's write path does.
    fn push(&mut self, index: usize, e: &Error) -> Result<bool> {
        if is_interruption(e) {
            return Err(e.clone());
        }
        self.errors.push(Bson::Document(e.to_write_error(index)));
        Ok(self.ordered)
    }

    fn finish(self, mut reply: Document) -> Document {
        if !self.errors.is_empty() {
            reply.insert("writeErrors", self.errors);
        }
        reply
    }
}

/// MongoDB's Interruption error category.
fn is_interruption(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::Interrupted
            | ErrorCode::InterruptedAtShutdown
            | ErrorCode::InterruptedDueToReplStateChange
            | ErrorCode::MaxTimeMSExpired
    )
}

pub(super) fn opts(ctx: &Ctx) -> Result<WriteOpts> {
    Ok(WriteOpts {
        deadline: ctx.deadline,
        let_vars: ctx.opt_document("let")?,
        collation: None,
        bypass_document_validation: ctx.opt_bool("bypassDocumentValidation")?.unwrap_or(false),
        txn: ctx.txn.clone(),
        statement: None,
    })
}

/// The options of one retryable-write statement (its execution is recorded).
pub(super) fn with_statement(
    opts: &WriteOpts,
    stmt: Option<StatementId>,
) -> std::borrow::Cow<'_, WriteOpts> {
    match stmt {
        None => std::borrow::Cow::Borrowed(opts),
        Some(s) => std::borrow::Cow::Owned(WriteOpts {
            statement: Some(s),
            ..opts.clone()
        }),
    }
}

/// The command's options with one statement's collation: its own `collation`, else the
/// default collation of the collection `ns`.
pub(super) fn statement_opts(
    ctx: &Ctx,
    opts: &WriteOpts,
    ns: &nidus_engine::namespace::Namespace,
    cmd: &str,
    stmt: &Document,
) -> Result<WriteOpts> {
    let given = match stmt.get("collation") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(c)) => Some(c.clone()),
        Some(other) => return Err(wrong_type(cmd, "collation", other, "object")),
    };
    Ok(opts.with_collation(ctx.collation_for(ns, given)))
}

/// The clock that replaces empty timestamps in the documents a command writes, or `None`
/// when the command sets `bypassEmptyTsReplacement` (MongoDB's tools set it so that a
/// restored `Timestamp(0, 0)` stays as dumped).
pub(super) fn empty_ts_clock<'a>(ctx: &Ctx<'a>) -> Result<Option<&'a ClusterClock>> {
    Ok(match ctx.opt_bool("bypassEmptyTsReplacement")? {
        Some(true) => None,
        _ => Some(&ctx.state.cluster_time),
    })
}

fn is_empty_ts(v: &Bson) -> bool {
    matches!(v, Bson::Timestamp(t) if t.time == 0 && t.increment == 0)
}

/// MongoDB's rule for an inserted document and for the document of a replacement-style
/// update: a top-level field other than `_id` holding `Timestamp(0, 0)` gets the current
/// cluster time. Nested fields, `$set`, and pipeline updates keep the empty timestamp.
pub(super) fn fill_empty_timestamps(doc: &mut Document, clock: Option<&ClusterClock>) {
    let Some(clock) = clock else { return };
    for (k, v) in doc.iter_mut() {
        if k != "_id" && is_empty_ts(v) {
            *v = Bson::Timestamp(clock.tick());
        }
    }
}

/// [`fill_empty_timestamps`] for a raw document; borrows it unchanged when nothing is empty.
pub(super) fn fill_empty_timestamps_raw<'d>(
    raw: &'d RawDocument,
    clock: Option<&ClusterClock>,
) -> Result<Cow<'d, RawDocument>> {
    let Some(clock) = clock else {
        return Ok(Cow::Borrowed(raw));
    };
    // A timestamp element needs its type byte somewhere in the document: most documents
    // have none, and the byte search is far cheaper than iterating the elements.
    if !raw
        .as_bytes()
        .contains(&(bson::spec::ElementType::Timestamp as u8))
    {
        return Ok(Cow::Borrowed(raw));
    }
    // Elements without their values converted: only a timestamp's is looked at.
    let has_empty = raw.iter_elements().any(|el| {
        el.is_ok_and(|e| {
            e.element_type() == bson::spec::ElementType::Timestamp
                && e.key() != "_id"
                && matches!(e.value(), Ok(RawBsonRef::Timestamp(t)) if t.time == 0 && t.increment == 0)
        })
    });
    if !has_empty {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = RawDocumentBuf::new();
    for el in raw.iter() {
        let (k, v) = el.map_err(|e| Error::new(ErrorCode::InvalidBSON, e.to_string()))?;
        match v {
            RawBsonRef::Timestamp(t) if k != "_id" && t.time == 0 && t.increment == 0 => {
                out.append(k, clock.tick())
            }
            v => out.append(k, v.to_raw_bson()),
        }
    }
    Ok(Cow::Owned(out))
}

/// A replacement-style update's document gets [`fill_empty_timestamps`].
pub(super) fn fill_replacement_timestamps(update: &mut Update, clock: Option<&ClusterClock>) {
    if let Update::Replacement(d) = update {
        fill_empty_timestamps(d, clock);
    }
}

pub fn insert(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &[
            "insert",
            "documents",
            "ordered",
            "bypassDocumentValidation",
            "bypassEmptyTsReplacement",
        ],
    )?;
    let empty_ts = empty_ts_clock(ctx)?;
    let ns = ctx.namespace("insert")?;
    let docs = ctx.documents("documents")?;
    check_batch_size(docs.len())?;
    if let Some(ts) = ctx.state.engine.timeseries(&ns) {
        return insert_measurements(ctx, &ts, &docs);
    }
    let mut errors = BatchErrors::new(ctx)?;
    // A view fails every statement (a write error each), as in MongoDB.
    let coll = match ctx.ensure_collection(&ns) {
        Err(e) if e.code == ErrorCode::CommandNotSupportedOnView => Err(e),
        other => Ok(other?),
    };
    let opts = opts(ctx)?;
    let mut n = 0i32;
    let mut start = 0;
    while start < docs.len() {
        let end = (start + INSERT_BATCH).min(docs.len());
        // The batch's documents in one storage transaction; on any error (or when it cannot
        // be batched) they are inserted one at a time below, which reports each document's
        // own error with its index and applies ordered/unordered as before.
        if let Some(inserted) = insert_batch(ctx, &coll, &docs[start..end], start, &opts, empty_ts)?
        {
            n += inserted;
            start = end;
            continue;
        }
        for (i, raw) in docs.iter().enumerate().take(end).skip(start) {
            if opts
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
            {
                return Err(Error::new(
                    ErrorCode::MaxTimeMSExpired,
                    "operation exceeded time limit",
                ));
            }
            ctx.state.opcounters.insert.fetch_add(1, Ordering::Relaxed);
            let (stmt, done) = ctx.retryable_statement(i, false)?;
            if done.is_some() {
                n += 1;
                continue;
            }
            let opts = with_statement(&opts, stmt);
            let result = coll.clone().and_then(|coll| {
                fill_empty_timestamps_raw(raw, empty_ts)
                    .and_then(|raw| prepare_insert(&raw))
                    .and_then(|doc| ctx.state.engine.insert_one(&coll, &doc, &opts))
            });
            match result {
                Ok(()) => n += 1,
                Err(e) => {
                    if errors.push(i, &e)? {
                        ctx.op.extra.lock().writes = doc! { "ninserted": n as i64 };
                        return Ok(errors.finish(doc! { "n": n }));
                    }
                }
            }
        }
        start = end;
    }
    ctx.op.extra.lock().writes = doc! { "ninserted": n as i64 };
    Ok(errors.finish(doc! { "n": n }))
}

/// Most documents of an `insert` written in one storage transaction (MongoDB's
/// `internalInsertMaxBatchSize`).
const INSERT_BATCH: usize = 64;

/// Inserts `batch` (the command's documents from index `first`) in one storage transaction.
/// `Some(n)` when all of them were inserted or had already been executed (a retried
/// statement); `None` when nothing was written and the caller must insert them one at a time:
/// a single document, a multi-statement transaction, a view or missing collection, a
/// document that does not prepare, or any error from the storage write.
fn insert_batch(
    ctx: &Ctx,
    coll: &Result<nidus_engine::catalog::CollectionRef>,
    batch: &[RawDocumentBuf],
    first: usize,
    opts: &WriteOpts,
    empty_ts: Option<&ClusterClock>,
) -> Result<Option<i32>> {
    let Ok(coll) = coll else {
        return Ok(None);
    };
    if batch.len() < 2 || opts.txn.is_some() || opts.deadline.is_some() {
        return Ok(None);
    }
    let Some(stmts) = ctx.fresh_statements(first..first + batch.len())? else {
        // One may have run already: the one-at-a-time path skips it and counts it.
        return Ok(None);
    };
    let mut prepared = Vec::with_capacity(batch.len());
    for (raw, stmt) in batch.iter().zip(stmts) {
        let Ok(doc) = fill_empty_timestamps_raw(raw, empty_ts).and_then(|r| prepare_insert(&r))
        else {
            return Ok(None);
        };
        prepared.push((doc, with_statement(opts, stmt)));
    }
    let refs: Vec<(&RawDocument, &WriteOpts)> = prepared
        .iter()
        .map(|(d, o)| (d.as_ref(), o.as_ref()))
        .collect();
    if ctx.state.engine.insert_batch(coll, &refs).is_err() {
        return Ok(None);
    }
    ctx.state
        .opcounters
        .insert
        .fetch_add(batch.len() as i64, Ordering::Relaxed);
    Ok(Some(batch.len() as i32))
}

/// A multi-document statement cannot be retried safely, so MongoDB refuses it in a
/// retryable write (`multi=true` updates, `limit=0` deletes).
fn check_retryable_multi(retryable: bool, multi: bool, option: &str) -> Result<()> {
    if retryable && multi {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("Cannot use (or request) retryable writes with {option}"),
        ));
    }
    Ok(())
}

fn statement_field<'a>(cmd: &str, stmt: &'a Document, field: &str) -> Result<&'a Bson> {
    stmt.get(field).ok_or_else(|| {
        Error::new(
            ErrorCode::Location(40414),
            format!("BSON field '{cmd}.{field}' is missing but a required field"),
        )
    })
}

fn stmt_bool(cmd: &str, stmt: &Document, field: &str) -> Result<bool> {
    match stmt.get(field) {
        None | Some(Bson::Null) => Ok(false),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(Bson::Int32(n)) => Ok(*n != 0),
        Some(Bson::Int64(n)) => Ok(*n != 0),
        Some(Bson::Double(f)) => Ok(*f != 0.0),
        Some(other) => Err(wrong_type(cmd, field, other, "bool")),
    }
}

fn stmt_doc(cmd: &str, stmt: &Document, field: &str) -> Result<Document> {
    match statement_field(cmd, stmt, field)? {
        Bson::Document(d) => Ok(d.clone()),
        other => Err(wrong_type(cmd, field, other, "object")),
    }
}

pub(super) fn to_document(raw: &RawDocumentBuf) -> Result<Document> {
    nidus_wire::document_from_raw(raw)
        .map_err(|e| Error::new(ErrorCode::InvalidBSON, e.to_string()))
}

/// The scope a statement's pipeline update is parsed in: the command's `let` and the
/// statement's constants `c` (only pipeline updates may have constants).
fn update_scope(opts: &WriteOpts, stmt: &Document, u: &Bson) -> Result<LetScope> {
    let constants = match stmt.get("c") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(c)) => Some(c),
        Some(other) => return Err(wrong_type("update.updates", "c", other, "object")),
    };
    if constants.is_some() && !matches!(u, Bson::Array(_)) {
        return Err(Error::failed_to_parse(
            "Constant values may only be specified for pipeline updates",
        ));
    }
    let mut vars = opts.let_vars.clone().unwrap_or_default();
    vars.extend(constants.cloned().unwrap_or_default());
    LetScope::new(Some(&vars))
}

pub(super) fn parse_update_statement(stmt: &Document, opts: &WriteOpts) -> Result<UpdateSpec> {
    const CMD: &str = "update.updates";
    for k in stmt.keys() {
        if !matches!(
            k.as_str(),
            "q" | "u"
                | "multi"
                | "upsert"
                | "arrayFilters"
                | "hint"
                | "collation"
                | "c"
                | "sort"
                | "upsertSupplied"
        ) {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field '{CMD}.{k}' is an unknown field."),
            ));
        }
    }
    let filter = stmt_doc(CMD, stmt, "q")?;
    let u = statement_field(CMD, stmt, "u")?;
    let array_filters = match stmt.get("arrayFilters") {
        None | Some(Bson::Null) => None,
        Some(Bson::Array(a)) => Some(
            a.iter()
                .map(|f| match f {
                    Bson::Document(d) => Ok(d.clone()),
                    other => Err(wrong_type(CMD, "arrayFilters", other, "object")),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        Some(other) => return Err(wrong_type(CMD, "arrayFilters", other, "array")),
    };
    let scope = update_scope(opts, stmt, u)?;
    let update = Update::parse_in(u, array_filters.as_deref(), &scope)?;
    let multi = stmt_bool(CMD, stmt, "multi")?;
    if multi && update.is_replacement() {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "multi update is not supported for replacement-style update",
        ));
    }
    Ok(UpdateSpec {
        filter,
        update,
        multi,
        upsert: stmt_bool(CMD, stmt, "upsert")?,
        sort: match stmt.get("sort") {
            Some(Bson::Document(d)) => Some(d.clone()),
            _ => None,
        },
        hint: match stmt.get("hint") {
            Some(h @ (Bson::String(_) | Bson::Document(_))) => Some(h.clone()),
            _ => None,
        },
    })
}

/// The fields of an `update` command (also what its explain accepts).
pub const UPDATE_FIELDS: &[&str] = &[
    "update",
    "updates",
    "ordered",
    "bypassDocumentValidation",
    "bypassEmptyTsReplacement",
    "let",
];

/// The fields of a `delete` command.
pub const DELETE_FIELDS: &[&str] = &[
    "delete",
    "deletes",
    "ordered",
    "let",
    "bypassEmptyTsReplacement",
];

/// MongoDB reads every statement's update pipeline with the command (for the privileges
/// its stages need): a malformed or unknown stage fails the command before any statement
/// runs, not as a statement's write error.
fn check_update_pipelines(stmts: &[RawDocumentBuf]) -> Result<()> {
    for raw in stmts {
        if let Ok(Some(bson::RawBsonRef::Array(u))) = raw.get("u") {
            let stages = bson::RawBson::Array(u.to_owned());
            if let Ok(Bson::Array(stages)) = Bson::try_from(stages) {
                nidus_query::update::pipeline::check_stages(&stages)?;
            }
        }
    }
    Ok(())
}

pub fn update(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, UPDATE_FIELDS)?;
    let ns = ctx.namespace("update")?;
    let stmts = ctx.documents("updates")?;
    check_batch_size(stmts.len())?;
    check_update_pipelines(&stmts)?;
    let mut errors = BatchErrors::new(ctx)?;
    let opts = opts(ctx)?;
    let empty_ts = empty_ts_clock(ctx)?;
    let (mut n, mut modified_count) = (0i64, 0i64);
    let mut upserted = Vec::new();
    for (i, raw) in stmts.iter().enumerate() {
        ctx.state.opcounters.update.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let (record, done) = ctx.retryable_statement(i, false)?;
        if let Some(done) = done {
            match done {
                Executed::Inserted { id, .. } => {
                    n += 1;
                    let id = id.unwrap_or(Bson::Null);
                    upserted.push(Bson::Document(doc! { "index": i as i32, "_id": id }));
                }
                Executed::Updated { modified, .. } => {
                    n += 1;
                    modified_count += i64::from(modified);
                }
                Executed::Deleted(_) => n += 1,
            }
            continue;
        }
        let result = to_document(raw).and_then(|stmt| {
            let mut spec = parse_update_statement(&stmt, &opts)?;
            fill_replacement_timestamps(&mut spec.update, empty_ts);
            check_retryable_multi(record.is_some(), spec.multi, "multi=true")?;
            let opts = statement_opts(
                ctx,
                &with_statement(&opts, record.clone()),
                &ns,
                "update.updates",
                &stmt,
            )?;
            let engine = &ctx.state.engine;
            if let Some(ts) = engine.timeseries(&ns) {
                not_in_transaction(&opts, "update")?;
                let (n_matched, n_modified, upserted_id) =
                    engine.timeseries_update(&ts, &spec, &opts)?;
                return Ok(nidus_engine::write::UpdateOutcome {
                    n_matched,
                    n_modified,
                    upserted_id,
                });
            }
            engine.check_not_view(&ns)?;
            let coll = match ctx.collection(&ns) {
                Some(c) => c,
                None if spec.upsert => ctx.ensure_collection(&ns)?,
                None => return Ok(Default::default()),
            };
            engine.update(&coll, &spec, &opts)
        });
        let writes = || match &result {
            Ok(out) => doc! {
                "nMatched": out.n_matched as i64,
                "nModified": out.n_modified as i64,
                "nUpserted": i64::from(out.upserted_id.is_some()),
            },
            Err(_) => Document::new(),
        };
        super::report_statement(
            ctx,
            "update",
            || statement_command(raw, UPDATE_STATEMENT_ORDER),
            writes,
            started,
            result.as_ref().err(),
        );
        match result {
            Ok(out) => {
                n += out.n_matched as i64;
                modified_count += out.n_modified as i64;
                if let Some(id) = out.upserted_id {
                    n += 1;
                    upserted.push(Bson::Document(doc! { "index": i as i32, "_id": id }));
                }
            }
            Err(e) => {
                if errors.push(i, &e)? {
                    break;
                }
            }
        }
    }
    let mut reply = doc! { "n": n as i32, "nModified": modified_count as i32 };
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    Ok(errors.finish(reply))
}

/// The fields of an update statement in the order MongoDB's profiler prints them; `multi`
/// and `upsert` appear with their defaults.
const UPDATE_STATEMENT_ORDER: &[(&str, Option<bool>)] = &[
    ("q", None),
    ("u", None),
    ("c", None),
    ("arrayFilters", None),
    ("hint", None),
    ("collation", None),
    ("sort", None),
    ("multi", Some(false)),
    ("upsert", Some(false)),
];

const DELETE_STATEMENT_ORDER: &[(&str, Option<bool>)] = &[
    ("q", None),
    ("limit", None),
    ("hint", None),
    ("collation", None),
];

/// A write statement as the profiler's `command` (`{q, u, multi, upsert}`).
fn statement_command(raw: &RawDocumentBuf, order: &[(&str, Option<bool>)]) -> Document {
    let stmt = raw.to_document().unwrap_or_default();
    let mut out = Document::new();
    for (field, default) in order {
        match (stmt.get(*field), default) {
            (Some(v), _) => {
                out.insert(*field, v.clone());
            }
            (None, Some(d)) => {
                out.insert(*field, *d);
            }
            (None, None) => {}
        }
    }
    out
}

pub(super) fn parse_delete_statement(stmt: &Document) -> Result<(Document, bool, Option<Bson>)> {
    const CMD: &str = "delete.deletes";
    for k in stmt.keys() {
        if !matches!(k.as_str(), "q" | "limit" | "hint" | "collation") {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field '{CMD}.{k}' is an unknown field."),
            ));
        }
    }
    let filter = stmt_doc(CMD, stmt, "q")?;
    let limit = match statement_field(CMD, stmt, "limit")? {
        Bson::Int32(n) => *n as i64,
        Bson::Int64(n) => *n,
        Bson::Double(f) => *f as i64,
        other => return Err(wrong_type(CMD, "limit", other, "long")),
    };
    if limit != 0 && limit != 1 {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!("The limit field in delete objects must be 0 or 1. Got {limit}"),
        ));
    }
    let hint = match stmt.get("hint") {
        Some(h @ (Bson::String(_) | Bson::Document(_))) => Some(h.clone()),
        _ => None,
    };
    Ok((filter, limit == 0, hint))
}

pub fn delete(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, DELETE_FIELDS)?;
    let ns = ctx.namespace("delete")?;
    let stmts = ctx.documents("deletes")?;
    check_batch_size(stmts.len())?;
    let mut errors = BatchErrors::new(ctx)?;
    let opts = opts(ctx)?;
    let mut n = 0i64;
    for (i, raw) in stmts.iter().enumerate() {
        ctx.state.opcounters.delete.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let (record, done) = ctx.retryable_statement(i, false)?;
        if done.is_some() {
            n += 1;
            continue;
        }
        let result = to_document(raw).and_then(|stmt| {
            let (filter, multi, hint) = parse_delete_statement(&stmt)?;
            check_retryable_multi(record.is_some(), multi, "limit=0")?;
            let opts = statement_opts(
                ctx,
                &with_statement(&opts, record.clone()),
                &ns,
                "delete.deletes",
                &stmt,
            )?;
            if let Some(ts) = ctx.state.engine.timeseries(&ns) {
                not_in_transaction(&opts, "delete from")?;
                return ctx
                    .state
                    .engine
                    .timeseries_delete(&ts, &filter, multi, &opts);
            }
            ctx.state.engine.check_not_view(&ns)?;
            match ctx.collection(&ns) {
                Some(coll) => ctx.state.engine.delete(&coll, &filter, multi, hint, &opts),
                None => Ok(0),
            }
        });
        let writes = || match &result {
            Ok(k) => doc! { "ndeleted": *k as i64 },
            Err(_) => Document::new(),
        };
        super::report_statement(
            ctx,
            "remove",
            || statement_command(raw, DELETE_STATEMENT_ORDER),
            writes,
            started,
            result.as_ref().err(),
        );
        match result {
            Ok(k) => n += k as i64,
            Err(e) => {
                if errors.push(i, &e)? {
                    break;
                }
            }
        }
    }
    Ok(errors.finish(doc! { "n": n as i32 }))
}

/// Writes to a time-series collection are refused in a multi-document transaction.
fn not_in_transaction(opts: &WriteOpts, what: &str) -> Result<()> {
    if opts.txn.is_some() {
        return Err(Error::new(
            ErrorCode::OperationNotSupportedInTransaction,
            format!("Cannot {what} a time-series collection in a multi-document transaction."),
        ));
    }
    Ok(())
}

/// `insert` into a time-series collection: the measurements go to their buckets
/// (`nidus_engine::timeseries`), each failing one reported as a write error.
fn insert_measurements(
    ctx: &mut Ctx,
    ts: &nidus_engine::timeseries::Timeseries,
    docs: &[RawDocumentBuf],
) -> Result<Document> {
    if let Some(txn) = &ctx.txn {
        let opts = WriteOpts {
            txn: Some(txn.clone()),
            ..WriteOpts::default()
        };
        not_in_transaction(&opts, "insert into")?;
    }
    let mut errors = BatchErrors::new(ctx)?;
    let measurements = docs.iter().map(to_document).collect::<Result<Vec<_>>>()?;
    let (n, failed) = ctx
        .state
        .engine
        .timeseries_insert(ts, &measurements, errors.ordered);
    ctx.state
        .opcounters
        .insert
        .fetch_add(docs.len() as i64, Ordering::Relaxed);
    for (i, e) in failed {
        if errors.push(i, &e)? {
            break;
        }
    }
    ctx.op.extra.lock().writes = doc! { "ninserted": n as i64 };
    Ok(errors.finish(doc! { "n": n as i32 }))
}
