//! Catalog changes: create, drop, rename collections and databases; create and drop indexes.
//! Each runs under the DDL lock and commits its catalog entry and data in one transaction.

use crate::catalog::{self, CollectionMeta, CollectionRef, IndexMeta};
use crate::index::{self, IndexKeySet};
use crate::index_spec;
use crate::namespace::{self, Namespace};
use crate::oplog;
use crate::retry::with_write_conflict_retry;
use crate::validation::Validator;
use crate::{Collection, Engine};
use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{keys, KvTxn, Space};
use std::sync::Arc;

/// Result of `createIndexes` as the reply reports it.
pub struct CreateIndexesOutcome {
    pub num_indexes_before: usize,
    pub num_indexes_after: usize,
    pub created_collection_automatically: bool,
    pub note: Option<&'static str>,
}

/// Records per transaction of an index build's collection scan.
const BUILD_BATCH: usize = 256;

impl Engine {
    pub(crate) fn write_entry(
        &self,
        txn: &mut dyn KvTxn,
        coll: &Collection,
        meta: &CollectionMeta,
    ) -> Result<()> {
        let entry = catalog::entry_document(coll.id, &coll.ns, meta);
        let bytes = bson::to_vec(&entry).map_err(|e| Error::internal(e.to_string()))?;
        txn.put(Space::Catalog, &coll.catalog_key(), &bytes)?;
        Ok(())
    }

    /// Creates a collection; `NamespaceExists` if it exists (explicit `create`).
    pub fn create_collection(&self, ns: &Namespace, options: Document) -> Result<CollectionRef> {
        namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let _ddl = self.ddl.lock();
        if self.view(ns).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("A view already exists. NS: {ns}"),
            ));
        }
        if let Some(existing) = self.collection(ns) {
            // MongoDB 7.0+: re-creating with identical options succeeds.
            let meta = existing.meta.read();
            if meta.options == options {
                return Ok(existing.clone());
            }
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!(
                    "namespace {ns} already exists, but with different options: {}",
                    nidus_common::shell::format(&Bson::Document(meta.options.clone()))
                ),
            ));
        }
        self.create_locked(ns, options, None)
    }

    /// Creates a collection with the given UUID (a replica set member copies the primary's
    /// collections with their UUIDs, as MongoDB's members share them); `NamespaceExists` if
    /// a collection or view has the name.
    pub fn create_collection_with_uuid(
        &self,
        ns: &Namespace,
        options: Document,
        uuid: bson::Uuid,
    ) -> Result<CollectionRef> {
        namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let _ddl = self.ddl.lock();
        if self.view(ns).is_some() || self.collection(ns).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("Collection {ns} already exists."),
            ));
        }
        self.create_locked(ns, options, Some(uuid))
    }

    /// Creates a collection only if no collection or view has the name (None otherwise),
    /// checked and created under one hold of the DDL lock.
    pub fn create_collection_if_absent(
        &self,
        ns: &Namespace,
        options: Document,
    ) -> Result<Option<CollectionRef>> {
        namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let _ddl = self.ddl.lock();
        if self.view(ns).is_some() || self.collection(ns).is_some() {
            return Ok(None);
        }
        self.create_locked(ns, options, None).map(Some)
    }

    /// Returns the collection, creating it first if needed (implicit creation on write).
    pub fn ensure_collection(&self, ns: &Namespace) -> Result<CollectionRef> {
        if let Some(c) = self.collection(ns) {
            return Ok(c);
        }
        namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let _ddl = self.ddl.lock();
        if let Some(c) = self.collection(ns) {
            return Ok(c);
        }
        self.check_not_view(ns)?;
        self.create_locked(ns, Document::new(), None)
    }

    /// A new collection with its `_id` index, its ids taken (and the id counter written) in
    /// `txn`. Nothing else is written.
    pub(crate) fn new_collection(
        &self,
        txn: &mut dyn KvTxn,
        ns: &Namespace,
        options: Document,
    ) -> Result<Collection> {
        let validator = Validator::from_options(&options)?;
        let id = self.allocate_id(txn)?;
        let id_index =
            IndexMeta::from_spec(self.allocate_id(txn)?, catalog::id_index_spec_for(&options))?;
        let meta = CollectionMeta {
            uuid: bson::Uuid::new(),
            options,
            validator,
            indexes: vec![id_index],
            building: Vec::new(),
            dropped: false,
        };
        Ok(Collection::new(id, ns.clone(), meta, 1))
    }

    fn create_locked(
        &self,
        ns: &Namespace,
        options: Document,
        uuid: Option<bson::Uuid>,
    ) -> Result<CollectionRef> {
        let mut txn = self.kv.begin();
        let coll = self.new_collection(txn.as_mut(), ns, options)?;
        if let Some(u) = uuid {
            coll.meta.write().uuid = u;
        }
        let meta = coll.meta.read().clone();
        self.write_entry(txn.as_mut(), &coll, &meta)?;
        let ops = self.ddl_ops(ns, || oplog::create_entry(&coll, &meta));
        self.commit_logged(txn, ops)?;
        let coll = Arc::new(coll);
        self.collections.write().insert(ns.clone(), coll.clone());
        Ok(coll)
    }

    /// Drops a collection and its data. Returns the number of indexes it had, or None if absent.
    pub fn drop_collection(&self, ns: &Namespace) -> Result<Option<usize>> {
        Ok(self.drop_collection_reporting(ns)?.map(|(n, _)| n))
    }

    /// As [`Engine::drop_collection`], also saying which collection (by id) was dropped.
    pub fn drop_collection_reporting(&self, ns: &Namespace) -> Result<Option<(usize, u64)>> {
        let _ddl = self.ddl.lock();
        self.drop_collection_locked(ns)
    }

    /// `drop_collection` with the DDL lock held by the caller: the number of indexes and the
    /// id of the collection dropped.
    fn drop_collection_locked(&self, ns: &Namespace) -> Result<Option<(usize, u64)>> {
        let Some(coll) = self.collection(ns) else {
            return Ok(None);
        };
        if self.is_oplog(&coll) {
            return Err(Error::new(
                ErrorCode::Location(5255000),
                "can't drop live oplog while replicating",
            ));
        }
        let mut meta = coll.meta.write();
        let n = meta.indexes.len();
        let mut txn = self.kv.begin();
        txn.delete(Space::Catalog, &coll.catalog_key())?;
        let ops = self.ddl_ops(ns, || {
            let records = coll.count.load(std::sync::atomic::Ordering::Relaxed);
            oplog::collection_command(&coll, meta.uuid, "drop", Document::new())
                .with_o2(bson::doc! { "numRecords": records })
        });
        self.commit_logged(txn, ops)?;
        meta.dropped = true;
        self.collections.write().remove(ns);
        self.discard(&coll, &meta)?;
        Ok(Some((n, coll.id)))
    }

    /// Removes the records and index keys of a collection whose catalog entry is gone.
    fn discard(&self, coll: &Collection, meta: &CollectionMeta) -> Result<()> {
        self.delete_prefix(coll.records.space, coll.id)?;
        for ix in meta.write_indexes() {
            self.delete_prefix(Space::Indexes, ix.id)?;
        }
        Ok(())
    }

    /// Drops every collection and view of a database under one hold of the DDL lock, so a
    /// concurrent `create` lands either before (and is dropped) or after (and survives).
    /// Returns the ids of the collections dropped.
    pub fn drop_database(&self, db: &str) -> Result<Vec<u64>> {
        if db == oplog::OPLOG_DB && self.oplog().is_some() {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                "Cannot drop 'local' database while replication is active",
            ));
        }
        let _ddl = self.ddl.lock();
        let mut dropped = Vec::new();
        let colls = self.collections_in(db);
        let views = self.views_in(db);
        for coll in &colls {
            if let Some((_, id)) = self.drop_collection_locked(&coll.ns)? {
                dropped.push(id);
            }
        }
        for view in &views {
            self.drop_view_locked(&view.ns)?;
        }
        if !colls.is_empty() || !views.is_empty() {
            let ops = self.ddl_ops(&Namespace::new(db, "$cmd"), || {
                oplog::OplogEntry::command(db, None, bson::doc! { "dropDatabase": 1 })
            });
            self.commit_logged(self.kv.begin(), ops)?;
        }
        Ok(dropped)
    }

    /// A DDL operation's oplog entries: `entry` when writes to `ns` are logged.
    pub(crate) fn ddl_ops(
        &self,
        ns: &Namespace,
        entry: impl FnOnce() -> oplog::OplogEntry,
    ) -> Vec<oplog::OplogEntry> {
        match self.oplog_for(ns) {
            Some(_) => vec![entry()],
            None => Vec::new(),
        }
    }

    /// Removes every key of one collection or index (its retired id prefix) at once.
    fn delete_prefix(&self, space: Space, id: u64) -> Result<()> {
        self.kv
            .delete_range(space, &keys::u64_be(id), &keys::prefix_end(id))?;
        Ok(())
    }

    /// `renameCollection`: the data keeps its ids; only the catalog entry moves. Every check
    /// (source present, target free or dropped, no view on either name) and the move happen
    /// under one hold of the DDL lock, so of concurrent renames onto one new name exactly
    /// one succeeds and the others get NamespaceExists.
    pub fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> Result<()> {
        self.rename_collection_reporting(from, to, drop_target)
            .map(|_| ())
    }

    /// As [`Engine::rename_collection`], also saying which collection (by id) `dropTarget`
    /// dropped.
    pub fn rename_collection_reporting(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> Result<Option<u64>> {
        namespace::validate_coll_name(&to.db, &to.coll)?;
        if from == to {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                "Can't rename a collection to itself",
            ));
        }
        let _ddl = self.ddl.lock();
        if self.view(from).is_some() {
            return Err(crate::view::not_a_collection(from));
        }
        if self.view(to).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("a view already exists with that name: {to}"),
            ));
        }
        let Some(old) = self.collection(from) else {
            return Err(Error::new(
                ErrorCode::NamespaceNotFound,
                format!("Source collection {from} does not exist"),
            ));
        };
        // Builds register and commit under the DDL lock, so none starts from here on.
        if !old.meta.read().building.is_empty() {
            return Err(Error::new(
                ErrorCode::BackgroundOperationInProgressForNamespace,
                format!("cannot perform operation: an index build is currently running for collection '{from}'"),
            ));
        }
        // The target goes in the rename's own transaction and oplog entry (whose `dropTarget`
        // names it), as MongoDB drops it: no separate `drop` entry, so a change stream sees
        // one `rename`, and a crash never leaves the target dropped with the source unmoved.
        let target = self.collection(to);
        if let Some(t) = &target {
            if !drop_target {
                return Err(Error::new(
                    ErrorCode::NamespaceExists,
                    "target namespace exists",
                ));
            }
            if self.is_oplog(t) {
                return Err(Error::new(
                    ErrorCode::Location(5255000),
                    "can't drop live oplog while replicating",
                ));
            }
        }
        let (mut meta, target_meta) = write_both(&old, target.as_ref())?;
        let dropped_target = target_meta.as_ref().map(|m| m.uuid);
        let renamed = Collection::new(old.id, to.clone(), meta.clone(), old.allocate_record_id());
        renamed.adjust_stats(
            old.count.load(std::sync::atomic::Ordering::Relaxed),
            old.data_size.load(std::sync::atomic::Ordering::Relaxed),
        );
        let mut txn = self.kv.begin();
        if let Some(t) = &target {
            txn.delete(Space::Catalog, &t.catalog_key())?;
        }
        txn.delete(Space::Catalog, &old.catalog_key())?;
        self.write_entry(txn.as_mut(), &renamed, &meta)?;
        if renamed.records != old.records {
            // To or from the oplog's name: the records change space with the name, in the
            // rename's transaction.
            crate::catalog::move_records(
                txn.as_mut(),
                renamed.records,
                old.records.space,
                usize::MAX,
            )?;
        }
        let mut ops = self.ddl_ops(from, || {
            let mut o =
                bson::doc! { "renameCollection": from.full(), "to": to.full(), "stayTemp": false };
            if let Some(uuid) = dropped_target {
                o.insert("dropTarget", uuid);
            }
            oplog::OplogEntry::command(&from.db, Some(meta.uuid), o)
        });
        if self.oplog_for(to).is_none() {
            ops.clear();
        }
        self.commit_logged(txn, ops)?;
        meta.dropped = true;
        {
            let mut map = self.collections.write();
            map.remove(from);
            map.insert(to.clone(), Arc::new(renamed));
        }
        let (Some(t), Some(mut tmeta)) = (target.as_ref(), target_meta) else {
            return Ok(None);
        };
        tmeta.dropped = true;
        self.discard(t, &tmeta)?;
        Ok(Some(t.id))
    }

    /// `createIndexes`: validates every spec, skips identical existing ones, and builds the
    /// rest while the collection keeps serving reads and writes (see [`Engine::build_indexes`]).
    /// Replies once the indexes are ready; a build of the same spec already running is
    /// waited for, as MongoDB joins it.
    pub fn create_indexes(
        &self,
        ns: &Namespace,
        specs: &[Document],
    ) -> Result<CreateIndexesOutcome> {
        let default = self.collection(ns).and_then(|c| c.default_collation());
        let normalized = index_spec::normalize_all(specs, default.as_ref())?;
        let existed = self.collection(ns).is_some();
        let mut coll = self.ensure_collection(ns)?;
        let (before, ids) = loop {
            let ddl = self.ddl.lock();
            let mut meta = coll.meta.write();
            if meta.dropped {
                // Dropped or renamed away since the lookup: the indexes go on the collection
                // now under that name (created again, as a first createIndexes would).
                drop(meta);
                drop(ddl);
                coll = self.ensure_collection(ns)?;
                continue;
            }
            let building: Vec<Document> =
                meta.building.iter().map(|ix| (*ix.spec).clone()).collect();
            let mut joins_build = false;
            for spec in &normalized {
                if !building.is_empty() && !is_new_index(&[], &building, spec)? {
                    joins_build = true;
                }
            }
            if joins_build {
                drop(meta);
                drop(ddl);
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            let before = meta.indexes.len();
            let mut to_build = Vec::new();
            for spec in &normalized {
                if !is_new_index(&meta.indexes, &to_build, spec)? {
                    continue;
                }
                if !building.is_empty() {
                    is_new_index(&[], &building, spec)?;
                }
                to_build.push(spec.clone());
            }
            if to_build.is_empty() {
                return Ok(CreateIndexesOutcome {
                    num_indexes_before: before,
                    num_indexes_after: before,
                    created_collection_automatically: !existed,
                    note: Some("all indexes already exist"),
                });
            }
            // Registration: a brief exclusive section (no write in flight, as the metadata
            // guard is held by every writer until it commits); from here on writers
            // maintain the new indexes' keys.
            let mut txn = self.kv.begin();
            let mut new_meta = meta.clone();
            let mut ids = Vec::new();
            for spec in to_build {
                let mut ix = IndexMeta::from_spec(self.allocate_id(txn.as_mut())?, spec)?;
                ix.build = Some(Arc::default());
                ids.push(ix.id);
                new_meta.building.push(ix);
            }
            self.write_entry(txn.as_mut(), &coll, &new_meta)?;
            txn.commit()?;
            *meta = new_meta;
            break (before, ids);
        };
        match self.build_indexes(&coll, &ids) {
            Ok(()) => Ok(CreateIndexesOutcome {
                num_indexes_before: before,
                num_indexes_after: before + ids.len(),
                created_collection_automatically: !existed,
                note: None,
            }),
            Err(e) => {
                // At shutdown the catalog keeps the build; the next start restarts it.
                if !self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    self.abandon_build(&coll, &ids)?;
                }
                Err(e)
            }
        }
    }

    /// The building indexes with these ids, or the reason the build cannot go on.
    fn building_indexes(
        &self,
        coll: &Collection,
        meta: &CollectionMeta,
        ids: &[u64],
    ) -> Result<Vec<IndexMeta>> {
        let aborted = |why: &str| {
            Error::new(
                ErrorCode::IndexBuildAborted,
                format!("Index build aborted: {}: {why}", coll.ns),
            )
        };
        if meta.dropped {
            return Err(aborted("collection dropped"));
        }
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::new(
                ErrorCode::InterruptedAtShutdown,
                "interrupted at shutdown",
            ));
        }
        ids.iter()
            .map(|id| {
                meta.building
                    .iter()
                    .find(|ix| ix.id == *id)
                    .cloned()
                    .ok_or_else(|| aborted("index build aborted due to dropIndexes"))
            })
            .collect()
    }

    /// Builds registered indexes (`meta.building`) over the existing documents, MongoDB's
    /// hybrid build without a side table: writers already maintain the keys, so the scan
    /// only has to add each record's keys once. It walks the record store in batches,
    /// each one transaction that reads the current version of its records with locking
    /// reads (a concurrent writer of one of them conflicts and one of the two retries), so
    /// a key of a version a writer has since replaced is never added. Unique collisions
    /// (from the scan or from writers) are recorded and checked at commit, which moves the
    /// indexes to `meta.indexes` in one brief exclusive section.
    pub(crate) fn build_indexes(&self, coll: &Collection, ids: &[u64]) -> Result<()> {
        // Transactions that wrote before the registration wrote no keys of these indexes:
        // their records must be visible (or gone) before the scan passes them.
        let open = coll.open_txn_ids();
        coll.wait_for_txns(&open, || {
            self.stopping.load(std::sync::atomic::Ordering::Relaxed)
        });
        let upper = coll.records.upper();
        let mut next_rid = 0u64;
        loop {
            let meta = coll.meta.read();
            let ixs = self.building_indexes(coll, &meta, ids)?;
            let last = with_write_conflict_retry(
                None,
                || {},
                || {
                    let mut txn = self.kv.begin();
                    let batch: Vec<Vec<u8>> = {
                        let mut c =
                            txn.cursor(coll.records.space, &coll.records.key(next_rid), &upper);
                        c.seek_to_first();
                        let mut out = Vec::new();
                        while c.valid() && out.len() < BUILD_BATCH {
                            out.push(c.key().to_vec());
                            c.next();
                        }
                        c.status()?;
                        out
                    };
                    for rkey in &batch {
                        let rid = keys::read_u64(&rkey[8..]).unwrap_or(0);
                        let Some(bytes) = txn.get_for_update(coll.records.space, rkey)? else {
                            continue;
                        };
                        let doc = RawDocument::from_bytes(&bytes)?;
                        for ix in &ixs {
                            let (ks, _): (IndexKeySet, bool) =
                                index::document_keys_for_write(ix, doc)?;
                            index::insert_keys(txn.as_mut(), coll, ix, &ks, rid)?;
                        }
                    }
                    txn.commit()?;
                    Ok(batch.last().and_then(|k| keys::read_u64(&k[8..])))
                },
            )?;
            drop(meta);
            match last {
                Some(rid) => next_rid = rid + 1,
                None => break,
            }
        }
        self.commit_build(coll, ids)
    }

    /// Checks recorded unique collisions and makes the indexes ready, with no writer in
    /// flight (the exclusive metadata guard) and no open transaction that wrote here.
    fn commit_build(&self, coll: &Collection, ids: &[u64]) -> Result<()> {
        let mut attempts = 0;
        let (_ddl, mut meta) = loop {
            let ddl = self.ddl.lock();
            let meta = coll.meta.write();
            let open = coll.open_txn_ids();
            attempts += 1;
            if open.is_empty() || attempts > 100 {
                break (ddl, meta);
            }
            drop(meta);
            drop(ddl);
            coll.wait_for_txns(&open, || {
                self.stopping.load(std::sync::atomic::Ordering::Relaxed)
            });
        };
        let ixs = self.building_indexes(coll, &meta, ids)?;
        let mut txn = self.kv.begin();
        for ix in &ixs {
            let Some(build) = &ix.build else { continue };
            let mut ready = ix.clone();
            ready.build = None;
            for (ks, rid) in build.take_violations() {
                let Some(bytes) = txn.get(coll.records.space, &coll.records.key(rid))? else {
                    continue;
                };
                let keys_now = index::document_keys(ix, RawDocument::from_bytes(&bytes)?)?;
                let Some(entry) = keys_now.get(&ks) else {
                    continue;
                };
                let one: IndexKeySet = [(ks, entry.clone())].into_iter().collect();
                index::insert_keys(txn.as_mut(), coll, &ready, &one, rid)?;
            }
        }
        let mut new_meta = meta.clone();
        new_meta.building.retain(|ix| !ids.contains(&ix.id));
        let mut ops = Vec::new();
        for mut ix in ixs {
            ix.build = None;
            ops.extend(self.ddl_ops(&coll.ns, || {
                oplog::collection_command(coll, meta.uuid, "createIndexes", (*ix.spec).clone())
            }));
            new_meta.indexes.push(ix);
        }
        self.write_entry(txn.as_mut(), coll, &new_meta)?;
        self.commit_logged(txn, ops)?;
        *meta = new_meta;
        Ok(())
    }

    /// Removes the indexes of a failed build from the catalog and deletes their keys.
    fn abandon_build(&self, coll: &Collection, ids: &[u64]) -> Result<()> {
        {
            let _ddl = self.ddl.lock();
            let mut meta = coll.meta.write();
            if !meta.dropped && meta.building.iter().any(|ix| ids.contains(&ix.id)) {
                let mut new_meta = meta.clone();
                new_meta.building.retain(|ix| !ids.contains(&ix.id));
                let mut txn = self.kv.begin();
                self.write_entry(txn.as_mut(), coll, &new_meta)?;
                txn.commit()?;
                *meta = new_meta;
            }
        }
        for id in ids {
            self.delete_prefix(Space::Indexes, *id)?;
        }
        Ok(())
    }

    /// Restarts the builds a previous run left unfinished: their keys are cleared before
    /// any writer runs, then each collection's builds run on a thread of their own.
    pub(crate) fn restart_index_builds(self: &Arc<Self>) -> Result<()> {
        let mut pending = Vec::new();
        for coll in self.collections.read().values() {
            let ids: Vec<u64> = coll.meta.read().building.iter().map(|ix| ix.id).collect();
            if !ids.is_empty() {
                pending.push((coll.clone(), ids));
            }
        }
        for (coll, ids) in pending {
            for id in &ids {
                self.delete_prefix(Space::Indexes, *id)?;
            }
            let engine = Arc::downgrade(self);
            std::thread::Builder::new()
                .name("index-build".into())
                .spawn(move || {
                    let Some(engine) = engine.upgrade() else {
                        return;
                    };
                    if engine.build_indexes(&coll, &ids).is_err()
                        && !engine.stopping.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        let _ = engine.abandon_build(&coll, &ids);
                    }
                })
                .map_err(|e| Error::internal(e.to_string()))?;
        }
        Ok(())
    }

    /// `collMod` of validation options: each of `validator`, `validationLevel`,
    /// `validationAction` given replaces the stored one; the validator is re-parsed before
    /// anything is written.
    pub fn set_validation_options(&self, ns: &Namespace, changes: &Document) -> Result<()> {
        self.rewrite_options(
            ns,
            |options| {
                for (k, v) in changes {
                    options.insert(k.clone(), v.clone());
                }
            },
            Some(changes),
        )
    }

    /// Makes the options `collMod` changes (`validator`, `validationLevel`,
    /// `validationAction`, `changeStreamPreAndPostImages`, `expireAfterSeconds`) those of
    /// `options`, removing the ones it lacks: a rollback restoring the sync source's state.
    /// Not logged.
    pub fn restore_modifiable_options(&self, ns: &Namespace, options: &Document) -> Result<()> {
        self.rewrite_options(
            ns,
            |mine| {
                for k in [
                    "validator",
                    "validationLevel",
                    "validationAction",
                    "changeStreamPreAndPostImages",
                    "expireAfterSeconds",
                ] {
                    match options.get(k) {
                        Some(v) => mine.insert(k, v.clone()),
                        None => mine.remove(k),
                    };
                }
            },
            None,
        )
    }

    /// Applies `edit` to the options of `ns` and stores them, with the validator re-parsed
    /// before anything is written; `logged` is the `collMod` the oplog records (none for a
    /// rollback's restore). Publishes the new metadata only once the write committed.
    fn rewrite_options(
        &self,
        ns: &Namespace,
        edit: impl FnOnce(&mut Document),
        logged: Option<&Document>,
    ) -> Result<()> {
        let _ddl = self.ddl.lock();
        let coll = self
            .collection(ns)
            .ok_or_else(|| catalog::namespace_not_found(ns))?;
        let mut meta = coll.meta.write();
        let mut new_meta = meta.clone();
        edit(&mut new_meta.options);
        new_meta.validator = Validator::from_options(&new_meta.options)?;
        let mut txn = self.kv.begin();
        self.write_entry(txn.as_mut(), &coll, &new_meta)?;
        match logged {
            Some(changes) => {
                let ops = self.ddl_ops(ns, || {
                    oplog::collection_command(&coll, meta.uuid, "collMod", changes.clone())
                });
                self.commit_logged(txn, ops)?;
            }
            None => txn.commit()?,
        }
        *meta = new_meta;
        Ok(())
    }

    /// `dropIndexes` by name, by key pattern, a list of names, or `"*"`.
    /// Returns the number of indexes before the drop.
    pub fn drop_indexes(&self, ns: &Namespace, which: &Bson) -> Result<usize> {
        let _ddl = self.ddl.lock();
        let coll = self
            .collection(ns)
            .ok_or_else(|| catalog::namespace_not_found(ns))?;
        let mut meta = coll.meta.write();
        let before = meta.indexes.len();
        // Indexes being built can be named too: dropping one aborts its build.
        let all: Vec<IndexMeta> = meta.write_indexes().cloned().collect();
        let targets = select_indexes(&all, which)?;
        let mut new_meta = meta.clone();
        new_meta.indexes.retain(|ix| !targets.contains(&ix.name));
        new_meta.building.retain(|ix| !targets.contains(&ix.name));
        let mut txn = self.kv.begin();
        self.write_entry(txn.as_mut(), &coll, &new_meta)?;
        let mut ops = Vec::new();
        for ix in meta.write_indexes().filter(|ix| targets.contains(&ix.name)) {
            ops.extend(self.ddl_ops(ns, || {
                oplog::collection_command(
                    &coll,
                    meta.uuid,
                    "dropIndexes",
                    bson::doc! { "index": ix.name.clone() },
                )
                .with_o2((*ix.spec).clone())
            }));
        }
        self.commit_logged(txn, ops)?;
        let dropped: Vec<u64> = meta
            .write_indexes()
            .filter(|ix| targets.contains(&ix.name))
            .map(|ix| ix.id)
            .collect();
        *meta = new_meta;
        drop(meta);
        for id in dropped {
            self.delete_prefix(Space::Indexes, id)?;
        }
        Ok(before)
    }
}

/// False when an identical index exists; errors when one conflicts by name or options.
pub(crate) fn is_new_index(
    existing: &[IndexMeta],
    pending: &[Document],
    spec: &Document,
) -> Result<bool> {
    let name = spec.get_str("name").unwrap_or_default();
    let key = spec.get_document("key").cloned().unwrap_or_default();
    let opts = index_spec::comparable_options(spec);
    let signature = index_spec::signature(spec);
    let all = existing.iter().map(|ix| &*ix.spec).chain(pending.iter());
    for other in all {
        let other_name = other.get_str("name").unwrap_or_default();
        let other_key = other.get_document("key").cloned().unwrap_or_default();
        let same_key = other_key == key;
        let same_opts = index_spec::comparable_options(other) == opts;
        let same_signature = index_spec::signature(other) == signature;
        if other_name == name {
            if same_key && same_opts {
                return Ok(false);
            }
            if same_key {
                return Err(Error::new(
                    ErrorCode::IndexOptionsConflict,
                    format!("An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}", show(spec), show(other)),
                ));
            }
            return Err(Error::new(
                ErrorCode::IndexKeySpecsConflict,
                format!("An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}", show(spec), show(other)),
            ));
        }
        if same_signature && !same_opts {
            return Err(Error::new(
                ErrorCode::IndexOptionsConflict,
                format!("An equivalent index already exists with a different name and options. Requested index: {}, existing index: {}", show(spec), show(other)),
            ));
        }
        if same_signature {
            return Err(Error::new(
                ErrorCode::IndexOptionsConflict,
                format!("Index already exists with a different name: {other_name}"),
            ));
        }
    }
    Ok(true)
}

fn show(d: &Document) -> String {
    nidus_common::shell::format(&Bson::Document(d.clone()))
}

fn select_indexes(indexes: &[IndexMeta], which: &Bson) -> Result<Vec<String>> {
    let not_found = |what: String| Error::new(ErrorCode::IndexNotFound, what);
    match which {
        Bson::String(s) if s == "*" => Ok(indexes
            .iter()
            .filter(|ix| !ix.is_id())
            .map(|ix| ix.name.clone())
            .collect()),
        Bson::String(name) => {
            if name == catalog::ID_INDEX_NAME {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "cannot drop _id index",
                ));
            }
            indexes
                .iter()
                .find(|ix| &ix.name == name)
                .map(|ix| vec![ix.name.clone()])
                .ok_or_else(|| not_found(format!("index not found with name [{name}]")))
        }
        Bson::Document(key) => {
            let found: Vec<&IndexMeta> = indexes
                .iter()
                .filter(|ix| &ix.key_document() == key)
                .collect();
            match found.as_slice() {
                [] => Err(not_found(format!(
                    "can't find index with key: {}",
                    show(key)
                ))),
                [ix] if ix.is_id() => Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "cannot drop _id index",
                )),
                [ix] => Ok(vec![ix.name.clone()]),
                _ => Err(Error::new(
                    ErrorCode::AmbiguousIndexKeyPattern,
                    "ambiguous key pattern",
                )),
            }
        }
        Bson::Array(names) => names
            .iter()
            .map(|n| match n {
                Bson::String(s) if s == "*" => {
                    Err(Error::bad_value("'*' is not allowed in an index list"))
                }
                Bson::String(_) => select_indexes(indexes, n).map(|mut v| v.remove(0)),
                _ => Err(Error::type_mismatch(
                    "dropIndexes index names must be strings",
                )),
            })
            .collect(),
        _ => Err(Error::type_mismatch(
            "The field 'index' must be a string, an object or an array of strings",
        )),
    }
}

/// How long a rename that drops its target waits for the source's metadata while holding
/// the target's, and how many times it lets go of both and tries again.
const SECOND_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(5);
const SECOND_LOCK_ATTEMPTS: u32 = 2000;

/// The write guards of a rename's source and (when it drops one) its target. Waiting for one
/// while holding the other would deadlock against anything holding the two collections'
/// guards in the other order, so the second is only tried for a moment, and both are let go
/// between attempts.
fn write_both<'a>(
    source: &'a Collection,
    target: Option<&'a CollectionRef>,
) -> Result<(
    parking_lot::RwLockWriteGuard<'a, CollectionMeta>,
    Option<parking_lot::RwLockWriteGuard<'a, CollectionMeta>>,
)> {
    let Some(target) = target else {
        return Ok((source.meta.write(), None));
    };
    for _ in 0..SECOND_LOCK_ATTEMPTS {
        let t = target.meta.write();
        if let Some(s) = source.meta.try_write_for(SECOND_LOCK_WAIT) {
            return Ok((s, Some(t)));
        }
        drop(t);
        std::thread::yield_now();
    }
    Err(Error::new(
        ErrorCode::LockTimeout,
        format!(
            "renameCollection could not lock {} and {} together",
            source.ns, target.ns
        ),
    ))
}
