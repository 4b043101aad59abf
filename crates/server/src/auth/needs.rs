//! The privileges of commands whose needs depend on their arguments (named in the command
//! table as `Need::Custom`): writes that may upsert, aggregation stages that read or write
//! other collections, `explain`, `renameCollection`, `bulkWrite`, user and role management.

use super::roles::{RoleName, Target};
use bson::{Bson, Document, RawDocumentBuf};

pub type Sequences = [(String, Vec<RawDocumentBuf>)];
pub type Required = Vec<(Target, &'static str)>;

fn ns(db: &str, coll: &str) -> Target {
    Target::Namespace(db.to_string(), coll.to_string())
}

/// The collection named by the command's first field.
fn own_ns(db: &str, body: &Document) -> Target {
    match body.values().next() {
        Some(Bson::String(c)) => ns(db, c),
        _ => Target::Database(db.to_string()),
    }
}

fn truthy(v: Option<&Bson>) -> bool {
    match v {
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::Int32(n)) => *n != 0,
        Some(Bson::Int64(n)) => *n != 0,
        Some(Bson::Double(f)) => *f != 0.0,
        _ => false,
    }
}

/// The documents of an array argument, from the body or an OP_MSG sequence.
fn statements(body: &Document, seqs: &Sequences, field: &str) -> Vec<Document> {
    if let Some((_, docs)) = seqs.iter().find(|(id, _)| id == field) {
        return docs
            .iter()
            .filter_map(|d| Document::try_from(d.as_ref()).ok())
            .collect();
    }
    match body.get(field) {
        Some(Bson::Array(a)) => a.iter().filter_map(|v| v.as_document().cloned()).collect(),
        _ => Vec::new(),
    }
}

fn bypass(t: &Target, body: &Document, out: &mut Required) {
    if truthy(body.get("bypassDocumentValidation")) {
        out.push((t.clone(), "bypassDocumentValidation"));
    }
}

/// `listCollections` with `authorizedCollections: true, nameOnly: true` needs only a user;
/// the reply then lists the collections the user has privileges on.
pub fn list_collections(db: &str, body: &Document, _: &Sequences) -> Required {
    if truthy(body.get("authorizedCollections")) && truthy(body.get("nameOnly")) {
        return Vec::new();
    }
    vec![(Target::Database(db.to_string()), "listCollections")]
}

/// `profile`: reading the settings (`profile: -1` without `slowms`/`sampleRate`/`filter`)
/// needs `find` on `system.profile`; changing them `enableProfiler` on the database.
pub fn profile(db: &str, body: &Document, _: &Sequences) -> Required {
    let level = match body.get("profile") {
        Some(Bson::Int32(n)) => *n as i64,
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) => *f as i64,
        _ => 0,
    };
    let read_only = level < 0
        && !["slowms", "sampleRate", "filter"]
            .iter()
            .any(|f| body.contains_key(*f));
    if read_only {
        vec![(ns(db, "system.profile"), "find")]
    } else {
        vec![(Target::Database(db.to_string()), "enableProfiler")]
    }
}

pub fn insert(db: &str, body: &Document, _: &Sequences) -> Required {
    let t = own_ns(db, body);
    let mut out = vec![(t.clone(), "insert")];
    bypass(&t, body, &mut out);
    out
}

pub fn update(db: &str, body: &Document, seqs: &Sequences) -> Required {
    let t = own_ns(db, body);
    let mut out = vec![(t.clone(), "update")];
    if statements(body, seqs, "updates")
        .iter()
        .any(|u| truthy(u.get("upsert")))
    {
        out.push((t.clone(), "insert"));
    }
    bypass(&t, body, &mut out);
    out
}

pub fn find_and_modify(db: &str, body: &Document, _: &Sequences) -> Required {
    let t = own_ns(db, body);
    let mut out = vec![(t.clone(), "find")];
    if truthy(body.get("remove")) {
        out.push((t.clone(), "remove"));
    } else {
        out.push((t.clone(), "update"));
        if truthy(body.get("upsert")) {
            out.push((t.clone(), "insert"));
        }
    }
    bypass(&t, body, &mut out);
    out
}

/// A stage's target collection: `"coll"` or `{db, coll}`.
fn stage_target(db: &str, v: &Bson) -> Option<Target> {
    match v {
        Bson::String(c) => Some(ns(db, c)),
        Bson::Document(d) => {
            let c = d.get_str("coll").ok()?;
            Some(ns(d.get_str("db").unwrap_or(db), c))
        }
        _ => None,
    }
}

fn pipeline_needs(db: &str, pipeline: &[Bson], out: &mut Required) {
    for stage in pipeline {
        let Some(stage) = stage.as_document() else {
            continue;
        };
        let Some((name, arg)) = stage.iter().next() else {
            continue;
        };
        match name.as_str() {
            "$out" => {
                if let Some(t) = stage_target(db, arg) {
                    out.push((t.clone(), "insert"));
                    out.push((t, "remove"));
                }
            }
            "$merge" => {
                let into = match arg {
                    Bson::Document(d) => d.get("into"),
                    other => Some(other),
                };
                if let Some(t) = into.and_then(|v| stage_target(db, v)) {
                    out.push((t.clone(), "insert"));
                    out.push((t, "update"));
                }
            }
            "$lookup" | "$graphLookup" | "$unionWith" => {
                let (from, sub) = match arg {
                    Bson::String(c) => (Some(ns(db, c)), None),
                    Bson::Document(d) => (
                        d.get("from")
                            .or_else(|| d.get("coll"))
                            .and_then(|v| stage_target(db, v)),
                        d.get_array("pipeline").ok(),
                    ),
                    _ => (None, None),
                };
                if let Some(t) = from {
                    out.push((t, "find"));
                }
                if let Some(sub) = sub {
                    pipeline_needs(db, sub, out);
                }
            }
            "$facet" => {
                if let Bson::Document(d) = arg {
                    for sub in d.values() {
                        if let Bson::Array(sub) = sub {
                            pipeline_needs(db, sub, out);
                        }
                    }
                }
            }
            "$currentOp" => out.push((Target::Cluster, "inprog")),
            _ => {}
        }
    }
}

pub fn aggregate(db: &str, body: &Document, _: &Sequences) -> Required {
    let mut out = Vec::new();
    let t = own_ns(db, body);
    let pipeline = body.get_array("pipeline").cloned().unwrap_or_default();
    let first = pipeline
        .first()
        .and_then(Bson::as_document)
        .and_then(|d| d.keys().next().cloned())
        .unwrap_or_default();
    if matches!(t, Target::Namespace(..)) {
        match first.as_str() {
            "$collStats" => out.push((t.clone(), "collStats")),
            "$indexStats" => out.push((t.clone(), "indexStats")),
            "$planCacheStats" => out.push((t.clone(), "planCacheRead")),
            _ => out.push((t.clone(), "find")),
        }
    }
    pipeline_needs(db, &pipeline, &mut out);
    bypass(&t, body, &mut out);
    out
}

/// `explain` needs what the explained command needs.
pub fn explain(db: &str, body: &Document, seqs: &Sequences) -> Required {
    let Some(Bson::Document(inner)) = body.get("explain") else {
        return vec![(Target::Database(db.to_string()), "find")];
    };
    let name = inner.keys().next().cloned().unwrap_or_default();
    match crate::commands::need_of(&name) {
        Some(need) => super::required(need, db, inner, seqs).unwrap_or_default(),
        // Unknown commands fail in the explain handler itself.
        None => Vec::new(),
    }
}

pub fn rename_collection(_db: &str, body: &Document, _: &Sequences) -> Required {
    let split = |v: Option<&Bson>| {
        v.and_then(Bson::as_str)
            .and_then(|s| s.split_once('.'))
            .map(|(d, c)| (d.to_string(), c.to_string()))
    };
    let (Some((sdb, sc)), Some((tdb, tc))) =
        (split(body.get("renameCollection")), split(body.get("to")))
    else {
        return vec![(Target::Cluster, "renameCollectionSameDB")];
    };
    let (src, dst) = (ns(&sdb, &sc), ns(&tdb, &tc));
    let mut out = Vec::new();
    if sdb == tdb {
        out.push((src, "renameCollectionSameDB"));
        out.push((dst.clone(), "renameCollectionSameDB"));
    } else {
        out.push((src.clone(), "find"));
        out.push((src, "dropCollection"));
        for a in ["insert", "createIndex", "createCollection"] {
            out.push((dst.clone(), a));
        }
    }
    if truthy(body.get("dropTarget")) {
        out.push((dst, "dropCollection"));
    }
    out
}

pub fn bulk_write(_db: &str, body: &Document, seqs: &Sequences) -> Required {
    let namespaces: Vec<Option<Target>> = statements(body, seqs, "nsInfo")
        .iter()
        .map(|d| {
            d.get_str("ns")
                .ok()
                .and_then(|s| s.split_once('.'))
                .map(|(db, c)| ns(db, c))
        })
        .collect();
    let mut out = Vec::new();
    let target = |v: Option<&Bson>| -> Option<Target> {
        let i = match v? {
            Bson::Int32(n) => *n as i64,
            Bson::Int64(n) => *n,
            Bson::Double(f) => *f as i64,
            _ => return None,
        };
        usize::try_from(i)
            .ok()
            .and_then(|i| namespaces.get(i).cloned().flatten())
    };
    for op in statements(body, seqs, "ops") {
        if let Some(t) = target(op.get("insert")) {
            out.push((t, "insert"));
        } else if let Some(t) = target(op.get("update")) {
            out.push((t.clone(), "update"));
            if truthy(op.get("upsert")) {
                out.push((t, "insert"));
            }
        } else if let Some(t) = target(op.get("delete")) {
            out.push((t, "remove"));
        }
    }
    if truthy(body.get("bypassDocumentValidation")) {
        for t in namespaces.into_iter().flatten() {
            out.push((t, "bypassDocumentValidation"));
        }
    }
    out
}

fn role_dbs(body: &Document, field: &str, db: &str) -> Vec<String> {
    match body.get(field) {
        Some(Bson::Array(a)) => a
            .iter()
            .filter_map(|r| RoleName::parse(r, db).ok())
            .map(|r| r.db)
            .collect(),
        _ => Vec::new(),
    }
}

fn with_roles(
    db: &str,
    body: &Document,
    action: &'static str,
    roles_action: &'static str,
    field: &str,
) -> Required {
    let mut out = vec![(Target::Database(db.to_string()), action)];
    for rdb in role_dbs(body, field, db) {
        out.push((Target::Database(rdb), roles_action));
    }
    out
}

pub fn create_user(db: &str, body: &Document, _: &Sequences) -> Required {
    with_roles(db, body, "createUser", "grantRole", "roles")
}

pub fn create_role(db: &str, body: &Document, _: &Sequences) -> Required {
    with_roles(db, body, "createRole", "grantRole", "roles")
}

pub fn grant_roles(db: &str, body: &Document, _: &Sequences) -> Required {
    let mut out = with_roles(db, body, "grantRole", "grantRole", "roles");
    out.remove(0);
    if out.is_empty() {
        out.push((Target::Database(db.to_string()), "grantRole"));
    }
    out
}

pub fn revoke_roles(db: &str, body: &Document, _: &Sequences) -> Required {
    let mut out = with_roles(db, body, "revokeRole", "revokeRole", "roles");
    out.remove(0);
    if out.is_empty() {
        out.push((Target::Database(db.to_string()), "revokeRole"));
    }
    out
}

/// What `updateUser` needs when another user's password or custom data changes (the
/// authorizer lets a user change its own with `changeOwnPassword`/`changeOwnCustomData`,
/// `auth::check_update_user`).
pub fn update_user(db: &str, body: &Document, seqs: &Sequences) -> Required {
    let t = Target::Database(db.to_string());
    let mut out = Vec::new();
    if body.contains_key("pwd") {
        out.push((t.clone(), "changePassword"));
    }
    if body.contains_key("customData") {
        out.push((t.clone(), "changeCustomData"));
    }
    out.extend(update_user_roles(db, body, seqs));
    if out.is_empty() {
        out.push((t, "changePassword"));
    }
    out
}

/// `updateUser` with `roles`: grant and revoke on the databases of the roles and its own.
pub fn update_user_roles(db: &str, body: &Document, _: &Sequences) -> Required {
    let t = Target::Database(db.to_string());
    let mut out = Vec::new();
    if body.contains_key("roles") {
        for rdb in role_dbs(body, "roles", db) {
            out.push((Target::Database(rdb.clone()), "grantRole"));
            out.push((Target::Database(rdb), "revokeRole"));
        }
        out.push((t.clone(), "grantRole"));
        out.push((t, "revokeRole"));
    }
    out
}

/// `usersInfo`/`rolesInfo` need `viewUser`/`viewRole` on every database they look into.
fn view(db: &str, body: &Document, field: &str, action: &'static str) -> Required {
    let mut dbs = vec![];
    match body.get(field) {
        Some(Bson::Document(d)) if truthy(d.get("forAllDBs")) => {
            return vec![(Target::Cluster, action)];
        }
        Some(Bson::Document(d)) => dbs.push(d.get_str("db").unwrap_or(db).to_string()),
        Some(Bson::Array(a)) => {
            for v in a {
                match v {
                    Bson::Document(d) => dbs.push(d.get_str("db").unwrap_or(db).to_string()),
                    _ => dbs.push(db.to_string()),
                }
            }
        }
        _ => dbs.push(db.to_string()),
    }
    dbs.sort();
    dbs.dedup();
    dbs.into_iter()
        .map(|d| (Target::Database(d), action))
        .collect()
}

pub fn users_info(db: &str, body: &Document, _: &Sequences) -> Required {
    view(db, body, "usersInfo", "viewUser")
}

pub fn roles_info(db: &str, body: &Document, _: &Sequences) -> Required {
    view(db, body, "rolesInfo", "viewRole")
}

/// `cloneCollectionAsCapped`: find on the source; insert and createCollection on the target.
pub fn clone_collection_as_capped(db: &str, body: &Document, _: &Sequences) -> Required {
    let mut out = vec![(own_ns(db, body), "find")];
    if let Some(Bson::String(to)) = body.get("toCollection") {
        out.push((ns(db, to), "insert"));
        out.push((ns(db, to), "createCollection"));
    }
    out
}

/// `dataSize: "db.coll"`: `find` on that collection (the namespace is the full name).
pub fn data_size(db: &str, body: &Document, _: &Sequences) -> Required {
    match body.values().next() {
        Some(Bson::String(full)) => match full.split_once('.') {
            Some((d, c)) => vec![(ns(d, c), "find")],
            None => vec![(Target::Database(db.to_string()), "find")],
        },
        _ => vec![(Target::Database(db.to_string()), "find")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn has(req: &Required, t: &Target, action: &str) -> bool {
        req.iter().any(|(rt, a)| rt == t && *a == action)
    }

    #[test]
    fn upserts_also_need_insert() {
        let t = ns("d", "c");
        let plain = update(
            "d",
            &doc! { "update": "c", "updates": [{ "q": {}, "u": {} }] },
            &[],
        );
        assert!(has(&plain, &t, "update") && !has(&plain, &t, "insert"));
        let seq = vec![(
            "updates".to_string(),
            vec![
                nidus_common::encode::document_to_raw(&doc! { "q": {}, "u": {}, "upsert": true })
                    .unwrap(),
            ],
        )];
        let upsert = update("d", &doc! { "update": "c" }, &seq);
        assert!(has(&upsert, &t, "insert"));
        let fam = find_and_modify("d", &doc! { "findAndModify": "c", "remove": true }, &[]);
        assert!(has(&fam, &t, "remove") && !has(&fam, &t, "update"));
    }

    #[test]
    fn aggregation_stages_name_their_collections() {
        let body = doc! { "aggregate": "c", "pipeline": [
            { "$lookup": { "from": "other", "pipeline": [{ "$unionWith": "third" }], "as": "x" } },
            { "$out": { "db": "elsewhere", "coll": "out" } },
        ] };
        let req = aggregate("d", &body, &[]);
        assert!(has(&req, &ns("d", "c"), "find"));
        assert!(has(&req, &ns("d", "other"), "find"));
        assert!(has(&req, &ns("d", "third"), "find"));
        assert!(has(&req, &ns("elsewhere", "out"), "insert"));
        assert!(has(&req, &ns("elsewhere", "out"), "remove"));
    }

    #[test]
    fn explain_needs_what_it_explains_and_rename_across_databases() {
        let req = explain(
            "d",
            &doc! { "explain": { "delete": "c", "deletes": [] } },
            &[],
        );
        assert_eq!(req, vec![(ns("d", "c"), "remove")]);
        let req = rename_collection(
            "admin",
            &doc! { "renameCollection": "a.x", "to": "b.y", "dropTarget": true },
            &[],
        );
        assert!(has(&req, &ns("a", "x"), "dropCollection"));
        assert!(has(&req, &ns("b", "y"), "insert"));
        assert!(has(&req, &ns("b", "y"), "dropCollection"));
    }

    #[test]
    fn bulk_write_maps_ops_to_namespaces() {
        let body = doc! {
            "bulkWrite": 1,
            "ops": [{ "insert": 0, "document": {} }, { "update": 1, "filter": {}, "updateMods": {}, "upsert": true }],
            "nsInfo": [{ "ns": "a.x" }, { "ns": "b.y" }],
        };
        let req = bulk_write("admin", &body, &[]);
        assert!(has(&req, &ns("a", "x"), "insert"));
        assert!(has(&req, &ns("b", "y"), "update"));
        assert!(has(&req, &ns("b", "y"), "insert"));
        assert!(!has(&req, &ns("a", "x"), "update"));
    }
}
