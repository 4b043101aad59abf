//! The oplog: MongoDB-format entries describing every write of a replica set member,
//! written in the same storage transaction as the change they describe.
//!
//! # Layout
//! The oplog is the capped collection `local.oplog.rs` (no indexes, as MongoDB's), whose
//! RecordId is the entry's `ts` as a u64 (`seconds << 32 | increment`), so its record-store
//! key range (`collection id ++ ts`, big-endian) is ordered by `ts` and `find`, `$natural`
//! order both ways, and tailable cursors read it like any capped collection. Only servers
//! started with `--replSet` have one ([`Engine::enable_oplog`]); a standalone writes none.
//!
//! # Writing
//! Writers collect [`OplogEntry`] values (no `ts` yet) while they write; when the storage
//! transaction is about to commit, [`Engine::commit_logged`] reserves consecutive `ts`
//! values ([`Oplog::reserve`]), puts the entries into the same transaction, commits, and
//! releases the reservation. A multi-document transaction logs one `applyOps` `c` entry at
//! commit; DDL logs `c` entries (`create`, `drop`, `renameCollection`, `dropDatabase`,
//! `createIndexes`, `dropIndexes`, `collMod`). Nothing in the `local` database is logged.
//!
//! # Visibility
//! Writers commit in any order, so an entry with a larger `ts` can be committed while a
//! smaller one is still in flight. [`Oplog::visible`] is MongoDB's oplog visibility point:
//! the highest `ts` at or below which every reservation has committed or aborted. Readers
//! (collection scans of `local.oplog.rs`, change streams, [`Oplog::read_after`], the
//! replication layer) never read past it, so what they have read never gains a hole later.
//! Read the point *before* taking the storage snapshot: everything at or below it was
//! committed before it was published.
//!
//! # Waiting
//! Every advance of the visibility point wakes [`Oplog::wait_visible_after`] waiters and
//! the tailable cursors on `local.oplog.rs` (a condition variable; nobody polls).
//!
//! # For the replication layer
//! - [`Oplog::read_after`]: entries with `ts` > X up to the visible point, in `ts` order.
//! - [`Oplog::last_visible`]: the optime (`ts`, `t`) of the newest visible entry.
//! - [`Oplog::set_term`] / [`Oplog::term`]: the `t` new entries carry.
//! - [`Oplog::wait_visible_after`]: blocks until an entry after a `ts` is visible;
//!   [`Oplog::generation`] / [`Oplog::wait_for_advance`]: wait for any advance.
//! - [`Oplog::set_commit_point`]: the majority commit point; change streams read up to
//!   [`Oplog::majority_readable_u64`] (until it is set, the visibility point).
//! - [`Oplog::append_replicated`]: writes an entry with a given `ts` (a secondary's copy)
//!   into a storage transaction; after the commit, [`Oplog::replicated_committed`] moves the
//!   clock and the visibility point to it.
//!
//! # Size
//! The oplog is bounded by `--oplogSizeMB` (`replSetResizeOplog` changes it): a background
//! thread, woken when an insert passes the bound, deletes the oldest entries (never past
//! the visibility point) off the write path.

use crate::catalog::{CollectionMeta, CollectionRef};
use crate::namespace::Namespace;
use crate::{Collection, Engine};
use bson::{doc, Bson, Document, RawDocumentBuf, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{keys, KvTxn};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub const OPLOG_DB: &str = "local";
pub const OPLOG_COLL: &str = "oplog.rs";

/// Default `--oplogSizeMB` (mongod's minimum default; its default is 5% of the disk).
pub const DEFAULT_OPLOG_SIZE_MB: i64 = 990;
/// Bounds of `replSetResizeOplog`'s `size` (MB), as MongoDB's.
pub const MIN_OPLOG_SIZE_MB: f64 = 990.0;
pub const MAX_OPLOG_SIZE_MB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Entries deleted per storage transaction when truncating.
const TRUNCATE_BATCH: usize = 1000;

/// `Timestamp(s, i)` as the u64 `s << 32 | i` (the oplog's RecordId and key order).
pub fn ts_to_u64(ts: Timestamp) -> u64 {
    ((ts.time as u64) << 32) | ts.increment as u64
}

pub fn u64_to_ts(v: u64) -> Timestamp {
    Timestamp {
        time: (v >> 32) as u32,
        increment: v as u32,
    }
}

/// The logical clock behind oplog `ts` values and the cluster time replies report: whole
/// seconds of the wall clock and an increment, strictly increasing across calls.
#[derive(Default)]
pub struct LogicalClock {
    last: Mutex<u64>,
}

/// The process's clock (one member per process).
pub fn clock() -> &'static LogicalClock {
    static CLOCK: OnceLock<LogicalClock> = OnceLock::new();
    CLOCK.get_or_init(LogicalClock::default)
}

impl LogicalClock {
    /// A new time, later than every earlier one.
    pub fn tick(&self) -> Timestamp {
        u64_to_ts(self.reserve(1))
    }

    /// `n` consecutive new times; returns the first.
    fn reserve(&self, n: u64) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut last = self.last.lock();
        let first = if now > *last >> 32 {
            (now << 32) | 1
        } else {
            *last + 1
        };
        *last = first + n - 1;
        first
    }

    /// The latest time given out.
    pub fn now(&self) -> Timestamp {
        u64_to_ts(*self.last.lock())
    }

    /// Moves the clock to at least `ts` (an entry read at start-up or from another member).
    pub fn advance_to(&self, ts: Timestamp) {
        let mut last = self.last.lock();
        *last = (*last).max(ts_to_u64(ts));
    }
}

/// MongoDB's optime: a `ts` and the term it was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTime {
    pub ts: Timestamp,
    pub t: i64,
}

impl OpTime {
    /// `{ts: Timestamp(0, 0), t: -1}`: before the first entry.
    pub const NULL: OpTime = OpTime {
        ts: Timestamp {
            time: 0,
            increment: 0,
        },
        t: -1,
    };

    pub fn to_document(self) -> Document {
        doc! { "ts": self.ts, "t": self.t }
    }
}

/// The session fields of an entry of a retryable write or transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// `{id: UUID(..)}`, as the entry stores it.
    pub lsid: RawDocumentBuf,
    pub txn_number: i64,
}

impl SessionInfo {
    /// `lsid: {id: UUID(..)}` from the session id's bytes.
    pub fn new(lsid_uuid: &[u8], txn_number: i64) -> SessionInfo {
        let mut lsid = RawDocumentBuf::new();
        lsid.append(
            "id",
            bson::Binary {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: lsid_uuid.to_vec(),
            },
        );
        SessionInfo { lsid, txn_number }
    }
}

/// An entry's `o`: a document built for the entry, or an inserted document's bytes, which
/// go into the stored entry as they are (an insert's `o` is the whole document).
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Built(Document),
    Stored(RawDocumentBuf),
}

impl Object {
    fn to_document(&self) -> Result<Document> {
        match self {
            Object::Built(d) => Ok(d.clone()),
            Object::Stored(raw) => Ok(Document::try_from(raw.as_ref())?),
        }
    }
}

/// One entry before it has its `ts`: what changed, where.
#[derive(Debug, Clone, PartialEq)]
pub struct OplogEntry {
    /// `i`, `u`, `d`, `c` or `n`.
    pub op: &'static str,
    pub ns: String,
    pub ui: Option<bson::Uuid>,
    pub o: Object,
    pub o2: Option<Document>,
    /// A retryable write's session and statement number.
    pub session: Option<SessionInfo>,
    pub stmt_id: Option<i32>,
    /// A findAndModify statement's `needsRetryImage` (`preImage` or `postImage`): a member
    /// applying the entry keeps the document images in the statement's record, so a retry
    /// on it once it is primary gets the first attempt's `value`.
    pub needs_retry_image: Option<&'static str>,
    /// The document before the change, kept for change streams' `fullDocumentBeforeChange`
    /// on collections with `changeStreamPreAndPostImages` (not part of the entry).
    pub pre_image: Option<Document>,
    /// The document after an update, kept likewise for `fullDocument: "whenAvailable"`.
    pub post_image: Option<Document>,
}

impl OplogEntry {
    fn new(op: &'static str, ns: &Namespace, ui: bson::Uuid, o: Object) -> OplogEntry {
        OplogEntry {
            op,
            ns: ns.full(),
            ui: Some(ui),
            o,
            o2: None,
            session: None,
            stmt_id: None,
            needs_retry_image: None,
            pre_image: None,
            post_image: None,
        }
    }

    fn id_of(doc: &Document) -> Document {
        match doc.get("_id") {
            Some(id) => doc! { "_id": id.clone() },
            None => Document::new(),
        }
    }

    /// `{op: "i", o: doc, o2: {_id}}`.
    pub fn insert(ns: &Namespace, ui: bson::Uuid, doc: &bson::RawDocument) -> Result<OplogEntry> {
        let mut id = Document::new();
        if let Some(v) = doc.get("_id")? {
            id.insert("_id", Bson::try_from(v.to_raw_bson())?);
        }
        Ok(OplogEntry::new("i", ns, ui, Object::Stored(doc.to_raw_document_buf())).with_o2(id))
    }

    /// `{op: "u", o: {$v: 2, diff}, o2: {_id}}`, or the replacement form `o: new` for a
    /// replacement (or a pipeline update whose diff would be larger than the new document).
    pub fn update(
        ns: &Namespace,
        ui: bson::Uuid,
        old: &Document,
        new: &Document,
        update: &nidus_query::update::Update,
    ) -> OplogEntry {
        use nidus_query::update::Update;
        // A pipeline's diff is bounded by the document's size, as MongoDB's.
        let diff = match update {
            Update::Replacement(_) => None,
            Update::Operators(_) => crate::oplog_diff::diff(old, new),
            Update::Pipeline(_) => crate::oplog_diff::diff_with_limit(old, new, true),
        };
        let o = match diff {
            Some(diff) => doc! { "$v": 2, "diff": diff },
            None => new.clone(),
        };
        let mut e = OplogEntry::new("u", ns, ui, Object::Built(o));
        e.o2 = Some(Self::id_of(old));
        e
    }

    /// `{op: "d", o: {_id}}`.
    pub fn delete(ns: &Namespace, ui: bson::Uuid, old: &Document) -> OplogEntry {
        OplogEntry::new("d", ns, ui, Object::Built(Self::id_of(old)))
    }

    /// A command entry on `<db>.$cmd`.
    pub fn command(db: &str, ui: Option<bson::Uuid>, o: Document) -> OplogEntry {
        OplogEntry {
            op: "c",
            ns: format!("{db}.$cmd"),
            ui,
            o: Object::Built(o),
            o2: None,
            session: None,
            stmt_id: None,
            needs_retry_image: None,
            pre_image: None,
            post_image: None,
        }
    }

    pub fn with_o2(mut self, o2: Document) -> OplogEntry {
        self.o2 = Some(o2);
        self
    }

    /// The entry as stored, in MongoDB's field order: the reference [`OplogEntry::to_raw`]
    /// is tested against.
    #[cfg(test)]
    fn to_document(&self, optime: OpTime, wall: bson::DateTime, prev: Option<OpTime>) -> Document {
        let mut d = Document::new();
        if let Some(s) = &self.session {
            d.insert("lsid", Document::try_from(s.lsid.as_ref()).expect("lsid"));
            d.insert("txnNumber", s.txn_number);
        }
        d.insert("op", self.op);
        d.insert("ns", self.ns.clone());
        if let Some(ui) = self.ui {
            d.insert("ui", ui);
        }
        d.insert("o", self.o.to_document().expect("o"));
        if let Some(o2) = &self.o2 {
            d.insert("o2", o2.clone());
        }
        if let Some(stmt) = self.stmt_id {
            d.insert("stmtId", stmt);
        }
        d.insert("ts", optime.ts);
        d.insert("t", optime.t);
        d.insert("v", 2i64);
        d.insert("wall", wall);
        if let Some(prev) = prev {
            d.insert("prevOpTime", prev.to_document());
        }
        if let Some(image) = self.needs_retry_image {
            d.insert("needsRetryImage", image);
        }
        d
    }

    /// The stored bytes of [`OplogEntry::to_document`], written element by element: the
    /// entry's documents are copied as bytes (an insert's is the stored document), not
    /// converted.
    pub fn to_raw(
        &self,
        optime: OpTime,
        wall: bson::DateTime,
        prev: Option<OpTime>,
    ) -> Result<RawDocumentBuf> {
        let built = |d: &Document| {
            nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))
        };
        let mut w = EntryWriter::new();
        if let Some(s) = &self.session {
            w.document("lsid", s.lsid.as_bytes());
            w.i64("txnNumber", s.txn_number);
        }
        w.string("op", self.op);
        w.string("ns", &self.ns);
        if let Some(ui) = self.ui {
            w.uuid("ui", &ui.bytes());
        }
        match &self.o {
            Object::Stored(raw) => w.document("o", raw.as_bytes()),
            Object::Built(d) => w.document("o", built(d)?.as_bytes()),
        }
        if let Some(o2) = &self.o2 {
            w.document("o2", built(o2)?.as_bytes());
        }
        if let Some(stmt) = self.stmt_id {
            w.i32("stmtId", stmt);
        }
        w.timestamp("ts", optime.ts);
        w.i64("t", optime.t);
        w.i64("v", 2);
        w.datetime("wall", wall);
        if let Some(prev) = prev {
            let mut p = EntryWriter::new();
            p.timestamp("ts", prev.ts);
            p.i64("t", prev.t);
            w.document("prevOpTime", &p.finish());
        }
        if let Some(image) = self.needs_retry_image {
            w.string("needsRetryImage", image);
        }
        RawDocumentBuf::from_bytes(w.finish()).map_err(|e| Error::internal(e.to_string()))
    }

    /// The form of this entry inside a transaction's `applyOps` array.
    fn to_apply_ops_item(&self) -> Result<Document> {
        let mut d = doc! { "op": self.op, "ns": self.ns.clone() };
        if let Some(ui) = self.ui {
            d.insert("ui", ui);
        }
        d.insert("o", self.o.to_document()?);
        if let Some(o2) = &self.o2 {
            d.insert("o2", o2.clone());
        }
        Ok(d)
    }
}

/// Writes a BSON document element by element, for [`OplogEntry::to_raw`]: keys are this
/// file's constants (no NUL), values are written as the BSON spec lays them out.
struct EntryWriter(Vec<u8>);

impl EntryWriter {
    fn new() -> EntryWriter {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&[0; 4]);
        EntryWriter(out)
    }

    fn key(&mut self, kind: u8, key: &str) {
        self.0.push(kind);
        self.0.extend_from_slice(key.as_bytes());
        self.0.push(0);
    }

    fn string(&mut self, key: &str, v: &str) {
        self.key(0x02, key);
        self.0
            .extend_from_slice(&(v.len() as i32 + 1).to_le_bytes());
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
    }

    fn document(&mut self, key: &str, bytes: &[u8]) {
        self.key(0x03, key);
        self.0.extend_from_slice(bytes);
    }

    fn uuid(&mut self, key: &str, bytes: &[u8; 16]) {
        self.key(0x05, key);
        self.0.extend_from_slice(&16i32.to_le_bytes());
        self.0.push(0x04);
        self.0.extend_from_slice(bytes);
    }

    fn i32(&mut self, key: &str, v: i32) {
        self.key(0x10, key);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn timestamp(&mut self, key: &str, ts: Timestamp) {
        self.key(0x11, key);
        self.0.extend_from_slice(&ts.increment.to_le_bytes());
        self.0.extend_from_slice(&ts.time.to_le_bytes());
    }

    fn i64(&mut self, key: &str, v: i64) {
        self.key(0x12, key);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn datetime(&mut self, key: &str, v: bson::DateTime) {
        self.key(0x09, key);
        self.0
            .extend_from_slice(&v.timestamp_millis().to_le_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        self.0.push(0);
        let len = self.0.len() as i32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

/// In-flight `ts` reservations.
#[derive(Default)]
struct Slots {
    /// First `ts` of every reservation not yet committed or aborted.
    in_flight: BTreeSet<u64>,
    /// Last `ts` reserved.
    last_reserved: u64,
}

/// The oplog of this member (see the module documentation).
pub struct Oplog {
    coll: CollectionRef,
    slots: Mutex<Slots>,
    visible: AtomicU64,
    /// The majority commit point set by the replication layer (u64::MAX: none, every
    /// visible entry counts as committed, as on a one-member set).
    commit_point: AtomicU64,
    /// Generation counter for waiters, bumped with every visibility advance.
    advanced: Mutex<u64>,
    /// Change-stream wake-ups by namespace (`oplog_notify`).
    announcer: crate::oplog_notify::Announcer,
    /// The newest readable entries, decoded once for every change stream (`oplog_cache`).
    recent: crate::oplog_cache::Recent,
    advanced_cv: Condvar,
    /// Called once a local write's entries are visible (the replication layer's: the
    /// primary proposes them at once, with no thread between the writer and its driver).
    on_local_write: parking_lot::RwLock<Option<LocalWriteHook>>,
    term: AtomicI64,
    max_bytes: AtomicI64,
    /// Set when the oplog may be over its size; the truncation thread waits on it.
    over: Mutex<bool>,
    /// Every entry with a `ts` (as u64) below this is deleted: truncation scans from here.
    /// From the collection's start it would step over the tombstone of every entry it ever
    /// deleted that compaction has not dropped yet, so each batch cost more than the last
    /// (10,000,000 inserts kept a core busy truncating for minutes). Only `truncate_after`
    /// lets older entries back in, and it lowers the mark.
    truncated_below: AtomicU64,
    /// Held by each round of truncation and by `truncate_after` for its whole run: a round
    /// removes what its snapshot saw with one range deletion, which must not cover entries a
    /// concurrent rollback deleted (their bytes counted off twice) or wrote again.
    truncating: Mutex<()>,
    over_cv: Condvar,
    /// The optime of the last entry of each retryable write (session id bytes and
    /// txnNumber), for the `prevOpTime` chain.
    chains: Mutex<std::collections::HashMap<Vec<u8>, (i64, OpTime)>>,
}

/// See `Oplog::set_local_write_hook`.
pub type LocalWriteHook = Arc<dyn Fn() + Send + Sync>;

/// Reserved `ts` values; released (committed or aborted) when dropped.
pub struct Reservation<'a> {
    oplog: &'a Oplog,
    first: u64,
    n: u64,
}

impl Reservation<'_> {
    /// The `i`-th reserved `ts`.
    pub fn ts(&self, i: u64) -> Timestamp {
        debug_assert!(i < self.n);
        u64_to_ts(self.first + i)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.oplog.release(self.first);
    }
}

impl Oplog {
    fn new(coll: CollectionRef, last: u64, term: i64, max_bytes: i64) -> Oplog {
        Oplog {
            coll,
            slots: Mutex::new(Slots {
                in_flight: BTreeSet::new(),
                last_reserved: last,
            }),
            visible: AtomicU64::new(last),
            commit_point: AtomicU64::new(u64::MAX),
            advanced: Mutex::new(0),
            announcer: crate::oplog_notify::Announcer::new(last),
            recent: crate::oplog_cache::Recent::new(last),
            advanced_cv: Condvar::new(),
            on_local_write: parking_lot::RwLock::new(None),
            term: AtomicI64::new(term),
            max_bytes: AtomicI64::new(max_bytes),
            over: Mutex::new(false),
            truncated_below: AtomicU64::new(0),
            truncating: Mutex::new(()),
            over_cv: Condvar::new(),
            chains: Mutex::new(Default::default()),
        }
    }

    /// The collection `local.oplog.rs`.
    pub fn collection(&self) -> &CollectionRef {
        &self.coll
    }

    /// Reserves `n` consecutive `ts` values, later than every earlier one.
    pub fn reserve(&self, n: u64) -> Reservation<'_> {
        let n = n.max(1);
        let mut slots = self.slots.lock();
        let first = clock().reserve(n);
        slots.in_flight.insert(first);
        slots.last_reserved = first + n - 1;
        Reservation {
            oplog: self,
            first,
            n,
        }
    }

    /// Reserves the `ts` values `first..=last` of replicated entries (later than every local
    /// one: a secondary writes nothing of its own): nothing past `first` becomes visible
    /// until the reservation is dropped, then everything through `last` at once.
    fn reserve_at(&self, first: u64, last: u64) -> Reservation<'_> {
        let mut slots = self.slots.lock();
        clock().advance_to(u64_to_ts(last));
        slots.in_flight.insert(first);
        slots.last_reserved = slots.last_reserved.max(last);
        Reservation {
            oplog: self,
            first,
            n: last - first + 1,
        }
    }

    /// The stored entry at `ts`, if this member's oplog holds one.
    pub fn entry_at(
        &self,
        kv: &dyn nidus_storage::KvEngine,
        ts: Timestamp,
    ) -> Result<Option<Vec<u8>>> {
        Ok(kv
            .snapshot()
            .get(self.coll.records.space, &self.key(ts_to_u64(ts)))?)
    }

    fn release(&self, first: u64) {
        let visible = {
            let mut slots = self.slots.lock();
            slots.in_flight.remove(&first);
            let v = match slots.in_flight.first() {
                Some(f) => f - 1,
                None => slots.last_reserved,
            };
            if v <= self.visible.load(Ordering::Acquire) {
                return;
            }
            self.visible.store(v, Ordering::Release);
            v
        };
        let _ = visible;
        self.wake();
        if let Some(hook) = self.on_local_write.read().as_ref() {
            hook();
        }
    }

    /// Sets (or clears) what is called each time local writes make oplog entries visible.
    /// It runs on the writer's thread, so it must not block.
    pub fn set_local_write_hook(&self, hook: Option<LocalWriteHook>) {
        *self.on_local_write.write() = hook;
    }

    fn wake(&self) {
        *self.advanced.lock() += 1;
        self.advanced_cv.notify_all();
        self.coll.capped.notify();
        self.announcer.announce(self.majority_readable_u64());
    }

    /// Notes what the entry at `ts` touches, for change-stream wake-ups; before the entry
    /// can become readable.
    fn note_touch(&self, ts: u64, op: &str, ns: &str) {
        if let Some(touch) = crate::oplog_notify::Touch::of(op, ns) {
            self.announcer.note(ts, touch);
        }
    }

    /// The wake-up channel of a change stream scope (`oplog_notify` keys).
    pub fn channel(&self, key: &str) -> Arc<crate::oplog_notify::Channel> {
        self.announcer.channel(key)
    }

    /// Every readable entry at or below this was announced to the channels it touches.
    pub fn announced_through(&self) -> u64 {
        self.announcer.announced_through()
    }

    /// Sets the majority commit point (the replication layer's); change streams read no
    /// entry past it. Wakes waiters.
    pub fn set_commit_point(&self, ts: Timestamp) {
        self.commit_point.store(ts_to_u64(ts), Ordering::Release);
        self.wake();
    }

    /// The highest `ts` majority-committed readers (change streams) may read: the
    /// visibility point, bounded by the commit point once the replication layer sets one.
    pub fn majority_readable_u64(&self) -> u64 {
        self.visible_u64()
            .min(self.commit_point.load(Ordering::Acquire))
    }

    /// The oplog visibility point: every entry at or below it is committed (or was aborted).
    pub fn visible(&self) -> Timestamp {
        u64_to_ts(self.visible.load(Ordering::Acquire))
    }

    pub fn visible_u64(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// The newest `ts` handed out so far: every write acknowledged before this call has its
    /// entry at or before it (a causal read waits for visibility up to here).
    pub fn last_reserved_u64(&self) -> u64 {
        self.slots.lock().last_reserved
    }

    pub fn term(&self) -> i64 {
        self.term.load(Ordering::Acquire)
    }

    /// The term new entries carry (the replication layer drives it).
    pub fn set_term(&self, t: i64) {
        self.term.store(t, Ordering::Release);
    }

    /// The size bound in bytes.
    pub fn max_bytes(&self) -> i64 {
        self.max_bytes.load(Ordering::Relaxed)
    }

    /// A counter that changes with every visibility advance (compare before and after a
    /// read, then [`Oplog::wait_for_advance`]).
    pub fn generation(&self) -> u64 {
        *self.advanced.lock()
    }

    /// Blocks until the visibility point advances past generation `seen` or `deadline`
    /// passes; true when it advanced.
    pub fn wait_for_advance(&self, seen: u64, deadline: Instant) -> bool {
        let mut g = self.advanced.lock();
        while *g == seen {
            if self.advanced_cv.wait_until(&mut g, deadline).timed_out() {
                return *g != seen;
            }
        }
        true
    }

    /// Blocks until an entry after `ts` may be visible (the visibility point passed it) or
    /// `deadline` passes; true when the point is past `ts`.
    pub fn wait_visible_after(&self, ts: Timestamp, deadline: Instant) -> bool {
        let target = ts_to_u64(ts);
        loop {
            let seen = self.generation();
            if self.visible_u64() > target {
                return true;
            }
            if !self.wait_for_advance(seen, deadline) && self.visible_u64() <= target {
                return false;
            }
        }
    }

    fn key(&self, ts: u64) -> [u8; 16] {
        self.coll.records.key(ts)
    }

    /// Entries with `ts` > `after` up to the visibility point, at most `limit`, oldest first.
    pub fn read_after(
        &self,
        kv: &dyn nidus_storage::KvEngine,
        after: Timestamp,
        limit: usize,
    ) -> Result<Vec<RawDocumentBuf>> {
        let visible = self.visible_u64();
        let start = ts_to_u64(after).saturating_add(1);
        if start > visible {
            return Ok(Vec::new());
        }
        let snap = kv.snapshot();
        let mut c = snap.cursor(
            self.coll.records.space,
            &self.key(start),
            &self.key(visible + 1),
        );
        c.seek_to_first();
        let mut out = Vec::new();
        while c.valid() && out.len() < limit {
            out.push(RawDocumentBuf::from_bytes(c.value().to_vec())?);
            c.next();
        }
        c.status()?;
        Ok(out)
    }

    /// Decoded entries with `after < ts <= readable` (`readable` at most the majority
    /// readable point), at most `limit`, oldest first, shared with the other readers
    /// (`oplog_cache`); and the `ts` through which they are every entry there is.
    pub fn read_decoded_after(
        &self,
        kv: &dyn nidus_storage::KvEngine,
        after: u64,
        limit: usize,
        readable: u64,
    ) -> Result<(Vec<crate::oplog_cache::Decoded>, u64)> {
        self.recent
            .read_after(after, limit, readable, &mut |after, limit| {
                self.read_after(kv, u64_to_ts(after), limit)?
                    .into_iter()
                    .map(|raw| {
                        let doc = Document::try_from(raw.as_ref())?;
                        let ts = match doc.get("ts") {
                            Some(Bson::Timestamp(ts)) => ts_to_u64(*ts),
                            _ => return Err(Error::internal("an oplog entry without a ts")),
                        };
                        Ok((ts, doc, raw.as_bytes().len()))
                    })
                    .collect()
            })
    }

    /// Rollback: deletes every entry with `ts` > `after` (entries this member wrote that
    /// the set does not hold) and moves the visibility point back to `after`. Only a member
    /// that takes no writes of its own (not primary) truncates, so no reservation is in
    /// flight past `after`.
    pub fn truncate_after(
        &self,
        kv: &dyn nidus_storage::KvEngine,
        after: Timestamp,
    ) -> Result<usize> {
        let _truncating = self.truncating.lock();
        let start = ts_to_u64(after).saturating_add(1);
        // Entries from `start` on will be written again (an initial sync empties the oplog
        // and refills it with the source's): truncation must see them.
        self.truncated_below.fetch_min(start, Ordering::AcqRel);
        // Counted from a snapshot, removed with one range deletion (an initial sync empties
        // the whole oplog: one transaction holding a delete per entry grew with it). Nothing
        // writes past `after` meanwhile (see above), and the range deletion covers only what
        // was written before it.
        let (lower, upper) = (self.key(start), self.coll.records.upper());
        let (mut n, mut bytes) = (0usize, 0i64);
        {
            let snap = kv.snapshot();
            let mut c = snap.cursor(self.coll.records.space, &lower, &upper);
            c.seek_to_first();
            while c.valid() {
                n += 1;
                bytes += c.value().len() as i64;
                c.next();
            }
            c.status()?;
        }
        if n > 0 {
            kv.delete_range(self.coll.records.space, &lower, &upper)?;
            self.coll.adjust_stats(-(n as i64), -bytes);
        }
        let mut slots = self.slots.lock();
        let after = ts_to_u64(after);
        if slots.in_flight.is_empty() {
            slots.last_reserved = slots.last_reserved.min(after);
            self.visible.store(
                self.visible.load(Ordering::Acquire).min(after),
                Ordering::Release,
            );
        }
        drop(slots);
        // Entries after `after` will be written again: announced and read afresh.
        self.recent.reset(after);
        self.announcer.reset(after);
        Ok(n)
    }

    /// The `ts` of the oldest entry (None when the oplog is empty).
    pub fn first_ts(&self, kv: &dyn nidus_storage::KvEngine) -> Result<Option<Timestamp>> {
        let snap = kv.snapshot();
        let mut c = snap.cursor(
            self.coll.records.space,
            &self.coll.records.lower(),
            &self.coll.records.upper(),
        );
        c.seek_to_first();
        let ts = c
            .valid()
            .then(|| u64_to_ts(keys::read_u64(&c.key()[8..]).unwrap_or(0)));
        c.status()?;
        Ok(ts)
    }

    /// The optime of the newest visible entry ([`OpTime::NULL`] when there is none).
    pub fn last_visible(&self, kv: &dyn nidus_storage::KvEngine) -> Result<OpTime> {
        let visible = self.visible_u64();
        let snap = kv.snapshot();
        let mut c = snap.cursor(
            self.coll.records.space,
            &self.coll.records.lower(),
            &self.key(visible.saturating_add(1)),
        );
        c.seek_to_last();
        let out = if c.valid() {
            optime_of(c.value())?
        } else {
            OpTime::NULL
        };
        c.status()?;
        Ok(out)
    }

    /// Writes an entry that already has its `ts` (a secondary's copy of the primary's
    /// entry) into `txn`. The caller keeps the local clock ahead with `clock().advance_to`
    /// and publishes visibility through a [`Reservation`] of its own if readers must wait.
    pub fn append_replicated(&self, txn: &mut dyn KvTxn, entry: &RawDocumentBuf) -> Result<()> {
        let ts = replicated_ts(entry)?;
        txn.put(self.coll.records.space, &self.key(ts), entry.as_bytes())?;
        let op = entry.get_str("op").unwrap_or("");
        let ns = entry.get_str("ns").unwrap_or("");
        self.note_touch(ts, op, ns);
        Ok(())
    }

    /// After the transaction holding entries written with [`Oplog::append_replicated`]
    /// committed: moves the clock and the visibility point to `last` (the newest of them;
    /// reservations still in flight keep holding the point back) and counts the entries
    /// toward the size bound.
    pub fn replicated_committed(&self, last: Timestamp, n: i64, bytes: i64) {
        clock().advance_to(last);
        {
            let mut slots = self.slots.lock();
            slots.last_reserved = slots.last_reserved.max(ts_to_u64(last));
            let v = match slots.in_flight.first() {
                Some(f) => f - 1,
                None => slots.last_reserved,
            };
            if v > self.visible.load(Ordering::Acquire) {
                self.visible.store(v, Ordering::Release);
            }
        }
        self.wake();
        self.note_written(n, bytes);
    }

    /// The previous optime of a retryable write's chain, recording `now` as its last.
    fn chain(&self, session: &SessionInfo, now: OpTime) -> OpTime {
        let key = session.lsid.as_bytes();
        let mut chains = self.chains.lock();
        if chains.len() > 100_000 {
            chains.clear();
        }
        match chains.get_mut(key) {
            Some(last) => {
                let prev = match *last {
                    (n, t) if n == session.txn_number => t,
                    _ => OpTime::NULL,
                };
                *last = (session.txn_number, now);
                prev
            }
            None => {
                chains.insert(key.to_vec(), (session.txn_number, now));
                OpTime::NULL
            }
        }
    }

    /// Wakes the truncation thread (at shutdown, to see `stopping` without waiting).
    pub(crate) fn wake_truncation(&self) {
        *self.over.lock() = true;
        self.over_cv.notify_one();
    }

    /// Counts entries written, and wakes the truncation thread once the oplog is over its
    /// bound by a 64th of it: woken at every entry over the bound, it ran a transaction and a
    /// scan per write to delete one entry. Below that slack its once-a-second round
    /// truncates, so the oplog is back within its bound within about a second.
    pub(crate) fn note_written(&self, n: i64, bytes: i64) {
        self.coll.adjust_stats(n, bytes);
        let max = self.max_bytes();
        if self.coll.data_size.load(Ordering::Relaxed) > max.saturating_add(max / 64) {
            *self.over.lock() = true;
            self.over_cv.notify_one();
        }
    }
}

/// The `ts` of a replicated entry (as u64).
fn replicated_ts(entry: &bson::RawDocument) -> Result<u64> {
    match entry.get("ts")? {
        Some(bson::RawBsonRef::Timestamp(ts)) => Ok(ts_to_u64(ts)),
        _ => Err(Error::bad_value("oplog entry without a ts")),
    }
}

fn optime_of(bytes: &[u8]) -> Result<OpTime> {
    let d = bson::RawDocument::from_bytes(bytes)?;
    let ts = match d.get("ts")? {
        Some(bson::RawBsonRef::Timestamp(ts)) => ts,
        _ => return Err(Error::internal("oplog entry without a ts")),
    };
    let t = match d.get("t")? {
        Some(bson::RawBsonRef::Int64(t)) => t,
        Some(bson::RawBsonRef::Int32(t)) => t as i64,
        _ => -1,
    };
    Ok(OpTime { ts, t })
}

impl Engine {
    /// The oplog, on a replica set member.
    pub fn oplog(&self) -> Option<&Arc<Oplog>> {
        self.oplog.get()
    }

    /// Whether `coll` is this member's oplog.
    pub fn is_oplog(&self, coll: &Collection) -> bool {
        self.oplog().is_some_and(|o| o.coll.id == coll.id)
    }

    /// Users do not write to the oplog: only the write path logs into it.
    pub(crate) fn check_not_oplog(&self, coll: &Collection) -> Result<()> {
        if self.is_oplog(coll) {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                format!("cannot write to '{}': it is the oplog", coll.ns),
            ));
        }
        Ok(())
    }

    /// The oplog when writes to `ns` are logged (not the `local` database).
    /// Whether writes to `ns` are logged (a replica set member, outside `local`).
    pub fn is_replicated(&self, ns: &Namespace) -> bool {
        self.oplog_for(ns).is_some()
    }

    pub(crate) fn oplog_for(&self, ns: &Namespace) -> Option<&Arc<Oplog>> {
        // Pre-images are written with the entry they belong to, not logged themselves.
        self.oplog()
            .filter(|_| ns.db != OPLOG_DB && !crate::preimages::is_preimages(ns))
    }

    /// Opens (creating it if needed) `local.oplog.rs` with a bound of `size_mb`, moves the
    /// clock past its last entry and starts the truncation thread. Called once at start-up
    /// of a `--replSet` server.
    pub fn enable_oplog(self: &Arc<Self>, size_mb: i64) -> Result<Arc<Oplog>> {
        if let Some(o) = self.oplog.get() {
            return Ok(o.clone());
        }
        let ns = Namespace::new(OPLOG_DB, OPLOG_COLL);
        let max_bytes = size_mb.max(1).saturating_mul(1024 * 1024);
        let coll = match self.collection(&ns) {
            Some(c) => c,
            None => self.create_oplog_collection(&ns, max_bytes)?,
        };
        // The stored size (set by `replSetResizeOplog`) wins over the default.
        let stored = crate::capped::CappedLimits::of(&coll.meta.read().options).map(|l| l.size);
        let (last, term) = {
            let snap = self.kv.snapshot();
            let mut c = snap.cursor(
                coll.records.space,
                &coll.records.lower(),
                &coll.records.upper(),
            );
            c.seek_to_last();
            let out = if c.valid() {
                let op = optime_of(c.value())?;
                (ts_to_u64(op.ts), op.t.max(1))
            } else {
                (0, 1)
            };
            c.status()?;
            out
        };
        clock().advance_to(u64_to_ts(last));
        let oplog = Arc::new(Oplog::new(coll, last, term, stored.unwrap_or(max_bytes)));
        let _ = self.oplog.set(oplog.clone());
        self.ensure_preimages_collection()?;
        if last == 0 {
            // A new set's first entry, as MongoDB's `replSetInitiate` writes it: change
            // streams started at a time after it find their start point in the oplog.
            let mut first = OplogEntry::command("", None, doc! { "msg": "initiating set" });
            first.op = "n";
            first.ns = String::new();
            self.commit_logged(self.kv.begin(), vec![first])?;
        }
        self.start_oplog_truncation(&oplog);
        Ok(oplog)
    }

    fn create_oplog_collection(&self, ns: &Namespace, max_bytes: i64) -> Result<CollectionRef> {
        let _ddl = self.ddl.lock();
        let mut txn = self.kv.begin();
        let id = self.allocate_id(txn.as_mut())?;
        let meta = CollectionMeta {
            uuid: bson::Uuid::new(),
            options: doc! { "capped": true, "size": max_bytes, "autoIndexId": false },
            validator: None,
            indexes: Vec::new(),
            building: Vec::new(),
            dropped: false,
        };
        let coll = Collection::new(id, ns.clone(), meta.clone(), 1);
        self.write_entry(txn.as_mut(), &coll, &meta)?;
        txn.commit()?;
        let coll = Arc::new(coll);
        self.collections.write().insert(ns.clone(), coll.clone());
        Ok(coll)
    }

    /// `replSetResizeOplog`: a new size bound in bytes, persisted in the catalog entry.
    pub fn resize_oplog(&self, max_bytes: i64) -> Result<()> {
        let Some(oplog) = self.oplog() else {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                "can't resize oplog as the oplog does not exist",
            ));
        };
        let coll = oplog.coll.clone();
        {
            let _ddl = self.ddl.lock();
            let mut meta = coll.meta.write();
            let mut new_meta = meta.clone();
            new_meta.options.insert("size", max_bytes);
            let mut txn = self.kv.begin();
            self.write_entry(txn.as_mut(), &coll, &new_meta)?;
            txn.commit()?;
            *meta = new_meta;
        }
        oplog.max_bytes.store(max_bytes, Ordering::Relaxed);
        oplog.note_written(0, 0);
        Ok(())
    }

    /// Commits `txn` with `ops` logged in it (see the module documentation). Without an
    /// oplog, or with no entry, it just commits.
    pub(crate) fn commit_logged(
        &self,
        mut txn: Box<dyn KvTxn>,
        ops: Vec<OplogEntry>,
    ) -> Result<()> {
        if REPLICATED.with(|r| r.borrow().is_some()) {
            return self.commit_replicated(txn);
        }
        let Some(oplog) = self.oplog().filter(|_| !ops.is_empty()) else {
            txn.commit()?;
            return Ok(());
        };
        let mut images = crate::preimages::Added::default();
        let written = self.put_entries(oplog, txn.as_mut(), &ops, &mut images)?;
        txn.commit()?;
        drop(written.0);
        oplog.note_written(ops.len() as i64, written.1);
        images.committed();
        Ok(())
    }

    /// Inside [`Engine::apply_replicated`]: the first commit carries the replicated entries,
    /// the writes' own entries are not logged.
    fn commit_replicated(&self, mut txn: Box<dyn KvTxn>) -> Result<()> {
        let entries = REPLICATED.with(|r| r.borrow_mut().as_mut().map(std::mem::take));
        let (Some(entries), Some(oplog)) = (entries.filter(|e| !e.is_empty()), self.oplog()) else {
            txn.commit()?;
            return Ok(());
        };
        // Entries come in log order: the first has the lowest `ts`, the last the highest.
        let (first, last) = match (entries.first(), entries.last()) {
            (Some(f), Some(l)) => (replicated_ts(f)?, replicated_ts(l)?),
            _ => return Err(Error::internal("no replicated entry")),
        };
        let slot = oplog.reserve_at(first, last.max(first));
        let mut bytes = 0;
        for entry in &entries {
            oplog.append_replicated(txn.as_mut(), entry)?;
            bytes += entry.as_bytes().len() as i64;
        }
        if let Err(e) = txn.commit() {
            // The entries go with the next attempt of the write.
            REPLICATED.with(|r| {
                if let Some(slot) = r.borrow_mut().as_mut() {
                    *slot = entries;
                }
            });
            return Err(e.into());
        }
        drop(slot);
        oplog.note_written(entries.len() as i64, bytes);
        Ok(())
    }

    /// Runs `f` with its writes not logged: a rollback restores documents to the state the
    /// set holds, which is no operation of its own.
    pub fn without_oplog<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        REPLICATED.with(|r| *r.borrow_mut() = Some(Vec::new()));
        let out = f();
        REPLICATED.with(|r| r.borrow_mut().take());
        out
    }

    /// Applies a replicated oplog entry (a secondary's copy of the primary's write), see
    /// [`Engine::apply_replicated_group`].
    pub fn apply_replicated<T>(
        &self,
        entry: &RawDocumentBuf,
        apply: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.apply_replicated_group(vec![entry.clone()], apply)
    }

    /// Applies replicated oplog entries, consecutive in the log: `apply` makes their changes
    /// through the ordinary write paths, and the entries themselves, with the primary's `ts`
    /// values, are written in the same storage transaction as the first write `apply`
    /// commits (in one of their own when `apply` writes nothing, e.g. a no-op or an already
    /// applied delete). When `apply` fails nothing of the entries is written.
    pub fn apply_replicated_group<T>(
        &self,
        entries: Vec<RawDocumentBuf>,
        apply: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        REPLICATED.with(|r| *r.borrow_mut() = Some(entries));
        let out = apply();
        let left = REPLICATED
            .with(|r| r.borrow_mut().take())
            .unwrap_or_default();
        let out = out?;
        if !left.is_empty() {
            REPLICATED.with(|r| *r.borrow_mut() = Some(left));
            let done = self.commit_replicated(self.kv.begin());
            REPLICATED.with(|r| r.borrow_mut().take());
            done?;
        }
        Ok(out)
    }

    /// Reserves `ts` values for `ops` and puts the entries (and kept pre-images) into
    /// `txn`. The reservation must live until `txn` committed or rolled back.
    pub(crate) fn put_entries<'a>(
        &self,
        oplog: &'a Oplog,
        txn: &mut dyn KvTxn,
        ops: &[OplogEntry],
        images: &mut crate::preimages::Added,
    ) -> Result<(Reservation<'a>, i64)> {
        let slot = oplog.reserve(ops.len() as u64);
        let wall = bson::DateTime::now();
        let t = oplog.term();
        let mut bytes = 0i64;
        for (i, op) in ops.iter().enumerate() {
            let optime = OpTime {
                ts: slot.ts(i as u64),
                t,
            };
            let prev = op
                .session
                .as_ref()
                .filter(|_| op.stmt_id.is_some())
                .map(|s| oplog.chain(s, optime));
            let raw = op.to_raw(optime, wall, prev)?;
            // The slot is this write's reservation: no other transaction writes its key.
            txn.put_new(
                oplog.coll.records.space,
                &oplog.key(ts_to_u64(optime.ts)),
                raw.as_bytes(),
            )?;
            bytes += raw.as_bytes().len() as i64;
            oplog.note_touch(ts_to_u64(optime.ts), op.op, &op.ns);
            if let Some(ui) = op.ui {
                self.put_images(txn, (ui, optime.ts, 0), op, wall, images)?;
            }
        }
        if !ops.is_empty() {
            let last = slot.ts(ops.len() as u64 - 1);
            LAST_WRITE.with(|c| c.set(Some(last)));
        }
        Ok((slot, bytes))
    }

    /// The `applyOps` entry a multi-document transaction logs at commit.
    pub(crate) fn transaction_entry(
        ops: &[OplogEntry],
        session: Option<&SessionInfo>,
    ) -> Result<OplogEntry> {
        let items = ops
            .iter()
            .map(|o| o.to_apply_ops_item().map(Bson::Document))
            .collect::<Result<Vec<Bson>>>()?;
        let mut e = OplogEntry::command("admin", None, doc! { "applyOps": items });
        e.session = session.cloned();
        Ok(e)
    }

    fn start_oplog_truncation(self: &Arc<Self>, oplog: &Arc<Oplog>) {
        let engine = Arc::downgrade(self);
        let oplog = Arc::downgrade(oplog);
        self.spawn_background("oplog-truncate", move || loop {
            let Some(o) = oplog.upgrade() else { return };
            {
                let mut over = o.over.lock();
                if !*over {
                    o.over_cv.wait_for(&mut over, Duration::from_secs(1));
                }
                *over = false;
            }
            let Some(e) = engine.upgrade() else { return };
            if e.stopping.load(Ordering::Acquire) {
                return;
            }
            let _ = e.truncate_oplog(&o);
        });
    }

    /// Deletes the oldest entries while the oplog is over its bound, never past the
    /// visibility point, in bounded rounds. Pre-images older than the oldest entry
    /// kept go with them.
    fn truncate_oplog(&self, oplog: &Oplog) -> Result<()> {
        let coll = &oplog.coll;
        while coll.data_size.load(Ordering::Relaxed) > oplog.max_bytes()
            && !self.stopping.load(Ordering::Acquire)
        {
            let _truncating = oplog.truncating.lock();
            let excess = coll.data_size.load(Ordering::Relaxed) - oplog.max_bytes();
            let visible = oplog.visible_u64();
            let from = oplog.truncated_below.load(Ordering::Acquire);
            // The victims are read from a snapshot and removed with one range deletion (no
            // per-entry delete, lock or tombstone). Below the visibility point every entry is
            // committed and nothing writes again but a rollback, which `truncating` keeps
            // out (it moves the visibility point back before a refill writes anything).
            let (mut n, mut bytes, mut first, mut last) = (0i64, 0i64, None, None);
            {
                let snap = self.kv.snapshot();
                let mut c = snap.cursor(
                    oplog.coll.records.space,
                    &oplog.key(from),
                    &oplog.key(visible),
                );
                c.seek_to_first();
                while c.valid() && bytes < excess && (n as usize) < TRUNCATE_BATCH {
                    bytes += c.value().len() as i64;
                    let ts = keys::read_u64(&c.key()[8..]);
                    first = first.or(ts);
                    last = ts;
                    n += 1;
                    c.next();
                }
                c.status()?;
            }
            let (Some(first), Some(last)) = (first, last) else {
                return Ok(());
            };
            self.kv.delete_range(
                oplog.coll.records.space,
                &oplog.key(first),
                &oplog.key(last.saturating_add(1)),
            )?;
            // Unless `truncate_after` lowered the mark meanwhile: entries below it may be
            // written again, and the next round must scan from there.
            let _ = oplog.truncated_below.compare_exchange(
                from,
                last.saturating_add(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            self.delete_images_through(u64_to_ts(last))?;
            coll.adjust_stats(-n, -bytes);
        }
        Ok(())
    }
}

/// The `ts` of the newest entry this thread logged since the last call (the write concern
/// of a command waits for it to replicate).
pub fn take_last_write_ts() -> Option<Timestamp> {
    LAST_WRITE.with(|c| c.take())
}

/// The newest entry this thread's command has logged so far, left for the write concern.
pub fn last_write_ts() -> Option<Timestamp> {
    LAST_WRITE.with(|c| c.get())
}

/// Whether this thread is applying a replicated entry (a secondary's copy of the primary's
/// write): capped collections then do not evict, the primary's `d` entries do.
pub(crate) fn applying_replicated() -> bool {
    REPLICATED.with(|r| r.borrow().is_some())
}

thread_local! {
    static LAST_WRITE: std::cell::Cell<Option<Timestamp>> = const { std::cell::Cell::new(None) };
    /// Set while this thread applies replicated entries (`Some`), holding them until a
    /// commit has written them (empty: writes not logged, see [`Engine::without_oplog`]).
    static REPLICATED: std::cell::RefCell<Option<Vec<RawDocumentBuf>>> =
        const { std::cell::RefCell::new(None) };
}

/// The `create` entry of a collection: `{create: <name>, <options>, idIndex}`.
pub(crate) fn create_entry(coll: &Collection, meta: &CollectionMeta) -> OplogEntry {
    let mut o = doc! { "create": coll.ns.coll.clone() };
    for (k, v) in &meta.options {
        o.insert(k.clone(), v.clone());
    }
    if let Some(id) = meta.indexes.iter().find(|ix| ix.is_id()) {
        o.insert("idIndex", (*id.spec).clone());
    }
    OplogEntry::command(&coll.ns.db, Some(meta.uuid), o)
}

/// A `c` entry naming collection `coll`: `{<cmd>: <name>, <fields>}`.
pub(crate) fn collection_command(
    coll: &Collection,
    uuid: bson::Uuid,
    cmd: &str,
    fields: Document,
) -> OplogEntry {
    let mut o = doc! { cmd: coll.ns.coll.clone() };
    o.extend(fields);
    OplogEntry::command(&coll.ns.db, Some(uuid), o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{prepare_insert, WriteOpts};
    use nidus_storage::{KvEngine, Space};
    use nidus_storage_rocks::RocksEngine;

    fn insert(engine: &Engine, coll: &CollectionRef, d: Document) {
        let doc = prepare_insert(&nidus_common::encode::document_to_raw(&d).expect("doc"))
            .expect("prepare");
        engine
            .insert_one(coll, &doc, &WriteOpts::default())
            .expect("insert");
    }

    fn engine() -> (tempfile::TempDir, Arc<Engine>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
        (dir, Engine::open(kv).expect("engine"))
    }

    #[test]
    fn clock_is_strictly_increasing() {
        let mut last = ts_to_u64(clock().tick());
        for _ in 0..10_000 {
            let now = ts_to_u64(clock().tick());
            assert!(now > last);
            last = now;
        }
        clock().advance_to(u64_to_ts(last + 1000));
        assert!(ts_to_u64(clock().tick()) > last + 1000);
    }

    /// The stored bytes are those of the entry's document, for every kind of entry.
    #[test]
    fn raw_entries_are_the_documents_bytes() {
        let ns = Namespace::new("db", "c");
        let ui = bson::Uuid::new();
        let old = doc! { "_id": 1, "a": { "b": [1, 2] }, "s": "x" };
        let new = doc! { "_id": 1, "a": { "b": [1, 3] }, "s": "x", "n": 1.5 };
        let update = nidus_query::update::Update::parse(
            &Bson::Document(doc! { "$set": { "a.b.1": 3, "n": 1.5 } }),
            None,
        )
        .expect("update");
        let old_raw = nidus_common::encode::document_to_raw(&old).expect("raw");
        let mut retryable = OplogEntry::insert(&ns, ui, &old_raw).expect("insert");
        retryable.session = Some(SessionInfo::new(&[7u8; 16], 42));
        retryable.stmt_id = Some(3);
        let entries = [
            OplogEntry::insert(&ns, ui, &old_raw).expect("insert"),
            OplogEntry::update(&ns, ui, &old, &new, &update),
            OplogEntry::delete(&ns, ui, &old),
            OplogEntry::command("db", None, doc! { "create": "c" }),
            OplogEntry::command("db", Some(ui), doc! { "drop": "c" })
                .with_o2(doc! { "numRecords": 2i64 }),
            retryable,
        ];
        let at = OpTime {
            ts: Timestamp {
                time: 7,
                increment: 9,
            },
            t: 2,
        };
        let prev = OpTime {
            ts: Timestamp {
                time: 7,
                increment: 8,
            },
            t: 1,
        };
        let wall = bson::DateTime::from_millis(1_700_000_000_123);
        for e in &entries {
            for p in [None, Some(prev)] {
                let want = nidus_common::encode::document_to_raw(&e.to_document(at, wall, p))
                    .expect("raw");
                assert_eq!(
                    e.to_raw(at, wall, p).expect("raw").as_bytes(),
                    want.as_bytes(),
                    "{e:?}"
                );
            }
        }
    }

    /// Writes a replicated `create` entry of term `t` past the clock, as a secondary applies
    /// one; returns its `ts` and size (not yet announced: `replicated_committed`).
    fn append_replicated_create(engine: &Engine, oplog: &Oplog, t: i64) -> (Timestamp, i64) {
        let ts = u64_to_ts(ts_to_u64(clock().tick()) + 1000);
        let entry = OplogEntry::command("t", None, doc! { "create": "c" }).to_document(
            OpTime { ts, t },
            bson::DateTime::now(),
            None,
        );
        let raw = nidus_common::encode::document_to_raw(&entry).expect("raw");
        let mut txn = engine.kv().begin();
        oplog.append_replicated(txn.as_mut(), &raw).expect("append");
        txn.commit().expect("commit");
        (ts, raw.as_bytes().len() as i64)
    }

    #[test]
    fn replicated_entries_become_visible_after_commit() {
        let (_dir, engine) = engine();
        let oplog = engine.enable_oplog(1).expect("oplog").clone();
        let (ts, bytes) = append_replicated_create(&engine, &oplog, 3);
        assert!(ts_to_u64(oplog.visible()) < ts_to_u64(ts));
        oplog.replicated_committed(ts, 1, bytes);
        assert_eq!(oplog.visible(), ts);
        assert_eq!(
            oplog.last_visible(engine.kv()).expect("last"),
            OpTime { ts, t: 3 }
        );
        assert!(ts_to_u64(clock().tick()) > ts_to_u64(ts));
    }

    #[test]
    fn visibility_waits_for_every_earlier_reservation() {
        let (_dir, engine) = engine();
        let oplog = engine.enable_oplog(1).expect("oplog").clone();
        let before = oplog.visible_u64();
        let a = oplog.reserve(1);
        let b = oplog.reserve(2);
        let (ta, tb) = (ts_to_u64(a.ts(0)), ts_to_u64(b.ts(1)));
        assert!(ta > before && tb > ta);
        drop(b);
        // `a` is still in flight: nothing at or after it is visible.
        assert_eq!(oplog.visible_u64(), before.max(ta - 1));
        let seen = oplog.generation();
        drop(a);
        assert_eq!(oplog.visible_u64(), tb);
        assert!(oplog.wait_for_advance(seen, Instant::now()));
    }

    /// The replication layer's hook runs once per local write whose entries became
    /// visible (on the writer's thread), not for replicated entries; cleared, it is gone.
    #[test]
    fn the_local_write_hook_runs_when_local_entries_become_visible() {
        use std::sync::atomic::AtomicUsize;
        let (_dir, engine) = engine();
        let oplog = engine.enable_oplog(1).expect("oplog").clone();
        let coll = engine
            .ensure_collection(&Namespace::new("t", "c"))
            .expect("coll");
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let writer = std::thread::current().id();
        oplog.set_local_write_hook(Some(Arc::new(move || {
            assert_eq!(std::thread::current().id(), writer);
            counter.fetch_add(1, Ordering::SeqCst);
        })));
        let before = calls.load(Ordering::SeqCst);
        for i in 0..3 {
            insert(&engine, &coll, doc! { "_id": i });
        }
        assert_eq!(calls.load(Ordering::SeqCst) - before, 3);
        // Replicated entries (a secondary's) do not call it.
        let (ts, bytes) = append_replicated_create(&engine, &oplog, 1);
        oplog.replicated_committed(ts, 1, bytes);
        assert_eq!(calls.load(Ordering::SeqCst) - before, 3);
        oplog.set_local_write_hook(None);
        insert(&engine, &coll, doc! { "_id": 3 });
        assert_eq!(calls.load(Ordering::SeqCst) - before, 3);
    }

    #[test]
    fn concurrent_writers_entries_read_in_ts_order_without_holes() {
        let (_dir, engine) = engine();
        let oplog = engine.enable_oplog(64).expect("oplog").clone();
        let ns = Namespace::new("t", "c");
        let coll = engine.ensure_collection(&ns).expect("coll");
        let start = oplog.visible();
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let (engine, coll) = (engine.clone(), coll.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        insert(&engine, &coll, doc! { "_id": format!("{k}-{i}") });
                    }
                })
            })
            .collect();
        // A reader following the visibility point sees every entry once, in ts order.
        let mut seen = Vec::new();
        let mut after = start;
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < 800 && Instant::now() < deadline {
            for e in oplog.read_after(engine.kv(), after, 64).expect("read") {
                let ts = match e.get("ts").expect("ts") {
                    Some(bson::RawBsonRef::Timestamp(ts)) => ts,
                    _ => panic!("no ts"),
                };
                assert!(ts_to_u64(ts) > ts_to_u64(after));
                after = ts;
                seen.push(e);
            }
            oplog.wait_visible_after(after, Instant::now() + Duration::from_millis(50));
        }
        for t in threads {
            t.join().expect("writer");
        }
        assert_eq!(seen.len(), 800);
        assert_eq!(oplog.last_visible(engine.kv()).expect("last").ts, after);
    }

    /// Truncation keeps the oplog within its bound from the oldest entry on, batch after
    /// batch, and still finds entries written again below where it stopped (an initial sync
    /// empties the oplog and refills it with the source's older entries).
    #[test]
    fn truncation_keeps_the_bound_and_sees_entries_written_again() {
        let (_dir, engine) = engine();
        let oplog = engine.enable_oplog(1).expect("oplog").clone();
        let coll = engine
            .ensure_collection(&Namespace::new("t", "c"))
            .expect("coll");
        let pad = "x".repeat(10_000);
        let oldest = |oplog: &Oplog| {
            let first = oplog
                .read_after(engine.kv(), u64_to_ts(0), 1)
                .expect("read")
                .pop()
                .expect("an entry");
            match first.get("ts").expect("ts") {
                Some(bson::RawBsonRef::Timestamp(ts)) => (ts_to_u64(ts), first),
                _ => panic!("no ts"),
            }
        };
        // The truncation thread brings the oplog back within its bound.
        let within_bound = |oplog: &Oplog| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while oplog.coll.data_size.load(Ordering::Relaxed) > oplog.max_bytes()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            oplog.coll.data_size.load(Ordering::Relaxed) <= oplog.max_bytes()
        };
        for round in 0..3 {
            for i in 0..100 {
                insert(&engine, &coll, doc! { "_id": round * 100 + i, "pad": &pad });
            }
            assert!(within_bound(&oplog), "round {round}");
        }
        // ~3 MB logged, 1 MB kept: the oldest entry left is one of the last third's.
        let (_, first) = oldest(&oplog);
        let id = first
            .get_document("o")
            .expect("o")
            .get_i32("_id")
            .expect("_id");
        assert!((150..299).contains(&id), "oldest entry left: _id {id}");

        // Emptied, then refilled with entries older than any truncated so far.
        let entries = oplog.coll.count.load(Ordering::Relaxed);
        assert!(entries > 0);
        let removed = oplog
            .truncate_after(engine.kv(), u64_to_ts(0))
            .expect("empty");
        assert_eq!(removed as i64, entries);
        assert!(oplog
            .read_after(engine.kv(), u64_to_ts(0), 1)
            .expect("read")
            .is_empty());
        assert_eq!(oplog.coll.count.load(Ordering::Relaxed), 0);
        assert_eq!(oplog.coll.data_size.load(Ordering::Relaxed), 0);
        for i in 0..200u64 {
            let ts = u64_to_ts((1 << 32) + i);
            let entry = OplogEntry::command("t", None, doc! { "create": "c", "pad": &pad })
                .to_document(OpTime { ts, t: 1 }, bson::DateTime::now(), None);
            let raw = nidus_common::encode::document_to_raw(&entry).expect("raw");
            let mut txn = engine.kv().begin();
            oplog.append_replicated(txn.as_mut(), &raw).expect("append");
            txn.commit().expect("commit");
            oplog.replicated_committed(ts, 1, raw.as_bytes().len() as i64);
        }
        oplog.wake_truncation();
        assert!(within_bound(&oplog));
        let (ts, _) = oldest(&oplog);
        assert!(
            ts > (1 << 32) + 50 && ts < (1 << 32) + 199,
            "oldest ts {ts}"
        );
    }

    fn keys_in(kv: &dyn KvEngine, space: Space, id: u64) -> usize {
        let snap = kv.snapshot();
        let mut c = snap.cursor(space, &keys::u64_be(id), &keys::prefix_end(id));
        c.seek_to_first();
        let mut n = 0;
        while c.valid() {
            n += 1;
            c.next();
        }
        c.status().expect("cursor");
        n
    }

    fn scan(engine: &Engine, ns: &Namespace) -> Vec<Vec<u8>> {
        let coll = engine.collection(ns).expect("collection");
        let spec = crate::find::FindSpec::default();
        let mut exec = engine.plan_find(Some(&coll), &spec).expect("plan");
        let mut out = Vec::new();
        while let Some(d) = exec.next_doc().expect("next") {
            out.push(d.into_bytes());
        }
        out
    }

    /// A store written before the oplog had a space of its own (its entries in the records
    /// space) reads the same after the next start, which moves them.
    #[test]
    fn entries_in_the_records_space_move_to_the_oplog_space_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let oplog_ns = Namespace::new(OPLOG_DB, OPLOG_COLL);
        let (id, logged) = {
            let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
            let engine = Engine::open(kv.clone()).expect("engine");
            let oplog = engine.enable_oplog(64).expect("oplog").clone();
            let coll = engine
                .ensure_collection(&Namespace::new("t", "c"))
                .expect("coll");
            for i in 0..2500 {
                insert(&engine, &coll, doc! { "_id": i, "x": "y" });
            }
            let logged: Vec<Vec<u8>> = oplog
                .read_after(engine.kv(), u64_to_ts(0), 10_000)
                .expect("read")
                .into_iter()
                .map(|d| d.into_bytes())
                .collect();
            assert!(logged.len() > 2500, "{} entries", logged.len());
            assert_eq!(keys_in(kv.as_ref(), Space::Records, oplog.coll.id), 0);
            assert_eq!(scan(&engine, &oplog_ns), logged);
            let id = oplog.coll.id;
            engine.shutdown().expect("shutdown");
            // The earlier layout: every entry back in the records space.
            let to = crate::catalog::RecordStore {
                space: Space::Records,
                id,
            };
            let mut txn = kv.begin();
            assert_eq!(
                crate::catalog::move_records(txn.as_mut(), to, Space::Oplog, usize::MAX)
                    .expect("move"),
                logged.len()
            );
            txn.commit().expect("commit");
            (id, logged)
        };
        let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
        let engine = Engine::open(kv.clone()).expect("engine");
        assert_eq!(keys_in(kv.as_ref(), Space::Records, id), 0);
        assert_eq!(keys_in(kv.as_ref(), Space::Oplog, id), logged.len());
        let coll = engine.collection(&oplog_ns).expect("oplog collection");
        assert_eq!(coll.count.load(Ordering::Relaxed), logged.len() as i64);
        assert_eq!(scan(&engine, &oplog_ns), logged);
        let oplog = engine.enable_oplog(64).expect("oplog").clone();
        let read: Vec<Vec<u8>> = oplog
            .read_after(engine.kv(), u64_to_ts(0), 10_000)
            .expect("read")
            .into_iter()
            .map(|d| d.into_bytes())
            .collect();
        assert_eq!(read, logged);
        engine.shutdown().expect("shutdown");
    }

    /// A rename to or from the oplog's name (a standalone's) takes the records to the space
    /// of the new name, in the rename's transaction.
    #[test]
    fn renames_to_and_from_the_oplog_name_move_the_records() {
        let (_dir, engine) = engine();
        let (a, oplog_ns, b) = (
            Namespace::new("t", "a"),
            Namespace::new(OPLOG_DB, OPLOG_COLL),
            Namespace::new("t", "b"),
        );
        let coll = engine.ensure_collection(&a).expect("coll");
        for i in 0..300 {
            insert(&engine, &coll, doc! { "_id": i, "v": i * 2 });
        }
        let docs = scan(&engine, &a);
        assert_eq!(docs.len(), 300);
        let id = coll.id;
        let kv = engine.kv();
        engine
            .rename_collection(&a, &oplog_ns, false)
            .expect("rename to the oplog's name");
        assert_eq!(keys_in(kv, Space::Records, id), 0);
        assert_eq!(keys_in(kv, Space::Oplog, id), 300);
        assert_eq!(scan(&engine, &oplog_ns), docs);
        engine
            .rename_collection(&oplog_ns, &b, false)
            .expect("rename from the oplog's name");
        assert_eq!(keys_in(kv, Space::Oplog, id), 0);
        assert_eq!(keys_in(kv, Space::Records, id), 300);
        assert_eq!(scan(&engine, &b), docs);
    }
}
