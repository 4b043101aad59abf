//! Key-value storage traits the engine is written against.
//!
//! Nothing here knows about RocksDB (the only implementation lives in `nidus-storage-rocks`),
//! so the engine can be tested against any ordered, transactional key-value store.
//!
//! Data lives in a few keyspaces ([`Space`]); keys inside a space are prefixed by the owning
//! collection's or index's 64-bit id, so dropping a collection is a range delete and thousands
//! of collections cost nothing extra.

use std::fmt;

/// A keyspace (a RocksDB column family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// Catalog entries: databases, collections and their index specs.
    Catalog,
    /// Documents keyed by `collection id ++ record id`.
    Records,
    /// Index entries keyed by `index id ++ keystring (++ record id)`.
    Indexes,
    /// The oplog's entries, keyed by `collection id ++ ts` as records are: a stream appended
    /// at every write and truncated at its oldest end. Apart from the records because keys
    /// appended to two places of one space make every flushed table span the gap between
    /// them, so each compaction of new tables rewrote the other stream's tables as well.
    Oplog,
}

impl Space {
    pub const ALL: [Space; 4] = [Space::Catalog, Space::Records, Space::Indexes, Space::Oplog];

    pub fn name(self) -> &'static str {
        match self {
            Space::Catalog => "catalog",
            Space::Records => "records",
            Space::Indexes => "indexes",
            Space::Oplog => "oplog",
        }
    }
}

/// Storage failures, narrow on purpose; the engine maps them to MongoDB errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// Another transaction holds or has committed a newer version of a key this one writes.
    WriteConflict,
    /// The store cannot proceed (I/O error, corruption, bad configuration).
    Io(String),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::WriteConflict => f.write_str("write conflict"),
            StorageError::Io(m) => write!(f, "storage error: {m}"),
        }
    }
}

impl std::error::Error for StorageError {}

pub type StorageResult<T> = Result<T, StorageError>;

/// A positioned iterator over one space, bounded to `[lower, upper)`.
pub trait KvCursor {
    /// Positions at the first key >= `key` (within bounds).
    fn seek(&mut self, key: &[u8]);
    /// Positions at the last key <= `key` (within bounds).
    fn seek_for_prev(&mut self, key: &[u8]);
    fn seek_to_first(&mut self);
    fn seek_to_last(&mut self);
    fn valid(&self) -> bool;
    fn next(&mut self);
    fn prev(&mut self);
    /// Only meaningful while `valid()`.
    fn key(&self) -> &[u8];
    /// Only meaningful while `valid()`.
    fn value(&self) -> &[u8];
    /// Reports an I/O error that ended iteration early (`valid()` false without reaching the end).
    fn status(&self) -> StorageResult<()>;
}

/// Consistent reads at one point in time.
pub trait KvRead {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;
    fn cursor(&self, space: Space, lower: &[u8], upper: &[u8]) -> Box<dyn KvCursor + '_>;
}

/// A snapshot transaction: reads see the snapshot taken at `begin` plus its own writes;
/// a write to a key changed by a concurrent transaction fails at once with `WriteConflict`.
pub trait KvTxn: KvRead + Send {
    /// Reads a key and takes its write lock, so a concurrent writer of it conflicts.
    fn get_for_update(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;
    fn put(&mut self, space: Space, key: &[u8], value: &[u8]) -> StorageResult<()>;
    /// Writes a key that no other transaction can write: one this transaction allocated and
    /// nobody has seen (a new record id, a reserved oplog slot). It takes no lock and is not
    /// checked for conflicts, which are impossible; anything else uses [`KvTxn::put`].
    fn put_new(&mut self, space: Space, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.put(space, key, value)
    }
    /// Declares that this transaction will not read back what it writes with
    /// [`KvTxn::put_new`] from here on, so an engine may leave those keys out of the
    /// transaction's own read index (in RocksDB a skip-list insert per key). Its reads may
    /// then miss them; its commit writes them all the same.
    fn new_keys_unread(&mut self) {}
    fn delete(&mut self, space: Space, key: &[u8]) -> StorageResult<()>;
    fn set_savepoint(&mut self);
    fn rollback_to_savepoint(&mut self) -> StorageResult<()>;
    /// Makes the writes visible atomically. The WAL is written but not synced; call
    /// [`KvEngine::sync_wal`] when the write must be durable before acknowledging it.
    fn commit(self: Box<Self>) -> StorageResult<()>;
    fn rollback(self: Box<Self>) -> StorageResult<()>;
}

/// A read-only point-in-time view.
pub trait KvSnapshot: KvRead + Send + Sync {}

pub trait KvEngine: Send + Sync {
    fn begin(&self) -> Box<dyn KvTxn>;
    fn snapshot(&self) -> Box<dyn KvSnapshot>;
    /// Syncs the write-ahead log to disk; everything committed before the call is durable after it.
    fn sync_wal(&self) -> StorageResult<()>;
    /// Removes every key of `space` in `[lower, upper)` at once, outside any transaction, at
    /// a cost that does not grow with the number of keys (a drop of a large collection is
    /// as cheap as of an empty one, as MongoDB drops a collection's table). Only for a range
    /// no transaction writes any more, such as the key prefix of a dropped collection or
    /// index (ids are never reused): transactions do not conflict with it. A snapshot taken
    /// before the call still reads the keys.
    fn delete_range(&self, space: Space, lower: &[u8], upper: &[u8]) -> StorageResult<()>;
    /// Bytes on disk (SST + WAL), for `dbStats`/`collStats` estimates.
    fn disk_usage_bytes(&self) -> u64;
    /// Named counters of the storage engine (RocksDB's statistics tickers) for
    /// `serverStatus().rocksdb`; empty for an engine that keeps none.
    fn statistics(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Writes a consistent copy of the whole store (every space, as of one instant) as the
    /// files of a store of the same kind in `dir`, which must not exist yet (a file-copy
    /// initial sync sends those files to another member). The copy is independent of later
    /// writes to this store.
    fn checkpoint(&self, dir: &std::path::Path) -> StorageResult<()> {
        let _ = dir;
        Err(StorageError::Io(
            "this storage engine cannot make checkpoints".to_string(),
        ))
    }
}

/// Helpers for big-endian id prefixes shared by every key layout.
pub mod keys {
    pub fn u64_be(v: u64) -> [u8; 8] {
        v.to_be_bytes()
    }

    /// `prefix ++ id`.
    pub fn with_id(prefix: u64, id: u64) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&prefix.to_be_bytes());
        k[8..].copy_from_slice(&id.to_be_bytes());
        k
    }

    /// The exclusive upper bound of every key starting with `prefix`'s 8 bytes.
    pub fn prefix_end(prefix: u64) -> [u8; 8] {
        prefix.wrapping_add(1).to_be_bytes()
    }

    pub fn read_u64(bytes: &[u8]) -> Option<u64> {
        let arr: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
        Some(u64::from_be_bytes(arr))
    }
}

impl From<StorageError> for nidus_common::Error {
    fn from(e: StorageError) -> nidus_common::Error {
        use nidus_common::{Error, ErrorCode};
        match e {
            StorageError::WriteConflict => Error::new(
                ErrorCode::WriteConflict,
                "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction.",
            ),
            StorageError::Io(m) => Error::new(ErrorCode::InternalError, m),
        }
    }
}
