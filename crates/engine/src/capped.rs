//! Capped collections: a size (bytes) and optionally a document count that inserts keep the
//! collection under by deleting the oldest documents (lowest RecordIds).
//!
//! Inserts into a capped collection are serialized by the collection's `CappedState` lock
//! (MongoDB serializes capped writes too), so RecordIds commit in order: a tailable cursor
//! resuming after RecordId n never misses a smaller one committed later. The eviction runs
//! in the insert's own storage transaction: the new document and the deletions it causes
//! commit together or not at all, so a crash or a write conflict can neither leave the
//! collection over its limits nor lose documents that were not yet over them. Each deleted
//! document is read with `get_for_update`, so a concurrent user delete of the same document
//! is a write conflict, retried like any other.
//!
//! On a replica set (MongoDB 5.0+) the evictions are replicated: the primary logs a `d`
//! entry for each evicted document after the insert's `i` entry, in the same transaction
//! (change streams see them as `delete` events), and a member applying replicated entries
//! does not evict on its own, so its capped collection holds what the primary's holds.

use crate::catalog::{CollectionMeta, CollectionRef};
use crate::index::{self, IndexKeySet};
use crate::namespace::Namespace;
use crate::retry::with_write_conflict_retry;
use crate::write::WriteOpts;
use crate::Engine;
use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{keys, KvTxn, Space};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// `size` and `max` of a capped collection's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CappedLimits {
    pub size: i64,
    pub max: Option<i64>,
}

fn number(v: Option<&Bson>) -> Option<i64> {
    match v? {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) => Some(*f as i64),
        Bson::Decimal128(d) => d.to_string().parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    }
}

impl CappedLimits {
    /// The limits of a collection's stored options (None when it is not capped).
    pub fn of(options: &Document) -> Option<CappedLimits> {
        if !matches!(options.get("capped"), Some(Bson::Boolean(true))) {
            return None;
        }
        Some(CappedLimits {
            size: number(options.get("size")).unwrap_or(i64::MAX).max(1),
            max: number(options.get("max")).filter(|m| *m > 0),
        })
    }

    fn over(&self, count: i64, size: i64) -> bool {
        size > self.size || self.max.is_some_and(|m| count > m)
    }
}

/// A number as MongoDB's `appendNumber` stores it: an int when it fits in 30 bits.
pub fn option_number(n: i64) -> Bson {
    if n.abs() < (1 << 30) {
        Bson::Int32(n as i32)
    } else {
        Bson::Int64(n)
    }
}

/// Per collection: the capped insert lock and the insert signal tailable cursors wait on.
#[derive(Debug, Default)]
pub struct CappedState {
    writes: Mutex<()>,
    /// Every record with an id below this was evicted (ids only grow): eviction scans from
    /// here, not over the tombstones of every record it deleted that compaction has not
    /// dropped yet (from the collection's start each eviction would cost more than the last).
    /// Written under `writes`, after the eviction's commit.
    evicted_below: AtomicU64,
    generation: Mutex<u64>,
    inserted: Condvar,
}

impl CappedState {
    /// Changes with every insert; a waiter compares it before and after.
    pub fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    pub(crate) fn notify(&self) {
        *self.generation.lock() += 1;
        self.inserted.notify_all();
    }

    /// Blocks until an insert after `seen` (true) or `deadline` (false), without spinning.
    pub fn wait_for_insert(&self, seen: u64, deadline: Instant) -> bool {
        let mut g = self.generation.lock();
        while *g == seen {
            if self.inserted.wait_until(&mut g, deadline).timed_out() {
                return *g != seen;
            }
        }
        true
    }
}

impl Engine {
    /// Inserts one prepared document into a capped collection and deletes the oldest
    /// documents over the limits, in one transaction (see the module comment).
    pub(crate) fn insert_capped(
        &self,
        coll: &CollectionRef,
        meta: &CollectionMeta,
        doc: &RawDocument,
        (keys, widened): (&[IndexKeySet], bool),
        limits: CappedLimits,
        opts: &WriteOpts,
    ) -> Result<()> {
        if opts.txn.is_some() {
            return Err(Error::new(
                ErrorCode::OperationNotSupportedInTransaction,
                format!(
                    "Collection '{}' is a capped collection. Writes in transactions are not allowed on capped collections.",
                    coll.ns
                ),
            ));
        }
        let len = doc.as_bytes().len() as i64;
        if len > limits.size {
            return Err(Error::new(
                ErrorCode::BSONObjectTooLarge,
                "object to insert exceeds cappedMaxSize",
            ));
        }
        let _serial = coll.capped.writes.lock();
        let ((n, bytes), next_mark) = with_write_conflict_retry(
            opts.deadline,
            || {
                self.metrics.write_conflicts.fetch_add(1, Ordering::Relaxed);
            },
            || {
                let mut txn = self.kv.begin();
                let rid = coll.allocate_record_id();
                for (ix, ks) in meta.write_indexes().zip(keys) {
                    index::insert_new_record_keys(txn.as_mut(), coll, ix, ks, rid)?;
                }
                if widened {
                    let entry = crate::catalog::entry_document(coll.id, &coll.ns, meta);
                    let bytes = bson::to_vec(&entry).map_err(|e| Error::internal(e.to_string()))?;
                    txn.put(Space::Catalog, &coll.catalog_key(), &bytes)?;
                }
                txn.put_new(coll.records.space, &coll.records.key(rid), doc.as_bytes())?;
                crate::write::record_insert(txn.as_mut(), opts, doc)?;
                let (evicted, victims, next_mark) = if crate::oplog::applying_replicated() {
                    ((0, 0), Vec::new(), None)
                } else {
                    evict(
                        txn.as_mut(),
                        coll,
                        meta,
                        limits,
                        (len, rid),
                        self.oplog_for(&coll.ns).is_some(),
                    )?
                };
                let mut ops = Vec::new();
                self.log_op(&mut ops, coll, meta, opts, (None, None), || {
                    crate::oplog::OplogEntry::insert(&coll.ns, meta.uuid, doc)
                })?;
                // The evictions are no part of the user's statement (no session fields).
                let unattributed = WriteOpts::default();
                for old in &victims {
                    self.log_op(
                        &mut ops,
                        coll,
                        meta,
                        &unattributed,
                        (Some(old), None),
                        || Ok(crate::oplog::OplogEntry::delete(&coll.ns, meta.uuid, old)),
                    )?;
                }
                self.commit_logged(txn, ops)?;
                Ok((evicted, next_mark))
            },
        )?;
        if let Some(mark) = next_mark {
            coll.capped.evicted_below.store(mark, Ordering::Release);
        }
        coll.adjust_stats(1 - n, len - bytes);
        coll.capped.notify();
        Ok(())
    }

    /// `cloneCollectionAsCapped`: a new capped collection `to` holding `from`'s documents in
    /// natural order (the oldest evicted as they would have been).
    pub fn clone_collection_as_capped(
        &self,
        from: &Namespace,
        to: &Namespace,
        limits: CappedLimits,
    ) -> Result<CollectionRef> {
        self.check_not_view(from)?;
        let source = self.collection(from).ok_or_else(|| {
            Error::new(
                ErrorCode::NamespaceNotFound,
                format!("source collection {from} does not exist"),
            )
        })?;
        let mut options = bson::doc! { "capped": true, "size": option_number(limits.size) };
        if let Some(m) = limits.max {
            options.insert("max", option_number(m));
        }
        // Checked and created in one step: two clones onto one name cannot both fill it.
        let Some(target) = self.create_collection_if_absent(to, options)? else {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("cloneCollectionAsCapped failed - destination collection {to} already exists. source: {from} destination: {to}"),
            ));
        };
        let opts = WriteOpts {
            bypass_document_validation: true,
            ..WriteOpts::default()
        };
        let snap = self.kv.snapshot();
        let mut c = snap.cursor(
            source.records.space,
            &source.records.lower(),
            &source.records.upper(),
        );
        c.seek_to_first();
        while c.valid() {
            let doc = RawDocument::from_bytes(c.value())?;
            if doc.as_bytes().len() as i64 <= limits.size {
                self.insert_one(&target, doc, &opts)?;
            }
            c.next();
        }
        c.status()?;
        Ok(target)
    }

    /// `convertToCapped`: the collection's documents copied into a capped collection that
    /// then replaces it (only the `_id` index remains, as in MongoDB).
    pub fn convert_to_capped(&self, ns: &Namespace, limits: CappedLimits) -> Result<()> {
        self.check_not_view(ns)?;
        if self.collection(ns).is_none() {
            return Err(Error::new(
                ErrorCode::NamespaceNotFound,
                format!("source collection {ns} does not exist"),
            ));
        }
        let temp = Namespace::new(
            &ns.db,
            &format!(
                "tmp{}.convertToCapped.{}",
                bson::oid::ObjectId::new(),
                ns.coll
            ),
        );
        if let Err(e) = self.clone_collection_as_capped(ns, &temp, limits) {
            let _ = self.drop_collection(&temp);
            return Err(e);
        }
        self.rename_collection(&temp, ns, true)
    }
}

/// Deletes the oldest records (before `new_rid`) until the collection, with the document
/// just written, is within its limits. Returns the number and bytes deleted, the deleted
/// documents when `logged` (for their oplog entries), and the eviction mark once this
/// transaction commits (one past the newest record it deletes).
#[allow(clippy::type_complexity)]
fn evict(
    txn: &mut dyn KvTxn,
    coll: &CollectionRef,
    meta: &CollectionMeta,
    limits: CappedLimits,
    (new_len, new_rid): (i64, u64),
    logged: bool,
) -> Result<((i64, i64), Vec<Document>, Option<u64>)> {
    let mut count = coll.count.load(Ordering::Relaxed) + 1;
    let mut size = coll.data_size.load(Ordering::Relaxed) + new_len;
    if !limits.over(count, size) {
        return Ok(((0, 0), Vec::new(), None));
    }
    let from = coll.capped.evicted_below.load(Ordering::Acquire);
    let victims: Vec<u64> = {
        let mut c = txn.cursor(
            coll.records.space,
            &coll.records.key(from),
            &coll.records.key(new_rid),
        );
        c.seek_to_first();
        let mut out = Vec::new();
        while c.valid() && limits.over(count, size) {
            out.push(keys::read_u64(&c.key()[8..]).unwrap_or(0));
            count -= 1;
            size -= c.value().len() as i64;
            c.next();
        }
        c.status()?;
        out
    };
    let mark = victims.last().map(|rid| rid.saturating_add(1));
    let (mut n, mut bytes) = (0i64, 0i64);
    let mut deleted = Vec::with_capacity(victims.len());
    for rid in victims {
        let rkey = coll.records.key(rid);
        let Some(old) = txn.get_for_update(coll.records.space, &rkey)? else {
            continue;
        };
        let raw = RawDocument::from_bytes(&old)?;
        for ix in meta.write_indexes() {
            index::remove_keys(txn, ix, &index::document_keys(ix, raw)?, rid)?;
        }
        txn.delete(coll.records.space, &rkey)?;
        n += 1;
        bytes += old.len() as i64;
        if logged {
            deleted.push(Document::try_from(raw).map_err(|e| Error::internal(e.to_string()))?);
        }
    }
    Ok(((n, bytes), deleted, mark))
}
