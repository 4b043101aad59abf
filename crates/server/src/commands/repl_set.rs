//! Replica set commands (`replSetInitiate`, `replSetGetConfig`, `replSetGetStatus`,
//! `replSetStepDown`, `replSetFreeze`), the members' internal `replSetRaftMessages`, and the
//! member-state checks every command passes (writes only on the primary, reads on a
//! secondary only when the client allows it).

use super::Ctx;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::sync::Arc;
use std::time::Duration;

fn coordinator(ctx: &Ctx) -> Result<Arc<nidus_repl::Coordinator>> {
    ctx.require_admin(&ctx.command_name())?;
    ctx.state.repl.clone().ok_or_else(|| {
        Error::new(
            ErrorCode::NoReplicationEnabled,
            "This node was not started with replication enabled.",
        )
    })
}

pub fn initiate(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let config = match ctx.body.get("replSetInitiate") {
        Some(Bson::Document(d)) if !d.is_empty() => Some(d.clone()),
        Some(Bson::Document(_)) | Some(Bson::Null) | None => None,
        Some(_) => None,
    };
    repl.initiate(config.as_ref())?;
    Ok(Document::new())
}

/// `replSetReconfig` (mongosh's `rs.reconfig`, `rs.add`, `rs.remove`).
pub fn reconfig(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let config = match ctx.body.get("replSetReconfig") {
        Some(Bson::Document(d)) => d.clone(),
        Some(v) => {
            return Err(Error::type_mismatch(format!(
                "Expected replSetReconfig to be an object, found {}",
                super::type_name(v)
            )))
        }
        None => return Err(Error::bad_value("replSetReconfig requires a configuration")),
    };
    let force = ctx.opt_bool("force")?.unwrap_or(false);
    let timeout = ctx
        .opt_i64("maxTimeMS")?
        .filter(|ms| *ms > 0)
        .map_or(Duration::from_secs(60), |ms| {
            Duration::from_millis(ms as u64)
        });
    repl.reconfig(&config, force, timeout)?;
    Ok(Document::new())
}

/// `replSetMaintenance`: a secondary enters or leaves RECOVERING.
pub fn maintenance(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let activate = ctx.opt_bool("replSetMaintenance")?.unwrap_or(false);
    repl.set_maintenance(activate)?;
    Ok(Document::new())
}

pub fn get_config(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let mut out = Document::new();
    let include_newly_added = matches!(
        ctx.body.get("$_internalIncludeNewlyAdded"),
        Some(Bson::Boolean(true))
    );
    out.insert("config", repl.config_document(include_newly_added)?);
    Ok(out)
}

pub fn get_status(ctx: &mut Ctx) -> Result<Document> {
    coordinator(ctx)?.status()
}

fn seconds(ctx: &Ctx, field: &str, default: i64) -> Result<i64> {
    let name = ctx.command_name();
    let v = if field == name {
        match ctx.body.get(field) {
            Some(Bson::Boolean(_)) | None => None,
            _ => super::opt_i64(&name, &ctx.body, field)?,
        }
    } else {
        ctx.opt_i64(field)?
    };
    Ok(v.unwrap_or(default))
}

pub fn step_down(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    // MongoDB's defaults: 0 (or none) steps down for 60 s; without a catch-up period a
    // forced stepdown does not wait for a secondary at all, an unforced one up to 10 s.
    let secs = match seconds(ctx, "replSetStepDown", 60)? {
        0 => 60,
        s => s,
    };
    let force = ctx.opt_bool("force")?.unwrap_or(false);
    let catch_up = seconds(
        ctx,
        "secondaryCatchUpPeriodSecs",
        if force { 0 } else { 10 },
    )?;
    if secs < 0 {
        return Err(Error::bad_value(format!(
            "stepdown period must be a positive integer, but got {secs}"
        )));
    }
    if catch_up < 0 {
        return Err(Error::bad_value(
            "secondaryCatchUpPeriodSecs period must be a positive or absent",
        ));
    }
    if catch_up > secs {
        return Err(Error::bad_value(
            "stepdown period must be longer than secondaryCatchUpPeriodSecs",
        ));
    }
    repl.step_down(
        Duration::from_secs(secs as u64),
        Duration::from_secs(catch_up as u64),
        force,
    )?;
    Ok(Document::new())
}

pub fn freeze(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let secs = seconds(ctx, "replSetFreeze", 0)?;
    repl.freeze(secs)
}

/// Another member's Raft messages and status (see `nidus_repl::transport`).
pub fn raft_messages(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    repl.receive(&ctx.body)
}

/// `nidusBackupOpen` / `nidusBackupRead` / `nidusBackupClose`: the sync source's side of a
/// file-copy initial sync (see `nidus_repl::file_copy`).
pub fn backup(ctx: &mut Ctx) -> Result<Document> {
    let repl = coordinator(ctx)?;
    let name = ctx.command_name().to_string();
    repl.backup_command(&name, &ctx.body)
}

/// Commands a secondary refuses with `NotWritablePrimary`.
fn is_write(name: &str, body: &Document) -> bool {
    match name {
        // A secondary runs `$out`/`$merge` when the read preference allows it (its writes go
        // to the primary), as MongoDB 5.0+.
        "aggregate" => pipeline_writes(body) && !secondary_ok(body),
        "abortTransaction" => false,
        _ => supports_write_concern(name, body),
    }
}

/// Commands that write, which MongoDB's `supportsWriteConcern` is true for: they wait for a
/// write concern, the one named or the implicit default.
pub fn supports_write_concern(name: &str, body: &Document) -> bool {
    match name {
        "insert"
        | "update"
        | "delete"
        | "findAndModify"
        | "bulkWrite"
        | "create"
        | "drop"
        | "dropDatabase"
        | "createIndexes"
        | "dropIndexes"
        | "collMod"
        | "renameCollection"
        | "convertToCapped"
        | "cloneCollectionAsCapped"
        | "createUser"
        | "updateUser"
        | "dropUser"
        | "dropAllUsersFromDatabase"
        | "grantRolesToUser"
        | "revokeRolesFromUser"
        | "createRole"
        | "dropRole"
        | "commitTransaction"
        | "abortTransaction"
        | "setDefaultRWConcern" => true,
        "aggregate" => pipeline_writes(body),
        _ => false,
    }
}

/// Whether an aggregate's pipeline ends in `$out` or `$merge`.
pub fn pipeline_writes(body: &Document) -> bool {
    body.get_array("pipeline").is_ok_and(|p| {
        p.iter().any(|s| {
            s.as_document()
                .and_then(|d| d.keys().next())
                .is_some_and(|k| k == "$out" || k == "$merge")
        })
    })
}

/// Reads a secondary serves only with `secondaryOk` (a non-primary `$readPreference`).
fn is_read(name: &str) -> bool {
    matches!(
        name,
        "find"
            | "aggregate"
            | "count"
            | "distinct"
            | "listCollections"
            | "listIndexes"
            | "dbStats"
            | "collStats"
            | "explain"
    )
}

fn secondary_ok(body: &Document) -> bool {
    match body.get("$readPreference") {
        Some(Bson::Document(rp)) => rp.get_str("mode").is_ok_and(|m| m != "primary"),
        _ => false,
    }
}

/// What the member's state allows: writes on the primary only (the `local` database is
/// every member's own), reads on a primary, or on a secondary when the client allows it.
pub fn check_member_state(
    state: &crate::state::ServerState,
    name: &str,
    db: &str,
    body: &Document,
) -> Result<()> {
    let Some(repl) = &state.repl else {
        return Ok(());
    };
    if db == "local" || repl.writable() {
        return Ok(());
    }
    // The errors carry the member's topologyVersion, as MongoDB's, so a driver can tell
    // them from stale ones (SDAM) and its monitor does not wait out an awaitable hello.
    let tv = bson::doc! { "processId": state.process_id, "counter": repl.topology_version() };
    if is_write(name, body) {
        return Err(Error::new(ErrorCode::NotWritablePrimary, "not primary")
            .with_extra("topologyVersion", tv));
    }
    if is_read(name) {
        if repl.view().state == nidus_repl::MemberState::Primary {
            return Ok(());
        }
        if !repl.readable_state() {
            return Err(Error::new(
                ErrorCode::NotPrimaryOrSecondary,
                "node is not in primary or recovering state",
            ));
        }
        if !secondary_ok(body) {
            return Err(Error::new(
                ErrorCode::NotPrimaryNoSecondaryOk,
                "not primary and secondaryOk=false",
            )
            .with_extra("topologyVersion", tv));
        }
    }
    Ok(())
}

/// How a write's wait for its write concern ended.
#[derive(Debug)]
pub enum WriteConcernWait {
    /// Nothing to wait for: no replica set or the implicit one, no write, `w` of at most 1,
    /// or a `w` greater than the data-bearing members (that error is the write concern's own).
    NotWaited,
    /// `w: "majority"`: the set's Raft commit holds the write, so it is journaled on a
    /// majority (each member's Raft append of the entry was synced, the WAL's earlier writes
    /// with it), which is what `j` asks of a majority write.
    MajorityCommitted,
    /// `w: N`: N members hold the write.
    Replicated,
    /// The write stays done; the reply's `writeConcernError`.
    Failed(Document),
}

/// Waits for `w: "majority"` / `w: N` (N > 1) / `w: "<custom mode>"` after a write that
/// logged `last_write`, until `wtimeout` (or the command's `maxTimeMS`). The write stays done
/// either way; a timeout is MongoDB's write concern error 64.
pub fn wait_for_write_concern(
    state: &crate::state::ServerState,
    wc: &super::WriteConcern,
    last_write: Option<bson::Timestamp>,
    deadline: Option<std::time::Instant>,
) -> WriteConcernWait {
    let (Some(repl), Some(ts)) = (state.repl.as_ref(), last_write) else {
        return WriteConcernWait::NotWaited;
    };
    let acknowledgers = match &wc.mode {
        Some(mode) => nidus_repl::Acknowledgers::Mode(mode),
        None => {
            let nodes = wc.nodes.unwrap_or(1);
            if (!wc.majority && nodes <= 1) || nodes > repl.data_bearing_members() as i64 {
                return WriteConcernWait::NotWaited;
            }
            nidus_repl::Acknowledgers::Count(nodes)
        }
    };
    let until = wc
        .wtimeout_ms
        .map(|ms| std::time::Instant::now() + Duration::from_millis(ms as u64))
        .into_iter()
        .chain(deadline)
        .min();
    match repl.wait_for_replication(ts, wc.majority, acknowledgers, until) {
        nidus_repl::ReplicationWait::Satisfied if wc.majority => {
            WriteConcernWait::MajorityCommitted
        }
        nidus_repl::ReplicationWait::Satisfied => WriteConcernWait::Replicated,
        nidus_repl::ReplicationWait::Alone => WriteConcernWait::NotWaited,
        nidus_repl::ReplicationWait::TimedOut => {
            let mut spec = wc.spec.clone().unwrap_or_default();
            if !spec.contains_key("provenance") {
                spec.insert("provenance", "clientSupplied");
            }
            WriteConcernWait::Failed(bson::doc! {
                "code": ErrorCode::WriteConcernTimeout.code(),
                "codeName": "WriteConcernTimeout",
                "errmsg": "waiting for replication timed out",
                "errInfo": { "wtimeout": true, "writeConcern": spec },
            })
        }
        nidus_repl::ReplicationWait::UnknownMode(e) => WriteConcernWait::Failed(bson::doc! {
            "code": e.code.code(),
            "codeName": e.code.name().into_owned(),
            "errmsg": e.message.clone(),
        }),
        nidus_repl::ReplicationWait::Unsatisfiable(msg) => WriteConcernWait::Failed(bson::doc! {
            "code": ErrorCode::UnsatisfiableWriteConcern.code(),
            "codeName": "UnsatisfiableWriteConcern",
            "errmsg": msg,
        }),
        nidus_repl::ReplicationWait::NotPrimary => WriteConcernWait::Failed(bson::doc! {
            "code": ErrorCode::InterruptedDueToReplStateChange.code(),
            "codeName": "InterruptedDueToReplStateChange",
            "errmsg": "operation was interrupted because a node stepped down while waiting for replication",
        }),
    }
}
