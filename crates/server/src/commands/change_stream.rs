//! `aggregate` with a leading `$changeStream` and the `getMore`s of its cursor.
//!
//! The pipeline runs over the engine's change event source
//! (`nidus_engine::pipeline::change_stream`); the cursor stays open until an invalidate
//! event, and each `getMore` that finds nothing waits on the oplog's visibility signal (no
//! polling) for `maxTimeMS` (1 s by default), then returns an empty batch. Every reply
//! carries the `postBatchResumeToken` drivers resume from.

use super::find::check_fields;
use super::{wrong_type, Ctx};
use crate::cursor::{Cursor, DEFAULT_FIRST_BATCH, MAX_BATCH_BYTES};
use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::pipeline::change_stream::{
    ChangeStreamSource, ChangeStreamSpec, ResumeToken, Scope, SharedState,
};
use nidus_engine::pipeline::{self, run, DocStream, ExpCtx, ParseCtx, VecStream};
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
    // Without later stages (what `watch()` sends) the events go into the reply as the
    // source builds them; otherwise through the pipeline's executor.
    let direct = stages.is_empty() && !split;
    let (input, direct): (Box<dyn DocStream>, _) = match direct {
        true => (
            VecStream::boxed(Vec::new()),
            Some(Direct { source, held: None }),
        ),
        false => (Box::new(source), None),
    };
    let opened = run::open(&exp, None, &stages, Some(input))?;
    let cursor_ns = match &scope {
        Scope::Collection(ns) => ns.clone(),
        _ => Namespace::new(&ctx.db, "$cmd.aggregate"),
    };
    let mut cursor = Cursor::new(cursor_ns.clone(), opened.into_executor(None));
    cursor.change_stream = Some(state.clone());
    cursor.change_events = direct;
    let first = batch_size
        .map(|n| n.max(0) as u64)
        .unwrap_or(DEFAULT_FIRST_BATCH);
    let Batch { events, done, .. } = next_batch(&mut cursor, &state, Some(first))?;
    let id = if done {
        0
    } else {
        cursor.api = ctx.api.clone();
        ctx.state
            .cursors
            .register(cursor, ctx.conn.auth.owner(), super::find::session_id(ctx))
    };
    Ok(reply(&cursor_ns, id, "firstBatch", events, &state))
}

/// A change stream whose events go from its source into the reply without a pipeline.
pub struct Direct {
    source: ChangeStreamSource,
    /// An event that did not fit in the previous batch, its size, its token and the token
    /// before it.
    held: Option<Held>,
}

struct Held {
    event: Document,
    size: usize,
    token: ResumeToken,
    before: ResumeToken,
}

/// A batch of events (at most `batch_size`), checking that the pipeline kept each event's
/// `_id`.
struct Batch {
    events: Vec<Bson>,
    /// The stream was invalidated: it ends.
    done: bool,
    /// The source read everything readable (the batch was not cut short).
    caught_up: bool,
}

fn next_batch(cursor: &mut Cursor, state: &SharedState, batch_size: Option<u64>) -> Result<Batch> {
    if let Some(direct) = cursor.change_events.as_mut() {
        return direct_batch(direct, state, batch_size);
    }
    let (batch, _) = cursor.next_batch(batch_size)?;
    let caught_up = cursor.pending.is_none() && batch_size.is_none_or(|n| (batch.len() as u64) < n);
    let mut st = state.lock();
    for doc in &batch {
        let id = doc
            .get_document("_id")
            .ok()
            .and_then(|d| d.to_raw_document_buf().to_document().ok());
        // Each output is one of the source's events, in order, with its `_id` unchanged.
        let found = id.is_some_and(|id| {
            while let Some(t) = st.emitted.pop_front() {
                if t.to_document() == id {
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
        for part in split_event(doc, split, skip)? {
            out.push(
                bson::RawBson::Document(part)
                    .try_into()
                    .unwrap_or(Bson::Null),
            );
        }
    }
    let done = state.lock().invalidated && cursor.pending.is_none();
    Ok(Batch {
        events: out,
        done,
        caught_up,
    })
}

/// [`next_batch`] of a stream without stages: its events as the source builds them, at
/// most `batch_size` and 16 MiB (an event that would pass it waits for the next batch,
/// and the batch's resume token is the last event's that went out).
fn direct_batch(
    direct: &mut Direct,
    state: &SharedState,
    batch_size: Option<u64>,
) -> Result<Batch> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut caught_up = false;
    while batch_size.is_none_or(|n| (out.len() as u64) < n) {
        let held = match direct.held.take() {
            Some(h) => h,
            None => {
                let before = state.lock().resume_token;
                let Some(event) = direct.source.next()? else {
                    caught_up = true;
                    break;
                };
                let size = doc_len(&event);
                Held {
                    event,
                    size,
                    token: state.lock().resume_token,
                    before,
                }
            }
        };
        if held.size > MAX_EVENT_BYTES {
            return Err(too_large(held.size));
        }
        if !out.is_empty() && bytes + held.size > MAX_BATCH_BYTES {
            state.lock().resume_token = held.before;
            direct.held = Some(held);
            break;
        }
        bytes += held.size;
        state.lock().resume_token = held.token;
        out.push(Bson::Document(held.event));
    }
    let mut st = state.lock();
    // No stage can change an event's `_id`: nothing to check.
    st.emitted.clear();
    let done = st.invalidated && direct.held.is_none();
    Ok(Batch {
        events: out,
        done,
        caught_up,
    })
}

fn reply(ns: &Namespace, id: i64, field: &str, batch: Vec<Bson>, state: &SharedState) -> Document {
    let token = state.lock().resume_token.to_document();
    doc! { "cursor": {
        field: batch,
        "id": id,
        "ns": ns.full(),
        "postBatchResumeToken": token,
    } }
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
        let batch = next_batch(cursor, state, batch_size)?;
        if !batch.events.is_empty() || batch.done || Instant::now() >= until {
            // Caught up: until the channel moves past `seen`, the next getMore has nothing
            // to read, and its connection may wait for that without a thread.
            state.lock().idle_at = (batch.caught_up && !batch.done).then_some(seen);
            break (batch.events, batch.done);
        }
        if ctx
            .state
            .shutting_down
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            break (batch.events, batch.done);
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

fn too_large(size: usize) -> Error {
    Error::new(
        ErrorCode::BSONObjectTooLarge,
        format!("BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and 16793600(16MB)"),
    )
}

/// The BSON size of a document, without serializing it.
fn doc_len(d: &Document) -> usize {
    5 + d
        .iter()
        .map(|(k, v)| 2 + k.len() + value_len(v))
        .sum::<usize>()
}

/// The BSON size of a value (without its type byte and key).
fn value_len(v: &Bson) -> usize {
    use bson::spec::BinarySubtype;
    let string = |s: &str| 5 + s.len();
    match v {
        Bson::Double(_) | Bson::DateTime(_) | Bson::Timestamp(_) | Bson::Int64(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => string(s),
        Bson::Document(d) => doc_len(d),
        Bson::Array(a) => {
            5 + a
                .iter()
                .enumerate()
                .map(|(i, v)| 2 + decimal_digits(i) + value_len(v))
                .sum::<usize>()
        }
        Bson::Binary(b) => match b.subtype {
            BinarySubtype::BinaryOld => 9 + b.bytes.len(),
            _ => 5 + b.bytes.len(),
        },
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len() + 2,
        Bson::JavaScriptCodeWithScope(c) => 4 + string(&c.code) + doc_len(&c.scope),
        // Its fields are not public: measured by encoding it.
        other => bson::to_vec(&doc! { "": other.clone() })
            .map(|b| b.len().saturating_sub(7))
            .unwrap_or(0),
    }
}

fn decimal_digits(mut n: usize) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

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
    let too_large = || too_large(size);
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
        let id =
            nidus_common::encode::document_to_raw(&token.with_fragment(i as u16).to_document())
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;

    #[test]
    fn document_sizes_are_their_encoded_sizes() {
        let values = doc! {
            "double": 1.5, "string": "héllo", "empty": "", "doc": {"a": 1, "b": {"c": null}},
            "array": (0..12).map(Bson::Int32).collect::<Vec<_>>(), "nested": [[1], {"x": [true]}],
            "bin": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "old": bson::Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
            "uuid": bson::Uuid::new(), "oid": bson::oid::ObjectId::new(), "bool": false,
            "date": bson::DateTime::now(), "null": null, "undefined": Bson::Undefined,
            "regex": bson::Regex { pattern: "a.b".into(), options: "i".into() },
            "code": Bson::JavaScriptCode("x + 1".into()),
            "scope": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "x".into(), scope: doc! {"x": 1},
            }),
            "int": 7, "ts": Bson::Timestamp(bson::Timestamp { time: 1, increment: 2 }),
            "long": 7i64, "dec": Bson::Decimal128(bson::Decimal128::from_bytes([0; 16])),
            "min": Bson::MinKey, "max": Bson::MaxKey, "symbol": Bson::Symbol("s".into()),
        };
        for (k, v) in &values {
            let one = doc! { k.clone(): v.clone() };
            assert_eq!(doc_len(&one), bson::to_vec(&one).unwrap().len(), "{k}");
        }
        assert_eq!(doc_len(&values), bson::to_vec(&values).unwrap().len());
        let long: Vec<Bson> = (0..1234).map(Bson::Int64).collect();
        let d = doc! { "a": long };
        assert_eq!(doc_len(&d), bson::to_vec(&d).unwrap().len());
    }
}
