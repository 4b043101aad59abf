//! Transaction commands (`commitTransaction`, `abortTransaction`), session commands, and the
//! rules every statement of a transaction follows (error labels, abort on error).

use super::Ctx;
use crate::session::{listed_ids, new_session_reply, Binding};
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};

const TRANSIENT: &str = "TransientTransactionError";
const UNKNOWN_COMMIT: &str = "UnknownTransactionCommitResult";
const RETRYABLE_WRITE: &str = "RetryableWriteError";

pub fn commit_transaction(ctx: &mut Ctx) -> Result<Document> {
    transaction_binding(ctx, "commitTransaction")?.commit(&ctx.state.engine)?;
    Ok(Document::new())
}

pub fn abort_transaction(ctx: &mut Ctx) -> Result<Document> {
    transaction_binding(ctx, "abortTransaction")?.abort()?;
    Ok(Document::new())
}

fn transaction_binding<'c>(ctx: &'c Ctx, command: &str) -> Result<&'c Binding> {
    ctx.require_admin(command)?;
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
        if let Some(op) = write_stage(body) {
            return Err(Error::new(
                ErrorCode::OperationNotSupportedInTransaction,
                format!("{op} cannot be used in a transaction"),
            ));
        }
    }
    Ok(())
}

/// The `$out` or `$merge` stage of an aggregate command's pipeline, if it has one.
pub(super) fn write_stage(body: &Document) -> Option<&str> {
    body.get_array("pipeline").ok()?.iter().find_map(|stage| {
        stage
            .as_document()
            .and_then(|d| d.keys().next())
            .filter(|k| matches!(k.as_str(), "$out" | "$merge"))
            .map(String::as_str)
    })
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
                    return Err(Error::new(
                        ErrorCode::WriteConflict,
                        write_conflict_message(),
                    ));
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

/// How a command relates to sessions, for the error labels its failure gets.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    Plain,
    /// A statement of a multi-document transaction (`autocommit: false`).
    InTransaction,
    /// A write with a `txnNumber` outside a transaction.
    RetryableWrite,
}

impl StatementKind {
    pub fn of(body: &Document) -> StatementKind {
        match (
            body.contains_key("autocommit"),
            body.contains_key("txnNumber"),
        ) {
            (true, _) => StatementKind::InTransaction,
            (false, true) => StatementKind::RetryableWrite,
            _ => StatementKind::Plain,
        }
    }
}

/// Codes after which a retryable write (or a commit) may be retried: the primary stepped
/// down or shut down, or the network failed (the retryable writes specification's list).
fn is_retryable_code(code: i32) -> bool {
    matches!(
        code,
        6 | 7 | 89 | 91 | 189 | 262 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436
    )
}

/// Not-primary and shutdown errors: a transaction may be retried whole after them.
pub(super) fn is_not_primary_or_shutdown(code: i32) -> bool {
    matches!(code, 91 | 189 | 10107 | 11600 | 11602 | 13435 | 13436)
}

/// The error labels MongoDB adds: transient errors inside a transaction (a conflict, a
/// transaction that no longer exists, a primary that went away) mean the whole transaction
/// may be retried; a commit that failed that way may or may not have committed; a retryable
/// write (or commit/abort) that failed with a retryable code may be retried.
pub fn label(e: Error, name: &str, kind: StatementKind) -> Error {
    let code = e.code.code();
    let ends_transaction = matches!(name, "commitTransaction" | "abortTransaction");
    let mut e = e;
    if (kind == StatementKind::RetryableWrite || ends_transaction) && is_retryable_code(code) {
        e = e.with_label(RETRYABLE_WRITE);
    }
    if kind != StatementKind::InTransaction {
        return e;
    }
    if name == "commitTransaction"
        && (is_retryable_code(code) || e.code == ErrorCode::MaxTimeMSExpired)
    {
        return e.with_label(UNKNOWN_COMMIT);
    }
    match e.code {
        ErrorCode::WriteConflict => {
            let mut e = e.with_label(TRANSIENT);
            if !e.message.starts_with("Caused by") {
                e.message = write_conflict_message().to_string();
            }
            e
        }
        // MongoDB's isTransientTransactionError: lock and prepare conflicts, snapshot errors.
        ErrorCode::NoSuchTransaction
        | ErrorCode::LockTimeout
        | ErrorCode::PreparedTransactionInProgress
        | ErrorCode::SnapshotTooOld
        | ErrorCode::SnapshotUnavailable => e.with_label(TRANSIENT),
        _ if !ends_transaction && is_not_primary_or_shutdown(code) => e.with_label(TRANSIENT),
        _ => e,
    }
}

/// Labels for a reply carrying a write concern error: a retryable write (or commit) whose
/// write concern failed with a retryable code may be retried; a commit whose write concern
/// timed out or failed may or may not have committed.
pub fn label_write_concern_error(
    reply: &mut Document,
    wce: &Document,
    name: &str,
    kind: StatementKind,
) {
    let code = match wce.get("code") {
        Some(Bson::Int32(c)) => *c,
        Some(Bson::Int64(c)) => *c as i32,
        _ => return,
    };
    let ends_transaction = matches!(name, "commitTransaction" | "abortTransaction");
    let mut labels = Vec::new();
    if (kind == StatementKind::RetryableWrite || ends_transaction) && is_retryable_code(code) {
        labels.push(RETRYABLE_WRITE);
    }
    // UnsatisfiableWriteConcern (100) and UnknownReplWriteConcern (79) cannot succeed on retry.
    if name == "commitTransaction" && !matches!(code, 79 | 100) {
        labels.push(UNKNOWN_COMMIT);
    }
    if !labels.is_empty() {
        reply.insert("errorLabels", labels);
    }
}

/// `operationTime` and `$clusterTime` on every reply of a replica set member, so drivers
/// can gossip the cluster time and send `afterClusterTime` in causally consistent sessions.
/// What a replica set member adds last to every reply: `$clusterTime` (`ts` with the
/// signature of a member without keys: the zero hash, keyId 0) and `operationTime`.
pub fn add_cluster_time(body: &mut Document, ts: Timestamp) {
    body.insert(
        "$clusterTime",
        doc! {
            "clusterTime": ts,
            "signature": {
                "hash": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0u8; 20] },
                "keyId": 0i64,
            },
        },
    );
    body.insert("operationTime", ts);
}

/// [`add_cluster_time`]'s two fields as raw BSON elements, for a reply encoder to write after
/// the body's own (a reply without either field): no documents built per reply.
pub fn cluster_time_elements(ts: Timestamp) -> Vec<u8> {
    fn name(out: &mut Vec<u8>, tag: u8, name: &str) {
        out.push(tag);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    fn timestamp(out: &mut Vec<u8>, ts: Timestamp) {
        out.extend_from_slice(&ts.increment.to_le_bytes());
        out.extend_from_slice(&ts.time.to_le_bytes());
    }
    /// Sets the length prefix of the document that starts at `start` and ends here.
    fn close(out: &mut Vec<u8>, start: usize) {
        out.push(0);
        let len = (out.len() - start) as i32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }
    let mut out = Vec::with_capacity(96);
    name(&mut out, 0x03, "$clusterTime");
    let cluster_time = out.len();
    out.extend_from_slice(&[0; 4]);
    name(&mut out, 0x11, "clusterTime");
    timestamp(&mut out, ts);
    name(&mut out, 0x03, "signature");
    let signature = out.len();
    out.extend_from_slice(&[0; 4]);
    name(&mut out, 0x05, "hash");
    out.extend_from_slice(&20i32.to_le_bytes());
    out.push(0x00);
    out.extend_from_slice(&[0; 20]);
    name(&mut out, 0x12, "keyId");
    out.extend_from_slice(&0i64.to_le_bytes());
    close(&mut out, signature);
    close(&mut out, cluster_time);
    name(&mut out, 0x11, "operationTime");
    timestamp(&mut out, ts);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_time_elements_are_the_fields_add_cluster_time_inserts() {
        let times = [
            (0, 0),
            (1_795_945_204, 13),
            (u32::MAX, u32::MAX),
            (1, u32::MAX),
        ];
        for (time, increment) in times {
            let ts = Timestamp { time, increment };
            let mut body = Document::new();
            add_cluster_time(&mut body, ts);
            let whole = bson::to_vec(&body).expect("serializes");
            assert_eq!(
                cluster_time_elements(ts),
                &whole[4..whole.len() - 1],
                "{ts:?}"
            );
        }
    }
}
