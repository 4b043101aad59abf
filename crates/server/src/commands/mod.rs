//! The command registry and dispatcher: one module per command family.
//!
//! A handler returns the reply body without `ok`; the dispatcher appends `ok: 1`, turns
//! errors into `{ok: 0, errmsg, code, codeName, errorLabels}`, applies write concern and
//! fail points, and counts opcounters.

mod admin;
mod aggregate;
pub mod api;
mod auth;
mod bulk_write;
pub(crate) mod change_stream;
pub mod cluster_parameter;
mod ddl;
mod explain;
mod explain_write;
mod find;
mod find_and_modify;
mod hello;
pub mod info;
mod oplog;
mod plan_cache;
mod profile;
mod repl_set;
mod rw_concern_defaults;
mod stats;
mod timeseries;
mod transaction;
mod users;
mod views;
mod write;

pub use hello::member_address;

use crate::auth::{needs, Need};
use crate::connection::ConnState;
use crate::failpoint::WriteInjection;
use crate::state::ServerState;
use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A parsed command: body plus OP_MSG document sequences.
pub struct Request {
    pub body: Document,
    pub sequences: Vec<(String, Vec<RawDocumentBuf>)>,
    /// The body's `$clusterTime`, set aside unconverted (then not in `body`): commands never
    /// read it; `currentOp` and the profiler show it in the command.
    pub cluster_time: Option<nidus_wire::RawField>,
}

pub struct Ctx<'a> {
    pub state: &'a ServerState,
    pub conn: &'a mut ConnState,
    pub db: String,
    /// The command document, shared with the operation's `currentOp` entry.
    pub body: std::sync::Arc<Document>,
    pub sequences: Vec<(String, Vec<RawDocumentBuf>)>,
    pub deadline: Option<Instant>,
    /// The session the command runs on (checked out until the command ends).
    pub session: Option<crate::session::Binding>,
    /// The multi-document transaction the command is a statement of.
    pub txn: Option<std::sync::Arc<nidus_engine::txn::Transaction>>,
    /// A snapshot read's snapshot (`readConcern: {level: "snapshot"}` outside a transaction).
    pub snapshot: Option<crate::read_concern::SnapshotRead>,
    /// The operation as `currentOp` and the profiler see it.
    pub op: std::sync::Arc<crate::curop::ActiveOp>,
    /// A cursor reply's documents, left out of the handler's reply document (see
    /// `Reply::batch`; the handler leaves its batch array empty).
    pub batch: Vec<RawDocumentBuf>,
    /// The command's Stable API parameters (a cursor it opens keeps them).
    pub api: api::ApiParameters,
}

type Handler = fn(&mut Ctx) -> Result<Document>;

/// Which opcounter a command counts toward.
#[derive(Clone, Copy)]
enum Counter {
    Command,
    Query,
    GetMore,
    /// insert/update/delete count per statement inside the handler.
    None,
}

struct Command {
    name: &'static str,
    handler: Handler,
    counter: Counter,
    test_only: bool,
    /// What the command needs under `--auth` (the one command → privilege table).
    need: Need,
    /// Whether the command is in the Stable API's Version 1.
    api: api::Api,
}

impl Command {
    const fn v1(self) -> Command {
        Command {
            api: api::Api::V1,
            ..self
        }
    }
}

const fn cmd(name: &'static str, handler: Handler, need: Need) -> Command {
    Command {
        name,
        handler,
        counter: Counter::Command,
        test_only: false,
        need,
        api: api::Api::Unstable,
    }
}

const fn counted(name: &'static str, handler: Handler, counter: Counter, need: Need) -> Command {
    Command {
        name,
        handler,
        counter,
        test_only: false,
        need,
        api: api::Api::Unstable,
    }
}

const NONE: Need = Need::Nothing;
const AUTHED: Need = Need::Authenticated;
const fn coll(actions: &'static [&'static str]) -> Need {
    Need::Collection(actions)
}
const fn database(actions: &'static [&'static str]) -> Need {
    Need::Database(actions)
}
const fn cluster(actions: &'static [&'static str]) -> Need {
    Need::Cluster(actions)
}

static COMMANDS: &[Command] = &[
    cmd("hello", hello::hello, NONE).v1(),
    cmd("isMaster", hello::is_master, NONE),
    cmd("ping", info::ping, NONE).v1(),
    cmd(
        "replSetInitiate",
        repl_set::initiate,
        cluster(&["replSetConfigure"]),
    ),
    cmd(
        "replSetReconfig",
        repl_set::reconfig,
        cluster(&["replSetConfigure"]),
    ),
    cmd(
        "replSetMaintenance",
        repl_set::maintenance,
        cluster(&["replSetStateChange"]),
    ),
    cmd(
        "replSetGetConfig",
        repl_set::get_config,
        cluster(&["replSetGetConfig"]),
    ),
    cmd(
        "getDefaultRWConcern",
        rw_concern_defaults::get,
        cluster(&["getDefaultRWConcern"]),
    ),
    cmd(
        "setDefaultRWConcern",
        rw_concern_defaults::set,
        cluster(&["setDefaultRWConcern"]),
    ),
    cmd(
        "replSetGetStatus",
        repl_set::get_status,
        cluster(&["replSetGetStatus"]),
    ),
    cmd(
        "replSetStepDown",
        repl_set::step_down,
        cluster(&["replSetStateChange"]),
    ),
    cmd(
        "replSetFreeze",
        repl_set::freeze,
        cluster(&["replSetStateChange"]),
    ),
    // Members' Raft traffic; under --auth only a user with the cluster's internal action
    // (MongoDB's __system) may send it.
    cmd(
        "replSetRaftMessages",
        repl_set::raft_messages,
        cluster(&["internal"]),
    ),
    // A file-copy initial sync reading its source's checkpoint (internal, as the above).
    cmd("nidusBackupOpen", repl_set::backup, cluster(&["internal"])),
    cmd("nidusBackupRead", repl_set::backup, cluster(&["internal"])),
    cmd("nidusBackupClose", repl_set::backup, cluster(&["internal"])),
    cmd("buildInfo", info::build_info, NONE),
    cmd("saslStart", auth::sasl_start, NONE).v1(),
    cmd("authenticate", auth::authenticate, NONE).v1(),
    cmd("saslContinue", auth::sasl_continue, NONE).v1(),
    cmd("logout", auth::logout, NONE),
    cmd("connectionStatus", auth::connection_status, NONE),
    cmd("listCommands", info::list_commands, NONE),
    cmd(
        "getParameter",
        info::get_parameter,
        cluster(&["getParameter"]),
    ),
    cmd(
        "setParameter",
        info::set_parameter,
        cluster(&["setParameter"]),
    ),
    cmd(
        "setClusterParameter",
        cluster_parameter::set,
        cluster(&["setClusterParameter"]),
    ),
    cmd(
        "getClusterParameter",
        cluster_parameter::get,
        cluster(&["getClusterParameter"]),
    ),
    cmd(
        "getCmdLineOpts",
        info::get_cmd_line_opts,
        cluster(&["getCmdLineOpts"]),
    ),
    cmd("hostInfo", info::host_info, cluster(&["hostInfo"])),
    cmd("fsync", info::fsync, cluster(&["fsync"])),
    cmd("whatsmyuri", info::whatsmyuri, AUTHED),
    cmd(
        "serverStatus",
        stats::server_status,
        cluster(&["serverStatus"]),
    ),
    cmd("endSessions", transaction::end_sessions, AUTHED).v1(),
    cmd("killSessions", transaction::end_sessions, AUTHED),
    cmd("refreshSessions", transaction::refresh_sessions, AUTHED).v1(),
    cmd("startSession", transaction::start_session, AUTHED),
    cmd(
        "killAllSessions",
        transaction::kill_all_sessions,
        cluster(&["killAnySession"]),
    ),
    cmd("commitTransaction", transaction::commit_transaction, AUTHED).v1(),
    cmd("abortTransaction", transaction::abort_transaction, AUTHED).v1(),
    cmd("getLog", info::get_log, cluster(&["getLog"])),
    cmd("logRotate", admin::log_rotate, cluster(&["logRotate"])),
    cmd("top", admin::top, cluster(&["top"])),
    cmd(
        "connPoolStats",
        admin::conn_pool_stats,
        cluster(&["connPoolStats"]),
    ),
    cmd("dbHash", admin::db_hash, database(&["dbHash"])),
    cmd("dataSize", admin::data_size, Need::Custom(needs::data_size)),
    cmd("compact", admin::compact, coll(&["compact"])),
    cmd("profile", profile::profile, Need::Custom(needs::profile)),
    cmd("currentOp", profile::current_op, cluster(&["inprog"])),
    cmd("killOp", profile::kill_op, cluster(&["killop"])),
    cmd("getFreeMonitoringStatus", info::free_monitoring, AUTHED),
    cmd("features", info::features, AUTHED),
    // Without the cluster's listDatabases action the reply lists only the databases the
    // user has privileges on (MongoDB's authorizedDatabases default).
    cmd("listDatabases", ddl::list_databases, AUTHED).v1(),
    cmd(
        "listCollections",
        ddl::list_collections,
        Need::Custom(needs::list_collections),
    )
    .v1(),
    cmd("create", ddl::create, coll(&["createCollection"])).v1(),
    cmd("collMod", ddl::coll_mod, coll(&["collMod"])).v1(),
    cmd("drop", ddl::drop, coll(&["dropCollection"])).v1(),
    cmd(
        "convertToCapped",
        ddl::convert_to_capped,
        coll(&["convertToCapped"]),
    ),
    cmd(
        "cloneCollectionAsCapped",
        ddl::clone_collection_as_capped,
        Need::Custom(needs::clone_collection_as_capped),
    ),
    cmd(
        "dropDatabase",
        ddl::drop_database,
        database(&["dropDatabase"]),
    )
    .v1(),
    cmd(
        "renameCollection",
        ddl::rename_collection,
        Need::Custom(needs::rename_collection),
    )
    .v1(),
    cmd("createIndexes", ddl::create_indexes, coll(&["createIndex"])).v1(),
    cmd("listIndexes", ddl::list_indexes, coll(&["listIndexes"])).v1(),
    cmd("dropIndexes", ddl::drop_indexes, coll(&["dropIndex"])).v1(),
    cmd(
        "replSetResizeOplog",
        oplog::repl_set_resize_oplog,
        cluster(&["replSetResizeOplog"]),
    ),
    cmd("dbStats", stats::db_stats, database(&["dbStats"])),
    cmd("collStats", stats::coll_stats, coll(&["collStats"])).v1(),
    cmd("validate", stats::validate, coll(&["validate"])),
    counted("find", find::find, Counter::Query, coll(&["find"])).v1(),
    counted(
        "getMore",
        find::get_more,
        Counter::GetMore,
        Need::CursorOwner,
    )
    .v1(),
    cmd("killCursors", find::kill_cursors, Need::CursorOwner).v1(),
    cmd("count", find::count, coll(&["find"])).v1(),
    cmd("explain", explain::explain, Need::Custom(needs::explain)).v1(),
    cmd(
        "planCacheClear",
        plan_cache::plan_cache_clear,
        coll(&["planCacheWrite"]),
    ),
    cmd(
        "planCacheSetFilter",
        plan_cache::plan_cache_set_filter,
        coll(&["planCacheIndexFilter"]),
    ),
    cmd(
        "planCacheClearFilters",
        plan_cache::plan_cache_clear_filters,
        coll(&["planCacheIndexFilter"]),
    ),
    cmd(
        "planCacheListFilters",
        plan_cache::plan_cache_list_filters,
        coll(&["planCacheRead"]),
    ),
    cmd("distinct", find::distinct, coll(&["find"])),
    cmd(
        "aggregate",
        aggregate::aggregate,
        Need::Custom(needs::aggregate),
    )
    .v1(),
    counted(
        "insert",
        write::insert,
        Counter::None,
        Need::Custom(needs::insert),
    )
    .v1(),
    counted(
        "update",
        write::update,
        Counter::None,
        Need::Custom(needs::update),
    )
    .v1(),
    counted("delete", write::delete, Counter::None, coll(&["remove"])).v1(),
    cmd(
        "bulkWrite",
        bulk_write::bulk_write,
        Need::Custom(needs::bulk_write),
    )
    .v1(),
    cmd(
        "findAndModify",
        find_and_modify::find_and_modify,
        Need::Custom(needs::find_and_modify),
    )
    .v1(),
    cmd(
        "createUser",
        users::create_user,
        Need::Custom(needs::create_user),
    )
    .v1(),
    cmd(
        "updateUser",
        users::update_user,
        Need::Custom(needs::update_user),
    )
    .v1(),
    cmd("dropUser", users::drop_user, database(&["dropUser"])).v1(),
    cmd(
        "dropAllUsersFromDatabase",
        users::drop_all_users,
        database(&["dropUser"]),
    ),
    cmd(
        "usersInfo",
        users::users_info,
        Need::Custom(needs::users_info),
    ),
    cmd(
        "grantRolesToUser",
        users::grant_roles_to_user,
        Need::Custom(needs::grant_roles),
    )
    .v1(),
    cmd(
        "revokeRolesFromUser",
        users::revoke_roles_from_user,
        Need::Custom(needs::revoke_roles),
    )
    .v1(),
    cmd(
        "createRole",
        users::create_role,
        Need::Custom(needs::create_role),
    )
    .v1(),
    cmd("dropRole", users::drop_role, database(&["dropRole"])).v1(),
    cmd(
        "rolesInfo",
        users::roles_info,
        Need::Custom(needs::roles_info),
    ),
    Command {
        name: "configureFailPoint",
        handler: info::configure_fail_point,
        counter: Counter::Command,
        test_only: true,
        need: cluster(&["configureFailPoint"]),
        api: api::Api::Unstable,
    },
    // MongoDB's test commands for the Stable API's refusals (they do nothing).
    Command {
        name: "testDeprecation",
        handler: info::ping,
        counter: Counter::Command,
        test_only: true,
        need: NONE,
        api: api::Api::DeprecatedInV1,
    },
    Command {
        name: "testDeprecationInVersion2",
        handler: info::ping,
        counter: Counter::Command,
        test_only: true,
        need: NONE,
        api: api::Api::V1,
    },
    Command {
        name: "testVersion2",
        handler: info::ping,
        counter: Counter::Command,
        test_only: true,
        need: NONE,
        api: api::Api::Unstable,
    },
];

/// The name MongoDB registers a command under, for the aliases it also answers to: an alias
/// is the same command (its table entry, privileges, Stable API version, counters, and the
/// name `failCommand` matches; a driver's legacy handshake sends `ismaster`).
pub fn canonical_name(name: &str) -> &str {
    match name {
        "ismaster" => "isMaster",
        "buildinfo" => "buildInfo",
        "dbhash" => "dbHash",
        "datasize" => "dataSize",
        "dbstats" => "dbStats",
        "collstats" => "collStats",
        "findandmodify" => "findAndModify",
        "deleteIndexes" => "dropIndexes",
        other => other,
    }
}

/// Where a command stands in the Stable API (`listCommands`).
pub fn api_of(name: &str) -> Option<api::Api> {
    lookup(name).map(|c| c.api)
}

/// What a command needs under `--auth` (for `explain`, which needs what it explains).
pub fn need_of(name: &str) -> Option<Need> {
    lookup(name).map(|c| c.need)
}

fn lookup(name: &str) -> Option<&'static Command> {
    let name = canonical_name(name);
    COMMANDS.iter().find(|c| c.name == name)
}

/// The commands this server answers (test commands only when they are enabled).
pub fn command_names(state: &ServerState) -> impl Iterator<Item = &'static str> + '_ {
    COMMANDS
        .iter()
        .filter(|c| !c.test_only || state.test_commands_enabled())
        .map(|c| c.name)
}

/// Runs one command and returns the reply body (never panics; errors become error replies).
pub fn run(state: &ServerState, conn: &mut ConnState, req: Request) -> Reply {
    let first = match req.body.keys().next() {
        Some(n) => n.as_str(),
        None => {
            return Reply::error(Error::new(
                ErrorCode::Location(40415),
                "Command document must not be empty",
            ))
        }
    };
    let command = match lookup(first) {
        Some(c) if !c.test_only || state.test_commands_enabled() => c,
        _ => {
            state.opcounters.command.fetch_add(1, Ordering::Relaxed);
            return Reply::error(Error::new(
                ErrorCode::CommandNotFound,
                format!("no such command: '{first}'"),
            ));
        }
    };
    // The table's name is the command's first field, or the command an alias names: no
    // copy of it per command.
    let name: &'static str = command.name;
    count(state, command.counter);
    // A handshake's `hello` names its application in its own metadata: MongoDB reads it
    // before the command runs, so `failCommand` with an `appName` fails handshakes too.
    let handshake_app = match (&conn.app_name, name) {
        (None, "hello" | "isMaster") => req
            .body
            .get_document("client")
            .and_then(|c| c.get_document("application"))
            .and_then(|a| a.get_str("name"))
            .ok(),
        _ => None,
    };
    let injection = state
        .fail_points
        .check(name, conn.app_name.as_deref().or(handshake_app));
    if let Some(inj) = &injection {
        if let Some(pause) = inj.block {
            std::thread::sleep(pause);
        }
        if inj.close_connection {
            return Reply::close();
        }
    }
    let kind = transaction::StatementKind::of(&req.body);
    let started = Instant::now();
    let req_cluster_time = req.cluster_time;
    let req = SharedRequest {
        body: std::sync::Arc::new(req.body),
        sequences: req.sequences,
    };
    let registered = state.ops.begin(conn, name, &req.body, req_cluster_time);
    let active = registered.op.clone();
    // `execStats` appears only in `system.profile` documents (a filter may also read it):
    // the engine builds it only for a profiled database.
    active
        .ctx
        .set_wants_exec_stats(state.profiler.profiled(&active.db));
    let mut close = false;
    let result = match injection.as_ref().and_then(|i| i.error.clone()) {
        Some(e) if injection.as_ref().is_some_and(|i| i.labels_given) => {
            return finish_reply(state, Reply::error(e))
        }
        Some(e) => Err(e),
        None => {
            let _entered = nidus_engine::opctx::enter(active.ctx.clone());
            run_handler(state, conn, command, name, req, &mut close, &active)
        }
    };
    if close {
        return Reply::close();
    }
    let error = result.as_ref().err().cloned();
    let mut reply = match result {
        Ok((body, batch)) => Reply {
            batch,
            ..Reply::ok(body)
        },
        Err(e) => Reply::error(transaction::label(e, name, kind)),
    };
    if let Some(wce) = injection.and_then(|i| i.write_concern_error) {
        transaction::label_write_concern_error(&mut reply.body, &wce, name, kind);
        reply.body.insert("writeConcernError", wce);
    }
    drop(registered);
    state.top.record(
        &active.ns,
        name,
        started.elapsed(),
        matches!(kind, transaction::StatementKind::InTransaction),
    );
    finish_op(state, &active, name, &reply, started.elapsed(), error);
    finish_reply(state, reply)
}

/// The command-level profile document and slow-operation line (see `profiler`).
fn finish_op(
    state: &ServerState,
    active: &crate::curop::ActiveOp,
    name: &str,
    reply: &Reply,
    elapsed: Duration,
    error: Option<Error>,
) {
    // Awaitable `hello` waits by design; MongoDB does not report it as slow either.
    if matches!(name, "hello" | "isMaster") {
        return;
    }
    let millis = active.working_time(elapsed).as_millis() as u64;
    if (millis as i64) < state.profiler.slowms() && !state.profiler.profiled(&active.db) {
        return;
    }
    let mut extra = active.extra.lock();
    let mut stats = std::mem::take(&mut extra.reported);
    stats.add(&active.ctx.take());
    let report = crate::profiler::OpReport {
        active,
        op: active.op,
        ns: active.ns.clone(),
        command: active.command_document(),
        stats,
        writes: std::mem::take(&mut extra.writes),
        nreturned: extra.nreturned,
        cursor_id: extra.cursor_id,
        cursor_exhausted: extra.cursor_exhausted,
        response_length: reply.encoded_len(),
        millis,
        error,
        statement: false,
    };
    let statements_reported = extra.statements_reported;
    drop(extra);
    crate::profiler::finish(state, &active.db, &report, !statements_reported);
}

/// Reports one write statement (update, delete) to the profiler and the slow-operation log,
/// as MongoDB does per statement: its `{q, u, multi, upsert}`, outcome and counters.
/// The statement and its outcome are built only when reported (most statements are neither
/// profiled nor slow).
pub fn report_statement(
    ctx: &Ctx,
    op: &'static str,
    statement: impl FnOnce() -> Document,
    writes: impl FnOnce() -> Document,
    started: Instant,
    error: Option<&Error>,
) {
    let active = &ctx.op;
    let millis = started.elapsed().as_millis() as u64;
    let reported =
        (millis as i64) >= ctx.state.profiler.slowms() || ctx.state.profiler.profiled(&ctx.db);
    let mut stats = active.ctx.take();
    {
        let mut extra = active.extra.lock();
        // The plan moves to the command's totals; this statement's report gets a copy only
        // when there is one.
        let plan = stats.plan.take();
        extra.reported.add(&stats);
        if let Some(plan) = plan {
            if reported {
                stats.plan = Some(plan.clone());
            }
            extra.reported.plan = Some(plan);
        }
        extra.statements_reported = true;
    }
    if !reported {
        return;
    }
    let report = crate::profiler::OpReport {
        active,
        op,
        ns: active.ns.clone(),
        command: statement(),
        stats,
        writes: writes(),
        nreturned: None,
        cursor_id: None,
        cursor_exhausted: false,
        response_length: None,
        millis,
        error: error.cloned(),
        statement: true,
    };
    crate::profiler::finish(ctx.state, &ctx.db, &report, true);
}

/// Records what a read plan did for the profiler: the keys and documents it examined since
/// `examined` (the previous batch), its plan summary and stats, and the batch's results.
pub fn note_read(
    ctx: &Ctx,
    exec: &nidus_engine::exec::Executor,
    examined: &mut (i64, i64),
    nreturned: Option<usize>,
    cursor_id: Option<i64>,
) {
    let root = &exec.root;
    if *examined == (0, 0) {
        // The first batch of a query: count its use of each index for `$indexStats`.
        let mut names = Vec::new();
        index_names(root, &mut names);
        for name in names {
            ctx.state.top.index_used(&ctx.op.ns, &name);
        }
    }
    let (keys, docs) = (root.total("keysExamined"), root.total("docsExamined"));
    ctx.op.ctx.add_examined(
        (keys - examined.0).max(0) as u64,
        (docs - examined.1).max(0) as u64,
    );
    *examined = (keys, docs);
    // `execStats` appears only in `system.profile` documents: built when the database is
    // profiled (a filter may also read it), not for every read.
    let exec_stats = if ctx.op.ctx.wants_exec_stats() {
        let mut d = doc! { "isCached": exec.is_cached };
        d.extend(nidus_engine::plan::explain::stats_document(root));
        d
    } else {
        Document::new()
    };
    ctx.op.ctx.set_plan(nidus_engine::opctx::PlanInfo {
        summary: root.plan_summary(),
        exec_stats,
    });
    let mut extra = ctx.op.extra.lock();
    extra.nreturned = nreturned.map(|n| n as i64);
    extra.cursor_id = cursor_id;
    extra.cursor_exhausted = cursor_id == Some(0);
}

/// The indexes a plan reads (`indexName` of its scans), each once.
fn index_names(stage: &nidus_engine::exec::Stage, out: &mut Vec<String>) {
    if let Some(name) = stage.index_name() {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    for c in stage.children() {
        index_names(c, out);
    }
}

/// What every reply gets last: a replica set member's cluster time, written by the encoder
/// after the body's fields (into the body when it already has one of them, which it keeps in
/// its place).
fn finish_reply(state: &ServerState, mut reply: Reply) -> Reply {
    if state.config.repl_set.is_some() {
        let ts = state.cluster_time.tick();
        if reply.body.contains_key("$clusterTime") || reply.body.contains_key("operationTime") {
            transaction::add_cluster_time(&mut reply.body, ts);
        } else {
            reply.cluster_time = Some(ts);
        }
    }
    reply
}

fn count(state: &ServerState, counter: Counter) {
    let c = &state.opcounters;
    let target = match counter {
        Counter::Command => &c.command,
        Counter::Query => &c.query,
        Counter::GetMore => &c.getmore,
        Counter::None => return,
    };
    target.fetch_add(1, Ordering::Relaxed);
}

/// A [`Request`] whose body the running operation shares with its `currentOp` entry.
struct SharedRequest {
    body: std::sync::Arc<Document>,
    sequences: Vec<(String, Vec<RawDocumentBuf>)>,
}

fn run_handler(
    state: &ServerState,
    conn: &mut ConnState,
    command: &Command,
    name: &str,
    req: SharedRequest,
    close_connection: &mut bool,
    active: &std::sync::Arc<crate::curop::ActiveOp>,
) -> Result<(Document, Vec<RawDocumentBuf>)> {
    let db = match req.body.get("$db") {
        Some(Bson::String(db)) => db.clone(),
        Some(_) => {
            return Err(Error::type_mismatch(
                "BSON field '$db' is the wrong type, expected type 'string'",
            ))
        }
        None => {
            return Err(Error::new(
                ErrorCode::Location(40571),
                "OP_MSG requests require a $db argument",
            ))
        }
    };
    let api = api::check(name, command.api, &req.body)?;
    active.ctx.set_api_strict(api.strict());
    crate::auth::authorize(
        state,
        conn,
        command.need,
        name,
        &db,
        &req.body,
        &req.sequences,
    )?;
    repl_set::check_member_state(state, name, &db, &req.body)?;
    let deadline = parse_max_time(name, &req.body)?;
    if deadline.is_some() && state.fail_points.max_time_always_times_out() {
        return Err(Error::new(
            ErrorCode::MaxTimeMSExpired,
            "operation exceeded time limit",
        ));
    }
    if req.body.contains_key("writeConcern") && is_read_only(name, &req.body) {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "Command does not support writeConcern",
        ));
    }
    // Causal, majority and linearizable reads wait here until this member may answer.
    let read_concern = read_concern_for_command(state, name, &req.body)?;
    if name == "aggregate"
        && read_concern
            .as_ref()
            .is_some_and(|rc| rc.level == nidus_repl::read_concern::Level::Linearizable)
    {
        if let Some(stage) = transaction::write_stage(&req.body) {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!("{stage} cannot be used with a 'linearizable' read concern level"),
            ));
        }
    }
    if let (Some(repl), Some(rc)) = (&state.repl, &read_concern) {
        repl.wait_for_read_concern(rc, deadline)?;
    }
    let write_concern = WriteConcern::for_command(state, name, &req.body)?;
    write_concern.check_mode(state)?;
    // This thread's last logged write belongs to an earlier command until the handler runs.
    let _ = nidus_engine::oplog::take_last_write_ts();
    let session = state.sessions.bind(
        &state.engine,
        state.config.repl_set.is_some(),
        state.repl.as_ref().and_then(|r| r.writer_term()),
        name,
        &req.body,
        &api,
    )?;
    if let Some(mut stored) = session.as_ref().and_then(|s| s.stored_reply.clone()) {
        // A retried write whose first attempt completed: its reply, not a second execution.
        // Its write concern is waited for again, as MongoDB does, for everything this member
        // logged so far (the first attempt's write is among it): the first attempt's wait
        // may have been cut short (the connection lost), and a stored reply proves nothing
        // about majority commitment.
        stored.remove("writeConcernError");
        settle_write_concern(
            state,
            &write_concern,
            &mut stored,
            logged_so_far(state),
            deadline,
        )?;
        return Ok((stored, Vec::new()));
    }
    transaction::check_statement(session.as_ref(), name, &req.body)?;
    let injection = match &session {
        Some(s) if s.is_retryable_write() => state
            .fail_points
            .check_transactional_write(statement_count(name, &req)),
        _ => None,
    };
    if injection == Some(WriteInjection::FailBeforeCommit) {
        *close_connection = true;
        return Ok((Document::new(), Vec::new()));
    }
    *close_connection = injection == Some(WriteInjection::CloseAfterCommit);
    let txn = session.as_ref().and_then(|s| s.txn.clone());
    let snapshot = state.snapshots.for_command(
        &state.engine,
        || state.cluster_time.tick(),
        name,
        &req.body,
    )?;
    let mut ctx = Ctx {
        state,
        conn,
        db,
        body: req.body,
        sequences: req.sequences,
        deadline,
        session,
        txn,
        snapshot,
        op: active.clone(),
        batch: Vec::new(),
        api,
    };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (command.handler)(&mut ctx)));
    let result = match outcome {
        Ok(r) => r,
        Err(_) => Err(Error::internal(format!(
            "internal error while running command '{name}'"
        ))),
    };
    let mut body = match transaction::finish_statement(ctx.session.as_ref(), result) {
        Ok(body) => body,
        Err(e) => return Err(with_write_concern_error(state, &write_concern, e, deadline)),
    };
    if let Some(s) = &ctx.snapshot {
        crate::read_concern::annotate_reply(&mut body, s.at);
    }
    // A command that logged nothing (an update matching nothing, a retried
    // commitTransaction) waits, as MongoDB's, for everything the member logged so far: its
    // reply must not pass for acknowledged before the writes it may depend on are.
    let last_write = nidus_engine::oplog::take_last_write_ts().or_else(|| logged_so_far(state));
    settle_write_concern(state, &write_concern, &mut body, last_write, deadline)?;
    let auth_collection = matches!(ctx.body.get(name),
        Some(Bson::String(c)) if c == "system.users" || c == "system.roles");
    if ctx.db == "admin" && (auth_collection || name == "dropDatabase") {
        // Writing to (or dropping) the auth collections directly changes users or roles too.
        state.auth.invalidate();
    }
    Ok((body, ctx.batch))
}

/// Whether a command that names no `w` takes the default write concern (see
/// [`WriteConcern::for_command`]): one that supports a write concern, outside a transaction
/// (its commit or abort excepted), on a member that takes writes.
fn takes_default_write_concern(state: &ServerState, name: &str, body: &Document) -> bool {
    let in_transaction = body.contains_key("autocommit")
        && !matches!(name, "commitTransaction" | "abortTransaction");
    !in_transaction
        && repl_set::supports_write_concern(name, body)
        && state.repl.as_ref().is_some_and(|r| r.writable())
}

/// The read concern a command waits for: the one it names, or, for a read naming none on a
/// replica set member outside a transaction, the global default (`setDefaultRWConcern`'s
/// `defaultReadConcern`; none set: `local`, which waits for nothing).
pub fn read_concern_for_command(
    state: &ServerState,
    name: &str,
    body: &Document,
) -> Result<Option<nidus_repl::read_concern::ReadConcern>> {
    let named = nidus_repl::read_concern::parse(body)?;
    if named.is_some()
        || state.repl.is_none()
        || body.contains_key("autocommit")
        || !matches!(name, "find" | "aggregate" | "count" | "distinct")
    {
        return Ok(named);
    }
    match rw_concern_defaults::read_concern(&state.engine)? {
        Some(rc) => nidus_repl::read_concern::parse(&bson::doc! { "readConcern": rc }),
        None => Ok(None),
    }
}

/// Commands that write nothing, which MongoDB refuses a `writeConcern` for (its
/// `supportsWriteConcern` is false): the query and catalog reads, and an aggregation without
/// `$out` or `$merge`.
fn is_read_only(name: &str, body: &Document) -> bool {
    match name {
        "aggregate" => transaction::write_stage(body).is_none(),
        "find" | "getMore" | "count" | "distinct" | "listCollections" | "listIndexes"
        | "killCursors" => true,
        _ => false,
    }
}

/// A failed command's error with its write concern's outcome, as MongoDB waits for a given
/// write concern on errors too: the command may have written before it failed, or found its
/// work done by a write this member has not replicated yet (a `create` of an existing
/// collection), so its error must not pass for durable. Not for errors of a member that is
/// not (or no longer) primary: there is nothing to wait for on it.
fn with_write_concern_error(
    state: &ServerState,
    write_concern: &WriteConcern,
    mut e: Error,
    deadline: Option<Instant>,
) -> Error {
    if write_concern.spec.is_none()
        || transaction::is_not_primary_or_shutdown(e.code.code())
        || e.extra.contains_key("writeConcernError")
    {
        return e;
    }
    let last_write = nidus_engine::oplog::take_last_write_ts().or_else(|| logged_so_far(state));
    let mut outcome = Document::new();
    if settle_write_concern(state, write_concern, &mut outcome, last_write, deadline).is_ok() {
        if let Some(wce) = outcome.remove("writeConcernError") {
            e.extra.insert("writeConcernError", wce);
        }
    }
    e
}

/// The newest oplog entry visible on this member (MongoDB's system last optime).
fn logged_so_far(state: &ServerState) -> Option<bson::Timestamp> {
    state
        .engine
        .oplog()
        .map(|o| nidus_engine::oplog::u64_to_ts(o.visible_u64()))
}

/// Waits for the command's write concern after a write that logged up to `last_write`
/// (replication, then journaling); a write concern that cannot be or was not satisfied is
/// the reply's `writeConcernError` (the write stays done).
fn settle_write_concern(
    state: &ServerState,
    write_concern: &WriteConcern,
    body: &mut Document,
    last_write: Option<bson::Timestamp>,
    deadline: Option<Instant>,
) -> Result<()> {
    let members = state.repl.as_ref().map_or(1, |r| r.data_bearing_members());
    if let Some(wce) = write_concern.error(state.config.repl_set.is_some(), members) {
        if !body.contains_key("writeConcernError") {
            body.insert("writeConcernError", wce);
        }
    }
    let replication = repl_set::wait_for_write_concern(state, write_concern, last_write, deadline);
    let majority_committed = matches!(replication, repl_set::WriteConcernWait::MajorityCommitted);
    if write_concern.journal && !majority_committed {
        // On a primary the Raft log's synced append of the write's oplog entry journals the
        // write with it (one WAL): wait for that instead of a second sync.
        let journaled = match (state.repl.as_ref(), last_write) {
            (Some(repl), Some(ts)) => repl.wait_durable(ts, Duration::from_secs(1)),
            _ => false,
        };
        if !journaled {
            state.engine.sync()?;
        }
    }
    if let repl_set::WriteConcernWait::Failed(wce) = replication {
        if !body.contains_key("writeConcernError") {
            body.insert("writeConcernError", wce);
        }
    }
    Ok(())
}

/// How many statements a write command carries (documents, updates, deletes or operations).
fn statement_count(name: &str, req: &SharedRequest) -> usize {
    let field = match name {
        "insert" => "documents",
        "update" => "updates",
        "delete" => "deletes",
        "bulkWrite" => "ops",
        _ => return 1,
    };
    match req.body.get(field) {
        Some(Bson::Array(a)) => a.len(),
        _ => req
            .sequences
            .iter()
            .find(|(id, _)| id == field)
            .map_or(1, |(_, docs)| docs.len()),
    }
}

/// `maxTimeMS`: a non-negative 32-bit integer; 0 means no limit. The checks and their order
/// are MongoDB's: null is not a number (BadValue), other non-numbers fail the IDL type check,
/// the value is read as `safeNumberLong` (truncated, saturating) for the range checks, and a
/// fractional double in range is refused last.
pub(crate) fn parse_max_time(command: &str, body: &Document) -> Result<Option<Instant>> {
    let v = match body.get("maxTimeMS") {
        None => return Ok(None),
        Some(Bson::Null) => return Err(Error::bad_value("maxTimeMS must be a number")),
        Some(v) => v,
    };
    let ms = safe_i64(v).ok_or_else(|| {
        Error::type_mismatch(format!(
            "BSON field '{command}.maxTimeMS' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            type_name(v)
        ))
    })?;
    if ms < 0 {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'maxTimeMS' value must be >= 0, actual value '{ms}'"),
        ));
    }
    if ms > i32::MAX as i64 {
        return Err(Error::bad_value(format!(
            "{ms} value for maxTimeMS is out of range"
        )));
    }
    if matches!(v, Bson::Double(f) if f.fract() != 0.0) {
        return Err(Error::bad_value("maxTimeMS has non-integral value"));
    }
    Ok((ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64)))
}

/// The part of `writeConcern` a single node acts on: `j` and `w: "majority"` sync the WAL
/// before the reply. (`w: 0` needs nothing here: such writes arrive with `moreToCome`.)
pub struct WriteConcern {
    pub journal: bool,
    /// A numeric `w` (how many members must acknowledge).
    pub nodes: Option<i64>,
    /// `w: "majority"`.
    pub majority: bool,
    /// `w: "<name>"` other than `"majority"`: a custom mode of the replica set configuration
    /// (`settings.getLastErrorModes`), checked by [`WriteConcern::check_mode`].
    pub mode: Option<String>,
    /// `wtimeout` in milliseconds (0 or absent: no limit).
    pub wtimeout_ms: Option<i64>,
    /// The `writeConcern` document as the client gave it, or the default the command took
    /// (with its `provenance`, for `errInfo`).
    pub spec: Option<Document>,
}

impl WriteConcern {
    pub fn parse(body: &Document) -> Result<WriteConcern> {
        let Some(wc) = body.get("writeConcern") else {
            return Ok(WriteConcern {
                journal: false,
                nodes: None,
                majority: false,
                mode: None,
                wtimeout_ms: None,
                spec: None,
            });
        };
        let Bson::Document(wc) = wc else {
            return Err(Error::type_mismatch(
                "BSON field 'writeConcern' is the wrong type, expected type 'object'",
            ));
        };
        let j = match wc.get("j") {
            None | Some(Bson::Null) => false,
            Some(Bson::Boolean(b)) => *b,
            Some(Bson::Int32(n)) => *n != 0,
            Some(Bson::Int64(n)) => *n != 0,
            Some(Bson::Double(f)) => *f != 0.0,
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::FailedToParse,
                    "j must be numeric or a boolean value",
                ))
            }
        };
        let mut mode = None;
        let (majority, w0) = match wc.get("w") {
            None => (false, false),
            Some(Bson::String(s)) if s == "majority" => (true, false),
            Some(Bson::String(s)) => {
                mode = Some(s.clone());
                (false, false)
            }
            Some(Bson::Int32(n)) if *n < 0 => {
                return Err(Error::new(
                    ErrorCode::FailedToParse,
                    "w cannot be a negative value",
                ))
            }
            Some(Bson::Int32(n)) => (false, *n == 0),
            Some(Bson::Int64(n)) => (false, *n == 0),
            Some(Bson::Double(f)) => (false, *f == 0.0),
            Some(Bson::Document(_)) => (false, false),
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::FailedToParse,
                    "w has to be a number, string, or object",
                ))
            }
        };
        if w0 && j {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "Cannot use w:0 with j:true",
            ));
        }
        let nodes = match wc.get("w") {
            Some(Bson::Int32(n)) => Some(*n as i64),
            Some(Bson::Int64(n)) => Some(*n),
            Some(Bson::Double(f)) => Some(*f as i64),
            _ => None,
        };
        let wtimeout_ms = match wc.get("wtimeout") {
            Some(Bson::Int32(n)) => Some(*n as i64),
            Some(Bson::Int64(n)) => Some(*n),
            Some(Bson::Double(f)) => Some(*f as i64),
            _ => None,
        }
        .filter(|ms| *ms > 0);
        Ok(WriteConcern {
            journal: j || majority,
            nodes,
            majority,
            mode,
            wtimeout_ms,
            spec: Some(wc.clone()),
        })
    }

    /// The write concern a command waits for: the one it names, or, on a writable member,
    /// the default for a command that supports a write concern and names none, names `{}`,
    /// or names one without `w` (which takes the default's `w`, and its `j` unless it named
    /// one). The default is the set's global one (`setDefaultRWConcern`), else, on an
    /// initiated set, the implicit `w: "majority"` (MongoDB 5.0+'s for a set without
    /// arbiters; majority writes are journaled); the implicit one-member set (`--replSet`
    /// never initiated) has none: it is a single server that nothing can roll back.
    /// Statements of a multi-document transaction take none (their transaction's commit
    /// does), reads none (MongoDB refuses them one), and neither do the members' own
    /// commands.
    pub fn for_command(state: &ServerState, name: &str, body: &Document) -> Result<WriteConcern> {
        let wc = WriteConcern::parse(body)?;
        let names_w = wc.spec.as_ref().is_some_and(|s| s.contains_key("w"));
        if names_w || !takes_default_write_concern(state, name, body) {
            return Ok(wc);
        }
        let (default, provenance) = match rw_concern_defaults::write_concern(&state.engine)? {
            Some(global) => (global, "customDefault"),
            None if state.repl.as_ref().is_some_and(|r| !r.implicit()) => (
                bson::doc! { "w": "majority", "wtimeout": 0 },
                "implicitDefault",
            ),
            None => return Ok(wc),
        };
        let spec = match wc.spec.as_ref().filter(|s| !s.is_empty()) {
            None => default,
            Some(named) => {
                let mut spec =
                    bson::doc! { "w": default.get("w").cloned().unwrap_or(Bson::Int32(1)) };
                if let Some(j) = named.get("j").or_else(|| default.get("j")) {
                    spec.insert("j", j.clone());
                }
                let wtimeout = wc.wtimeout_ms.unwrap_or(0).clamp(0, i32::MAX as i64) as i32;
                spec.insert("wtimeout", wtimeout);
                spec
            }
        };
        let mut out = WriteConcern::parse(&bson::doc! { "writeConcern": spec.clone() })?;
        let mut shown = spec;
        shown.insert("provenance", provenance);
        out.spec = Some(shown);
        Ok(out)
    }

    /// MongoDB's `validateWriteConcern` of a custom mode, before the command runs: a
    /// standalone has none (BadValue), a replica set only those its configuration defines
    /// (UnknownReplWriteConcern).
    pub fn check_mode(&self, state: &ServerState) -> Result<()> {
        let Some(mode) = &self.mode else {
            return Ok(());
        };
        let config = state.repl.as_ref().and_then(|r| r.view().config);
        match config {
            Some(config) => config.write_mode(mode).map(|_| ()),
            // The implicit one-member set has no configuration, so no modes.
            None if state.config.repl_set.is_some() => {
                Err(nidus_repl::config::unknown_write_mode(mode))
            }
            None => Err(Error::bad_value(format!(
                "cannot use non-majority 'w' mode {mode} when a host is not a member of a replica set"
            ))),
        }
    }

    /// A `w` above the number of data-bearing members cannot be satisfied: the write is done
    /// and the reply carries MongoDB's write concern error.
    pub fn error(&self, replica_set: bool, members: usize) -> Option<Document> {
        match self.nodes {
            Some(n) if n > members as i64 && replica_set => Some(bson::doc! {
                "code": ErrorCode::UnsatisfiableWriteConcern.code(),
                "codeName": "UnsatisfiableWriteConcern",
                "errmsg": "Not enough data-bearing nodes",
            }),
            _ => None,
        }
    }
}

/// What the connection does with a command's outcome.
pub struct Reply {
    pub body: Document,
    /// A cursor reply's documents, written as they are into the body's empty
    /// `cursor.firstBatch`/`cursor.nextBatch` when the reply is encoded
    /// (`nidus_wire::encode_msg_with_batch`); empty otherwise.
    pub batch: Vec<RawDocumentBuf>,
    /// A replica set member's `$clusterTime` and `operationTime`, which the body does not
    /// hold: the encoder writes them after its fields ([`Reply::trailer`]).
    pub cluster_time: Option<bson::Timestamp>,
    pub close_connection: bool,
}

impl Reply {
    pub fn ok(mut body: Document) -> Reply {
        body.insert("ok", 1.0);
        Reply {
            body,
            batch: Vec::new(),
            cluster_time: None,
            close_connection: false,
        }
    }

    pub fn error(e: Error) -> Reply {
        Reply {
            body: e.to_reply(),
            batch: Vec::new(),
            cluster_time: None,
            close_connection: false,
        }
    }

    pub fn close() -> Reply {
        Reply {
            body: Document::new(),
            batch: Vec::new(),
            cluster_time: None,
            close_connection: true,
        }
    }

    /// The body with the batch and the cluster time in it: what the client receives, as one
    /// document.
    pub fn full_body(&self) -> std::borrow::Cow<'_, Document> {
        if self.batch.is_empty() && self.cluster_time.is_none() {
            return std::borrow::Cow::Borrowed(&self.body);
        }
        let mut body = nidus_wire::with_batch(&self.body, &self.batch);
        if let Some(ts) = self.cluster_time {
            transaction::add_cluster_time(&mut body, ts);
        }
        std::borrow::Cow::Owned(body)
    }

    /// Raw BSON elements the encoder writes after the body's fields.
    pub fn trailer(&self) -> Vec<u8> {
        self.cluster_time
            .map(transaction::cluster_time_elements)
            .unwrap_or_default()
    }

    /// The encoded reply's length in bytes (`responseLength`).
    fn encoded_len(&self) -> Option<i64> {
        let body = bson::to_vec(&self.body).ok()?.len();
        // The placeholder `[]` (5 bytes) becomes the array of the batch's documents, each
        // with its element type byte and index key.
        let mut array = 5usize;
        for (i, d) in self.batch.iter().enumerate() {
            array += 1 + i.to_string().len() + 1 + d.as_bytes().len();
        }
        let extra = if self.batch.is_empty() { 0 } else { array - 5 };
        Some((body + extra) as i64)
    }
}

impl Ctx<'_> {
    /// Where the command's queries read: its transaction, its snapshot, or (None) the latest
    /// committed data.
    /// The collection as this command sees it (a transaction also sees the ones it created).
    pub fn collection(&self, ns: &Namespace) -> Option<nidus_engine::catalog::CollectionRef> {
        self.state.engine.collection_in(ns, self.txn.as_deref())
    }

    /// The collation an operation on `ns` runs with: its own (`given`, which may be the
    /// simple collation), else the collection's default (`create`'s `collation`), as
    /// MongoDB's operations inherit it.
    pub fn collation_for(&self, ns: &Namespace, given: Option<Document>) -> Option<Document> {
        given.or_else(|| self.collection(ns).and_then(|c| c.default_collation()))
    }

    /// [`Ctx::collation_for`] with the command's own `collation` field.
    pub fn command_collation(&self, ns: &Namespace) -> Result<Option<Document>> {
        Ok(self.collation_for(ns, self.opt_document("collation")?))
    }

    /// The collection a write goes to, created first if needed (inside a transaction, visible
    /// to it alone until it commits).
    pub fn ensure_collection(
        &self,
        ns: &Namespace,
    ) -> Result<nidus_engine::catalog::CollectionRef> {
        self.state
            .engine
            .ensure_collection_in(ns, self.txn.as_deref())
    }

    /// Statements `indexes` of a retryable write being run (their record keys, `None` when the
    /// command is not one), when none of them ran before; `None` when one may have, and
    /// [`Ctx::retryable_statement`] must look each up.
    pub fn fresh_statements(
        &self,
        indexes: std::ops::Range<usize>,
    ) -> Result<Option<Vec<Option<nidus_engine::stmt_record::StatementId>>>> {
        let stmts: Option<Vec<_>> = match self.session.as_ref() {
            Some(session) => indexes
                .clone()
                .map(|i| session.statement(i, false))
                .collect(),
            None => None,
        };
        let Some(stmts) = stmts else {
            return Ok(Some(indexes.map(|_| None).collect()));
        };
        let fresh = self.session.as_ref().is_some_and(|s| s.is_fresh());
        if !fresh && self.state.engine.any_statement_recorded(&stmts)? {
            return Ok(None);
        }
        Ok(Some(stmts.into_iter().map(Some).collect()))
    }

    /// Statement `index` of a retryable write being run: its record key, and what an earlier
    /// attempt of it did if one ran it (then it must not run again).
    pub fn retryable_statement(
        &self,
        index: usize,
        images: bool,
    ) -> Result<(
        Option<nidus_engine::stmt_record::StatementId>,
        Option<nidus_engine::stmt_record::Executed>,
    )> {
        let Some(stmt) = self
            .session
            .as_ref()
            .and_then(|s| s.statement(index, images))
        else {
            return Ok((None, None));
        };
        if self.session.as_ref().is_some_and(|s| s.is_fresh()) {
            return Ok((Some(stmt), None));
        }
        let done = self.state.engine.executed_statement(&stmt)?;
        Ok((Some(stmt), done))
    }

    pub fn read_source(&self) -> Option<nidus_engine::txn::ReadSource> {
        use nidus_engine::txn::ReadSource;
        match (&self.txn, &self.snapshot) {
            (Some(t), _) => Some(ReadSource::Txn(t.clone())),
            (None, Some(s)) => Some(ReadSource::Snapshot(s.snapshot.clone())),
            (None, None) => None,
        }
    }

    /// The collection a command names in its first field (`{find: "c"}` → `db.c`).
    pub fn namespace(&self, field: &str) -> Result<Namespace> {
        match self.body.get(field) {
            Some(Bson::String(c)) if !c.is_empty() => Ok(Namespace::new(&self.db, c)),
            Some(Bson::String(_)) => Err(Error::new(
                ErrorCode::InvalidNamespace,
                format!("Invalid namespace specified '{}.'", self.db),
            )),
            _ => Err(Error::new(
                ErrorCode::InvalidNamespace,
                format!(
                    "collection name has invalid type {}",
                    type_name(self.body.get(field).unwrap_or(&Bson::Null))
                ),
            )),
        }
    }

    /// A list of documents that may arrive as an OP_MSG sequence or as a body array.
    pub fn documents(&mut self, field: &str) -> Result<Vec<RawDocumentBuf>> {
        if let Some(pos) = self.sequences.iter().position(|(id, _)| id == field) {
            return Ok(self.sequences.swap_remove(pos).1);
        }
        match self.body.get(field) {
            Some(Bson::Array(items)) => items
                .iter()
                .map(|b| match b {
                    Bson::Document(d) => nidus_common::encode::document_to_raw(d)
                        .map_err(|e| Error::new(ErrorCode::InvalidBSON, e.to_string())),
                    other => Err(Error::type_mismatch(format!(
                        "BSON field '{}.{field}' is the wrong type '{}', expected type 'object'",
                        self.command_name(),
                        type_name(other)
                    ))),
                })
                .collect(),
            Some(other) => Err(Error::type_mismatch(format!(
                "BSON field '{}.{field}' is the wrong type '{}', expected type 'array'",
                self.command_name(),
                type_name(other)
            ))),
            None => Err(Error::new(
                ErrorCode::Location(40414),
                format!(
                    "BSON field '{}.{field}' is missing but a required field",
                    self.command_name()
                ),
            )),
        }
    }

    pub fn command_name(&self) -> String {
        self.body.keys().next().cloned().unwrap_or_default()
    }

    /// MongoDB's refusal of a command that runs only on the `admin` database, sent to
    /// another (`command`: the name its message shows).
    pub fn require_admin(&self, command: &str) -> Result<()> {
        if self.db != "admin" {
            return Err(Error::new(
                ErrorCode::Unauthorized,
                format!("{command} may only be run against the admin database."),
            ));
        }
        Ok(())
    }

    pub fn opt_document(&self, field: &str) -> Result<Option<Document>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Document(d)) => Ok(Some(d.clone())),
            Some(other) => Err(wrong_type(&self.command_name(), field, other, "object")),
        }
    }

    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>> {
        match self.body.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Boolean(b)) => Ok(Some(*b)),
            Some(Bson::Int32(n)) => Ok(Some(*n != 0)),
            Some(Bson::Int64(n)) => Ok(Some(*n != 0)),
            Some(Bson::Double(f)) => Ok(Some(*f != 0.0)),
            Some(other) => Err(wrong_type(&self.command_name(), field, other, "bool")),
        }
    }

    pub fn opt_i64(&self, field: &str) -> Result<Option<i64>> {
        // The name for the error message is borrowed, not copied for every option read.
        let command = self.body.keys().next().map_or("", String::as_str);
        opt_i64(command, &self.body, field)
    }
}

/// Arguments any command may carry (session, read/write concern, API version, ...).
pub fn is_generic_arg(field: &str) -> bool {
    matches!(
        field,
        "$db"
            | "lsid"
            | "$readPreference"
            | "writeConcern"
            | "readConcern"
            | "comment"
            | "maxTimeMS"
            | "$clusterTime"
            | "txnNumber"
            | "autocommit"
            | "startTransaction"
            | "apiVersion"
            | "apiStrict"
            | "apiDeprecationErrors"
            | "$audit"
            | "mayBypassWriteBlocking"
            | "$client"
    )
}

/// An optional numeric field as MongoDB's IDL `safeInt64` reads it: any of the four number
/// types, a fractional double or decimal truncated toward zero (`batchSize: 2.0`,
/// `scale: 2.8`); any other type fails with TypeMismatch naming the accepted types.
pub fn opt_i64(command: &str, body: &Document, field: &str) -> Result<Option<i64>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(v) => safe_i64(v).map(Some).ok_or_else(|| {
            Error::type_mismatch(format!(
                "BSON field '{command}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double]'",
                type_name(v)
            ))
        }),
    }
}

/// A number converted as MongoDB's `safeNumberLong`: truncated, NaN as 0, saturating at the
/// ends of the 64-bit range. `None` for a value that is not a number.
pub fn safe_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        // `as` truncates toward zero, maps NaN to 0 and saturates.
        Bson::Double(f) => Some(*f as i64),
        Bson::Decimal128(d) => {
            let f: f64 = d.to_string().parse().unwrap_or(f64::NAN);
            Some(f as i64)
        }
        _ => None,
    }
}

pub fn wrong_type(command: &str, field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{command}.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(v)
    ))
}

pub use nidus_doc::compare::type_name;
