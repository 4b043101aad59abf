//! The plan cache (MongoDB's classic `PlanCache`): per collection, the winning index of a
//! multi-planned query shape, so the next query of that shape skips the race.
//!
//! An entry starts inactive with the works its winner needed in the trial. The same shape
//! planned again activates it when the new winner needs no more works; otherwise the entry's
//! works double (`internalQueryCacheWorksGrowthCoefficient`). An active entry's plan runs
//! alone, and is replanned when it needs more than ten times its works
//! (`internalQueryCacheEvictionRatio`) before producing a first batch.

use crate::catalog::IndexMeta;
use bson::{doc, Bson, DateTime, Document};
use nidus_doc::compare::type_name;
use parking_lot::Mutex;

/// MongoDB's `internalQueryCacheEvictionRatio`.
pub const EVICTION_RATIO: u64 = 10;
/// MongoDB's `internalQueryCacheWorksGrowthCoefficient`.
const WORKS_GROWTH: u64 = 2;
/// Entries kept per collection at most (the oldest go first).
const MAX_ENTRIES: usize = 5000;

/// A query's shape: its filter with values replaced by their types, its sort, projection
/// and collation. Queries of one shape share a cache entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// `planCacheShapeHash` (and `queryHash`), 8 hex digits as MongoDB prints them.
    pub shape_hash: String,
    /// `planCacheKey`: the shape and the collection's indexes.
    pub key: String,
}

impl CacheKey {
    pub fn new(
        filter: &Document,
        sort: Option<&Document>,
        projection: Option<&Document>,
        collation: Option<&Document>,
        indexes: &[(u64, bool)],
    ) -> CacheKey {
        let mut shape = String::new();
        shape_of(&Bson::Document(filter.clone()), &mut shape);
        shape.push('|');
        if let Some(s) = sort {
            shape.push_str(&format!("{s}"));
        }
        shape.push('|');
        if let Some(p) = projection {
            shape.push_str(&format!("{p}"));
        }
        // A collated query is its own shape (it may use other indexes).
        if let Some(c) = collation {
            shape.push_str(&format!("|{c}"));
        }
        let shape_hash = hex(fnv1a(shape.as_bytes()));
        let with_indexes = format!("{shape}|{indexes:?}");
        CacheKey {
            shape_hash,
            key: hex(fnv1a(with_indexes.as_bytes())),
        }
    }
}

/// The filter's structure: field names and operators kept, each value replaced by its type
/// (a `$in` list by its length bucket, since exploding depends on it).
fn shape_of(v: &Bson, out: &mut String) {
    match v {
        Bson::Document(d) => {
            out.push('{');
            for (k, v) in d {
                out.push_str(k);
                out.push(':');
                if k == "$in" || k == "$nin" {
                    let n = match v {
                        Bson::Array(a) => a.len(),
                        _ => 0,
                    };
                    out.push_str(if n > super::explode::MAX_SCANS_TO_EXPLODE {
                        "many"
                    } else {
                        "few"
                    });
                } else {
                    shape_of(v, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        Bson::Array(items) if items.iter().all(|i| matches!(i, Bson::Document(_))) => {
            out.push('[');
            for i in items {
                shape_of(i, out);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(type_name(other)),
    }
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

fn hex(n: u32) -> String {
    format!("{n:08X}")
}

/// One cached shape.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: CacheKey,
    /// The winning solution (`ix:<index>` or `or:<indexes>`).
    pub solution: String,
    pub works: u64,
    pub active: bool,
    pub created: DateTime,
    /// `{query, sort, projection}` of the query that created the entry.
    pub created_from: Document,
    /// The winning plan as explain prints it.
    pub cached_plan: Document,
    /// Each candidate's trial statistics, the winner first.
    pub creation_stats: Vec<Document>,
    pub scores: Vec<f64>,
    /// The shape had an index filter when the entry was made.
    pub index_filter_set: bool,
}

impl Entry {
    /// The document `$planCacheStats` returns for the entry, fields in MongoDB's order.
    pub fn stats_document(&self, host: &str) -> Document {
        doc! {
            "version": "1",
            "createdFromQuery": self.created_from.clone(),
            "queryHash": &self.key.shape_hash,
            "planCacheShapeHash": &self.key.shape_hash,
            "planCacheKey": &self.key.key,
            "isActive": self.active,
            "works": self.works as i64,
            "cachedPlan": self.cached_plan.clone(),
            "timeOfCreation": self.created,
            "creationExecStats": self.creation_stats.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            "candidatePlanScores": self.scores.iter().map(|s| Bson::Double(*s)).collect::<Vec<_>>(),
            "indexFilterSet": self.index_filter_set,
            "estimatedSizeBytes": (self.cached_plan.to_string().len() + 512) as i64,
            "host": host,
        }
    }
}

/// What the cache says about a shape.
pub enum Lookup {
    /// Run this solution's plan alone, replanning after `max_works`.
    Active { solution: String, max_works: u64 },
    /// Race the candidates.
    Miss,
}

/// The entries of one collection, valid for one set of indexes.
#[derive(Default, Debug)]
pub struct PlanCache {
    state: Mutex<State>,
    /// Index filters by query shape (`planCacheSetFilter`); in memory only, as MongoDB's.
    filters: Mutex<Vec<IndexFilter>>,
    has_filters: std::sync::atomic::AtomicBool,
}

/// An index filter: the only indexes the planner considers for one query shape (filter,
/// sort, projection, collation). A hint is ignored for such a shape, as in MongoDB.
#[derive(Debug, Clone)]
pub struct IndexFilter {
    pub shape: String,
    /// The shape's `planCacheShapeHash` (its plan cache entries go when the filter changes).
    pub shape_hash: String,
    pub query: Document,
    pub sort: Document,
    pub projection: Document,
    pub collation: Option<Document>,
    pub key_patterns: Vec<Document>,
    pub names: Vec<String>,
}

impl IndexFilter {
    /// Whether the filter lets the planner use `ix` (named, or its key pattern listed).
    pub fn allows(&self, ix: &IndexMeta) -> bool {
        self.names.contains(&ix.name) || self.key_patterns.iter().any(|k| *k == ix.key_document())
    }

    /// The entry `planCacheListFilters` shows.
    pub fn list_document(&self) -> Document {
        let mut d = doc! {
            "query": self.query.clone(),
            "sort": self.sort.clone(),
            "projection": self.projection.clone(),
        };
        if let Some(c) = &self.collation {
            d.insert("collation", c.clone());
        }
        let indexes: Vec<Bson> = self
            .key_patterns
            .iter()
            .cloned()
            .map(Bson::Document)
            .chain(self.names.iter().cloned().map(Bson::String))
            .collect();
        d.insert("indexes", indexes);
        d
    }
}

/// The shape an index filter is kept under: the canonical filter's shape, sort,
/// projection and collation.
pub fn filter_shape(
    canonical_filter: &Document,
    sort: Option<&Document>,
    projection: Option<&Document>,
    collation: Option<&Document>,
) -> String {
    let mut shape = String::new();
    shape_of(&Bson::Document(canonical_filter.clone()), &mut shape);
    for part in [sort, projection, collation] {
        shape.push('|');
        if let Some(d) = part.filter(|d| !d.is_empty()) {
            shape.push_str(&format!("{d}"));
        }
    }
    shape
}

#[derive(Default, Debug)]
struct State {
    /// (id, hidden) of every index the entries were made with.
    indexes: Vec<(u64, bool)>,
    entries: Vec<Entry>,
}

impl State {
    /// A different set of indexes makes every entry stale.
    fn validate(&mut self, indexes: &[(u64, bool)]) {
        if self.indexes != indexes {
            self.entries.clear();
            self.indexes = indexes.to_vec();
        }
    }
}

impl PlanCache {
    pub fn lookup(&self, key: &CacheKey, indexes: &[(u64, bool)]) -> Lookup {
        let mut s = self.state.lock();
        s.validate(indexes);
        match s.entries.iter().find(|e| e.key.key == key.key) {
            Some(e) if e.active => Lookup::Active {
                solution: e.solution.clone(),
                max_works: e.works.saturating_mul(EVICTION_RATIO),
            },
            _ => Lookup::Miss,
        }
    }

    /// After a cached plan needed too many works: the entry goes inactive, and the
    /// replanning's winner is recorded against it.
    pub fn deactivate(&self, key: &CacheKey) {
        let mut s = self.state.lock();
        if let Some(e) = s.entries.iter_mut().find(|e| e.key.key == key.key) {
            e.active = false;
        }
    }

    /// Records the winner of a race for `entry.key`.
    pub fn record(&self, entry: Entry, indexes: &[(u64, bool)]) {
        let mut s = self.state.lock();
        s.validate(indexes);
        match s.entries.iter_mut().find(|e| e.key.key == entry.key.key) {
            None => {
                if s.entries.len() >= MAX_ENTRIES {
                    s.entries.remove(0);
                }
                s.entries.push(Entry {
                    active: false,
                    ..entry
                });
            }
            Some(old) if old.active || entry.works <= old.works => {
                *old = Entry {
                    active: true,
                    ..entry
                };
            }
            Some(old) => old.works = old.works.saturating_mul(WORKS_GROWTH),
        }
    }

    /// Drops every entry, or those of one shape.
    pub fn clear(&self, shape_hash: Option<&str>) {
        let mut s = self.state.lock();
        match shape_hash {
            None => s.entries.clear(),
            Some(h) => s.entries.retain(|e| e.key.shape_hash != h),
        }
    }

    /// Sets (or replaces) the index filter of a shape; the shape's cached plans go.
    pub fn set_filter(&self, filter: IndexFilter) {
        self.clear(Some(&filter.shape_hash));
        let mut filters = self.filters.lock();
        filters.retain(|f| f.shape != filter.shape);
        filters.push(filter);
        self.has_filters
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes the filter of one shape, or every filter; their shapes' cached plans go.
    pub fn clear_filters(&self, shape: Option<&str>) {
        let mut filters = self.filters.lock();
        let (gone, kept): (Vec<IndexFilter>, Vec<IndexFilter>) = filters
            .drain(..)
            .partition(|f| shape.is_none_or(|s| f.shape == s));
        *filters = kept;
        self.has_filters
            .store(!filters.is_empty(), std::sync::atomic::Ordering::Relaxed);
        drop(filters);
        for f in gone {
            self.clear(Some(&f.shape_hash));
        }
    }

    pub fn list_filters(&self) -> Vec<IndexFilter> {
        self.filters.lock().clone()
    }

    /// Whether any filter is set (so a query need not compute its shape otherwise).
    pub fn has_filters(&self) -> bool {
        self.has_filters.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn filter_for(&self, shape: &str) -> Option<IndexFilter> {
        self.filters
            .lock()
            .iter()
            .find(|f| f.shape == shape)
            .cloned()
    }

    /// The entries still valid for the collection's `indexes`.
    pub fn entries(&self, indexes: &[IndexMeta]) -> Vec<Entry> {
        let mut s = self.state.lock();
        s.validate(&index_ids(indexes));
        s.entries.clone()
    }
}

/// What the entries depend on: each index (by id) and whether it is hidden.
pub fn index_ids(indexes: &[IndexMeta]) -> Vec<(u64, bool)> {
    indexes.iter().map(|i| (i.id, i.is_hidden())).collect()
}
