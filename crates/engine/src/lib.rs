//! The engine: catalog, write path and read path over the storage traits.

pub mod blocking;
pub mod capped;
pub mod catalog;
pub mod clustered;
mod ddl;
mod ddl_txn;
mod index_mod;
pub use index_mod::IndexChange;
pub mod distinct;
pub mod durability;
pub mod exec;
pub mod explain_write;
pub mod find;
pub mod geo_keys;
pub mod index;
pub mod index_spec;
pub mod namespace;
pub mod opctx;
pub mod oplog;
pub mod oplog_cache;
mod oplog_diff;
pub mod oplog_notify;
pub mod pipeline;
pub mod plan;
pub mod preimages;
pub mod retry;
pub mod stmt_record;
mod storage_depth;
pub mod text;
pub mod timeseries;
pub mod ttl;
pub mod txn;
pub mod validation;
pub mod view;
pub mod write;

use catalog::{CollectionRef, NEXT_ID_KEY};
use durability::GroupCommit;
use namespace::Namespace;
use nidus_common::{Error, Result};
use nidus_storage::{keys, KvEngine, Space};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use catalog::Collection;

/// Counters `serverStatus` reports.
#[derive(Default)]
pub struct Metrics {
    pub write_conflicts: AtomicU64,
    /// TTL monitor passes and the documents they deleted (`serverStatus().metrics.ttl`).
    pub ttl_passes: AtomicU64,
    pub ttl_deleted_documents: AtomicU64,
}

pub struct Engine {
    kv: Arc<dyn KvEngine>,
    collections: RwLock<BTreeMap<Namespace, CollectionRef>>,
    /// Views by namespace (`view.rs`); changed under the DDL lock like collections.
    views: RwLock<BTreeMap<Namespace, Arc<view::ViewDef>>>,
    /// Serializes catalog changes; data writes never take it.
    ddl: Mutex<()>,
    next_id: AtomicU64,
    group_commit: GroupCommit,
    pub metrics: Metrics,
    stopping: AtomicBool,
    /// The engine's own threads (WAL sync, oplog truncation); `shutdown` wakes and joins
    /// them, so none holds the engine when the process exits.
    background: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Where blocking stages write what does not fit in memory (`<dbpath>/_tmp`).
    spill_dir: parking_lot::RwLock<Option<std::path::PathBuf>>,
    /// The oplog of a replica set member (`oplog.rs`); unset on a standalone.
    oplog: std::sync::OnceLock<Arc<oplog::Oplog>>,
    /// The open buckets of time-series collections (`timeseries/mod.rs`).
    buckets: timeseries::BucketCatalog,
}

impl Engine {
    /// Opens the engine over a store, loading the catalog and each collection's next RecordId.
    pub fn open(kv: Arc<dyn KvEngine>) -> Result<Arc<Engine>> {
        let engine = Engine {
            kv,
            collections: RwLock::new(BTreeMap::new()),
            views: RwLock::new(BTreeMap::new()),
            ddl: Mutex::new(()),
            next_id: AtomicU64::new(1),
            group_commit: GroupCommit::default(),
            metrics: Metrics::default(),
            stopping: AtomicBool::new(false),
            background: Mutex::new(Vec::new()),
            spill_dir: parking_lot::RwLock::new(None),
            oplog: std::sync::OnceLock::new(),
            buckets: Default::default(),
        };
        engine.load_catalog()?;
        engine.load_views()?;
        let engine = Arc::new(engine);
        engine.restart_index_builds()?;
        Ok(engine)
    }

    /// Sets the directory for spilled sort runs (the server's `<dbpath>/_tmp`).
    pub fn set_spill_dir(&self, dir: std::path::PathBuf) {
        *self.spill_dir.write() = Some(dir);
    }

    /// The spill directory, the system's temporary directory when none was set.
    pub fn spill_dir(&self) -> std::path::PathBuf {
        self.spill_dir
            .read()
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("nidus-spill"))
    }

    pub fn kv(&self) -> &dyn KvEngine {
        self.kv.as_ref()
    }

    pub fn kv_arc(&self) -> Arc<dyn KvEngine> {
        self.kv.clone()
    }

    /// Where a query reads: `source` when given, else the latest committed data.
    pub fn read_source(&self, source: Option<&txn::ReadSource>) -> txn::ReadSource {
        source
            .cloned()
            .unwrap_or_else(|| txn::ReadSource::Latest(self.kv.clone()))
    }

    fn load_catalog(&self) -> Result<()> {
        let snap = self.kv.snapshot();
        if let Some(v) = snap.get(Space::Catalog, NEXT_ID_KEY)? {
            self.next_id
                .store(keys::read_u64(&v).unwrap_or(1), Ordering::SeqCst);
        }
        let prefix = catalog::catalog_prefix();
        let mut upper = prefix.to_vec();
        if let Some(last) = upper.last_mut() {
            *last += 1;
        }
        let mut entries = Vec::new();
        {
            let mut c = snap.cursor(Space::Catalog, prefix, &upper);
            c.seek_to_first();
            while c.valid() {
                let d = bson::Document::from_reader(c.value())
                    .map_err(|e| Error::internal(format!("corrupt catalog: {e}")))?;
                entries.push(d);
                c.next();
            }
            c.status()?;
        }
        let mut map = self.collections.write();
        for d in entries {
            let (id, ns, meta) = catalog::parse_entry(&d)?;
            let records = catalog::RecordStore::of(&ns, id);
            let (next_rid, count, size) = if records.space == Space::Records {
                self.scan_record_store(snap.as_ref(), records)?
            } else {
                // Stores written before the oplog had a space of its own hold its entries
                // in the records space: moved before anything reads them.
                self.move_to_space(records, Space::Records)?;
                self.scan_record_store(self.kv.snapshot().as_ref(), records)?
            };
            let coll = Collection::new(id, ns.clone(), meta, next_rid);
            coll.adjust_stats(count, size);
            map.insert(ns, Arc::new(coll));
        }
        Ok(())
    }

    /// Next RecordId, document count and data size of a record store, read at start-up.
    fn scan_record_store(
        &self,
        snap: &dyn nidus_storage::KvSnapshot,
        records: catalog::RecordStore,
    ) -> Result<(u64, i64, i64)> {
        let (lower, upper) = (records.lower(), records.upper());
        let mut c = snap.cursor(records.space, &lower, &upper);
        let (mut count, mut size, mut last) = (0i64, 0i64, 0u64);
        c.seek_to_first();
        while c.valid() {
            count += 1;
            size += c.value().len() as i64;
            last = keys::read_u64(&c.key()[8..]).unwrap_or(last);
            c.next();
        }
        c.status()?;
        Ok((last + 1, count, size))
    }

    /// Moves the records of `to.id` found in space `from` into `to`, a thousand per
    /// transaction: each moves its share atomically (a crash leaves every record in one of
    /// the two spaces, and the next call moves the rest).
    fn move_to_space(&self, to: catalog::RecordStore, from: Space) -> Result<()> {
        loop {
            let mut txn = self.kv.begin();
            if catalog::move_records(txn.as_mut(), to, from, 1000)? == 0 {
                return Ok(());
            }
            txn.commit()?;
        }
    }

    fn allocate_id(&self, txn: &mut dyn nidus_storage::KvTxn) -> Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        txn.put(Space::Catalog, NEXT_ID_KEY, &keys::u64_be(id + 1))?;
        Ok(id)
    }

    pub fn collection(&self, ns: &Namespace) -> Option<CollectionRef> {
        self.collections.read().get(ns).cloned()
    }

    pub fn collections_in(&self, db: &str) -> Vec<CollectionRef> {
        self.collections
            .read()
            .values()
            .filter(|c| c.ns.db == db)
            .cloned()
            .collect()
    }

    /// Databases that hold at least one collection, as `listDatabases` reports them.
    pub fn database_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .collections
            .read()
            .keys()
            .map(|ns| ns.db.clone())
            .collect();
        names.extend(self.views.read().keys().map(|ns| ns.db.clone()));
        names.sort();
        names.dedup();
        names
    }

    /// Makes everything committed so far durable; concurrent callers share one sync.
    pub fn sync(&self) -> Result<()> {
        Ok(self.group_commit.sync(self.kv.as_ref())?)
    }

    pub fn wal_syncs(&self) -> u64 {
        self.group_commit.syncs()
    }

    /// Syncs the WAL every 100 ms so unjournaled writes reach disk soon, until `shutdown`.
    pub fn start_background_sync(self: &Arc<Self>) {
        let engine = Arc::downgrade(self);
        self.spawn_background("wal-sync", move || loop {
            std::thread::park_timeout(Duration::from_millis(100));
            let Some(e) = engine.upgrade() else { return };
            if e.stopping.load(Ordering::Acquire) {
                return;
            }
            let _ = e.sync();
        });
    }

    /// Starts one of the engine's threads. Its body must end once `stopping` is set and it is
    /// unparked (or, for the oplog truncation, notified).
    pub(crate) fn spawn_background(&self, name: &str, body: impl FnOnce() + Send + 'static) {
        if let Ok(handle) = std::thread::Builder::new().name(name.into()).spawn(body) {
            self.background.lock().push(handle);
        }
    }

    /// Stops the engine's threads, then makes every committed write durable. Afterwards only
    /// the callers' own references hold the engine, so the last one to drop it closes the
    /// store on a thread of the caller's choosing (a store closed by a stray thread while the
    /// process exits aborts it).
    pub fn shutdown(&self) -> Result<()> {
        self.stopping.store(true, Ordering::Release);
        if let Some(oplog) = self.oplog.get() {
            oplog.wake_truncation();
        }
        let threads = std::mem::take(&mut *self.background.lock());
        for t in &threads {
            t.thread().unpark();
        }
        for t in threads {
            let _ = t.join();
        }
        self.sync()
    }
}

/// What `validate` found: records, index keys per index, and inconsistencies.
#[derive(Debug, Default)]
pub struct ValidateReport {
    pub records: i64,
    pub invalid_documents: i64,
    pub index_keys: Vec<(String, i64)>,
    pub errors: Vec<String>,
}

impl Engine {
    /// Checks every record parses as BSON and every index holds exactly the entries the
    /// documents generate.
    pub fn validate(&self, coll: &Collection) -> Result<ValidateReport> {
        let meta = coll.meta.read();
        let snap = self.kv.snapshot();
        let mut report = ValidateReport::default();
        let mut expected: Vec<std::collections::BTreeSet<Vec<u8>>> =
            vec![Default::default(); meta.indexes.len()];
        {
            let mut c = snap.cursor(
                coll.records.space,
                &coll.records.lower(),
                &coll.records.upper(),
            );
            c.seek_to_first();
            while c.valid() {
                report.records += 1;
                let rid = keys::read_u64(&c.key()[8..]).unwrap_or(0);
                match bson::RawDocument::from_bytes(c.value()) {
                    Ok(doc) if doc.iter().all(|e| e.is_ok()) => {
                        for (i, ix) in meta.indexes.iter().enumerate() {
                            for ks in index::document_keys(ix, doc)?.keys() {
                                let mut k = index::entry_key(ix, ks, rid);
                                if ix.unique {
                                    // The record id lives in a unique entry's value.
                                    k.extend_from_slice(&keys::u64_be(rid));
                                }
                                expected[i].insert(k);
                            }
                        }
                    }
                    _ => report.invalid_documents += 1,
                }
                c.next();
            }
            c.status()?;
        }
        for (i, ix) in meta.indexes.iter().enumerate() {
            let mut found = std::collections::BTreeSet::new();
            let mut c = snap.cursor(
                Space::Indexes,
                &keys::u64_be(ix.id),
                &keys::prefix_end(ix.id),
            );
            c.seek_to_first();
            while c.valid() {
                let mut k = c.key().to_vec();
                if ix.unique {
                    k.extend_from_slice(c.value().get(..8).unwrap_or_default());
                }
                found.insert(k);
                c.next();
            }
            c.status()?;
            report
                .index_keys
                .push((ix.name.clone(), found.len() as i64));
            if found != expected[i] {
                report.errors.push(format!(
                    "index {} has {} entries, documents generate {}",
                    ix.name,
                    found.len(),
                    expected[i].len()
                ));
            }
        }
        Ok(report)
    }
}
