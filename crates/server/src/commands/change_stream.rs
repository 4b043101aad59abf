//! `aggregate` with a leading `$changeStream` and the `getMore`s of its cursor.
//!
//! The pipeline runs over the engine's change event source
//! (`nidus_engine::pipeline::change_stream`); the cursor stays open until an invalidate
//! event, and each `getMore` that finds nothing waits on the oplog's visibility signal (no
//! polling) for `maxTimeMS` (1 s by default), then returns an empty batch. Every reply
//! carries the `postBatchResumeToken` drivers resume from.

use super::find::{batch_reply, check_fields};
use super::{wrong_type, Ctx};
use crate::cursor::{Cursor, DEFAULT_FIRST_BATCH};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::pipeline::change_stream::{
    ChangeStreamSource, ChangeStreamSpec, ResumeToken, Scope, SharedState,
};
use nidus_engine::pipeline::{self, run, ExpCtx, ParseCtx};
use std::time::{Duration, Instant};

/// The stages a change stream pipeline may hold after `$changeStream`.
const ALLOWED: &[&str] = &[
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
    "$redact",
];

/// How long a `getMore` without `maxTimeMS` waits for events.
pub(crate) const AWAIT_DEFAULT: Duration = Duration::from_secs(1);

fn invalid_ns(msg: String) -> Error {
    Error::new(ErrorCode::InvalidNamespace, msg)
}

/// The scope of a stream opened by `ctx`, with MongoDB's refusals.
fn scope(ctx: &Ctx, spec: &ChangeStreamSpec) -> Result<Scope> {
    let coll = match ctx.body.get("aggregate") {
        Some(Bson::String(_)) => Some(ctx.namespace("aggregate")?),
        _ => None,
    };
    let db = ctx.db.as_str();
    if spec.all_changes_for_cluster {
        if db != "admin" || coll.is_some() {
            return Err(invalid_ns(
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name".into(),
            ));
        }
        return Ok(Scope::Cluster);
    }
    if matches!(db, "admin" | "config" | "local") {
        return Err(invalid_ns(format!(
            "$changeStream may not be opened on the internal {db} database"
        )));
    }
    match coll {
        Some(ns) if ns.is_system() => Err(invalid_ns(format!(
            "$changeStream may not be opened on the internal {ns} collection"
        ))),
        Some(ns) => Ok(Scope::Collection(ns)),
        None => Ok(Scope::Database(db.to_string())),
    }
}

pub fn aggregate(ctx: &mut Ctx) -> Result<Document> {
    open(ctx).map_err(label_error)
}

/// MongoDB's change stream error labels: `ResumableChangeStreamError` on the errors a
/// driver resumes after (network, not-primary, shutdown, ...), `NonResumableChangeStreamError`
/// on the stream's fatal errors.
pub fn label_error(e: Error) -> Error {
    const RESUMABLE: &[i32] = &[
        6, 7, 63, 89, 91, 133, 150, 189, 234, 262, 9001, 10107, 11600, 11602, 13388, 13435, 13436,
    ];
    let code = e.code.code();
    if RESUMABLE.contains(&code) {
        e.with_label("ResumableChangeStreamError")
    } else if matches!(code, 280 | 286) {
        e.with_label("NonResumableChangeStreamError")
    } else {
        e
    }
}

fn open(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, super::aggregate::FIELDS)?;
    if ctx.state.engine.oplog().is_none() {
        return Err(Error::new(
            ErrorCode::Location(40573),
            "The $changeStream stage is only supported on replica sets",
        ));
    }
    let level = ctx
        .body
        .get_document("readConcern")
        .ok()
        .and_then(|rc| rc.get_str("level").ok());
    if let Some(level) = level.filter(|l| *l != "majority") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("Aggregation stage $changeStream cannot run with a readConcern other than 'majority'. Current readConcern: {level}"),
        ));
    }
    if ctx.txn.is_some() {
        return Err(Error::new(
            ErrorCode::OperationNotSupportedInTransaction,
            "Operation not permitted in transaction :: caused by :: $changeStream cannot run in a multi-document transaction",
        ));
    }
    let mut items = match ctx.body.get("pipeline") {
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => return Err(wrong_type("aggregate", "pipeline", other, "array")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'aggregate.pipeline' is missing but a required field",
            ))
        }
    };
    let batch_size =
        match ctx.body.get("cursor") {
            Some(Bson::Document(c)) => super::opt_i64("aggregate", c, "batchSize")?,
            Some(other) => return Err(wrong_type("aggregate", "cursor", other, "object")),
            None => return Err(Error::new(
                ErrorCode::FailedToParse,
                "The 'cursor' option is required, except for aggregate with the explain argument",
            )),
        };
    if let Some(n) = batch_size.filter(|n| *n < 0) {
        return Err(Error::new(
            ErrorCode::BadValue,
            format!("BSON field 'batchSize' value must be >= 0, actual value '{n}'"),
        ));
    }
    let spec_arg = items
        .first()
        .and_then(Bson::as_document)
        .and_then(|d| d.get("$changeStream"))
        .cloned()
        .unwrap_or(Bson::Null);
    let spec = ChangeStreamSpec::parse(&spec_arg)?;
    let scope = scope(ctx, &spec)?;
    let split = take_split_stage(&mut items)?;
    for item in &items[1..] {
        let name = item
            .as_document()
            .and_then(|d| d.keys().next())
            .cloned()
            .unwrap_or_default();
        if name == "$changeStream" {
            return Err(Error::new(
                ErrorCode::Location(40602),
                "$changeStream is only valid as the first stage in a pipeline",
            ));
        }
    }
    let mut exp = ExpCtx::new(ctx.state.engine.clone(), &ctx.db);
    let pcx = ParseCtx::new(&ctx.db).with_views(ctx.state.engine.clone());
    if let Some(lets) = ctx.opt_document("let")? {
        pcx.define_command_let(&lets, &exp)?;
    }
    // Unknown stages fail as in any pipeline (40324) before the change stream's own check.
    let stages = pipeline::parse_pipeline(&items[1..], &pcx)?;
    for item in &items[1..] {
        let name = item
            .as_document()
            .and_then(|d| d.keys().next())
            .cloned()
            .unwrap_or_default();
        if name.starts_with('$') && !ALLOWED.contains(&name.as_str()) {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                format!("{name} is not permitted in a $changeStream pipeline"),
            ));
        }
    }
    exp = exp.with_bindings(&pcx);
    let (source, state) = ChangeStreamSource::open(ctx.state.engine.clone(), scope.clone(), spec)?;
    state.lock().split_large_events = split;
    let opened = run::open(&exp, None, &stages, Some(Box::new(source)))?;
    let cursor_ns = match &scope {
        Scope::Collection(ns) => ns.clone(),
        _ => Namespace::new(&ctx.db, "$cmd.aggregate"),
    };
    let mut cursor = Cursor::new(cursor_ns.clone(), opened.into_executor(None));
    cursor.change_stream = Some(state.clone());
    let first = batch_size
        .map(|n| n.max(0) as u64)
        .unwrap_or(DEFAULT_FIRST_BATCH);
    let (batch, done) = next_batch(&mut cursor, &state, Some(first))?;
    let id = if done {
        0
    } else {
        ctx.state
            .cursors
            .register(cursor, ctx.conn.auth.owner(), super::find::session_id(ctx))
    };
    Ok(reply(&cursor_ns, id, "firstBatch", batch, &state))
}

/// A batch of events (at most `batch_size`), checking that the pipeline kept each event's
/// `_id`; done once the stream was invalidated.
fn next_batch(
    cursor: &mut Cursor,
    state: &SharedState,
    batch_size: Option<u64>,
) -> Result<(Vec<RawDocumentBuf>, bool)> {
    let (batch, _) = cursor.next_batch(batch_size)?;
    let mut st = state.lock();
    for doc in &batch {
        let id = doc
            .get_document("_id")
            .ok()
            .and_then(|d| d.to_raw_document_buf().to_document().ok());
        // Each output is one of the source's events, in order, with its `_id` unchanged.
        let found = id.is_some_and(|id| {
            while let Some(t) = st.emitted.pop_front() {
                if t == id {
                    return true;
                }
            }
            false
        });
        if !found {
            return Err(Error::new(
                ErrorCode::ChangeStreamFatalError,
                "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed.",
            ));
        }
    }
    if cursor.pending.is_none() {
        // Everything the source produced went out or was filtered out.
        st.emitted.clear();
    }
    let (split, skip) = (st.split_large_events, st.skip_fragments);
    if !batch.is_empty() {
        // The first event delivered is the resumed one or a later one.
        st.skip_fragments = None;
    }
    drop(st);
    let mut out = Vec::with_capacity(batch.len());
    for doc in batch {
        out.extend(split_event(doc, split, skip)?);
    }
    let batch = out;
    let done = state.lock().invalidated && cursor.pending.is_none();
    Ok((batch, done))
}

fn reply(
    ns: &Namespace,
    id: i64,
    field: &str,
    batch: Vec<RawDocumentBuf>,
    state: &SharedState,
) -> Document {
    let mut r = batch_reply(ns, id, field, batch);
    if let Ok(c) = r.get_document_mut("cursor") {
        c.insert(
            "postBatchResumeToken",
            state.lock().resume_token.to_document(),
        );
    }
    r
}

/// The `getMore` of a change stream cursor: the events there are now, else those the next
/// visible oplog entries bring, waiting until `maxTimeMS` (default 1 s) passes.
pub fn get_more(
    ctx: &mut Ctx,
    id: i64,
    cursor: &mut Cursor,
    state: &SharedState,
    batch_size: Option<u64>,
) -> Result<(Document, bool)> {
    // Woken only by entries in the stream's scope (a write elsewhere leaves it asleep).
    let channel = state.lock().channel.clone();
    // The connection may already have waited out the await time (see
    // `connection::idle_change_stream`): then there is no waiting left.
    let until = if std::mem::take(&mut ctx.conn.awaited_data) {
        Instant::now()
    } else {
        ctx.deadline
            .unwrap_or_else(|| Instant::now() + AWAIT_DEFAULT)
    };
    let (batch, done) = loop {
        let seen = channel.generation();
        let (batch, done) = next_batch(cursor, state, batch_size)?;
        if !batch.is_empty() || done || Instant::now() >= until {
            state.lock().idle_at = (batch.is_empty() && !done).then_some(seen);
            break (batch, done);
        }
        if ctx
            .state
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            break (batch, done);
        }
        // Wake at least every second to notice shutdown and killed operations.
        let wait_until = until.min(Instant::now() + Duration::from_secs(1));
        ctx.op.awaiting(|| channel.wait(seen, wait_until));
        nidus_engine::opctx::check_interrupt()?;
    };
    let ns = cursor.ns.clone();
    let out_id = if done { 0 } else { id };
    Ok((reply(&ns, out_id, "nextBatch", batch, state), done))
}

/// Removes a final `$changeStreamSplitLargeEvent` from the stages; true when there was one.
fn take_split_stage(items: &mut Vec<Bson>) -> Result<bool> {
    const NAME: &str = "$changeStreamSplitLargeEvent";
    let Some(pos) = items
        .iter()
        .position(|s| s.as_document().is_some_and(|d| d.contains_key(NAME)))
    else {
        return Ok(false);
    };
    if pos != items.len() - 1 {
        return Err(Error::new(
            ErrorCode::Location(7182802),
            "$changeStreamSplitLargeEvent must be the last stage in the pipeline",
        ));
    }
    match items[pos].as_document().and_then(|d| d.get(NAME)) {
        Some(Bson::Document(d)) if d.is_empty() => {}
        _ => {
            return Err(Error::new(
                ErrorCode::Location(7182800),
                "$changeStreamSplitLargeEvent stage expects an empty document as argument",
            ))
        }
    }
    items.pop();
    Ok(true)
}

/// The largest document a reply holds (MongoDB's `BSONObjMaxUserSize`).
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// Room kept in each fragment for its `_id` and `splitEvent` fields.
const FRAGMENT_OVERHEAD: usize = 256;

/// An event as it goes out: whole when it fits in 16 MiB; else, with
/// `$changeStreamSplitLargeEvent`, as fragments `{_id: <fragment token>, splitEvent:
/// {fragment, of}, <fields>}` holding its top-level fields in order (those up to `skip`, a
/// resumed fragment, left out), else BSONObjectTooLarge as in MongoDB.
fn split_event(
    doc: RawDocumentBuf,
    split: bool,
    skip: Option<ResumeToken>,
) -> Result<Vec<RawDocumentBuf>> {
    let size = doc.as_bytes().len();
    if size <= MAX_EVENT_BYTES {
        return Ok(vec![doc]);
    }
    let too_large = || {
        Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!("BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and 16793600(16MB)"),
        )
    };
    if !split {
        return Err(too_large());
    }
    let id = doc
        .get("_id")?
        .and_then(|v| bson::Bson::try_from(v.to_raw_bson()).ok())
        .ok_or_else(too_large)?;
    let token = ResumeToken::parse(&id)?;
    let mut fragments: Vec<Vec<(String, bson::RawBson)>> = vec![Vec::new()];
    let mut used = 0usize;
    for el in doc.iter() {
        let (k, v) = el?;
        if k == "_id" {
            continue;
        }
        let v = v.to_raw_bson();
        let mut one = RawDocumentBuf::new();
        one.append(k, v.clone());
        let len = one.as_bytes().len();
        if len + FRAGMENT_OVERHEAD > MAX_EVENT_BYTES {
            return Err(too_large());
        }
        if used + len + FRAGMENT_OVERHEAD > MAX_EVENT_BYTES {
            fragments.push(Vec::new());
            used = 0;
        }
        used += len;
        if let Some(f) = fragments.last_mut() {
            f.push((k.to_string(), v));
        }
    }
    let of = fragments.len() as i32;
    let skip = skip
        .filter(|s| s.position() == token.position())
        .and_then(|s| s.fragment);
    let mut out = Vec::new();
    for (i, fields) in fragments.into_iter().enumerate() {
        if skip.is_some_and(|s| i as u16 <= s) {
            continue;
        }
        let mut frag = RawDocumentBuf::new();
        let id = RawDocumentBuf::from_document(&token.with_fragment(i as u16).to_document())
            .map_err(|e| Error::internal(e.to_string()))?;
        frag.append("_id", id);
        let mut split_doc = RawDocumentBuf::new();
        split_doc.append("fragment", i as i32 + 1);
        split_doc.append("of", of);
        frag.append("splitEvent", split_doc);
        for (k, v) in fields {
            frag.append(k, v);
        }
        out.push(frag);
    }
    Ok(out)
}

/// Whether an `aggregate`'s pipeline opens with `$changeStream`.
pub fn is_change_stream(body: &Document) -> bool {
    body.get_array("pipeline")
        .ok()
        .and_then(|p| p.first())
        .and_then(Bson::as_document)
        .is_some_and(|d| d.contains_key("$changeStream"))
}
