//! Catalog changes inside a multi-document transaction, as MongoDB allows them: creating a
//! collection (explicitly or by a write) and creating indexes on a collection the same
//! transaction created (or creates for them).
//!
//! A collection created in a transaction lives only in that transaction until commit:
//! lookups made for the transaction find it first, everyone else does not see it. Its
//! documents and index keys are written into the transaction's storage like any other write;
//! its catalog entry is written at commit, in the same storage transaction, and only then is
//! it published in the engine's map, so an abort (or a crash before commit) leaves nothing.

use crate::catalog::{CollectionRef, IndexMeta};
use crate::ddl::{is_new_index, CreateIndexesOutcome};
use crate::index_spec;
use crate::namespace::{self, Namespace};
use crate::oplog::OplogEntry;
use crate::txn::Transaction;
use crate::{Collection, Engine};
use bson::Document;
use nidus_common::{Error, ErrorCode, Result};

use std::sync::Arc;

impl Engine {
    /// The collection as `txn` sees it: one it created, else the published one.
    pub fn collection_in(
        &self,
        ns: &Namespace,
        txn: Option<&Transaction>,
    ) -> Option<CollectionRef> {
        txn.and_then(|t| t.created_collection(ns))
            .or_else(|| self.collection(ns))
    }

    /// `ensure_collection` for a statement of `txn` (or outside one when `None`).
    pub fn ensure_collection_in(
        &self,
        ns: &Namespace,
        txn: Option<&Transaction>,
    ) -> Result<CollectionRef> {
        match txn {
            None => self.ensure_collection(ns),
            Some(t) => match self.collection_in(ns, Some(t)) {
                Some(c) => Ok(c),
                None => self.create_in_txn(ns, Document::new(), t, true),
            },
        }
    }

    /// `create` as a transaction's statement: NamespaceExists for any collection or view the
    /// transaction can see, even with the same options (unlike `create` outside one).
    pub fn create_collection_in_txn(
        &self,
        ns: &Namespace,
        options: Document,
        txn: &Transaction,
    ) -> Result<CollectionRef> {
        self.create_in_txn(ns, options, txn, false)
    }

    /// Creates `ns` for `txn`. An `implicit` creation (a write's) whose collection another
    /// client published after the caller looked (the check above ran without the DDL lock)
    /// writes into that collection, as it would had it looked a moment later; the
    /// transaction's writes then conflict key by key at commit like any others.
    fn create_in_txn(
        &self,
        ns: &Namespace,
        options: Document,
        txn: &Transaction,
        implicit: bool,
    ) -> Result<CollectionRef> {
        namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let _ddl = self.ddl.lock();
        if implicit {
            if let Some(published) = self.collection(ns) {
                return Ok(published);
            }
        }
        if self.collection_in(ns, Some(txn)).is_some() || self.view(ns).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("Collection {ns} already exists."),
            ));
        }
        // The ids are taken now, in their own storage transaction: writing the id counter in
        // the user's transaction would make it conflict with every concurrent DDL.
        let mut ids = self.kv.begin();
        let coll = Arc::new(self.new_collection(ids.as_mut(), ns, options)?);
        ids.commit()?;
        txn.add_created(coll.clone());
        Ok(coll)
    }

    /// `createIndexes` as a transaction's statement (MongoDB's rules): on a collection the
    /// transaction created, while it is still empty; on a missing one, which it creates; on a
    /// published collection only when every index already exists.
    pub fn create_indexes_in_txn(
        &self,
        ns: &Namespace,
        specs: &[Document],
        txn: &Transaction,
    ) -> Result<CreateIndexesOutcome> {
        let default = txn
            .created_collection(ns)
            .or_else(|| self.collection(ns))
            .and_then(|c| c.default_collation());
        let normalized = index_spec::normalize_all(specs, default.as_ref())?;
        let coll = match (txn.created_collection(ns), self.collection(ns)) {
            (Some(created), _) => created,
            (None, Some(existing)) => {
                let meta = existing.meta.read();
                let before = meta.indexes.len();
                for spec in &normalized {
                    if is_new_index(&meta.indexes, &[], spec)? {
                        return Err(Error::new(
                            ErrorCode::OperationNotSupportedInTransaction,
                            format!("Cannot create new indexes on existing collection {ns} in a multi-document transaction."),
                        ));
                    }
                }
                return Ok(all_exist(before, false));
            }
            (None, None) => {
                if self.view(ns).is_some() {
                    return Err(Error::new(
                        ErrorCode::CommandNotSupportedOnView,
                        "Cannot create indexes on a view",
                    ));
                }
                self.create_collection_in_txn(ns, Document::new(), txn)?
            }
        };
        if !self.is_empty_in_txn(&coll, txn)? {
            return Err(Error::new(
                ErrorCode::OperationNotSupportedInTransaction,
                format!("Cannot create new indexes on non-empty collection {ns} in a multi-document transaction."),
            ));
        }
        let mut meta = coll.meta.write();
        let before = meta.indexes.len();
        let mut to_add: Vec<Document> = Vec::new();
        for spec in normalized {
            if is_new_index(&meta.indexes, &to_add, &spec)? {
                to_add.push(spec);
            }
        }
        if to_add.is_empty() {
            return Ok(all_exist(before, true));
        }
        let mut ids = self.kv.begin();
        for spec in to_add {
            let ix = IndexMeta::from_spec(self.allocate_id(ids.as_mut())?, spec)?;
            meta.indexes.push(ix);
        }
        ids.commit()?;
        coll.plan_cache.clear(None);
        Ok(CreateIndexesOutcome {
            num_indexes_before: before,
            num_indexes_after: meta.indexes.len(),
            created_collection_automatically: true,
            note: None,
        })
    }

    fn is_empty_in_txn(&self, coll: &Collection, txn: &Transaction) -> Result<bool> {
        let (lower, upper) = (coll.records.lower(), coll.records.upper());
        txn.with_kv(|kv| {
            let mut c = kv.cursor(coll.records.space, &lower, &upper);
            c.seek_to_first();
            let empty = !c.valid();
            c.status()?;
            Ok(empty)
        })
    }

    /// Commits `txn`, publishing the collections it created. A collection of the same name
    /// created meanwhile by someone else makes the commit fail with WriteConflict (and the
    /// transaction abort), as MongoDB's catalog conflict does.
    pub fn commit_transaction(&self, txn: &Transaction) -> Result<()> {
        let created = txn.created_collections();
        let _ddl = (!created.is_empty()).then(|| self.ddl.lock());
        for coll in &created {
            if self.collection(&coll.ns).is_some() || self.view(&coll.ns).is_some() {
                txn.abort();
                return Err(Error::new(
                    ErrorCode::WriteConflict,
                    format!(
                        "Collection {} was created concurrently with this transaction.",
                        coll.ns
                    ),
                ));
            }
            let meta = coll.meta.read().clone();
            txn.with_kv(|kv| self.write_entry(kv, coll, &meta))?;
        }
        let mut ops: Vec<OplogEntry> = created
            .iter()
            .filter(|c| self.oplog_for(&c.ns).is_some())
            .map(|c| crate::oplog::create_entry(c, &c.meta.read()))
            .collect();
        ops.extend(txn.take_oplog_ops());
        let logged = match self.oplog().filter(|_| !ops.is_empty()) {
            Some(oplog) => {
                let entry = Engine::transaction_entry(&ops, txn.session().as_ref())?;
                let mut images = crate::preimages::Added::default();
                let (slot, bytes) = txn.with_kv(|kv| {
                    let (slot, bytes) =
                        self.put_entries(oplog, kv, std::slice::from_ref(&entry), &mut images)?;
                    let wall = bson::DateTime::now();
                    for (i, op) in ops.iter().enumerate() {
                        if let Some(ui) = op.ui {
                            let at = (ui, slot.ts(0), i as u32);
                            self.put_images(kv, at, op, wall, &mut images)?;
                        }
                    }
                    Ok((slot, bytes))
                })?;
                Some((oplog, slot, bytes, images))
            }
            None => None,
        };
        txn.commit()?;
        if let Some((oplog, slot, bytes, images)) = logged {
            drop(slot);
            oplog.note_written(1, bytes);
            images.committed();
        }
        let mut map = self.collections.write();
        for coll in created {
            map.insert(coll.ns.clone(), coll);
        }
        Ok(())
    }
}

fn all_exist(before: usize, created: bool) -> CreateIndexesOutcome {
    CreateIndexesOutcome {
        num_indexes_before: before,
        num_indexes_after: before,
        created_collection_automatically: created,
        note: Some("all indexes already exist"),
    }
}
