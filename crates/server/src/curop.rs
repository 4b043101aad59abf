//! Operations in progress (MongoDB's `CurOp`): each command registers itself with an opid
//! while it runs, so `currentOp` can list it and `killOp` can interrupt it (the engine's
//! [`OpCtx`] flag, checked where deadlines are).

use crate::connection::ConnState;
use crate::session::OpenTransaction;
use bson::{doc, Bson, Document};
use nidus_engine::opctx::{OpCtx, OpStats};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the profiler reports about the operation besides the engine's counters.
#[derive(Default)]
pub struct OpExtra {
    pub nreturned: Option<i64>,
    pub cursor_id: Option<i64>,
    pub cursor_exhausted: bool,
    /// Write outcomes of an insert command (`ninserted`).
    pub writes: Document,
    /// The statements already reported one by one (update, delete): the command is not
    /// profiled again as a whole.
    pub statements_reported: bool,
    /// Counters of the statements already reported, for the command's slow-log totals.
    pub reported: OpStats,
}

pub struct ActiveOp {
    pub opid: u32,
    pub ctx: Arc<OpCtx>,
    pub conn_id: i64,
    /// The peer as `ip:port`.
    pub client: Arc<str>,
    pub app_name: Option<String>,
    pub client_metadata: Option<Arc<Document>>,
    /// `query`, `getmore`, `insert`, `update`, `remove` or `command`.
    pub op: &'static str,
    pub ns: String,
    pub db: String,
    pub command: Arc<Document>,
    /// The command's `$clusterTime` when set aside from `command` (see
    /// [`crate::commands::Request`]).
    pub cluster_time: Option<nidus_wire::RawField>,
    pub started: Instant,
    /// `user`, `db` of the authenticated user.
    pub users: Vec<(String, String)>,
    pub extra: Mutex<OpExtra>,
    /// Microseconds spent waiting for new data (awaitData and change-stream `getMore`s),
    /// which MongoDB leaves out of the duration it logs and profiles, so an idle stream's
    /// every `getMore` is not a slow operation.
    awaited_micros: AtomicU64,
}

impl ActiveOp {
    /// The command as the client sent it (with its `$clusterTime`), for display.
    pub fn command_document(&self) -> Document {
        nidus_wire::RawField::restore(self.cluster_time.as_ref(), &self.command).into_owned()
    }

    /// Runs `wait` (waiting for new data) and counts its time as awaited.
    pub fn awaiting<T>(&self, wait: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = wait();
        let micros = start.elapsed().as_micros().min(u64::MAX as u128) as u64;
        self.awaited_micros.fetch_add(micros, Ordering::Relaxed);
        out
    }

    /// The time spent working: `elapsed` without the awaited time.
    pub fn working_time(&self, elapsed: std::time::Duration) -> std::time::Duration {
        elapsed.saturating_sub(std::time::Duration::from_micros(
            self.awaited_micros.load(Ordering::Relaxed),
        ))
    }

    /// The peer's address without the port (the profiler's `client`).
    pub fn client_ip(&self) -> String {
        match self.client.rsplit_once(':') {
            Some((ip, _)) => ip.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => self.client.to_string(),
        }
    }

    /// The `currentOp` entry.
    pub fn current_op_document(&self, host: &str, txn: Option<&OpenTransaction>) -> Document {
        let running = self.started.elapsed();
        let mut d = doc! {
            "type": "op",
            "host": host,
            "desc": format!("conn{}", self.conn_id),
            "connectionId": self.conn_id,
            "client": self.client.to_string(),
        };
        if let Some(app) = &self.app_name {
            d.insert("appName", app.clone());
        }
        if let Some(m) = &self.client_metadata {
            d.insert("clientMetadata", (**m).clone());
        }
        d.insert("active", true);
        d.insert("currentOpTime", crate::log::now_iso());
        d.insert("effectiveUsers", users_array(&self.users));
        d.insert("threaded", true);
        d.insert("opid", self.opid as i32);
        if let Some(lsid) = self.command.get("lsid") {
            d.insert("lsid", lsid.clone());
        }
        if let Some(t) = txn {
            d.insert("transaction", transaction_document(t, &self.command));
        }
        d.insert("secs_running", running.as_secs() as i64);
        d.insert("microsecs_running", running.as_micros() as i64);
        d.insert("op", self.op);
        d.insert("ns", self.ns.clone());
        d.insert("redacted", false);
        d.insert("command", self.command_document());
        let conflicts = self.ctx.write_conflicts() as i64;
        d.insert("numYields", conflicts);
        if conflicts > 0 {
            d.insert("writeConflicts", conflicts);
        }
        d.insert("locks", Document::new());
        d.insert("waitingForLock", false);
        d.insert("lockStats", Document::new());
        d.insert("waitingForFlowControl", false);
        d.insert("flowControlStats", Document::new());
        if self.ctx.is_killed() {
            d.insert("killPending", true);
        }
        d
    }
}

fn users_array(users: &[(String, String)]) -> Vec<Bson> {
    users
        .iter()
        .map(|(u, db)| Bson::Document(doc! { "user": u.clone(), "db": db.clone() }))
        .collect()
}

/// An open transaction's `transaction` sub-document (`parameters`, times).
pub fn transaction_document(t: &OpenTransaction, command: &Document) -> Document {
    let open = t.started.elapsed();
    let started_wall = bson::DateTime::from_millis(
        bson::DateTime::now().timestamp_millis() - open.as_millis() as i64,
    );
    let mut parameters = doc! { "txnNumber": t.txn_number, "autocommit": false };
    if let Some(rc) = command.get("readConcern") {
        parameters.insert("readConcern", rc.clone());
    }
    let open_micros = open.as_micros() as i64;
    doc! {
        "parameters": parameters,
        "startWallClockTime": started_wall.try_to_rfc3339_string().unwrap_or_default(),
        "timeOpenMicros": open_micros,
        "timeActiveMicros": if t.active { open_micros } else { 0i64 },
        "timeInactiveMicros": if t.active { 0i64 } else { open_micros },
    }
}

/// `currentOp`'s entry for a session whose transaction is open while no command runs on it.
pub fn idle_session_document(host: &str, t: &OpenTransaction, lifetime: Duration) -> Document {
    let lsid = doc! { "id": Bson::Binary(t.lsid.clone()) };
    let mut txn = transaction_document(t, &Document::new());
    let expiry = bson::DateTime::from_millis(
        bson::DateTime::now().timestamp_millis() - t.started.elapsed().as_millis() as i64
            + lifetime.as_millis() as i64,
    );
    txn.insert(
        "expiryTime",
        expiry.try_to_rfc3339_string().unwrap_or_default(),
    );
    doc! {
        "type": "idleSession",
        "host": host,
        "desc": "inactive transaction",
        "active": false,
        "lsid": lsid,
        "transaction": txn,
        "waitingForLock": false,
        "locks": Document::new(),
    }
}

/// The registry of running operations.
#[derive(Default)]
pub struct OpRegistry {
    next: AtomicU32,
    ops: Mutex<HashMap<u32, Arc<ActiveOp>>>,
}

/// A registered operation; unregisters when dropped.
pub struct Registered<'a> {
    registry: &'a OpRegistry,
    pub op: Arc<ActiveOp>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.registry.ops.lock().remove(&self.op.opid);
    }
}

/// The profiler's `op` for a command.
pub fn op_type(name: &str) -> &'static str {
    match name {
        "find" => "query",
        "getMore" => "getmore",
        "insert" => "insert",
        "update" => "update",
        "delete" => "remove",
        _ => "command",
    }
}

/// `db.coll` when the command names a collection in its first field, else `db.$cmd`
/// (a `getMore` names it in `collection`).
pub fn namespace_of(name: &str, db: &str, body: &Document) -> String {
    let field = if name == "getMore" {
        "collection"
    } else {
        name
    };
    // Every command passes here: concatenated, not through `format!`'s machinery.
    let coll = match body.get(field) {
        Some(Bson::String(c)) if !c.is_empty() => c.as_str(),
        _ => "$cmd",
    };
    let mut ns = String::with_capacity(db.len() + 1 + coll.len());
    ns.push_str(db);
    ns.push('.');
    ns.push_str(coll);
    ns
}

impl OpRegistry {
    pub fn begin(
        &self,
        conn: &ConnState,
        name: &str,
        body: &Arc<Document>,
        cluster_time: Option<nidus_wire::RawField>,
    ) -> Registered<'_> {
        let db = match body.get("$db") {
            Some(Bson::String(d)) => d.clone(),
            _ => String::new(),
        };
        // opids are positive 32-bit numbers, as MongoDB's.
        let opid = (self.next.fetch_add(1, Ordering::Relaxed) % (i32::MAX as u32)) + 1;
        let op = Arc::new(ActiveOp {
            opid,
            ctx: OpCtx::new(),
            conn_id: conn.id,
            client: conn.peer_text.clone(),
            app_name: conn.app_name.clone(),
            client_metadata: conn.client_metadata.clone(),
            op: op_type(name),
            ns: namespace_of(name, &db, body),
            db,
            command: Arc::clone(body),
            cluster_time,
            started: Instant::now(),
            users: conn
                .auth
                .user
                .iter()
                .map(|u| (u.user.clone(), u.db.clone()))
                .collect(),
            extra: Mutex::new(OpExtra::default()),
            awaited_micros: AtomicU64::new(0),
        });
        self.ops.lock().insert(opid, op.clone());
        Registered { registry: self, op }
    }

    pub fn list(&self) -> Vec<Arc<ActiveOp>> {
        let mut ops: Vec<_> = self.ops.lock().values().cloned().collect();
        ops.sort_by_key(|o| o.opid);
        ops
    }

    /// `killOp`: marks the operation killed. Returns whether it was running.
    pub fn kill(&self, opid: u32) -> bool {
        match self.ops.lock().get(&opid) {
            Some(op) => {
                op.ctx.kill();
                true
            }
            None => false,
        }
    }
}
