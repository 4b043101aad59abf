//! `aggregate`: parses the command, hands the pipeline to the engine
//! (`nidus_engine::pipeline`: parse, optimize, run), and returns a cursor over its output or,
//! with `explain`, the plan.

use super::find::{batch_reply, check_fields};
use super::{wrong_type, Ctx};
use crate::cursor::{Cursor, DEFAULT_FIRST_BATCH};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::pipeline::explain::Verbosity;
use nidus_engine::pipeline::{self, run, ExpCtx, ParseCtx, Position, StageRef};
use std::time::Instant;

/// The fields of `aggregate` beyond the generic arguments (also what a `$changeStream`
/// aggregate accepts).
pub(super) const FIELDS: &[&str] = &[
    "aggregate",
    "pipeline",
    "cursor",
    "explain",
    "allowDiskUse",
    "collation",
    "hint",
    "let",
    "bypassDocumentValidation",
];

/// A parsed `aggregate` command.
struct Request {
    /// The collection, or None for `aggregate: 1`.
    coll: Option<Namespace>,
    /// The namespace cursors report (`<db>.$cmd.aggregate` without a collection).
    cursor_ns: Namespace,
    stages: Vec<StageRef>,
    ctx: ExpCtx,
    batch_size: Option<i64>,
    explain: bool,
}

pub fn aggregate(ctx: &mut Ctx) -> Result<Document> {
    if super::change_stream::is_change_stream(&ctx.body) {
        return super::change_stream::aggregate(ctx);
    }
    let req = parse(ctx, false)?;
    if req.explain {
        let mut reply = explain_request(&req, Verbosity::QueryPlanner)?;
        reply.insert("command", (*ctx.body).clone());
        return Ok(reply);
    }
    let opened = run::open(&req.ctx, req.coll.as_ref(), &req.stages, None)?;
    let mut cursor = Cursor::new(req.cursor_ns.clone(), opened.into_executor(ctx.deadline));
    let first = req
        .batch_size
        .map(|n| n.max(0) as u64)
        .unwrap_or(DEFAULT_FIRST_BATCH);
    let (batch, done) = cursor.next_batch(Some(first))?;
    let mut examined = (0, 0);
    super::note_read(
        ctx,
        &cursor.exec,
        &mut examined,
        Some(batch.len()),
        Some(if done { 0 } else { -1 }),
    );
    cursor.examined = examined;
    let id = if done {
        0
    } else {
        cursor.exec.set_deadline(None);
        cursor.api = ctx.api.clone();
        ctx.state
            .cursors
            .register(cursor, ctx.conn.auth.owner(), super::find::session_id(ctx))
    };
    ctx.batch = batch;
    Ok(batch_reply(&req.cursor_ns, id, "firstBatch", Vec::new()))
}

/// `explain` of an `aggregate` (the `explain` command with the aggregate as `ctx.body`).
pub fn explain(ctx: &mut Ctx, verbosity: Verbosity) -> Result<Document> {
    let req = parse(ctx, true)?;
    explain_request(&req, verbosity)
}

fn explain_request(req: &Request, verbosity: Verbosity) -> Result<Document> {
    // Explain never writes: a pipeline ending in $out/$merge is only explained, not run.
    if let Some(w) = req.stages.last().filter(|s| s.position() == Position::Last) {
        if verbosity != Verbosity::QueryPlanner {
            return Err(Error::new(
                ErrorCode::Location(51029),
                format!(
                    "{} is not supported with explain verbosity other than queryPlanner",
                    w.name()
                ),
            ));
        }
    }
    let started = Instant::now();
    let mut opened = run::open(&req.ctx, req.coll.as_ref(), &req.stages, None)?;
    let mut n = 0u64;
    if verbosity != Verbosity::QueryPlanner {
        while opened.stream.next()?.is_some() {
            n += 1;
        }
    }
    let millis = started.elapsed().as_millis() as u64;
    Ok(pipeline::explain::explain(&opened, verbosity, n, millis))
}

fn parse(ctx: &Ctx, in_explain: bool) -> Result<Request> {
    check_fields(ctx, FIELDS)?;
    let coll =
        match ctx.body.get("aggregate") {
            Some(Bson::String(_)) => Some(ctx.namespace("aggregate")?),
            Some(v) if pipeline_number_one(v) => None,
            _ => return Err(Error::new(
                ErrorCode::FailedToParse,
                "Invalid command format: the 'aggregate' field must specify a collection name or 1",
            )),
        };
    let explain = ctx.opt_bool("explain")?.unwrap_or(false);
    let batch_size =
        match ctx.body.get("cursor") {
            Some(Bson::Document(c)) => super::opt_i64("aggregate.cursor", c, "batchSize")?,
            Some(other) => return Err(wrong_type("aggregate", "cursor", other, "object")),
            None if explain || in_explain => None,
            None => return Err(Error::new(
                ErrorCode::FailedToParse,
                "The 'cursor' option is required, except for aggregate with the explain argument",
            )),
        };
    if let Some(n) = batch_size.filter(|n| *n < 0) {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'batchSize' value must be >= 0, actual value '{n}'"),
        ));
    }
    let items = match ctx.body.get("pipeline") {
        Some(Bson::Array(a)) => a.clone(),
        Some(other) => return Err(wrong_type("aggregate", "pipeline", other, "array")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'aggregate.pipeline' is missing but a required field",
            ))
        }
    };
    let items = current_op_stage(ctx, coll.is_none(), items)?;
    let items = super::admin::stats_stage(ctx, coll.as_ref(), items)?;
    let mut exp = ExpCtx::new(ctx.state.engine.clone(), &ctx.db);
    exp.source = ctx.read_source();
    if starts_with(ctx, "$listLocalSessions") {
        exp.local_sessions = Some(std::sync::Arc::new(ctx.state.sessions.list()));
    }
    // MongoDB 6.0+ spills by default (`allowDiskUseByDefault`); `false` forbids it.
    exp.allow_disk_use = ctx
        .opt_bool("allowDiskUse")?
        .unwrap_or_else(|| ctx.state.params.allow_disk_use_by_default());
    let limit = |name| {
        ctx.state
            .params
            .i64(name)
            .map_or(pipeline::MAX_BLOCKING_STAGE_BYTES, |n| n.max(0) as usize)
    };
    exp.sort_max_memory = limit("internalQueryMaxBlockingSortMemoryUsageBytes");
    exp.group_max_memory = limit("internalDocumentSourceGroupMaxMemoryBytes");
    exp.bucket_auto_max_memory = limit("internalDocumentSourceBucketAutoMaxMemoryBytes");
    exp.window_max_memory = limit("internalDocumentSourceSetWindowFieldsMaxMemoryBytes");
    exp.lookup_max_memory =
        limit("internalQuerySlotBasedExecutionHashLookupApproxMemoryUseInBytesBeforeSpill");
    exp.collation = match &coll {
        Some(ns) if ctx.state.engine.view(ns).is_some() => super::views::collation(ctx, ns)?,
        Some(ns) => ctx.command_collation(ns)?,
        None => ctx.opt_document("collation")?,
    };
    // Explain runs on one thread: its counters and spills are those of MongoDB's plan.
    if !explain && !in_explain {
        exp.parallelism = cores();
    }
    exp.set_deadline(ctx.deadline);
    exp.hint = super::find::hint(ctx)?;
    if let Some(repl) = ctx.state.repl.as_ref().filter(|r| !r.writable()) {
        if !in_explain && !explain && super::repl_set::pipeline_writes(&ctx.body) {
            exp.primary = Some(repl.primary_writes(ctx.opt_document("writeConcern")?)?);
        }
    }
    let pcx = ParseCtx::new(&ctx.db).with_views(ctx.state.engine.clone());
    if let Some(lets) = ctx.opt_document("let")? {
        pcx.define_command_let(&lets, &exp)?;
    }
    let stages = pipeline::parse_pipeline(&items, &pcx)?;
    let exp = exp.with_bindings(&pcx);
    let cursor_ns = match &coll {
        Some(ns) => ns.clone(),
        None => {
            check_collectionless(&stages)?;
            Namespace::new(&ctx.db, "$cmd.aggregate")
        }
    };
    Ok(Request {
        coll,
        cursor_ns,
        stages,
        ctx: exp,
        batch_size,
        explain,
    })
}

/// A leading `$currentOp` stage becomes `$documents` of the operations running now (the
/// `currentOp` command's documents); it must run on `admin` with `aggregate: 1`.
fn current_op_stage(ctx: &Ctx, collectionless: bool, mut items: Vec<Bson>) -> Result<Vec<Bson>> {
    let Some(Bson::Document(first)) = items.first() else {
        return Ok(items);
    };
    let Some(spec) = first.get("$currentOp") else {
        return Ok(items);
    };
    if ctx.db != "admin" || !collectionless {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            "$currentOp must be run against the 'admin' database with {aggregate: 1}",
        ));
    }
    let Bson::Document(spec) = spec else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "$currentOp options must be specified in an object, but found: ".to_string()
                + crate::commands::type_name(spec),
        ));
    };
    let idle_sessions = !matches!(spec.get("idleSessions"), Some(Bson::Boolean(false)));
    let docs: Vec<Bson> = super::profile::current_op_documents(ctx, idle_sessions)
        .into_iter()
        .map(Bson::Document)
        .collect();
    items[0] = Bson::Document(doc! { "$documents": { "$literal": docs } });
    Ok(items)
}

fn pipeline_number_one(v: &Bson) -> bool {
    matches!(v, Bson::Int32(1) | Bson::Int64(1)) || matches!(v, Bson::Double(f) if *f == 1.0)
}

/// `aggregate: 1` needs a pipeline that starts with a stage producing documents.
fn check_collectionless(stages: &[StageRef]) -> Result<()> {
    match stages.first() {
        Some(s) if s.is_source() => Ok(()),
        first => Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!(
                "{{aggregate: 1}} is not valid for '{}'; a collection is required.",
                first.map_or("an empty pipeline", |s| s.name())
            ),
        )),
    }
}

/// Whether the command's pipeline opens with `stage`.
fn starts_with(ctx: &Ctx, stage: &str) -> bool {
    ctx.body
        .get_array("pipeline")
        .ok()
        .and_then(|p| p.first())
        .and_then(Bson::as_document)
        .is_some_and(|d| d.contains_key(stage))
}

/// The cores this process may run on (read once: the call reads cgroup files).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
