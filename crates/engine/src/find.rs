//! Turns a find request into an executable plan.

use crate::catalog::{CollectionRef, IndexMeta, RecordStore};
use crate::exec::MAX_SORT_MEMORY_BYTES;
use crate::exec::{
    ClusteredScan, CollScan, CountScan, Eof, Executor, ExpressIxscan, Fetch, IndexScan, Limit,
    OrStage, ProjectionCovered, ProjectionStage, RecordStoreFastCount, ReturnKey, Skip, Sort,
    SortLimits, SortMerge, Stage,
};
use crate::plan;
use crate::txn::ReadSource;
use crate::Engine;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::collation::Collation;
use nidus_expr::LetScope;
use nidus_query::matcher::Matcher;
use nidus_query::matcher::ParseOptions;
use nidus_query::projection::{Policy, Projection};
use nidus_query::sort::SortPattern;
use std::sync::Arc;
use std::time::Instant;

/// What `find`, `count`, `distinct`, `update` and `delete` ask of the read path.
#[derive(Debug, Clone, Default)]
pub struct FindSpec {
    pub filter: Document,
    pub sort: Option<Document>,
    pub projection: Option<Document>,
    pub skip: u64,
    /// 0 = no limit.
    pub limit: u64,
    pub hint: Option<Bson>,
    pub deadline: Option<Instant>,
    /// The command's `let` variables (for `$expr` and computed projections).
    pub let_vars: Option<Document>,
    /// The query's collation document (strings in the filter and the sort compare under it).
    pub collation: Option<Document>,
    /// Which projection language `projection` is in: find's, or `$project`'s when an
    /// aggregation pushed its projection down.
    pub projection_policy: Policy,
    /// `min`/`max`: scan the hinted index from this key (inclusive) / to this key (exclusive).
    pub min: Option<Document>,
    pub max: Option<Document>,
    /// Planning for explain: the plan cache is read but not written.
    pub explain: bool,
    /// A `count`: the plan needs no document fields and ends in a COUNT stage applying
    /// `skip` and `limit`.
    pub count: bool,
    /// `allowDiskUse`: a blocking SORT over its memory limit spills instead of failing.
    pub allow_disk_use: bool,
    /// `returnKey`: each result is the index key it was found by (`{}` from a collection
    /// scan); the projection is ignored, as MongoDB's.
    pub return_key: bool,
    /// `internalQueryMaxBlockingSortMemoryUsageBytes` (None: MongoDB's 100 MB default).
    pub sort_memory_limit: Option<usize>,
    /// How many threads a blocking SORT that may spill reads a collection scan with (0 or
    /// 1: one; an aggregation's `$sort` outside explain uses the cores).
    pub parallelism: usize,
    /// Where the query reads: a transaction, a snapshot read's snapshot (None: the latest
    /// committed data).
    pub source: Option<ReadSource>,
    /// A tailable cursor over a capped collection: a forward COLLSCAN that stays open at
    /// its end and reads what was inserted since on the next `getMore`.
    pub tailable: bool,
    /// The caller needs the matching record ids only (an update or a delete, which reads and
    /// re-checks each document under its lock): the `_id` point lookup does not read the
    /// document.
    pub record_ids_only: bool,
    /// `filter` parsed already under this spec's `let_vars` and `collation` (a write parses
    /// it once for its targets and for re-checking each target under its lock).
    pub matcher: Option<Arc<Matcher>>,
}

/// Parses a command's `collation` (None for absent or `{locale: "simple"}`).
pub fn parse_collation(spec: Option<&Document>) -> Result<Option<Collation>> {
    match spec {
        Some(d) => Collation::parse(d),
        None => Ok(None),
    }
}

/// Natural order requested through `sort` or `hint` (`{$natural: -1}`).
fn natural_direction(d: &Document) -> Option<bool> {
    match d.get("$natural")? {
        Bson::Int32(n) => Some(*n >= 0),
        Bson::Int64(n) => Some(*n >= 0),
        Bson::Double(n) => Some(*n >= 0.0),
        _ => None,
    }
}

/// A planned access path: one index's solution, or an indexed `$or`.
// Short-lived (one per plan candidate), so the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Candidate {
    Index(plan::IndexSolution),
    Or(plan::or::OrSolution),
}

impl Candidate {
    /// The plan cache's name for the solution.
    fn key(&self) -> String {
        match self {
            Candidate::Index(s) => format!("ix:{}", s.index.name),
            Candidate::Or(o) => o.key(),
        }
    }
}

/// Whether results reach the projection as documents, which decides its stage as MongoDB's
/// planner does: PROJECTION_SIMPLE needs documents, PROJECTION_COVERED one index scan's keys,
/// PROJECTION_DEFAULT takes either.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fetched {
    Yes,
    CoveredByOneScan,
    /// Index keys from several scans (a SORT_MERGE).
    No,
}

/// The parsed parts of a find that every candidate plan shares.
struct Parsed {
    matcher: Arc<Matcher>,
    sort: Option<(SortPattern, Document)>,
    projection: Option<(Arc<Projection>, Document)>,
    skip: u64,
    limit: u64,
    /// A count: no sort, projection, skip or limit stages (COUNT applies skip and limit).
    count: bool,
    /// `returnKey`: FETCH keeps each result's index key and RETURN_KEY tops the plan.
    return_key: bool,
    sort_limits: SortLimits,
    src: ReadSource,
    /// The collection is clustered (`clustered.rs`): scans walk this cluster key (the `_id`
    /// entries, and the name `listIndexes` shows), which is not an index the planner offers.
    cluster_key: Option<(IndexMeta, String)>,
}

impl Parsed {
    /// Adds SORT, SKIP, PROJECTION and LIMIT above an access path, in MongoDB's order: a
    /// blocking SORT takes the limit (top-k) so no LIMIT stage follows it; a covered
    /// projection sits right above the index scan.
    fn finish(&self, mut stage: Stage, sort_needed: bool, fetched: Fetched) -> Stage {
        if self.count {
            return stage;
        }
        let covered = fetched == Fetched::CoveredByOneScan;
        if let (true, Some((p, doc))) = (covered, &self.projection) {
            stage = Stage::new(ProjectionCovered::new(stage, p.clone(), doc.clone()));
        }
        let mut sorted = false;
        if let (true, Some((p, doc))) = (sort_needed, &self.sort) {
            let top_k = if self.limit > 0 {
                self.limit.saturating_add(self.skip)
            } else {
                0
            };
            stage = Stage::new(Sort::new(
                stage,
                p.clone(),
                doc.clone(),
                top_k,
                self.sort_limits.clone(),
            ));
            sorted = true;
        }
        if self.skip > 0 {
            stage = Stage::new(Skip::new(stage, self.skip));
        }
        if let (false, Some((p, doc))) = (covered, &self.projection) {
            let fetched = fetched == Fetched::Yes;
            stage = Stage::new(ProjectionStage::new(stage, p.clone(), doc.clone(), fetched));
        }
        if self.limit > 0 && !sorted {
            stage = Stage::new(Limit::new(stage, self.limit));
        }
        if self.return_key {
            stage = Stage::new(ReturnKey::new(stage));
        }
        stage
    }

    /// A FETCH over `child` (keeping each result's index key for `returnKey`).
    fn fetch(
        &self,
        records: RecordStore,
        child: Stage,
        filter: Option<(Arc<Matcher>, Document)>,
    ) -> Stage {
        Stage::new(
            Fetch::new(self.src.clone(), records, child, filter).keeping_key(self.return_key),
        )
    }
}

impl Engine {
    /// Builds the executor for a query over `coll` (None = the collection does not exist):
    /// the `_id` express path, else every relevant index plan raced by the multi-planner,
    /// else a collection scan; a count's plan under a COUNT stage (or the fast count of an
    /// unfiltered count).
    pub fn plan_find(&self, coll: Option<&CollectionRef>, spec: &FindSpec) -> Result<Executor> {
        // A query that names no collation runs under the collection's default (a filter
        // parsed beforehand was parsed under the caller's, which applied the default).
        if let (None, None, Some(default)) = (
            &spec.collation,
            &spec.matcher,
            coll.and_then(|c| c.default_collation()),
        ) {
            let spec = FindSpec {
                collation: Some(default),
                ..spec.clone()
            };
            return self.plan_find(coll, &spec);
        }
        if !spec.count {
            return self.plan_read(coll, spec);
        }
        let unfiltered = spec.filter.is_empty() && spec.hint.is_none();
        if let (true, Some(c)) = (unfiltered, coll) {
            let records = c.count.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64;
            let fast = RecordStoreFastCount::new(records, spec.skip, spec.limit);
            return Ok(Executor::new(Stage::new(fast), spec.deadline));
        }
        Ok(self
            .plan_read(coll, spec)?
            .into_count(spec.skip, spec.limit))
    }

    fn plan_read(&self, coll: Option<&CollectionRef>, spec: &FindSpec) -> Result<Executor> {
        if let Some(exec) = self.express_read(coll, spec) {
            return Ok(exec);
        }
        if let Some(exec) = crate::text::plan_text(self, coll, spec)? {
            return Ok(exec);
        }
        plan::min_max::check_same_fields(spec.min.as_ref(), spec.max.as_ref())?;
        let scope = LetScope::new(spec.let_vars.as_ref())?;
        let collation = parse_collation(spec.collation.as_ref())?;
        let opts = ParseOptions {
            scope: Some(&scope),
            collation: collation.as_ref(),
            ..ParseOptions::default()
        };
        let matcher = match &spec.matcher {
            Some(m) => m.clone(),
            None => Arc::new(Matcher::parse_with(&spec.filter, &opts)?),
        };
        let sort_spec = spec.sort.as_ref().filter(|s| !s.is_empty());
        let natural_sort = sort_spec.and_then(natural_direction);
        let sort = match sort_spec {
            Some(s) if natural_sort.is_none() => Some((
                SortPattern::parse(s)?.with_collation(collation.clone()),
                s.clone(),
            )),
            _ => None,
        };
        let projection = match &spec.projection {
            Some(p) if !p.is_empty() && !spec.return_key => {
                let p_parsed = Projection::parse_with(p, spec.projection_policy, &scope)?;
                Some((Arc::new(p_parsed), p.clone()))
            }
            _ => None,
        };
        let Some(coll) = coll else {
            return Ok(Executor::new(Stage::new(Eof), spec.deadline));
        };
        let parsed = Parsed {
            matcher,
            sort,
            projection,
            skip: spec.skip,
            limit: spec.limit,
            count: spec.count,
            return_key: spec.return_key,
            sort_limits: SortLimits {
                max_memory: spec.sort_memory_limit.unwrap_or(MAX_SORT_MEMORY_BYTES),
                spill_dir: spec.allow_disk_use.then(|| self.spill_dir()),
                parallelism: spec.parallelism,
                deadline: spec.deadline,
            },
            src: self.read_source(spec.source.as_ref()),
            cluster_key: None,
        };
        let meta = coll.meta.read();
        let parsed = Parsed {
            cluster_key: crate::clustered::is_clustered(&meta.options)
                .then(|| meta.indexes.iter().find(|ix| ix.is_id()))
                .flatten()
                .map(|ix| (ix.clone(), crate::clustered::index_name(&meta.options))),
            ..parsed
        };
        let without_cluster_key: Vec<IndexMeta>;
        // Under `apiStrict`, MongoDB's planner leaves out the indexes outside Stable API
        // Version 1 (text and sparse ones): not planned, not hintable.
        let api_strict = crate::opctx::api_strict();
        let meta_indexes: &[IndexMeta] = if parsed.cluster_key.is_some() || api_strict {
            without_cluster_key = meta
                .indexes
                .iter()
                .filter(|ix| parsed.cluster_key.is_none() || !ix.is_id())
                .filter(|ix| !api_strict || (ix.text.is_none() && !ix.sparse))
                .cloned()
                .collect();
            &without_cluster_key
        } else {
            &meta.indexes
        };
        if let Some(near) = plan::geo::find_near(&parsed.matcher, meta_indexes, spec.hint.as_ref())?
        {
            return Ok(self.geo_near_plan(coll, spec, &parsed, near));
        }
        if spec.min.is_some() || spec.max.is_some() {
            return self.min_max_plan(coll, spec, &parsed, meta_indexes);
        }
        if spec.tailable {
            let scan = self.collscan(coll, spec, &parsed, true);
            return Ok(Executor::new(
                parsed.finish(scan, false, Fetched::Yes),
                spec.deadline,
            ));
        }
        // An index filter for the query's shape limits the indexes and overrides a hint.
        let index_filter = coll
            .plan_cache
            .has_filters()
            .then(|| {
                let shape = plan::cache::filter_shape(
                    &parsed.matcher.canonical_document(),
                    parsed.sort.as_ref().map(|(_, d)| d),
                    parsed.projection.as_ref().map(|(_, d)| d),
                    spec.collation.as_ref(),
                );
                coll.plan_cache.filter_for(&shape)
            })
            .flatten();
        let filtered: Vec<IndexMeta>;
        // A text index holds only documents with terms: only `$text` reads it.
        let has_text_index = meta_indexes.iter().any(|ix| ix.text.is_some());
        let indexes: &[IndexMeta] = if has_text_index || index_filter.is_some() {
            filtered = meta_indexes
                .iter()
                .filter(|ix| ix.text.is_none())
                .filter(|ix| index_filter.as_ref().is_none_or(|f| f.allows(ix)))
                .cloned()
                .collect();
            &filtered
        } else {
            meta_indexes
        };
        let hint = if index_filter.is_some() {
            None
        } else {
            spec.hint.as_ref()
        };
        let exec = self.plan_indexed(
            coll,
            spec,
            &parsed,
            (meta_indexes, indexes, index_filter.is_some()),
            hint,
            natural_sort,
            collation.as_ref(),
        );
        exec.map(|mut e| {
            e.index_filter_set = index_filter.is_some();
            e
        })
    }

    /// The `_id` point lookup decided from the request's shape, before the filter is parsed
    /// (MongoDB's express path is chosen so too): for `{_id: v}` and nothing else asked of
    /// the planner, the plan [`Engine::plan_indexed`] would build, the same stages and
    /// counters. None: plan in full (any option this does not look at declines it, so the
    /// full planner still answers every other request and every error).
    fn express_read(&self, coll: Option<&CollectionRef>, spec: &FindSpec) -> Option<Executor> {
        let coll = coll?;
        let nothing_else = spec.sort.as_ref().is_none_or(Document::is_empty)
            && spec.projection.as_ref().is_none_or(Document::is_empty)
            && spec.hint.is_none()
            && spec.let_vars.is_none()
            && spec.collation.is_none()
            && spec.min.is_none()
            && spec.max.is_none()
            && !spec.count
            && !spec.return_key
            && !spec.tailable;
        // An index filter set for the shape shows in explain (`indexFilterSet`): planned.
        if !nothing_else || coll.plan_cache.has_filters() {
            return None;
        }
        let id = Matcher::id_equality_of(&spec.filter)?;
        let index = {
            let meta = coll.meta.read();
            // A clustered collection's `_id` is its records' key, read by CLUSTERED_IXSCAN.
            if crate::clustered::is_clustered(&meta.options) {
                return None;
            }
            meta.indexes
                .iter()
                .find(|ix| ix.is_id() && ix.collation.is_none())?
                .clone()
        };
        let mut lookup = ExpressIxscan::new(
            self.read_source(spec.source.as_ref()),
            coll.records,
            index,
            id,
        );
        if spec.record_ids_only {
            lookup = lookup.record_ids_only();
        }
        // `Parsed::finish` of this stage without sort, projection or count.
        let mut stage = Stage::new(lookup);
        if spec.skip > 0 {
            stage = Stage::new(Skip::new(stage, spec.skip));
        }
        if spec.limit > 0 {
            stage = Stage::new(Limit::new(stage, spec.limit));
        }
        Some(Executor::new(stage, spec.deadline))
    }

    /// Plans over `indexes` (all of the collection's, or those an index filter allows).
    #[allow(clippy::too_many_arguments)]
    fn plan_indexed(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        parsed: &Parsed,
        (all_indexes, indexes, filter_set): (&[IndexMeta], &[IndexMeta], bool),
        hint: Option<&Bson>,
        natural_sort: Option<bool>,
        collation: Option<&Collation>,
    ) -> Result<Executor> {
        let hinted_index = match hint {
            Some(Bson::Document(h)) if h.contains_key("$natural") => {
                let forward = natural_direction(h).unwrap_or(true);
                let scan = self.collscan(coll, spec, parsed, forward);
                return Ok(Executor::new(
                    parsed.finish(scan, true, Fetched::Yes),
                    spec.deadline,
                ));
            }
            Some(h)
                if parsed
                    .cluster_key
                    .as_ref()
                    .is_some_and(|(_, name)| crate::clustered::hint_names_cluster_key(h, name)) =>
            {
                let scan = self.collscan(coll, spec, parsed, true);
                return Ok(Executor::new(
                    parsed.finish(scan, true, Fetched::Yes),
                    spec.deadline,
                ));
            }
            Some(h) => Some(self.hinted_index(indexes, h)?),
            None => None,
        };
        // The express lookup compares `_id` as its index does: only a query with the simple
        // collation on a simple `_id` index takes it (a collated one is planned).
        if hinted_index.is_none()
            && natural_sort.is_none()
            && parsed.sort.is_none()
            && collation.is_none()
            && !parsed.return_key
        {
            if let Some(id) = parsed.matcher.id_equality() {
                if let Some(ix) = all_indexes
                    .iter()
                    .find(|i| i.is_id() && i.collation.is_none())
                {
                    let mut lookup =
                        ExpressIxscan::new(parsed.src.clone(), coll.records, ix.clone(), id);
                    if spec.record_ids_only {
                        lookup = lookup.record_ids_only();
                    }
                    let express = Stage::new(lookup);
                    return Ok(Executor::new(
                        parsed.finish(express, false, Fetched::Yes),
                        spec.deadline,
                    ));
                }
            }
        }
        let (solutions, or_solution) = if natural_sort.is_some() {
            (Vec::new(), None)
        } else {
            let query = plan::Query {
                matcher: &parsed.matcher,
                sort: parsed.sort.as_ref().map(|(p, _)| p),
                projection: parsed.projection.as_ref().map(|(p, _)| p.as_ref()),
                count: spec.count,
                return_key: parsed.return_key,
                collation,
            };
            let or = match hinted_index {
                None => plan::or::enumerate_or(indexes, &query),
                Some(_) => None,
            };
            (
                plan::enumerate(indexes, &query, hinted_index.as_deref()),
                or,
            )
        };
        let explode_limited = solutions.iter().any(|s| s.max_scans_to_explode_reached);
        let mut candidates: Vec<Candidate> = solutions.into_iter().map(Candidate::Index).collect();
        candidates.extend(or_solution.map(Candidate::Or));
        if candidates.is_empty() {
            // A clustered scan provides a sort on the cluster key alone.
            let cluster_sort = parsed
                .cluster_key
                .as_ref()
                .and(parsed.sort.as_ref())
                .and_then(|(_, d)| crate::clustered::sort_direction(d, collation.is_some()));
            let forward = cluster_sort.or(natural_sort).unwrap_or(true);
            let scan = self.collscan(coll, spec, parsed, forward);
            return Ok(Executor::new(
                parsed.finish(scan, cluster_sort.is_none(), Fetched::Yes),
                spec.deadline,
            ));
        }
        let limit = spec.limit.saturating_add(spec.skip);
        // Only a race between several plans is worth remembering; a `returnKey` query's
        // plans (covered where a plain query's fetch) are neither cached nor read from the
        // cache.
        let cache =
            (candidates.len() > 1 && hinted_index.is_none() && !parsed.return_key).then(|| {
                let ids = plan::cache::index_ids(all_indexes);
                let key = plan::cache::CacheKey::new(
                    &parsed.matcher.canonical_document(),
                    parsed.sort.as_ref().map(|(_, d)| d),
                    parsed.projection.as_ref().map(|(_, d)| d),
                    spec.collation.as_ref(),
                    &ids,
                );
                (key, ids)
            });
        if let Some((key, ids)) = &cache {
            if let Some(mut exec) = self.run_cached_plan(coll, parsed, &candidates, key, ids, limit)
            {
                exec.set_deadline(spec.deadline);
                exec.max_scans_to_explode_reached = explode_limited;
                return Ok(exec);
            }
        }
        let stages: Vec<Stage> = candidates
            .iter()
            .map(|c| self.candidate_plan(coll.records, parsed, c))
            .collect();
        let num_records = coll.count.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64;
        let outcome = plan::choose_plan(stages, num_records, limit)?;
        if let (Some((key, ids)), false, true) = (&cache, spec.explain, outcome.cacheable) {
            let solution = candidates[outcome.winner_index].key();
            let mut entry = cache_entry(key, spec, &outcome, solution);
            entry.index_filter_set = filter_set;
            coll.plan_cache.record(entry, ids);
        }
        let mut exec = Executor::from_trial(outcome, spec.deadline);
        exec.max_scans_to_explode_reached = explode_limited;
        exec.cache_key = cache.map(|(k, _)| k);
        Ok(exec)
    }

    /// `$near`/`$nearSphere`: GEO_NEAR_2DSPHERE over FETCH (the other predicates) over the
    /// 2dsphere index's cells within the distance limit.
    fn geo_near_plan(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        parsed: &Parsed,
        near: plan::geo::NearPlan,
    ) -> Executor {
        let scan = Stage::new(IndexScan::new(
            parsed.src.clone(),
            near.index.clone(),
            near.bounds,
            true,
        ));
        let filter =
            plan::residual_filter(&parsed.matcher, &near.residual).map(|(m, d)| (Arc::new(m), d));
        let fetch = parsed.fetch(coll.records, scan, filter);
        let stage = Stage::new(crate::exec::GeoNear2dSphere::new(
            fetch, near.query, near.path, near.index,
        ));
        Executor::new(parsed.finish(stage, true, Fetched::Yes), spec.deadline)
    }

    fn collscan(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        parsed: &Parsed,
        forward: bool,
    ) -> Stage {
        let filter = (!spec.filter.is_empty())
            .then(|| (parsed.matcher.clone(), parsed.matcher.canonical_document()));
        if let (Some((cluster_key, _)), false) = (&parsed.cluster_key, spec.tailable) {
            // String bounds hold only under the simple collation.
            let bounds = if spec.collation.is_some() || cluster_key.collation.is_some() {
                (None, None)
            } else {
                crate::clustered::record_bounds(&spec.filter)
            };
            return Stage::new(ClusteredScan::new(
                parsed.src.clone(),
                coll.records,
                cluster_key.clone(),
                forward,
                filter,
                bounds,
            ));
        }
        let scan = CollScan::new(parsed.src.clone(), coll.records, forward, filter)
            .capped(coll.is_capped())
            .tailable(spec.tailable)
            .visible_through(
                self.oplog()
                    .filter(|o| o.collection().id == coll.id)
                    .cloned(),
            );
        Stage::new(scan)
    }

    fn candidate_plan(&self, records: RecordStore, parsed: &Parsed, c: &Candidate) -> Stage {
        match c {
            Candidate::Index(sol) => self.index_plan(records, parsed, sol),
            Candidate::Or(or) => self.or_plan(records, parsed, or),
        }
    }

    /// `FETCH` (the other conjuncts) over `OR` over each clause's `IXSCAN` (under a `FETCH`
    /// of what its bounds leave of the clause).
    fn or_plan(&self, records: RecordStore, parsed: &Parsed, or: &plan::or::OrSolution) -> Stage {
        let children = or
            .branches
            .iter()
            .map(|b| {
                let sol = &b.solution;
                let scan = Stage::new(IndexScan::new(
                    parsed.src.clone(),
                    sol.index.clone(),
                    sol.bounds.clone(),
                    sol.forward,
                ));
                match plan::residual_filter(&b.clause, &sol.residual) {
                    Some((m, d)) => parsed.fetch(records, scan, Some((Arc::new(m), d))),
                    None => scan,
                }
            })
            .collect();
        let filter =
            plan::residual_filter(&parsed.matcher, &or.residual).map(|(m, d)| (Arc::new(m), d));
        let or_stage = Stage::new(OrStage::new(children));
        let fetch = parsed.fetch(records, or_stage, filter);
        parsed.finish(fetch, true, Fetched::Yes)
    }

    fn index_plan(
        &self,
        records: RecordStore,
        parsed: &Parsed,
        sol: &plan::IndexSolution,
    ) -> Stage {
        let scan = |bounds: &plan::bounds::IndexBounds| {
            Stage::new(IndexScan::new(
                parsed.src.clone(),
                sol.index.clone(),
                bounds.clone(),
                sol.forward,
            ))
        };
        let mut stage = match (&sol.merge_scans, &parsed.sort) {
            (Some(all), Some((pattern, doc))) => Stage::new(SortMerge::new(
                all.iter().map(scan).collect(),
                pattern.clone(),
                doc.clone(),
            )),
            // A count the index answers alone, over one interval, counts keys.
            _ if parsed.count && sol.covered && sol.bounds.is_single_interval() => Stage::new(
                CountScan::new(parsed.src.clone(), sol.index.clone(), sol.bounds.clone()),
            ),
            _ => scan(&sol.bounds),
        };
        if !sol.covered {
            let filter = plan::residual_filter(&parsed.matcher, &sol.residual)
                .map(|(m, d)| (Arc::new(m), d));
            stage = parsed.fetch(records, stage, filter);
        }
        let fetched = if !sol.covered {
            Fetched::Yes
        } else if sol.merge_scans.is_some() {
            Fetched::No
        } else {
            Fetched::CoveredByOneScan
        };
        parsed.finish(stage, !sol.provides_sort, fetched)
    }

    /// The active plan cache entry's plan, if the shape has one and it proves itself within
    /// its allowance of works (else the entry goes inactive and the caller races again).
    fn run_cached_plan(
        &self,
        coll: &CollectionRef,
        parsed: &Parsed,
        candidates: &[Candidate],
        key: &plan::cache::CacheKey,
        ids: &[(u64, bool)],
        limit: u64,
    ) -> Option<Executor> {
        let plan::cache::Lookup::Active {
            solution,
            max_works,
        } = coll.plan_cache.lookup(key, ids)
        else {
            return None;
        };
        let cached = candidates.iter().find(|c| c.key() == solution)?;
        let stage = self.candidate_plan(coll.records, parsed, cached);
        match plan::run_cached(stage, max_works, limit) {
            plan::CachedRun::Kept(outcome) => {
                let mut exec = Executor::from_trial(outcome, None);
                exec.is_cached = true;
                exec.cache_key = Some(key.clone());
                Some(exec)
            }
            plan::CachedRun::Replan => {
                coll.plan_cache.deactivate(key);
                None
            }
        }
    }

    /// A `min`/`max` query: the hinted index scanned between the two keys, every document
    /// fetched and filtered.
    fn min_max_plan(
        &self,
        coll: &CollectionRef,
        spec: &FindSpec,
        parsed: &Parsed,
        indexes: &[IndexMeta],
    ) -> Result<Executor> {
        let no_plan = |msg| plan::planner_error(ErrorCode::NoQueryExecutionPlans, msg);
        let name = match &spec.hint {
            None => {
                return Err(no_plan(
                    "When using min()/max() a hint of which index to use must be provided",
                ))
            }
            Some(Bson::Document(h)) if h.contains_key("$natural") => {
                return Err(no_plan("min and max cannot be used with a $natural hint"))
            }
            Some(h) => self.hinted_index(indexes, h)?,
        };
        let Some(ix) = indexes.iter().find(|i| i.name == name) else {
            return Err(Error::internal("hinted index vanished while planning"));
        };
        let range = plan::min_max::key_range(ix, spec.min.as_ref(), spec.max.as_ref())?;
        let scan = Stage::new(IndexScan::new_range(parsed.src.clone(), ix.clone(), range));
        let filter = (!spec.filter.is_empty())
            .then(|| (parsed.matcher.clone(), parsed.matcher.canonical_document()));
        let fetch = parsed.fetch(coll.records, scan, filter);
        let sorted = match &parsed.sort {
            Some((pattern, _)) => plan::whole_index_sort(ix, pattern) == Some(true),
            None => true,
        };
        Ok(Executor::new(
            parsed.finish(fetch, !sorted, Fetched::Yes),
            spec.deadline,
        ))
    }

    /// The index a hint names (by name, or by a key pattern only one index has).
    fn hinted_index(&self, indexes: &[IndexMeta], hint: &Bson) -> Result<String> {
        // A hidden index cannot be hinted: for a hint it does not exist (MongoDB 4.4+).
        let visible = indexes.iter().filter(|i| !i.is_hidden());
        let found: Vec<&IndexMeta> = match hint {
            Bson::String(name) => visible.filter(|i| &i.name == name).collect(),
            Bson::Document(key) => visible.filter(|i| &i.key_document() == key).collect(),
            _ => Vec::new(),
        };
        let bad = |msg: String| plan::planner_error(ErrorCode::BadValue, &msg);
        match found.as_slice() {
            [one] => Ok(one.name.clone()),
            [] => Err(bad(
                "hint provided does not correspond to an existing index".into(),
            )),
            many => {
                let names: Vec<&str> = many.iter().map(|i| i.name.as_str()).collect();
                Err(bad(format!(
                    "Hint matched multiple indexes, must hint by index name. Matched: {}",
                    names.join(", ")
                )))
            }
        }
    }
}

/// The plan cache entry a race's winner (`solution`) makes.
fn cache_entry(
    key: &plan::cache::CacheKey,
    spec: &FindSpec,
    outcome: &plan::TrialOutcome,
    solution: String,
) -> plan::cache::Entry {
    let mut stats = vec![plan::explain::summary(&outcome.winner)];
    stats.extend(outcome.rejected.iter().map(plan::explain::summary));
    plan::cache::Entry {
        key: key.clone(),
        solution,
        works: outcome.winner.common.works,
        active: false,
        created: bson::DateTime::now(),
        created_from: bson::doc! {
            "query": spec.filter.clone(),
            "sort": spec.sort.clone().unwrap_or_default(),
            "projection": spec.projection.clone().unwrap_or_default(),
        },
        cached_plan: plan::explain::plan_document(&outcome.winner),
        creation_stats: stats,
        scores: outcome.scores.clone(),
        index_filter_set: false,
    }
}
