//! Time-series collections (MongoDB's view-based form).
//!
//! `create` with `timeseries` makes two catalog entries through the ordinary DDL paths (so
//! the oplog and secondaries see both): the buckets collection `system.buckets.<name>`
//! (clustered by `_id`, options `{clusteredIndex: true, timeseries, expireAfterSeconds?}`)
//! and the view `<name>` on it with the pipeline `[{$_internalUnpackBucket: ...}]`. Reads
//! of the view therefore go through the view machinery: the unpack stage
//! (`pipeline/unpack_bucket.rs`) turns bucket documents into measurements, and the
//! optimizer rule `pipeline/optimize/timeseries_pushdown.rs` moves predicates on the
//! metaField and the time field into the bucket scan.
//!
//! Writes of measurements go to buckets (`bucket.rs`) through the ordinary insert and
//! update paths of the buckets collection. An in-memory catalog keeps each metaField
//! value's open bucket (the one later measurements of that meta and time span join);
//! inserts into one time-series collection are serialized by its catalog's lock. Deletes
//! and updates of measurements unpack the candidate buckets, and rewrite or delete them.

pub mod bucket;
pub mod options;

use crate::catalog::CollectionRef;
use crate::find::FindSpec;
use crate::namespace::Namespace;
use crate::view::ViewDef;
use crate::write::{prepare_insert, UpdateSpec, WriteOpts};
use crate::Engine;
use bson::{doc, Bson, Document};
pub use bucket::object_id_at;
use bucket::Bucket;
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use nidus_query::update::Update;
pub use options::TimeseriesOptions;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

pub const BUCKETS_PREFIX: &str = "system.buckets.";
pub const UNPACK_STAGE: &str = "$_internalUnpackBucket";

/// The buckets namespace of time-series namespace `ns`.
pub fn buckets_ns(ns: &Namespace) -> Namespace {
    Namespace::new(&ns.db, &format!("{BUCKETS_PREFIX}{}", ns.coll))
}

/// Open buckets of one time-series collection, by the measurements' metaField value.
#[derive(Default)]
pub struct OpenBuckets {
    by_meta: HashMap<Vec<u8>, Bucket>,
}

/// The open buckets of every time-series collection, by buckets collection id.
#[derive(Default)]
pub struct BucketCatalog {
    colls: Mutex<HashMap<u64, Arc<Mutex<OpenBuckets>>>>,
}

impl BucketCatalog {
    fn of(&self, coll_id: u64) -> Arc<Mutex<OpenBuckets>> {
        self.colls.lock().entry(coll_id).or_default().clone()
    }
}

/// A time-series collection: its buckets collection and options.
pub struct Timeseries {
    pub buckets: CollectionRef,
    pub options: TimeseriesOptions,
}

/// One measurement that could not be written: its index in the batch and why.
pub type MeasurementError = (usize, Error);

fn time_error(time_field: &str) -> Error {
    Error::bad_value(format!(
        "'{time_field}' must be present and contain a valid BSON UTC datetime value"
    ))
}

fn meta_key(meta: &Option<Bson>) -> Vec<u8> {
    match meta {
        None => Vec::new(),
        Some(v) => {
            let mut k = vec![1u8];
            k.extend(bson::to_vec(&doc! { "m": v.clone() }).unwrap_or_default());
            k
        }
    }
}

/// Whether a view is a time-series view (on `system.buckets.<its name>`, unpacking).
pub fn is_timeseries_view(v: &ViewDef) -> bool {
    v.view_on == format!("{BUCKETS_PREFIX}{}", v.ns.coll)
        && v.pipeline.len() == 1
        && v.pipeline[0].contains_key(UNPACK_STAGE)
}

impl Engine {
    /// The time-series collection named `ns` (the view's name), if it is one.
    pub fn timeseries(&self, ns: &Namespace) -> Option<Timeseries> {
        let view = self.view(ns)?;
        if !is_timeseries_view(&view) {
            return None;
        }
        let buckets = self.collection(&buckets_ns(ns))?;
        let options = buckets
            .meta
            .read()
            .options
            .get_document("timeseries")
            .ok()
            .and_then(TimeseriesOptions::from_document)?;
        Some(Timeseries { buckets, options })
    }

    /// `create` with `timeseries`: the buckets collection, then the view.
    pub fn create_timeseries(
        &self,
        ns: &Namespace,
        spec: Document,
        expire_after_seconds: Option<i64>,
        extra: Document,
    ) -> Result<()> {
        let options = TimeseriesOptions::parse(&spec, &ns.full())?;
        crate::namespace::validate_coll_name(&ns.db, &ns.coll)?;
        let bns = buckets_ns(ns);
        if let Some(existing) = self.timeseries(ns) {
            // Re-creating with identical options succeeds, as for collections.
            if existing.options == options {
                return Ok(());
            }
        }
        if self.collection(ns).is_some() || self.view(ns).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("namespace {ns} already exists"),
            ));
        }
        let mut coll_options = doc! { "clusteredIndex": true, "timeseries": options.to_document() };
        if let Some(e) = expire_after_seconds {
            coll_options.insert("expireAfterSeconds", e);
        }
        for (k, v) in extra {
            if k != "idIndex" {
                coll_options.insert(k, v);
            }
        }
        self.create_collection(&bns, coll_options)?;
        let view = ViewDef {
            ns: ns.clone(),
            view_on: bns.coll.clone(),
            pipeline: options.view_pipeline(),
            collation: None,
        };
        if let Err(e) = self.create_view(view) {
            let _ = self.drop_collection(&bns);
            return Err(e);
        }
        // MongoDB 6.3+ indexes {metaField: 1, timeField: 1} of a collection with a metaField.
        if let Some(m) = &options.meta_field {
            let user_key = doc! { m.as_str(): 1, options.time_field.as_str(): 1 };
            let spec = doc! {
                "key": bucket_index_key(&user_key, &options)?,
                "name": crate::index_spec::default_name(&user_key),
            };
            self.create_indexes(&bns, &[spec])?;
        }
        Ok(())
    }

    /// Drops a time-series collection (view and buckets); false if `ns` is not one.
    pub fn drop_timeseries(&self, ns: &Namespace) -> Result<bool> {
        let Some(ts) = self.timeseries(ns) else {
            return Ok(false);
        };
        self.drop_view(ns)?;
        self.buckets.colls.lock().remove(&ts.buckets.id);
        self.drop_collection(&buckets_ns(ns))?;
        Ok(true)
    }

    /// Inserts measurements into their buckets. `ordered`: stop at the first failure.
    /// Returns how many were inserted and the failures.
    pub fn timeseries_insert(
        &self,
        ts: &Timeseries,
        docs: &[Document],
        ordered: bool,
    ) -> (usize, Vec<MeasurementError>) {
        let open = self.buckets.of(ts.buckets.id);
        let mut open = open.lock();
        self.insert_locked(ts, &mut open, docs, ordered)
    }

    fn insert_locked(
        &self,
        ts: &Timeseries,
        open: &mut OpenBuckets,
        docs: &[Document],
        ordered: bool,
    ) -> (usize, Vec<MeasurementError>) {
        let opt = &ts.options;
        let mut errors = Vec::new();
        // Buckets this batch writes, in first-touched order, with whether each was stored
        // before and the measurements this batch added to it; buckets the batch closed
        // (a later measurement of their meta did not fit) wait in `closed`.
        let mut order: Vec<bson::oid::ObjectId> = Vec::new();
        let mut dirty: HashMap<bson::oid::ObjectId, (Vec<u8>, bool, Vec<Document>)> =
            HashMap::new();
        let mut closed: HashMap<bson::oid::ObjectId, Bucket> = HashMap::new();
        let mut accepted = Vec::new();
        for (i, d) in docs.iter().enumerate() {
            match self.prepare_measurement(opt, d) {
                Ok((time, meta, m, size)) => {
                    let key = meta_key(&meta);
                    let fits = open.by_meta.get(&key).is_some_and(|b| {
                        b.fits(time, opt.bucket_max_span_seconds, size) && b.meta == meta
                    });
                    if !fits {
                        // A stored bucket of this meta value with room for the time (after a
                        // restart, or after deletes and updates cleared the open buckets)
                        // takes it, as MongoDB's bucket reopening does; else a new one opens.
                        let skip = |id: &bson::oid::ObjectId| dirty.contains_key(id);
                        let b = match self.reopen_bucket(ts, time, &meta, size, skip) {
                            Ok(Some(b)) => b,
                            Ok(None) => Bucket::new(time, opt.bucket_rounding_seconds, meta),
                            Err(e) => {
                                errors.push((i, e));
                                if ordered {
                                    break;
                                }
                                continue;
                            }
                        };
                        if let Some(old) = open.by_meta.insert(key.clone(), b) {
                            if dirty.contains_key(&old.id) {
                                closed.insert(old.id, old);
                            }
                        }
                    }
                    let Some(b) = open.by_meta.get_mut(&key) else {
                        continue;
                    };
                    let stored = b.count > 0;
                    b.add(&m, &opt.time_field, size);
                    let entry = dirty.entry(b.id).or_insert_with(|| {
                        order.push(b.id);
                        (key.clone(), stored, Vec::new())
                    });
                    entry.2.push(m);
                    accepted.push(i);
                }
                Err(e) => {
                    errors.push((i, e));
                    if ordered {
                        break;
                    }
                }
            }
        }
        let mut touched = Vec::with_capacity(order.len());
        for id in order {
            let Some((key, stored, added)) = dirty.remove(&id) else {
                continue;
            };
            let bucket = match closed.remove(&id) {
                Some(b) => Some(b),
                None => open.by_meta.get(&key).filter(|b| b.id == id).cloned(),
            };
            if let Some(b) = bucket {
                touched.push((b, stored, added));
            }
        }
        let mut failed_from: Option<Error> = None;
        for (b, stored, added) in touched {
            if let Err(e) = self.write_bucket(ts, open, b, stored, &added) {
                failed_from.get_or_insert(e);
            }
        }
        if let Some(e) = failed_from {
            // A storage failure: report it on every measurement this batch accepted.
            open.by_meta.clear();
            errors.extend(accepted.iter().map(|i| (*i, e.clone())));
            errors.sort_by_key(|(i, _)| *i);
            return (0, errors);
        }
        (accepted.len(), errors)
    }

    /// A stored bucket that can take a measurement at `time_ms` of `size` bytes with meta
    /// value `meta`: its start within the span before the time, fewer than the maximum
    /// measurements and bytes; the latest such bucket, rebuilt from its measurements.
    /// Buckets `skip` names (written by this batch already) are not considered.
    fn reopen_bucket(
        &self,
        ts: &Timeseries,
        time_ms: i64,
        meta: &Option<Bson>,
        size: usize,
        skip: impl Fn(&bson::oid::ObjectId) -> bool,
    ) -> Result<Option<Bucket>> {
        let opt = &ts.options;
        let span_ms = opt.bucket_max_span_seconds.saturating_mul(1000);
        let secs = |ms: i64| ms.div_euclid(1000).clamp(0, u32::MAX as i64) as u32;
        let min_path = format!("control.min.{}", opt.time_field);
        let lo = bson::DateTime::from_millis(time_ms.saturating_sub(span_ms));
        let hi = bson::DateTime::from_millis(time_ms);
        // The `_id` range bounds the clustered scan; control.min holds the exact start.
        let mut filter = doc! {
            "_id": {
                "$gte": object_id_at(secs(time_ms.saturating_sub(span_ms)), false),
                "$lte": object_id_at(secs(time_ms), true),
            },
            min_path.as_str(): { "$gt": lo, "$lte": hi },
        };
        match meta {
            Some(m) => filter.insert("meta", doc! { "$eq": m.clone() }),
            None => filter.insert("meta", doc! { "$exists": false }),
        };
        let find = FindSpec {
            filter,
            ..FindSpec::default()
        };
        let mut exec = self.plan_find(Some(&ts.buckets), &find)?;
        let mut best: Option<Bucket> = None;
        while let Some(raw) = exec.next_doc()? {
            let d = raw
                .to_document()
                .map_err(|e| Error::internal(e.to_string()))?;
            let Some(Bson::ObjectId(id)) = d.get("_id").cloned() else {
                continue;
            };
            // Another meta value equal in BSON order (1 and 1.0) keeps its own buckets.
            if skip(&id) || meta_key(&d.get("meta").cloned()) != meta_key(meta) {
                continue;
            }
            let Ok(start) = d
                .get_document("control")
                .and_then(|c| c.get_document("min"))
                .and_then(|m| m.get_datetime(&opt.time_field))
            else {
                continue;
            };
            let start_ms = start.timestamp_millis();
            if best.as_ref().is_some_and(|b| b.start_ms >= start_ms) {
                continue;
            }
            let mut b = Bucket::reopen(id, start_ms, meta.clone());
            for mut m in bucket::unpack(&d, &opt.time_field, opt.meta_field.as_deref()) {
                if let Some(f) = &opt.meta_field {
                    m.remove(f);
                }
                let n = bson::to_vec(&m).map(|v| v.len()).unwrap_or(0);
                b.add(&m, &opt.time_field, n);
            }
            if b.count > 0 && b.fits(time_ms, opt.bucket_max_span_seconds, size) {
                best = Some(b);
            }
        }
        Ok(best)
    }

    /// The measurement's time (ms), meta value, the document stored in the bucket (the
    /// measurement with an `_id`, without its metaField) and its size.
    fn prepare_measurement(
        &self,
        opt: &TimeseriesOptions,
        d: &Document,
    ) -> Result<(i64, Option<Bson>, Document, usize)> {
        let time = match d.get(&opt.time_field) {
            Some(Bson::DateTime(t)) => t.timestamp_millis(),
            _ => return Err(time_error(&opt.time_field)),
        };
        let raw =
            nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))?;
        crate::write::check_storage_depth(&raw, true)?;
        let mut m = d.clone();
        if !m.contains_key("_id") {
            m.insert("_id", bson::oid::ObjectId::new());
        }
        let meta = match &opt.meta_field {
            Some(f) => m.remove(f),
            None => None,
        };
        let size = bson::to_vec(&m).map(|b| b.len()).unwrap_or(0);
        Ok((time, meta, m, size))
    }

    /// Writes a bucket: an insert when new, else the new `control` and `data` (or, when the
    /// stored bucket went away, for example expired by TTL, new buckets of this batch's
    /// measurements only).
    fn write_bucket(
        &self,
        ts: &Timeseries,
        open: &mut OpenBuckets,
        b: Bucket,
        stored: bool,
        added: &[Document],
    ) -> Result<()> {
        let opts = WriteOpts::default();
        let doc = b.to_document();
        if !stored {
            let raw = nidus_common::encode::document_to_raw(&doc)
                .map_err(|e| Error::internal(e.to_string()))?;
            return self.insert_one(&ts.buckets, &prepare_insert(&raw)?, &opts);
        }
        let set = doc! {
            "control": doc.get("control").cloned().unwrap_or(Bson::Null),
            "data": doc.get("data").cloned().unwrap_or(Bson::Null),
        };
        let spec = UpdateSpec {
            filter: doc! { "_id": b.id },
            update: Update::parse(&Bson::Document(doc! { "$set": set }), None)?,
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        if self.update(&ts.buckets, &spec, &opts)?.n_matched > 0 {
            return Ok(());
        }
        let fresh = bucket::rebuild(
            added,
            &ts.options.time_field,
            b.meta.clone(),
            ts.options.bucket_max_span_seconds,
            ts.options.bucket_rounding_seconds,
        );
        let key = meta_key(&b.meta);
        open.by_meta.remove(&key);
        for nb in &fresh {
            let raw = nidus_common::encode::document_to_raw(&nb.to_document())
                .map_err(|e| Error::internal(e.to_string()))?;
            self.insert_one(&ts.buckets, &prepare_insert(&raw)?, &opts)?;
        }
        if let Some(last) = fresh.into_iter().last() {
            open.by_meta.insert(key, last);
        }
        Ok(())
    }

    /// The bucket documents that may hold measurements matching `filter`.
    fn candidate_buckets(
        &self,
        ts: &Timeseries,
        filter: &Document,
        opts: &WriteOpts,
    ) -> Result<Vec<Document>> {
        let opt = &ts.options;
        let bucket_filter = pushdown::bucket_filter(
            filter,
            &opt.time_field,
            opt.meta_field.as_deref(),
            opt.bucket_max_span_seconds,
        )
        .unwrap_or_default();
        let find = FindSpec {
            filter: bucket_filter,
            collation: opts.collation.clone(),
            ..FindSpec::default()
        };
        let mut exec = self.plan_find(Some(&ts.buckets), &find)?;
        let mut out = Vec::new();
        while let Some(d) = exec.next_doc()? {
            out.push(
                d.to_document()
                    .map_err(|e| Error::internal(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Replaces bucket `old` by the measurements kept (deleted when none).
    fn rewrite_bucket(&self, ts: &Timeseries, old: &Document, kept: &[Document]) -> Result<()> {
        let opts = WriteOpts::default();
        let Some(Bson::ObjectId(id)) = old.get("_id").cloned() else {
            return Ok(());
        };
        let filter = doc! { "_id": id };
        if kept.is_empty() {
            self.delete(&ts.buckets, &filter, false, None, &opts)?;
            return Ok(());
        }
        let meta = old.get("meta").cloned();
        // The bucket's start is its control.min time (the `_id`'s seconds clamp pre-1970).
        let start_ms = old
            .get_document("control")
            .and_then(|c| c.get_document("min"))
            .and_then(|m| m.get_datetime(&ts.options.time_field))
            .map(|t| t.timestamp_millis())
            .unwrap_or_else(|_| id.timestamp().timestamp_millis());
        let mut b = Bucket::reopen(id, start_ms, meta);
        for m in kept {
            let mut stored = m.clone();
            if let Some(f) = &ts.options.meta_field {
                stored.remove(f);
            }
            let size = bson::to_vec(&stored).map(|v| v.len()).unwrap_or(0);
            b.add(&stored, &ts.options.time_field, size);
        }
        let spec = UpdateSpec {
            filter,
            update: Update::Replacement(b.to_document()),
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        self.update(&ts.buckets, &spec, &opts)?;
        Ok(())
    }

    /// Deletes the measurements `filter` matches (at most one unless `multi`).
    pub fn timeseries_delete(
        &self,
        ts: &Timeseries,
        filter: &Document,
        multi: bool,
        opts: &WriteOpts,
    ) -> Result<u64> {
        let matcher = opts.filter_matcher(filter)?;
        let open = self.buckets.of(ts.buckets.id);
        let mut open = open.lock();
        // Buckets are rewritten below: no open bucket may keep a stale copy.
        open.by_meta.clear();
        let mut n = 0u64;
        for bucket in self.candidate_buckets(ts, filter, opts)? {
            let measurements = self.unpack(ts, &bucket);
            let mut kept = Vec::with_capacity(measurements.len());
            let mut deleted = 0;
            for m in measurements {
                let done = !multi && n + deleted > 0;
                if !done && matches(&matcher, &m)? {
                    deleted += 1;
                } else {
                    kept.push(m);
                }
            }
            if deleted > 0 {
                self.rewrite_bucket(ts, &bucket, &kept)?;
                n += deleted;
            }
            if !multi && n > 0 {
                break;
            }
        }
        Ok(n)
    }

    /// Updates the measurements `spec.filter` matches: each updated measurement leaves its
    /// bucket and is inserted again (into the bucket its new meta and time call for).
    /// Returns (matched, modified, upserted `_id`).
    pub fn timeseries_update(
        &self,
        ts: &Timeseries,
        spec: &UpdateSpec,
        opts: &WriteOpts,
    ) -> Result<(u64, u64, Option<Bson>)> {
        let matcher = opts.filter_matcher(&spec.filter)?;
        let open = self.buckets.of(ts.buckets.id);
        let mut open = open.lock();
        open.by_meta.clear();
        let ctx = nidus_query::update::UpdateContext {
            matched_array_index: None,
            is_upsert_insert: false,
            now: bson::DateTime::now(),
            timestamp: bson::Timestamp {
                time: (bson::DateTime::now().timestamp_millis() / 1000) as u32,
                increment: 1,
            },
        };
        let (mut matched, mut modified) = (0u64, 0u64);
        for bucket in self.candidate_buckets(ts, &spec.filter, opts)? {
            let measurements = self.unpack(ts, &bucket);
            let mut kept = Vec::with_capacity(measurements.len());
            let mut moved = Vec::new();
            for m in measurements {
                let done = !spec.multi && matched > 0;
                if done || !matches(&matcher, &m)? {
                    kept.push(m);
                    continue;
                }
                matched += 1;
                let mut new = m.clone();
                if spec.update.apply(&mut new, &ctx)? {
                    if !matches!(new.get(&ts.options.time_field), Some(Bson::DateTime(_))) {
                        return Err(time_error(&ts.options.time_field));
                    }
                    modified += 1;
                    moved.push(new);
                } else {
                    kept.push(m);
                }
            }
            if !moved.is_empty() {
                self.rewrite_bucket(ts, &bucket, &kept)?;
                let (_, errors) = self.insert_locked(ts, &mut open, &moved, true);
                if let Some((_, e)) = errors.into_iter().next() {
                    return Err(e);
                }
            }
            if !spec.multi && matched > 0 {
                break;
            }
        }
        if matched == 0 && spec.upsert {
            let d = self.upsert_document(&spec.filter, &spec.update)?;
            let mut d = d;
            if !d.contains_key("_id") {
                let mut with_id = doc! { "_id": bson::oid::ObjectId::new() };
                with_id.extend(d);
                d = with_id;
            }
            let id = d.get("_id").cloned();
            let (_, errors) = self.insert_locked(ts, &mut open, &[d], true);
            if let Some((_, e)) = errors.into_iter().next() {
                return Err(e);
            }
            return Ok((0, 0, id));
        }
        Ok((matched, modified, None))
    }

    fn unpack(&self, ts: &Timeseries, bucket: &Document) -> Vec<Document> {
        bucket::unpack(
            bucket,
            &ts.options.time_field,
            ts.options.meta_field.as_deref(),
        )
    }
}

fn matches(matcher: &Matcher, d: &Document) -> Result<bool> {
    let raw =
        nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))?;
    matcher.matches(&raw)
}

pub mod pushdown;

/// The buckets collection's key for a time-series index key (MongoDB's
/// `createBucketsIndexSpecFromTimeseriesIndexSpec`): the metaField (or a path below it)
/// becomes `meta`, any other field `f` becomes `control.min.f` then `control.max.f` for an
/// ascending key, `control.max.f` then `control.min.f` for a descending one.
pub fn bucket_index_key(key: &Document, opt: &TimeseriesOptions) -> Result<Document> {
    let mut out = Document::new();
    for (k, v) in key {
        if let Some(rest) = opt.meta_field.as_deref().and_then(|m| {
            (k == m)
                .then(String::new)
                .or_else(|| k.strip_prefix(&format!("{m}.")).map(|r| format!(".{r}")))
        }) {
            out.insert(format!("meta{rest}"), v.clone());
            continue;
        }
        let dir = match crate::clustered::as_i64(v) {
            Some(n) if n != 0 => n,
            _ => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!(
                        "Unable to create index for time-series collection: invalid key for a measurement field: {}",
                        nidus_common::shell::format(&Bson::Document(key.clone()))
                    ),
                ))
            }
        };
        let (first, second) = if dir > 0 {
            ("min", "max")
        } else {
            ("max", "min")
        };
        out.insert(format!("control.{first}.{k}"), v.clone());
        out.insert(format!("control.{second}.{k}"), v.clone());
    }
    Ok(out)
}

/// The time-series form of a buckets index key (the inverse of [`bucket_index_key`]).
pub fn user_index_key(key: &Document, opt: &TimeseriesOptions) -> Document {
    let mut out = Document::new();
    let mut skip_next = false;
    for (k, v) in key {
        if skip_next {
            skip_next = false;
            continue;
        }
        if let (Some(m), Some(rest)) = (
            &opt.meta_field,
            (k == "meta")
                .then(String::new)
                .or_else(|| k.strip_prefix("meta.").map(|r| format!(".{r}"))),
        ) {
            out.insert(format!("{m}{rest}"), v.clone());
        } else if let Some(f) = k
            .strip_prefix("control.min.")
            .or_else(|| k.strip_prefix("control.max."))
        {
            out.insert(f.to_string(), v.clone());
            skip_next = true;
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}
