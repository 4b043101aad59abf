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
        "allowDiskUseByDefault": true,
        "notablescan": false,
        "quiet": false,
        "requireApiVersion": false,
        "authenticationMechanisms": ["MONGODB-X509", "SCRAM-SHA-1", "SCRAM-SHA-256"],
        "maxBSONDepth": 200,
        "ttlMonitorEnabled": true,
        "ttlMonitorSleepSecs": 60,
        "logLevel": 0,
    }
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
    }

    pub fn get(&self, name: &str) -> Option<Bson> {
        self.values.read().get(name).cloned()
    }

    pub fn all(&self) -> Document {
        self.values.read().clone()
    }

    /// Sets a parameter at run time, keeping its type. Returns the previous value.
    pub fn set(&self, name: &str, value: Bson) -> Option<Bson> {
        let mut values = self.values.write();
        let was = values.get(name).cloned()?;
        values.insert(name, value);
        Some(was)
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
