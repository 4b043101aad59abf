//! Multi-document transactions: one storage snapshot transaction held across commands.
//!
//! Every read of the transaction goes through [`ReadSource::Txn`], so it sees the snapshot
//! taken at `begin` plus the transaction's own writes; every write goes into the same storage
//! transaction without the internal retry (a conflict ends the transaction, and the client
//! retries it whole). Document counts and sizes change only at commit. The storage
//! transaction is behind a mutex because a command's stages and writes take turns on it; no
//! caller holds the guard across a call that could take it again.

use crate::catalog::CollectionRef;
use crate::namespace::Namespace;
use crate::oplog::{OplogEntry, SessionInfo};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{KvCursor, KvEngine, KvRead, KvSnapshot, KvTxn, Space, StorageResult};
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;

/// What a transaction's storage is doing; `Ended` once committed or rolled back.
pub struct Transaction {
    /// Process-unique id (index builds wait for the transactions open on a collection).
    id: u64,
    kv: Mutex<Option<Box<dyn KvTxn>>>,
    /// Document count and size changes per collection id, applied at commit.
    pending_stats: Mutex<HashMap<u64, (CollectionRef, i64, i64)>>,
    /// Collections this transaction created: only it sees them until `Engine::
    /// commit_transaction` publishes them with its writes; an abort just forgets them.
    created: Mutex<Vec<CollectionRef>>,
    /// The oplog entries of its writes, logged as one `applyOps` entry at commit.
    oplog_ops: Mutex<Vec<OplogEntry>>,
    /// The session (`lsid`, `txnNumber`) the `applyOps` entry names.
    session: Mutex<Option<SessionInfo>>,
}

impl Transaction {
    /// Starts a transaction whose snapshot is the store as of now.
    pub fn begin(kv: &dyn KvEngine) -> Arc<Transaction> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(Transaction {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            kv: Mutex::new(Some(kv.begin())),
            pending_stats: Mutex::new(HashMap::new()),
            created: Mutex::new(Vec::new()),
            oplog_ops: Mutex::new(Vec::new()),
            session: Mutex::new(None),
        })
    }

    /// Names the session and transaction number its oplog entry carries.
    pub fn set_session(&self, lsid_uuid: &[u8], txn_number: i64) {
        *self.session.lock() = Some(SessionInfo::new(lsid_uuid, txn_number));
    }

    pub(crate) fn session(&self) -> Option<SessionInfo> {
        self.session.lock().clone()
    }

    pub(crate) fn add_oplog_ops(&self, ops: Vec<OplogEntry>) {
        if !ops.is_empty() {
            self.oplog_ops.lock().extend(ops);
        }
    }

    pub(crate) fn take_oplog_ops(&self) -> Vec<OplogEntry> {
        std::mem::take(&mut *self.oplog_ops.lock())
    }

    /// Runs one write against the transaction's storage.
    pub fn with_kv<T>(&self, op: impl FnOnce(&mut dyn KvTxn) -> Result<T>) -> Result<T> {
        let mut guard = self.kv.lock();
        match guard.as_mut() {
            Some(kv) => op(kv.as_mut()),
            None => Err(ended()),
        }
    }

    /// Marks `coll` as written by this transaction until it ends (before each write).
    pub fn touch(&self, coll: &CollectionRef) {
        coll.txn_touch(self.id);
        self.pending_stats
            .lock()
            .entry(coll.id)
            .or_insert_with(|| (coll.clone(), 0, 0));
    }

    /// Counts a document insert (+1), delete (-1) or size change toward commit.
    pub fn record_stats(&self, coll: &CollectionRef, docs: i64, bytes: i64) {
        let mut pending = self.pending_stats.lock();
        let entry = pending
            .entry(coll.id)
            .or_insert_with(|| (coll.clone(), 0, 0));
        entry.1 += docs;
        entry.2 += bytes;
    }

    /// A collection this transaction created and has not published yet.
    pub fn created_collection(&self, ns: &Namespace) -> Option<CollectionRef> {
        self.created.lock().iter().find(|c| &c.ns == ns).cloned()
    }

    pub(crate) fn add_created(&self, coll: CollectionRef) {
        self.created.lock().push(coll);
    }

    pub(crate) fn created_collections(&self) -> Vec<CollectionRef> {
        self.created.lock().clone()
    }

    /// Makes every write visible at once. Fails (and ends the transaction) on a conflict.
    /// Transactions that created collections commit through `Engine::commit_transaction`.
    pub(crate) fn commit(&self) -> Result<()> {
        let kv = self.kv.lock().take().ok_or_else(ended)?;
        let committed = kv.commit();
        for (_, (coll, docs, bytes)) in self.pending_stats.lock().drain() {
            if committed.is_ok() {
                coll.adjust_stats(docs, bytes);
            }
            coll.txn_ended(self.id);
        }
        Ok(committed?)
    }

    /// Discards every write and releases the transaction's locks. Idempotent.
    pub fn abort(&self) {
        if let Some(kv) = self.kv.lock().take() {
            // A failed rollback leaves nothing visible: the writes were never committed.
            let _ = kv.rollback();
        }
        for (_, (coll, _, _)) in self.pending_stats.lock().drain() {
            coll.txn_ended(self.id);
        }
        self.created.lock().clear();
        self.oplog_ops.lock().clear();
    }

    pub fn is_open(&self) -> bool {
        self.kv.lock().is_some()
    }
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("open", &self.is_open())
            .finish()
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        self.abort();
    }
}

fn ended() -> Error {
    Error::new(
        ErrorCode::NoSuchTransaction,
        "Transaction has been aborted.",
    )
}

/// Where a query's stages read: the latest committed data (a fresh snapshot per batch, as
/// MongoDB yields between batches), a transaction's snapshot plus its own writes, or one
/// fixed snapshot (`readConcern: {level: "snapshot"}` outside a transaction).
#[derive(Clone)]
pub enum ReadSource {
    Latest(Arc<dyn KvEngine>),
    Txn(Arc<Transaction>),
    Snapshot(Arc<dyn KvSnapshot>),
}

impl std::fmt::Debug for ReadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadSource::Latest(_) => "Latest",
            ReadSource::Txn(_) => "Txn",
            ReadSource::Snapshot(_) => "Snapshot",
        })
    }
}

impl ReadSource {
    /// The transaction reads go through, if any.
    pub fn txn(&self) -> Option<&Transaction> {
        match self {
            ReadSource::Txn(t) => Some(t),
            _ => None,
        }
    }

    /// A consistent view for one batch of reads. Hold it only for the batch: a
    /// transaction's view blocks the transaction's writes until dropped.
    pub fn view(&self) -> Result<View<'_>> {
        match self {
            ReadSource::Latest(kv) => Ok(View::Snapshot(Arc::from(kv.snapshot()))),
            ReadSource::Snapshot(s) => Ok(View::Snapshot(s.clone())),
            ReadSource::Txn(t) => MutexGuard::try_map(t.kv.lock(), |kv| kv.as_mut())
                .map(View::Txn)
                .map_err(|_| ended()),
        }
    }
}

/// One batch's reads: a shared snapshot (which a `FETCH` may keep using after the batch, so
/// it reads the document in the snapshot its key came from) or the transaction itself.
pub enum View<'a> {
    Snapshot(Arc<dyn KvSnapshot>),
    Txn(MappedMutexGuard<'a, Box<dyn KvTxn>>),
}

impl View<'_> {
    /// The snapshot later stages may read from, when the view is one.
    pub fn shared_snapshot(&self) -> Option<Arc<dyn KvSnapshot>> {
        match self {
            View::Snapshot(s) => Some(s.clone()),
            View::Txn(_) => None,
        }
    }
}

impl KvRead for View<'_> {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        match self {
            View::Snapshot(s) => s.get(space, key),
            View::Txn(t) => t.get(space, key),
        }
    }

    fn cursor(&self, space: Space, lower: &[u8], upper: &[u8]) -> Box<dyn KvCursor + '_> {
        match self {
            View::Snapshot(s) => s.cursor(space, lower, upper),
            View::Txn(t) => t.cursor(space, lower, upper),
        }
    }
}
