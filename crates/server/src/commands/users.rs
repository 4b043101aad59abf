//! User and role management: `createUser`, `updateUser`, `dropUser`,
//! `dropAllUsersFromDatabase`, `usersInfo`, `grantRolesToUser`, `revokeRolesFromUser`,
//! `createRole`, `dropRole`, `rolesInfo`. Users live in `admin.system.users` with salted SCRAM
//! keys only; the password itself is never stored.

use super::find::check_fields;
use super::{wrong_type, Ctx};
use crate::auth::roles::{
    builtin_privileges, is_builtin, Privileges, Resource, RoleName, BUILTIN_ROLES,
};
use crate::auth::scram::{Credentials, Mechanism};
use crate::auth::store;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

fn missing(cmd: &str, field: &str) -> Error {
    Error::new(
        ErrorCode::Location(40414),
        format!("BSON field '{cmd}.{field}' is missing but a required field"),
    )
}

/// The command's first field: the user or role name.
fn name_arg(ctx: &Ctx) -> Result<String> {
    let cmd = ctx.command_name();
    match ctx.body.get(&cmd) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Bson::String(_)) => Err(Error::bad_value(if cmd.contains("Role") {
            "Role name must be non-empty"
        } else {
            "User document needs 'user' field to be non-empty"
        })),
        Some(other) => Err(wrong_type(&cmd, &cmd, other, "string")),
        None => Err(missing(&cmd, &cmd)),
    }
}

fn roles_arg(ctx: &Ctx, required: bool) -> Result<Option<Vec<RoleName>>> {
    let cmd = ctx.command_name();
    match ctx.body.get("roles") {
        Some(v) => {
            let roles = RoleName::parse_list(v, &ctx.db, &format!("{cmd}.roles"))?;
            store::check_roles_exist(&ctx.state.engine, &roles)?;
            Ok(Some(roles))
        }
        None if required => Err(missing(&cmd, "roles")),
        None => Ok(None),
    }
}

fn roles_bson(roles: &[RoleName]) -> Vec<Bson> {
    let mut seen = Vec::<&RoleName>::new();
    roles
        .iter()
        .filter(|r| {
            let fresh = !seen.contains(r);
            seen.push(r);
            fresh
        })
        .map(|r| Bson::Document(r.to_document()))
        .collect()
}

/// `mechanisms`: a non-empty subset of the SCRAM mechanisms (default: both).
fn mechanisms_arg(ctx: &Ctx) -> Result<Option<Vec<Mechanism>>> {
    let cmd = ctx.command_name();
    let Some(v) = ctx.body.get("mechanisms") else {
        return Ok(None);
    };
    let Bson::Array(list) = v else {
        return Err(wrong_type(&cmd, "mechanisms", v, "array"));
    };
    if list.is_empty() {
        return Err(Error::bad_value("mechanisms field must not be empty"));
    }
    let mut out = Vec::new();
    for m in list {
        let name = m.as_str().unwrap_or_default();
        let Some(mech) = Mechanism::from_name(name) else {
            return Err(Error::bad_value(format!("Unknown auth mechanism '{name}'")));
        };
        if !out.contains(&mech) {
            out.push(mech);
        }
    }
    Ok(Some(out))
}

/// Salted keys for each mechanism from the password (`digestPassword: false` means `pwd`
/// is already MongoDB's SHA-1 digest, which SCRAM-SHA-256 cannot use).
fn credentials(ctx: &Ctx, user: &str, pwd: &str, mechs: &[Mechanism]) -> Result<Document> {
    if pwd.is_empty() {
        return Err(Error::bad_value("Password cannot be empty"));
    }
    let digest = ctx.opt_bool("digestPassword")?.unwrap_or(true);
    let mut out = Document::new();
    for &m in mechs {
        let creds = if digest {
            Credentials::generate(m, user, pwd, m.default_iterations())
        } else if m == Mechanism::Sha1 {
            let salt = crate::auth::scram::random_bytes(16);
            Ok(Credentials::derive(
                m,
                pwd.as_bytes(),
                &salt,
                m.default_iterations(),
            ))
        } else {
            return Err(Error::bad_value(
                "Use of SCRAM-SHA-256 requires undigested passwords",
            ));
        }
        .map_err(|e| Error::bad_value(e.0))?;
        out.insert(m.name(), creds.to_document());
    }
    Ok(out)
}

fn pwd_arg(ctx: &Ctx) -> Result<Option<String>> {
    match ctx.body.get("pwd") {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong_type(&ctx.command_name(), "pwd", other, "string")),
    }
}

fn custom_data_arg(ctx: &Ctx) -> Result<Option<Document>> {
    ctx.opt_document("customData")
}

/// The database of users authenticated outside Nidus (x.509 certificate subjects).
pub const EXTERNAL_DB: &str = "$external";

const USER_FIELDS: &[&str] = &[
    "pwd",
    "customData",
    "roles",
    "digestPassword",
    "writeConcern",
    "authenticationRestrictions",
    "mechanisms",
    "comment",
];

pub fn create_user(ctx: &mut Ctx) -> Result<Document> {
    let mut allowed = USER_FIELDS.to_vec();
    allowed.push("createUser");
    check_fields(ctx, &allowed)?;
    let user = name_arg(ctx)?;
    // Users of `$external` (x.509 subjects) have no password: MongoDB stores
    // `credentials: {external: true}` and refuses a `pwd` (createUser's checks in
    // user_management_commands.cpp).
    let external = ctx.db == EXTERNAL_DB;
    let creds = match pwd_arg(ctx)? {
        Some(_) if external => {
            return Err(Error::bad_value(
                "Cannot set the password for users defined on the '$external' database",
            ))
        }
        None if external => doc! { "external": true },
        None => {
            return Err(Error::bad_value(
                "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db",
            ))
        }
        Some(pwd) => {
            let mechs = mechanisms_arg(ctx)?.unwrap_or_else(|| Mechanism::ALL.to_vec());
            credentials(ctx, &user, &pwd, &mechs)?
        }
    };
    let roles = roles_arg(ctx, true)?.unwrap_or_default();
    let id = store::user_id(&ctx.db, &user);
    if store::get_user(&ctx.state.engine, &ctx.db, &user)?.is_some() {
        return Err(user_exists(&user, &ctx.db));
    }
    let mut d = doc! {
        "_id": &id,
        "userId": bson::Uuid::new(),
        "user": &user,
        "db": &ctx.db,
        "credentials": creds,
        "roles": roles_bson(&roles),
    };
    if let Some(cd) = custom_data_arg(ctx)? {
        d.insert("customData", cd);
    }
    let result = store::insert(&ctx.state.engine, &store::users_ns(), &d);
    ctx.state.auth.invalidate();
    match result {
        Err(e) if e.code == ErrorCode::DuplicateKey => Err(user_exists(&user, &ctx.db)),
        other => other.map(|_| Document::new()),
    }
}

fn user_exists(user: &str, db: &str) -> Error {
    Error::new(
        ErrorCode::Location(51003),
        format!("User \"{user}@{db}\" already exists"),
    )
}

fn user_not_found(user: &str, db: &str) -> Error {
    Error::new(
        ErrorCode::UserNotFound,
        format!("User '{user}@{db}' not found"),
    )
}

fn load_user(ctx: &Ctx, user: &str) -> Result<Document> {
    store::get_user(&ctx.state.engine, &ctx.db, user)?.ok_or_else(|| user_not_found(user, &ctx.db))
}

fn save_user(ctx: &Ctx, d: Document) -> Result<()> {
    let id = d.get_str("_id").unwrap_or_default().to_string();
    let result = store::replace(&ctx.state.engine, &store::users_ns(), &id, d);
    ctx.state.auth.invalidate();
    result.map(|_| ())
}

pub fn update_user(ctx: &mut Ctx) -> Result<Document> {
    let mut allowed = USER_FIELDS.to_vec();
    allowed.push("updateUser");
    check_fields(ctx, &allowed)?;
    let user = name_arg(ctx)?;
    let pwd = pwd_arg(ctx)?;
    if pwd.is_some() && ctx.db == EXTERNAL_DB {
        return Err(Error::bad_value(
            "Cannot set the password for users defined on the '$external' database",
        ));
    }
    let roles = roles_arg(ctx, false)?;
    let custom = custom_data_arg(ctx)?;
    let mechs = mechanisms_arg(ctx)?;
    if pwd.is_none() && roles.is_none() && custom.is_none() && mechs.is_none() {
        return Err(Error::bad_value(
            "Must specify at least one field to update in updateUser",
        ));
    }
    let mut d = load_user(ctx, &user)?;
    let current: Vec<Mechanism> = d
        .get_document("credentials")
        .map(|c| {
            Mechanism::ALL
                .into_iter()
                .filter(|m| c.contains_key(m.name()))
                .collect()
        })
        .unwrap_or_default();
    match (&pwd, &mechs) {
        (Some(pwd), m) => {
            let m = m.clone().unwrap_or(current);
            d.insert("credentials", credentials(ctx, &user, pwd, &m)?);
        }
        (None, Some(m)) => {
            // Without a new password the mechanisms can only shrink to ones already held.
            if m.iter().any(|x| !current.contains(x)) {
                return Err(Error::bad_value(
                    "mechanisms field must be a subset of previously set mechanisms",
                ));
            }
            if let Ok(c) = d.get_document_mut("credentials") {
                for x in Mechanism::ALL {
                    if !m.contains(&x) {
                        c.remove(x.name());
                    }
                }
            }
        }
        (None, None) => {}
    }
    if let Some(r) = roles {
        d.insert("roles", roles_bson(&r));
    }
    if let Some(cd) = custom {
        d.insert("customData", cd);
    }
    save_user(ctx, d)?;
    Ok(Document::new())
}

pub fn drop_user(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, &["dropUser", "writeConcern", "comment"])?;
    let user = name_arg(ctx)?;
    let n = store::delete(
        &ctx.state.engine,
        &store::users_ns(),
        &doc! { "_id": store::user_id(&ctx.db, &user) },
    )?;
    ctx.state.auth.invalidate();
    if n == 0 {
        return Err(user_not_found(&user, &ctx.db));
    }
    Ok(Document::new())
}

pub fn drop_all_users(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &["dropAllUsersFromDatabase", "writeConcern", "comment"],
    )?;
    let n = store::delete(
        &ctx.state.engine,
        &store::users_ns(),
        &doc! { "db": &ctx.db },
    )?;
    ctx.state.auth.invalidate();
    Ok(doc! { "n": n as i32 })
}

fn change_roles(ctx: &mut Ctx, grant: bool) -> Result<Document> {
    let cmd = ctx.command_name();
    check_fields(ctx, &[cmd.as_str(), "roles", "writeConcern", "comment"])?;
    let user = name_arg(ctx)?;
    let roles = roles_arg(ctx, true)?.unwrap_or_default();
    let mut d = load_user(ctx, &user)?;
    let mut current = store::roles_of(&d);
    if grant {
        current.extend(roles);
    } else {
        current.retain(|r| !roles.contains(r));
    }
    d.insert("roles", roles_bson(&current));
    save_user(ctx, d)?;
    Ok(Document::new())
}

pub fn grant_roles_to_user(ctx: &mut Ctx) -> Result<Document> {
    change_roles(ctx, true)
}

pub fn revoke_roles_from_user(ctx: &mut Ctx) -> Result<Document> {
    change_roles(ctx, false)
}

/// The roles granted through `roles` (inherited ones included) and their privileges.
fn inherited(ctx: &Ctx, roles: &[RoleName]) -> Result<(Vec<Bson>, Vec<Bson>)> {
    let (all, privileges) = store::resolve(&ctx.state.engine, roles)?;
    Ok((
        all.iter()
            .map(|r| Bson::Document(r.to_document()))
            .collect(),
        privileges.to_bson(),
    ))
}

/// Which users `usersInfo` asks for: `1` (all in this db), `{forAllDBs: true}`, a name,
/// `{user, db}`, or an array of those.
fn users_filter(ctx: &Ctx) -> Result<Document> {
    let name_doc = |v: &Bson| -> Result<Bson> {
        match v {
            Bson::String(u) => Ok(Bson::String(store::user_id(&ctx.db, u))),
            Bson::Document(d) => match (d.get("user"), d.get("db")) {
                (Some(Bson::String(u)), Some(Bson::String(db))) => {
                    Ok(Bson::String(store::user_id(db, u)))
                }
                _ => Err(Error::bad_value(
                    "User name must contain a 'user' and a 'db' field",
                )),
            },
            _ => Err(Error::bad_value(
                "User names must be either strings or objects",
            )),
        }
    };
    match ctx.body.get("usersInfo") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(_)) => {
            Ok(doc! { "db": &ctx.db })
        }
        Some(Bson::Document(d)) if d.contains_key("forAllDBs") => Ok(Document::new()),
        Some(Bson::Array(a)) => {
            let ids = a.iter().map(name_doc).collect::<Result<Vec<_>>>()?;
            Ok(doc! { "_id": { "$in": ids } })
        }
        Some(v @ (Bson::String(_) | Bson::Document(_))) => Ok(doc! { "_id": name_doc(v)? }),
        Some(other) => Err(wrong_type("usersInfo", "usersInfo", other, "object")),
        None => Err(missing("usersInfo", "usersInfo")),
    }
}

pub fn users_info(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &[
            "usersInfo",
            "showCredentials",
            "showCustomData",
            "showPrivileges",
            "showAuthenticationRestrictions",
            "filter",
            "comment",
        ],
    )?;
    let show_credentials = ctx.opt_bool("showCredentials")?.unwrap_or(false);
    let show_custom = ctx.opt_bool("showCustomData")?.unwrap_or(true);
    let show_privileges = ctx.opt_bool("showPrivileges")?.unwrap_or(false);
    let mut filter = users_filter(ctx)?;
    if let Some(f) = ctx.opt_document("filter")? {
        filter = doc! { "$and": [filter, f] };
    }
    let mut users = Vec::new();
    for d in store::find(&ctx.state.engine, &store::users_ns(), filter)? {
        let mut out = Document::new();
        for k in ["_id", "userId", "user", "db"] {
            if let Some(v) = d.get(k) {
                out.insert(k, v.clone());
            }
        }
        let creds = d.get_document("credentials").ok();
        if show_credentials {
            if let Some(c) = creds {
                out.insert("credentials", c.clone());
            }
        }
        let roles = store::roles_of(&d);
        out.insert("roles", roles_bson(&roles));
        if show_custom {
            if let Some(cd) = d.get("customData") {
                out.insert("customData", cd.clone());
            }
        }
        let mut mechanisms: Vec<&str> = Mechanism::ALL
            .iter()
            .filter(|m| creds.is_some_and(|c| c.contains_key(m.name())))
            .map(|m| m.name())
            .collect();
        if creds.is_some_and(|c| c.get_bool("external") == Ok(true)) {
            // `$external` users: MongoDB lists the pseudo-mechanism "external".
            mechanisms.push("external");
        }
        out.insert("mechanisms", mechanisms);
        if show_privileges {
            let (all, privileges) = inherited(ctx, &roles)?;
            out.insert("inheritedRoles", all);
            out.insert("inheritedPrivileges", privileges);
        }
        users.push(Bson::Document(out));
    }
    Ok(doc! { "users": users })
}

pub fn create_role(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &[
            "createRole",
            "privileges",
            "roles",
            "authenticationRestrictions",
            "writeConcern",
            "comment",
        ],
    )?;
    let role = name_arg(ctx)?;
    let name = RoleName::new(&role, &ctx.db);
    if BUILTIN_ROLES.contains(&role.as_str()) || role.starts_with("__") {
        return Err(Error::bad_value(format!(
            "Cannot create roles with the same name as a built-in role: {role}@{}",
            ctx.db
        )));
    }
    let privileges = match ctx.body.get("privileges") {
        Some(Bson::Array(a)) => {
            let parsed = Privileges::parse(a)?;
            let own_db = |r: &Resource| match r {
                Resource::Database(d) | Resource::Namespace(d, _) => *d == ctx.db,
                _ => false,
            };
            if ctx.db != "admin" && !parsed.resources().all(own_db) {
                return Err(Error::new(
                    ErrorCode::InvalidRoleModification,
                    format!(
                        "Roles on the '{}' database cannot be granted privileges that target other databases or the cluster",
                        ctx.db
                    ),
                ));
            }
            a.clone()
        }
        Some(other) => return Err(wrong_type("createRole", "privileges", other, "array")),
        None => return Err(missing("createRole", "privileges")),
    };
    let roles = roles_arg(ctx, true)?.unwrap_or_default();
    if store::get_role(&ctx.state.engine, &name)?.is_some() {
        return Err(role_exists(&name));
    }
    let d = doc! {
        "_id": store::role_id(&name),
        "role": &role,
        "db": &ctx.db,
        "privileges": privileges,
        "roles": roles_bson(&roles),
    };
    let result = store::insert(&ctx.state.engine, &store::roles_ns(), &d);
    ctx.state.auth.invalidate();
    match result {
        Err(e) if e.code == ErrorCode::DuplicateKey => Err(role_exists(&name)),
        other => other.map(|_| Document::new()),
    }
}

fn role_exists(r: &RoleName) -> Error {
    Error::new(
        ErrorCode::Location(51002),
        format!("Role \"{r}\" already exists"),
    )
}

pub fn drop_role(ctx: &mut Ctx) -> Result<Document> {
    check_fields(ctx, &["dropRole", "writeConcern", "comment"])?;
    let role = name_arg(ctx)?;
    let name = RoleName::new(&role, &ctx.db);
    if is_builtin(&name) {
        return Err(Error::new(
            ErrorCode::InvalidRoleModification,
            format!("Cannot drop built-in role: {name}"),
        ));
    }
    let engine = &ctx.state.engine;
    let n = store::delete(
        engine,
        &store::roles_ns(),
        &doc! { "_id": store::role_id(&name) },
    )?;
    if n == 0 {
        ctx.state.auth.invalidate();
        return Err(Error::new(
            ErrorCode::RoleNotFound,
            format!("Role '{name}' not found"),
        ));
    }
    // Users and roles that were granted the role lose it.
    let holder = doc! { "roles": { "$elemMatch": { "role": &role, "db": &ctx.db } } };
    for ns in [store::users_ns(), store::roles_ns()] {
        for mut d in store::find(engine, &ns, holder.clone())? {
            let kept: Vec<RoleName> = store::roles_of(&d)
                .into_iter()
                .filter(|r| *r != name)
                .collect();
            d.insert("roles", roles_bson(&kept));
            let id = d.get_str("_id").unwrap_or_default().to_string();
            store::replace(engine, &ns, &id, d)?;
        }
    }
    ctx.state.auth.invalidate();
    Ok(Document::new())
}

pub fn roles_info(ctx: &mut Ctx) -> Result<Document> {
    check_fields(
        ctx,
        &[
            "rolesInfo",
            "showPrivileges",
            "showBuiltinRoles",
            "showAuthenticationRestrictions",
            "comment",
        ],
    )?;
    let show_privileges = ctx.opt_bool("showPrivileges")?.unwrap_or(false);
    let engine = &ctx.state.engine;
    let mut names: Vec<RoleName> = Vec::new();
    match ctx.body.get("rolesInfo") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(_)) => {
            if ctx.opt_bool("showBuiltinRoles")?.unwrap_or(false) {
                names.extend(
                    BUILTIN_ROLES
                        .iter()
                        .map(|r| RoleName::new(r, &ctx.db))
                        .filter(is_builtin),
                );
            }
            for d in store::find(engine, &store::roles_ns(), doc! { "db": &ctx.db })? {
                names.push(RoleName::new(
                    d.get_str("role").unwrap_or_default(),
                    &ctx.db,
                ));
            }
        }
        Some(Bson::Array(a)) => {
            for v in a {
                names.push(RoleName::parse(v, &ctx.db)?);
            }
        }
        Some(v @ (Bson::String(_) | Bson::Document(_))) => names.push(RoleName::parse(v, &ctx.db)?),
        Some(other) => return Err(wrong_type("rolesInfo", "rolesInfo", other, "object")),
        None => return Err(missing("rolesInfo", "rolesInfo")),
    }
    let mut out = Vec::new();
    for name in names {
        let (direct, own_privileges, builtin) = if let Some(p) = builtin_privileges(&name) {
            (Vec::new(), p, true)
        } else if let Some(d) = store::get_role(engine, &name)? {
            let p = match d.get_array("privileges") {
                Ok(a) => Privileges::parse(a)?,
                Err(_) => Privileges::default(),
            };
            (store::roles_of(&d), p, false)
        } else {
            continue;
        };
        let (all, inherited_privileges) = {
            let (mut all, mut p) = store::resolve(engine, &direct)?;
            p.merge(&own_privileges);
            all.remove(&name);
            (all, p)
        };
        let mut r = doc! {
            "_id": store::role_id(&name),
            "role": &name.role,
            "db": &name.db,
            "isBuiltin": builtin,
            "roles": roles_bson(&direct),
            "inheritedRoles": all.iter().map(|r| Bson::Document(r.to_document())).collect::<Vec<_>>(),
        };
        if show_privileges {
            r.insert("privileges", own_privileges.to_bson());
            r.insert("inheritedPrivileges", inherited_privileges.to_bson());
        }
        out.push(Bson::Document(r));
    }
    Ok(doc! { "roles": out })
}
