//! `$changeStream`: change events read from the oplog (`crate::oplog`).
//!
//! [`ChangeStreamSource`] is the stream a change stream pipeline starts with: it reads oplog
//! entries after its position up to the majority-readable point (never past the visibility
//! point, so it never skips an entry committed later), turns those of its scope (a
//! collection, a database, the deployment) into change events, and returns None when it has
//! caught up; the next `getMore` calls it again after waiting on the oplog's signal.
//!
//! Resume tokens (`_id: {_data: <hex>}`) encode the event's position: the entry's `ts`, a
//! token type (high-water mark 0 < event 128), the index of the operation inside a
//! transaction's `applyOps`, and whether it is the invalidate that follows the event. The hex
//! strings sort as the positions do. A stream delivers only events after its start token.

use crate::namespace::Namespace;
use crate::oplog::{ts_to_u64, u64_to_ts, Oplog};
use crate::oplog_notify::Channel;
use crate::pipeline::DocStream;
use crate::Engine;
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

const HWM: u8 = 0;
/// Marks a post-image lookup in [`ChangeStreamSource::image`]'s index argument.
const POST_IMAGE: u32 = 1 << 31;
const EVENT: u8 = 128;

/// Entries read from the oplog per storage snapshot.
const READ_BATCH: usize = 256;

/// A position in the change stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResumeToken {
    pub ts: u64,
    kind: u8,
    txn_op_index: u32,
    from_invalidate: bool,
    /// The fragment of an event `$changeStreamSplitLargeEvent` split (0-based).
    pub fragment: Option<u16>,
}

impl ResumeToken {
    /// This position without a fragment number.
    pub fn position(self) -> ResumeToken {
        ResumeToken {
            fragment: None,
            ..self
        }
    }

    pub fn with_fragment(self, fragment: u16) -> ResumeToken {
        ResumeToken {
            fragment: Some(fragment),
            ..self
        }
    }

    /// The high-water mark before every event at `ts` or later.
    pub fn high_water_mark(ts: Timestamp) -> ResumeToken {
        ResumeToken {
            ts: ts_to_u64(ts),
            kind: HWM,
            txn_op_index: 0,
            from_invalidate: false,
            fragment: None,
        }
    }

    fn event(ts: u64, txn_op_index: u32) -> ResumeToken {
        ResumeToken {
            ts,
            kind: EVENT,
            txn_op_index,
            from_invalidate: false,
            fragment: None,
        }
    }

    pub fn is_invalidate(&self) -> bool {
        self.from_invalidate
    }

    /// `{_data: "82<ts><type><index><invalidate>"}` in upper-case hex (MongoDB's keystring
    /// tokens also start with 0x82, the Timestamp type byte).
    pub fn to_document(&self) -> Document {
        // Written digit by digit: every event and reply makes one.
        fn hex(out: &mut String, v: u64, digits: u32) {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            for i in (0..digits).rev() {
                out.push(HEX[((v >> (i * 4)) & 0xF) as usize] as char);
            }
        }
        let mut data = String::with_capacity(34);
        data.push_str("82");
        hex(&mut data, self.ts, 16);
        hex(&mut data, self.kind.into(), 2);
        hex(&mut data, self.txn_op_index.into(), 8);
        hex(&mut data, self.from_invalidate.into(), 2);
        if let Some(f) = self.fragment {
            hex(&mut data, f.into(), 4);
        }
        doc! { "_data": data }
    }

    /// Parses a token as [`ResumeToken::to_document`] writes it.
    pub fn parse(v: &Bson) -> Result<ResumeToken> {
        let bad = || {
            Error::new(
                ErrorCode::Location(50811),
                format!(
                    "KeyString format error: invalid resume token {}",
                    nidus_common::shell::format(v)
                ),
            )
        };
        let Bson::Document(d) = v else {
            return Err(Error::new(
                ErrorCode::TypeMismatch,
                format!(
                    "BSON field '$changeStream.resumeAfter' is the wrong type '{}', expected type 'object'",
                    nidus_doc::compare::type_name(v)
                ),
            ));
        };
        let data = match d.get("_data") {
            Some(Bson::String(s)) => s,
            Some(_) => return Err(bad()),
            None => {
                return Err(Error::new(
                    ErrorCode::Location(40414),
                    "BSON field 'ResumeTokenData._data' is missing but a required field",
                ))
            }
        };
        const LEN: usize = 2 + 16 + 2 + 8 + 2;
        if !(data.len() == LEN || data.len() == LEN + 4) || !data.starts_with("82") {
            return Err(bad());
        }
        let hex = |r: std::ops::Range<usize>| u64::from_str_radix(&data[r], 16).map_err(|_| bad());
        Ok(ResumeToken {
            ts: hex(2..18)?,
            kind: hex(18..20)? as u8,
            txn_op_index: hex(20..28)? as u32,
            from_invalidate: hex(28..30)? != 0,
            fragment: match data.len() > LEN {
                true => Some(hex(LEN..LEN + 4)? as u16),
                false => None,
            },
        })
    }
}

/// `fullDocument`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullDocument {
    Default,
    UpdateLookup,
    WhenAvailable,
    Required,
}

/// `fullDocumentBeforeChange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

/// Where the stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Now,
    ResumeAfter(ResumeToken),
    StartAfter(ResumeToken),
    AtOperationTime(Timestamp),
}

/// The `$changeStream` stage's options.
#[derive(Debug, Clone)]
pub struct ChangeStreamSpec {
    pub full_document: FullDocument,
    pub before_change: BeforeChange,
    pub start: Start,
    pub show_expanded_events: bool,
    pub all_changes_for_cluster: bool,
}

fn enum_error(field: &str, v: &str) -> Error {
    Error::new(
        ErrorCode::BadValue,
        format!("Enumeration value '{v}' for field '$changeStream.{field}' is not a valid value."),
    )
}

fn wrong_type(field: &str, v: &Bson, expected: &str) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '$changeStream.{field}' is the wrong type '{}', expected type '{expected}'",
            nidus_doc::compare::type_name(v)
        ),
    )
}

impl ChangeStreamSpec {
    pub fn parse(v: &Bson) -> Result<ChangeStreamSpec> {
        let Bson::Document(d) = v else {
            return Err(Error::new(
                ErrorCode::Location(50808),
                "$changeStream stage expects a document as argument",
            ));
        };
        let mut spec = ChangeStreamSpec {
            full_document: FullDocument::Default,
            before_change: BeforeChange::Off,
            start: Start::Now,
            show_expanded_events: false,
            all_changes_for_cluster: false,
        };
        let mut starts = 0;
        for (k, v) in d {
            let string = |v: &Bson| match v {
                Bson::String(s) => Ok(s.clone()),
                other => Err(wrong_type(k, other, "string")),
            };
            let boolean = |v: &Bson| match v {
                Bson::Boolean(b) => Ok(*b),
                other => Err(wrong_type(k, other, "bool")),
            };
            match k.as_str() {
                "fullDocument" => {
                    spec.full_document = match string(v)?.as_str() {
                        "default" => FullDocument::Default,
                        "updateLookup" => FullDocument::UpdateLookup,
                        "whenAvailable" => FullDocument::WhenAvailable,
                        "required" => FullDocument::Required,
                        other => return Err(enum_error(k, other)),
                    }
                }
                "fullDocumentBeforeChange" => {
                    spec.before_change = match string(v)?.as_str() {
                        "off" => BeforeChange::Off,
                        "whenAvailable" => BeforeChange::WhenAvailable,
                        "required" => BeforeChange::Required,
                        other => return Err(enum_error(k, other)),
                    }
                }
                "resumeAfter" => {
                    starts += 1;
                    spec.start = Start::ResumeAfter(ResumeToken::parse(v)?);
                }
                "startAfter" => {
                    starts += 1;
                    spec.start = Start::StartAfter(ResumeToken::parse(v)?);
                }
                "startAtOperationTime" => {
                    starts += 1;
                    spec.start = match v {
                        Bson::Timestamp(ts) => Start::AtOperationTime(*ts),
                        other => return Err(wrong_type(k, other, "timestamp")),
                    }
                }
                "showExpandedEvents" => spec.show_expanded_events = boolean(v)?,
                "allChangesForCluster" => spec.all_changes_for_cluster = boolean(v)?,
                // Accepted and without effect here (internal or for sharded clusters).
                "showSystemEvents"
                | "showRawUpdateDescription"
                | "allowToRunOnConfigDB"
                | "allowToRunOnSystemNS"
                | "showMigrationEvents" => {
                    boolean(v)?;
                }
                other => {
                    return Err(Error::new(
                        ErrorCode::Location(40415),
                        format!("BSON field '$changeStream.{other}' is an unknown field."),
                    ))
                }
            }
        }
        if starts > 1 {
            return Err(Error::new(
                ErrorCode::Location(40674),
                "Only one type of resume option is allowed, but multiple were found.",
            ));
        }
        if let Start::ResumeAfter(t) = spec.start {
            if t.is_invalidate() {
                return Err(Error::new(
                    ErrorCode::InvalidResumeToken,
                    "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification.",
                ));
            }
        }
        Ok(spec)
    }
}

/// What a stream watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Collection(Namespace),
    Database(String),
    Cluster,
}

impl Scope {
    /// The key of this scope's wake-up channel.
    pub fn channel_key(&self) -> String {
        use crate::oplog_notify as n;
        match self {
            Scope::Collection(ns) => n::collection_key(&ns.db, &ns.coll),
            Scope::Database(db) => n::database_key(db),
            Scope::Cluster => n::CLUSTER_KEY.to_string(),
        }
    }

    /// Whether data changes to `ns` are in scope (system collections and the internal
    /// databases are not watched by database and cluster streams).
    fn covers(&self, ns: &Namespace) -> bool {
        match self {
            Scope::Collection(c) => c == ns,
            Scope::Database(db) => &ns.db == db && !ns.is_system(),
            Scope::Cluster => {
                !matches!(ns.db.as_str(), "admin" | "config" | "local") && !ns.is_system()
            }
        }
    }
}

/// The stream's position, shared with the cursor that reports it.
#[derive(Debug)]
pub struct StreamState {
    /// The token of the last event the source produced, or the high-water mark once it has
    /// caught up (the cursor's `postBatchResumeToken`).
    pub resume_token: ResumeToken,
    /// The tokens of the events produced since the cursor last checked its output (the
    /// pipeline may filter events but not change their `_id`).
    pub emitted: VecDeque<ResumeToken>,
    /// An invalidate event was produced: the stream ends after it.
    pub invalidated: bool,
    /// `$changeStreamSplitLargeEvent`: events over 16 MiB go out as fragments.
    pub split_large_events: bool,
    /// Resuming from a fragment: the fragments of that event up to this one were delivered.
    pub skip_fragments: Option<ResumeToken>,
    /// Wakes the stream's `getMore`s when an entry in its scope becomes readable.
    pub channel: Arc<Channel>,
    /// The channel's generation when the last `getMore` left the stream caught up (it read
    /// every readable entry): while the generation is unchanged the next one has nothing
    /// to read yet, so the connection may wait for it without a thread.
    pub idle_at: Option<u64>,
}

pub type SharedState = Arc<Mutex<StreamState>>;

/// The source stage of a change stream pipeline.
pub struct ChangeStreamSource {
    engine: Arc<Engine>,
    oplog: Arc<Oplog>,
    scope: Scope,
    spec: ChangeStreamSpec,
    /// Events after this position are delivered.
    start: ResumeToken,
    /// Entries up to this `ts` were read.
    read_through: u64,
    pending: VecDeque<(ResumeToken, Document)>,
    state: SharedState,
    channel: Arc<Channel>,
}

impl ChangeStreamSource {
    /// Opens a stream: checks that the oplog still holds its start point
    /// (ChangeStreamHistoryLost otherwise).
    pub fn open(
        engine: Arc<Engine>,
        scope: Scope,
        spec: ChangeStreamSpec,
    ) -> Result<(ChangeStreamSource, SharedState)> {
        let Some(oplog) = engine.oplog().cloned() else {
            return Err(Error::new(
                ErrorCode::Location(40573),
                "The $changeStream stage is only supported on replica sets",
            ));
        };
        let channel = oplog.channel(&scope.channel_key());
        let readable = oplog.majority_readable_u64();
        let start = match spec.start {
            // As MongoDB: after the newest entry this member has applied (the operation
            // time the opening aggregate reports), not after the majority point, so a write
            // acknowledged before the stream opened is never one of its events.
            Start::Now => {
                ResumeToken::high_water_mark(u64_to_ts(oplog.visible_u64().saturating_add(1)))
            }
            Start::ResumeAfter(t) | Start::StartAfter(t) => t,
            Start::AtOperationTime(ts) => ResumeToken::high_water_mark(ts),
        };
        if spec.start != Start::Now {
            let first = oplog.first_ts(engine.kv())?;
            let lost = match first {
                Some(first) => ts_to_u64(first) > start.ts && start.ts <= readable,
                None => false,
            };
            if lost {
                return Err(Error::new(
                    ErrorCode::ChangeStreamHistoryLost,
                    "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
                ));
            }
        }
        let state = Arc::new(Mutex::new(StreamState {
            resume_token: start,
            emitted: VecDeque::new(),
            invalidated: false,
            split_large_events: false,
            skip_fragments: start.fragment.map(|_| start),
            channel: channel.clone(),
            idle_at: None,
        }));
        let source = ChangeStreamSource {
            engine,
            oplog,
            scope,
            spec,
            start,
            read_through: start.ts.saturating_sub(1),
            pending: VecDeque::new(),
            state: state.clone(),
            channel,
        };
        Ok((source, state))
    }

    /// Reads the next entries and queues their events; false when caught up.
    fn read_more(&mut self) -> Result<bool> {
        let readable = self.oplog.majority_readable_u64();
        if self.read_through >= readable {
            return Ok(false);
        }
        // No entry in scope was announced past our position: every readable entry up to
        // the announced point holds nothing for this stream, so it is not read.
        let announced = self.oplog.announced_through().min(readable);
        if self.channel.last_ts() <= self.read_through && announced > self.read_through {
            self.read_through = announced;
            if self.read_through >= readable {
                return Ok(false);
            }
        }
        let (entries, through) = self.oplog.read_decoded_after(
            self.engine.kv(),
            self.read_through,
            READ_BATCH,
            readable,
        )?;
        for (ts, entry) in entries {
            self.read_through = ts;
            self.events_of(&entry, ts)?;
            // An invalidate is the last event of an entry, and the stream's last.
            if self.pending.back().is_some_and(|(t, _)| t.is_invalidate()) {
                return Ok(true);
            }
        }
        self.read_through = self.read_through.max(through);
        Ok(true)
    }

    /// Whether an event at `token` comes after the start (an event split into fragments
    /// is delivered again when the start is one of its fragments; the cursor skips the
    /// fragments delivered before).
    fn after_start(&self, token: ResumeToken) -> bool {
        token > self.start || (self.start.fragment.is_some() && token == self.start.position())
    }

    fn queue(&mut self, token: ResumeToken, event: Document) {
        if self.after_start(token) {
            self.pending.push_back((token, event));
        }
    }

    /// Queues the events of one oplog entry.
    fn events_of(&mut self, entry: &CachedEntry, ts: u64) -> Result<()> {
        let doc = &entry.doc;
        let op = doc.get_str("op").unwrap_or("");
        // No-ops (a new primary's "new primary" entry, ns "") are no change.
        if op == "n" {
            return Ok(());
        }
        let apply_ops = op == "c"
            && doc
                .get_document("o")
                .is_ok_and(|o| o.get_array("applyOps").is_ok());
        if op == "c" && !apply_ops {
            return self.command_event(doc, ts);
        }
        // Built once per entry for every stream (with and without `showExpandedEvents`);
        // each stream adds what its own options ask for.
        let expanded = self.spec.show_expanded_events;
        let events = entry.events[expanded as usize].get_or_init(|| base_events(doc, ts, expanded));
        for base in events {
            if !self.scope.covers(&base.ns) || !self.after_start(base.token) {
                continue;
            }
            let mut ev = base.event.clone();
            let (ui, index) = (base.ui.as_ref(), base.token.txn_op_index);
            match base.kind {
                Kind::Insert => {}
                Kind::Update => {
                    self.add_full_document(&mut ev, &base.ns, ui, &base.key, ts, index)?;
                    self.add_before_change(&mut ev, ui, ts, index)?;
                }
                Kind::Replace | Kind::Delete => self.add_before_change(&mut ev, ui, ts, index)?,
            }
            self.queue(base.token, ev);
        }
        Ok(())
    }

    /// `fullDocument` of an update event as the stream's `fullDocument` option asks.
    fn add_full_document(
        &self,
        ev: &mut Document,
        ns: &Namespace,
        ui: Option<&Bson>,
        key: &Document,
        ts: u64,
        index: u32,
    ) -> Result<()> {
        match self.spec.full_document {
            FullDocument::Default => {}
            FullDocument::UpdateLookup => {
                let doc = match self.engine.collection(ns) {
                    Some(coll) => {
                        let spec = crate::find::FindSpec {
                            filter: key.clone(),
                            limit: 1,
                            ..Default::default()
                        };
                        let mut exec = self.engine.plan_find(Some(&coll), &spec)?;
                        match exec.next_doc()? {
                            Some(raw) => Bson::Document(Document::try_from(raw.as_ref())?),
                            None => Bson::Null,
                        }
                    }
                    None => Bson::Null,
                };
                ev.insert("fullDocument", doc);
            }
            FullDocument::WhenAvailable | FullDocument::Required => {
                let image = self.image(ui, ts, index | POST_IMAGE)?;
                match image {
                    Some(d) => {
                        ev.insert("fullDocument", d);
                    }
                    None if self.spec.full_document == FullDocument::Required => {
                        return Err(missing_image("post", ev));
                    }
                    None => {
                        ev.insert("fullDocument", Bson::Null);
                    }
                }
            }
        }
        Ok(())
    }

    fn add_before_change(
        &self,
        ev: &mut Document,
        ui: Option<&Bson>,
        ts: u64,
        index: u32,
    ) -> Result<()> {
        if self.spec.before_change == BeforeChange::Off {
            return Ok(());
        }
        match self.image(ui, ts, index)? {
            Some(d) => {
                ev.insert("fullDocumentBeforeChange", d);
            }
            None if self.spec.before_change == BeforeChange::Required => {
                return Err(missing_image("pre", ev));
            }
            None => {
                ev.insert("fullDocumentBeforeChange", Bson::Null);
            }
        }
        Ok(())
    }

    fn image(&self, ui: Option<&Bson>, ts: u64, index: u32) -> Result<Option<Document>> {
        let Some(Bson::Binary(b)) = ui else {
            return Ok(None);
        };
        let Ok(bytes) = <[u8; 16]>::try_from(b.bytes.as_slice()) else {
            return Ok(None);
        };
        let ui = bson::Uuid::from_bytes(bytes);
        let post = index & POST_IMAGE != 0;
        match post {
            true => self
                .engine
                .post_image(ui, u64_to_ts(ts), index & !POST_IMAGE),
            false => self.engine.pre_image(ui, u64_to_ts(ts), index),
        }
    }

    /// Events of a DDL entry: `drop`, `rename`, `dropDatabase` (and the `invalidate` they
    /// cause), and with `showExpandedEvents` `create`, `createIndexes`, `dropIndexes`,
    /// `modify`.
    fn command_event(&mut self, entry: &Document, ts: u64) -> Result<()> {
        let Ok(o) = entry.get_document("o") else {
            return Ok(());
        };
        let Some((cmd, target)) = o.iter().next() else {
            return Ok(());
        };
        let db = entry
            .get_str("ns")
            .unwrap_or("")
            .split_once('.')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default();
        let ui = entry.get("ui");
        let token = ResumeToken::event(ts, 0);
        let expanded = self.spec.show_expanded_events;
        let coll_ns = |name: &Bson| match name {
            Bson::String(c) => Some(Namespace::new(&db, c)),
            _ => None,
        };
        let ns_doc = |ns: &Namespace| doc! { "db": ns.db.clone(), "coll": ns.coll.clone() };
        match cmd.as_str() {
            "drop" => {
                let Some(ns) = coll_ns(target) else {
                    return Ok(());
                };
                if !self.scope.covers(&ns) {
                    return Ok(());
                }
                let mut ev = head(token, "drop", entry, ui, None, expanded);
                ev.insert("ns", ns_doc(&ns));
                self.queue(token, ev);
                if matches!(self.scope, Scope::Collection(_)) {
                    self.invalidate(token, entry);
                }
            }
            "renameCollection" => {
                let (Ok(from), Ok(to)) = (
                    o.get_str("renameCollection").map(Namespace::parse),
                    o.get_str("to").map(Namespace::parse),
                ) else {
                    return Ok(());
                };
                let (from, to) = (from?, to?);
                if !self.scope.covers(&from) && !self.scope.covers(&to) {
                    return Ok(());
                }
                let mut ev = head(token, "rename", entry, ui, None, expanded);
                ev.insert("ns", ns_doc(&from));
                ev.insert("to", ns_doc(&to));
                if expanded {
                    let mut d = doc! { "to": ns_doc(&to) };
                    if let Some(t) = o.get("dropTarget") {
                        d.insert("dropTarget", t.clone());
                    }
                    ev.insert("operationDescription", d);
                }
                self.queue(token, ev);
                if matches!(&self.scope, Scope::Collection(c) if *c == from || *c == to) {
                    self.invalidate(token, entry);
                }
            }
            "dropDatabase" => {
                let watched = match &self.scope {
                    Scope::Database(d) => *d == db,
                    Scope::Cluster => !matches!(db.as_str(), "admin" | "config" | "local"),
                    Scope::Collection(_) => false,
                };
                if !watched {
                    return Ok(());
                }
                let mut ev = head(token, "dropDatabase", entry, None, None, expanded);
                ev.insert("ns", doc! { "db": db.clone() });
                self.queue(token, ev);
                if matches!(self.scope, Scope::Database(_)) {
                    self.invalidate(token, entry);
                }
            }
            "create" | "createIndexes" | "dropIndexes" | "collMod" if expanded => {
                let Some(ns) = coll_ns(target) else {
                    return Ok(());
                };
                if !self.scope.covers(&ns) {
                    return Ok(());
                }
                let mut rest: Document = o
                    .iter()
                    .skip(1)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let (op_type, description) = match cmd.as_str() {
                    "create" => ("create", rest),
                    "createIndexes" => ("createIndexes", doc! { "indexes": [rest] }),
                    "dropIndexes" => {
                        let spec = entry.get_document("o2").cloned().unwrap_or_else(|_| {
                            rest.remove("index")
                                .map(|n| doc! { "name": n })
                                .unwrap_or_default()
                        });
                        ("dropIndexes", doc! { "indexes": [spec] })
                    }
                    _ => ("modify", rest),
                };
                let mut ev = head(token, op_type, entry, ui, None, expanded);
                ev.insert("ns", ns_doc(&ns));
                ev.insert("operationDescription", description);
                self.queue(token, ev);
            }
            _ => {}
        }
        Ok(())
    }

    fn invalidate(&mut self, event: ResumeToken, entry: &Document) {
        let token = ResumeToken {
            from_invalidate: true,
            ..event
        };
        if !self.after_start(token) {
            return;
        }
        let mut ev = doc! {
            "_id": token.to_document(),
            "operationType": "invalidate",
            "clusterTime": Bson::Timestamp(u64_to_ts(token.ts)),
        };
        if let Some(wall) = entry.get("wall") {
            ev.insert("wallTime", wall.clone());
        }
        self.queue(token, ev);
    }
}

/// An oplog entry decoded once for every stream, with the data events built from it
/// (index 0 without `showExpandedEvents`, 1 with it).
pub struct CachedEntry {
    pub doc: Document,
    events: [OnceLock<Vec<BaseEvent>>; 2],
}

impl CachedEntry {
    pub fn new(doc: Document) -> CachedEntry {
        CachedEntry {
            doc,
            events: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Insert,
    Update,
    Replace,
    Delete,
}

/// A data change as every stream sees it, before the fields a stream's own options add
/// (`fullDocument` lookups and images, which come last in the event).
struct BaseEvent {
    ns: Namespace,
    token: ResumeToken,
    kind: Kind,
    event: Document,
    /// `documentKey` (an `updateLookup` finds the document by it).
    key: Document,
    ui: Option<Bson>,
}

/// The data events of an `i`/`u`/`d` entry, or of the operations of an `applyOps` one.
fn base_events(entry: &Document, ts: u64, expanded: bool) -> Vec<BaseEvent> {
    let items = entry
        .get_document("o")
        .ok()
        .and_then(|o| o.get_array("applyOps").ok());
    match items {
        Some(items) if entry.get_str("op") == Ok("c") => {
            let session = (entry.get("lsid").cloned(), entry.get("txnNumber").cloned());
            items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| match item {
                    Bson::Document(item) => {
                        base_event(item, entry, ts, i as u32, Some(&session), expanded)
                    }
                    _ => None,
                })
                .collect()
        }
        _ => base_event(entry, entry, ts, 0, None, expanded)
            .into_iter()
            .collect(),
    }
}

fn base_event(
    item: &Document,
    entry: &Document,
    ts: u64,
    index: u32,
    session: Option<&(Option<Bson>, Option<Bson>)>,
    expanded: bool,
) -> Option<BaseEvent> {
    let ns = Namespace::parse(item.get_str("ns").ok()?).ok()?;
    let op = item.get_str("op").unwrap_or("");
    let o = item.get_document("o").cloned().unwrap_or_default();
    let key = match op {
        "d" => o.clone(),
        _ => item
            .get_document("o2")
            .cloned()
            .unwrap_or_else(|_| match o.get("_id") {
                Some(id) => doc! { "_id": id.clone() },
                None => Document::new(),
            }),
    };
    let token = ResumeToken::event(ts, index);
    let ui = item.get("ui");
    let ns_doc = doc! { "db": ns.db.clone(), "coll": ns.coll.clone() };
    let (kind, ev) = match op {
        "i" => {
            let mut ev = head(token, "insert", entry, ui, session, expanded);
            ev.insert("fullDocument", o);
            ev.insert("ns", ns_doc);
            ev.insert("documentKey", key.clone());
            (Kind::Insert, ev)
        }
        "u" if o.get("$v").is_some() => {
            let mut ev = head(token, "update", entry, ui, session, expanded);
            ev.insert("ns", ns_doc);
            ev.insert("documentKey", key.clone());
            let diff = o.get_document("diff").cloned().unwrap_or_default();
            ev.insert("updateDescription", update_description(&diff, expanded));
            (Kind::Update, ev)
        }
        "u" => {
            let mut ev = head(token, "replace", entry, ui, session, expanded);
            ev.insert("fullDocument", o);
            ev.insert("ns", ns_doc);
            ev.insert("documentKey", key.clone());
            (Kind::Replace, ev)
        }
        "d" => {
            let mut ev = head(token, "delete", entry, ui, session, expanded);
            ev.insert("ns", ns_doc);
            ev.insert("documentKey", key.clone());
            (Kind::Delete, ev)
        }
        _ => return None,
    };
    Some(BaseEvent {
        ns,
        token,
        kind,
        event: ev,
        key,
        ui: ui.cloned(),
    })
}

/// The common head of an event: `_id`, `operationType`, `clusterTime`,
/// (`collectionUUID`), `wallTime`, (`txnNumber`, `lsid`).
fn head(
    token: ResumeToken,
    op_type: &str,
    entry: &Document,
    ui: Option<&Bson>,
    session: Option<&(Option<Bson>, Option<Bson>)>,
    expanded: bool,
) -> Document {
    let mut ev = doc! {
        "_id": token.to_document(),
        "operationType": op_type,
        "clusterTime": Bson::Timestamp(u64_to_ts(token.ts)),
    };
    if expanded {
        if let Some(ui) = ui {
            ev.insert("collectionUUID", ui.clone());
        }
    }
    if let Some(wall) = entry.get("wall") {
        ev.insert("wallTime", wall.clone());
    }
    if let Some((lsid, txn)) = session {
        if let Some(t) = txn {
            ev.insert("txnNumber", t.clone());
        }
        if let Some(l) = lsid {
            ev.insert("lsid", l.clone());
        }
    }
    ev
}

fn missing_image(which: &str, ev: &Document) -> Error {
    let (what, option) = match which {
        "pre" => ("pre-image", "fullDocumentBeforeChange"),
        _ => ("post-image", "fullDocument"),
    };
    Error::new(
        ErrorCode::NoMatchingDocument,
        format!(
            "Change stream was configured to require a {what} for all update, delete and replace events, but the {what} was not found for event: {} ({option}: 'required')",
            nidus_common::shell::format(&Bson::Document(ev.clone()))
        ),
    )
}

impl DocStream for ChangeStreamSource {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some((token, ev)) = self.pending.pop_front() {
                let mut st = self.state.lock();
                st.resume_token = token;
                st.emitted.push_back(token);
                if token.is_invalidate() {
                    st.invalidated = true;
                    self.pending.clear();
                }
                return Ok(Some(ev));
            }
            if self.state.lock().invalidated {
                return Ok(None);
            }
            if !self.read_more()? {
                // Caught up: the high-water mark is just after what was read.
                let hwm =
                    ResumeToken::high_water_mark(u64_to_ts(self.read_through.saturating_add(1)));
                let mut st = self.state.lock();
                if hwm > st.resume_token {
                    st.resume_token = hwm;
                }
                return Ok(None);
            }
        }
    }
}

/// `updateDescription` from a `$v: 2` diff: `updatedFields` (updates, inserts and array
/// elements, as dotted paths), `removedFields`, `truncatedArrays`, and with
/// `showExpandedEvents` `disambiguatedPaths` for paths with numeric field names or dots.
pub fn update_description(diff: &Document, expanded: bool) -> Document {
    let mut out = Description::default();
    walk(diff, &mut Vec::new(), false, &mut out);
    let mut d = doc! {
        "updatedFields": out.updated,
        "removedFields": out.removed.into_iter().map(Bson::String).collect::<Vec<_>>(),
        "truncatedArrays": out.truncated,
    };
    if expanded {
        d.insert("disambiguatedPaths", out.disambiguated);
    }
    d
}

#[derive(Default)]
struct Description {
    updated: Document,
    removed: Vec<String>,
    truncated: Vec<Bson>,
    disambiguated: Document,
}

/// A path component: a field name or an array index.
#[derive(Clone)]
enum Part {
    Field(String),
    Index(usize),
}

fn record_path(path: &[Part], out: &mut Description) -> String {
    let dotted = path
        .iter()
        .map(|p| match p {
            Part::Field(f) => f.clone(),
            Part::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".");
    let ambiguous = path.iter().any(|p| match p {
        Part::Field(f) => {
            f.contains('.') || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        }
        Part::Index(_) => false,
    });
    if ambiguous {
        let parts: Vec<Bson> = path
            .iter()
            .map(|p| match p {
                Part::Field(f) => Bson::String(f.clone()),
                Part::Index(i) => Bson::Int32(*i as i32),
            })
            .collect();
        out.disambiguated.insert(dotted.clone(), parts);
    }
    dotted
}

fn walk(diff: &Document, path: &mut Vec<Part>, is_array: bool, out: &mut Description) {
    for (k, v) in diff {
        match (is_array, k.as_str()) {
            (false, "d") => {
                if let Bson::Document(fields) = v {
                    for (f, _) in fields {
                        path.push(Part::Field(f.clone()));
                        let p = record_path(path, out);
                        out.removed.push(p);
                        path.pop();
                    }
                }
            }
            (false, "u") | (false, "i") => {
                if let Bson::Document(fields) = v {
                    for (f, val) in fields {
                        path.push(Part::Field(f.clone()));
                        let p = record_path(path, out);
                        out.updated.insert(p, val.clone());
                        path.pop();
                    }
                }
            }
            (true, "a") => {}
            (true, "l") => {
                let n = match v {
                    Bson::Int32(n) => *n as i64,
                    Bson::Int64(n) => *n,
                    _ => 0,
                };
                let p = record_path(path, out);
                out.truncated
                    .push(Bson::Document(doc! { "field": p, "newSize": n as i32 }));
            }
            (_, key) if key.len() > 1 => {
                let (kind, rest) = key.split_at(1);
                let part = if is_array {
                    match rest.parse::<usize>() {
                        Ok(i) => Part::Index(i),
                        Err(_) => continue,
                    }
                } else {
                    Part::Field(rest.to_string())
                };
                path.push(part);
                match (kind, v) {
                    ("s", Bson::Document(sub)) => {
                        let sub_is_array = matches!(sub.get("a"), Some(Bson::Boolean(true)));
                        walk(sub, path, sub_is_array, out);
                    }
                    ("u", val) if is_array => {
                        let p = record_path(path, out);
                        out.updated.insert(p, val.clone());
                    }
                    _ => {}
                }
                path.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_sort_as_positions() {
        let a = ResumeToken::event(5 << 32 | 1, 0);
        let b = ResumeToken::event(5 << 32 | 1, 3);
        let c = ResumeToken::high_water_mark(Timestamp {
            time: 5,
            increment: 2,
        });
        let inv = ResumeToken {
            from_invalidate: true,
            ..b
        };
        let hex = |t: &ResumeToken| t.to_document().get_str("_data").unwrap().to_string();
        let mut all = [c, inv, a, b];
        all.sort();
        assert_eq!(all, [a, b, inv, c]);
        let mut hexes: Vec<String> = [c, inv, a, b].iter().map(hex).collect();
        hexes.sort();
        assert_eq!(hexes, [a, b, inv, c].iter().map(hex).collect::<Vec<_>>());
        for t in [
            a,
            b,
            c,
            inv,
            inv.with_fragment(0xAB1),
            ResumeToken::event(u64::MAX, u32::MAX),
        ] {
            assert_eq!(
                ResumeToken::parse(&Bson::Document(t.to_document())).unwrap(),
                t
            );
            let mut expected = format!(
                "82{:016X}{:02X}{:08X}{:02X}",
                t.ts, t.kind, t.txn_op_index, t.from_invalidate as u8
            );
            if let Some(f) = t.fragment {
                expected.push_str(&format!("{f:04X}"));
            }
            assert_eq!(hex(&t), expected);
        }
    }

    #[test]
    fn update_descriptions() {
        let d = doc! {
            "d": {"gone": false},
            "u": {"a": 1},
            "i": {"n": {"x": 1}},
            "sb": {"u": {"c": 2}, "s1": {"u": {"z": 0}}},
            "sarr": {"a": true, "l": 2, "u1": 9, "s0": {"i": {"q": 1}}},
        };
        assert_eq!(
            update_description(&d, true),
            doc! {
                "updatedFields": {"a": 1, "n": {"x": 1}, "b.c": 2, "b.1.z": 0, "arr.1": 9, "arr.0.q": 1},
                "removedFields": ["gone"],
                "truncatedArrays": [{"field": "arr", "newSize": 2}],
                "disambiguatedPaths": {"b.1.z": ["b", "1", "z"]},
            }
        );
    }
}
