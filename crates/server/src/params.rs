//! Server parameters (`getParameter` / `setParameter` / `--setParameter`).

use bson::{Bson, Document};
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// Parameters with their defaults; `--setParameter` may set the settable ones at start-up.
pub struct Parameters {
    values: RwLock<Document>,
}

fn defaults() -> Document {
    bson::doc! {
        "enableTestCommands": false,
        "featureCompatibilityVersion": { "version": "8.0" },
        "transactionLifetimeLimitSeconds": 60,
        "maxTransactionLockRequestTimeoutMillis": 5,
        "cursorTimeoutMillis": 600_000i64,
        "clientCursorMonitorFrequencySecs": 4,
        "enableTimeoutOfInactiveSessionCursors": false,
        "logicalSessionRefreshMillis": 300_000,
        "localLogicalSessionTimeoutMinutes": 30,
        "internalQueryMaxBlockingSortMemoryUsageBytes": 104_857_600i64,
        "internalQueryPlanEvaluationWorks": 10_000,
        "internalQueryPlannerMaxIndexedSolutions": 64,
        "internalDocumentSourceGroupMaxMemoryBytes": 104_857_600i64,
        "internalMaxSubPipelineViewDepth": 20,
        "internalDocumentSourceBucketAutoMaxMemoryBytes": 104_857_600i64,
        "internalDocumentSourceSetWindowFieldsMaxMemoryBytes": 104_857_600i64,
        "internalQuerySlotBasedExecutionHashLookupApproxMemoryUseInBytesBeforeSpill": 104_857_600i64,
        "allowDiskUseByDefault": true,
        "notablescan": false,
        "quiet": false,
        "requireApiVersion": false,
        "authenticationMechanisms": ["MONGODB-X509", "SCRAM-SHA-1", "SCRAM-SHA-256"],
        "maxBSONDepth": 200,
        "ttlMonitorEnabled": true,
        "ttlMonitorSleepSecs": 60,
        "logLevel": 0,
        "logComponentVerbosity": default_log_components(),
        "initialSyncMethod": "logical",
        // Nidus's own: the most bytes a replica set member's Raft log keeps before it is
        // compacted (0: the oplog's size bound, `--oplogSizeMB`).
        "raftLogMaxSizeBytes": 0i64,
    }
}

/// mongod's log components, each with `verbosity: -1` (inherit from the parent), under a
/// global `verbosity: 0`.
fn default_log_components() -> Document {
    const COMPONENTS: &[(&str, &[&str])] = &[
        ("accessControl", &[]),
        ("assert", &[]),
        ("command", &[]),
        ("control", &[]),
        ("executor", &[]),
        ("geo", &[]),
        ("index", &[]),
        ("network", &["asio", "bridge", "connectionPool"]),
        ("processHealth", &[]),
        ("query", &["optimizer", "ce"]),
        ("queryStats", &[]),
        (
            "replication",
            &["election", "heartbeats", "initialSync", "rollback"],
        ),
        (
            "sharding",
            &["rangeDeleter", "shardingCatalogRefresh", "migration"],
        ),
        ("storage", &["recovery", "journal"]),
        ("write", &[]),
        ("ftdc", &[]),
        ("tracking", &[]),
        ("transaction", &[]),
        ("test", &[]),
    ];
    let mut d = bson::doc! { "verbosity": 0 };
    for (name, subs) in COMPONENTS {
        let mut c = bson::doc! { "verbosity": -1 };
        for sub in *subs {
            c.insert(*sub, bson::doc! { "verbosity": -1 });
        }
        d.insert(*name, c);
    }
    d
}

/// Merges a `logComponentVerbosity` change into `into`: only known components, each
/// `verbosity` a number (-1 clears a component back to inheriting).
fn merge_verbosity(into: &mut Document, change: &Document, path: &str) -> Result<(), String> {
    for (k, v) in change {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match (k.as_str(), v) {
            ("verbosity", v) => {
                let n = match v {
                    Bson::Int32(n) => *n as i64,
                    Bson::Int64(n) => *n,
                    Bson::Double(f) => *f as i64,
                    _ => return Err(format!("Invalid verbosity for {here}: not a number")),
                };
                let floor = if path.is_empty() { 0 } else { -1 };
                into.insert("verbosity", n.clamp(floor, 5) as i32);
            }
            (_, Bson::Document(sub)) => match into.get_mut(k) {
                Some(Bson::Document(existing)) => merge_verbosity(existing, sub, &here)?,
                _ => return Err(format!("Invalid component: {here}")),
            },
            (_, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) => {
                // `{storage: 2}` is shorthand for `{storage: {verbosity: 2}}`.
                let mut sub = Document::new();
                sub.insert("verbosity", v.clone());
                match into.get_mut(k) {
                    Some(Bson::Document(existing)) => merge_verbosity(existing, &sub, &here)?,
                    _ => return Err(format!("Invalid component: {here}")),
                }
            }
            _ => return Err(format!("Invalid component: {here}")),
        }
    }
    Ok(())
}

fn parse_like(existing: &Bson, raw: &str) -> Option<Bson> {
    Some(match existing {
        Bson::Boolean(_) => Bson::Boolean(matches!(raw, "1" | "true")),
        Bson::Int32(_) => Bson::Int32(raw.parse().ok()?),
        Bson::Int64(_) => Bson::Int64(raw.parse().ok()?),
        Bson::Double(_) => Bson::Double(raw.parse().ok()?),
        _ => Bson::String(raw.to_string()),
    })
}

impl Parameters {
    pub fn from_config(set: &BTreeMap<String, String>) -> Result<Parameters, String> {
        let mut values = defaults();
        for (k, raw) in set {
            let Some(existing) = values.get(k) else {
                return Err(format!("Unknown --setParameter '{k}'"));
            };
            let v = parse_like(existing, raw)
                .ok_or_else(|| format!("Bad value for parameter \"{k}\": {raw}"))?;
            if k == "initialSyncMethod" {
                nidus_repl::file_copy::set_initial_sync_method(raw)?;
            }
            values.insert(k.clone(), v);
        }
        let params = Parameters {
            values: RwLock::new(values),
        };
        params.apply_to_engine();
        Ok(params)
    }

    /// Hands the parameters the engine reads on its own to it (at start-up and after each
    /// `setParameter`): `internalMaxSubPipelineViewDepth`.
    pub fn apply_to_engine(&self) {
        if let Some(n) = self.i64("internalMaxSubPipelineViewDepth") {
            nidus_engine::pipeline::set_max_sub_pipeline_depth(n.max(0) as usize);
        }
        if let Some(n) = self.i64("raftLogMaxSizeBytes") {
            nidus_repl::storage::set_max_log_bytes(n.max(0) as u64);
        }
    }

    pub fn get(&self, name: &str) -> Option<Bson> {
        self.values.read().get(name).cloned()
    }

    pub fn all(&self) -> Document {
        self.values.read().clone()
    }

    /// Sets a parameter at run time, keeping its type. Returns the previous value; `Ok(None)`
    /// for an unknown parameter, `Err` for a value the parameter refuses.
    pub fn set(&self, name: &str, value: Bson) -> Result<Option<Bson>, String> {
        let mut values = self.values.write();
        let Some(was) = values.get(name).cloned() else {
            return Ok(None);
        };
        match (name, &value) {
            ("logComponentVerbosity", Bson::Document(change)) => {
                let mut merged = match &was {
                    Bson::Document(d) => d.clone(),
                    _ => default_log_components(),
                };
                merge_verbosity(&mut merged, change, "")?;
                let level = merged.get("verbosity").cloned().unwrap_or(Bson::Int32(0));
                values.insert("logComponentVerbosity", merged);
                values.insert("logLevel", level);
            }
            ("logComponentVerbosity", _) => {
                return Err("logComponentVerbosity must be an object".to_string())
            }
            ("logLevel", v) => {
                let n = match v {
                    Bson::Int32(n) => *n as i64,
                    Bson::Int64(n) => *n,
                    Bson::Double(f) => *f as i64,
                    _ => return Err("logLevel must be a number".to_string()),
                };
                let level = n.clamp(0, 5) as i32;
                values.insert("logLevel", level);
                if let Some(Bson::Document(c)) = values.get_mut("logComponentVerbosity") {
                    c.insert("verbosity", level);
                }
            }
            _ => {
                values.insert(name, value);
            }
        }
        Ok(Some(was))
    }

    /// `allowDiskUseByDefault`: whether `find`/`aggregate` without `allowDiskUse` may spill.
    pub fn allow_disk_use_by_default(&self) -> bool {
        !matches!(
            self.get("allowDiskUseByDefault"),
            Some(Bson::Boolean(false))
        )
    }

    pub fn test_commands_enabled(&self) -> bool {
        matches!(self.get("enableTestCommands"), Some(Bson::Boolean(true)))
    }

    pub fn i64(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Bson::Int32(n) => Some(n as i64),
            Bson::Int64(n) => Some(n),
            Bson::Double(f) => Some(f as i64),
            _ => None,
        }
    }
}
