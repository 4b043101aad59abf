//! The write path: single-document inserts, updates and deletes, each in its own storage
//! transaction, retried internally on write conflicts with MongoDB's backoff, or inside a
//! multi-document transaction (`WriteOpts::txn`), where a conflict goes to the client.

use crate::catalog::{CollectionMeta, CollectionRef};
use crate::find::{parse_collation, FindSpec};
use crate::index::{self, IndexKeySet};
use crate::opctx;
use crate::oplog::OplogEntry;
use crate::retry::with_write_conflict_retry;
use crate::stmt_record::{self, Executed};
use crate::txn::{ReadSource, Transaction};
use crate::Engine;
use bson::{doc, oid::ObjectId, Bson, Document, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};
use nidus_common::repeated;
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::LetScope;
use nidus_query::matcher::{Matcher, ParseOptions};
use nidus_query::update::{Update, UpdateContext};
use nidus_storage::{KvTxn, Space};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub const MAX_USER_DOC_SIZE: usize = 16 * 1024 * 1024;

/// How often a single-document update or delete looks for a new target after the one it
/// chose was changed by another writer.
const MAX_SINGLE_TARGET_RESTARTS: usize = 100;

/// Records a retryable insert statement with its `_id` (for an upsert's reply).
pub(crate) fn record_insert(
    txn: &mut dyn KvTxn,
    opts: &WriteOpts,
    doc: &RawDocument,
) -> Result<()> {
    match &opts.statement {
        None => Ok(()),
        Some(s) if !s.images => stmt_record::record_inserted_id(txn, s, doc.get("_id")?),
        Some(_) => {
            let id = doc
                .get("_id")?
                .and_then(|v| Bson::try_from(v.to_raw_bson()).ok());
            let doc = Some(Document::try_from(doc)?);
            stmt_record::record(
                txn,
                opts,
                Executed::Inserted {
                    id,
                    doc,
                    entry_ts: None,
                },
            )
        }
    }
}

/// Per-operation options shared by every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    pub deadline: Option<Instant>,
    /// The command's `let` variables (for `$expr` in filters, pipeline updates).
    pub let_vars: Option<Document>,
    /// The statement's collation (the filter's string comparisons and the sort).
    pub collation: Option<Document>,
    /// `bypassDocumentValidation`: skip the collection's validator.
    pub bypass_document_validation: bool,
    /// The multi-document transaction the write belongs to (None: each document commits
    /// on its own, retried on conflict).
    pub txn: Option<Arc<Transaction>>,
    /// The retryable-write statement this write is (its execution is recorded with it).
    pub statement: Option<crate::stmt_record::StatementId>,
}

impl WriteOpts {
    /// Parses a write's filter in the command's `let` scope.
    pub fn filter_matcher(&self, filter: &Document) -> Result<Matcher> {
        let scope = LetScope::new(self.let_vars.as_ref())?;
        let collation = parse_collation(self.collation.as_ref())?;
        let opts = ParseOptions {
            scope: Some(&scope),
            collation: collation.as_ref(),
            ..ParseOptions::default()
        };
        Matcher::parse_with(filter, &opts)
    }

    /// These options, under `coll`'s default collation when they name none (MongoDB's
    /// writes inherit it as its queries do).
    pub fn under_default_collation(&self, coll: &CollectionRef) -> std::borrow::Cow<'_, WriteOpts> {
        match (&self.collation, coll.default_collation()) {
            (None, Some(default)) => std::borrow::Cow::Owned(self.with_collation(Some(default))),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// These options with a statement's own collation.
    pub fn with_collation(&self, collation: Option<Document>) -> WriteOpts {
        WriteOpts {
            collation,
            ..self.clone()
        }
    }
}

/// What `update` reports per statement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateOutcome {
    pub n_matched: u64,
    pub n_modified: u64,
    pub upserted_id: Option<Bson>,
}

/// One update statement.
pub struct UpdateSpec {
    pub filter: Document,
    pub update: Update,
    pub multi: bool,
    pub upsert: bool,
    pub sort: Option<Document>,
    pub hint: Option<Bson>,
}

fn check_id(v: RawBsonRef) -> Result<()> {
    if let RawBsonRef::Document(d) = v {
        for el in d.iter() {
            let (k, _) = el?;
            if k.starts_with('$') {
                return Err(Error::new(
                    ErrorCode::DollarPrefixedFieldName,
                    format!("_id fields may not contain '$'-prefixed fields: {k} is not valid for storage."),
                ));
            }
        }
    }
    let kind = match v {
        RawBsonRef::Array(_) => "an array",
        RawBsonRef::RegularExpression(_) => "a regex",
        RawBsonRef::Undefined => "a undefined",
        _ => return Ok(()),
    };
    Err(Error::bad_value(format!("can't use {kind} for _id")))
}

fn check_size(len: usize) -> Result<()> {
    if len > MAX_USER_DOC_SIZE {
        return Err(Error::new(
            ErrorCode::BadValue,
            format!(
                "object to insert too large. size in bytes: {len}, max size: {MAX_USER_DOC_SIZE}"
            ),
        ));
    }
    Ok(())
}

pub use crate::storage_depth::{check_storage_depth, MAX_STORAGE_DEPTH};

/// The document as stored: `_id` first (an ObjectId is generated when absent), other fields
/// in the order given. A document that already starts with a valid `_id` is stored as is.
pub fn prepare_insert(doc: &RawDocument) -> Result<RawDocumentBuf> {
    check_size(doc.as_bytes().len())?;
    check_storage_depth(doc, true)?;
    let mut id = None;
    let mut id_first = false;
    // Names repeated in a command body arrive marked (`nidus_common::repeated`): stored
    // under the name they were sent with, as MongoDB stores a repeated field.
    let marked = contains_mark(doc.as_bytes());
    // Most documents: unmarked, `_id` first and only once. The byte walk finds that without
    // the element iterator (the nesting check validated every element already).
    if !marked {
        let mut ids = 0;
        let mut first = false;
        let walked = nidus_doc::path::walk_top_level(doc, |position, name, _, _| {
            if name == b"_id" {
                ids += 1;
                first |= position == 0;
            }
            false
        });
        if walked == Some(true) && ids == 1 && first {
            if let Some(v) = doc.get("_id")? {
                check_id(v)?;
                return Ok(doc.to_raw_document_buf());
            }
        }
    }
    // The nesting check walked and validated every element: only `_id`'s value is converted.
    for (i, el) in doc.iter_elements().enumerate() {
        let el = el?;
        if repeated::original_name(el.key()) == "_id" {
            let v = el.value()?;
            if id.is_some() {
                return Err(Error::bad_value(
                    "can't have multiple _id fields in one document",
                ));
            }
            check_id(v)?;
            id_first = i == 0;
            id = Some(v.to_raw_bson());
        }
    }
    if id_first && !marked {
        return Ok(doc.to_raw_document_buf());
    }
    let mut out = RawDocumentBuf::new();
    match id {
        Some(v) => out.append("_id", v),
        None => out.append("_id", ObjectId::new()),
    }
    for el in doc.iter() {
        let (k, v) = el?;
        if k != "_id" {
            out.append(repeated::original_name(k), strip_marks(v)?);
        }
    }
    check_size(out.as_bytes().len())?;
    Ok(out)
}

/// Whether some name in the document may carry a repetition mark (its UTF-8 bytes occur).
fn contains_mark(bytes: &[u8]) -> bool {
    let mut buf = [0u8; 4];
    let mark = repeated::MARK.encode_utf8(&mut buf).as_bytes();
    // Most documents hold no byte of the mark's first value at all: `contains` on bytes is
    // the library's word-at-a-time search, far cheaper than comparing every window.
    bytes.contains(&mark[0]) && bytes.windows(mark.len()).any(|w| w == mark)
}

/// A value with the repetition marks of its embedded documents' names removed.
fn strip_marks(v: RawBsonRef) -> Result<RawBson> {
    Ok(match v {
        RawBsonRef::Document(d) => {
            let mut out = RawDocumentBuf::new();
            for el in d {
                let (k, v) = el?;
                out.append(repeated::original_name(k), strip_marks(v)?);
            }
            RawBson::Document(out)
        }
        RawBsonRef::Array(a) => {
            let mut out = bson::RawArrayBuf::new();
            for item in a {
                out.push(strip_marks(item?)?);
            }
            RawBson::Array(out)
        }
        other => other.to_raw_bson(),
    })
}

/// A document as stored: names repeated in the request (`nidus_common::repeated`) under the
/// name they were sent with.
fn to_raw(doc: &Document) -> Result<RawDocumentBuf> {
    let raw =
        nidus_common::encode::document_to_raw(doc).map_err(|e| Error::internal(e.to_string()))?;
    if !contains_mark(raw.as_bytes()) {
        return Ok(raw);
    }
    match strip_marks(RawBsonRef::Document(&raw))? {
        RawBson::Document(d) => Ok(d),
        _ => Err(Error::internal("a document converted to another type")),
    }
}

/// The keys of a document being written to every index, and whether some index's multikey
/// paths widened.
fn index_keys_all(meta: &CollectionMeta, doc: &RawDocument) -> Result<(Vec<IndexKeySet>, bool)> {
    let mut widened = false;
    let mut all = Vec::with_capacity(meta.indexes.len() + meta.building.len());
    for ix in meta.write_indexes() {
        let (keys, w) = index::document_keys_for_write(ix, doc)?;
        widened |= w;
        all.push(keys);
    }
    Ok((all, widened))
}

/// Registers a transaction's write on `coll` (index builds wait for such transactions).
fn touch(opts: &WriteOpts, coll: &CollectionRef) {
    if let Some(t) = &opts.txn {
        t.touch(coll);
    }
}

/// Persists widened multikey paths with the write that widened them.
fn write_catalog_entry(
    txn: &mut dyn KvTxn,
    coll: &CollectionRef,
    meta: &CollectionMeta,
) -> Result<()> {
    let entry = crate::catalog::entry_document(coll.id, &coll.ns, meta);
    let bytes = bson::to_vec(&entry).map_err(|e| Error::internal(e.to_string()))?;
    txn.put(Space::Catalog, &coll.catalog_key(), &bytes)?;
    Ok(())
}

impl Engine {
    fn retry<T>(&self, opts: &WriteOpts, op: impl FnMut() -> Result<T>) -> Result<T> {
        with_write_conflict_retry(
            opts.deadline,
            || {
                self.metrics.write_conflicts.fetch_add(1, Ordering::Relaxed);
            },
            op,
        )
    }

    /// Runs one document's write: inside the operation's transaction (a conflict goes to the
    /// client, which retries the whole transaction), or in a storage transaction of its own,
    /// committed and retried with backoff on conflict.
    ///
    /// The write's oplog entries (`op` pushes them) are logged in its storage transaction,
    /// or, in a multi-document transaction, kept for its `applyOps` entry at commit.
    fn write_unit<T>(
        &self,
        opts: &WriteOpts,
        mut op: impl FnMut(&mut dyn KvTxn, &mut Vec<OplogEntry>) -> Result<T>,
    ) -> Result<T> {
        if let Some(t) = &opts.txn {
            let mut ops = Vec::new();
            let out = t.with_kv(|kv| op(kv, &mut ops))?;
            t.add_oplog_ops(ops);
            return Ok(out);
        }
        self.retry(opts, || {
            let mut txn = self.kv.begin();
            let mut ops = Vec::new();
            let out = op(txn.as_mut(), &mut ops)?;
            self.commit_logged(txn, ops)?;
            Ok(out)
        })
    }

    /// Adds `entry` to a write's oplog entries when writes to `coll` are logged, with the
    /// retryable write's session fields and, for collections keeping pre- and post-images,
    /// the document before and after the change.
    pub(crate) fn log_op(
        &self,
        ops: &mut Vec<OplogEntry>,
        coll: &CollectionRef,
        meta: &CollectionMeta,
        opts: &WriteOpts,
        (pre, post): (Option<&Document>, Option<&Document>),
        entry: impl FnOnce() -> Result<OplogEntry>,
    ) -> Result<()> {
        if self.oplog_for(&coll.ns).is_none() {
            return Ok(());
        }
        let mut e = entry()?;
        if let Some(s) = opts.statement.as_ref().filter(|_| opts.txn.is_none()) {
            e.session = s.session.clone();
            e.stmt_id = s.session.as_ref().map(|_| s.stmt_id);
            // An upsert's insert entry holds the whole document: no image to ask for.
            e.needs_retry_image = s.retry_image.filter(|_| e.op != "i");
        }
        if crate::preimages::enabled(&meta.options) {
            e.pre_image = pre.cloned();
            e.post_image = post.cloned();
        }
        ops.push(e);
        Ok(())
    }

    /// Counts a document change: now, or at commit for a transaction's write.
    fn adjust_stats(&self, opts: &WriteOpts, coll: &CollectionRef, docs: i64, bytes: i64) {
        match &opts.txn {
            Some(t) => t.record_stats(coll, docs, bytes),
            None => coll.adjust_stats(docs, bytes),
        }
    }

    /// An insert whose collection handle was dropped (or renamed away) after the caller
    /// resolved it. MongoDB's insert creates the collection again, as an insert after the drop
    /// would; a transaction cannot (its catalog snapshot is gone), so it fails as before.
    /// Bounded: each further attempt needs another drop to land between resolving and writing.
    fn insert_after_drop(
        &self,
        stale: &CollectionRef,
        doc: &RawDocument,
        opts: &WriteOpts,
        attempt: u32,
    ) -> Result<()> {
        if opts.txn.is_some() || attempt >= 16 {
            return Err(Error::new(
                ErrorCode::NamespaceNotFound,
                "collection dropped",
            ));
        }
        let coll = self.ensure_collection(&stale.ns)?;
        self.insert_attempt(&coll, doc, opts, attempt + 1)
    }

    /// Inserts one prepared document (see [`prepare_insert`]).
    pub fn insert_one(
        &self,
        coll: &CollectionRef,
        doc: &RawDocument,
        opts: &WriteOpts,
    ) -> Result<()> {
        self.insert_attempt(coll, doc, opts, 0)
    }

    fn insert_attempt(
        &self,
        coll: &CollectionRef,
        doc: &RawDocument,
        opts: &WriteOpts,
        attempt: u32,
    ) -> Result<()> {
        self.check_not_oplog(coll)?;
        let meta = coll.meta.read();
        if meta.dropped {
            drop(meta);
            return self.insert_after_drop(coll, doc, opts, attempt);
        }
        touch(opts, coll);
        if let (Some(v), false) = (&meta.validator, opts.bypass_document_validation) {
            v.check_insert(&coll.ns, doc)?;
        }
        let (keys, widened) = index_keys_all(&meta, doc)?;
        if let Some(limits) = crate::capped::CappedLimits::of(&meta.options) {
            return self.insert_capped(coll, &meta, doc, (&keys, widened), limits, opts);
        }
        self.write_unit(opts, |txn, ops| {
            if opts.txn.is_none() {
                // An insert of its own reads back none of its new keys (the record, its
                // non-unique index entries, its oplog entry).
                txn.new_keys_unread();
            }
            let rid = coll.allocate_record_id();
            for (ix, ks) in meta.write_indexes().zip(&keys) {
                index::insert_new_record_keys(txn, coll, ix, ks, rid)?;
            }
            if widened {
                write_catalog_entry(txn, coll, &meta)?;
            }
            txn.put_new(coll.records.space, &coll.records.key(rid), doc.as_bytes())?;
            self.log_op(ops, coll, &meta, opts, (None, None), || {
                OplogEntry::insert(&coll.ns, meta.uuid, doc)
            })?;
            record_insert(txn, opts, doc)
        })?;
        count_index_changes(keys.iter().map(|k| k.len()).sum(), 0);
        self.adjust_stats(opts, coll, 1, doc.as_bytes().len() as i64);
        Ok(())
    }

    /// Inserts prepared documents (see [`prepare_insert`]), each with its own statement
    /// options, in one storage transaction with one oplog entry per document, as MongoDB
    /// groups a batch's inserts (`internalInsertMaxBatchSize`). All or nothing: on any error
    /// nothing is written and the caller inserts the documents one at a time with
    /// [`Engine::insert_one`], which reports each document's own error. Multi-statement
    /// transactions and capped collections are refused here (they insert one at a time).
    pub fn insert_batch(
        &self,
        coll: &CollectionRef,
        docs: &[(&RawDocument, &WriteOpts)],
    ) -> Result<()> {
        self.check_not_oplog(coll)?;
        let Some((_, first)) = docs.first() else {
            return Ok(());
        };
        let meta = coll.meta.read();
        if meta.dropped {
            return Err(Error::new(
                ErrorCode::NamespaceNotFound,
                "collection dropped",
            ));
        }
        if docs.iter().any(|(_, o)| o.txn.is_some())
            || crate::capped::CappedLimits::of(&meta.options).is_some()
        {
            return Err(Error::internal("insert batch: not batchable"));
        }
        let mut widened = false;
        let prepared = docs
            .iter()
            .map(|(doc, opts)| {
                if let (Some(v), false) = (&meta.validator, opts.bypass_document_validation) {
                    v.check_insert(&coll.ns, doc)?;
                }
                let (ks, w) = index_keys_all(&meta, doc)?;
                widened |= w;
                Ok(ks)
            })
            .collect::<Result<Vec<_>>>();
        // A retryable write's statements all inserted here get one record. A member applying
        // replicated entries records each statement with its entry's `_id` and `ts`, as one at
        // a time: an insert entry may be an upsert's, whose retry reads them.
        let statements = if crate::oplog::applying_replicated() {
            None
        } else {
            stmt_record::consecutive_inserts(docs.iter().map(|(_, o)| o.statement.as_ref()))
        };
        let result = prepared.and_then(|all_keys| {
            self.retry(first, || {
                let mut txn = self.kv.begin();
                // Nothing here reads back a new key (records, non-unique index entries,
                // oplog entries); the unique keys it checks go in with `put`.
                txn.new_keys_unread();
                let mut ops = Vec::with_capacity(docs.len());
                if let Some((first, last)) = statements {
                    stmt_record::record_inserted_range(txn.as_mut(), first, last)?;
                }
                for ((doc, opts), doc_keys) in docs.iter().zip(&all_keys) {
                    let rid = coll.allocate_record_id();
                    for (ix, ks) in meta.write_indexes().zip(doc_keys) {
                        index::insert_new_record_keys(txn.as_mut(), coll, ix, ks, rid)?;
                    }
                    txn.put_new(coll.records.space, &coll.records.key(rid), doc.as_bytes())?;
                    self.log_op(&mut ops, coll, &meta, opts, (None, None), || {
                        OplogEntry::insert(&coll.ns, meta.uuid, doc)
                    })?;
                    if statements.is_none() {
                        record_insert(txn.as_mut(), opts, doc)?;
                    }
                }
                if widened {
                    write_catalog_entry(txn.as_mut(), coll, &meta)?;
                }
                self.commit_logged(txn, ops)?;
                Ok(all_keys.iter().flatten().map(|k| k.len()).sum::<usize>())
            })
        });
        match result {
            Ok(index_keys) => {
                count_index_changes(index_keys, 0);
                let bytes: usize = docs.iter().map(|(d, _)| d.as_bytes().len()).sum();
                coll.adjust_stats(docs.len() as i64, bytes as i64);
                Ok(())
            }
            Err(e) => {
                // Key generation already marked the indexes multikey in memory; the
                // one-at-a-time inserts that follow would not see a change to persist.
                // Multikey is a conservative flag, so persisting it is right either way.
                if widened {
                    let mut txn = self.kv.begin();
                    write_catalog_entry(txn.as_mut(), coll, &meta)?;
                    txn.commit()?;
                }
                Err(e)
            }
        }
    }

    /// Record ids of the documents a write statement targets, read from a snapshot. The
    /// plan's counters go to the thread's operation (the profiler's `keysExamined`, ...).
    fn target_ids(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        plan: &mut Option<TargetPlan>,
    ) -> Result<Vec<u64>> {
        let mut exec = self.plan_find(Some(coll), spec)?;
        let mut out = Vec::new();
        while let Some(m) = exec.get_next()? {
            if let Some(rid) = m.rid {
                out.push(rid);
            }
        }
        if let Some(op) = opctx::current() {
            let root = &exec.root;
            op.add_examined(
                root.total("keysExamined").max(0) as u64,
                root.total("docsExamined").max(0) as u64,
            );
            // The `_id` point lookup (under the LIMIT of a single-document write) is MongoDB's
            // express write path.
            let express = match root.name() {
                "EXPRESS_IXSCAN" => Some(root),
                "LIMIT" => root
                    .children()
                    .first()
                    .copied()
                    .filter(|c| c.name() == "EXPRESS_IXSCAN"),
                _ => None,
            };
            let wanted = op.wants_exec_stats();
            *plan = Some(TargetPlan {
                express: express.is_some(),
                summary: root.plan_summary(),
                stats: if wanted {
                    crate::plan::explain::stats_document(express.unwrap_or(root))
                } else {
                    Document::new()
                },
                is_cached: exec.is_cached,
                wants_exec_stats: wanted,
            });
        }
        Ok(out)
    }

    pub fn update(
        &self,
        coll: &CollectionRef,
        spec: &UpdateSpec,
        opts: &WriteOpts,
    ) -> Result<UpdateOutcome> {
        let opts = &*opts.under_default_collation(coll);
        let matcher = Arc::new(opts.filter_matcher(&spec.filter)?);
        let find = FindSpec {
            filter: spec.filter.clone(),
            matcher: Some(matcher.clone()),
            sort: spec.sort.clone(),
            limit: if spec.multi { 0 } else { 1 },
            hint: spec.hint.clone(),
            deadline: opts.deadline,
            let_vars: opts.let_vars.clone(),
            collation: opts.collation.clone(),
            source: opts.txn.clone().map(ReadSource::Txn),
            record_ids_only: true,
            ..FindSpec::default()
        };
        let mut outcome = UpdateOutcome::default();
        // A single-document update whose target changed before it was written (it no longer
        // matches) looks again, as MongoDB does, instead of reporting no match.
        let attempts = if spec.multi {
            1
        } else {
            MAX_SINGLE_TARGET_RESTARTS
        };
        let mut plan = None;
        for _ in 0..attempts {
            let targets = self.target_ids(coll, &find, &mut plan)?;
            let found_any = !targets.is_empty();
            for rid in targets {
                if let Some(modified) =
                    self.update_record(coll, rid, &matcher, &spec.update, opts)?
                {
                    outcome.n_matched += 1;
                    outcome.n_modified += modified as u64;
                }
            }
            if outcome.n_matched > 0 || !found_any {
                break;
            }
        }
        if outcome.n_matched == 0 && spec.upsert {
            let doc = self.upsert_document(&spec.filter, &spec.update)?;
            let raw = prepare_insert(&to_raw(&doc)?)?;
            let id = raw.get("_id")?.map(|v| v.to_raw_bson());
            self.insert_one(coll, &raw, opts)?;
            outcome.upserted_id = id.and_then(|v| Bson::try_from(v).ok());
        }
        if let Some(plan) = plan {
            let would = doc! {
                "nMatched": outcome.n_matched as i64,
                "nWouldModify": outcome.n_modified as i64,
                "nWouldUpsert": i64::from(outcome.upserted_id.is_some()),
            };
            plan.record("UPDATE", would);
        }
        Ok(outcome)
    }

    /// The document an upsert inserts: the query's equality fields, then the update applied.
    pub fn upsert_document(&self, filter: &Document, update: &Update) -> Result<Document> {
        let mut doc = nidus_query::update::upsert_seed(filter)?;
        let ctx = UpdateContext {
            matched_array_index: None,
            is_upsert_insert: true,
            now: bson::DateTime::now(),
            timestamp: bson::Timestamp {
                time: now_secs(),
                increment: 1,
            },
        };
        update.apply(&mut doc, &ctx)?;
        Ok(doc)
    }

    /// Applies an update to one record if it still matches. Returns None when it no longer
    /// matches (or is gone), Some(modified) otherwise.
    pub fn update_record(
        &self,
        coll: &CollectionRef,
        rid: u64,
        matcher: &Matcher,
        update: &Update,
        opts: &WriteOpts,
    ) -> Result<Option<bool>> {
        self.update_record_returning(coll, rid, matcher, update, opts)
            .map(|r| r.map(|(modified, _, _)| modified))
    }

    /// As [`Engine::update_record`], also returning the documents before and after.
    pub fn update_record_returning(
        &self,
        coll: &CollectionRef,
        rid: u64,
        matcher: &Matcher,
        update: &Update,
        opts: &WriteOpts,
    ) -> Result<Option<(bool, Document, Document)>> {
        self.check_not_oplog(coll)?;
        let meta = coll.meta.read();
        touch(opts, coll);
        let rkey = coll.records.key(rid);
        let mut reads = 0u64;
        let result = self.write_unit(opts, |txn, ops| {
            reads += 1;
            if reads > 1 {
                // A retry after a write conflict reads the document again.
                opctx::with(|op| op.add_examined(0, 1));
            }
            let Some(bytes) = txn.get_for_update(coll.records.space, &rkey)? else {
                return Ok(None);
            };
            let old_raw = RawDocument::from_bytes(&bytes)?;
            let Some(position) = matcher.matches_with_position(old_raw)? else {
                return Ok(None);
            };
            let old_doc = Document::try_from(old_raw)?;
            let mut new_doc = old_doc.clone();
            let ctx = UpdateContext {
                matched_array_index: position,
                is_upsert_insert: false,
                now: bson::DateTime::now(),
                timestamp: bson::Timestamp { time: now_secs(), increment: 1 },
            };
            let modified = update.apply(&mut new_doc, &ctx)?;
            let executed = Executed::Updated {
                modified,
                pre: stmt_record::images(opts, &old_doc),
                post: stmt_record::images(opts, &new_doc),
            };
            if !modified {
                stmt_record::record(txn, opts, executed)?;
                return Ok(Some((false, old_doc, new_doc, 0i64)));
            }
            if new_doc.get("_id") != old_doc.get("_id") {
                return Err(Error::new(
                    ErrorCode::ImmutableField,
                    "Performing an update on the path '_id' would modify the immutable field '_id'",
                ));
            }
            let new_raw = to_raw(&new_doc)?;
            check_storage_depth(&new_raw, false)?;
            if new_raw.as_bytes().len() > MAX_USER_DOC_SIZE {
                return Err(Error::new(
                    ErrorCode::BSONObjectTooLarge,
                    format!("BSONObj size: {} (0x{:X}) is invalid. Size must be between 0 and 16793600(16MB) First element: _id: {}", new_raw.as_bytes().len(), new_raw.as_bytes().len(), nidus_common::shell::format(new_doc.get("_id").unwrap_or(&Bson::Null))),
                ));
            }
            if let (Some(v), false) = (&meta.validator, opts.bypass_document_validation) {
                v.check_update(&coll.ns, old_raw, &new_raw)?;
            }
            self.rewrite_index_entries(txn, coll, &meta, old_raw, &new_raw, rid)?;
            txn.put(coll.records.space, &rkey, new_raw.as_bytes())?;
            self.log_op(ops, coll, &meta, opts, (Some(&old_doc), Some(&new_doc)), || {
                Ok(OplogEntry::update(&coll.ns, meta.uuid, &old_doc, &new_doc, update))
            })?;
            stmt_record::record(txn, opts, executed)?;
            let delta = new_raw.as_bytes().len() as i64 - bytes.len() as i64;
            Ok(Some((true, old_doc, new_doc, delta)))
        })?;
        Ok(result.map(|(modified, old, new, delta)| {
            self.adjust_stats(opts, coll, 0, delta);
            (modified, old, new)
        }))
    }

    /// Rewrites only the index entries whose keys changed.
    fn rewrite_index_entries(
        &self,
        txn: &mut dyn KvTxn,
        coll: &CollectionRef,
        meta: &CollectionMeta,
        old: &RawDocument,
        new: &RawDocument,
        rid: u64,
    ) -> Result<()> {
        let mut widened = false;
        for ix in meta.write_indexes() {
            if index::keys_unchanged(ix, old, new)? {
                continue;
            }
            let before = index::document_keys(ix, old)?;
            let (after, w) = index::document_keys_for_write(ix, new)?;
            widened |= w;
            let removed: IndexKeySet = before
                .iter()
                .filter(|(k, _)| !after.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let added: IndexKeySet = after
                .into_iter()
                .filter(|(k, _)| !before.contains_key(k))
                .collect();
            index::remove_keys(txn, ix, &removed, rid)?;
            index::insert_keys(txn, coll, ix, &added, rid)?;
            count_index_changes(added.len(), removed.len());
        }
        if widened {
            write_catalog_entry(txn, coll, meta)?;
        }
        Ok(())
    }

    /// Deletes the matching documents (at most one unless `multi`). Returns the count.
    pub fn delete(
        &self,
        coll: &CollectionRef,
        filter: &Document,
        multi: bool,
        hint: Option<Bson>,
        opts: &WriteOpts,
    ) -> Result<u64> {
        let opts = &*opts.under_default_collation(coll);
        let matcher = Arc::new(opts.filter_matcher(filter)?);
        let find = FindSpec {
            filter: filter.clone(),
            matcher: Some(matcher.clone()),
            limit: if multi { 0 } else { 1 },
            hint,
            deadline: opts.deadline,
            let_vars: opts.let_vars.clone(),
            collation: opts.collation.clone(),
            source: opts.txn.clone().map(ReadSource::Txn),
            record_ids_only: true,
            ..FindSpec::default()
        };
        let mut n = 0;
        let attempts = if multi { 1 } else { MAX_SINGLE_TARGET_RESTARTS };
        let mut plan = None;
        for _ in 0..attempts {
            let targets = self.target_ids(coll, &find, &mut plan)?;
            let found_any = !targets.is_empty();
            for rid in targets {
                if self.delete_record(coll, rid, &matcher, opts)?.is_some() {
                    n += 1;
                }
            }
            if n > 0 || !found_any {
                break;
            }
        }
        if let Some(plan) = plan {
            plan.record("DELETE", doc! { "nWouldDelete": n as i64 });
        }
        Ok(n)
    }

    /// Deletes one record if it still matches; returns the deleted document.
    pub fn delete_record(
        &self,
        coll: &CollectionRef,
        rid: u64,
        matcher: &Matcher,
        opts: &WriteOpts,
    ) -> Result<Option<Document>> {
        self.check_not_oplog(coll)?;
        let meta = coll.meta.read();
        touch(opts, coll);
        let rkey = coll.records.key(rid);
        let mut reads = 0u64;
        let deleted = self.write_unit(opts, |txn, ops| {
            reads += 1;
            if reads > 1 {
                opctx::with(|op| op.add_examined(0, 1));
            }
            let Some(bytes) = txn.get_for_update(coll.records.space, &rkey)? else {
                return Ok(None);
            };
            let raw = RawDocument::from_bytes(&bytes)?;
            if !matcher.matches(raw)? {
                return Ok(None);
            }
            for ix in meta.write_indexes() {
                let removed = index::document_keys(ix, raw)?;
                index::remove_keys(txn, ix, &removed, rid)?;
                count_index_changes(0, removed.len());
            }
            txn.delete(coll.records.space, &rkey)?;
            let doc = Document::try_from(raw)?;
            self.log_op(ops, coll, &meta, opts, (Some(&doc), None), || {
                Ok(OplogEntry::delete(&coll.ns, meta.uuid, &doc))
            })?;
            stmt_record::record(
                txn,
                opts,
                Executed::Deleted(stmt_record::images(opts, &doc)),
            )?;
            Ok(Some((doc, bytes.len() as i64)))
        })?;
        Ok(deleted.map(|(doc, len)| {
            self.adjust_stats(opts, coll, -1, -len);
            doc
        }))
    }
}

/// The plan a write statement found its targets with, for the profiler's `planSummary` and
/// `execStats` of the write.
struct TargetPlan {
    express: bool,
    summary: String,
    stats: Document,
    is_cached: bool,
    /// The operation's `execStats` is read (a profiled database): else left empty.
    wants_exec_stats: bool,
}

impl TargetPlan {
    /// Records the write's plan on the thread's operation: MongoDB 8.0's express write
    /// (`EXPRESS_IXSCAN { _id: 1 },EXPRESS_UPDATE`, one flat stage) for an `_id` lookup, else
    /// the write stage (`UPDATE`/`DELETE`) over the read plan.
    fn record(self, stage: &str, would: Document) {
        let Some(op) = opctx::current() else {
            return;
        };
        if !self.wants_exec_stats {
            let summary = match self.express {
                true => format!("{},EXPRESS_{stage}", self.summary),
                false => self.summary,
            };
            op.set_plan(opctx::PlanInfo {
                summary,
                exec_stats: Document::new(),
            });
            return;
        }
        let mut exec_stats = doc! { "isCached": self.is_cached };
        let summary = if self.express {
            let express = format!("EXPRESS_{stage}");
            exec_stats.insert("stage", express.clone());
            for field in ["keyPattern", "indexName", "keysExamined", "docsExamined"] {
                match (field, self.stats.get(field)) {
                    ("keyPattern", Some(k)) => {
                        exec_stats.insert(field, nidus_common::shell::format(k));
                    }
                    (_, Some(v)) => {
                        exec_stats.insert(field, v.clone());
                    }
                    _ => {}
                }
            }
            exec_stats.insert("nReturned", 0i64);
            let n = |f: &str| would.get_i64(f).unwrap_or(0);
            exec_stats.insert("nWouldModify", n("nWouldModify"));
            exec_stats.insert("nWouldUpsert", n("nWouldUpsert"));
            exec_stats.insert("nWouldDelete", n("nWouldDelete"));
            format!("{},{express}", self.summary)
        } else {
            exec_stats.insert("stage", stage);
            exec_stats.insert("nReturned", 0i64);
            exec_stats.extend(would);
            exec_stats.insert("inputStage", self.stats);
            self.summary
        };
        nidus_common::narrow_counters(&mut exec_stats);
        op.set_plan(opctx::PlanInfo {
            summary,
            exec_stats,
        });
    }
}

/// Counts index keys a write added and removed on the thread's operation.
fn count_index_changes(inserted: usize, deleted: usize) {
    if inserted > 0 || deleted > 0 {
        opctx::with(|op| op.add_index_changes(inserted as u64, deleted as u64));
    }
}

fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}
