//! Transaction commands (`commitTransaction`, `abortTransaction`), session commands, and the
//! rules every statement of a transaction follows (error labels, abort on error).

use super::Ctx;
use crate::session::{listed_ids, new_session_reply, Binding};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

const TRANSIENT: &str = "TransientTransactionError";
const UNKNOWN_COMMIT: &str = "UnknownTransactionCommitResult";

pub fn commit_transaction(ctx: &mut Ctx) -> Result<Document> {
    transaction_binding(ctx, "commitTransaction")?.commit()?;
    Ok(Document::new())
}

pub fn abort_transaction(ctx: &mut Ctx) -> Result<Document> {
    transaction_binding(ctx, "abortTransaction")?.abort()?;
    Ok(Document::new())
}

fn transaction_binding<'c>(ctx: &'c Ctx, command: &str) -> Result<&'c Binding> {
    if ctx.db != "admin" {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("{command} may only be run against the admin database."),
        ));
    }
    ctx.session
        .as_ref()
        .filter(|s| s.in_transaction)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidOptions,
                format!("{command} must be run within a transaction"),
            )
        })
}

pub fn start_session(ctx: &mut Ctx) -> Result<Document> {
    let minutes = ctx
        .state
        .params
        .i64("localLogicalSessionTimeoutMinutes")
        .unwrap_or(30);
    Ok(new_session_reply(minutes as i32))
}

pub fn end_sessions(ctx: &mut Ctx) -> Result<Document> {
    let name = ctx.command_name();
    let ids = listed_ids(ctx.body.get(&name))?;
    ctx.state.sessions.end(&ids);
    Ok(Document::new())
}

pub fn refresh_sessions(ctx: &mut Ctx) -> Result<Document> {
    let ids = listed_ids(ctx.body.get("refreshSessions"))?;
    ctx.state.sessions.refresh(&ids);
    Ok(Document::new())
}

pub fn kill_all_sessions(ctx: &mut Ctx) -> Result<Document> {
    ctx.state.sessions.end_all();
    Ok(Document::new())
}

/// Rules a statement must follow before it runs.
pub fn check_statement(session: Option<&Binding>, name: &str, body: &Document) -> Result<()> {
    if !session.is_some_and(|s| s.in_transaction) {
        return Ok(());
    }
    let ends_transaction = matches!(name, "commitTransaction" | "abortTransaction");
    if !ends_transaction && body.contains_key("writeConcern") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "Cannot set write concern after starting a transaction.",
        ));
    }
    if name == "aggregate" {
        if let Ok(stages) = body.get_array("pipeline") {
            for stage in stages {
                if let Some(op) = stage
                    .as_document()
                    .and_then(|d| d.keys().next())
                    .filter(|k| matches!(k.as_str(), "$out" | "$merge"))
                {
                    return Err(Error::new(
                        ErrorCode::OperationNotSupportedInTransaction,
                        format!("{op} cannot be used in a transaction"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// After a statement: any failure ends its transaction (MongoDB aborts it, and the next
/// statement gets NoSuchTransaction); a write conflict reported per document becomes the
/// command's error, as it is in MongoDB. A retryable write's reply is kept for its retries.
pub fn finish_statement(session: Option<&Binding>, result: Result<Document>) -> Result<Document> {
    let Some(s) = session else {
        return result;
    };
    if !s.in_transaction {
        if let Ok(body) = &result {
            s.store_reply(body);
        }
        return result;
    }
    match &result {
        Err(_) => s.abort_after_error(),
        Ok(body) => {
            if let Some(code) = first_write_error_code(body) {
                s.abort_after_error();
                if code == ErrorCode::WriteConflict.code() {
                    return Err(Error::new(ErrorCode::WriteConflict, write_conflict_message()));
                }
            }
        }
    }
    result
}

fn first_write_error_code(body: &Document) -> Option<i32> {
    let errors = body.get_array("writeErrors").ok()?;
    let first = errors.first()?.as_document()?;
    match first.get("code") {
        Some(Bson::Int32(c)) => Some(*c),
        Some(Bson::Int64(c)) => Some(*c as i32),
        _ => None,
    }
}

fn write_conflict_message() -> &'static str {
    "Caused by :: Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction."
}

/// The error labels MongoDB adds to a transaction statement's error: transient errors (a
/// conflict, a transaction that no longer exists) mean the whole transaction may be retried;
/// a commit that timed out may or may not have committed.
pub fn label(e: Error, name: &str, in_transaction: bool) -> Error {
    if !in_transaction {
        return e;
    }
    let commit = name == "commitTransaction";
    match e.code {
        ErrorCode::WriteConflict => {
            let mut e = e.with_label(TRANSIENT);
            if !e.message.starts_with("Caused by") {
                e.message = write_conflict_message().to_string();
            }
            e
        }
        ErrorCode::NoSuchTransaction | ErrorCode::LockTimeout => e.with_label(TRANSIENT),
        ErrorCode::MaxTimeMSExpired if commit => e.with_label(UNKNOWN_COMMIT),
        _ => e,
    }
}

/// `operationTime` and `$clusterTime` on every reply of a replica set member, so drivers
/// can gossip the cluster time and send `afterClusterTime` in causally consistent sessions.
pub fn add_cluster_time(state: &ServerState, body: &mut Document) {
    let ts = state.cluster_time.tick();
    body.insert("$clusterTime", doc! {
        "clusterTime": ts,
        "signature": {
            "hash": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0u8; 20] },
            "keyId": 0i64,
        },
    });
    body.insert("operationTime", ts);
}
