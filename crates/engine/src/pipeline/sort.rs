//! `$sort` (with an optional `limit` when a following `$limit` was folded in: top-k).
//!
//! Blocking; ties keep input order (stable), as MongoDB's sort does. Past
//! `internalQueryMaxBlockingSortMemoryUsageBytes` the buffered documents are written as a
//! sorted run to `<dbpath>/_tmp` (the find path's `exec::spill` runs) when `allowDiskUse`;
//! the output then merges the runs and what stayed in memory, ties to the earlier run.

use super::context::doc_bytes;
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
use crate::exec::spill::{SpillRun, SpilledRuns};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::sort::SortPattern;
use std::any::Any;
use std::cmp::Ordering;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Sort {
    pub spec: Document,
    pub pattern: SortPattern,
    /// Keep only the first `limit` results (0 = all).
    pub limit: u64,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::Location(15973),
            "the $sort key specification must be an object",
        ));
    };
    Ok(vec![Arc::new(Sort::new(spec)?)])
}

type Keyed = (Vec<Bson>, Document);

/// The buffered input of one sort and the runs it spilled.
struct Sorter<'a> {
    stage: &'a Sort,
    buffered: Vec<Keyed>,
    memory: usize,
    data_size: usize,
    spilled: SpilledRuns,
}

impl Sorter<'_> {
    fn add(&mut self, ctx: &ExpCtx, d: Document) -> Result<()> {
        let key = sort_key_of(&self.stage.pattern, &d)?;
        let size = doc_bytes(&d);
        self.memory += size;
        self.data_size += size;
        self.buffered.push((key, d));
        let limit = self.stage.limit;
        if limit > 0 && self.buffered.len() as u64 >= limit.saturating_mul(2).max(64) {
            self.sort_buffer();
            self.buffered.truncate(limit as usize);
            self.memory = self.buffered.iter().map(|(_, d)| doc_bytes(d)).sum();
        }
        if self.memory > ctx.sort_max_memory {
            self.spill(ctx)?;
        }
        Ok(())
    }

    /// Stable: equal keys keep their input order.
    fn sort_buffer(&mut self) {
        let pattern = &self.stage.pattern;
        self.buffered
            .sort_by(|a, b| pattern.compare_keys(&a.0, &b.0));
    }

    fn spill(&mut self, ctx: &ExpCtx) -> Result<()> {
        let Some(dir) = ctx.spill_dir() else {
            return Err(Error::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!(
                    "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                    ctx.sort_max_memory
                ),
            ));
        };
        self.sort_buffer();
        if self.stage.limit > 0 {
            self.buffered.truncate(self.stage.limit as usize);
        }
        let buffered = std::mem::take(&mut self.buffered);
        self.spilled
            .write(&dir, buffered.into_iter().map(|(_, d)| Ok(d)))?;
        self.memory = 0;
        Ok(())
    }

    fn report(&self, ctx: &ExpCtx) {
        let mut stats = bson::doc! { "totalDataSizeSortedBytesEstimate": self.data_size as i64 };
        stats.extend(self.spilled.stats());
        ctx.report(stats);
    }
}

/// A document's sort key, read from a raw document of only the top-level fields the pattern
/// reads (serializing the whole document only to read a field or two was most of the cost of
/// a pipeline sort).
fn sort_key_of(pattern: &SortPattern, d: &Document) -> Result<Vec<Bson>> {
    let mut sub = Document::new();
    for f in &pattern.fields {
        let Some(head) = f.path.parts().next() else {
            continue;
        };
        if !sub.contains_key(head) {
            if let Some(v) = d.get(head) {
                sub.insert(head, v.clone());
            }
        }
    }
    let raw =
        nidus_common::encode::document_to_raw(&sub).map_err(|e| Error::internal(e.to_string()))?;
    Ok(pattern.sort_key(&raw))
}

impl Sort {
    pub fn new(spec: &Document) -> Result<Sort> {
        if spec.is_empty() {
            return Err(Error::new(
                ErrorCode::Location(15976),
                "$sort stage must have at least one sort key",
            ));
        }
        Ok(Sort {
            spec: spec.clone(),
            // `{$meta: "textScore"}` orders a `$text` query's find plan (the run refuses it
            // anywhere else); the other fields order as usual.
            pattern: SortPattern::parse(&crate::text::without_text_score(spec))?,
            limit: 0,
        })
    }

    pub fn with_limit(&self, limit: u64) -> Sort {
        let limit = if self.limit == 0 {
            limit
        } else {
            self.limit.min(limit)
        };
        Sort {
            limit,
            ..self.clone()
        }
    }

    /// Sorts a whole input into a vector (shared with `$bucketAuto`).
    pub fn sort_all(&self, input: Stream, ctx: &ExpCtx) -> Result<Vec<Document>> {
        super::stream::collect(self.sorted(input, ctx)?)
    }

    /// The sorted input as a stream: from memory, or merged from the spilled runs.
    pub fn sorted(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let mut sorter = Sorter {
            stage: self,
            buffered: Vec::new(),
            memory: 0,
            data_size: 0,
            spilled: SpilledRuns::default(),
        };
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            sorter.add(ctx, d)?;
        }
        sorter.sort_buffer();
        if self.limit > 0 {
            sorter.buffered.truncate(self.limit as usize);
        }
        sorter.report(ctx);
        let runs = std::mem::take(&mut sorter.spilled.runs);
        let buffered = std::mem::take(&mut sorter.buffered);
        if runs.is_empty() {
            return Ok(VecStream::boxed(
                buffered.into_iter().map(|(_, d)| d).collect(),
            ));
        }
        let mut merge = MergeStream {
            pattern: self.pattern.clone(),
            runs,
            memory: buffered.into_iter(),
            heads: Vec::new(),
            remaining: if self.limit > 0 { self.limit } else { u64::MAX },
        };
        for source in 0..=merge.runs.len() {
            let head = merge.pull(source)?;
            merge.heads.push(head);
        }
        Ok(Box::new(merge))
    }
}

/// Merges sorted runs and the sorted memory remainder (the last source); the smallest head
/// goes first, ties to the earlier source, which holds earlier input.
struct MergeStream {
    pattern: SortPattern,
    runs: Vec<SpillRun>,
    memory: std::vec::IntoIter<Keyed>,
    heads: Vec<Option<(Vec<Bson>, RawOrDoc)>>,
    remaining: u64,
}

enum RawOrDoc {
    Raw(RawDocumentBuf),
    Doc(Document),
}

impl MergeStream {
    fn pull(&mut self, source: usize) -> Result<Option<(Vec<Bson>, RawOrDoc)>> {
        if let Some(run) = self.runs.get_mut(source) {
            return Ok(run.next()?.map(|(_, raw)| {
                let key = self.pattern.sort_key(&raw);
                (key, RawOrDoc::Raw(raw))
            }));
        }
        Ok(self.memory.next().map(|(k, d)| (k, RawOrDoc::Doc(d))))
    }
}

impl DocStream for MergeStream {
    fn next(&mut self) -> Result<Option<Document>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let mut best: Option<usize> = None;
        for i in 0..self.heads.len() {
            let Some((k, _)) = &self.heads[i] else {
                continue;
            };
            let better = match best.and_then(|b| self.heads[b].as_ref()) {
                Some((bk, _)) => self.pattern.compare_keys(k, bk) == Ordering::Less,
                None => true,
            };
            if better {
                best = Some(i);
            }
        }
        let Some(best) = best else {
            return Ok(None);
        };
        let taken = self.heads[best].take();
        self.heads[best] = self.pull(best)?;
        self.remaining -= 1;
        match taken {
            Some((_, RawOrDoc::Doc(d))) => Ok(Some(d)),
            Some((_, RawOrDoc::Raw(r))) => Ok(Some(
                r.to_document()
                    .map_err(|e| Error::internal(e.to_string()))?,
            )),
            None => Ok(None),
        }
    }
}

impl DocumentSource for Sort {
    fn name(&self) -> &'static str {
        "$sort"
    }

    fn serialize(&self) -> Bson {
        let mut d = bson::doc! {"sortKey": self.spec.clone()};
        if self.limit > 0 {
            d.insert("limit", self.limit as i64);
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(super::stream::Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Sort, input, ctx| stage.sorted(input, ctx),
        )))
    }

    /// A plain sort changes no path, so a `$match` may run before it; a top-k sort drops
    /// documents, so one may not.
    fn modified(&self) -> super::Modified {
        if self.limit == 0 {
            super::Modified::Paths(Vec::new())
        } else {
            super::Modified::All
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
