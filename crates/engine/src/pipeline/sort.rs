//! `$sort` (with an optional `limit` when a following `$limit` was folded in: top-k).
//!
//! Blocking; ties keep input order (stable), as MongoDB's sort does.

use super::context::doc_bytes;
use super::{DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::sort::SortPattern;
use std::any::Any;
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
            pattern: SortPattern::parse(spec)?,
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

    /// Sorts a whole input (shared with `$bucketAuto`).
    pub fn sort_all(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Vec<Document>> {
        let mut keyed: Vec<(Vec<Bson>, Document)> = Vec::new();
        let mut memory = ctx.memory("$sort");
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            let raw =
                RawDocumentBuf::from_document(&d).map_err(|e| Error::internal(e.to_string()))?;
            let key = self.pattern.sort_key(&raw);
            memory.add(doc_bytes(&d))?;
            keyed.push((key, d));
            if self.limit > 0 && keyed.len() as u64 >= self.limit.saturating_mul(2).max(64) {
                self.truncate(&mut keyed, &mut memory);
            }
        }
        keyed.sort_by(|a, b| self.pattern.compare_keys(&a.0, &b.0));
        if self.limit > 0 {
            keyed.truncate(self.limit as usize);
        }
        Ok(keyed.into_iter().map(|(_, d)| d).collect())
    }

    fn truncate(
        &self,
        keyed: &mut Vec<(Vec<Bson>, Document)>,
        memory: &mut super::context::MemoryBudget,
    ) {
        keyed.sort_by(|a, b| self.pattern.compare_keys(&a.0, &b.0));
        for (_, d) in keyed.drain(self.limit as usize..) {
            memory.release(doc_bytes(&d));
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
            |stage: &Sort, input, ctx| Ok(VecStream::boxed(stage.sort_all(input, ctx)?)),
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
