//! The durable Raft storage: hard state, configuration state, snapshot metadata and the log,
//! kept under the `raft\0` prefix of the catalog keyspace of the member's own RocksDB.
//!
//! Every change is one storage transaction followed by a WAL sync, so what Raft is told is
//! persisted (votes, terms, appended entries, configurations) survives a crash before any
//! message that relies on it is sent. Two records are written without a sync of their own, as
//! Raft allows (raft-rs' `Ready::must_sync` is false for them): a newer commit index alone and
//! the applied index of entries that changed no configuration. RocksDB recovers a prefix of
//! its WAL, so the next synced write makes them durable, and a crash loses at most the newest
//! ones: Raft learns the commit index again from the leader, and entries after the recovered
//! applied index are applied again (start-up raises a stored commit index below the applied
//! one).
//!
//! Compaction: a member deletes the log up to an index it applied once the log is over its
//! size bound (`raftLogMaxSizeBytes`, by default the oplog's `--oplogSizeMB`), keeping the
//! newer half. The snapshot metadata then names the last deleted entry (index, term), the
//! membership in force, and its data the configuration and the optime of that entry. A
//! member whose log ends before the first kept entry (a new one, or one too far behind)
//! receives that snapshot and copies the data from a member (`initial_sync`), since the
//! entries it lacks are gone.

use crate::state::OpTime;
use nidus_storage::{KvEngine, KvTxn, Space, StorageError};
use parking_lot::RwLock;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Ready, Storage};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const HARD_STATE: &[u8] = b"raft\0hs";
const CONF_STATE: &[u8] = b"raft\0cs";
const SNAPSHOT_META: &[u8] = b"raft\0snap";
const SNAPSHOT_DATA: &[u8] = b"raft\0snapdata";
const NODE_ID: &[u8] = b"raft\0id";
const APPLIED: &[u8] = b"raft\0applied";
const CONFIG: &[u8] = b"raft\0config";
/// The snapshot index an initial sync is copying data for (present until it finished).
const INITIAL_SYNC: &[u8] = b"raft\0initsync";
/// The newest oplog `ts` a finished initial sync applied: committed entries at or before it
/// are in the copied data and are not applied again.
const SYNC_APPLIED: &[u8] = b"raft\0syncapplied";
/// A file-copy initial sync whose files are installed (`{source, begin, term}`, BSON): its
/// last phase, applying the source's oplog, runs next.
const FILE_COPY: &[u8] = b"raft\0filecopy";
/// Every key of a member's own replication state lies in `[MEMBER_STATE, MEMBER_STATE_END)`:
/// what a file-copy initial sync keeps of its own when it installs another member's files.
pub const MEMBER_STATE: &[u8] = b"raft\0";
pub const MEMBER_STATE_END: &[u8] = b"raft\x01";
const LOG_PREFIX: &[u8] = b"raft\0log\0";
const LOG_END: &[u8] = b"raft\0log\x01";

fn log_key(index: u64) -> Vec<u8> {
    let mut k = LOG_PREFIX.to_vec();
    k.extend_from_slice(&index.to_be_bytes());
    k
}

fn store_err(e: impl std::fmt::Display) -> raft::Error {
    raft::Error::Store(raft::StorageError::Other(e.to_string().into()))
}

fn kv_err(e: StorageError) -> raft::Error {
    store_err(e)
}

#[derive(Default)]
struct Cache {
    hard_state: HardState,
    conf_state: ConfState,
    snapshot: SnapshotMetadata,
    snapshot_data: Vec<u8>,
    last_index: u64,
    /// The configuration in force (the newest applied), sent with snapshots.
    config: Vec<u8>,
    /// Bytes of the stored log entries.
    log_bytes: u64,
    /// The terms of the newest entries appended since the store opened.
    terms: RecentTerms,
}

/// The terms of a run of consecutive log entries ending at the newest appended one, at most
/// [`RecentTerms::MAX`]: Raft asks the term of a recent entry for every append it sends (the
/// entry before a follower's next) and for every commit it considers, which would otherwise
/// read and decode the whole entry. Holds only indexes in the log past the snapshot index
/// when kept as [`LogStore::write_log`] and [`LogStore::apply_snapshot`] keep it (terms below
/// the snapshot index are answered from the snapshot or refused before this is asked).
#[derive(Default)]
struct RecentTerms {
    /// The index of `terms[0]`.
    from: u64,
    terms: std::collections::VecDeque<u64>,
}

impl RecentTerms {
    const MAX: usize = 1 << 14;

    fn get(&self, index: u64) -> Option<u64> {
        let i = usize::try_from(index.checked_sub(self.from)?).ok()?;
        self.terms.get(i).copied()
    }

    /// After `entries` (consecutive) were written, replacing any entries from the first's
    /// index on.
    fn appended(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first().map(|e| e.index) else {
            return;
        };
        let end = self.from + self.terms.len() as u64;
        if first < self.from || first > end {
            self.terms.clear();
            self.from = first;
        } else {
            self.terms.truncate((first - self.from) as usize);
        }
        self.terms.extend(entries.iter().map(|e| e.term));
        let over = self.terms.len().saturating_sub(Self::MAX);
        self.terms.drain(..over);
        self.from += over as u64;
    }

    fn clear(&mut self) {
        self.terms.clear();
    }
}

/// The most bytes the Raft log keeps (0: the oplog's size bound); `--setParameter
/// raftLogMaxSizeBytes`.
static MAX_LOG_BYTES: AtomicU64 = AtomicU64::new(0);

pub fn set_max_log_bytes(n: u64) {
    MAX_LOG_BYTES.store(n, Ordering::Relaxed);
}

/// The log's size bound: the parameter, else `oplog_bytes` (the oplog's bound).
pub fn max_log_bytes(oplog_bytes: u64) -> u64 {
    match MAX_LOG_BYTES.load(Ordering::Relaxed) {
        0 => oplog_bytes.max(1 << 20),
        n => n,
    }
}

/// What a snapshot carries besides Raft's metadata: the configuration in force and, for a
/// snapshot of a compacted log, the optime of the last entry it replaces (the set's first
/// snapshot replaces no oplog entry and has none). Stored and sent as
/// `{config: <document>, optime: {ts, t}, wall}`; the first snapshot stores the
/// configuration document alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotData {
    pub config: Option<Vec<u8>>,
    pub optime: Option<OpTime>,
}

impl SnapshotData {
    pub fn parse(bytes: &[u8]) -> SnapshotData {
        let Ok(d) = bson::Document::from_reader(bytes) else {
            return SnapshotData::default();
        };
        match d.get_document("config") {
            Ok(config) => SnapshotData {
                config: bson::to_vec(config).ok(),
                optime: d
                    .get_document("optime")
                    .ok()
                    .map(|o| OpTime::from_document(o, d.get_datetime("wall").ok().copied())),
            },
            Err(_) => SnapshotData {
                config: Some(bytes.to_vec()),
                optime: None,
            },
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut d = bson::Document::new();
        if let Some(c) = self
            .config
            .as_ref()
            .and_then(|c| bson::Document::from_reader(&c[..]).ok())
        {
            d.insert("config", c);
        }
        if let Some(op) = self.optime {
            d.insert("optime", op.to_document());
            d.insert("wall", op.wall);
        }
        bson::to_vec(&d).unwrap_or_default()
    }
}

/// Makes `into` (a store copied from another member) carry this member's replication state
/// from `from` instead of the other member's (Raft identity, hard state, log, snapshot,
/// configuration, pending initial sync), plus `file_copy` as the installed-files marker.
/// Chunked: the log may be large. Idempotent, so a crash in the middle is redone.
pub fn transplant_member_state(
    from: &dyn KvEngine,
    into: &dyn KvEngine,
    file_copy: &[u8],
) -> Result<(), StorageError> {
    const CHUNK: usize = 1000;
    loop {
        let keys: Vec<Vec<u8>> = {
            let snap = into.snapshot();
            let mut c = snap.cursor(Space::Catalog, MEMBER_STATE, MEMBER_STATE_END);
            c.seek_to_first();
            let mut keys = Vec::new();
            while c.valid() && keys.len() < CHUNK {
                keys.push(c.key().to_vec());
                c.next();
            }
            c.status()?;
            keys
        };
        if keys.is_empty() {
            break;
        }
        let mut txn = into.begin();
        for k in &keys {
            txn.delete(Space::Catalog, k)?;
        }
        txn.commit()?;
    }
    let snap = from.snapshot();
    let mut c = snap.cursor(Space::Catalog, MEMBER_STATE, MEMBER_STATE_END);
    c.seek_to_first();
    let mut txn = into.begin();
    let mut n = 0;
    while c.valid() {
        txn.put(Space::Catalog, c.key(), c.value())?;
        n += 1;
        if n % CHUNK == 0 {
            txn.commit()?;
            txn = into.begin();
        }
        c.next();
    }
    c.status()?;
    txn.put(Space::Catalog, FILE_COPY, file_copy)?;
    txn.commit()?;
    into.sync_wal()
}

/// Raft's [`Storage`] over the member's key-value store. Cheap to clone (shared state).
#[derive(Clone)]
pub struct LogStore {
    kv: Arc<dyn KvEngine>,
    cache: Arc<RwLock<Cache>>,
}

fn decode<M: protobuf::Message>(bytes: &[u8]) -> raft::Result<M> {
    M::parse_from_bytes(bytes).map_err(store_err)
}

fn encode<M: protobuf::Message>(m: &M) -> raft::Result<Vec<u8>> {
    m.write_to_bytes().map_err(store_err)
}

impl LogStore {
    /// Opens the stored Raft state (empty when this member never joined a set).
    pub fn open(kv: Arc<dyn KvEngine>) -> raft::Result<LogStore> {
        let snap = kv.snapshot();
        let mut cache = Cache::default();
        if let Some(v) = snap.get(Space::Catalog, HARD_STATE).map_err(kv_err)? {
            cache.hard_state = decode(&v)?;
        }
        if let Some(v) = snap.get(Space::Catalog, CONF_STATE).map_err(kv_err)? {
            cache.conf_state = decode(&v)?;
        }
        if let Some(v) = snap.get(Space::Catalog, SNAPSHOT_META).map_err(kv_err)? {
            cache.snapshot = decode(&v)?;
        }
        if let Some(v) = snap.get(Space::Catalog, SNAPSHOT_DATA).map_err(kv_err)? {
            cache.snapshot_data = v;
        }
        if let Some(v) = snap.get(Space::Catalog, CONFIG).map_err(kv_err)? {
            cache.config = v;
        }
        cache.last_index = cache.snapshot.index;
        {
            let mut c = snap.cursor(Space::Catalog, LOG_PREFIX, LOG_END);
            c.seek_to_first();
            while c.valid() {
                cache.log_bytes += c.value().len() as u64;
                let idx = c.key().get(LOG_PREFIX.len()..).and_then(|b| {
                    let a: [u8; 8] = b.try_into().ok()?;
                    Some(u64::from_be_bytes(a))
                });
                if let Some(i) = idx {
                    cache.last_index = cache.last_index.max(i);
                }
                c.next();
            }
            c.status().map_err(kv_err)?;
        }
        Ok(LogStore {
            kv,
            cache: Arc::new(RwLock::new(cache)),
        })
    }

    /// True when this member holds Raft state (it initiated or joined a set).
    pub fn initialized(&self) -> bool {
        let c = self.cache.read();
        !c.conf_state.voters.is_empty() || c.hard_state.term > 0 || c.snapshot.index > 0
    }

    fn commit(&self, txn: Box<dyn KvTxn>) -> raft::Result<()> {
        txn.commit().map_err(kv_err)?;
        self.kv.sync_wal().map_err(kv_err)
    }

    /// Commits without a WAL sync: only for what Raft may lose in a crash (see the module
    /// documentation).
    fn commit_unsynced(&self, txn: Box<dyn KvTxn>) -> raft::Result<()> {
        txn.commit().map_err(kv_err)
    }

    /// Starts a set on this member: the snapshot at index 1 holds the first configuration
    /// (`data`) and its voters and learners, so members that join later start from it.
    pub fn bootstrap(
        &self,
        node_id: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> raft::Result<()> {
        let mut snapshot = Snapshot::default();
        let meta = snapshot.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.set_conf_state(conf_state);
        snapshot.data = data.into();
        self.set_node_id(node_id)?;
        self.apply_snapshot(&snapshot, false)
    }

    pub fn node_id(&self) -> raft::Result<Option<u64>> {
        let v = self
            .kv
            .snapshot()
            .get(Space::Catalog, NODE_ID)
            .map_err(kv_err)?;
        Ok(v.and_then(|b| nidus_storage::keys::read_u64(&b)))
    }

    pub fn set_node_id(&self, id: u64) -> raft::Result<()> {
        let mut txn = self.kv.begin();
        txn.put(Space::Catalog, NODE_ID, &id.to_be_bytes())
            .map_err(kv_err)?;
        self.commit(txn)
    }

    pub fn applied(&self) -> raft::Result<u64> {
        let v = self
            .kv
            .snapshot()
            .get(Space::Catalog, APPLIED)
            .map_err(kv_err)?;
        Ok(v.and_then(|b| nidus_storage::keys::read_u64(&b))
            .unwrap_or(0))
    }

    /// The newest configuration this member applied (BSON), if any.
    pub fn config(&self) -> raft::Result<Option<Vec<u8>>> {
        self.kv
            .snapshot()
            .get(Space::Catalog, CONFIG)
            .map_err(kv_err)
    }

    /// Records applied entries: the applied index, a newer commit index (`commit`, which
    /// needs no sync of its own: see `set_commit`) and, when a configuration entry was among
    /// them, the configuration and Raft's configuration state, in one write.
    pub fn set_applied(
        &self,
        applied: u64,
        commit: Option<u64>,
        config: Option<&[u8]>,
        conf_state: Option<&ConfState>,
    ) -> raft::Result<()> {
        let mut cache = self.cache.write();
        let mut txn = self.kv.begin();
        txn.put(Space::Catalog, APPLIED, &applied.to_be_bytes())
            .map_err(kv_err)?;
        let hard_state = commit
            .filter(|c| *c > cache.hard_state.commit)
            .map(|commit| HardState {
                commit,
                ..cache.hard_state.clone()
            });
        if let Some(hs) = &hard_state {
            txn.put(Space::Catalog, HARD_STATE, &encode(hs)?)
                .map_err(kv_err)?;
        }
        if let Some(c) = config {
            txn.put(Space::Catalog, CONFIG, c).map_err(kv_err)?;
        }
        if let Some(cs) = conf_state {
            txn.put(Space::Catalog, CONF_STATE, &encode(cs)?)
                .map_err(kv_err)?;
        }
        if config.is_none() && conf_state.is_none() {
            self.commit_unsynced(txn)?;
        } else {
            self.commit(txn)?;
        }
        if let Some(hs) = hard_state {
            cache.hard_state = hs;
        }
        if let Some(cs) = conf_state {
            cache.conf_state = cs.clone();
        }
        if let Some(c) = config {
            cache.config = c.to_vec();
        }
        Ok(())
    }

    /// Installs a snapshot: the log before it is gone, its configuration is the current one.
    /// With `initial_sync`, the data it stands for is still to be copied: the pending initial
    /// sync is recorded in the same write (see [`LogStore::initial_sync_pending`]).
    pub fn apply_snapshot(&self, snapshot: &Snapshot, initial_sync: bool) -> raft::Result<()> {
        let meta = snapshot.get_metadata();
        let data = SnapshotData::parse(&snapshot.data);
        let mut cache = self.cache.write();
        if meta.index < cache.snapshot.index {
            return Err(raft::Error::Store(raft::StorageError::SnapshotOutOfDate));
        }
        let mut hs = cache.hard_state.clone();
        hs.term = hs.term.max(meta.term);
        hs.commit = meta.index;
        let mut txn = self.kv.begin();
        for i in (cache.snapshot.index + 1)..=cache.last_index {
            txn.delete(Space::Catalog, &log_key(i)).map_err(kv_err)?;
        }
        txn.put(Space::Catalog, SNAPSHOT_META, &encode(meta)?)
            .map_err(kv_err)?;
        txn.put(Space::Catalog, SNAPSHOT_DATA, &snapshot.data)
            .map_err(kv_err)?;
        txn.put(Space::Catalog, HARD_STATE, &encode(&hs)?)
            .map_err(kv_err)?;
        txn.put(Space::Catalog, CONF_STATE, &encode(meta.get_conf_state())?)
            .map_err(kv_err)?;
        if let Some(c) = &data.config {
            txn.put(Space::Catalog, CONFIG, c).map_err(kv_err)?;
        }
        txn.put(Space::Catalog, APPLIED, &meta.index.to_be_bytes())
            .map_err(kv_err)?;
        if initial_sync {
            txn.put(Space::Catalog, INITIAL_SYNC, &meta.index.to_be_bytes())
                .map_err(kv_err)?;
        }
        self.commit(txn)?;
        cache.hard_state = hs;
        cache.conf_state = meta.get_conf_state().clone();
        cache.snapshot = meta.clone();
        cache.snapshot_data = snapshot.data.to_vec();
        cache.last_index = meta.index;
        cache.terms.clear();
        cache.log_bytes = 0;
        if let Some(c) = data.config {
            cache.config = c;
        }
        Ok(())
    }

    /// Deletes the log through `index` (an applied entry; at most the last one). The snapshot
    /// metadata becomes `index` with its entry's term and the membership in force; its data
    /// the configuration in force and `optime`, the newest oplog entry at or before `index`.
    /// Returns the number of entries deleted.
    pub fn compact(&self, index: u64, optime: OpTime) -> raft::Result<u64> {
        let mut cache = self.cache.write();
        let first = cache.snapshot.index + 1;
        if index < first {
            return Ok(0);
        }
        if index > cache.last_index || index > cache.hard_state.commit {
            return Err(store_err(format!(
                "cannot compact the log through {index}: past the committed entries"
            )));
        }
        let term = match self.entry(index)? {
            Some(e) => e.term,
            None => return Err(store_err(format!("log entry {index} is missing"))),
        };
        let mut txn = self.kv.begin();
        let mut bytes = 0u64;
        {
            let snap = self.kv.snapshot();
            let (lo, hi) = (log_key(first), log_key(index + 1));
            let mut c = snap.cursor(Space::Catalog, &lo, &hi);
            c.seek_to_first();
            while c.valid() {
                bytes += c.value().len() as u64;
                txn.delete(Space::Catalog, c.key()).map_err(kv_err)?;
                c.next();
            }
            c.status().map_err(kv_err)?;
        }
        let mut meta = SnapshotMetadata {
            index,
            term,
            ..Default::default()
        };
        meta.set_conf_state(cache.conf_state.clone());
        let data = SnapshotData {
            config: Some(cache.config.clone()).filter(|c| !c.is_empty()),
            optime: Some(optime),
        }
        .encode();
        txn.put(Space::Catalog, SNAPSHOT_META, &encode(&meta)?)
            .map_err(kv_err)?;
        txn.put(Space::Catalog, SNAPSHOT_DATA, &data)
            .map_err(kv_err)?;
        // No WAL sync: a compaction lost in a crash leaves the entries in place.
        txn.commit().map_err(kv_err)?;
        cache.snapshot = meta;
        cache.snapshot_data = data;
        cache.log_bytes = cache.log_bytes.saturating_sub(bytes);
        Ok(index + 1 - first)
    }

    /// The stored log: first index, last index and bytes.
    pub fn log_stats(&self) -> (u64, u64, u64) {
        let c = self.cache.read();
        (c.snapshot.index + 1, c.last_index, c.log_bytes)
    }

    /// What the newest snapshot carries (the optime of the last compacted entry).
    pub fn snapshot_data(&self) -> SnapshotData {
        SnapshotData::parse(&self.cache.read().snapshot_data)
    }

    /// The snapshot index of an initial sync not finished yet (a member that stops during
    /// one starts it again from scratch).
    pub fn initial_sync_pending(&self) -> raft::Result<Option<u64>> {
        let v = self
            .kv
            .snapshot()
            .get(Space::Catalog, INITIAL_SYNC)
            .map_err(kv_err)?;
        Ok(v.and_then(|b| nidus_storage::keys::read_u64(&b)))
    }

    /// Records a finished initial sync: `applied` (as a u64 `ts`) is the newest oplog entry it
    /// applied.
    pub fn initial_sync_done(&self, applied: u64) -> raft::Result<()> {
        let mut txn = self.kv.begin();
        txn.delete(Space::Catalog, INITIAL_SYNC).map_err(kv_err)?;
        txn.delete(Space::Catalog, FILE_COPY).map_err(kv_err)?;
        txn.put(Space::Catalog, SYNC_APPLIED, &applied.to_be_bytes())
            .map_err(kv_err)?;
        self.commit(txn)
    }

    /// The installed files of a file-copy initial sync whose oplog phase is still to run.
    pub fn file_copy_state(&self) -> raft::Result<Option<Vec<u8>>> {
        self.kv
            .snapshot()
            .get(Space::Catalog, FILE_COPY)
            .map_err(kv_err)
    }

    /// Forgets installed files whose oplog phase failed (the next attempt starts over).
    pub fn clear_file_copy_state(&self) -> raft::Result<()> {
        let mut txn = self.kv.begin();
        txn.delete(Space::Catalog, FILE_COPY).map_err(kv_err)?;
        self.commit(txn)
    }

    /// The newest oplog `ts` (as u64) the last finished initial sync applied (0: none).
    pub fn sync_applied(&self) -> raft::Result<u64> {
        let v = self
            .kv
            .snapshot()
            .get(Space::Catalog, SYNC_APPLIED)
            .map_err(kv_err)?;
        Ok(v.and_then(|b| nidus_storage::keys::read_u64(&b))
            .unwrap_or(0))
    }

    /// Appends entries (replacing any conflicting suffix) and saves the hard state, durably
    /// (the tests' way to write a log; the driver saves what Raft hands it with `save_ready`).
    #[cfg(test)]
    pub fn append(&self, entries: &[Entry], hard_state: Option<&HardState>) -> raft::Result<()> {
        self.write_log(entries, hard_state, true)
    }

    /// Saves a `Ready`'s entries and hard state: durably when Raft needs it, without a sync
    /// of its own when `Ready::must_sync` is false (no entries, and of the hard state only
    /// the commit index changed), which is every follower's second Ready per write and the
    /// leader's commit.
    pub fn save_ready(&self, ready: &Ready) -> raft::Result<()> {
        self.write_log(ready.entries(), ready.hs(), ready.must_sync())
    }

    fn write_log(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        sync: bool,
    ) -> raft::Result<()> {
        let mut cache = self.cache.write();
        let mut txn = self.kv.begin();
        let mut last = cache.last_index;
        let (mut removed, mut added) = (0u64, 0u64);
        if let Some(first) = entries.first() {
            if first.index <= cache.snapshot.index {
                return Err(store_err(format!(
                    "append at {} is before the snapshot at {}",
                    first.index, cache.snapshot.index
                )));
            }
            if first.index <= cache.last_index {
                let snap = self.kv.snapshot();
                let (lo, hi) = (log_key(first.index), log_key(cache.last_index + 1));
                let mut c = snap.cursor(Space::Catalog, &lo, &hi);
                c.seek_to_first();
                while c.valid() {
                    removed += c.value().len() as u64;
                    txn.delete(Space::Catalog, c.key()).map_err(kv_err)?;
                    c.next();
                }
                c.status().map_err(kv_err)?;
            }
            for e in entries {
                let bytes = encode(e)?;
                added += bytes.len() as u64;
                txn.put(Space::Catalog, &log_key(e.index), &bytes)
                    .map_err(kv_err)?;
            }
            last = entries[entries.len() - 1].index;
        }
        if let Some(hs) = hard_state {
            txn.put(Space::Catalog, HARD_STATE, &encode(hs)?)
                .map_err(kv_err)?;
        }
        if sync {
            self.commit(txn)?;
        } else {
            self.commit_unsynced(txn)?;
        }
        cache.last_index = last;
        cache.terms.appended(entries);
        cache.log_bytes = cache.log_bytes.saturating_sub(removed) + added;
        if let Some(hs) = hard_state {
            cache.hard_state = hs.clone();
        }
        Ok(())
    }

    /// Saves a newer commit index (from a light ready), without a sync of its own.
    pub fn set_commit(&self, commit: u64) -> raft::Result<()> {
        let mut hs = self.cache.read().hard_state.clone();
        if hs.commit >= commit {
            return Ok(());
        }
        hs.commit = commit;
        self.write_log(&[], Some(&hs), false)
    }

    /// One log entry, when it is in the log.
    pub fn entry(&self, index: u64) -> raft::Result<Option<Entry>> {
        match self
            .kv
            .snapshot()
            .get(Space::Catalog, &log_key(index))
            .map_err(kv_err)?
        {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
    }

    pub fn last_index_cached(&self) -> u64 {
        self.cache.read().last_index
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let c = self.cache.read();
        Ok(RaftState::new(c.hard_state.clone(), c.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into();
        let (first, last) = {
            let c = self.cache.read();
            (c.snapshot.index + 1, c.last_index)
        };
        if low < first {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > last + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let snap = self.kv.snapshot();
        let (lo, hi) = (log_key(low), log_key(high));
        let mut c = snap.cursor(Space::Catalog, &lo, &hi);
        c.seek_to_first();
        let mut out: Vec<Entry> = Vec::new();
        while c.valid() {
            out.push(decode(c.value())?);
            c.next();
        }
        c.status().map_err(kv_err)?;
        if out.len() as u64 != high - low {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        raft::util::limit_size(&mut out, max_size);
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let (snap_index, snap_term, last, recent) = {
            let c = self.cache.read();
            (
                c.snapshot.index,
                c.snapshot.term,
                c.last_index,
                c.terms.get(idx),
            )
        };
        if idx == snap_index {
            return Ok(snap_term);
        }
        if idx < snap_index {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if idx > last {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        if let Some(term) = recent {
            return Ok(term);
        }
        match self.entry(idx)? {
            Some(e) => Ok(e.term),
            None => Err(raft::Error::Store(raft::StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.cache.read().snapshot.index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.cache.read().last_index)
    }

    /// The newest snapshot: the set's first one (index 1) until the log is compacted, then
    /// the last compaction's. It carries the membership and configuration in force instead of
    /// those at its index, because Raft refuses a snapshot whose membership lacks its
    /// receiver (a member added by `replSetReconfig`); replaying the log's configuration
    /// entries after it then installs each configuration in turn (see `membership`).
    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let c = self.cache.read();
        if c.snapshot.index == 0 {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut s = Snapshot::default();
        s.set_metadata(c.snapshot.clone());
        if !c.conf_state.voters.is_empty() {
            s.mut_metadata().set_conf_state(c.conf_state.clone());
        }
        let mut data = SnapshotData::parse(&c.snapshot_data);
        if !c.config.is_empty() {
            data.config = Some(c.config.clone());
        }
        s.data = data.encode().into();
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> LogStore {
        let kv = nidus_storage_rocks::RocksEngine::open(dir).unwrap();
        LogStore::open(Arc::new(kv)).unwrap()
    }

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8].into(),
            ..Default::default()
        }
    }

    #[test]
    fn log_survives_reopen_and_conflicting_suffix_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path());
            assert!(!s.initialized());
            let cs = ConfState {
                voters: vec![1, 2, 3],
                ..Default::default()
            };
            s.bootstrap(1, cs, cfg()).unwrap();
            s.append(&[entry(2, 1), entry(3, 1), entry(4, 1)], None)
                .unwrap();
            let hs = HardState {
                term: 2,
                vote: 2,
                commit: 3,
                ..Default::default()
            };
            s.append(&[entry(3, 2)], Some(&hs)).unwrap();
            assert_eq!(s.last_index().unwrap(), 3);
        }
        let s = open(dir.path());
        assert!(s.initialized());
        assert_eq!(s.node_id().unwrap(), Some(1));
        assert_eq!(s.first_index().unwrap(), 2);
        assert_eq!(s.last_index().unwrap(), 3);
        assert_eq!(s.term(1).unwrap(), 1);
        assert_eq!(s.term(3).unwrap(), 2);
        assert!(s.term(4).is_err());
        let st = s.initial_state().unwrap();
        assert_eq!(st.hard_state.term, 2);
        assert_eq!(st.hard_state.commit, 3);
        assert_eq!(st.conf_state.voters, vec![1, 2, 3]);
        let es = s
            .entries(2, 4, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(es.iter().map(|e| e.term).collect::<Vec<_>>(), vec![1, 2]);
        assert!(matches!(
            s.entries(1, 3, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
        let snap = s.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 1);
        let data = SnapshotData::parse(&snap.data);
        assert_eq!(data.config, Some(cfg()));
        assert_eq!(data.optime, None);
    }

    fn cfg() -> Vec<u8> {
        bson::to_vec(&bson::doc! { "_id": "rs0", "version": 1 }).unwrap()
    }

    fn optime(secs: u32) -> OpTime {
        OpTime {
            ts: bson::Timestamp {
                time: secs,
                increment: 1,
            },
            term: 2,
            wall: bson::DateTime::from_millis(secs as i64 * 1000),
        }
    }

    #[test]
    fn compaction_keeps_the_tail_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let cs = ConfState {
            voters: vec![1, 2],
            ..Default::default()
        };
        {
            let s = open(dir.path());
            s.bootstrap(1, cs.clone(), cfg()).unwrap();
            let entries: Vec<Entry> = (2..=10)
                .map(|i| entry(i, if i < 6 { 1 } else { 2 }))
                .collect();
            let hs = HardState {
                term: 2,
                vote: 1,
                commit: 8,
                ..Default::default()
            };
            s.append(&entries, Some(&hs)).unwrap();
            let (first, last, bytes) = s.log_stats();
            assert_eq!((first, last), (2, 10));
            let one = encode(&entry(2, 1)).unwrap().len() as u64;
            assert_eq!(bytes, 9 * one);
            // Not past the committed entries.
            assert!(s.compact(9, optime(9)).is_err());
            assert_eq!(s.compact(1, optime(1)).unwrap(), 0);
            assert_eq!(s.compact(6, optime(6)).unwrap(), 5);
            assert_eq!(s.first_index().unwrap(), 7);
            assert_eq!(s.last_index().unwrap(), 10);
            assert_eq!(s.log_stats().2, 4 * one);
            assert_eq!(s.term(6).unwrap(), 2);
            assert!(matches!(
                s.term(5),
                Err(raft::Error::Store(raft::StorageError::Compacted))
            ));
            assert!(matches!(
                s.entries(5, 8, None, GetEntriesContext::empty(false)),
                Err(raft::Error::Store(raft::StorageError::Compacted))
            ));
            let es = s
                .entries(7, 11, None, GetEntriesContext::empty(false))
                .unwrap();
            assert_eq!(
                es.iter().map(|e| e.index).collect::<Vec<_>>(),
                vec![7, 8, 9, 10]
            );
            // A second compaction moves the snapshot on.
            assert_eq!(s.compact(7, optime(7)).unwrap(), 1);
        }
        let s = open(dir.path());
        assert_eq!(s.first_index().unwrap(), 8);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(
            s.log_stats().2,
            3 * encode(&entry(2, 1)).unwrap().len() as u64
        );
        assert_eq!(s.term(7).unwrap(), 2);
        assert_eq!(s.term(9).unwrap(), 2);
        assert!(s.term(6).is_err());
        let st = s.initial_state().unwrap();
        assert_eq!(st.hard_state.commit, 8);
        assert_eq!(st.conf_state.voters, vec![1, 2]);
        // The snapshot a lagging member receives: index and term of the last compacted
        // entry, the membership and configuration in force, the optime of that entry.
        let snap = s.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 7);
        assert_eq!(snap.get_metadata().term, 2);
        assert_eq!(snap.get_metadata().get_conf_state().voters, vec![1, 2]);
        let data = SnapshotData::parse(&snap.data);
        assert_eq!(data.config, Some(cfg()));
        assert_eq!(data.optime, Some(optime(7)));
        assert_eq!(s.snapshot_data().optime, Some(optime(7)));
        // Appending after compaction, and replacing a suffix, keep the byte count.
        s.append(&[entry(10, 3), entry(11, 3)], None).unwrap();
        assert_eq!(
            s.log_stats(),
            (8, 11, 4 * encode(&entry(2, 1)).unwrap().len() as u64)
        );
    }

    #[test]
    fn receiving_a_snapshot_for_initial_sync_is_recorded_until_done() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.set_node_id(3).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 40;
        snap.mut_metadata().term = 3;
        snap.mut_metadata().set_conf_state(ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        });
        snap.data = SnapshotData {
            config: Some(cfg()),
            optime: Some(optime(40)),
        }
        .encode()
        .into();
        s.apply_snapshot(&snap, true).unwrap();
        assert_eq!(s.initial_sync_pending().unwrap(), Some(40));
        assert_eq!(s.config().unwrap(), Some(cfg()));
        assert_eq!(s.applied().unwrap(), 40);
        drop(s);
        let s = open(dir.path());
        assert_eq!(s.initial_sync_pending().unwrap(), Some(40));
        assert_eq!(s.first_index().unwrap(), 41);
        assert_eq!(s.snapshot_data().optime, Some(optime(40)));
        s.initial_sync_done(77).unwrap();
        assert_eq!(s.initial_sync_pending().unwrap(), None);
        assert_eq!(s.sync_applied().unwrap(), 77);
    }

    #[test]
    fn transplant_keeps_the_members_own_state_and_the_copied_data() {
        let own_dir = tempfile::tempdir().unwrap();
        let copy_dir = tempfile::tempdir().unwrap();
        let own = Arc::new(nidus_storage_rocks::RocksEngine::open(own_dir.path()).unwrap());
        let copy = Arc::new(nidus_storage_rocks::RocksEngine::open(copy_dir.path()).unwrap());
        {
            let s = LogStore::open(own.clone()).unwrap();
            s.set_node_id(3).unwrap();
            s.append(&(2..2500).map(|i| entry(i, 2)).collect::<Vec<_>>(), None)
                .unwrap();
        }
        {
            let s = LogStore::open(copy.clone()).unwrap();
            s.set_node_id(1).unwrap();
            s.append(&[entry(2, 5), entry(3, 5)], None).unwrap();
            let mut t = copy.begin();
            t.put(Space::Catalog, b"coll\0data", b"kept").unwrap();
            t.put(Space::Records, b"r", b"doc").unwrap();
            t.commit().unwrap();
        }
        transplant_member_state(own.as_ref(), copy.as_ref(), b"marker").unwrap();
        let s = LogStore::open(copy.clone()).unwrap();
        assert_eq!(s.node_id().unwrap(), Some(3));
        assert_eq!(s.last_index_cached(), 2499);
        assert_eq!(s.entry(3).unwrap().map(|e| e.term), Some(2));
        assert_eq!(
            s.file_copy_state().unwrap().as_deref(),
            Some(&b"marker"[..])
        );
        let snap = copy.snapshot();
        assert_eq!(
            snap.get(Space::Catalog, b"coll\0data").unwrap().as_deref(),
            Some(&b"kept"[..])
        );
        assert!(snap.get(Space::Records, b"r").unwrap().is_some());
        // Finishing the initial sync forgets the marker with the pending sync.
        s.initial_sync_done(9).unwrap();
        assert_eq!(s.file_copy_state().unwrap(), None);
    }

    /// The terms the store answers from its recent-terms cache equal those a store opened
    /// fresh on the same data reads from the entries, at every index around the log (below
    /// the snapshot, at it, in the log, past its end), after each step of a sequence of
    /// appends, suffix replacements (within and before the cached run), compactions and an
    /// installed snapshot; and equal the terms the sequence wrote.
    #[test]
    fn recent_terms_answer_as_the_stored_entries() {
        let dir = tempfile::tempdir().unwrap();
        let kv: Arc<dyn KvEngine> =
            Arc::new(nidus_storage_rocks::RocksEngine::open(dir.path()).unwrap());
        let s = LogStore::open(kv.clone()).unwrap();
        s.bootstrap(
            1,
            ConfState {
                voters: vec![1],
                ..Default::default()
            },
            cfg(),
        )
        .unwrap();
        let run = |from: u64, n: u64, term: u64| -> Vec<Entry> {
            (from..from + n).map(|i| entry(i, term)).collect()
        };
        enum Step {
            Append(Vec<Entry>),
            Compact(u64),
            Snapshot(u64, u64),
        }
        let steps = vec![
            Step::Append(run(2, 10, 1)),
            Step::Append(run(12, 5, 2)),
            // Replaces 8.. (inside the cached run).
            Step::Append(run(8, 3, 3)),
            Step::Compact(5),
            Step::Append(run(11, RecentTerms::MAX as u64 + 20, 4)),
            // Replaces an index older than the cached run holds.
            Step::Append(run(9, 4, 5)),
            Step::Compact(10),
            Step::Append(run(13, 7, 6)),
            Step::Snapshot(40, 7),
            Step::Append(run(41, 3, 7)),
            Step::Append(run(42, 2, 8)),
        ];
        let mut model: std::collections::BTreeMap<u64, u64> = [(1, 1)].into();
        let (mut snap_index, mut snap_term) = (1u64, 1u64);
        for (n, step) in steps.into_iter().enumerate() {
            match step {
                Step::Append(es) => {
                    let first = es[0].index;
                    model.retain(|i, _| *i < first);
                    model.extend(es.iter().map(|e| (e.index, e.term)));
                    let hs = HardState {
                        term: es[es.len() - 1].term,
                        commit: es[es.len() - 1].index,
                        ..Default::default()
                    };
                    s.append(&es, Some(&hs)).unwrap();
                }
                Step::Compact(i) => {
                    s.compact(i, optime(i as u32)).unwrap();
                    snap_term = model[&i];
                    snap_index = i;
                }
                Step::Snapshot(i, t) => {
                    let mut snap = Snapshot::default();
                    snap.mut_metadata().index = i;
                    snap.mut_metadata().term = t;
                    snap.data = SnapshotData {
                        config: Some(cfg()),
                        optime: Some(optime(i as u32)),
                    }
                    .encode()
                    .into();
                    s.apply_snapshot(&snap, false).unwrap();
                    model.clear();
                    (snap_index, snap_term) = (i, t);
                }
            }
            let fresh = LogStore::open(kv.clone()).unwrap();
            let last = *model.keys().next_back().unwrap_or(&snap_index);
            for idx in snap_index.saturating_sub(2)..last + 3 {
                let got = s.term(idx).ok();
                assert_eq!(got, fresh.term(idx).ok(), "step {n}, index {idx}");
                let want = match idx {
                    i if i == snap_index => Some(snap_term),
                    i if i < snap_index => None,
                    i => model.get(&i).copied(),
                };
                assert_eq!(got, want, "step {n}, index {idx}");
            }
        }
        assert!(s.cache.read().terms.terms.len() <= RecentTerms::MAX);
    }

    /// The driver writes a commit index that needs no sync with the applied index of the
    /// entries it commits: one write, read back after a restart; an older one changes nothing.
    #[test]
    fn the_applied_index_carries_a_newer_commit_index() {
        let dir = tempfile::tempdir().unwrap();
        let cs = ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        };
        {
            let s = open(dir.path());
            s.bootstrap(1, cs, cfg()).unwrap();
            let hs = HardState {
                term: 4,
                vote: 2,
                commit: 1,
                ..Default::default()
            };
            s.append(&[entry(2, 4), entry(3, 4), entry(4, 4)], Some(&hs))
                .unwrap();
            s.set_applied(3, Some(3), None, None).unwrap();
            s.set_applied(3, Some(2), None, None).unwrap();
            let state = s.initial_state().unwrap().hard_state;
            assert_eq!((state.term, state.vote, state.commit), (4, 2, 3));
        }
        let s = open(dir.path());
        let state = s.initial_state().unwrap().hard_state;
        assert_eq!((state.term, state.vote, state.commit), (4, 2, 3));
        assert_eq!(s.applied().unwrap(), 3);
    }

    /// What Raft relies on after a crash (a vote, a term, appended entries) is synced before
    /// the `Ready` that carries it is acknowledged; a `Ready` holding nothing but a newer
    /// commit index is saved without a sync of its own (Raft learns the commit index again
    /// from the leader), so a replicated write costs each member one sync, not two.
    #[test]
    fn a_ready_is_synced_when_raft_needs_it_synced() {
        use raft::eraftpb::{Message, MessageType};
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(nidus_storage_rocks::RocksEngine::open(dir.path()).unwrap());
        let s = LogStore::open(kv.clone()).unwrap();
        let cs = ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        };
        s.bootstrap(1, cs, cfg()).unwrap();
        let syncs = || {
            kv.statistics()
                .into_iter()
                .find(|(n, _)| *n == "rocksdb.wal.synced")
                .map(|(_, c)| c)
                .unwrap()
        };
        let config = raft::Config {
            id: 1,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut node = raft::RawNode::new(&config, s.clone(), &logger).unwrap();
        // Saves the node's Ready as the driver does; returns (must_sync, synced).
        let save = |node: &mut raft::RawNode<LogStore>| {
            assert!(node.has_ready());
            let ready = node.ready();
            let before = syncs();
            s.save_ready(&ready).unwrap();
            let outcome = (ready.must_sync(), syncs() > before);
            let mut light = node.advance(ready);
            if let Some(commit) = light.commit_index() {
                s.set_commit(commit).unwrap();
            }
            light.take_committed_entries();
            node.advance_apply();
            outcome
        };
        let from_2 = |kind: MessageType, term: u64, index: u64| {
            let mut m = Message::default();
            m.set_msg_type(kind);
            m.from = 2;
            m.to = 1;
            m.term = term;
            m.index = index;
            m
        };
        // A campaign: the new term and the vote for itself.
        node.campaign().unwrap();
        let term = node.raft.term;
        assert_eq!(save(&mut node), (true, true));
        assert_eq!(s.initial_state().unwrap().hard_state.vote, 1);
        // Elected: the leader's first entry.
        node.step(from_2(MessageType::MsgRequestVoteResponse, term, 0))
            .unwrap();
        assert_eq!(node.raft.state, raft::StateRole::Leader);
        let first = node.raft.raft_log.last_index();
        assert_eq!(save(&mut node), (true, true));
        assert_eq!(s.last_index_cached(), first);
        // A proposal: a new entry, synced.
        node.propose(vec![], b"x".to_vec()).unwrap();
        let proposed = node.raft.raft_log.last_index();
        assert_eq!(save(&mut node), (true, true));
        // A follower holds both: they are committed, and only the commit index changed.
        node.step(from_2(MessageType::MsgAppendResponse, term, proposed))
            .unwrap();
        assert_eq!(node.raft.raft_log.committed, proposed);
        assert_eq!(save(&mut node), (false, false));
        assert_eq!(s.initial_state().unwrap().hard_state.commit, proposed);
        assert_eq!(s.initial_state().unwrap().hard_state.term, term);
    }
}
