//! Users and user-defined roles, stored as MongoDB stores them: `admin.system.users` and
//! `admin.system.roles`, one document per user (`_id: "<db>.<user>"`) or role.

use super::roles::{builtin_privileges, Privileges, RoleName};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

pub fn users_ns() -> Namespace {
    Namespace::new("admin", "system.users")
}

pub fn roles_ns() -> Namespace {
    Namespace::new("admin", "system.roles")
}

/// The documents of an auth collection matching `filter`, in `_id` order.
pub fn find(engine: &Engine, ns: &Namespace, filter: Document) -> Result<Vec<Document>> {
    let Some(coll) = engine.collection(ns) else {
        return Ok(Vec::new());
    };
    let spec = FindSpec {
        filter,
        sort: Some(doc! { "_id": 1 }),
        ..FindSpec::default()
    };
    let mut exec = engine.plan_find(Some(&coll), &spec)?;
    let mut out = Vec::new();
    while let Some(raw) = exec.next_doc()? {
        out.push(Document::try_from(raw.as_ref()).map_err(|e| Error::internal(e.to_string()))?);
    }
    Ok(out)
}

pub fn find_one(engine: &Engine, ns: &Namespace, id: &str) -> Result<Option<Document>> {
    Ok(find(engine, ns, doc! { "_id": id })?.into_iter().next())
}

pub fn user_id(db: &str, user: &str) -> String {
    format!("{db}.{user}")
}

pub fn get_user(engine: &Engine, db: &str, user: &str) -> Result<Option<Document>> {
    find_one(engine, &users_ns(), &user_id(db, user))
}

/// True when at least one user exists (the localhost exception ends then).
pub fn any_user(engine: &Engine) -> bool {
    engine
        .collection(&users_ns())
        .is_some_and(|c| c.count.load(Ordering::Relaxed) > 0)
}

pub fn insert(engine: &Engine, ns: &Namespace, d: &Document) -> Result<()> {
    let coll = engine.ensure_collection(ns)?;
    let raw =
        nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))?;
    let raw = prepare_insert(&raw)?;
    engine.insert_one(&coll, &raw, &WriteOpts::default())
}

/// Replaces the document with `_id: id`; false when there was none.
pub fn replace(engine: &Engine, ns: &Namespace, id: &str, d: Document) -> Result<bool> {
    let Some(coll) = engine.collection(ns) else {
        return Ok(false);
    };
    let spec = UpdateSpec {
        filter: doc! { "_id": id },
        update: Update::parse(&Bson::Document(d), None)?,
        multi: false,
        upsert: false,
        sort: None,
        hint: None,
    };
    Ok(engine
        .update(&coll, &spec, &WriteOpts::default())?
        .n_matched
        > 0)
}

pub fn delete(engine: &Engine, ns: &Namespace, filter: &Document) -> Result<u64> {
    let Some(coll) = engine.collection(ns) else {
        return Ok(0);
    };
    engine.delete(&coll, filter, true, None, &WriteOpts::default())
}

pub fn role_id(r: &RoleName) -> String {
    format!("{}.{}", r.db, r.role)
}

pub fn get_role(engine: &Engine, r: &RoleName) -> Result<Option<Document>> {
    find_one(engine, &roles_ns(), &role_id(r))
}

pub fn role_exists(engine: &Engine, r: &RoleName) -> Result<bool> {
    Ok(builtin_privileges(r).is_some() || get_role(engine, r)?.is_some())
}

/// Fails with RoleNotFound unless every role exists.
pub fn check_roles_exist(engine: &Engine, roles: &[RoleName]) -> Result<()> {
    for r in roles {
        if !role_exists(engine, r)? {
            return Err(Error::new(
                ErrorCode::RoleNotFound,
                format!("Could not find role: {r}"),
            ));
        }
    }
    Ok(())
}

/// A stored document's `roles` array (of `{role, db}`).
pub fn roles_of(d: &Document) -> Vec<RoleName> {
    match d.get("roles") {
        Some(Bson::Array(a)) => a
            .iter()
            .filter_map(|r| RoleName::parse(r, "").ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// Every role `roles` grants, directly or through user-defined roles' `roles`, and the union
/// of their privileges. Unknown roles grant nothing (a dropped role's name may linger).
pub fn resolve(engine: &Engine, roles: &[RoleName]) -> Result<(BTreeSet<RoleName>, Privileges)> {
    let mut seen = BTreeSet::new();
    let mut privileges = Privileges::default();
    let mut todo: Vec<RoleName> = roles.to_vec();
    while let Some(r) = todo.pop() {
        if !seen.insert(r.clone()) {
            continue;
        }
        if let Some(p) = builtin_privileges(&r) {
            privileges.merge(&p);
            continue;
        }
        if let Some(d) = get_role(engine, &r)? {
            if let Ok(list) = d.get_array("privileges") {
                privileges.merge(&Privileges::parse(list)?);
            }
            todo.extend(roles_of(&d));
        }
    }
    Ok((seen, privileges))
}
