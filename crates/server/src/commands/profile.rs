//! `profile`, `currentOp` (and the `$currentOp` stage's documents), `killOp`.

use super::find::check_fields;
use super::{wrong_type, Ctx};
use crate::profiler::ProfileFilter;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use std::time::Duration;

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(n) => Some(*n as f64),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) => Some(*f),
        _ => None,
    }
}

/// `{profile: <level>, slowms?, sampleRate?, filter?}`: replies with the settings before the
/// change (`was`, `slowms`, `sampleRate`, `filter`), as MongoDB does. A level outside 0..2
/// (-1 by convention) only reads them.
pub fn profile(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, &["profile", "slowms", "sampleRate", "filter"])?;
    let level = match ctx.body.get("profile") {
        Some(v) => match number(v) {
            Some(f) => f as i64,
            None => return Err(wrong_type("profile", "profile", v, "int")),
        },
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'profile.profile' is missing but a required field",
            ))
        }
    };
    let slowms = match ctx.body.get("slowms") {
        None | Some(Bson::Null) => None,
        Some(v) => match number(v) {
            Some(f) => Some(f as i64),
            None => return Err(wrong_type("profile", "slowms", v, "int")),
        },
    };
    let sample_rate = match ctx.body.get("sampleRate") {
        None | Some(Bson::Null) => None,
        Some(v) => match number(v) {
            Some(f) => Some(f),
            None => return Err(wrong_type("profile", "sampleRate", v, "double")),
        },
    };
    if sample_rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
        return Err(Error::bad_value(
            "'sampleRate' must be between 0.0 and 1.0 inclusive",
        ));
    }
    let filter = match ctx.body.get("filter") {
        None => None,
        Some(Bson::String(s)) if s == "unset" => Some(None),
        Some(Bson::Document(d)) => Some(Some(ProfileFilter::parse(d.clone())?)),
        Some(_) => {
            return Err(Error::bad_value(
                "Expected an object, or the string 'unset'.",
            ))
        }
    };
    let profiler = &ctx.state.profiler;
    let new_level = (0..=2).contains(&level).then_some(level as i32);
    let changes = new_level.is_some() || filter.is_some();
    let filter_given = matches!(filter, Some(Some(_)));
    let old = if changes {
        profiler.set(&ctx.db, new_level, filter)
    } else {
        profiler.settings(&ctx.db)
    };
    let (old_slowms, old_rate) = (profiler.slowms(), profiler.sample_rate());
    let mut reply = doc! {
        "was": old.level,
        "slowms": old_slowms as i32,
        "sampleRate": old_rate,
    };
    if let Some(f) = &old.filter {
        reply.insert("filter", f.expr.clone());
    }
    if old.filter.is_some() || filter_given {
        reply.insert(
            "note",
            "When a filter expression is set, slowms and sampleRate are not used for profiling and slow-query log lines.",
        );
    }
    if let Some(ms) = slowms {
        profiler.set_slowms(ms);
    }
    if let Some(r) = sample_rate {
        profiler.set_sample_rate(r);
    }
    if changes || slowms.is_some() || sample_rate.is_some() {
        let new = profiler.settings(&ctx.db);
        let state_doc = |level: i32, ms: i64, rate: f64, filter: Option<&ProfileFilter>| {
            let mut d = doc! { "level": level, "slowms": ms, "sampleRate": rate };
            if let Some(f) = filter {
                d.insert("filter", f.expr.clone());
            }
            Bson::Document(d).into_relaxed_extjson()
        };
        crate::log::info(
            "COMMAND",
            48742,
            &format!("conn{}", ctx.conn.id),
            "Profiler settings changed",
            serde_json::json!({
                "from": state_doc(old.level, old_slowms, old_rate, old.filter.as_ref()),
                "to": state_doc(new.level, profiler.slowms(), profiler.sample_rate(), new.filter.as_ref()),
            }),
        );
    }
    Ok(reply)
}

/// The `currentOp` documents: every running operation, and (unless `idle_sessions` is
/// false) each session whose transaction is open while no command runs on it.
pub fn current_op_documents(ctx: &Ctx, idle_sessions: bool) -> Vec<Document> {
    let state = ctx.state;
    let host = format!("{}:{}", nidus_common::hostname(), state.config.port);
    let open = state.sessions.open_transaction_list();
    let mut out = Vec::new();
    for op in state.ops.list() {
        let lsid = op.command.get_document("lsid").ok();
        let in_txn = op.command.get("autocommit") == Some(&Bson::Boolean(false));
        let txn = match lsid.and_then(|l| l.get("id")) {
            Some(Bson::Binary(id)) if in_txn => open.iter().find(|t| t.lsid == *id),
            _ => None,
        };
        out.push(op.current_op_document(&host, txn));
    }
    if idle_sessions {
        let lifetime = Duration::from_secs(
            state
                .params
                .i64("transactionLifetimeLimitSeconds")
                .unwrap_or(60)
                .max(1) as u64,
        );
        for t in open.iter().filter(|t| !t.active) {
            out.push(crate::curop::idle_session_document(&host, t, lifetime));
        }
    }
    out
}

const CURRENT_OP_OPTIONS: &[&str] = &[
    "$all",
    "$ownOps",
    "idleConnections",
    "idleSessions",
    "localOps",
    "truncateOps",
    "backtrace",
    "allUsers",
];

/// `currentOp`: `{inprog: [...]}`, the operations matching the command's other fields as a
/// filter (`{currentOp: 1, op: "update", "command.comment": "x"}`).
pub fn current_op(ctx: &mut Ctx) -> Result<Document> {
    let mut filter = Document::new();
    for (k, v) in ctx.body.iter() {
        if k == "currentOp" || super::is_generic_arg(k) || CURRENT_OP_OPTIONS.contains(&k.as_str())
        {
            continue;
        }
        filter.insert(k.clone(), v.clone());
    }
    let idle_sessions = ctx.opt_bool("idleSessions")?.unwrap_or(true);
    let matcher = Matcher::parse(&filter)?;
    let mut inprog = Vec::new();
    for d in current_op_documents(ctx, idle_sessions) {
        let raw = nidus_common::encode::document_to_raw(&d)
            .map_err(|e| Error::internal(e.to_string()))?;
        if matcher.matches(&raw)? {
            inprog.push(Bson::Document(d));
        }
    }
    Ok(doc! { "inprog": inprog })
}

/// `killOp: 1, op: <opid>`: interrupts the operation (it fails with Interrupted at its next
/// check: a plan's scan, a pipeline, the write-conflict retry loop).
pub fn kill_op(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("killOp")?;
    let opid = match ctx.body.get("op") {
        None => return Err(Error::bad_value("Did not provide \"op\" field")),
        Some(v) => match number(v) {
            Some(f) if f.fract() == 0.0 && f >= 0.0 && f <= u32::MAX as f64 => f as u32,
            Some(_) => return Err(Error::bad_value("\"op\" field must be a valid opid")),
            None => return Err(wrong_type("killOp", "op", v, "int")),
        },
    };
    crate::log::info(
        "COMMAND",
        20482,
        &format!("conn{}", ctx.conn.id),
        "Going to kill op",
        serde_json::json!({ "opId": opid }),
    );
    ctx.state.ops.kill(opid);
    Ok(doc! { "info": "attempting to kill op" })
}
