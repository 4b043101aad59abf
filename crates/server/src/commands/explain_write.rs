//! `explain` of `update`, `delete` and `findAndModify`: the write stage over the read plan
//! (see `nidus_engine::explain_write`); with an execution verbosity the plan runs and counts
//! what the write would do, and nothing is written or created.

use super::find::check_fields;
use super::write::{
    check_batch_size, parse_delete_statement, parse_update_statement, statement_opts, to_document,
    DELETE_FIELDS, UPDATE_FIELDS,
};
use super::{find_and_modify, Ctx};
use bson::{doc, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::exec::ReturnDoc;
use nidus_engine::explain_write::{WriteExplainSpec, WriteOp};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::pipeline::explain::Verbosity;
use nidus_engine::plan::explain;
use std::time::Instant;

/// Explains the write command in `ctx.body` (the `explain` field's document).
pub fn explain(ctx: &mut Ctx, verbosity: Verbosity) -> Result<Document> {
    let started = Instant::now();
    let (ns, spec) = match ctx.command_name().as_str() {
        "update" => update_spec(ctx)?,
        "delete" => delete_spec(ctx)?,
        _ => find_and_modify_spec(ctx)?,
    };
    run(ctx, &ns, spec, verbosity, started)
}

/// The one statement of a write batch; MongoDB explains batches of exactly one.
fn single_statement(ctx: &mut Ctx, field: &str) -> Result<Document> {
    let stmts = ctx.documents(field)?;
    check_batch_size(stmts.len())?;
    match stmts.as_slice() {
        [one] => to_document(one),
        _ => Err(Error::new(
            ErrorCode::InvalidLength,
            "explained write batches must be of size 1",
        )),
    }
}

fn find_part(
    ctx: &Ctx,
    filter: Document,
    sort: Option<Document>,
    hint: Option<bson::Bson>,
    opts: &nidus_engine::write::WriteOpts,
) -> FindSpec {
    FindSpec {
        filter,
        sort,
        hint,
        deadline: ctx.deadline,
        let_vars: opts.let_vars.clone(),
        collation: opts.collation.clone(),
        explain: true,
        ..FindSpec::default()
    }
}

fn update_spec(ctx: &mut Ctx) -> Result<(Namespace, WriteExplainSpec)> {
    check_fields(ctx, UPDATE_FIELDS)?;
    let ns = ctx.namespace("update")?;
    let stmt = single_statement(ctx, "updates")?;
    let opts = super::write::opts(ctx)?;
    let parsed = parse_update_statement(&stmt, &opts)?;
    let opts = statement_opts(ctx, &opts, &ns, "update.updates", &stmt)?;
    let spec = WriteExplainSpec {
        find: find_part(ctx, parsed.filter, parsed.sort, parsed.hint, &opts),
        op: WriteOp::Update {
            update: Box::new(parsed.update),
            multi: parsed.multi,
            upsert: parsed.upsert,
            returns: ReturnDoc::None,
        },
        fields: None,
    };
    Ok((ns, spec))
}

fn delete_spec(ctx: &mut Ctx) -> Result<(Namespace, WriteExplainSpec)> {
    check_fields(ctx, DELETE_FIELDS)?;
    let ns = ctx.namespace("delete")?;
    let stmt = single_statement(ctx, "deletes")?;
    let opts = super::write::opts(ctx)?;
    let (filter, multi, hint) = parse_delete_statement(&stmt)?;
    let opts = statement_opts(ctx, &opts, &ns, "delete.deletes", &stmt)?;
    let spec = WriteExplainSpec {
        find: find_part(ctx, filter, None, hint, &opts),
        op: WriteOp::Delete {
            multi,
            return_deleted: false,
        },
        fields: None,
    };
    Ok((ns, spec))
}

fn find_and_modify_spec(ctx: &mut Ctx) -> Result<(Namespace, WriteExplainSpec)> {
    let ns = ctx.namespace(&ctx.command_name())?;
    let req = find_and_modify::parse(ctx)?;
    // findAndModify's explain, unlike update's and delete's, needs the database to exist.
    if ctx.state.engine.collections_in(&ctx.db).is_empty() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("database {} does not exist", ctx.db),
        ));
    }
    let opts = super::write::opts(ctx)?.with_collation(ctx.command_collation(&ns)?);
    let op = match (req.remove, req.update) {
        (false, Some(update)) => WriteOp::Update {
            update: Box::new(update),
            multi: false,
            upsert: req.upsert,
            returns: if req.return_new {
                ReturnDoc::New
            } else {
                ReturnDoc::Old
            },
        },
        _ => WriteOp::Delete {
            multi: false,
            return_deleted: true,
        },
    };
    let spec = WriteExplainSpec {
        find: find_part(ctx, req.filter, req.sort, req.hint, &opts),
        op,
        fields: ctx.opt_document("fields")?,
    };
    Ok((ns, spec))
}

fn run(
    ctx: &Ctx,
    ns: &Namespace,
    spec: WriteExplainSpec,
    verbosity: Verbosity,
    started: Instant,
) -> Result<Document> {
    let coll = ctx.state.engine.collection(ns);
    let filter = spec.find.filter.clone();
    let mut exec = ctx.state.engine.plan_write_explain(coll.as_ref(), spec)?;
    let parsed = nidus_query::matcher::Matcher::parse(&filter)
        .map(|m| m.canonical_document())
        .unwrap_or(filter);
    let execute = !matches!(verbosity, Verbosity::QueryPlanner);
    let mut n = 0u64;
    if execute {
        while exec.get_next()?.is_some() {
            n += 1;
        }
    }
    let mut reply = doc! {
        "explainVersion": "1",
        "queryPlanner": explain::query_planner(&ns.full(), parsed, &exec),
    };
    if execute {
        let millis = started.elapsed().as_millis() as u64;
        let all = matches!(verbosity, Verbosity::AllPlansExecution);
        reply.insert(
            "executionStats",
            explain::execution_stats(&exec, n, millis, all),
        );
    }
    Ok(reply)
}
