//! Pull-based execution stages named as MongoDB's explain names them.
//!
//! Every stage sits in a [`Stage`] wrapper that counts `works`, `advanced`, `needTime` and
//! `isEOF`; explain and (later) the multi-planner read the same counters, so they cannot
//! disagree with what ran.

mod clustered_scan;
mod collscan;
mod count;
mod count_scan;
mod delete;
mod distinct_scan;
mod eof;
mod express;
mod fetch;
mod geo_near;
mod ixscan;
mod limit;
mod or;
mod projection;
mod projection_covered;
mod queued_data;
mod return_key;
mod skip;
mod sort;
mod sort_merge;
pub(crate) mod spill;
mod update;

pub use clustered_scan::ClusteredScan;
pub use collscan::CollScan;
pub use count::{Count, RecordStoreFastCount};
pub use count_scan::CountScan;
pub use delete::DeleteExplain;
pub use distinct_scan::DistinctScan;
pub use eof::Eof;
pub use express::{ExpressIxscan, ExpressWrite, ExpressWriteKind};
pub use fetch::Fetch;
pub use geo_near::{nearest_distance, GeoNear2dSphere};
pub use ixscan::IndexScan;
pub use limit::Limit;
pub use or::OrStage;
pub use projection::ProjectionStage;
pub use projection_covered::ProjectionCovered;
pub use queued_data::QueuedData;
pub use return_key::ReturnKey;
pub use skip::Skip;
pub use sort::{Sort, SortLimits, MAX_SORT_MEMORY_BYTES};
pub use sort_merge::SortMerge;
pub use update::{has_positional, ReturnDoc, UpdateAction, UpdateExplain, WouldUpdate};

use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::KvSnapshot;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// An index key as a result carries it (MongoDB's IndexKeyDatum): the key pattern's paths
/// and the key's values, one per path.
#[derive(Clone)]
pub struct KeyData {
    pub paths: Arc<[String]>,
    pub values: Vec<Bson>,
}

impl KeyData {
    /// The document the key describes (`{a: {b: 1}}` for path `a.b`), which covered plans
    /// project and sort instead of the stored document.
    pub fn to_document(&self) -> Document {
        let mut d = Document::new();
        for (path, v) in self.paths.iter().zip(&self.values) {
            nidus_doc::path::set_path(&mut d, path, v.clone());
        }
        d
    }

    pub fn value_of(&self, path: &str) -> Option<&Bson> {
        self.paths
            .iter()
            .position(|p| p == path)
            .map(|i| &self.values[i])
    }
}

/// Drops the record ids a stage already returned (multikey scans, merged and OR'ed scans),
/// counting what explain reports as `dupsTested` and `dupsDropped`.
#[derive(Default)]
pub struct RecordIdDedup {
    seen: std::collections::HashSet<u64>,
    tested: i64,
    dropped: i64,
}

impl RecordIdDedup {
    /// True the first time `rid` is seen.
    pub fn first_time(&mut self, rid: u64) -> bool {
        self.tested += 1;
        let new = self.seen.insert(rid);
        self.dropped += i64::from(!new);
        new
    }

    /// Adds `dupsTested` and `dupsDropped` to a stage's explain fields.
    pub fn add_stats(&self, d: &mut Document) {
        d.insert("dupsTested", self.tested);
        d.insert("dupsDropped", self.dropped);
    }
}

/// A result flowing between stages (MongoDB's WorkingSetMember): a record id, the document
/// once fetched, and the index key while it comes from an index scan.
#[derive(Clone)]
pub struct Member {
    pub rid: Option<u64>,
    pub doc: Option<RawDocumentBuf>,
    /// The index key (set by IXSCAN, dropped by FETCH).
    pub key: Option<KeyData>,
    /// The snapshot the key was read in, so FETCH reads the document the key points at.
    pub snapshot: Option<Arc<dyn KvSnapshot>>,
    /// `{$meta: "textScore"}` (set by TEXT_OR).
    pub text_score: Option<f64>,
}

impl Member {
    pub fn with_doc(rid: Option<u64>, doc: RawDocumentBuf) -> Member {
        Member {
            rid,
            doc: Some(doc),
            key: None,
            snapshot: None,
            text_score: None,
        }
    }

    /// A record id alone (see `FindSpec::record_ids_only`).
    pub fn rid_only(rid: u64) -> Member {
        Member {
            rid: Some(rid),
            doc: None,
            key: None,
            snapshot: None,
            text_score: None,
        }
    }

    /// The document; every stage that needs one sits above a stage that provides it.
    pub fn doc(&self) -> Result<&RawDocumentBuf> {
        self.doc
            .as_ref()
            .ok_or_else(|| Error::internal("plan stage received an index key without its document"))
    }

    /// The document, or the one the index key describes when no document was fetched
    /// (covered plans).
    pub fn doc_or_key(&self) -> Result<Cow<'_, RawDocumentBuf>> {
        match (&self.doc, &self.key) {
            (Some(d), _) => Ok(Cow::Borrowed(d)),
            (None, Some(k)) => nidus_common::encode::document_to_raw(&k.to_document())
                .map(Cow::Owned)
                .map_err(|e| Error::internal(e.to_string())),
            (None, None) => self.doc().map(Cow::Borrowed),
        }
    }

    pub fn into_doc(self) -> Result<RawDocumentBuf> {
        self.doc
            .ok_or_else(|| Error::internal("plan stage received an index key without its document"))
    }
}

pub enum StageState {
    Advanced(Member),
    NeedTime,
    IsEof,
}

/// The counters every stage reports in explain (`plan_stage.h`'s CommonStats).
#[derive(Debug, Default, Clone)]
pub struct CommonStats {
    pub works: u64,
    pub advanced: u64,
    pub need_time: u64,
    pub need_yield: u64,
    pub save_state: u64,
    pub restore_state: u64,
    pub is_eof: bool,
}

impl CommonStats {
    /// Adds the counters of one part of a split stage (see [`StageImpl::split`]), so the
    /// stage reports what it would have run alone: the parts' end-of-input `work`s count
    /// once.
    pub fn absorb_part(&mut self, part: &CommonStats) {
        self.works += part.works - u64::from(part.is_eof);
        if part.is_eof && !self.is_eof {
            self.works += 1;
            self.is_eof = true;
        }
        self.advanced += part.advanced;
        self.need_time += part.need_time;
        self.need_yield += part.need_yield;
        self.save_state += part.save_state;
        self.restore_state += part.restore_state;
    }
}

/// What a concrete stage implements; the wrapper does the counting.
pub trait StageImpl: Send {
    /// The explain name (`COLLSCAN`, `SORT`, ...).
    fn name(&self) -> &'static str;
    fn work(&mut self) -> Result<StageState>;
    /// Stage-specific explain fields (`docsExamined`, `keysExamined`, `filter`, ...).
    fn specific_stats(&self) -> Document {
        Document::new()
    }
    fn children(&self) -> Vec<&Stage> {
        Vec::new()
    }
    /// One integer counter of [`StageImpl::specific_stats`] (`keysExamined`, ...), which a
    /// stage on the hot path answers without building the whole document.
    fn counter(&self, field: &str) -> Option<i64> {
        match self.specific_stats().get(field) {
            Some(bson::Bson::Int64(n)) => Some(*n),
            Some(bson::Bson::Int32(n)) => Some(i64::from(*n)),
            _ => None,
        }
    }
    /// The `keyPattern` and `indexName` of [`StageImpl::specific_stats`] (plan summaries and
    /// `$indexStats`), likewise.
    fn index_fields(&self) -> (Option<bson::Bson>, Option<String>) {
        let mut stats = self.specific_stats();
        let name = match stats.remove("indexName") {
            Some(bson::Bson::String(s)) => Some(s),
            _ => None,
        };
        (stats.remove("keyPattern"), name)
    }
    /// [`StageImpl::index_fields`]' index name alone (`$indexStats`, once per query), which a
    /// stage on the hot path answers without building the key pattern.
    fn index_name(&self) -> Option<String> {
        self.index_fields().1
    }
    /// [`StageImpl::index_fields`]' key pattern as plan summaries print it, when the stage
    /// has it formatted already (else the summary formats `index_fields().0`).
    fn key_text(&self) -> Option<&str> {
        None
    }
    /// The plan summary of a leaf that stands for a whole plan of its own (an aggregation's
    /// output, whose documents come from the pipeline's find plan).
    fn inner_summary(&self) -> Option<String> {
        None
    }
    /// Hears the executor's deadline (stages that check it themselves, such as an
    /// aggregation pipeline's output, whose blocking stages run inside one `work`).
    fn set_deadline(&mut self, _deadline: Option<Instant>) {}
    /// Splits a stage that has not run into at most `n` stages that together return what it
    /// would, the first's results first, each runnable on a thread of its own (a parallel
    /// `$group`). The stage keeps answering its explain counters for all of them. None: it
    /// does not split.
    fn split(&mut self, _n: usize) -> Option<Vec<Box<dyn StageImpl>>> {
        None
    }
}

pub struct Stage {
    imp: Box<dyn StageImpl>,
    pub common: CommonStats,
}

impl Stage {
    pub fn new(imp: impl StageImpl + 'static) -> Stage {
        Stage {
            imp: Box::new(imp),
            common: CommonStats::default(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.imp.name()
    }

    /// Splits a stage that has not run into at most `n` stages (see [`StageImpl::split`]),
    /// whose counters start at zero; [`CommonStats::absorb_part`] adds them back.
    pub fn split(&mut self, n: usize) -> Option<Vec<Stage>> {
        if self.common.works > 0 {
            return None;
        }
        let parts = self.imp.split(n)?;
        Some(
            parts
                .into_iter()
                .map(|imp| Stage {
                    imp,
                    common: CommonStats::default(),
                })
                .collect(),
        )
    }

    pub fn work(&mut self) -> Result<StageState> {
        self.common.works += 1;
        let state = self.imp.work()?;
        match &state {
            StageState::Advanced(_) => self.common.advanced += 1,
            StageState::NeedTime => self.common.need_time += 1,
            StageState::IsEof => self.common.is_eof = true,
        }
        Ok(state)
    }

    pub fn specific_stats(&self) -> Document {
        self.imp.specific_stats()
    }

    pub fn children(&self) -> Vec<&Stage> {
        self.imp.children()
    }

    /// Sum of a specific counter over this subtree (for `totalDocsExamined` and friends).
    pub fn total(&self, field: &str) -> i64 {
        let own = self.imp.counter(field).unwrap_or(0);
        own + self.children().iter().map(|c| c.total(field)).sum::<i64>()
    }

    /// The `indexName` of this stage's specific stats, if it reads an index.
    pub fn index_name(&self) -> Option<String> {
        self.imp.index_name()
    }

    /// One-line plan summary for logs and the profiler: the plan's leaf stages, scans with
    /// their key patterns (`COLLSCAN`, `IXSCAN { a: 1 }`, `IXSCAN { a: 1 }, IXSCAN { b: 1 }`).
    pub fn plan_summary(&self) -> String {
        let mut leaves = Vec::with_capacity(1);
        self.summary_leaves(&mut leaves);
        leaves.join(", ")
    }

    fn summary_leaves(&self, out: &mut Vec<String>) {
        let children = self.children();
        if let (true, Some(inner)) = (children.is_empty(), self.imp.inner_summary()) {
            out.push(inner);
        } else if children.is_empty() {
            out.push(match self.imp.key_text() {
                Some(k) => [self.name(), " ", k].concat(),
                None => match self.imp.index_fields().0 {
                    Some(k) => format!("{} {}", self.name(), nidus_common::shell::format(&k)),
                    None => self.name().to_string(),
                },
            });
        }
        for c in children {
            c.summary_leaves(out);
        }
    }
}

/// Fails once `deadline` passed (MaxTimeMSExpired) or the thread's operation was killed
/// (Interrupted).
pub fn check_deadline(deadline: Option<Instant>) -> Result<()> {
    crate::opctx::check_interrupt()?;
    match deadline {
        Some(d) if Instant::now() >= d => Err(Error::new(
            ErrorCode::MaxTimeMSExpired,
            "operation exceeded time limit",
        )),
        _ => Ok(()),
    }
}

/// Drives a plan to produce documents, enforcing `maxTimeMS`.
pub struct Executor {
    pub root: Stage,
    deadline: Option<Instant>,
    /// Results the winning plan produced during the multi-planner's trial.
    buffered: VecDeque<Member>,
    /// The plans that lost the trial (for explain).
    pub rejected: Vec<Stage>,
    /// A candidate could not explode for its sort within the scan limit (explain's
    /// `maxScansToExplodeReached`).
    pub max_scans_to_explode_reached: bool,
    /// The plan came from the plan cache (explain's `isCached`).
    pub is_cached: bool,
    /// The query's plan cache shape and key, when it was computed.
    pub cache_key: Option<crate::plan::cache::CacheKey>,
    /// An index filter restricted the indexes considered (explain's `indexFilterSet`).
    pub index_filter_set: bool,
    /// `find`'s `showRecordId`: each document gets its record id as `$recordId` (a long),
    /// last, after any projection (no stage of its own, as in MongoDB's explain).
    pub show_record_id: bool,
}

impl Executor {
    pub fn new(root: Stage, deadline: Option<Instant>) -> Executor {
        Executor {
            root,
            deadline,
            buffered: VecDeque::new(),
            rejected: Vec::new(),
            max_scans_to_explode_reached: false,
            is_cached: false,
            cache_key: None,
            index_filter_set: false,
            show_record_id: false,
        }
    }

    pub fn from_trial(outcome: crate::plan::TrialOutcome, deadline: Option<Instant>) -> Executor {
        Executor {
            root: outcome.winner,
            deadline,
            buffered: outcome.buffered,
            rejected: outcome.rejected,
            max_scans_to_explode_reached: false,
            is_cached: false,
            cache_key: None,
            index_filter_set: false,
            show_record_id: false,
        }
    }

    /// Puts a stage over the plan (a write over its read plan): `wrap` gets the old root and
    /// the results the multi-planner's trial buffered, which the new root must consume first.
    pub fn wrap_root(&mut self, wrap: impl FnOnce(Stage, VecDeque<Member>) -> Stage) {
        let root = std::mem::replace(&mut self.root, Stage::new(Eof));
        let buffered = std::mem::take(&mut self.buffered);
        self.root = wrap(root, buffered);
    }

    /// The same plan under a COUNT stage, which also counts the results the trial produced.
    pub fn into_count(mut self, skip: u64, limit: u64) -> Executor {
        self.wrap_root(|root, buffered| Stage::new(Count::new(root, buffered, skip, limit)));
        self
    }

    /// What a COUNT or RECORD_STORE_FAST_COUNT root counted.
    pub fn counted(&self) -> i64 {
        match self.root.specific_stats().get("nCounted") {
            Some(Bson::Int64(n)) => *n,
            _ => 0,
        }
    }

    /// Splits a plan that has not run into at most `n` executors (see [`StageImpl::split`]);
    /// only a plan whose root splits does.
    pub fn split(&mut self, n: usize) -> Option<Vec<Executor>> {
        if !self.buffered.is_empty() {
            return None;
        }
        let parts = self.root.split(n)?;
        Some(
            parts
                .into_iter()
                .map(|root| Executor::new(root, self.deadline))
                .collect(),
        )
    }

    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.root.imp.set_deadline(deadline);
    }

    /// The next result, or None at end of stream.
    pub fn get_next(&mut self) -> Result<Option<Member>> {
        if let Some(m) = self.buffered.pop_front() {
            return Ok(Some(m));
        }
        loop {
            // Every 128 works whatever they returned: a plan whose every work advances
            // (a scan where each document matches) must time out too.
            if self.root.common.works.is_multiple_of(128) {
                self.check_deadline()?;
            }
            match self.root.work()? {
                StageState::Advanced(m) => return Ok(Some(m)),
                StageState::IsEof => return Ok(None),
                StageState::NeedTime => {}
            }
        }
    }

    /// The next result's document, or None at end of stream.
    pub fn next_doc(&mut self) -> Result<Option<RawDocumentBuf>> {
        let Some(m) = self.get_next()? else {
            return Ok(None);
        };
        let rid = m.rid;
        let mut doc = m.into_doc()?;
        if let (true, Some(rid)) = (self.show_record_id, rid) {
            let mut d = doc
                .to_document()
                .map_err(|e| Error::internal(e.to_string()))?;
            d.insert("$recordId", rid as i64);
            doc = nidus_common::encode::document_to_raw(&d)
                .map_err(|e| Error::internal(e.to_string()))?;
        }
        Ok(Some(doc))
    }

    /// Fails once the deadline passed (MaxTimeMSExpired) or the operation running the plan
    /// was killed (Interrupted).
    pub fn check_deadline(&self) -> Result<()> {
        check_deadline(self.deadline)
    }

    pub fn is_eof(&self) -> bool {
        self.root.common.is_eof
    }
}
