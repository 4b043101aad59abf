//! The Stable API: the `apiVersion`, `apiStrict` and `apiDeprecationErrors` arguments a
//! driver declaring `ServerApi` sends with every command, and MongoDB's refusals of them.
//!
//! Version "1" is the only one accepted. Under `apiStrict: true` a command outside API
//! Version 1 (the command table's `Api`), an aggregation stage outside it (in the pipeline
//! or any sub-pipeline, also a view's pipeline at `create`) and a write to `system.js` fail
//! with APIStrictError; under `apiDeprecationErrors: true` a command deprecated in Version 1
//! fails with APIDeprecationError. A cursor keeps the parameters of the command that opened
//! it, and its `getMore`s must send the same ones (APIMismatchError otherwise).

use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// Where a command stands in API Version 1.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Api {
    Unstable,
    V1,
    DeprecatedInV1,
}

impl Api {
    /// `listCommands`' `apiVersions` and `deprecatedApiVersions`.
    pub fn versions(self) -> (Vec<&'static str>, Vec<&'static str>) {
        match self {
            Api::Unstable => (vec![], vec![]),
            Api::V1 => (vec!["1"], vec![]),
            Api::DeprecatedInV1 => (vec!["1"], vec!["1"]),
        }
    }
}

/// The API parameters a command was sent with (each absent when not sent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiParameters {
    version: Option<String>,
    strict: Option<bool>,
    deprecation_errors: Option<bool>,
}

fn wrong_type(field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field 'APIParametersFromClient.{field}' is the wrong type '{}', expected type '{expected}'",
        super::type_name(v)
    ))
}

fn flag(body: &Document, field: &str) -> Result<Option<bool>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(field, other, "bool")),
    }
}

impl ApiParameters {
    fn parse(body: &Document) -> Result<ApiParameters> {
        let version = match body.get("apiVersion") {
            None | Some(Bson::Null) => None,
            Some(Bson::String(v)) => Some(v.clone()),
            Some(other) => return Err(wrong_type("apiVersion", other, "string")),
        };
        Ok(ApiParameters {
            version,
            strict: flag(body, "apiStrict")?,
            deprecation_errors: flag(body, "apiDeprecationErrors")?,
        })
    }

    pub fn strict(&self) -> bool {
        self.strict == Some(true)
    }

    /// As MongoDB prints them in APIMismatchError messages (`{}` when none were sent).
    fn text(&self) -> String {
        let mut fields = Vec::new();
        if let Some(v) = &self.version {
            fields.push(format!("apiVersion: \"{v}\""));
        }
        if let Some(s) = self.strict {
            fields.push(format!("apiStrict: {s}"));
        }
        if let Some(d) = self.deprecation_errors {
            fields.push(format!("apiDeprecationErrors: {d}"));
        }
        if fields.is_empty() {
            "{}".to_string()
        } else {
            format!("{{ {} }}", fields.join(", "))
        }
    }

    /// A `getMore` (or a statement continuing a transaction) must repeat the parameters of
    /// the command that opened the cursor (began the transaction) exactly.
    pub fn check_same(&self, name: &str, opened: &ApiParameters, opener: &str) -> Result<()> {
        if self == opened {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::APIMismatchError,
            format!(
                "API parameter mismatch: {name} used params {}, {opener} used {}",
                self.text(),
                opened.text()
            ),
        ))
    }
}

/// Parses the command's API parameters and refuses them as MongoDB does, in its order.
pub fn check(name: &str, api: Api, body: &Document) -> Result<ApiParameters> {
    let params = ApiParameters::parse(body)?;
    let Some(version) = params.version.as_deref() else {
        if params.strict.is_some() || params.deprecation_errors.is_some() {
            return Err(Error::new(
                ErrorCode::Location(4886600),
                "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion",
            ));
        }
        return Ok(params);
    };
    if version == "2" {
        return Err(Error::new(
            ErrorCode::APIVersionError,
            "Cannot accept API version 2",
        ));
    }
    if version != "1" {
        return Err(Error::new(
            ErrorCode::APIVersionError,
            "API version must be \"1\"",
        ));
    }
    if params.strict() {
        if api == Api::Unstable {
            return Err(Error::new(
                ErrorCode::APIStrictError,
                format!(
                    "Provided apiStrict:true, but the command {name} is not in API Version 1. \
                     Information on supported commands and migrations in API Version 1 can be \
                     found at https://dochub.mongodb.org/core/manual-versioned-api"
                ),
            ));
        }
        let writes = matches!(name, "insert" | "update" | "delete" | "findAndModify");
        if writes && matches!(body.get(name), Some(Bson::String(c)) if c == "system.js") {
            return Err(Error::new(
                ErrorCode::APIStrictError,
                format!("Provided apiStrict:true, but the command {name} attempts to write to system.js"),
            ));
        }
        if let Some((_, fields)) = UNSTABLE_FIELDS.iter().find(|(c, _)| *c == name) {
            if let Some(field) = body.keys().find(|k| fields.contains(&k.as_str())) {
                return Err(Error::new(
                    ErrorCode::APIStrictError,
                    format!("BSON field '{name}.{field}' is not allowed with apiStrict:true."),
                ));
            }
        }
        if matches!(name, "aggregate" | "create") {
            if let Some(Bson::Array(pipeline)) = body.get("pipeline") {
                check_pipeline(pipeline)?;
            }
        }
    }
    if params.deprecation_errors == Some(true) && api == Api::DeprecatedInV1 {
        return Err(Error::new(
            ErrorCode::APIDeprecationError,
            format!(
                "Provided apiDeprecationErrors:true, but the command {name} is deprecated in API Version 1"
            ),
        ));
    }
    Ok(params)
}

/// Command fields MongoDB's IDL marks unstable: refused under `apiStrict: true`
/// (jstests/core/api/api_version_unstable_fields.js).
const UNSTABLE_FIELDS: &[(&str, &[&str])] = &[
    (
        "find",
        &[
            "min",
            "max",
            "returnKey",
            "noCursorTimeout",
            "showRecordId",
            "tailable",
            "oplogReplay",
            "awaitData",
            "readOnce",
            "$_requestResumeToken",
            "$_resumeAfter",
        ],
    ),
    (
        "aggregate",
        &[
            "isMapReduceCommand",
            "$_requestReshardingResumeToken",
            "explain",
            "runtimeConstants",
            "collectionUUID",
        ],
    ),
    ("create", &["autoIndexId"]),
    ("listCollections", &["includePendingDrops"]),
    ("listIndexes", &["includeBuildUUIDs"]),
    ("getMore", &["term", "lastKnownCommittedOpTime"]),
];

/// Stages MongoDB leaves out of API Version 1 (diagnostic and catalog stages, Atlas Search).
const UNSTABLE_STAGES: &[&str] = &[
    "$currentOp",
    "$indexStats",
    "$listCatalog",
    "$listClusterCatalog",
    "$listLocalSessions",
    "$listSampledQueries",
    "$listSearchIndexes",
    "$listSessions",
    "$planCacheStats",
    "$querySettings",
    "$queryStats",
    "$search",
    "$searchMeta",
    "$shardedDataDistribution",
    "$vectorSearch",
];

fn strict_stage_error(stage: &str) -> Error {
    Error::new(
        ErrorCode::APIStrictError,
        format!("{stage} is not allowed with 'apiStrict: true' in API Version 1"),
    )
}

/// Every stage of `pipeline` and of its sub-pipelines (`$lookup`, `$unionWith`, `$facet`).
fn check_pipeline(pipeline: &[Bson]) -> Result<()> {
    for stage in pipeline {
        let Bson::Document(stage) = stage else {
            continue;
        };
        let Some((name, spec)) = stage.iter().next() else {
            continue;
        };
        if UNSTABLE_STAGES.contains(&name.as_str()) || name.starts_with("$_internal") {
            return Err(strict_stage_error(name));
        }
        match (name.as_str(), spec) {
            // Only the document count of `$collStats` is in API Version 1.
            ("$collStats", Bson::Document(spec)) if spec.keys().any(|k| k != "count") => {
                return Err(strict_stage_error(name));
            }
            ("$lookup" | "$unionWith", Bson::Document(spec)) => {
                if let Some(Bson::Array(sub)) = spec.get("pipeline") {
                    check_pipeline(sub)?;
                }
            }
            ("$facet", Bson::Document(spec)) => {
                for sub in spec.values() {
                    if let Bson::Array(sub) = sub {
                        check_pipeline(sub)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(r: Result<ApiParameters>) -> Option<i32> {
        r.err().map(|e| e.code.code())
    }

    /// MongoDB's jstests/core/api/api_version_parameters.js and api_version_pipeline_stages.js.
    #[test]
    fn refusals_follow_mongodb() {
        let cases: Vec<(&str, Api, Document, Option<i32>)> = vec![
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiStrict": true},
                Some(4886600),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiDeprecationErrors": false},
                Some(4886600),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiVersion": 1.0},
                Some(14),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiVersion": "2"},
                Some(322),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiVersion": "x"},
                Some(322),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiVersion": "1", "apiStrict": "true"},
                Some(14),
            ),
            (
                "ping",
                Api::V1,
                doc! {"ping": 1, "apiVersion": "1", "apiStrict": true, "apiDeprecationErrors": true},
                None,
            ),
            ("ping", Api::V1, doc! {"ping": 1, "apiVersion": "1"}, None),
            (
                "listCommands",
                Api::Unstable,
                doc! {"listCommands": 1, "apiVersion": "1"},
                None,
            ),
            (
                "listCommands",
                Api::Unstable,
                doc! {"listCommands": 1, "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "listCommands",
                Api::Unstable,
                doc! {"listCommands": 1, "apiVersion": "1", "apiDeprecationErrors": true},
                None,
            ),
            (
                "testDeprecation",
                Api::DeprecatedInV1,
                doc! {"testDeprecation": 1, "apiVersion": "1", "apiStrict": true},
                None,
            ),
            (
                "testDeprecation",
                Api::DeprecatedInV1,
                doc! {"testDeprecation": 1, "apiVersion": "1", "apiDeprecationErrors": true},
                Some(324),
            ),
            (
                "insert",
                Api::V1,
                doc! {"insert": "system.js", "documents": [], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "find",
                Api::V1,
                doc! {"find": "system.js", "apiVersion": "1", "apiStrict": true},
                None,
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}], "apiVersion": "1"},
                None,
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": "c", "pipeline": [{"$facet": {"a": [], "b": [{"$indexStats": {}}]}}], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": "c", "pipeline": [{"$lookup": {"from": "d", "pipeline": [{"$indexStats": {}}], "as": "x"}}], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": "c", "pipeline": [{"$collStats": {"latencyStats": {}}}], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
            (
                "aggregate",
                Api::V1,
                doc! {"aggregate": "c", "pipeline": [{"$collStats": {"count": {}}}, {"$group": {"_id": 1}}], "apiVersion": "1", "apiStrict": true},
                None,
            ),
            (
                "create",
                Api::V1,
                doc! {"create": "v", "viewOn": "c", "pipeline": [{"$currentOp": {}}], "apiVersion": "1", "apiStrict": true},
                Some(323),
            ),
        ];
        for (name, api, body, want) in cases {
            assert_eq!(code(check(name, api, &body)), want, "{body}");
        }
    }

    #[test]
    fn a_mismatch_names_both_sets_of_parameters() {
        let opened = ApiParameters::parse(&doc! {"apiVersion": "1", "apiStrict": true}).unwrap();
        let same = ApiParameters::parse(&doc! {"apiStrict": true, "apiVersion": "1"}).unwrap();
        assert!(same
            .check_same("getMore", &opened, "the cursor-creating command")
            .is_ok());
        let none = ApiParameters::default();
        let e = none
            .check_same("getMore", &opened, "the cursor-creating command")
            .unwrap_err();
        assert_eq!(e.code.code(), 325);
        assert_eq!(
            e.message,
            "API parameter mismatch: getMore used params {}, the cursor-creating command used { apiVersion: \"1\", apiStrict: true }"
        );
        let loose = ApiParameters::parse(&doc! {"apiVersion": "1", "apiStrict": false}).unwrap();
        assert!(loose.check_same("getMore", &opened, "x").is_err());
    }
}
