//! Resources, privileges and the built-in roles (MongoDB's names and action sets).

use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::collections::{BTreeMap, BTreeSet};

/// What a privilege applies to (MongoDB's resource patterns).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    /// `{anyResource: true}`: everything, system collections included.
    Any,
    /// `{cluster: true}`.
    Cluster,
    /// `{db: "", collection: ""}`: every database and its non-system collections.
    AnyNormal,
    /// `{db: "d", collection: ""}`: the database and its non-system collections.
    Database(String),
    /// `{db: "", collection: "c"}`: collection `c` in every database.
    CollectionInAnyDb(String),
    /// `{db: "d", collection: "c"}`.
    Namespace(String, String),
}

/// What a command touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Cluster,
    Database(String),
    Namespace(String, String),
}

fn is_system(coll: &str) -> bool {
    coll.starts_with("system.")
}

impl Resource {
    pub fn matches(&self, t: &Target) -> bool {
        match (self, t) {
            (Resource::Any, _) => true,
            (Resource::Cluster, Target::Cluster) => true,
            (Resource::AnyNormal, Target::Database(_)) => true,
            (Resource::AnyNormal, Target::Namespace(_, c)) => !is_system(c),
            (Resource::Database(d), Target::Database(td)) => d == td,
            (Resource::Database(d), Target::Namespace(td, c)) => d == td && !is_system(c),
            (Resource::CollectionInAnyDb(c), Target::Namespace(_, tc)) => c == tc,
            (Resource::Namespace(d, c), Target::Namespace(td, tc)) => d == td && c == tc,
            _ => false,
        }
    }

    pub fn parse(d: &Document) -> Result<Resource> {
        if matches!(d.get("anyResource"), Some(Bson::Boolean(true))) {
            return Ok(Resource::Any);
        }
        if matches!(d.get("cluster"), Some(Bson::Boolean(true))) {
            return Ok(Resource::Cluster);
        }
        match (d.get("db"), d.get("collection")) {
            (Some(Bson::String(db)), Some(Bson::String(c))) => {
                Ok(match (db.is_empty(), c.is_empty()) {
                    (true, true) => Resource::AnyNormal,
                    (false, true) => Resource::Database(db.clone()),
                    (true, false) => Resource::CollectionInAnyDb(c.clone()),
                    (false, false) => Resource::Namespace(db.clone(), c.clone()),
                })
            }
            _ => Err(Error::new(
                ErrorCode::FailedToParse,
                "resource pattern must contain 'collection' or 'cluster' field",
            )),
        }
    }

    pub fn to_document(&self) -> Document {
        match self {
            Resource::Any => doc! { "anyResource": true },
            Resource::Cluster => doc! { "cluster": true },
            Resource::AnyNormal => doc! { "db": "", "collection": "" },
            Resource::Database(d) => doc! { "db": d, "collection": "" },
            Resource::CollectionInAnyDb(c) => doc! { "db": "", "collection": c },
            Resource::Namespace(d, c) => doc! { "db": d, "collection": c },
        }
    }
}

/// A role's or user's privileges: actions per resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Privileges(BTreeMap<Resource, BTreeSet<String>>);

impl Privileges {
    pub fn add(&mut self, resource: Resource, actions: &[&str]) {
        let set = self.0.entry(resource).or_default();
        set.extend(actions.iter().map(|a| a.to_string()));
    }

    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.0.keys()
    }

    pub fn merge(&mut self, other: &Privileges) {
        for (r, a) in &other.0 {
            self.0
                .entry(r.clone())
                .or_default()
                .extend(a.iter().cloned());
        }
    }

    pub fn allows(&self, target: &Target, action: &str) -> bool {
        self.0
            .iter()
            .any(|(r, actions)| r.matches(target) && actions.contains(action))
    }

    /// True when some privilege applies to the database or one of its collections
    /// (what `listDatabases` without the cluster action shows).
    pub fn touches_db(&self, db: &str) -> bool {
        self.0.keys().any(|r| match r {
            Resource::Any | Resource::AnyNormal | Resource::CollectionInAnyDb(_) => true,
            Resource::Database(d) | Resource::Namespace(d, _) => d == db,
            Resource::Cluster => false,
        })
    }

    /// True when some action is allowed on the collection.
    pub fn touches_ns(&self, db: &str, coll: &str) -> bool {
        let t = Target::Namespace(db.to_string(), coll.to_string());
        self.0
            .iter()
            .any(|(r, actions)| !actions.is_empty() && r.matches(&t))
    }

    pub fn to_bson(&self) -> Vec<Bson> {
        self.0
            .iter()
            .map(|(r, a)| {
                Bson::Document(doc! {
                    "resource": r.to_document(),
                    "actions": a.iter().cloned().collect::<Vec<_>>(),
                })
            })
            .collect()
    }

    /// Parses a user-defined role's `privileges` array.
    pub fn parse(list: &[Bson]) -> Result<Privileges> {
        let mut out = Privileges::default();
        for p in list {
            let Bson::Document(p) = p else {
                return Err(Error::new(
                    ErrorCode::FailedToParse,
                    "Each element of the privileges array must be an object",
                ));
            };
            let resource = match p.get("resource") {
                Some(Bson::Document(r)) => Resource::parse(r)?,
                _ => {
                    return Err(Error::new(
                        ErrorCode::FailedToParse,
                        "Privilege document must have a 'resource' field",
                    ))
                }
            };
            let actions: Vec<&str> = match p.get("actions") {
                Some(Bson::Array(a)) => a.iter().filter_map(Bson::as_str).collect(),
                _ => {
                    return Err(Error::new(
                        ErrorCode::FailedToParse,
                        "Privilege document must have an 'actions' field",
                    ))
                }
            };
            for a in &actions {
                if !is_action(a) {
                    return Err(Error::new(
                        ErrorCode::FailedToParse,
                        format!("Unrecognized action privilege string: {a}"),
                    ));
                }
            }
            out.add(resource, &actions);
        }
        Ok(out)
    }
}

/// A role name: `role@db`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoleName {
    pub role: String,
    pub db: String,
}

impl RoleName {
    pub fn new(role: &str, db: &str) -> RoleName {
        RoleName {
            role: role.to_string(),
            db: db.to_string(),
        }
    }

    pub fn to_document(&self) -> Document {
        doc! { "role": &self.role, "db": &self.db }
    }

    /// A roles-array element: `"name"` (in `default_db`) or `{role, db}`.
    pub fn parse(v: &Bson, default_db: &str) -> Result<RoleName> {
        match v {
            Bson::String(r) => Ok(RoleName::new(r, default_db)),
            Bson::Document(d) => match (d.get("role"), d.get("db")) {
                (Some(Bson::String(r)), Some(Bson::String(db))) => Ok(RoleName::new(r, db)),
                _ => Err(Error::bad_value(
                    "Role names must be either strings or objects with 'role' and 'db' fields",
                )),
            },
            _ => Err(Error::bad_value(
                "Role names must be either strings or objects with 'role' and 'db' fields",
            )),
        }
    }

    pub fn parse_list(v: &Bson, default_db: &str, field: &str) -> Result<Vec<RoleName>> {
        match v {
            Bson::Array(a) => a.iter().map(|r| RoleName::parse(r, default_db)).collect(),
            _ => Err(Error::type_mismatch(format!(
                "BSON field '{field}' is the wrong type, expected type 'array'"
            ))),
        }
    }
}

impl std::fmt::Display for RoleName {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}@{}", self.role, self.db)
    }
}

const READ: &[&str] = &[
    "changeStream",
    "collStats",
    "dbHash",
    "dbStats",
    "find",
    "killCursors",
    "listCollections",
    "listIndexes",
    "listSearchIndexes",
    "planCacheRead",
];

const WRITE: &[&str] = &[
    "convertToCapped",
    "createCollection",
    "createIndex",
    "dropCollection",
    "dropIndex",
    "insert",
    "remove",
    "renameCollectionSameDB",
    "update",
];

const DB_ADMIN: &[&str] = &[
    "analyze",
    "bypassDocumentValidation",
    "collMod",
    "collStats",
    "compact",
    "convertToCapped",
    "createCollection",
    "createIndex",
    "dbStats",
    "dropCollection",
    "dropDatabase",
    "dropIndex",
    "enableProfiler",
    "listCollections",
    "listIndexes",
    "planCacheIndexFilter",
    "planCacheRead",
    "planCacheWrite",
    "reIndex",
    "renameCollectionSameDB",
    "storageDetails",
    "validate",
];

const USER_ADMIN: &[&str] = &[
    "changeCustomData",
    "changePassword",
    "createRole",
    "createUser",
    "dropRole",
    "dropUser",
    "grantRole",
    "revokeRole",
    "setAuthenticationRestriction",
    "viewRole",
    "viewUser",
];

const CLUSTER_MONITOR: &[&str] = &[
    "connPoolStats",
    "getCmdLineOpts",
    "getDefaultRWConcern",
    "getLog",
    "getParameter",
    "hostInfo",
    "inprog",
    "listDatabases",
    "listSessions",
    "netstat",
    "replSetGetConfig",
    "replSetGetStatus",
    "serverStatus",
    "top",
];

/// Actions only `root` (and user-defined roles that name them) hold on the cluster.
const CLUSTER_ADMIN: &[&str] = &[
    "configureFailPoint",
    "killAnyCursor",
    "killAnySession",
    "killop",
    "replSetConfigure",
    "replSetStateChange",
    "replSetResizeOplog",
    "setParameter",
    "shutdown",
];

/// Every action type MongoDB knows (its `ActionType` enum), sorted: a user-defined role may
/// name any of them, whether or not a built-in role or a Nidus command uses it.
const ACTION_TYPES: &[&str] = &[
    "addShard",
    "advanceClusterTime",
    "allCollectionStats",
    "analyze",
    "analyzeShardKey",
    "anyAction",
    "appendOplogNote",
    "applicationMessage",
    "applyOps",
    "auditConfigure",
    "auditLogRotate",
    "authCheck",
    "authSchemaUpgrade",
    "authenticate",
    "bypassDocumentValidation",
    "bypassWriteBlockingMode",
    "changeCustomData",
    "changeOwnCustomData",
    "changeOwnPassword",
    "changePassword",
    "changeStream",
    "checkFreeMonitoringStatus",
    "checkMetadataConsistency",
    "cleanupOrphaned",
    "cleanupStructuredEncryptionData",
    "clearJumboFlag",
    "closeAllDatabases",
    "collMod",
    "collStats",
    "compact",
    "compactStructuredEncryptionData",
    "configureQueryAnalyzer",
    "connPoolStats",
    "connPoolSync",
    "convertToCapped",
    "cpuProfiler",
    "createCollection",
    "createDatabase",
    "createIndex",
    "createRole",
    "createSearchIndexes",
    "createUser",
    "dbCheck",
    "dbHash",
    "dbStats",
    "dropAllRolesFromDatabase",
    "dropAllUsersFromDatabase",
    "dropCollection",
    "dropConnections",
    "dropDatabase",
    "dropIndex",
    "dropRole",
    "dropSearchIndex",
    "dropUser",
    "emptycapped",
    "enableProfiler",
    "enableSharding",
    "exportCollection",
    "find",
    "flushRouterConfig",
    "forceUUID",
    "fsync",
    "fsyncUnlock",
    "getChangeStreamState",
    "getClusterParameter",
    "getCmdLineOpts",
    "getDatabaseVersion",
    "getDefaultRWConcern",
    "getLog",
    "getParameter",
    "getShardMap",
    "getShardVersion",
    "grantPrivilegesToRole",
    "grantRole",
    "grantRolesToRole",
    "grantRolesToUser",
    "hostInfo",
    "impersonate",
    "importCollection",
    "indexStats",
    "inprog",
    "insert",
    "internal",
    "invalidateUserCache",
    "issueDirectShardOperations",
    "killAnyCursor",
    "killAnySession",
    "killCursors",
    "killop",
    "listCachedAndActiveUsers",
    "listCollections",
    "listCursors",
    "listDatabases",
    "listIndexes",
    "listSampledQueries",
    "listSearchIndexes",
    "listSessions",
    "listShards",
    "logRotate",
    "moveChunk",
    "moveCollection",
    "netstat",
    "oidReset",
    "oidcListKeys",
    "oidcRefreshKeys",
    "operationMetrics",
    "planCacheIndexFilter",
    "planCacheRead",
    "planCacheWrite",
    "querySettings",
    "queryStatsRead",
    "queryStatsReadTransformed",
    "reIndex",
    "refineCollectionShardKey",
    "remove",
    "removeShard",
    "renameCollection",
    "renameCollectionSameDB",
    "repairDatabase",
    "replSetConfigure",
    "replSetGetConfig",
    "replSetGetStatus",
    "replSetHeartbeat",
    "replSetReconfig",
    "replSetResizeOplog",
    "replSetStateChange",
    "reshardCollection",
    "resync",
    "revokePrivilegesFromRole",
    "revokeRole",
    "revokeRolesFromRole",
    "revokeRolesFromUser",
    "rotateCertificates",
    "runAsLessPrivilegedUser",
    "runTenantMigration",
    "serverStatus",
    "setAuthenticationRestriction",
    "setChangeStreamState",
    "setClusterParameter",
    "setDefaultRWConcern",
    "setFeatureCompatibilityVersion",
    "setFreeMonitoring",
    "setParameter",
    "setUserWriteBlockMode",
    "shardCollection",
    "shardedDataDistribution",
    "shardingState",
    "shutdown",
    "splitChunk",
    "splitVector",
    "storageDetails",
    "top",
    "touch",
    "trafficRecord",
    "transitionFromDedicatedConfigServer",
    "transitionToDedicatedConfigServer",
    "unlock",
    "update",
    "updateRole",
    "updateSearchIndex",
    "updateUser",
    "useTenant",
    "useUUID",
    "validate",
    "viewRole",
    "viewUser",
];

fn is_action(a: &str) -> bool {
    ACTION_TYPES.binary_search(&a).is_ok()
}

/// The built-in roles' names, in MongoDB's spelling (the `AnyDatabase` ones, `clusterMonitor`
/// and `root` exist only in `admin`).
pub const BUILTIN_ROLES: &[&str] = &[
    "read",
    "readWrite",
    "dbAdmin",
    "userAdmin",
    "dbOwner",
    "readAnyDatabase",
    "readWriteAnyDatabase",
    "userAdminAnyDatabase",
    "dbAdminAnyDatabase",
    "clusterMonitor",
    "root",
];

const ADMIN_ONLY: &[&str] = &[
    "readAnyDatabase",
    "readWriteAnyDatabase",
    "userAdminAnyDatabase",
    "dbAdminAnyDatabase",
    "clusterMonitor",
    "root",
];

pub fn is_builtin(r: &RoleName) -> bool {
    BUILTIN_ROLES.contains(&r.role.as_str())
        && (r.db == "admin" || !ADMIN_ONLY.contains(&r.role.as_str()))
}

/// A built-in role's privileges (None when `r` is not a built-in role).
pub fn builtin_privileges(r: &RoleName) -> Option<Privileges> {
    if !is_builtin(r) {
        return None;
    }
    let db = r.db.clone();
    let mut p = Privileges::default();
    let own = || Resource::Database(db.clone());
    let ns = |c: &str| Resource::Namespace(db.clone(), c.to_string());
    let read = |p: &mut Privileges, res: Resource| p.add(res, READ);
    let read_write = |p: &mut Privileges, res: Resource| {
        p.add(res.clone(), READ);
        p.add(res, WRITE);
    };
    let db_admin = |p: &mut Privileges, res: Resource, profile: Resource| {
        p.add(res, DB_ADMIN);
        p.add(profile.clone(), READ);
        p.add(profile, &["createCollection", "dropCollection"]);
    };
    match r.role.as_str() {
        "read" => {
            read(&mut p, own());
            read(&mut p, ns("system.js"));
        }
        "readWrite" => {
            read_write(&mut p, own());
            read_write(&mut p, ns("system.js"));
        }
        "dbAdmin" => db_admin(&mut p, own(), ns("system.profile")),
        "userAdmin" => p.add(own(), USER_ADMIN),
        "dbOwner" => {
            read_write(&mut p, own());
            read_write(&mut p, ns("system.js"));
            db_admin(&mut p, own(), ns("system.profile"));
            p.add(own(), USER_ADMIN);
        }
        "readAnyDatabase" => {
            read(&mut p, Resource::AnyNormal);
            read(&mut p, Resource::CollectionInAnyDb("system.js".into()));
            p.add(Resource::Cluster, &["listDatabases"]);
        }
        "readWriteAnyDatabase" => {
            read_write(&mut p, Resource::AnyNormal);
            read_write(&mut p, Resource::CollectionInAnyDb("system.js".into()));
            p.add(Resource::Cluster, &["listDatabases"]);
        }
        "userAdminAnyDatabase" => {
            p.add(Resource::AnyNormal, USER_ADMIN);
            p.add(
                Resource::Cluster,
                &["listDatabases", "viewUser", "viewRole"],
            );
            for c in ["system.users", "system.roles"] {
                p.add(
                    Resource::Namespace("admin".into(), c.into()),
                    &[
                        "find",
                        "insert",
                        "update",
                        "remove",
                        "createIndex",
                        "dropIndex",
                    ],
                );
            }
        }
        "dbAdminAnyDatabase" => {
            db_admin(
                &mut p,
                Resource::AnyNormal,
                Resource::CollectionInAnyDb("system.profile".into()),
            );
            p.add(Resource::Cluster, &["listDatabases"]);
        }
        "clusterMonitor" => {
            p.add(Resource::Cluster, CLUSTER_MONITOR);
            p.add(Resource::AnyNormal, &["collStats", "dbStats", "indexStats"]);
        }
        "root" => {
            for set in [
                READ,
                WRITE,
                DB_ADMIN,
                USER_ADMIN,
                CLUSTER_MONITOR,
                CLUSTER_ADMIN,
            ] {
                p.add(Resource::Any, set);
                p.add(Resource::Cluster, set);
            }
            p.add(Resource::Any, &["indexStats"]);
        }
        _ => return None,
    }
    Some(p)
}

/// The privileges of MongoDB's `__system` role (the members' internal user): every action on
/// every resource, including the cluster's `internal` one.
pub fn system_privileges() -> Privileges {
    let mut p = Privileges::default();
    p.add(Resource::Any, ACTION_TYPES);
    p.add(Resource::Cluster, ACTION_TYPES);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_types_are_sorted_and_cover_the_builtin_roles() {
        assert!(ACTION_TYPES.windows(2).all(|w| w[0] < w[1]));
        for set in [
            READ,
            WRITE,
            DB_ADMIN,
            USER_ADMIN,
            CLUSTER_MONITOR,
            CLUSTER_ADMIN,
        ] {
            // configureFailPoint is a Nidus-internal action (a test command), not MongoDB's.
            for a in set.iter().filter(|a| **a != "configureFailPoint") {
                assert!(is_action(a), "{a}");
            }
        }
        assert!(is_action("impersonate") && is_action("useUUID") && !is_action("Find"));
    }

    fn ns(d: &str, c: &str) -> Target {
        Target::Namespace(d.into(), c.into())
    }

    #[test]
    fn read_role_reads_its_database_only() {
        let p = builtin_privileges(&RoleName::new("read", "app")).unwrap();
        assert!(p.allows(&ns("app", "c"), "find"));
        assert!(!p.allows(&ns("app", "c"), "insert"));
        assert!(!p.allows(&ns("other", "c"), "find"));
        assert!(!p.allows(&ns("app", "system.users"), "find"));
        assert!(p.touches_db("app"));
        assert!(!p.touches_db("other"));
    }

    #[test]
    fn any_database_roles_exist_only_in_admin() {
        assert!(builtin_privileges(&RoleName::new("readAnyDatabase", "app")).is_none());
        let p = builtin_privileges(&RoleName::new("readWriteAnyDatabase", "admin")).unwrap();
        assert!(p.allows(&ns("x", "y"), "insert"));
        assert!(p.allows(&Target::Cluster, "listDatabases"));
        assert!(!p.allows(&Target::Cluster, "serverStatus"));
        let root = builtin_privileges(&RoleName::new("root", "admin")).unwrap();
        assert!(root.allows(&ns("admin", "system.users"), "find"));
        assert!(root.allows(&Target::Cluster, "serverStatus"));
        let mon = builtin_privileges(&RoleName::new("clusterMonitor", "admin")).unwrap();
        assert!(mon.allows(&Target::Cluster, "serverStatus"));
        assert!(!mon.allows(&ns("x", "y"), "find"));
    }

    #[test]
    fn user_defined_privileges_parse() {
        let list = vec![Bson::Document(
            doc! { "resource": { "db": "a", "collection": "b" }, "actions": ["find"] },
        )];
        let p = Privileges::parse(&list).unwrap();
        assert!(p.allows(&ns("a", "b"), "find"));
        assert!(!p.allows(&ns("a", "c"), "find"));
        let bad = vec![Bson::Document(
            doc! { "resource": { "db": "a", "collection": "b" }, "actions": ["fly"] },
        )];
        assert!(Privileges::parse(&bad).is_err());
    }
}
