//! `find`, `getMore`, `killCursors`, `count`, `distinct`.

use super::{wrong_type, Ctx};
use crate::cursor::{Cursor, Tail, DEFAULT_FIRST_BATCH};
use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use std::time::Instant;

const FIND_FIELDS: &[&str] = &[
    "find",
    "filter",
    "sort",
    "projection",
    "hint",
    "skip",
    "limit",
    "batchSize",
    "singleBatch",
    "max",
    "min",
    "returnKey",
    "showRecordId",
    "tailable",
    "oplogReplay",
    "noCursorTimeout",
    "awaitData",
    "allowPartialResults",
    "collation",
    "allowDiskUse",
    "let",
    "readOnce",
];

pub fn check_fields(ctx: &Ctx, allowed: &[&str]) -> Result<()> {
    for k in ctx.body.keys() {
        if !allowed.contains(&k.as_str()) && !super::is_generic_arg(k) {
            let name = ctx.command_name();
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field '{name}.{k}' is an unknown field."),
            ));
        }
    }
    Ok(())
}

/// A non-negative integer option (`skip`, `limit`, `batchSize`).
fn non_negative(ctx: &Ctx, field: &str) -> Result<Option<u64>> {
    match ctx.opt_i64(field)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field '{field}' value must be >= 0, actual value '{n}'"),
        )),
        Some(n) => Ok(Some(n as u64)),
    }
}

pub(super) fn hint(ctx: &Ctx) -> Result<Option<Bson>> {
    match ctx.body.get("hint") {
        None | Some(Bson::Null) => Ok(None),
        Some(h @ (Bson::String(_) | Bson::Document(_))) => Ok(Some(h.clone())),
        Some(other) => Err(wrong_type(&ctx.command_name(), "hint", other, "object")),
    }
}

fn filter(ctx: &Ctx, field: &str) -> Result<Document> {
    Ok(ctx.opt_document(field)?.unwrap_or_default())
}

/// The namespace and query of a `find` command (also what `explain` of a find runs).
pub fn find_spec(ctx: &Ctx) -> Result<(Namespace, FindSpec)> {
    check_fields(ctx, FIND_FIELDS)?;
    let ns = ctx.namespace("find")?;
    let tailable = ctx.opt_bool("tailable")?.unwrap_or(false);
    if tailable {
        let sort = ctx.opt_document("sort")?.filter(|s| !s.is_empty());
        if sort.is_some_and(|s| s != doc! { "$natural": 1 }) {
            return Err(Error::bad_value(
                "cannot use tailable option with a sort other than {$natural: 1}",
            ));
        }
        if ctx.opt_bool("singleBatch")?.unwrap_or(false) {
            return Err(Error::bad_value(
                "cannot use tailable option with the 'singleBatch' option",
            ));
        }
    }
    if ctx.opt_bool("awaitData")?.unwrap_or(false) && !tailable {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "Cannot set 'awaitData' without also setting 'tailable'",
        ));
    }
    let limit = non_negative(ctx, "limit")?.filter(|n| *n > 0);
    let spec = FindSpec {
        filter: filter(ctx, "filter")?,
        sort: ctx.opt_document("sort")?,
        projection: ctx.opt_document("projection")?,
        skip: non_negative(ctx, "skip")?.unwrap_or(0),
        limit: limit.unwrap_or(0),
        hint: hint(ctx)?,
        deadline: ctx.deadline,
        let_vars: ctx.opt_document("let")?,
        collation: ctx.command_collation(&ns)?,
        min: ctx.opt_document("min")?.filter(|d| !d.is_empty()),
        max: ctx.opt_document("max")?.filter(|d| !d.is_empty()),
        // MongoDB 6.0+ spills by default (`allowDiskUseByDefault`); `false` forbids it.
        allow_disk_use: ctx
            .opt_bool("allowDiskUse")?
            .unwrap_or_else(|| ctx.state.params.allow_disk_use_by_default()),
        return_key: ctx.opt_bool("returnKey")?.unwrap_or(false),
        sort_memory_limit: sort_memory_limit(ctx),
        source: ctx.read_source(),
        tailable,
        ..FindSpec::default()
    };
    Ok((ns, spec))
}

/// The server's `internalQueryMaxBlockingSortMemoryUsageBytes`.
fn sort_memory_limit(ctx: &Ctx) -> Option<usize> {
    ctx.state
        .params
        .i64("internalQueryMaxBlockingSortMemoryUsageBytes")
        .map(|n| n.max(0) as usize)
}

pub fn find(ctx: &mut Ctx) -> Result<Document> {
    let (ns, spec) = find_spec(ctx)?;
    let limit = (spec.limit > 0).then_some(spec.limit);
    let batch_size = non_negative(ctx, "batchSize")?;
    if ctx.state.engine.view(&ns).is_some() {
        return super::views::find(ctx, &ns, &spec, batch_size);
    }
    let coll = ctx.collection(&ns);
    if spec.tailable && coll.as_ref().is_some_and(|c| !c.is_capped()) {
        return Err(Error::bad_value(
            "error processing query: tailable cursor requested on non capped collection",
        ));
    }
    // A tailable cursor stays open at the end, unless the collection has no records yet
    // (MongoDB's SERVER-13955 behaviour).
    let tail = match &coll {
        Some(c) if spec.tailable && c.count.load(std::sync::atomic::Ordering::Relaxed) > 0 => {
            Some(Tail {
                coll: c.clone(),
                await_data: ctx.opt_bool("awaitData")?.unwrap_or(false),
            })
        }
        _ => None,
    };
    let mut exec = ctx.state.engine.plan_find(coll.as_ref(), &spec)?;
    exec.show_record_id = ctx.opt_bool("showRecordId")?.unwrap_or(false);
    let single_batch = ctx.opt_bool("singleBatch")?.unwrap_or(false);
    let mut cursor = Cursor {
        limit,
        no_timeout: ctx.opt_bool("noCursorTimeout")?.unwrap_or(false),
        tail,
        ..Cursor::new(ns.clone(), exec)
    };
    let (batch, done) = cursor.next_batch(Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)))?;
    let closes = done || single_batch;
    let mut examined = (0, 0);
    super::note_read(
        ctx,
        &cursor.exec,
        &mut examined,
        Some(batch.len()),
        Some(if closes { 0 } else { -1 }),
    );
    cursor.examined = examined;
    let id = if closes { 0 } else { register(ctx, cursor) };
    if id != 0 {
        ctx.op.extra.lock().cursor_id = Some(id);
    }
    ctx.batch = batch;
    Ok(batch_reply(&ns, id, "firstBatch", Vec::new()))
}

/// A cursor over results computed before the reply (`bulkWrite`'s per-operation results,
/// catalog listings): the first batch holds at most the command's `cursor.batchSize`
/// documents and 16 MiB, as a query's does, and the rest stays for `getMore`.
pub(super) fn queued_cursor(ctx: &mut Ctx, ns: Namespace, docs: Vec<Bson>) -> Result<Document> {
    let command = ctx.command_name();
    let batch_size = match ctx.body.get("cursor") {
        None => None,
        Some(Bson::Document(c)) => super::opt_i64(&format!("{command}.cursor"), c, "batchSize")?,
        Some(other) => return Err(wrong_type(&command, "cursor", other, "object")),
    };
    if let Some(n) = batch_size.filter(|n| *n < 0) {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'batchSize' value must be >= 0, actual value '{n}'"),
        ));
    }
    let raw =
        docs.iter()
            .map(|d| match d {
                Bson::Document(d) => nidus_common::encode::document_to_raw(d)
                    .map_err(|e| Error::internal(e.to_string())),
                _ => Err(Error::internal("a queued cursor holds documents only")),
            })
            .collect::<Result<Vec<_>>>()?;
    let root = nidus_engine::exec::Stage::new(nidus_engine::exec::QueuedData::new(raw));
    let mut cursor = Cursor::new(ns.clone(), nidus_engine::exec::Executor::new(root, None));
    let (batch, done) = cursor.next_batch(batch_size.map(|n| n as u64))?;
    let id = if done { 0 } else { register(ctx, cursor) };
    if id != 0 {
        ctx.op.extra.lock().cursor_id = Some(id);
    }
    // The batch stays in the reply document (not `ctx.batch`): a retryable `bulkWrite`
    // stores that document as its reply, and a retry must find its results in it.
    Ok(batch_reply(&ns, id, "firstBatch", batch))
}

pub(super) fn register(ctx: &Ctx, mut cursor: Cursor) -> i64 {
    cursor.api = ctx.api.clone();
    // What is left of the creating command's time limit carries over to its getMores.
    cursor.max_time_left = ctx
        .deadline
        .map(|d| d.saturating_duration_since(Instant::now()));
    cursor.exec.set_deadline(None);
    ctx.state
        .cursors
        .register(cursor, ctx.conn.auth.owner(), session_id(ctx))
}

/// The `lsid.id` bytes of the command's logical session (explicit or a driver's implicit
/// one): its cursors live as long as the session, not `cursorTimeoutMillis`.
pub(super) fn session_id(ctx: &Ctx) -> Option<Vec<u8>> {
    match ctx.body.get("lsid") {
        Some(Bson::Document(lsid)) => match lsid.get("id") {
            Some(Bson::Binary(b)) => Some(b.bytes.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// A session id as MongoDB prints an lsid in errors.
fn lsid_text(id: &[u8]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    match uuid_text(&hex) {
        Some(u) => format!("{{ id: UUID(\"{u}\") }}"),
        None => format!("{{ id: BinData(4, {hex}) }}"),
    }
}

fn uuid_text(hex: &str) -> Option<String> {
    (hex.len() == 32).then(|| {
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    })
}

/// MongoDB's `validateLSID` for getMore: a cursor opened in a session is only usable from
/// that session, and one opened outside any session only from outside one.
fn check_cursor_session(ctx: &Ctx, id: i64) -> Result<()> {
    let Some(cursor_session) = ctx.state.cursors.session(id) else {
        return Ok(());
    };
    let request = session_id(ctx);
    match (cursor_session, request) {
        (None, Some(req)) => Err(Error::new(
            ErrorCode::Location(50736),
            format!(
                "Cannot run getMore on cursor {id}, which was not created in a session, in session {}",
                lsid_text(&req)
            ),
        )),
        (Some(cur), None) => Err(Error::new(
            ErrorCode::Location(50737),
            format!(
                "Cannot run getMore on cursor {id}, which was created in session {}, without an lsid",
                lsid_text(&cur)
            ),
        )),
        (Some(cur), Some(req)) if cur != req => Err(Error::new(
            ErrorCode::Location(50738),
            format!(
                "Cannot run getMore on cursor {id}, which was created in session {}, in session {}",
                lsid_text(&cur),
                lsid_text(&req)
            ),
        )),
        _ => Ok(()),
    }
}

pub fn batch_reply(ns: &Namespace, id: i64, field: &str, batch: Vec<RawDocumentBuf>) -> Document {
    let docs: Vec<Bson> = batch
        .into_iter()
        .map(|d| bson::RawBson::Document(d).try_into().unwrap_or(Bson::Null))
        .collect();
    doc! { "cursor": { field: docs, "id": id, "ns": ns.full() } }
}

pub fn get_more(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &[
            "getMore",
            "collection",
            "batchSize",
            "maxTimeMS",
            "term",
            "lastKnownCommittedOpTime",
        ],
    )?;
    let id = match ctx.body.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => return Err(wrong_type("getMore", "getMore", other, "long")),
        None => return Err(Error::bad_value("getMore requires a cursor id")),
    };
    let coll = match ctx.body.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(other) => return Err(wrong_type("getMore", "collection", other, "string")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'getMore.collection' is missing but a required field",
            ))
        }
    };
    let ns = Namespace::new(&ctx.db, &coll);
    let batch_size = non_negative(ctx, "batchSize")?.filter(|n| *n > 0);
    check_cursor_session(ctx, id)?;
    let handle = ctx.state.cursors.get(id)?;
    let Some(mut cursor) = handle.try_lock() else {
        return Err(Error::new(
            ErrorCode::CursorInUse,
            format!("Cursor already in use (namespace: '{ns}', id: {id})."),
        ));
    };
    if cursor.ns != ns {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}", cursor.ns),
        ));
    }
    ctx.api
        .check_same("getMore", &cursor.api, "the cursor-creating command")?;
    if let Some(e) = ctx.state.fail_points.check_get_more() {
        let change_stream = cursor.change_stream.is_some();
        drop(cursor);
        ctx.state.cursors.remove(id);
        return Err(match change_stream {
            true => super::change_stream::label_error(e),
            false => e,
        });
    }
    if let Some(state) = cursor.change_stream.clone() {
        let result = super::change_stream::get_more(ctx, id, &mut cursor, &state, batch_size);
        cursor.last_used = Instant::now();
        drop(cursor);
        if !matches!(result, Ok((_, false))) {
            ctx.state.cursors.remove(id);
        }
        return result
            .map(|(reply, _)| reply)
            .map_err(super::change_stream::label_error);
    }
    let await_data = cursor.tail.as_ref().is_some_and(|t| t.await_data);
    if ctx.body.contains_key("maxTimeMS") && !await_data {
        return Err(Error::bad_value(
            "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
        ));
    }
    let result = if await_data {
        // maxTimeMS is how long to wait for new documents (1 s by default), not a deadline.
        let wait = ctx
            .deadline
            .unwrap_or_else(|| Instant::now() + AWAIT_DATA_DEFAULT);
        await_batch(&ctx.op, &mut cursor, batch_size, wait)
    } else {
        let deadline = cursor.max_time_left.map(|left| Instant::now() + left);
        cursor.exec.set_deadline(deadline);
        // `maxTimeAlwaysTimeOut` fails every operation with a time limit, a getMore of a
        // cursor whose find had one included.
        let result = if deadline.is_some() && ctx.state.fail_points.max_time_always_times_out() {
            Err(Error::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            ))
        } else {
            cursor.next_batch(batch_size)
        };
        cursor.max_time_left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        result
    };
    cursor.exec.set_deadline(None);
    cursor.last_used = Instant::now();
    let mut examined = cursor.examined;
    let n = result.as_ref().map(|(b, _)| b.len()).ok();
    let closes = result.as_ref().map_or(true, |(_, done)| *done);
    super::note_read(
        ctx,
        &cursor.exec,
        &mut examined,
        n,
        Some(if closes { 0 } else { id }),
    );
    cursor.examined = examined;
    let (batch, done) = match result {
        Ok(r) => r,
        Err(e) => {
            drop(cursor);
            ctx.state.cursors.remove(id);
            return Err(e);
        }
    };
    drop(cursor);
    let id = if done {
        ctx.state.cursors.remove(id);
        0
    } else {
        id
    };
    ctx.batch = batch;
    Ok(batch_reply(&ns, id, "nextBatch", Vec::new()))
}

/// How long an awaitData `getMore` without `maxTimeMS` waits for inserts.
const AWAIT_DATA_DEFAULT: std::time::Duration = std::time::Duration::from_secs(1);

/// A tailable awaitData batch: what is there now, else whatever the next insert brings,
/// waiting on the collection's insert signal (no polling) until `until`.
fn await_batch(
    op: &crate::curop::ActiveOp,
    cursor: &mut Cursor,
    batch_size: Option<u64>,
    until: Instant,
) -> Result<(Vec<RawDocumentBuf>, bool)> {
    let Some(coll) = cursor.tail.as_ref().map(|t| t.coll.clone()) else {
        return cursor.next_batch(batch_size);
    };
    loop {
        let seen = coll.capped.generation();
        let (batch, done) = cursor.next_batch(batch_size)?;
        if !batch.is_empty() || done || Instant::now() >= until {
            return Ok((batch, done));
        }
        if !op.awaiting(|| coll.capped.wait_for_insert(seen, until)) {
            return Ok((batch, done));
        }
    }
}

pub fn kill_cursors(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("killCursors")?;
    let ids = match ctx.body.get("cursors") {
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => return Err(wrong_type("killCursors", "cursors", other, "array")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'killCursors.cursors' is missing but a required field",
            ))
        }
    };
    let (mut killed, mut not_found, mut alive) = (Vec::new(), Vec::new(), Vec::new());
    for id in ids {
        let Bson::Int64(n) = id else {
            return Err(wrong_type("killCursors", "cursors", &id, "long"));
        };
        let belongs = ctx
            .state
            .cursors
            .get(n)
            .ok()
            .map(|c| c.lock().ns == ns)
            .unwrap_or(false);
        // Under --auth, a cursor opened in a session is killed only from that session
        // (MongoDB's checkCursorSessionPrivilege); it stays alive otherwise.
        let other_session = ctx.state.config.auth
            && ctx
                .state
                .cursors
                .session(n)
                .flatten()
                .is_some_and(|s| Some(s) != session_id(ctx));
        if belongs && other_session {
            alive.push(Bson::Int64(n));
        } else if belongs && ctx.state.cursors.remove(n) {
            killed.push(Bson::Int64(n));
        } else {
            not_found.push(Bson::Int64(n));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": alive,
        "cursorsUnknown": [],
    })
}

/// The namespace and query of a `count` command.
pub fn count_spec(ctx: &Ctx) -> Result<(Namespace, FindSpec)> {
    check_fields(
        ctx,
        &[
            "count",
            "query",
            "limit",
            "skip",
            "hint",
            "collation",
            "readConcern",
            "fields",
        ],
    )?;
    let ns = ctx.namespace("count")?;
    let limit = ctx.opt_i64("limit")?.map(|n| n.unsigned_abs()).unwrap_or(0);
    let skip = match ctx.opt_i64("skip")? {
        Some(n) if n < 0 => return Err(Error::bad_value("skip value is negative in count query")),
        Some(n) => n as u64,
        None => 0,
    };
    let spec = FindSpec {
        filter: filter(ctx, "query")?,
        skip,
        limit,
        hint: hint(ctx)?,
        deadline: ctx.deadline,
        collation: ctx.command_collation(&ns)?,
        min: ctx.opt_document("min")?.filter(|d| !d.is_empty()),
        max: ctx.opt_document("max")?.filter(|d| !d.is_empty()),
        count: true,
        ..FindSpec::default()
    };
    Ok((ns, spec))
}

pub fn count(ctx: &mut Ctx) -> Result<Document> {
    let (ns, spec) = count_spec(ctx)?;
    if ctx.state.engine.view(&ns).is_some() {
        return super::views::count(ctx, &ns, &spec);
    }
    let coll = ctx.collection(&ns);
    let mut exec = ctx.state.engine.plan_find(coll.as_ref(), &spec)?;
    // COUNT returns nothing itself; it has counted once the plan is done.
    while exec.get_next()?.is_some() {}
    super::note_read(ctx, &exec, &mut (0, 0), None, None);
    Ok(doc! { "n": nidus_common::number(exec.counted()) })
}

/// The namespace, query and key of a `distinct` command.
pub fn distinct_spec(ctx: &Ctx) -> Result<(Namespace, FindSpec, String)> {
    check_fields(
        ctx,
        &[
            "distinct",
            "key",
            "query",
            "collation",
            "hint",
            "readConcern",
        ],
    )?;
    let ns = ctx.namespace("distinct")?;
    let key = match ctx.body.get("key") {
        Some(Bson::String(k)) => k.clone(),
        Some(other) => return Err(wrong_type("distinct", "key", other, "string")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'distinct.key' is missing but a required field",
            ))
        }
    };
    let spec = FindSpec {
        filter: filter(ctx, "query")?,
        hint: hint(ctx)?,
        deadline: ctx.deadline,
        collation: ctx.command_collation(&ns)?,
        source: ctx.read_source(),
        ..FindSpec::default()
    };
    Ok((ns, spec, key))
}

pub fn distinct(ctx: &mut Ctx) -> Result<Document> {
    let (ns, spec, key) = distinct_spec(ctx)?;
    let path = nidus_doc::path::FieldPath::parse(&key);
    let mut values: Vec<Bson> = Vec::new();
    let mut collation = spec.collation.clone();
    if ctx.state.engine.view(&ns).is_some() {
        collation = super::views::collation(ctx, &ns)?;
        let opened = super::views::open(ctx, &ns, super::views::distinct_pipeline(&spec), None)?;
        let mut stream = opened.stream;
        while let Some(d) = stream.next()? {
            let raw = nidus_common::encode::document_to_raw(&d)
                .map_err(|e| Error::internal(e.to_string()))?;
            distinct_values(&raw, &path, &mut values)?;
        }
    } else {
        let coll = ctx.collection(&ns);
        let mut exec = ctx.state.engine.plan_distinct(coll.as_ref(), &spec, &key)?;
        while let Some(d) = exec.next_doc()? {
            distinct_values(&d, &path, &mut values)?;
        }
        super::note_read(ctx, &exec, &mut (0, 0), None, None);
    }
    // Values equal under the collation are one value (the first in sort order is kept).
    let collation = nidus_engine::find::parse_collation(collation.as_ref())?;
    let cmp = |a: &Bson, b: &Bson| nidus_doc::compare::cmp_bson_with(a, b, collation.as_ref());
    values.sort_by(cmp);
    values.dedup_by(|a, b| cmp(a, b).is_eq());
    Ok(doc! { "values": values })
}

/// The values `distinct` collects from one document: the value at the path, or the elements
/// of an array found there (arrays inside that array count as values themselves).
fn distinct_values(
    doc: &bson::RawDocument,
    path: &nidus_doc::path::FieldPath,
    out: &mut Vec<Bson>,
) -> Result<()> {
    for item in nidus_doc::path::collect(doc, path, true) {
        let Some(v) = item.value else { continue };
        if !item.from_leaf_array && matches!(v, bson::RawBsonRef::Array(_)) {
            continue;
        }
        let owned = Bson::try_from(v.to_raw_bson()).map_err(|e| Error::internal(e.to_string()))?;
        out.push(owned);
    }
    Ok(())
}
