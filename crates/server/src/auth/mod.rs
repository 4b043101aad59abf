//! Authentication (SCRAM) and authorization (roles, privileges, the per-command check).
//!
//! Every command declares in the command table (`commands/mod.rs`) what it needs: nothing,
//! an authenticated user, or actions on its collection, database or the cluster (computed from
//! the body for writes with upserts, aggregation stages, explain, ...). The dispatcher calls
//! [`authorize`] once per command, before the handler runs, when the server runs with `--auth`.

pub mod keyfile;
pub mod needs;
pub mod roles;
pub use nidus_wire::scram;
pub mod store;
pub mod x509;

use crate::connection::ConnState;
use crate::state::ServerState;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use roles::{Privileges, RoleName, Target};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Server-wide authentication settings and the user-cache generation.
pub struct AuthManager {
    pub enabled: bool,
    /// Bumped by every change to users or roles; connections re-read their user when it moves.
    generation: AtomicU64,
    /// `serverStatus().security.authentication`.
    pub counters: AuthCounters,
    /// `--keyFile`: the credentials of the members' internal user.
    pub internal: Option<keyfile::InternalKey>,
}

/// The mechanisms `serverStatus` reports counters for (MongoDB lists MONGODB-X509 always).
pub const MECHANISMS: [&str; 3] = ["MONGODB-X509", "SCRAM-SHA-1", "SCRAM-SHA-256"];

#[derive(Default)]
struct MechanismCounter {
    received: AtomicU64,
    successful: AtomicU64,
    speculative_received: AtomicU64,
    speculative_successful: AtomicU64,
}

/// MongoDB's AuthCounter: per mechanism, conversations started (`received`, counted when
/// the mechanism is known) and completed (`successful`), with the speculative ones (begun in
/// `hello`) counted again under `speculativeAuthenticate`; and `saslSupportedMechs` asks.
#[derive(Default)]
pub struct AuthCounters {
    mechanisms: [MechanismCounter; 3],
    sasl_supported_mechs: AtomicU64,
}

impl AuthCounters {
    fn of(&self, mechanism: &str) -> Option<&MechanismCounter> {
        let i = MECHANISMS.iter().position(|m| *m == mechanism)?;
        self.mechanisms.get(i)
    }

    pub fn received(&self, mechanism: &str, speculative: bool) {
        if let Some(c) = self.of(mechanism) {
            c.received.fetch_add(1, Ordering::Relaxed);
            if speculative {
                c.speculative_received.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn successful(&self, mechanism: &str, speculative: bool) {
        if let Some(c) = self.of(mechanism) {
            c.successful.fetch_add(1, Ordering::Relaxed);
            if speculative {
                c.speculative_successful.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn sasl_supported_mechs_received(&self) {
        self.sasl_supported_mechs.fetch_add(1, Ordering::Relaxed);
    }

    /// `{saslSupportedMechsReceived, mechanisms: {<MECH>: {speculativeAuthenticate,
    /// clusterAuthenticate, authenticate}}}`, each `{received, successful}`.
    pub fn to_document(&self) -> Document {
        let pair = |r: &AtomicU64, s: &AtomicU64| {
            bson::doc! {
                "received": r.load(Ordering::Relaxed) as i64,
                "successful": s.load(Ordering::Relaxed) as i64,
            }
        };
        let mut mechanisms = Document::new();
        for (name, c) in MECHANISMS.iter().zip(&self.mechanisms) {
            mechanisms.insert(
                *name,
                bson::doc! {
                    "speculativeAuthenticate":
                        pair(&c.speculative_received, &c.speculative_successful),
                    // No cluster members: intra-cluster authentication never happens.
                    "clusterAuthenticate": { "received": 0i64, "successful": 0i64 },
                    "authenticate": pair(&c.received, &c.successful),
                },
            );
        }
        bson::doc! {
            "saslSupportedMechsReceived": self.sasl_supported_mechs.load(Ordering::Relaxed) as i64,
            "mechanisms": mechanisms,
        }
    }
}

impl AuthManager {
    pub fn new(enabled: bool, internal: Option<keyfile::InternalKey>) -> AuthManager {
        AuthManager {
            enabled,
            generation: AtomicU64::new(1),
            counters: AuthCounters::default(),
            internal,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The user a connection authenticated as, with its roles and privileges resolved.
#[derive(Debug, Clone)]
pub struct AuthedUser {
    pub user: String,
    pub db: String,
    /// The user's roles with every role they inherit.
    pub all_roles: BTreeSet<RoleName>,
    pub privileges: Arc<Privileges>,
    generation: u64,
}

impl AuthedUser {
    pub fn name(&self) -> String {
        format!("{}@{}", self.user, self.db)
    }
}

/// A SASL conversation in progress.
#[derive(Debug, Clone)]
pub struct Sasl {
    pub id: i32,
    pub db: String,
    pub user: String,
    pub step: SaslStep,
    pub skip_empty_exchange: bool,
    /// Begun in `hello`'s `speculativeAuthenticate` (counted apart in `serverStatus`).
    pub speculative: bool,
}

#[derive(Debug, Clone)]
pub enum SaslStep {
    /// Waiting for the client-final message.
    Proof(Box<scram::Conversation>),
    /// The proof checked out; waiting for the client's empty message (the mechanism).
    Done(&'static str),
}

/// Per-connection authentication state.
#[derive(Debug, Clone, Default)]
pub struct AuthState {
    pub user: Option<AuthedUser>,
    pub sasl: Option<Sasl>,
    next_conversation: i32,
}

impl AuthState {
    pub fn next_conversation_id(&mut self) -> i32 {
        self.next_conversation += 1;
        self.next_conversation
    }

    /// The owner recorded on cursors this connection opens (empty when not authenticated).
    pub fn owner(&self) -> Vec<String> {
        self.user.iter().map(AuthedUser::name).collect()
    }
}

/// Loads a user's roles and privileges.
pub fn load_user(state: &ServerState, db: &str, user: &str) -> Result<Option<AuthedUser>> {
    let generation = state.auth.generation();
    if state.auth.internal.is_some() && keyfile::is_internal_user(db, user) {
        return Ok(Some(AuthedUser {
            user: user.to_string(),
            db: db.to_string(),
            all_roles: BTreeSet::from([RoleName::new("__system", "admin")]),
            privileges: Arc::new(roles::system_privileges()),
            generation,
        }));
    }
    let Some(d) = store::get_user(&state.engine, db, user)? else {
        return Ok(None);
    };
    let roles = store::roles_of(&d);
    let (all_roles, privileges) = store::resolve(&state.engine, &roles)?;
    Ok(Some(AuthedUser {
        user: user.to_string(),
        db: db.to_string(),
        all_roles,
        privileges: Arc::new(privileges),
        generation,
    }))
}

/// Re-reads the connection's user when users or roles changed since it was loaded; a user
/// that was dropped is logged out.
pub fn refresh(state: &ServerState, auth: &mut AuthState) -> Result<()> {
    let Some(u) = &auth.user else {
        return Ok(());
    };
    if u.generation == state.auth.generation() {
        return Ok(());
    }
    let (db, user) = (u.db.clone(), u.user.clone());
    auth.user = load_user(state, &db, &user)?;
    Ok(())
}

/// What a command needs before it may run under `--auth`.
#[derive(Clone, Copy)]
pub enum Need {
    /// Nothing: the handshake, `ping`, `buildInfo`, SASL, `connectionStatus`, `logout`.
    Nothing,
    /// An authenticated user; no particular privilege.
    Authenticated,
    /// These actions on the collection the command's first field names.
    Collection(&'static [&'static str]),
    /// These actions on the command's database.
    Database(&'static [&'static str]),
    /// These actions on the cluster.
    Cluster(&'static [&'static str]),
    /// Computed from the command: `(target, action)` pairs, all required.
    Custom(fn(&str, &Document, &needs::Sequences) -> needs::Required),
    /// An authenticated user who owns the cursors the command names (`getMore`, `killCursors`).
    CursorOwner,
}

/// The privileges a command requires, as `(target, action)` pairs (None: authentication only).
pub fn required(
    need: Need,
    db: &str,
    body: &Document,
    seqs: &needs::Sequences,
) -> Option<needs::Required> {
    let coll_target = || match body.values().next() {
        Some(Bson::String(c)) => Target::Namespace(db.to_string(), c.clone()),
        _ => Target::Database(db.to_string()),
    };
    let pairs = |t: Target, actions: &'static [&'static str]| {
        actions.iter().map(|a| (t.clone(), *a)).collect::<Vec<_>>()
    };
    match need {
        Need::Nothing | Need::Authenticated | Need::CursorOwner => None,
        Need::Collection(a) => Some(pairs(coll_target(), a)),
        Need::Database(a) => Some(pairs(Target::Database(db.to_string()), a)),
        Need::Cluster(a) => Some(pairs(Target::Cluster, a)),
        Need::Custom(f) => Some(f(db, body, seqs)),
    }
}

/// The localhost exception: with no user defined yet, a connection from the loopback
/// interface may create the first user (or role) in `admin`, and initiate a replica set.
fn localhost_exception(state: &ServerState, peer_is_loopback: bool, name: &str, db: &str) -> bool {
    peer_is_loopback
        && db == "admin"
        && matches!(name, "createUser" | "createRole" | "replSetInitiate")
        && !store::any_user(&state.engine)
}

/// The one authorization check, run by the dispatcher before every command under `--auth`.
pub fn authorize(
    state: &ServerState,
    conn: &mut ConnState,
    need: Need,
    name: &str,
    db: &str,
    body: &Document,
    seqs: &needs::Sequences,
) -> Result<()> {
    if !state.auth.enabled || matches!(need, Need::Nothing) {
        return Ok(());
    }
    let peer_is_loopback = conn.peer.ip().is_loopback();
    let auth = &mut conn.auth;
    refresh(state, auth)?;
    let Some(user) = &auth.user else {
        if localhost_exception(state, peer_is_loopback, name, db) {
            return Ok(());
        }
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("Command {name} requires authentication"),
        ));
    };
    if let Need::CursorOwner = need {
        return check_cursor_owner(state, user, name, db, body);
    }
    if name == "updateUser" {
        return check_update_user(user, db, body, seqs);
    }
    let Some(required) = required(need, db, body, seqs) else {
        return Ok(());
    };
    if required.iter().all(|(t, a)| user.privileges.allows(t, a)) {
        return Ok(());
    }
    if name == "usersInfo" && asks_only_for_self(user, db, body) {
        // Users may always look at themselves.
        return Ok(());
    }
    Err(not_authorized(db, body))
}

/// `updateUser`, checked as MongoDB's `checkAuthForTypedCommand(UpdateUserCommand)`
/// (user_management_commands auth checks): `pwd` needs `changePassword` on the database, or
/// `changeOwnPassword` when the user updates itself; `customData` likewise with
/// `changeCustomData` / `changeOwnCustomData`; `roles` needs grant and revoke rights as any
/// role change. Each failure is Unauthorized with MongoDB's message for it.
fn check_update_user(
    user: &AuthedUser,
    db: &str,
    body: &Document,
    seqs: &needs::Sequences,
) -> Result<()> {
    let target = Target::Database(db.to_string());
    let name = match body.get("updateUser") {
        Some(Bson::String(u)) => u.clone(),
        // A malformed command: the handler reports it.
        _ => return Ok(()),
    };
    let is_self = user.user == name && user.db == db;
    let may = |own: &str, any: &str| {
        (is_self && user.privileges.allows(&target, own)) || user.privileges.allows(&target, any)
    };
    if body.contains_key("pwd") && !may("changeOwnPassword", "changePassword") {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("Not authorized to change password of user: {name}@{db}"),
        ));
    }
    if body.contains_key("customData") && !may("changeOwnCustomData", "changeCustomData") {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            format!("Not authorized to change customData of user: {name}@{db}"),
        ));
    }
    if body.contains_key("roles") {
        let roles = needs::update_user_roles(db, body, seqs);
        if !roles.iter().all(|(t, a)| user.privileges.allows(t, a)) {
            return Err(not_authorized(db, body));
        }
    }
    Ok(())
}

/// `usersInfo` naming only the connection's own user.
fn asks_only_for_self(user: &AuthedUser, db: &str, body: &Document) -> bool {
    let is_me = |v: &Bson| match v {
        Bson::String(u) => *u == user.user && db == user.db,
        Bson::Document(d) => {
            d.get_str("user").ok() == Some(user.user.as_str())
                && d.get_str("db").ok() == Some(user.db.as_str())
        }
        _ => false,
    };
    match body.get("usersInfo") {
        Some(Bson::Array(a)) => !a.is_empty() && a.iter().all(is_me),
        Some(v) => is_me(v),
        None => false,
    }
}

fn not_authorized(db: &str, body: &Document) -> Error {
    Error::new(
        ErrorCode::Unauthorized,
        format!(
            "not authorized on {db} to execute command {}",
            nidus_common::shell::format(&Bson::Document(redact(body)))
        ),
    )
}

/// `getMore` and `killCursors` may touch only cursors their user opened (unknown ids are left
/// to the command, which reports them as not found).
fn check_cursor_owner(
    state: &ServerState,
    user: &AuthedUser,
    name: &str,
    db: &str,
    body: &Document,
) -> Result<()> {
    let me = vec![user.name()];
    let ids: Vec<i64> = match (name, body.values().next()) {
        ("getMore", Some(Bson::Int64(id))) => vec![*id],
        _ => match body.get("cursors") {
            Some(Bson::Array(a)) => a.iter().filter_map(|v| v.as_i64()).collect(),
            _ => Vec::new(),
        },
    };
    for id in ids {
        match state.cursors.owner(id) {
            Some(owner) if owner != me => {
                return Err(if name == "getMore" {
                    Error::new(
                        ErrorCode::Unauthorized,
                        format!("cursor id {id} was not created by the authenticated user"),
                    )
                } else {
                    not_authorized(db, body)
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// A command as error messages and logs may show it: passwords and SASL payloads hidden.
pub fn redact(body: &Document) -> Document {
    let mut out = body.clone();
    for k in ["pwd", "payload"] {
        if out.contains_key(k) {
            out.insert(k, "###");
        }
    }
    out
}

/// True when `action` on `target` is allowed for the connection (always without `--auth`).
pub fn is_allowed(state: &ServerState, auth: &AuthState, target: &Target, action: &str) -> bool {
    !state.auth.enabled
        || auth
            .user
            .as_ref()
            .is_some_and(|u| u.privileges.allows(target, action))
}
