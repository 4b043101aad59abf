//! `find`, `count` and `distinct` on a view: each becomes the aggregation MongoDB converts it
//! to (`$match`, `$sort`, `$skip`, `$limit`, `$project`; `$count`; a `$match` whose results
//! `distinct` collects), run over the view, whose own pipeline `run::open` prepends and
//! optimizes together with these stages.

use super::find::{batch_reply, register};
use super::Ctx;
use crate::cursor::{Cursor, DEFAULT_FIRST_BATCH};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::pipeline::run::{self, Opened};
use nidus_engine::pipeline::{self, ExpCtx, ParseCtx};

fn not_in_aggregation(option: &str) -> Error {
    Error::new(
        ErrorCode::InvalidPipelineOperator,
        format!("Option {option} not supported in aggregation."),
    )
}

/// The pipeline a find on a view runs; find options aggregation lacks fail as in MongoDB.
pub fn find_pipeline(ctx: &Ctx, spec: &FindSpec) -> Result<Vec<Document>> {
    if spec.min.is_some() {
        return Err(not_in_aggregation("min"));
    }
    if spec.max.is_some() {
        return Err(not_in_aggregation("max"));
    }
    for option in ["returnKey", "showRecordId"] {
        if ctx.opt_bool(option)?.unwrap_or(false) {
            return Err(not_in_aggregation(option));
        }
    }
    if spec.tailable {
        return Err(Error::new(
            ErrorCode::InvalidPipelineOperator,
            "Tailable cursors are not supported in aggregation.",
        ));
    }
    for option in ["noCursorTimeout", "allowPartialResults"] {
        if ctx.opt_bool(option)?.unwrap_or(false) {
            return Err(not_in_aggregation(option));
        }
    }
    if spec
        .sort
        .as_ref()
        .is_some_and(|s| s.contains_key("$natural"))
    {
        return Err(Error::new(
            ErrorCode::InvalidPipelineOperator,
            "Sort option $natural not supported in aggregation.",
        ));
    }
    if ctx.opt_bool("singleBatch")?.unwrap_or(false) && spec.limit != 1 {
        return Err(not_in_aggregation("singleBatch"));
    }
    if ctx.opt_bool("readOnce")?.unwrap_or(false) {
        return Err(not_in_aggregation("readOnce"));
    }
    let mut stages = Vec::new();
    if !spec.filter.is_empty() {
        stages.push(doc! { "$match": spec.filter.clone() });
    }
    if let Some(sort) = spec.sort.as_ref().filter(|s| !s.is_empty()) {
        stages.push(doc! { "$sort": sort.clone() });
    }
    if spec.skip > 0 {
        stages.push(doc! { "$skip": spec.skip as i64 });
    }
    if spec.limit > 0 {
        stages.push(doc! { "$limit": spec.limit as i64 });
    }
    if let Some(p) = spec.projection.as_ref().filter(|p| !p.is_empty()) {
        stages.push(doc! { "$project": p.clone() });
    }
    Ok(stages)
}

/// The pipeline a count on a view runs (ending in `$count`).
pub fn count_pipeline(spec: &FindSpec) -> Vec<Document> {
    let mut stages = Vec::new();
    if !spec.filter.is_empty() {
        stages.push(doc! { "$match": spec.filter.clone() });
    }
    if spec.skip > 0 {
        stages.push(doc! { "$skip": spec.skip as i64 });
    }
    if spec.limit > 0 {
        stages.push(doc! { "$limit": spec.limit as i64 });
    }
    stages.push(doc! { "$count": "count" });
    stages
}

/// The pipeline whose results a distinct on a view collects values from.
pub fn distinct_pipeline(spec: &FindSpec) -> Vec<Document> {
    match spec.filter.is_empty() {
        true => Vec::new(),
        false => vec![doc! { "$match": spec.filter.clone() }],
    }
}

/// The collation a command reading view `ns` runs under: the view's own (None: simple); a
/// command naming another fails (MongoDB's OptionNotSupportedOnView).
pub fn collation(ctx: &Ctx, ns: &Namespace) -> Result<Option<Document>> {
    let own = ctx.state.engine.view(ns).and_then(|v| v.collation.clone());
    if let Some(given) = ctx.opt_document("collation")? {
        nidus_engine::view::check_view_collation(own.as_ref(), Some(&given))?;
    }
    Ok(own)
}

/// Opens `stages` over the view `ns` with the command's `let`, `allowDiskUse` and deadline.
pub fn open(
    ctx: &Ctx,
    ns: &Namespace,
    stages: Vec<Document>,
    let_vars: Option<&Document>,
) -> Result<Opened> {
    let mut exp = ExpCtx::new(ctx.state.engine.clone(), &ctx.db);
    exp.collation = collation(ctx, ns)?;
    exp.allow_disk_use = ctx.opt_bool("allowDiskUse")?.unwrap_or(false);
    exp.set_deadline(ctx.deadline);
    let pcx = ParseCtx::new(&ctx.db);
    if let Some(lets) = let_vars {
        pcx.define_command_let(lets, &exp)?;
    }
    let stages: Vec<Bson> = stages.into_iter().map(Bson::Document).collect();
    let parsed = pipeline::parse_pipeline(&stages, &pcx)?;
    let exp = exp.with_bindings(&pcx);
    run::open(&exp, Some(ns), &parsed, None)
}

pub fn find(
    ctx: &mut Ctx,
    ns: &Namespace,
    spec: &FindSpec,
    batch_size: Option<u64>,
) -> Result<Document> {
    let stages = find_pipeline(ctx, spec)?;
    let opened = open(ctx, ns, stages, spec.let_vars.as_ref())?;
    let single_batch = ctx.opt_bool("singleBatch")?.unwrap_or(false);
    let mut cursor = Cursor::new(ns.clone(), opened.into_executor(ctx.deadline));
    let (batch, done) = cursor.next_batch(Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)))?;
    let id = if done || single_batch {
        0
    } else {
        register(ctx, cursor)
    };
    ctx.batch = batch;
    Ok(batch_reply(ns, id, "firstBatch", Vec::new()))
}

pub fn count(ctx: &mut Ctx, ns: &Namespace, spec: &FindSpec) -> Result<Document> {
    let opened = open(ctx, ns, count_pipeline(spec), None)?;
    let mut stream = opened.stream;
    let n = match stream.next()? {
        Some(d) => match d.get("count") {
            Some(Bson::Int32(n)) => *n as i64,
            Some(Bson::Int64(n)) => *n,
            _ => 0,
        },
        None => 0,
    };
    Ok(doc! { "n": nidus_common::number(n) })
}
