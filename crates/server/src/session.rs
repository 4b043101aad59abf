//! Logical sessions, their transactions and retryable writes.
//!
//! A command carrying `lsid` runs on that session: the session is checked out for the
//! command's duration (a second command on the same session waits, as in MongoDB), which is
//! what makes a retried write see the first attempt's stored reply instead of running again.
//! The session's state (transaction number, transaction, stored reply) sits behind a short
//! lock of its own so the lifetime reaper and `killSessions` never wait for a running command.

use crate::commands::api::ApiParameters;
use bson::{doc, Binary, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::stmt_record::StatementId;
use nidus_engine::txn::Transaction;
use nidus_engine::Engine;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Commands a multi-document transaction may run (MongoDB's allow-list).
const TXN_COMMANDS: &[&str] = &[
    "find",
    "getMore",
    "killCursors",
    "aggregate",
    "distinct",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "bulkWrite",
    "commitTransaction",
    "abortTransaction",
    "create",
    "createIndexes",
];

/// Writes a `txnNumber` outside a transaction makes retryable.
const RETRYABLE_COMMANDS: &[&str] = &[
    "insert",
    "update",
    "delete",
    "findAndModify",
    "bulkWrite",
    "commitTransaction",
    "abortTransaction",
];

/// What one pass of the reaper did and left to do.
pub struct Reaped {
    /// Transactions aborted for exceeding their lifetime.
    pub aborted: usize,
    /// Expired sessions whose retryable-write records can go (their lsids).
    pub forget: Vec<Vec<u8>>,
}

#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<Vec<u8>, Arc<Session>>>,
    counters: Arc<TxnCounters>,
}

/// `serverStatus().transactions` totals.
#[derive(Default)]
pub struct TxnCounters {
    pub started: AtomicU64,
    pub committed: AtomicU64,
    pub aborted: AtomicU64,
}

impl TxnCounters {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub struct Session {
    id: Binary,
    counters: Arc<TxnCounters>,
    checked_out: Mutex<bool>,
    released: Condvar,
    /// When a command last named the session. Its own lock, taken last and held for no
    /// more than a read or a store: `get_or_create` sets it under the session map's lock,
    /// under which `reap` checks it before removing the session.
    last_use: Mutex<Instant>,
    state: Mutex<SessionState>,
}

struct SessionState {
    /// The highest transaction number the session has seen.
    txn_number: Option<i64>,
    /// The reign (`Coordinator::writer_term`) in which this member, accepting writes, set
    /// `txn_number`; `None` when it did so while accepting none.
    number_known_in: Option<i64>,
    txn: TxnState,
    /// The reply of the retryable write numbered `.0`.
    stored: Option<(i64, Document)>,
    /// The session ran a retryable write, whose statements may have records in storage
    /// (each write overwrites the records of its statement indexes; they go when the
    /// session expires).
    recorded: bool,
}

impl SessionState {
    /// Ends the session's open transaction, if any (its writes are discarded, its locks
    /// released) and counts it. Returns whether there was one.
    fn abort_active(&mut self, counters: &TxnCounters) -> bool {
        let TxnState::Active { txn, .. } = &self.txn else {
            return false;
        };
        txn.abort();
        self.txn = TxnState::Aborted;
        TxnCounters::count(&counters.aborted);
        true
    }
}

enum TxnState {
    /// No transaction at `txn_number` (a retryable write, or nothing yet).
    None,
    Active {
        txn: Arc<Transaction>,
        started: Instant,
        /// Set once the first statement ran: only it may carry `readConcern`.
        statements: u64,
        /// The Stable API parameters of the first statement: every later one (commit and
        /// abort included) must send the same.
        api: ApiParameters,
    },
    Committed,
    Aborted,
}

/// What a command runs under: its session checked out, and its transaction if in one.
pub struct Binding {
    session: Arc<Session>,
    pub txn_number: Option<i64>,
    /// The command is a statement of a multi-document transaction (`autocommit: false`).
    pub in_transaction: bool,
    pub txn: Option<Arc<Transaction>>,
    /// A retryable write whose first attempt already replied: this is that reply.
    pub stored_reply: Option<Document>,
    retryable_write: bool,
    /// The command's txnNumber is new to the session in this member's current reign, so no
    /// earlier attempt of its statements can have a record to look up.
    fresh: bool,
}

impl Drop for Binding {
    fn drop(&mut self) {
        let mut out = self.session.checked_out.lock();
        *out = false;
        self.session.released.notify_one();
    }
}

/// The command's session fields.
struct SessionArgs {
    lsid: Option<Binary>,
    txn_number: Option<i64>,
    autocommit: Option<bool>,
    start_transaction: Option<bool>,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidOptions, msg)
}

fn parse_args(body: &Document) -> Result<SessionArgs> {
    let lsid =
        match body.get("lsid") {
            None => None,
            Some(Bson::Document(d)) => {
                match d.get("id") {
                    Some(Bson::Binary(b)) if b.subtype == bson::spec::BinarySubtype::Uuid => {
                        Some(b.clone())
                    }
                    _ => return Err(Error::new(
                        ErrorCode::Location(40414),
                        "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field",
                    )),
                }
            }
            Some(_) => return Err(Error::type_mismatch(
                "BSON field 'OperationSessionInfo.lsid' is the wrong type, expected type 'object'",
            )),
        };
    let txn_number = match body.get("txnNumber") {
        None => None,
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Int32(n)) => Some(*n as i64),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'OperationSessionInfo.txnNumber' is the wrong type '{}', expected type 'long'",
                crate::commands::type_name(other)
            )))
        }
    };
    let flag = |name: &str| -> Result<Option<bool>> {
        match body.get(name) {
            None => Ok(None),
            Some(Bson::Boolean(b)) => Ok(Some(*b)),
            Some(other) => Err(Error::type_mismatch(format!(
                "BSON field 'OperationSessionInfo.{name}' is the wrong type '{}', expected type 'bool'",
                crate::commands::type_name(other)
            ))),
        }
    };
    Ok(SessionArgs {
        lsid,
        txn_number,
        autocommit: flag("autocommit")?,
        start_transaction: flag("startTransaction")?,
    })
}

impl Sessions {
    /// Checks the command's session fields against the session's state and checks the
    /// session out. None when the command carries no session.
    /// `writer_term` is [`nidus_repl::Coordinator::writer_term`] (`None` on a standalone).
    pub fn bind(
        &self,
        engine: &Engine,
        replica_set: bool,
        writer_term: Option<i64>,
        command: &str,
        body: &Document,
        api: &ApiParameters,
    ) -> Result<Option<Binding>> {
        let args = parse_args(body)?;
        let Some(lsid) = args.lsid else {
            if args.txn_number.is_some() {
                return Err(invalid(
                    "Transaction number requires a session ID to also be specified",
                ));
            }
            if args.autocommit.is_some() || args.start_transaction.is_some() {
                return Err(invalid(
                    "'autocommit' field requires a transaction number to also be specified",
                ));
            }
            return Ok(None);
        };
        if args.txn_number.is_none()
            && (args.autocommit.is_some() || args.start_transaction.is_some())
        {
            return Err(invalid(
                "'autocommit' field requires a transaction number to also be specified",
            ));
        }
        if args.txn_number.is_some() && !replica_set {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                "Transaction numbers are only allowed on a replica set member or mongos",
            ));
        }
        match (args.autocommit, args.start_transaction) {
            (Some(true), _) => return Err(invalid("Specifying autocommit=true is not allowed.")),
            (_, Some(false)) => {
                return Err(invalid("Specifying startTransaction=false is not allowed."))
            }
            (None, Some(true)) => {
                return Err(invalid(
                    "txnNumber may only be provided for multi-document transactions and retryable write commands. autocommit:false was not provided, and txnNumber was provided",
                ))
            }
            _ => {}
        }
        let in_transaction = args.autocommit == Some(false);
        if let Some(n) = args.txn_number {
            if in_transaction && !TXN_COMMANDS.contains(&command) {
                return Err(Error::new(
                    ErrorCode::OperationNotSupportedInTransaction,
                    format!("Cannot run '{command}' in a multi-document transaction."),
                ));
            }
            if !in_transaction && !RETRYABLE_COMMANDS.contains(&command) {
                return Err(invalid(format!(
                    "txnNumber may only be provided for multi-document transactions and retryable write commands. autocommit:false was not provided, and {command} is not a retryable write command."
                )));
            }
            if n < 0 {
                return Err(Error::bad_value(format!(
                    "TxnNumber cannot be negative, got {n}"
                )));
            }
        }
        let session = self.get_or_create(&lsid);
        session.check_out();
        let mut binding = Binding {
            session: session.clone(),
            txn_number: args.txn_number,
            in_transaction,
            txn: None,
            stored_reply: None,
            retryable_write: false,
            fresh: false,
        };
        *session.last_use.lock() = Instant::now();
        let mut st = session.state.lock();
        let Some(n) = args.txn_number else {
            return Ok(Some(binding));
        };
        let lsid_text = uuid_text(&lsid);
        if let Some(current) = st.txn_number.filter(|c| n < *c) {
            return Err(Error::new(
                ErrorCode::TransactionTooOld,
                format!(
                    "Cannot start transaction {n} on session {lsid_text} because a newer transaction {current} has already started."
                ),
            ));
        }
        let newer = st.txn_number != Some(n);
        if newer && in_transaction && args.start_transaction != Some(true) {
            return Err(Error::new(
                ErrorCode::NoSuchTransaction,
                format!(
                    "Given transaction number {n} does not match any in-progress transactions. The active transaction number is {}",
                    st.txn_number.unwrap_or(-1)
                ),
            ));
        }
        if newer {
            // `number_known_in` holds the reign in which no record of the session had a
            // number above `txn_number`: records written before the reign were in storage
            // when it began (a primary applies what was committed before it accepts writes),
            // and every later one came through here, in growing numbers. Then no statement
            // of `n` has run; the first number of a reign is checked against storage.
            let known = writer_term.is_some() && st.number_known_in == writer_term;
            let latest = match (known, writer_term, in_transaction) {
                (false, Some(_), false) => engine.latest_statement_number(&lsid.bytes)?,
                _ => None,
            };
            // A number older than the session's records hold is refused, as MongoDB refuses it
            // once it has the session's last number (a record that cannot be read reports
            // `i64::MAX`: its statements are looked up one by one instead).
            if let Some(l) = latest.filter(|&l| l > n && l != i64::MAX) {
                return Err(nidus_engine::stmt_record::too_old(n, l));
            }
            let verified =
                known || (writer_term.is_some() && !in_transaction && latest.is_none_or(|l| l < n));
            binding.fresh = verified && !in_transaction;
            st.number_known_in = if verified { writer_term } else { None };
            // A new number ends whatever the session was doing.
            st.abort_active(&session.counters);
            st.txn_number = Some(n);
            st.txn = TxnState::None;
            st.stored = None;
        }
        if !in_transaction {
            if matches!(
                st.txn,
                TxnState::Active { .. } | TxnState::Committed | TxnState::Aborted
            ) {
                return Err(Error::new(
                    ErrorCode::Location(50776),
                    format!("Cannot run a retryable write on transaction number {n}: it is a multi-document transaction"),
                ));
            }
            binding.retryable_write = true;
            st.recorded = true;
            binding.stored_reply = st
                .stored
                .as_ref()
                .filter(|(num, _)| *num == n)
                .map(|(_, reply)| reply.clone());
            drop(st);
            return Ok(Some(binding));
        }
        if args.start_transaction == Some(true) {
            if !newer {
                let state = match st.txn {
                    TxnState::Committed => "TxnState::Committed",
                    TxnState::Aborted => "TxnState::Aborted",
                    _ => "TxnState::InProgress",
                };
                return Err(Error::new(
                    ErrorCode::ConflictingOperationInProgress,
                    format!("Cannot start a transaction at given transaction number {n} a transaction with the same number is in state {state}"),
                ));
            }
            check_transaction_read_concern(body)?;
            let txn = Transaction::begin(engine.kv());
            txn.set_session(&session.id.bytes, n);
            TxnCounters::count(&session.counters.started);
            st.txn = TxnState::Active {
                txn: txn.clone(),
                started: Instant::now(),
                statements: 0,
                api: api.clone(),
            };
            binding.txn = Some(txn);
            drop(st);
            return Ok(Some(binding));
        }
        match &mut st.txn {
            TxnState::Active {
                txn,
                statements,
                api: first,
                ..
            } => {
                api.check_same(command, first, "the transaction's first command")?;
                if *statements > 0 && body.contains_key("readConcern") {
                    return Err(invalid(
                        "Only the first command in a transaction may specify a readConcern",
                    ));
                }
                *statements += 1;
                binding.txn = Some(txn.clone());
            }
            TxnState::Committed if matches!(command, "commitTransaction" | "abortTransaction") => {}
            TxnState::Committed => {
                return Err(Error::new(
                    ErrorCode::TransactionCommitted,
                    format!("Transaction with {{ txnNumber: {n} }} has been committed."),
                ))
            }
            TxnState::Aborted | TxnState::None => return Err(aborted(n)),
        }
        drop(st);
        Ok(Some(binding))
    }

    fn get_or_create(&self, lsid: &Binary) -> Arc<Session> {
        let mut map = self.map.lock();
        // Every command of a session passes here: the key is copied only for a new session.
        if let Some(s) = map.get(lsid.bytes.as_slice()) {
            // Used now, marked so under the map's lock: `reap` removes a session only if it
            // is still idle under that lock, so none is removed once a command has it.
            *s.last_use.lock() = Instant::now();
            return s.clone();
        }
        map.entry(lsid.bytes.clone())
            .or_insert_with(|| {
                Arc::new(Session {
                    id: lsid.clone(),
                    counters: self.counters.clone(),
                    checked_out: Mutex::new(false),
                    released: Condvar::new(),
                    last_use: Mutex::new(Instant::now()),
                    state: Mutex::new(SessionState {
                        txn_number: None,
                        number_known_in: None,
                        txn: TxnState::None,
                        stored: None,
                        recorded: false,
                    }),
                })
            })
            .clone()
    }

    /// Ends sessions (`endSessions`, `killSessions`): their transactions abort.
    pub fn end(&self, ids: &[Vec<u8>]) {
        let removed: Vec<Arc<Session>> = {
            let mut map = self.map.lock();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in removed {
            s.abort_active();
        }
    }

    /// Ends every session (`killAllSessions`).
    pub fn end_all(&self) {
        let all: Vec<Arc<Session>> = self.map.lock().drain().map(|(_, s)| s).collect();
        for s in all {
            s.abort_active();
        }
    }

    /// Marks sessions used now (`refreshSessions`).
    pub fn refresh(&self, ids: &[Vec<u8>]) {
        let map = self.map.lock();
        for id in ids {
            if let Some(s) = map.get(id) {
                *s.last_use.lock() = Instant::now();
            }
        }
    }

    /// Aborts transactions older than `lifetime` and forgets sessions idle longer than
    /// `idle` (MongoDB's transaction reaper and logical session cache). Returns how many
    /// transactions were aborted.
    pub fn reap(&self, lifetime: Duration, idle: Duration) -> Reaped {
        let now = Instant::now();
        let sessions: Vec<Arc<Session>> = self.map.lock().values().cloned().collect();
        let mut aborted = 0;
        let mut expired = Vec::new();
        for s in sessions {
            let mut st = s.state.lock();
            let too_old = matches!(&st.txn,
                TxnState::Active { started, .. } if now.duration_since(*started) >= lifetime);
            if too_old && st.abort_active(&s.counters) {
                aborted += 1;
            }
            if s.expired(&st, now, idle) {
                expired.push(s.id.bytes.clone());
            }
        }
        let mut forget = Vec::new();
        if !expired.is_empty() {
            let mut map = self.map.lock();
            for id in expired {
                // Checked again under the map's lock: a command that took the session since
                // (`get_or_create` marks it used under this lock) keeps it.
                let Some(s) = map.get(&id) else { continue };
                let st = s.state.lock();
                if !s.expired(&st, now, idle) {
                    continue;
                }
                if st.recorded {
                    forget.push(id.clone());
                }
                drop(st);
                map.remove(&id);
            }
        }
        Reaped { aborted, forget }
    }

    /// `$listLocalSessions` documents: `{_id: {id, uid}, lastUse}` (uid: the SHA-256 of the
    /// empty user name, as MongoDB records sessions of unauthenticated clients).
    pub fn list(&self) -> Vec<Document> {
        use sha2::Digest;
        let uid = Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: sha2::Sha256::digest(b"").to_vec(),
        };
        let now_ms = bson::DateTime::now().timestamp_millis();
        self.map
            .lock()
            .values()
            .map(|s| {
                let idle = s.last_use.lock().elapsed().as_millis() as i64;
                doc! {
                    "_id": { "id": s.id.clone(), "uid": uid.clone() },
                    "lastUse": bson::DateTime::from_millis(now_ms - idle),
                }
            })
            .collect()
    }

    /// `serverStatus().transactions`: open transactions (active: a command runs on the
    /// session now) and totals.
    pub fn server_status(&self) -> Document {
        let (mut open, mut active) = (0i64, 0i64);
        for s in self.map.lock().values() {
            if matches!(s.state.lock().txn, TxnState::Active { .. }) {
                open += 1;
                active += i64::from(*s.checked_out.lock());
            }
        }
        let c = &self.counters;
        doc! {
            "currentActive": active,
            "currentInactive": open - active,
            "currentOpen": open,
            "totalAborted": c.aborted.load(Ordering::Relaxed) as i64,
            "totalCommitted": c.committed.load(Ordering::Relaxed) as i64,
            "totalStarted": c.started.load(Ordering::Relaxed) as i64,
        }
    }

    pub fn active_sessions(&self) -> usize {
        self.map.lock().len()
    }

    /// The open transactions (for `currentOp`): session id, transaction number, when it
    /// started, and whether a command is running on the session now.
    pub fn open_transaction_list(&self) -> Vec<OpenTransaction> {
        let sessions: Vec<Arc<Session>> = self.map.lock().values().cloned().collect();
        sessions
            .iter()
            .filter_map(|s| {
                let st = s.state.lock();
                let TxnState::Active { started, .. } = &st.txn else {
                    return None;
                };
                Some(OpenTransaction {
                    lsid: s.id.clone(),
                    txn_number: st.txn_number.unwrap_or(0),
                    started: *started,
                    active: *s.checked_out.lock(),
                })
            })
            .collect()
    }
}

/// An open transaction as `currentOp` shows it.
pub struct OpenTransaction {
    pub lsid: Binary,
    pub txn_number: i64,
    pub started: Instant,
    pub active: bool,
}

impl Session {
    /// Waits until no other command runs on the session, then claims it.
    fn check_out(&self) {
        let mut out = self.checked_out.lock();
        if *out {
            drop(out);
            nidus_engine::blocking::wait(|| {
                let mut out = self.checked_out.lock();
                while *out {
                    self.released.wait(&mut out);
                }
                *out = true;
            });
            return;
        }
        *out = true;
    }

    /// Idle for `idle` at `now`, with no transaction open and no command running on it.
    fn expired(&self, st: &SessionState, now: Instant, idle: Duration) -> bool {
        now.duration_since(*self.last_use.lock()) >= idle
            && !matches!(st.txn, TxnState::Active { .. })
            && !*self.checked_out.lock()
    }

    fn abort_active(&self) {
        self.state.lock().abort_active(&self.counters);
    }
}

impl Binding {
    /// `commitTransaction`: makes the transaction's writes visible; a retried commit of a
    /// committed transaction succeeds again.
    pub fn commit(&self, engine: &Engine) -> Result<()> {
        let n = self.txn_number.unwrap_or(0);
        let mut st = self.session.state.lock();
        match std::mem::replace(&mut st.txn, TxnState::None) {
            TxnState::Active { txn, .. } => {
                drop(st);
                let result = engine.commit_transaction(&txn);
                let mut st = self.session.state.lock();
                st.txn = match &result {
                    Ok(()) => {
                        TxnCounters::count(&self.session.counters.committed);
                        TxnState::Committed
                    }
                    Err(_) => {
                        TxnCounters::count(&self.session.counters.aborted);
                        TxnState::Aborted
                    }
                };
                result
            }
            TxnState::Committed => {
                st.txn = TxnState::Committed;
                Ok(())
            }
            other => {
                st.txn = other;
                Err(aborted(n))
            }
        }
    }

    /// `abortTransaction`.
    pub fn abort(&self) -> Result<()> {
        let n = self.txn_number.unwrap_or(0);
        let mut st = self.session.state.lock();
        if st.abort_active(&self.session.counters) {
            return Ok(());
        }
        match &st.txn {
            TxnState::Committed => Err(Error::new(
                ErrorCode::TransactionCommitted,
                format!("Transaction with {{ txnNumber: {n} }} has been committed."),
            )),
            _ => Err(aborted(n)),
        }
    }

    /// After a transaction statement failed: MongoDB aborts the transaction.
    pub fn abort_after_error(&self) {
        self.session.abort_active();
    }

    /// A write with a `txnNumber` outside a transaction, to be run (not replayed).
    pub fn is_retryable_write(&self) -> bool {
        self.retryable_write && self.stored_reply.is_none()
    }

    /// A retryable write being run whose statements no earlier attempt can have run.
    pub fn is_fresh(&self) -> bool {
        self.fresh && self.is_retryable_write()
    }

    /// The record key of statement `index` when this command is a retryable write being
    /// run (not replayed); `images` when the reply needs the document (findAndModify).
    pub fn statement(&self, index: usize, images: bool) -> Option<StatementId> {
        let n = self.txn_number.filter(|_| self.is_retryable_write())?;
        Some(StatementId::new(
            &self.session.id.bytes,
            n,
            index as u32,
            images,
        ))
    }

    /// Keeps a retryable write's reply so a retry of it gets the same answer.
    pub fn store_reply(&self, reply: &Document) {
        if !self.retryable_write {
            return;
        }
        if let Some(n) = self.txn_number {
            let mut st = self.session.state.lock();
            if st.txn_number == Some(n) {
                st.stored = Some((n, reply.clone()));
            }
        }
    }
}

fn aborted(n: i64) -> Error {
    Error::new(
        ErrorCode::NoSuchTransaction,
        format!("Transaction with {{ txnNumber: {n} }} has been aborted."),
    )
}

/// A transaction reads at `snapshot`, `majority` or `local` (all one snapshot here).
fn check_transaction_read_concern(body: &Document) -> Result<()> {
    let Some(Bson::Document(rc)) = body.get("readConcern") else {
        return Ok(());
    };
    match rc.get("level") {
        None => Ok(()),
        Some(Bson::String(l)) if matches!(l.as_str(), "snapshot" | "majority" | "local") => Ok(()),
        Some(Bson::String(l)) => Err(invalid(format!(
            "The readConcern level must be either 'local' (default), 'majority' or 'snapshot' in order to run in a transaction; got {l}"
        ))),
        Some(_) => Err(Error::type_mismatch(
            "BSON field 'readConcern.level' is the wrong type, expected type 'string'",
        )),
    }
}

fn uuid_text(b: &Binary) -> String {
    match <[u8; 16]>::try_from(b.bytes.as_slice()) {
        Ok(bytes) => bson::Uuid::from_bytes(bytes).to_string(),
        Err(_) => String::new(),
    }
}

/// The session ids a command lists (`endSessions: [{id: UUID}, ...]`).
pub fn listed_ids(v: Option<&Bson>) -> Result<Vec<Vec<u8>>> {
    let Some(Bson::Array(items)) = v else {
        return Err(Error::type_mismatch("sessions must be given as an array"));
    };
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => match d.get("id") {
                Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
                _ => Err(Error::new(
                    ErrorCode::Location(40414),
                    "BSON field 'LogicalSessionFromClient.id' is missing but a required field",
                )),
            },
            _ => Err(Error::type_mismatch(
                "BSON field 'sessions' items must be objects",
            )),
        })
        .collect()
}

/// `startSession`'s reply for a new session id.
pub fn new_session_reply(timeout_minutes: i32) -> Document {
    let id = Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: bson::Uuid::new().bytes().to_vec(),
    };
    doc! { "id": { "id": id }, "timeoutMinutes": timeout_minutes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;

    fn find_on(lsid: &Binary) -> Document {
        doc! {"find": "c", "lsid": {"id": lsid.clone()}, "$db": "test"}
    }

    /// A session is forgotten only when idle with no command running on it, and one a command
    /// took after the reaper's first look stays (its last use is marked under the map's lock).
    #[test]
    fn reap_forgets_only_idle_sessions_nobody_uses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(nidus_storage_rocks::RocksEngine::open(dir.path()).expect("rocks"));
        let engine = Engine::open(kv).expect("engine");
        let sessions = Sessions::default();
        const IDLE: Duration = Duration::from_nanos(1);
        let lsid = |b: u8| Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![b; 16],
        };
        let bind = |b: u8| {
            sessions
                .bind(
                    &engine,
                    true,
                    None,
                    "find",
                    &find_on(&lsid(b)),
                    &Default::default(),
                )
                .expect("bind")
                .expect("a session")
        };
        let running = bind(1);
        drop(bind(2));
        drop(bind(3));
        // Idle for an hour: not yet.
        sessions.reap(Duration::from_secs(60), Duration::from_secs(3600));
        assert_eq!(sessions.active_sessions(), 3);
        // Every session has been idle for a nanosecond; session 1 runs a command.
        sessions.reap(Duration::from_secs(60), IDLE);
        assert_eq!(sessions.active_sessions(), 1);
        drop(running);
        // A command names session 1 between the reaper's look and its removal: the removal
        // checks again and finds it used after the reaper's `now`.
        let now = Instant::now();
        let s = sessions
            .map
            .lock()
            .get(&lsid(1).bytes)
            .cloned()
            .expect("session 1");
        assert!(s.expired(&s.state.lock(), now, IDLE));
        drop(bind(1));
        assert!(!s.expired(&s.state.lock(), now, IDLE));
        sessions.reap(Duration::from_secs(60), IDLE);
        assert_eq!(sessions.active_sessions(), 0);
    }
}
