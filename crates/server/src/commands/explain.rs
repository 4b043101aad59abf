//! `explain` of `find` and `count`: the plan the query would run with (`queryPlanner`), and
//! with `executionStats`/`allPlansExecution` the counters of running it to completion.

use super::{find, wrong_type, Ctx};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::plan::explain;
use nidus_query::matcher::Matcher;
use std::time::Instant;

#[derive(PartialEq, Clone, Copy)]
enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

fn verbosity(ctx: &Ctx) -> Result<Verbosity> {
    match ctx.body.get("verbosity") {
        None => Ok(Verbosity::AllPlansExecution),
        Some(Bson::String(v)) => match v.as_str() {
            "queryPlanner" => Ok(Verbosity::QueryPlanner),
            "executionStats" => Ok(Verbosity::ExecutionStats),
            "allPlansExecution" => Ok(Verbosity::AllPlansExecution),
            other => Err(Error::new(
                ErrorCode::BadValue,
                format!("Enumeration value '{other}' for field 'explain.verbosity' is not a valid value."),
            )),
        },
        Some(other) => Err(wrong_type("explain", "verbosity", other, "string")),
    }
}

fn pipeline_verbosity(v: Verbosity) -> nidus_engine::pipeline::explain::Verbosity {
    use nidus_engine::pipeline::explain::Verbosity as P;
    match v {
        Verbosity::QueryPlanner => P::QueryPlanner,
        Verbosity::ExecutionStats => P::ExecutionStats,
        Verbosity::AllPlansExecution => P::AllPlansExecution,
    }
}

pub fn explain(ctx: &mut Ctx) -> Result<Document> {
    let verbosity = verbosity(ctx)?;
    let inner = match ctx.body.get("explain") {
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(wrong_type("explain", "explain", other, "object")),
        None => return Err(Error::bad_value("explain requires a command")),
    };
    let name = inner.keys().next().cloned().unwrap_or_default();
    // The inner command is parsed as if it had been sent alone.
    let outer = std::mem::replace(&mut ctx.body, std::sync::Arc::new(inner.clone()));
    let write = matches!(
        name.as_str(),
        "update" | "delete" | "findAndModify" | "findandmodify"
    );
    if name == "aggregate" || write {
        let reply = if write {
            super::explain_write::explain(ctx, pipeline_verbosity(verbosity))
        } else {
            super::aggregate::explain(ctx, pipeline_verbosity(verbosity))
        };
        ctx.body = outer;
        let mut reply = reply?;
        reply.insert("command", inner);
        reply.insert("serverInfo", server_info(ctx));
        return Ok(reply);
    }
    let parsed = match name.as_str() {
        "find" => find::find_spec(ctx).map(|(ns, spec)| (ns, spec, None)),
        "count" => find::count_spec(ctx).map(|(ns, spec)| (ns, spec, None)),
        "distinct" => find::distinct_spec(ctx).map(|(ns, spec, key)| (ns, spec, Some(key))),
        _ => Err(Error::new(
            ErrorCode::CommandNotFound,
            format!("Explain failed due to unknown command: {name}"),
        )),
    };
    // Through a view, the aggregation the command becomes is explained.
    let view_stages = match &parsed {
        Ok((ns, spec, _)) if ctx.state.engine.view(ns).is_some() => Some(match name.as_str() {
            "find" => super::views::find_pipeline(ctx, spec),
            "count" => Ok(super::views::count_pipeline(spec)),
            _ => Ok(super::views::distinct_pipeline(spec)),
        }),
        _ => None,
    };
    ctx.body = outer;
    let (ns, spec, distinct_key) = parsed?;
    let mut reply = match view_stages {
        Some(stages) => {
            let started = Instant::now();
            let mut opened = super::views::open(ctx, &ns, stages?, spec.let_vars.as_ref())?;
            let mut n = 0u64;
            if verbosity != Verbosity::QueryPlanner {
                while opened.stream.next()?.is_some() {
                    n += 1;
                }
            }
            let millis = started.elapsed().as_millis() as u64;
            nidus_engine::pipeline::explain::explain(
                &opened,
                pipeline_verbosity(verbosity),
                n,
                millis,
            )
        }
        None => run(ctx, &ns, &spec, distinct_key.as_deref(), verbosity)?,
    };
    reply.insert("command", inner);
    reply.insert("serverInfo", server_info(ctx));
    Ok(reply)
}

/// Plans (and with executionStats runs) a find, count or distinct (`distinct_key`).
fn run(
    ctx: &Ctx,
    ns: &Namespace,
    spec: &FindSpec,
    distinct_key: Option<&str>,
    verbosity: Verbosity,
) -> Result<Document> {
    let started = Instant::now();
    let coll = ctx.state.engine.collection(ns);
    let spec = FindSpec {
        explain: true,
        ..spec.clone()
    };
    let engine = &ctx.state.engine;
    let mut exec = match distinct_key {
        Some(key) => engine.plan_distinct(coll.as_ref(), &spec, key)?,
        None => engine.plan_find(coll.as_ref(), &spec)?,
    };
    let parsed = if nidus_engine::text::filter_has_text(&spec.filter) {
        nidus_engine::text::parsed_query(&spec.filter)?
    } else {
        Matcher::parse(&spec.filter)?.canonical_document()
    };
    let mut n = 0u64;
    if verbosity != Verbosity::QueryPlanner {
        while exec.get_next()?.is_some() {
            n += 1;
        }
    }
    let mut reply = doc! {
        "explainVersion": "1",
        "queryPlanner": explain::query_planner(&ns.full(), parsed, &exec),
    };
    if verbosity != Verbosity::QueryPlanner {
        let millis = started.elapsed().as_millis() as u64;
        let all = verbosity == Verbosity::AllPlansExecution;
        reply.insert(
            "executionStats",
            explain::execution_stats(&exec, n, millis, all),
        );
    }
    Ok(reply)
}

fn server_info(ctx: &Ctx) -> Document {
    doc! {
        "host": nidus_common::hostname(),
        "port": i32::from(ctx.state.config.port),
        "version": super::info::COMPATIBLE_VERSION,
        "gitVersion": "nidus",
    }
}
