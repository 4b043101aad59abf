//! Opening a pipeline: bind variables, optimize, move the leading stages into the
//! collection's find plan (`$cursor`), and chain the remaining stages' streams.

use super::stream::{Counted, Empty};
use super::{optimize, DocStream, ExpCtx, StageRef, Stream};
use crate::exec::{Executor, Member, Stage, StageImpl, StageState};
use crate::find::FindSpec;
use crate::namespace::Namespace;
use bson::Document;
use nidus_common::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

/// An opened pipeline: its output stream and what explain reports about it.
pub struct Opened {
    pub stream: Stream,
    /// The find plan feeding the pipeline and how many documents it returned.
    pub cursor: Option<CursorSource>,
    /// The stages left after optimization, with their `nReturned` counters.
    pub stages: Vec<(StageRef, Arc<AtomicU64>)>,
    /// Each remaining stage's execution statistics (same order as `stages`).
    pub stats: Vec<super::context::StageStats>,
    /// The optimizer rules that changed the pipeline, in order.
    pub rewrites: Vec<&'static str>,
    pub ctx: ExpCtx,
}

/// The `$cursor` stage: the executor of the pushed-down find.
#[derive(Clone)]
pub struct CursorSource {
    pub ns: Namespace,
    pub spec: FindSpec,
    pub exec: Arc<Mutex<Executor>>,
    pub returned: Arc<AtomicU64>,
}

/// Opens `stages` over the collection `ns` (None: the pipeline starts with a source stage
/// such as `$documents`, or reads `input`).
pub fn open(
    ctx: &ExpCtx,
    ns: Option<&Namespace>,
    stages: &[StageRef],
    input: Option<Stream>,
) -> Result<Opened> {
    // A view reads its collection through its pipeline, optimized with the reader's stages.
    let resolved;
    let (ns, stages) = match (ns, &input) {
        (Some(view), None) => match ctx.engine.resolve_view(view)? {
            Some(r) => {
                // The pipeline runs under the view's collation (the command's was resolved
                // to it); a sub-pipeline's collation must be the view's too.
                crate::view::check_view_collation(r.collation.as_ref(), ctx.collation.as_ref())?;
                let docs: Vec<bson::Bson> =
                    r.pipeline.into_iter().map(bson::Bson::Document).collect();
                // The views a sub-pipeline reads count towards its depth (a `$lookup` over a
                // view of `$lookup`s over views): resolve them while parsing.
                let pcx = super::ParseCtx::new(&r.ns.db).with_views(ctx.engine.clone());
                let mut all = super::parse_pipeline(&docs, &pcx)?;
                all.extend(stages.iter().cloned());
                resolved = (r.ns, all);
                (Some(&resolved.0), resolved.1.as_slice())
            }
            None => (Some(view), stages),
        },
        _ => (ns, stages),
    };
    let scoped;
    let ctx = match ns {
        Some(ns) if ctx.namespace.as_ref() != Some(ns) => {
            scoped = ctx.on_namespace(ns);
            &scoped
        }
        _ => ctx,
    };
    let mut stages = bind(ctx, stages)?;
    let mut rewrites = optimize::optimize(&mut stages)?;
    let starts_with_source = stages.first().is_some_and(|s| s.is_source());
    let (mut stream, cursor): (Stream, Option<CursorSource>) = match (input, ns) {
        (Some(input), _) => (input, None),
        (None, Some(ns)) if !starts_with_source => {
            let (mut spec, taken) = optimize::cursor_pushdown::take(&mut stages, ctx.deadline());
            spec.source = ctx.source.clone();
            spec.hint = ctx.hint.clone();
            let coll = ctx
                .engine
                .collection_in(ns, ctx.source.as_ref().and_then(|s| s.txn()));
            // The pipeline's collation (the command's, or the aggregated collection's default)
            // is every stage's: a sub-pipeline's collection does not bring its own default.
            spec.collation = ctx.collation.clone().or_else(|| {
                coll.as_ref()
                    .and_then(|c| c.default_collation())
                    .map(|_| bson::doc! {"locale": "simple"})
            });
            // A `$sort` handed to the find plan keeps the aggregate's memory rules.
            spec.allow_disk_use = ctx.allow_disk_use;
            spec.sort_memory_limit = Some(ctx.sort_max_memory);
            spec.parallelism = ctx.parallelism;
            if taken {
                rewrites.push(optimize::cursor_pushdown::NAME);
            }
            let exec = ctx.engine.plan_find(coll.as_ref(), &spec)?;
            let source = CursorSource {
                ns: ns.clone(),
                spec,
                exec: Arc::new(Mutex::new(exec)),
                returned: Arc::new(AtomicU64::new(0)),
            };
            let stream = Box::new(CursorStream {
                exec: source.exec.clone(),
                ctx: ctx.clone(),
                fields: stages.first().and_then(|s| s.input_fields()),
                whole: None,
            });
            let counted = Box::new(Counted {
                inner: stream,
                count: source.returned.clone(),
            });
            (counted, Some(source))
        }
        _ => (Box::new(Empty), None),
    };
    // `$text` and its score live in the find plan: no stage left may need them.
    crate::text::check_pipeline_rest(&stages)?;
    let mut opened_stages = Vec::with_capacity(stages.len());
    let mut stats = Vec::with_capacity(stages.len());
    for s in stages {
        let count = Arc::new(AtomicU64::new(0));
        let slot = super::context::StageStats::default();
        let mut stage_ctx = ctx.clone();
        stage_ctx.stats = Some(slot.clone());
        // The command's hint names an index of this pipeline's collection only.
        stage_ctx.hint = None;
        stream = Box::new(Counted {
            inner: s.open(stream, &stage_ctx)?,
            count: count.clone(),
        });
        opened_stages.push((s, count));
        stats.push(slot);
    }
    Ok(Opened {
        stream,
        cursor,
        stages: opened_stages,
        stats,
        rewrites,
        ctx: ctx.clone(),
    })
}

/// Opens a pipeline and drains it (sub-pipelines of `$lookup`, `$facet`, `$unionWith`).
pub fn collect(
    ctx: &ExpCtx,
    ns: Option<&Namespace>,
    stages: &[StageRef],
    input: Option<Stream>,
) -> Result<Vec<Document>> {
    let opened = open(ctx, ns, stages, input)?;
    super::stream::collect(opened.stream)
}

fn bind(ctx: &ExpCtx, stages: &[StageRef]) -> Result<Vec<StageRef>> {
    stages
        .iter()
        .map(|s| Ok(s.bind(ctx)?.unwrap_or_else(|| s.clone())))
        .collect()
}

struct CursorStream {
    exec: Arc<Mutex<Executor>>,
    ctx: ExpCtx,
    /// The only top-level fields the next stage reads (None: all).
    fields: Option<Vec<String>>,
    /// A part of a split stream: the executor it was split from, which reports the parts'
    /// counters (explain, the profiler) as its own.
    whole: Option<Arc<Mutex<Executor>>>,
}

impl Drop for CursorStream {
    fn drop(&mut self) {
        if let Some(whole) = &self.whole {
            let part = self.exec.lock();
            whole.lock().root.common.absorb_part(&part.root.common);
        }
    }
}

impl DocStream for CursorStream {
    fn next(&mut self) -> Result<Option<Document>> {
        self.ctx.check_interrupt()?;
        let mut exec = self.exec.lock();
        exec.set_deadline(self.ctx.deadline());
        let Some(raw) = exec.next_doc()? else {
            return Ok(None);
        };
        let decode = |e: bson::raw::Error| Error::internal(e.to_string());
        if let Some(d) = super::raw_fields::select(&raw, self.fields.as_deref()) {
            return Ok(Some(d));
        }
        let Some(fields) = &self.fields else {
            return Ok(Some(raw.to_document().map_err(decode)?));
        };
        let mut d = Document::new();
        for element in raw.iter() {
            let (k, v) = element.map_err(decode)?;
            if fields.iter().any(|f| f == k) {
                let v = bson::Bson::try_from(v.to_raw_bson()).map_err(decode)?;
                d.insert(k, v);
            }
        }
        Ok(Some(d))
    }

    fn split(&mut self, n: usize) -> Option<Vec<super::Stream>> {
        let parts = self.exec.lock().split(n)?;
        Some(
            parts
                .into_iter()
                .map(|exec| {
                    Box::new(CursorStream {
                        exec: Arc::new(Mutex::new(exec)),
                        ctx: self.ctx.clone(),
                        fields: self.fields.clone(),
                        whole: Some(self.exec.clone()),
                    }) as super::Stream
                })
                .collect(),
        )
    }
}

impl Opened {
    /// An executor over the pipeline's output, for the server's cursor registry. Its deadline
    /// (set per `getMore`) reaches every stage.
    pub fn into_executor(self, deadline: Option<Instant>) -> Executor {
        self.ctx.set_deadline(deadline);
        // Everything went into the find plan: its raw documents go out as they are (not
        // through a bson::Document and back).
        if let (true, Some(cursor)) = (self.stages.is_empty(), &self.cursor) {
            let root = RawCursorOutput {
                exec: cursor.exec.clone(),
                returned: cursor.returned.clone(),
                ctx: self.ctx,
            };
            return Executor::new(Stage::new(root), deadline);
        }
        let root = PipelineOutput {
            stream: self.stream,
            ctx: self.ctx,
            cursor: self.cursor.map(|c| c.exec),
        };
        Executor::new(Stage::new(root), deadline)
    }
}

/// The output of a pipeline whose stages all went into the find plan.
struct RawCursorOutput {
    exec: Arc<Mutex<Executor>>,
    returned: Arc<AtomicU64>,
    ctx: ExpCtx,
}

impl StageImpl for RawCursorOutput {
    fn name(&self) -> &'static str {
        "PIPELINE"
    }

    fn work(&mut self) -> Result<StageState> {
        self.ctx.check_interrupt()?;
        let mut exec = self.exec.lock();
        exec.set_deadline(self.ctx.deadline());
        match exec.next_doc()? {
            Some(raw) => {
                self.returned
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(StageState::Advanced(Member::with_doc(None, raw)))
            }
            None => Ok(StageState::IsEof),
        }
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.ctx.set_deadline(deadline);
    }

    fn counter(&self, field: &str) -> Option<i64> {
        Some(self.exec.lock().root.total(field))
    }

    fn inner_summary(&self) -> Option<String> {
        Some(self.exec.lock().root.plan_summary())
    }
}

/// The last stage of an aggregation as the find layer sees it. Its counters (keys and
/// documents examined) and plan summary are those of the pipeline's find plan, as the
/// profiler and the slow-query log report an aggregation's.
struct PipelineOutput {
    stream: Stream,
    ctx: ExpCtx,
    cursor: Option<Arc<Mutex<Executor>>>,
}

impl StageImpl for PipelineOutput {
    fn name(&self) -> &'static str {
        "PIPELINE"
    }

    fn work(&mut self) -> Result<StageState> {
        match self.stream.next()? {
            Some(d) => {
                let raw = nidus_common::encode::document_to_raw(&d)
                    .map_err(|e| Error::internal(e.to_string()))?;
                Ok(StageState::Advanced(Member::with_doc(None, raw)))
            }
            None => Ok(StageState::IsEof),
        }
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.ctx.set_deadline(deadline);
    }

    fn counter(&self, field: &str) -> Option<i64> {
        self.cursor.as_ref().map(|c| c.lock().root.total(field))
    }

    fn inner_summary(&self) -> Option<String> {
        self.cursor.as_ref().map(|c| c.lock().root.plan_summary())
    }
}
