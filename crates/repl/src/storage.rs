//! The durable Raft storage: hard state, configuration state, snapshot metadata and the log,
//! kept under the `raft\0` prefix of the catalog keyspace of the member's own RocksDB.
//!
//! Every change is one storage transaction followed by a WAL sync, so what Raft is told is
//! persisted (votes, terms, appended entries) survives a crash before any message that relies
//! on it is sent.

use nidus_storage::{KvEngine, KvTxn, Space, StorageError};
use parking_lot::RwLock;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage};
use std::sync::Arc;

const HARD_STATE: &[u8] = b"raft\0hs";
const CONF_STATE: &[u8] = b"raft\0cs";
const SNAPSHOT_META: &[u8] = b"raft\0snap";
const SNAPSHOT_DATA: &[u8] = b"raft\0snapdata";
const NODE_ID: &[u8] = b"raft\0id";
const APPLIED: &[u8] = b"raft\0applied";
const CONFIG: &[u8] = b"raft\0config";
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
        cache.last_index = cache.snapshot.index;
        {
            let mut c = snap.cursor(Space::Catalog, LOG_PREFIX, LOG_END);
            c.seek_to_last();
            if c.valid() {
                let idx = c.key().get(LOG_PREFIX.len()..).and_then(|b| {
                    let a: [u8; 8] = b.try_into().ok()?;
                    Some(u64::from_be_bytes(a))
                });
                if let Some(i) = idx {
                    cache.last_index = cache.last_index.max(i);
                }
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
        self.apply_snapshot(&snapshot)
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

    /// Records applied entries: the applied index and, when a configuration entry was among
    /// them, the configuration and Raft's configuration state, in one write.
    pub fn set_applied(
        &self,
        applied: u64,
        config: Option<&[u8]>,
        conf_state: Option<&ConfState>,
    ) -> raft::Result<()> {
        let mut txn = self.kv.begin();
        txn.put(Space::Catalog, APPLIED, &applied.to_be_bytes())
            .map_err(kv_err)?;
        if let Some(c) = config {
            txn.put(Space::Catalog, CONFIG, c).map_err(kv_err)?;
        }
        if let Some(cs) = conf_state {
            txn.put(Space::Catalog, CONF_STATE, &encode(cs)?)
                .map_err(kv_err)?;
        }
        self.commit(txn)?;
        if let Some(cs) = conf_state {
            self.cache.write().conf_state = cs.clone();
        }
        Ok(())
    }

    /// Installs a snapshot: the log before it is gone, its configuration is the current one.
    pub fn apply_snapshot(&self, snapshot: &Snapshot) -> raft::Result<()> {
        let meta = snapshot.get_metadata();
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
        txn.put(Space::Catalog, CONFIG, &snapshot.data)
            .map_err(kv_err)?;
        txn.put(Space::Catalog, APPLIED, &meta.index.to_be_bytes())
            .map_err(kv_err)?;
        self.commit(txn)?;
        cache.hard_state = hs;
        cache.conf_state = meta.get_conf_state().clone();
        cache.snapshot = meta.clone();
        cache.snapshot_data = snapshot.data.to_vec();
        cache.last_index = meta.index;
        Ok(())
    }

    /// Appends entries (replacing any conflicting suffix) and saves the hard state, durably.
    pub fn append(&self, entries: &[Entry], hard_state: Option<&HardState>) -> raft::Result<()> {
        let mut cache = self.cache.write();
        let mut txn = self.kv.begin();
        let mut last = cache.last_index;
        if let Some(first) = entries.first() {
            if first.index <= cache.snapshot.index {
                return Err(store_err(format!(
                    "append at {} is before the snapshot at {}",
                    first.index, cache.snapshot.index
                )));
            }
            for i in first.index..=cache.last_index {
                txn.delete(Space::Catalog, &log_key(i)).map_err(kv_err)?;
            }
            for e in entries {
                txn.put(Space::Catalog, &log_key(e.index), &encode(e)?)
                    .map_err(kv_err)?;
            }
            last = entries[entries.len() - 1].index;
        }
        if let Some(hs) = hard_state {
            txn.put(Space::Catalog, HARD_STATE, &encode(hs)?)
                .map_err(kv_err)?;
        }
        self.commit(txn)?;
        cache.last_index = last;
        if let Some(hs) = hard_state {
            cache.hard_state = hs.clone();
        }
        Ok(())
    }

    /// Saves a newer commit index (from a light ready).
    pub fn set_commit(&self, commit: u64) -> raft::Result<()> {
        let mut hs = self.cache.read().hard_state.clone();
        if hs.commit >= commit {
            return Ok(());
        }
        hs.commit = commit;
        self.append(&[], Some(&hs))
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
        let (snap_index, snap_term, last) = {
            let c = self.cache.read();
            (c.snapshot.index, c.snapshot.term, c.last_index)
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

    /// The log is never compacted, so the only snapshot is the set's first one (index 1):
    /// a member that joins replays the whole log after it. It carries the membership in
    /// force instead of the first one, because Raft refuses a snapshot whose membership
    /// lacks its receiver (a member added by `replSetReconfig`); replaying the log's
    /// configuration entries then installs each configuration in turn (see `membership`).
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
        s.data = c.snapshot_data.clone().into();
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
            s.bootstrap(1, cs, b"cfg".to_vec()).unwrap();
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
        assert_eq!(&snap.data[..], b"cfg");
    }
}
