//! The catalog: collections, their options and index specs, persisted in the catalog space.
//!
//! The in-memory map is the source of truth while running; every change is written to the
//! catalog space in the same storage transaction as the data it describes (index builds) or in
//! its own transaction (create/drop), under the engine's DDL lock, so DDL is serialized.

use crate::namespace::Namespace;
use crate::validation::Validator;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{keys, Space};
use parking_lot::RwLock;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

pub const ID_INDEX_NAME: &str = "_id_";
const COLL_PREFIX: &[u8] = b"coll\0";
pub const NEXT_ID_KEY: &[u8] = b"meta\0next_id";

/// A parsed index: its storage id, the spec `listIndexes` prints, and the key pattern.
#[derive(Debug, Clone)]
pub struct IndexMeta {
    pub id: u64,
    pub name: String,
    /// Paths with direction: `true` = descending. Shared by every clone (a plan carries a
    /// clone of each index it reads).
    pub pattern: Arc<[(String, bool)]>,
    pub unique: bool,
    pub sparse: bool,
    /// The spec as the user gave it, normalized (`v`, `key`, `name`, options); shared by
    /// every clone, copied by the rare change of an index's options (`collMod`).
    pub spec: Arc<Document>,
    /// Per key field, the positions of its path components that hold arrays in some
    /// document (MongoDB's `multiKeyPaths`). Shared by every clone of this index's metadata,
    /// only ever widened: writers widen it before they commit, so a plan never assumes less.
    pub multikey_paths: Arc<RwLock<Vec<BTreeSet<usize>>>>,
    /// Set while the index is being built (`ddl.rs`): writers maintain its keys, the
    /// planner does not see it, and unique-key collisions are recorded, not refused.
    pub build: Option<Arc<IndexBuild>>,
    /// The index's collation (None = simple): string keys are its collation keys.
    pub collation: Option<nidus_doc::collation::Collation>,
    /// `partialFilterExpression` parsed (with the index's collation): documents it does not
    /// match have no entry in the index.
    pub partial: Option<Arc<nidus_query::matcher::Matcher>>,
    /// The key field (by position) whose value the index stores as its hash
    /// (`nidus_doc::hashed::hash64`), for `{a: "hashed"}` and compound hashed indexes.
    pub hashed: Option<usize>,
    /// The `2dsphere` key field (by position): its keys are S2 cell ids (`geo_keys.rs`).
    pub geo: Option<usize>,
    /// A `2d` index's grid (its geo field is the first): keys are GeoHashes (`geo_keys.rs`).
    pub twod: Option<Arc<nidus_doc::geo::flat::TwoDParams>>,
    /// A text index's spec (key pattern `{..prefix, _fts: "text", _ftsx: 1, ..suffix}`):
    /// keys are (prefix values, term, score, suffix values); only `$text` uses the index.
    pub text: Option<Arc<nidus_doc::text::TextSpec>>,
    /// The key pattern as plan summaries print it (`{ _id: 1 }`), formatted once and shared
    /// by every clone (a point read's plan carries a clone of its index).
    key_text: Arc<std::sync::OnceLock<String>>,
}

/// The state writers share with an index build in progress.
#[derive(Debug, Default)]
pub struct IndexBuild {
    /// Keys (keystring, record id) that found another record's entry in a unique index
    /// being built: rechecked when the build commits (MongoDB's constraint violations).
    violations: parking_lot::Mutex<Vec<(Vec<u8>, u64)>>,
}

impl IndexBuild {
    pub fn record_violation(&self, ks: Vec<u8>, rid: u64) {
        self.violations.lock().push((ks, rid));
    }

    pub fn take_violations(&self) -> Vec<(Vec<u8>, u64)> {
        std::mem::take(&mut *self.violations.lock())
    }
}

impl IndexMeta {
    pub fn key_document(&self) -> Document {
        self.spec.get_document("key").cloned().unwrap_or_default()
    }

    /// [`IndexMeta::key_document`] as `nidus_common::shell::format` prints it.
    pub fn key_text(&self) -> &str {
        self.key_text
            .get_or_init(|| nidus_common::shell::format(&bson::Bson::Document(self.key_document())))
    }

    pub fn is_id(&self) -> bool {
        self.name == ID_INDEX_NAME
    }

    pub fn from_persisted(d: &Document) -> Result<IndexMeta> {
        let spec = d.get_document("spec").map_err(corrupt)?.clone();
        let meta = IndexMeta::from_spec(d.get_i64("id").map_err(corrupt)? as u64, spec)?;
        if let Ok(paths) = d.get_array("multiKeyPaths") {
            meta.widen_multikey(&parse_multikey_paths(paths));
        }
        Ok(meta)
    }

    pub fn to_persisted(&self) -> Document {
        let mut d = doc! {
            "id": self.id as i64,
            "spec": (*self.spec).clone(),
            "multiKeyPaths": self.multikey_paths_persisted(),
        };
        if self.build.is_some() {
            d.insert("building", true);
        }
        d
    }

    pub fn is_building(&self) -> bool {
        self.build.is_some()
    }

    /// `[[0], [], ...]`: the positions per field, as stored in the catalog.
    pub fn multikey_paths_persisted(&self) -> Vec<Bson> {
        self.multikey_paths
            .read()
            .iter()
            .map(|set| Bson::Array(set.iter().map(|p| Bson::Int32(*p as i32)).collect()))
            .collect()
    }

    pub fn is_multikey(&self) -> bool {
        self.multikey_paths.read().iter().any(|s| !s.is_empty())
    }

    /// Adds path positions seen in a document; true when that widened what was known.
    pub fn widen_multikey(&self, paths: &[Vec<usize>]) -> bool {
        if paths.iter().all(|p| p.is_empty()) {
            return false;
        }
        {
            let known = self.multikey_paths.read();
            let covered = paths
                .iter()
                .zip(known.iter())
                .all(|(new, old)| new.iter().all(|p| old.contains(p)));
            if covered {
                return false;
            }
        }
        let mut known = self.multikey_paths.write();
        for (new, old) in paths.iter().zip(known.iter_mut()) {
            old.extend(new.iter().copied());
        }
        true
    }

    /// The path component positions of key field `field` known to hold arrays.
    pub fn multikey_components(&self, field: usize) -> BTreeSet<usize> {
        self.multikey_paths
            .read()
            .get(field)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether key field `field` holds geo keys (S2 cells or GeoHashes) rather than values.
    pub fn is_geo_field(&self, field: usize) -> bool {
        self.geo == Some(field) || (field == 0 && self.twod.is_some())
    }

    pub fn is_hashed_field(&self, field: usize) -> bool {
        self.hashed == Some(field)
    }

    pub fn is_hidden(&self) -> bool {
        self.spec.get_bool("hidden").unwrap_or(false)
    }

    pub fn is_partial(&self) -> bool {
        self.partial.is_some()
    }

    /// Whether the index holds the document's keys: every document, or those its partial
    /// filter matches.
    pub fn covers_document(&self, doc: &bson::RawDocument) -> Result<bool> {
        match &self.partial {
            Some(m) => m.matches(doc),
            None => Ok(true),
        }
    }

    /// The index fields of an IXSCAN in explain: `keyPattern` ... `indexVersion`.
    pub fn explain_fields(&self) -> Document {
        let known = self.multikey_paths.read();
        let mut paths = Document::new();
        for ((field, _), positions) in self.pattern.iter().zip(known.iter()) {
            let parts: Vec<&str> = field.split('.').collect();
            let prefixes: Vec<Bson> = positions
                .iter()
                .map(|p| Bson::String(parts[..=(*p).min(parts.len() - 1)].join(".")))
                .collect();
            paths.insert(field.clone(), prefixes);
        }
        let mut d = doc! {
            "keyPattern": self.key_document(),
            "indexName": self.name.clone(),
        };
        if let Some(c) = &self.collation {
            d.insert("collation", c.to_document());
        }
        d.extend(doc! {
            "isMultiKey": known.iter().any(|s| !s.is_empty()),
            "multiKeyPaths": paths,
            "isUnique": self.unique,
            "isSparse": self.sparse,
            "isPartial": self.is_partial(),
            "indexVersion": self.spec.get_i32("v").unwrap_or(2),
        });
        d
    }

    /// Parses a normalized spec; key pattern validation happens in `index_spec::normalize`.
    pub fn from_spec(id: u64, spec: Document) -> Result<IndexMeta> {
        let key = spec.get_document("key").map_err(corrupt)?;
        let pattern = key
            .iter()
            .map(|(k, v)| (k.clone(), direction_is_descending(v)))
            .collect();
        let hashed = key
            .iter()
            .position(|(_, v)| matches!(v, Bson::String(s) if s == "hashed"));
        let geo = key
            .iter()
            .position(|(_, v)| matches!(v, Bson::String(s) if s == "2dsphere"));
        let twod = match key
            .values()
            .any(|v| matches!(v, Bson::String(s) if s == "2d"))
        {
            true => Some(Arc::new(
                crate::geo_keys::twod_params(&spec).map_err(corrupt)?,
            )),
            false => None,
        };
        let name = spec.get_str("name").map_err(corrupt)?.to_string();
        let collation = match spec.get_document("collation") {
            Ok(c) => nidus_doc::collation::Collation::parse(c)?,
            Err(_) => None,
        };
        let partial = match spec.get_document("partialFilterExpression") {
            Ok(f) => Some(Arc::new(parse_partial_filter(f, collation.as_ref())?)),
            Err(_) => None,
        };
        Ok(IndexMeta {
            id,
            // The `_id` index is unique without saying so in its spec.
            unique: spec.get_bool("unique").unwrap_or(false) || name == ID_INDEX_NAME,
            name,
            pattern,
            sparse: spec.get_bool("sparse").unwrap_or(false),
            multikey_paths: Arc::new(RwLock::new(vec![BTreeSet::new(); key.len()])),
            build: None,
            collation,
            partial,
            hashed,
            geo,
            twod,
            text: crate::text::index_text_spec(&spec)?,
            spec: Arc::new(spec),
            key_text: Arc::default(),
        })
    }
}

/// Parses a `partialFilterExpression` with the index's collation, as MongoDB's index catalog
/// does (`index_spec::normalize` has checked which expressions it holds).
fn parse_partial_filter(
    filter: &Document,
    collation: Option<&nidus_doc::collation::Collation>,
) -> Result<nidus_query::matcher::Matcher> {
    let opts = nidus_query::matcher::ParseOptions {
        collation,
        ..Default::default()
    };
    nidus_query::matcher::Matcher::parse_with(filter, &opts)
}

fn parse_multikey_paths(paths: &[Bson]) -> Vec<Vec<usize>> {
    paths
        .iter()
        .map(|p| match p {
            Bson::Array(items) => items
                .iter()
                .filter_map(|i| i.as_i32().map(|n| n as usize))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

pub fn direction_is_descending(v: &Bson) -> bool {
    match v {
        Bson::Int32(n) => *n < 0,
        Bson::Int64(n) => *n < 0,
        Bson::Double(n) => *n < 0.0,
        _ => false,
    }
}

fn corrupt<E: std::fmt::Display>(e: E) -> Error {
    Error::internal(format!("corrupt catalog entry: {e}"))
}

/// Mutable description of a collection. Writers hold a read guard on it for the whole
/// write so that DDL (index builds, drops) sees no write in flight.
#[derive(Debug, Clone)]
pub struct CollectionMeta {
    pub uuid: bson::Uuid,
    pub options: Document,
    /// `options.validator` parsed (None without one).
    pub validator: Option<Arc<Validator>>,
    /// Ready indexes: the ones queries may use and `listIndexes` shows.
    pub indexes: Vec<IndexMeta>,
    /// Indexes being built: writers maintain them, nothing reads them.
    pub building: Vec<IndexMeta>,
    pub dropped: bool,
}

impl CollectionMeta {
    /// Every index writers maintain: the ready ones, then those being built.
    pub fn write_indexes(&self) -> impl Iterator<Item = &IndexMeta> {
        self.indexes.iter().chain(self.building.iter())
    }
}

/// Where a collection's documents are: the space, and the collection's id that begins each
/// key (`id ++ record id`). The oplog's entries are in their own space (see `Space::Oplog`),
/// every other collection's in `Space::Records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordStore {
    pub space: Space,
    pub id: u64,
}

impl RecordStore {
    pub fn of(ns: &Namespace, id: u64) -> RecordStore {
        let oplog = ns.db == crate::oplog::OPLOG_DB && ns.coll == crate::oplog::OPLOG_COLL;
        RecordStore {
            space: if oplog { Space::Oplog } else { Space::Records },
            id,
        }
    }

    /// The key of record `rid`.
    pub fn key(self, rid: u64) -> [u8; 16] {
        keys::with_id(self.id, rid)
    }

    /// The bounds `[lower, upper)` of every key of the collection.
    pub fn lower(self) -> [u8; 8] {
        keys::u64_be(self.id)
    }

    pub fn upper(self) -> [u8; 8] {
        keys::prefix_end(self.id)
    }
}

/// Moves up to `limit` records of collection `to.id` from space `from` to `to.space` in `txn`
/// (each deleted from `from`); returns how many it moved.
pub fn move_records(
    txn: &mut dyn nidus_storage::KvTxn,
    to: RecordStore,
    from: Space,
    limit: usize,
) -> Result<usize> {
    let batch: Vec<(Vec<u8>, Vec<u8>)> = {
        let mut c = txn.cursor(from, &to.lower(), &to.upper());
        c.seek_to_first();
        let mut out = Vec::new();
        while c.valid() && out.len() < limit {
            out.push((c.key().to_vec(), c.value().to_vec()));
            c.next();
        }
        c.status()?;
        out
    };
    for (k, v) in &batch {
        txn.put(to.space, k, v)?;
        txn.delete(from, k)?;
    }
    Ok(batch.len())
}

/// One collection: immutable identity plus its guarded metadata and in-memory counters.
#[derive(Debug)]
pub struct Collection {
    pub id: u64,
    pub ns: Namespace,
    /// Decided by the namespace: a rename that changes it moves the records (`ddl.rs`).
    pub records: RecordStore,
    pub meta: RwLock<CollectionMeta>,
    next_record_id: AtomicU64,
    /// Document count and data size, kept in memory (no hot counter key in the write path).
    pub count: AtomicI64,
    pub data_size: AtomicI64,
    pub plan_cache: crate::plan::cache::PlanCache,
    /// Capped collections: inserts are serialized (natural order = commit order) and wake
    /// tailable cursors waiting for data (`capped.rs`).
    pub capped: crate::capped::CappedState,
    /// Multi-document transactions that wrote here and are still open; an index build
    /// waits for those open when it registered (their writes predate its key maintenance).
    open_txns: parking_lot::Mutex<BTreeSet<u64>>,
    txn_ended: parking_lot::Condvar,
    /// `create`'s `collation` (no command changes it): read by every operation, so kept
    /// outside `meta`'s lock.
    default_collation: Option<Document>,
}

impl Collection {
    /// The collection's default collation (`create`'s `collation`, stored resolved; absent
    /// for the simple collation): what its operations and new indexes use unless they name
    /// one.
    pub fn default_collation(&self) -> Option<Document> {
        self.default_collation.clone()
    }

    pub fn new(id: u64, ns: Namespace, meta: CollectionMeta, next_record_id: u64) -> Collection {
        let default_collation = meta.options.get_document("collation").ok().cloned();
        Collection {
            default_collation,
            id,
            records: RecordStore::of(&ns, id),
            ns,
            meta: RwLock::new(meta),
            next_record_id: AtomicU64::new(next_record_id),
            count: AtomicI64::new(0),
            data_size: AtomicI64::new(0),
            plan_cache: Default::default(),
            capped: Default::default(),
            open_txns: Default::default(),
            txn_ended: Default::default(),
        }
    }

    /// A transaction writes here (called under the metadata read guard, before the write).
    pub fn txn_touch(&self, txn_id: u64) {
        self.open_txns.lock().insert(txn_id);
    }

    /// A transaction that wrote here committed or aborted.
    pub fn txn_ended(&self, txn_id: u64) {
        if self.open_txns.lock().remove(&txn_id) {
            self.txn_ended.notify_all();
        }
    }

    /// The open transactions that wrote here.
    pub fn open_txn_ids(&self) -> BTreeSet<u64> {
        self.open_txns.lock().clone()
    }

    /// Waits until none of `ids` is open any more, or `stop` says to give up.
    pub fn wait_for_txns(&self, ids: &BTreeSet<u64>, stop: impl Fn() -> bool) {
        let mut open = self.open_txns.lock();
        while open.iter().any(|id| ids.contains(id)) && !stop() {
            self.txn_ended
                .wait_for(&mut open, std::time::Duration::from_millis(100));
        }
    }

    /// RecordIds grow with insertion, so natural order is insertion order.
    pub fn allocate_record_id(&self) -> u64 {
        self.next_record_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn catalog_key(&self) -> Vec<u8> {
        catalog_key(&self.ns)
    }

    /// `capped: true` in the collection's options.
    /// Callers may already hold `meta` for reading (planning does): a recursive read, so a
    /// writer queued on `meta` (an index build) cannot deadlock against the outer guard.
    pub fn is_capped(&self) -> bool {
        crate::capped::CappedLimits::of(&self.meta.read_recursive().options).is_some()
    }

    pub fn adjust_stats(&self, docs: i64, bytes: i64) {
        self.count.fetch_add(docs, Ordering::Relaxed);
        self.data_size.fetch_add(bytes, Ordering::Relaxed);
    }
}

pub fn catalog_key(ns: &Namespace) -> Vec<u8> {
    let mut k = COLL_PREFIX.to_vec();
    k.extend_from_slice(ns.db.as_bytes());
    k.push(0);
    k.extend_from_slice(ns.coll.as_bytes());
    k
}

pub fn catalog_prefix() -> &'static [u8] {
    COLL_PREFIX
}

/// Serialized form of a collection's catalog entry.
pub fn entry_document(id: u64, ns: &Namespace, meta: &CollectionMeta) -> Document {
    doc! {
        "ns": ns.full(),
        "id": id as i64,
        "uuid": meta.uuid,
        "options": meta.options.clone(),
        "indexes": meta.write_indexes().map(|i| Bson::Document(i.to_persisted())).collect::<Vec<_>>(),
    }
}

pub fn parse_entry(d: &Document) -> Result<(u64, Namespace, CollectionMeta)> {
    let ns = Namespace::parse(d.get_str("ns").map_err(corrupt)?)?;
    let id = d.get_i64("id").map_err(corrupt)? as u64;
    let uuid = match d.get("uuid") {
        Some(Bson::Binary(b)) => {
            bson::Uuid::from_bytes(b.bytes.as_slice().try_into().map_err(corrupt)?)
        }
        _ => return Err(corrupt("missing uuid")),
    };
    let mut indexes = Vec::new();
    let mut building = Vec::new();
    for b in d.get_array("indexes").map_err(corrupt)? {
        let Bson::Document(d) = b else {
            return Err(corrupt("index entry"));
        };
        let mut ix = IndexMeta::from_persisted(d)?;
        if d.get_bool("building").unwrap_or(false) {
            // A build the last run did not finish: restarted at start-up (`ddl.rs`).
            ix.build = Some(Arc::default());
            building.push(ix);
        } else {
            indexes.push(ix);
        }
    }
    Ok((id, ns, {
        let options = d.get_document("options").cloned().unwrap_or_default();
        // Validators are checked by `create`; one that no longer parses (stored by an
        // older build) must not keep the server from starting, so it is not enforced.
        let validator = Validator::from_options(&options).unwrap_or(None);
        CollectionMeta {
            uuid,
            options,
            validator,
            indexes,
            building,
            dropped: false,
        }
    }))
}

/// The `_id` index every collection has.
pub fn id_index_spec() -> Document {
    doc! { "v": 2, "key": { "_id": 1 }, "name": ID_INDEX_NAME }
}

/// The `_id` index of a collection with `options`: with the collection's default collation,
/// as MongoDB builds it.
pub fn id_index_spec_for(options: &Document) -> Document {
    let mut spec = id_index_spec();
    if let Ok(c) = options.get_document("collation") {
        spec.insert("collation", c.clone());
    }
    spec
}

pub fn namespace_not_found(ns: &Namespace) -> Error {
    Error::new(ErrorCode::NamespaceNotFound, format!("ns not found: {ns}"))
}

pub type CollectionRef = Arc<Collection>;
