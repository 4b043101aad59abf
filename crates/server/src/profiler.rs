//! The database profiler and the slow-operation log: one [`OpReport`] per finished
//! operation (or write statement) fills both a `system.profile` document and MongoDB's
//! "Slow query" log line (id 51803), with the same metrics.
//!
//! Settings follow MongoDB: the level (0 off, 1 slow operations, 2 all) and the `filter`
//! are per database; `slowms` and `sampleRate` are server-wide. `system.profile` is a capped
//! collection of 1 MiB created on first use.

use crate::curop::ActiveOp;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use nidus_common::{Error, Result};
use nidus_engine::namespace::Namespace;
use nidus_engine::opctx::OpStats;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_query::matcher::Matcher;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// `system.profile`'s size when the profiler creates it (MongoDB's default, 1 MiB).
pub const PROFILE_COLLECTION_SIZE: i64 = 1024 * 1024;

/// A database's profiler filter: the expression as given and its parsed form.
#[derive(Clone)]
pub struct ProfileFilter {
    pub expr: Document,
    matcher: Arc<Matcher>,
}

impl ProfileFilter {
    pub fn parse(expr: Document) -> Result<ProfileFilter> {
        let matcher = Matcher::parse(&expr)?;
        Ok(ProfileFilter {
            expr,
            matcher: Arc::new(matcher),
        })
    }

    fn matches(&self, doc: &Document) -> bool {
        nidus_common::encode::document_to_raw(doc)
            .ok()
            .and_then(|raw| self.matcher.matches(&raw).ok())
            .unwrap_or(false)
    }
}

#[derive(Clone, Default)]
pub struct DbSettings {
    pub level: i32,
    pub filter: Option<ProfileFilter>,
}

pub struct Profiler {
    default_level: i32,
    dbs: Mutex<HashMap<String, DbSettings>>,
    slowms: AtomicI64,
    /// `sampleRate` as the bits of an f64.
    sample_rate: AtomicU64,
}

impl Profiler {
    pub fn new(level: i32, slowms: i64, sample_rate: f64) -> Profiler {
        Profiler {
            default_level: level,
            dbs: Mutex::new(HashMap::new()),
            slowms: AtomicI64::new(slowms),
            sample_rate: AtomicU64::new(sample_rate.to_bits()),
        }
    }

    pub fn settings(&self, db: &str) -> DbSettings {
        self.dbs.lock().get(db).cloned().unwrap_or(DbSettings {
            level: self.default_level,
            filter: None,
        })
    }

    /// Whether `db` is profiled (a level above 0 or a filter): what every command asks, without
    /// copying the settings.
    pub fn profiled(&self, db: &str) -> bool {
        match self.dbs.lock().get(db) {
            Some(s) => s.level > 0 || s.filter.is_some(),
            None => self.default_level > 0,
        }
    }

    /// Sets a database's level and/or filter (`None` leaves it; `Some(None)` unsets the
    /// filter). Returns the previous settings.
    pub fn set(
        &self,
        db: &str,
        level: Option<i32>,
        filter: Option<Option<ProfileFilter>>,
    ) -> DbSettings {
        let mut dbs = self.dbs.lock();
        let old = dbs.get(db).cloned().unwrap_or(DbSettings {
            level: self.default_level,
            filter: None,
        });
        let mut new = old.clone();
        if let Some(l) = level {
            new.level = l;
        }
        if let Some(f) = filter {
            new.filter = f;
        }
        dbs.insert(db.to_string(), new);
        old
    }

    pub fn slowms(&self) -> i64 {
        self.slowms.load(Ordering::Relaxed)
    }

    pub fn set_slowms(&self, ms: i64) {
        self.slowms.store(ms, Ordering::Relaxed);
    }

    pub fn sample_rate(&self) -> f64 {
        f64::from_bits(self.sample_rate.load(Ordering::Relaxed))
    }

    pub fn set_sample_rate(&self, rate: f64) {
        self.sample_rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    fn sampled(&self) -> bool {
        let rate = self.sample_rate();
        if rate >= 1.0 {
            return true;
        }
        if rate <= 0.0 {
            return false;
        }
        let mut b = [0u8; 8];
        if getrandom::fill(&mut b).is_err() {
            return true;
        }
        (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64 <= rate
    }
}

/// What one finished operation or write statement did: fills the profile document and the
/// slow-operation log line.
pub struct OpReport<'a> {
    pub active: &'a ActiveOp,
    /// `query`, `insert`, `update`, `remove`, `getmore`, `command`.
    pub op: &'static str,
    pub ns: String,
    /// The command document, or the statement (`{q, u, multi, upsert}`, `{q, limit}`).
    pub command: Document,
    pub stats: OpStats,
    /// Write outcomes: `nMatched`, `nModified`, `nUpserted`, `ninserted`, `ndeleted`.
    pub writes: Document,
    pub nreturned: Option<i64>,
    pub cursor_id: Option<i64>,
    pub cursor_exhausted: bool,
    pub response_length: Option<i64>,
    pub millis: u64,
    pub error: Option<Error>,
    /// A write statement (MongoDB logs it with `type` = its op; `command` otherwise).
    pub statement: bool,
}

impl OpReport<'_> {
    fn is_write(&self) -> bool {
        !self.writes.is_empty() || matches!(self.op, "insert" | "update" | "remove")
    }

    /// The fields both outputs share, in MongoDB's order.
    fn metrics(&self, log: bool) -> Document {
        let mut d = Document::new();
        if let Some(id) = self.cursor_id.filter(|id| *id != 0) {
            d.insert("cursorid", id);
        }
        let s = &self.stats;
        d.insert("keysExamined", s.keys_examined as i64);
        d.insert("docsExamined", s.docs_examined as i64);
        if log && self.cursor_exhausted {
            d.insert("cursorExhausted", true);
        }
        d.extend(self.writes.clone());
        if self.is_write() {
            d.insert("keysInserted", s.keys_inserted as i64);
            d.insert("keysDeleted", s.keys_deleted as i64);
        }
        if s.write_conflicts > 0 {
            d.insert("writeConflicts", s.write_conflicts as i64);
        }
        // Each retry after a write conflict releases the storage transaction and backs off:
        // MongoDB's yield.
        let yields = if log { "numYields" } else { "numYield" };
        d.insert(yields, s.write_conflicts as i64);
        if let Some(n) = self.nreturned {
            d.insert("nreturned", n);
        }
        if let Some(e) = &self.error {
            d.insert("ok", 0i32);
            d.insert("errMsg", e.message.clone());
            d.insert("errName", e.code.name().into_owned());
            d.insert("errCode", e.code.code());
        }
        d
    }

    /// The `system.profile` document (seed 003's fields).
    pub fn profile_document(&self) -> Document {
        let a = self.active;
        let mut d = doc! { "op": self.op, "ns": self.ns.clone(), "command": self.command.clone() };
        d.extend(self.metrics(false));
        if let Some(n) = self.response_length {
            d.insert("responseLength", n);
        }
        d.insert("protocol", "op_msg");
        d.insert("millis", self.millis as i64);
        if let Some(p) = &self.stats.plan {
            d.insert("planSummary", p.summary.clone());
            d.insert("execStats", p.exec_stats.clone());
        }
        d.insert("ts", bson::DateTime::now());
        d.insert("client", a.client_ip());
        if let Some(app) = &a.app_name {
            d.insert("appName", app.clone());
        }
        d.insert(
            "allUsers",
            a.users
                .iter()
                .map(|(u, db)| Bson::Document(doc! { "user": u.clone(), "db": db.clone() }))
                .collect::<Vec<_>>(),
        );
        d.insert(
            "user",
            a.users
                .first()
                .map(|(u, db)| format!("{u}@{db}"))
                .unwrap_or_default(),
        );
        // Counters follow MongoDB's appendNumber rule (OpDebug::append).
        nidus_common::narrow_counters(&mut d);
        d
    }

    /// The `attr` of the "Slow query" line.
    pub fn log_attr(&self) -> serde_json::Value {
        let a = self.active;
        let mut d = doc! {
            "type": if self.statement { self.op } else { "command" },
            "isFromUserConnection": true,
            "ns": self.ns.clone(),
        };
        if let Some(app) = &a.app_name {
            d.insert("appName", app.clone());
        }
        d.insert("command", self.command.clone());
        if let Some(p) = &self.stats.plan {
            d.insert("planSummary", p.summary.clone());
        }
        d.extend(self.metrics(true));
        if let Some(n) = self.response_length {
            d.insert("reslen", n);
        }
        d.insert("remote", a.client.to_string());
        d.insert("protocol", "op_msg");
        d.insert("durationMillis", self.millis as i64);
        Bson::Document(d).into_relaxed_extjson()
    }
}

/// Logs and profiles a finished operation as the settings say: the log line when it took
/// `slowms` or more (sampled), the profile document at level 2, or at level 1 when slow
/// (sampled); a database filter replaces both thresholds.
pub fn finish(state: &ServerState, db: &str, report: &OpReport, may_profile: bool) {
    let profiler = &state.profiler;
    let settings = profiler.settings(db);
    let profiled_ns = report.ns.ends_with(".system.profile");
    let (log, profile) = match &settings.filter {
        Some(f) => {
            let hit = f.matches(&report.profile_document());
            (hit, hit && settings.level >= 1)
        }
        None => {
            let slow = report.millis as i64 >= profiler.slowms();
            let level = settings.level;
            let sampled = (slow || level == 2) && profiler.sampled();
            (
                slow && sampled,
                level == 2 || (level == 1 && slow && sampled),
            )
        }
    };
    if log {
        crate::log::info(
            if report.statement { "WRITE" } else { "COMMAND" },
            51803,
            &format!("conn{}", report.active.conn_id),
            "Slow query",
            report.log_attr(),
        );
    }
    if profile && may_profile && !profiled_ns {
        if let Err(e) = write_profile(state, db, report.profile_document()) {
            crate::log::warn(
                "CONTROL",
                20703,
                "conn",
                "Failed to write to the profile collection",
                serde_json::json!({ "error": e.message }),
            );
        }
    }
}

/// Inserts into `<db>.system.profile`, creating it (capped, 1 MiB) on first use.
fn write_profile(state: &ServerState, db: &str, doc: Document) -> Result<()> {
    let ns = Namespace::new(db, "system.profile");
    let engine = &state.engine;
    let coll = match engine.collection(&ns) {
        Some(c) => c,
        None => match engine.create_collection(
            &ns,
            doc! { "capped": true, "size": PROFILE_COLLECTION_SIZE },
        ) {
            Ok(c) => c,
            // Another operation created it first.
            Err(e) => engine.collection(&ns).ok_or(e)?,
        },
    };
    let raw =
        nidus_common::encode::document_to_raw(&doc).map_err(|e| Error::internal(e.to_string()))?;
    let raw = prepare_insert(&raw)?;
    engine.insert_one(&coll, &raw, &WriteOpts::default())
}
