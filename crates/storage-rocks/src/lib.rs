//! The RocksDB implementation of the storage traits; the only crate that links RocksDB.
//!
//! One `TransactionDB` per data directory with one column family per [`Space`]. Transactions
//! take a snapshot at begin and a zero lock timeout, so a write to a key locked by another
//! open transaction fails at once (`TimedOut`) and a write to a key committed after the
//! snapshot fails at validation (`Busy`); both surface as `StorageError::WriteConflict`.

use nidus_storage::{
    KvCursor, KvEngine, KvRead, KvSnapshot, KvTxn, Space, StorageError, StorageResult,
};
use rocksdb::{
    statistics::{StatsLevel, Ticker},
    AsColumnFamilyRef, BlockBasedIndexType, BlockBasedOptions, BlockBasedTablePinningTier, Cache,
    ColumnFamilyDescriptor, DBRawIteratorWithThreadMode, ErrorKind, FlushOptions, Options,
    ReadOptions, SnapshotWithThreadMode, Transaction, TransactionDB, TransactionDBOptions,
    TransactionOptions, WriteBatchWithTransaction, WriteOptions, DEFAULT_COLUMN_FAMILY_NAME,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Db = TransactionDB;

fn map_err(e: rocksdb::Error) -> StorageError {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::Busy | ErrorKind::TryAgain => StorageError::WriteConflict,
        _ => StorageError::Io(e.into_string()),
    }
}

struct Inner {
    db: Db,
    /// Each space's column family handle, by `Space as usize`, looked up once at open
    /// (`cf_handle` searches a map of names on every call).
    handles: [CfHandle; Space::ALL.len()],
    path: PathBuf,
    /// The options the database was opened with: they hold its statistics object.
    opts: Options,
}

/// The RocksDB statistics tickers `serverStatus().rocksdb` reports: block-cache hits and misses
/// by block kind (a miss is a block read from a file), bloom-filter outcomes, the bytes
/// written by the WAL, flushes, compactions and blob files (write amplification), and the
/// WAL syncs.
const TICKERS: [Ticker; 17] = [
    Ticker::BlockCacheDataMiss,
    Ticker::BlockCacheDataHit,
    Ticker::BlockCacheIndexMiss,
    Ticker::BlockCacheIndexHit,
    Ticker::BlockCacheFilterMiss,
    Ticker::BlockCacheFilterHit,
    Ticker::BloomFilterUseful,
    Ticker::BloomFilterFullPositive,
    Ticker::NumberKeysRead,
    Ticker::BytesWritten,
    Ticker::BytesRead,
    Ticker::WalFileBytes,
    Ticker::FlushWriteBytes,
    Ticker::CompactWriteBytes,
    Ticker::BlobDbBlobFileBytesWritten,
    Ticker::BlobDbBlobFileBytesRead,
    Ticker::WalFileSynced,
];

impl Inner {
    fn cf(&self, space: Space) -> &CfHandle {
        &self.handles[space as usize]
    }
}

/// A column family's handle as RocksDB's C API gives it. The database owns the handle and
/// keeps it valid until it closes; the column families are created at open and never dropped,
/// and every `CfHandle` lives in the `Inner` that owns the database.
#[derive(Clone, Copy)]
struct CfHandle(*mut librocksdb_sys::rocksdb_column_family_handle_t);

// SAFETY: RocksDB's column family handles are immutable and safe to use from any thread (the
// `rocksdb` crate's `ColumnFamily`, which wraps the same pointer, is `Send + Sync` too).
unsafe impl Send for CfHandle {}
unsafe impl Sync for CfHandle {}

impl AsColumnFamilyRef for CfHandle {
    fn inner(&self) -> *mut librocksdb_sys::rocksdb_column_family_handle_t {
        self.0
    }
}

/// A RocksDB-backed engine; cheap to clone.
#[derive(Clone)]
pub struct RocksEngine {
    inner: Arc<Inner>,
}

/// Values at least this large are stored in blob files (see `cf_options`).
const LARGE_VALUE_BYTES: u64 = 64 << 10;

/// The block caches of the column families: one LRU cache, which the indexes read through a
/// high-priority handle (see [`BlockCaches::new`]).
struct BlockCaches {
    shared: Cache,
    indexes: Cache,
}

/// The share of the block cache the indexes' blocks may hold ahead of the records' (RocksDB's
/// LRU cache's high-priority pool).
#[cfg_attr(not(nidus_rocks_shim), allow(dead_code))]
const INDEX_CACHE_SHARE: f64 = 0.9;

impl BlockCaches {
    /// One LRU cache of `bytes`, whose high-priority pool may take [`INDEX_CACHE_SHARE`] of
    /// it. The indexes' column family reads through `indexes`, which inserts every block at
    /// high priority; the records' blocks go in at low priority and are evicted first. An
    /// indexed read touches an index block and then a record's: with data several times the
    /// cache, the index entries (about a tenth of a collection's bytes) stay cached and a
    /// point read by `_id` costs one block read, the record's, instead of up to two (plain
    /// LRU keeps the hotter index blocks too, but loses them to the stream of record blocks
    /// once the index is a good part of the cache). MongoDB's sizing rule is the same: the
    /// indexes should fit in memory. The pool bounds the indexes' share without reserving
    /// it: records use whatever the indexes leave, and always at least a tenth.
    #[cfg(nidus_rocks_shim)]
    fn new(bytes: usize) -> StorageResult<BlockCaches> {
        BlockCaches::build(bytes, -1, true)
    }

    /// The cache of [`BlockCaches::new`] in 2^`shard_bits` shards (-1: RocksDB's default
    /// for the size); with `prioritize_indexes` false, every block at its default priority
    /// in RocksDB's default pool (one LRU order for all, as without the shim).
    #[cfg(nidus_rocks_shim)]
    fn build(
        bytes: usize,
        shard_bits: i32,
        prioritize_indexes: bool,
    ) -> StorageResult<BlockCaches> {
        let shared = Cache::new_lru_cache(0);
        // 0.5: RocksDB's default high-priority pool.
        let share = if prioritize_indexes {
            INDEX_CACHE_SHARE
        } else {
            0.5
        };
        // SAFETY: a live cache handle; the call replaces the cache it points at (empty,
        // nothing uses it yet) with the new one.
        unsafe { nidus_cache_new_lru(raw_cache(&shared), bytes, shard_bits, share) };
        let indexes = if prioritize_indexes {
            let indexes = Cache::new_lru_cache(0);
            // SAFETY: as above; the wrapper holds a reference to `shared`'s cache.
            unsafe { nidus_cache_share_high_priority(raw_cache(&indexes), raw_cache(&shared)) };
            indexes
        } else {
            shared.clone()
        };
        // Both now answer for the new cache (the placeholders' capacity was 0).
        for cache in [&shared, &indexes] {
            // SAFETY: a live cache handle.
            if unsafe { librocksdb_sys::rocksdb_cache_get_capacity(raw_cache(cache)) } != bytes {
                return Err(StorageError::Io(
                    "the block cache handles do not hold the block cache".into(),
                ));
            }
        }
        Ok(BlockCaches { shared, indexes })
    }

    /// Without the shim (see build.rs): one LRU cache (RocksDB's defaults), every block at
    /// its default priority.
    #[cfg(not(nidus_rocks_shim))]
    fn new(bytes: usize) -> StorageResult<BlockCaches> {
        let shared = Cache::new_lru_cache(bytes);
        Ok(BlockCaches {
            indexes: shared.clone(),
            shared,
        })
    }

    fn of(&self, space: Space) -> &Cache {
        match space {
            Space::Indexes => &self.indexes,
            Space::Records | Space::Catalog | Space::Oplog => &self.shared,
        }
    }
}

#[cfg(nidus_rocks_shim)]
extern "C" {
    /// `src/cache_priority.cc`: makes `handle` a new LRU cache.
    fn nidus_cache_new_lru(
        handle: *mut librocksdb_sys::rocksdb_cache_t,
        capacity: usize,
        num_shard_bits: std::ffi::c_int,
        high_pri_pool_ratio: f64,
    );
    /// `src/cache_priority.cc`: makes `handle` a view of `shared`'s cache whose inserts are
    /// all high priority.
    fn nidus_cache_share_high_priority(
        handle: *mut librocksdb_sys::rocksdb_cache_t,
        shared: *const librocksdb_sys::rocksdb_cache_t,
    );
}

/// The C handle inside a `rocksdb` cache, which the crate keeps private: `Cache` is a
/// newtype over an `Arc` of a struct whose only field is the handle, so it reads as an `Arc`
/// of the handle (sizes checked below; `BlockCaches::build` checks the result through the C
/// API).
#[cfg(nidus_rocks_shim)]
fn raw_cache(cache: &Cache) -> *mut librocksdb_sys::rocksdb_cache_t {
    type Handle = std::ptr::NonNull<librocksdb_sys::rocksdb_cache_t>;
    const _: () = assert!(std::mem::size_of::<Cache>() == std::mem::size_of::<Arc<Handle>>());
    // SAFETY: same size and layout as an `Arc` of the single-field struct (see above).
    unsafe { (*std::ptr::from_ref(cache).cast::<Arc<Handle>>()).as_ptr() }
}

/// Every key of the records, indexes and oplog spaces starts with its collection's or index's
/// 8-byte id, and most writes append to one (new record ids, oplog slots, increasing `_id`s
/// and index values): the memtable inserts each key from where the last key of its id went
/// instead of searching its skip list from the top. Not a wrapped option: RocksDB reads it
/// from an options string.
const HINT_PREFIX: &str = "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.8";

fn cf_options(caches: &BlockCaches, space: Space) -> Options {
    let cache = caches.of(space);
    let mut block = BlockBasedOptions::default();
    block.set_block_cache(cache);
    block.set_bloom_filter(10.0, false);
    block.set_cache_index_and_filter_blocks(true);
    block.set_pin_l0_filter_and_index_blocks_in_cache(true);
    // Index and filter blocks of every level stay pinned in the cache: a point read whose data
    // is not cached costs one data-block read, never an index or filter read as well.
    block.set_unpartitioned_pinning_tier(BlockBasedTablePinningTier::All);
    // Both partitioned into blocks of about 4 KiB under a small top level, all pinned too.
    // Unpartitioned, a table's filter is one block of 10 bits per key (an index table of 64
    // MiB holds millions of small entries: a filter of several MiB) and the block cache's
    // shard that block hashes to (a 64th of the cache) is overfull, so no data block of that
    // shard stays cached; partitions spread over every shard.
    block.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    block.set_partition_filters(true);
    block.set_pin_top_level_index_and_filter(true);
    block.set_top_level_index_pinning_tier(BlockBasedTablePinningTier::All);
    block.set_partition_pinning_tier(BlockBasedTablePinningTier::All);
    let mut opts = match space {
        Space::Records | Space::Indexes => Options::default()
            .get_options_from_string(HINT_PREFIX)
            .expect("a valid options string"),
        // The oplog's tables are deleted when truncation passes them. RocksDB rewrites every
        // table of the last level once no snapshot needs its sequence numbers (its
        // "BottommostFiles" compactions), which for the oplog is work on tables about to go:
        // delayed by an hour, the oplog of a busy server has wrapped past them by then.
        Space::Oplog => Options::default()
            .get_options_from_string(format!(
                "{HINT_PREFIX};bottommost_file_compaction_delay=3600"
            ))
            .expect("a valid options string"),
        Space::Catalog => Options::default(),
    };
    opts.set_block_based_table_factory(&block);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // A bloom filter over the memtable's whole keys: a point lookup of a key the memtable
    // does not hold skips the skip-list search. Every write looks up each key it writes (the
    // transaction's snapshot check) and every insert looks up its unique keys, which are new.
    opts.set_memtable_prefix_bloom_ratio(0.02);
    opts.set_memtable_whole_key_filtering(true);
    if matches!(space, Space::Records | Space::Oplog) {
        // Values of 64 KiB and more (large documents, and oplog entries holding them) go to
        // blob files: written once, with only a small reference in the LSM tree, so flushes
        // and compactions stop copying them. Their reads are cached in the same block cache.
        opts.set_enable_blob_files(true);
        opts.set_min_blob_size(LARGE_VALUE_BYTES);
        opts.set_blob_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_enable_blob_gc(true);
        opts.set_blob_cache(&caches.shared);
    }
    opts
}

/// How long a transaction waits for a key another transaction holds before failing with a
/// write conflict. Not 0: with no timeout RocksDB's lock manager only try-locks the mutex of
/// the key's lock stripe, which writers of unrelated keys share, so they conflicted
/// spuriously (the bench floor saw thousands per run with 16 writers). One millisecond still
/// reports a real conflict at once, as MongoDB does.
const LOCK_TIMEOUT_MS: i64 = 1;

/// The bound on live WAL bytes (see `open_with_cache`): four of the records' memtables.
const MAX_TOTAL_WAL_BYTES: u64 = 256 << 20;

/// WAL files kept for reuse once no memtable needs them (see `open_with_cache`).
const RECYCLED_WAL_FILES: usize = 2;

/// The size [`RocksEngine::preallocate_wal`] gives each WAL file it prepares: a records'
/// memtable (RocksDB's default write buffer), which is how far a WAL file grows before a
/// flush switches to the next one.
pub const PREALLOCATED_WAL_FILE_BYTES: usize = 64 << 20;

/// An empty column family whose name marks what a store holds that earlier versions would
/// misread. RocksDB refuses to open a database without opening every column family it has,
/// so a binary that does not know this name stops at start-up ("Column families not opened")
/// instead of serving wrong results. Format 2: tables with partitioned index and filter
/// blocks (`cf_options`), in which earlier binaries' point reads missed keys that are there.
/// A later change of what is on disk that earlier binaries would misread names a new mark,
/// unless it adds a column family, which stops them the same way: the `oplog` column family
/// (the oplog's entries moved out of `records`, where an earlier binary would find none).
const FORMAT_MARK: &str = "nidus.format.2";

/// The block cache of [`RocksEngine::open`] (the server sizes its own, as WiredTiger does).
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

impl RocksEngine {
    pub fn open(path: &Path) -> StorageResult<RocksEngine> {
        Self::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// Opens with a block cache of `cache_bytes` shared by every column family (see
    /// [`BlockCaches`]).
    pub fn open_with_cache(path: &Path, cache_bytes: usize) -> StorageResult<RocksEngine> {
        Self::open_with_caches(path, BlockCaches::new(cache_bytes)?)
    }

    fn open_with_caches(path: &Path, caches: BlockCaches) -> StorageResult<RocksEngine> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        db_opts.set_keep_log_file_num(4);
        // Live WAL is bounded: past the bound RocksDB flushes the column families that keep
        // the oldest WAL file alive. The catalog's and the indexes' memtables fill slowly, so
        // without a bound every WAL file since their last flush stays live (up to 4 x all
        // write buffers, 1.5 GiB) and a restart after a crash replays all of it.
        // A WAL file no longer needed is reused rather than deleted: a synced write (j:true,
        // the Raft log) into a reused file does not change its size, so `fdatasync` writes
        // the data only, not the inode as well (one block write per sync instead of two).
        db_opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        db_opts.set_recycle_log_file_num(RECYCLED_WAL_FILES);
        // Counters only (no histograms or timers, which cost a clock read per operation).
        db_opts.enable_statistics();
        db_opts.set_statistics_level(StatsLevel::ExceptHistogramOrTimers);
        let cfs = Space::ALL
            .iter()
            .map(|&s| ColumnFamilyDescriptor::new(s.name(), cf_options(&caches, s)))
            .chain([ColumnFamilyDescriptor::new(FORMAT_MARK, Options::default())]);
        let mut txn_opts = TransactionDBOptions::default();
        txn_opts.set_default_lock_timeout(LOCK_TIMEOUT_MS);
        txn_opts.set_txn_lock_timeout(LOCK_TIMEOUT_MS);
        skip_batch_concurrency_control(&mut txn_opts);
        let db = Db::open_cf_descriptors(&db_opts, &txn_opts, path, cfs).map_err(map_err)?;
        let handle = |space: Space| {
            db.cf_handle(space.name())
                .map(|cf| CfHandle(cf.inner()))
                .ok_or_else(|| StorageError::Io(format!("no column family {}", space.name())))
        };
        let mut handles = [CfHandle(std::ptr::null_mut()); Space::ALL.len()];
        for space in Space::ALL {
            handles[space as usize] = handle(space)?;
        }
        Ok(RocksEngine {
            inner: Arc::new(Inner {
                db,
                handles,
                path: path.to_path_buf(),
                opts: db_opts,
            }),
        })
    }

    /// Makes the WAL files RocksDB writes next full-sized files already on disk, as
    /// WiredTiger pre-allocates its log files and PostgreSQL writes a WAL segment before
    /// using it. RocksDB reuses only WAL files made since it opened (its recycle list starts
    /// empty), so without this the WAL written after every start grows with each write, and
    /// each synced write (`j: true`, the Raft log) costs `fdatasync` two block writes, the
    /// data and the inode's new size, until the first flush retires a file for reuse.
    ///
    /// Each round fills the current WAL file with log-only records (`put_log_data`: nothing
    /// reaches a memtable or a table file), syncs it, and flushes every column family, which
    /// switches to another WAL file and retires the filled one to the recycle list. After
    /// [`RECYCLED_WAL_FILES`] rounds the WAL being written is a reused full-size file and the
    /// recycle list holds another. Writes [`PREALLOCATED_WAL_FILE_BYTES`] per round; call it
    /// before serving, when nothing else writes.
    ///
    /// Does nothing (and returns false) unless the file system has several times that room:
    /// a WAL write that fails for want of space stops every later write (RocksDB's background
    /// error), which the preparation must never cause.
    pub fn preallocate_wal(&self) -> StorageResult<bool> {
        let needed = (PREALLOCATED_WAL_FILE_BYTES * RECYCLED_WAL_FILES) as u64;
        if available_bytes(&self.inner.path).is_none_or(|free| free < needed * 4) {
            return Ok(false);
        }
        const CHUNK: usize = 1 << 20;
        // A key of the default column family, which no space uses: one entry in its memtable
        // makes the flush switch WAL files (a flush of empty memtables does not).
        const MARK: &[u8] = b"nidus.preallocateWal";
        let db = &self.inner.db;
        let default = db
            .cf_handle(DEFAULT_COLUMN_FAMILY_NAME)
            .ok_or_else(|| StorageError::Io("no default column family".into()))?;
        let default_handle = CfHandle(default.inner());
        let mut cfs: Vec<&CfHandle> = Space::ALL.iter().map(|&s| self.inner.cf(s)).collect();
        cfs.push(&default_handle);
        let filler = vec![0u8; CHUNK];
        let mut flush = FlushOptions::default();
        flush.set_wait(true);
        for _ in 0..RECYCLED_WAL_FILES {
            for _ in 0..PREALLOCATED_WAL_FILE_BYTES / CHUNK {
                let mut batch = WriteBatchWithTransaction::<true>::default();
                batch.put_log_data(&filler);
                db.write(batch).map_err(map_err)?;
            }
            let mut batch = WriteBatchWithTransaction::<true>::default();
            batch.put_cf(default, MARK, b"");
            batch.delete_cf(default, MARK);
            db.write(batch).map_err(map_err)?;
            db.flush_wal(true).map_err(map_err)?;
            db.flush_cfs_opt(&cfs, &flush).map_err(map_err)?;
        }
        Ok(true)
    }
}

impl KvEngine for RocksEngine {
    fn begin(&self) -> Box<dyn KvTxn> {
        let mut topts = TransactionOptions::default();
        topts.set_snapshot(true);
        topts.set_lock_timeout(LOCK_TIMEOUT_MS);
        let txn = self
            .inner
            .db
            .transaction_opt(&WriteOptions::default(), &topts);
        // SAFETY: the transaction borrows the database, which `RocksTxn::_owner` keeps alive;
        // field order drops the transaction before the owner.
        let txn: Transaction<'static, Db> = unsafe { std::mem::transmute(txn) };
        Box::new(RocksTxn {
            txn,
            new_keys_unread: false,
            _owner: self.inner.clone(),
        })
    }

    fn snapshot(&self) -> Box<dyn KvSnapshot> {
        let snap = self.inner.db.snapshot();
        // SAFETY: as in `begin`: `_owner` outlives the snapshot by field order.
        let snap: SnapshotWithThreadMode<'static, Db> = unsafe { std::mem::transmute(snap) };
        Box::new(RocksSnapshot {
            snap,
            owner: self.inner.clone(),
        })
    }

    fn sync_wal(&self) -> StorageResult<()> {
        self.inner.db.flush_wal(true).map_err(map_err)
    }

    fn delete_range(&self, space: Space, lower: &[u8], upper: &[u8]) -> StorageResult<()> {
        // A range deletion is one record in the WAL and the memtable; compactions drop the
        // keys it covers. The write goes around transactions (see
        // `skip_batch_concurrency_control`). An empty range (a drop of an empty collection)
        // writes nothing, so reads do not pass a tombstone for it.
        let cf = self.inner.cf(space);
        let mut it = self
            .inner
            .db
            .raw_iterator_cf_opt(cf, bounded_read_options(lower, upper));
        it.seek_to_first();
        it.status().map_err(map_err)?;
        if !it.valid() {
            return Ok(());
        }
        drop(it);
        let mut range = rocksdb::WriteBatch::default();
        range.delete_range_cf(cf, lower, upper);
        let batch = WriteBatchWithTransaction::<true>::from_data(range.data());
        self.inner.db.write(batch).map_err(map_err)
    }

    fn disk_usage_bytes(&self) -> u64 {
        dir_size(&self.inner.path)
    }

    fn statistics(&self) -> Vec<(&'static str, u64)> {
        TICKERS
            .iter()
            .map(|&t| (t.name(), self.inner.opts.get_ticker_count(t)))
            .collect()
    }

    /// RocksDB's checkpoint: memtables are flushed, the live SST files hard-linked (copied
    /// across file systems) into `dir` with a MANIFEST of their own.
    fn checkpoint(&self, dir: &Path) -> StorageResult<()> {
        let cp =
            rocksdb::checkpoint::TransactionDBCheckpoint::new(&self.inner.db).map_err(map_err)?;
        cp.create_checkpoint(dir).map_err(map_err)
    }
}

/// Bytes an unprivileged writer may still use on the file system holding `path`.
fn available_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is plain data, valid zeroed; the call writes it and reads only the
    // NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Whether `name` is one of a RocksDB store's own files (what a checkpoint holds and what
/// [`install_checkpoint`] replaces); other files of a data directory (logs, `rollback/`, ...)
/// are left alone.
pub fn is_store_file(name: &str) -> bool {
    let numbered = |ext: &str| {
        name.strip_suffix(ext)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(name, "CURRENT" | "IDENTITY" | "LOCK" | "LOG")
        || name.starts_with("MANIFEST-")
        || name.starts_with("OPTIONS-")
        || name.starts_with("LOG.old.")
        || numbered(".sst")
        || numbered(".log")
        || numbered(".blob")
}

/// Marks, inside the staged directory, that the old store's files are gone.
const OLD_FILES_REMOVED: &str = "nidus-old-files-removed";

fn sync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Replaces the store in `dbpath` (closed) by the complete store in `staged` (a checkpoint),
/// then removes `staged`. Safe to call again after a crash in the middle: a marker in `staged`
/// records that the old files were removed, so a second call only moves what is left.
pub fn install_checkpoint(dbpath: &Path, staged: &Path) -> StorageResult<()> {
    let io = |e: std::io::Error| StorageError::Io(format!("installing a checkpoint: {e}"));
    let store_files = |dir: &Path| -> StorageResult<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).map_err(io)? {
            let e = e.map_err(io)?;
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().map_err(io)?.is_file() && is_store_file(&name) {
                out.push(name);
            }
        }
        Ok(out)
    };
    if !staged.is_dir() {
        return Err(StorageError::Io(format!(
            "no checkpoint to install in {}",
            staged.display()
        )));
    }
    let marker = staged.join(OLD_FILES_REMOVED);
    if !marker.exists() {
        if !staged.join("CURRENT").is_file() {
            return Err(StorageError::Io(format!(
                "the checkpoint in {} is incomplete",
                staged.display()
            )));
        }
        for name in store_files(dbpath)? {
            std::fs::remove_file(dbpath.join(name)).map_err(io)?;
        }
        sync_dir(dbpath).map_err(io)?;
        std::fs::File::create(&marker)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        sync_dir(staged).map_err(io)?;
    }
    // CURRENT last: a store is only a store once it names its MANIFEST.
    let mut names = store_files(staged)?;
    names.sort_by_key(|n| n == "CURRENT");
    for name in names {
        std::fs::rename(staged.join(&name), dbpath.join(&name)).map_err(io)?;
    }
    sync_dir(dbpath).map_err(io)?;
    std::fs::remove_dir_all(staged).map_err(io)
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn bounded_read_options(lower: &[u8], upper: &[u8]) -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.set_iterate_lower_bound(lower.to_vec());
    ro.set_iterate_upper_bound(upper.to_vec());
    ro
}

/// Makes a write batch written outside a transaction (`TransactionDB::write`) go straight to
/// the database instead of through a transaction of its own that locks each key, so that it
/// may hold a range deletion (which that locking refuses). Transactions lock and validate
/// their keys as before: RocksDB takes that from each transaction's own options. The batches
/// written this way are the WAL preparation's (a key of the default column family no space
/// uses) and [`KvEngine::delete_range`]'s (a range no transaction writes).
fn skip_batch_concurrency_control(opts: &mut TransactionDBOptions) {
    const _: () = assert!(
        std::mem::size_of::<TransactionDBOptions>()
            == std::mem::size_of::<*mut librocksdb_sys::rocksdb_transactiondb_options_t>()
    );
    // SAFETY: the options value is exactly the C handle it owns (size asserted above, as in
    // `raw_transaction`); the handle is live for the value's lifetime and the call only sets
    // a flag in it.
    unsafe {
        let raw = std::ptr::from_mut(opts)
            .cast::<*mut librocksdb_sys::rocksdb_transactiondb_options_t>()
            .read();
        librocksdb_sys::rocksdb_transactiondb_options_set_skip_concurrency_control(raw, 1);
    }
}

/// The C handle inside a `rocksdb` transaction, which the crate keeps private: its only
/// field with a size (the other is a marker), checked below, so it is the whole value.
fn raw_transaction(txn: &Transaction<'static, Db>) -> *mut librocksdb_sys::rocksdb_transaction_t {
    const _: () = assert!(
        std::mem::size_of::<Transaction<'static, Db>>()
            == std::mem::size_of::<*mut librocksdb_sys::rocksdb_transaction_t>()
    );
    // SAFETY: same size as the pointer it holds (asserted above at compile time), so the
    // value's bytes are the pointer's.
    unsafe {
        std::ptr::from_ref(txn)
            .cast::<*mut librocksdb_sys::rocksdb_transaction_t>()
            .read()
    }
}

struct RocksTxn {
    txn: Transaction<'static, Db>,
    /// Set by [`KvTxn::new_keys_unread`]: `put_new` skips the read index.
    #[cfg_attr(not(nidus_rocks_shim), allow(dead_code))]
    new_keys_unread: bool,
    _owner: Arc<Inner>,
}

#[cfg(nidus_rocks_shim)]
extern "C" {
    /// `src/unindexed.cc`: a put appended to the batch under the transaction's read index.
    fn nidus_transaction_put_unindexed(
        txn: *mut librocksdb_sys::rocksdb_transaction_t,
        cf: *mut librocksdb_sys::rocksdb_column_family_handle_t,
        key: *const std::ffi::c_char,
        key_len: usize,
        value: *const std::ffi::c_char,
        value_len: usize,
        errptr: *mut *mut std::ffi::c_char,
    );
}

impl RocksTxn {
    /// A put into the transaction's write batch past its read index and its lock manager
    /// (where `DisableIndexing` sends writes).
    #[cfg(nidus_rocks_shim)]
    fn put_unindexed(&mut self, space: Space, key: &[u8], value: &[u8]) -> StorageResult<()> {
        // `unindexed.cc` reads the C++ object behind each C handle: the handle structs'
        // first field, as `rocksdb/db/c.cc` defines them.
        let txn = raw_transaction(&self.txn);
        let cf = self._owner.cf(space).inner();
        let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `txn` and `cf` are live handles of this transaction and database; key and
        // value outlive the call, which copies them; `err` is null or a malloc'd C string.
        unsafe {
            nidus_transaction_put_unindexed(
                txn,
                cf,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
            if !err.is_null() {
                let message = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
                libc::free(err.cast());
                return Err(StorageError::Io(message));
            }
        }
        Ok(())
    }

    fn snapshot_read_options(&self) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.txn.snapshot());
        ro
    }
}

impl KvRead for RocksTxn {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let ro = self.snapshot_read_options();
        self.txn
            .get_cf_opt(self._owner.cf(space), key, &ro)
            .map_err(map_err)
    }

    fn cursor(&self, space: Space, lower: &[u8], upper: &[u8]) -> Box<dyn KvCursor + '_> {
        let mut ro = bounded_read_options(lower, upper);
        ro.set_snapshot(&self.txn.snapshot());
        Box::new(RocksCursor {
            it: self.txn.raw_iterator_cf_opt(self._owner.cf(space), ro),
        })
    }
}

impl KvTxn for RocksTxn {
    fn get_for_update(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let ro = self.snapshot_read_options();
        self.txn
            .get_for_update_cf_opt(self._owner.cf(space), key, true, &ro)
            .map_err(map_err)
    }

    fn put(&mut self, space: Space, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.txn
            .put_cf(self._owner.cf(space), key, value)
            .map_err(map_err)
    }

    fn new_keys_unread(&mut self) {
        self.new_keys_unread = true;
    }

    fn put_new(&mut self, space: Space, key: &[u8], value: &[u8]) -> StorageResult<()> {
        #[cfg(nidus_rocks_shim)]
        if self.new_keys_unread {
            return self.put_unindexed(space, key, value);
        }
        // RocksDB's `PutUntracked` as its C API allows: straight into the transaction's
        // indexed write batch, which its own reads, savepoints and commit use, without the
        // key's lock and snapshot check (a lookup in the memtables and files).
        let txn = raw_transaction(&self.txn);
        let cf = self._owner.cf(space).inner();
        // SAFETY: `txn` is this live transaction's handle; the batch wrapper returned points
        // into it (not owned: freed with `rocksdb_free`, as the `rocksdb` crate frees it) and
        // is used only before that; key and value outlive the call, which copies them.
        unsafe {
            let batch = librocksdb_sys::rocksdb_transaction_get_writebatch_wi(txn);
            librocksdb_sys::rocksdb_writebatch_wi_put_cf(
                batch,
                cf,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
            );
            librocksdb_sys::rocksdb_free(batch.cast());
        }
        Ok(())
    }

    fn delete(&mut self, space: Space, key: &[u8]) -> StorageResult<()> {
        self.txn
            .delete_cf(self._owner.cf(space), key)
            .map_err(map_err)
    }

    fn set_savepoint(&mut self) {
        self.txn.set_savepoint();
    }

    fn rollback_to_savepoint(&mut self) -> StorageResult<()> {
        self.txn.rollback_to_savepoint().map_err(map_err)
    }

    fn commit(self: Box<Self>) -> StorageResult<()> {
        let RocksTxn { txn, _owner, .. } = *self;
        txn.commit().map_err(map_err)
    }

    fn rollback(self: Box<Self>) -> StorageResult<()> {
        self.txn.rollback().map_err(map_err)
    }
}

struct RocksSnapshot {
    snap: SnapshotWithThreadMode<'static, Db>,
    owner: Arc<Inner>,
}

impl KvRead for RocksSnapshot {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        self.snap.get_cf(self.owner.cf(space), key).map_err(map_err)
    }

    fn cursor(&self, space: Space, lower: &[u8], upper: &[u8]) -> Box<dyn KvCursor + '_> {
        let ro = bounded_read_options(lower, upper);
        Box::new(RocksCursor {
            it: self.snap.raw_iterator_cf_opt(self.owner.cf(space), ro),
        })
    }
}

impl KvSnapshot for RocksSnapshot {}

struct RocksCursor<'a, D: rocksdb::DBAccess> {
    it: DBRawIteratorWithThreadMode<'a, D>,
}

impl<D: rocksdb::DBAccess> KvCursor for RocksCursor<'_, D> {
    fn seek(&mut self, key: &[u8]) {
        self.it.seek(key);
    }
    fn seek_for_prev(&mut self, key: &[u8]) {
        self.it.seek_for_prev(key);
    }
    fn seek_to_first(&mut self) {
        self.it.seek_to_first();
    }
    fn seek_to_last(&mut self) {
        self.it.seek_to_last();
    }
    fn valid(&self) -> bool {
        self.it.valid()
    }
    fn next(&mut self) {
        self.it.next();
    }
    fn prev(&mut self) {
        self.it.prev();
    }
    fn key(&self) -> &[u8] {
        self.it.key().unwrap_or(&[])
    }
    fn value(&self) -> &[u8] {
        self.it.value().unwrap_or(&[])
    }
    fn status(&self) -> StorageResult<()> {
        self.it.status().map_err(map_err)
    }
}

#[cfg(test)]
mod tests;
