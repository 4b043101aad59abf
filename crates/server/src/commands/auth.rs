//! Authentication commands: `saslStart`, `saslContinue` (SCRAM-SHA-1/256), `logout`,
//! `connectionStatus`, and the `hello` parts (`speculativeAuthenticate`, `saslSupportedMechs`).

use super::Ctx;
use crate::auth::scram::{self, Conversation, Credentials, Mechanism};
use crate::auth::{self, store, AuthState, Sasl, SaslStep};
use crate::log;
use crate::state::ServerState;
use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

fn binary(bytes: Vec<u8>) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    })
}

fn auth_failed() -> Error {
    Error::new(ErrorCode::AuthenticationFailed, "Authentication failed.")
}

/// A SASL `payload`: BinData or a string.
fn payload(cmd: &str, body: &Document) -> Result<Vec<u8>> {
    match body.get("payload") {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        Some(Bson::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(other) => Err(super::wrong_type(cmd, "payload", other, "binData")),
        None => Err(Error::new(
            ErrorCode::Location(40414),
            format!("BSON field '{cmd}.payload' is missing but a required field"),
        )),
    }
}

fn log_failure(conn_id: i64, mechanism: &str, user: &str, db: &str, why: &str) {
    log::info(
        "ACCESS",
        5286307,
        &format!("conn{conn_id}"),
        "Failed to authenticate",
        serde_json::json!({
            "mechanism": mechanism, "user": user, "db": db,
            "error": format!("AuthenticationFailed: {why}"),
        }),
    );
}

/// Starts a conversation on `db` (a `saslStart` body or a `speculativeAuthenticate` document).
/// Returns the reply fields `{conversationId, done, payload}`.
fn start(
    state: &ServerState,
    auth: &mut AuthState,
    conn_id: i64,
    db: &str,
    body: &Document,
    speculative: bool,
) -> Result<Document> {
    let mech_name = match body.get("mechanism") {
        Some(Bson::String(m)) => m.clone(),
        Some(other) => return Err(super::wrong_type("saslStart", "mechanism", other, "string")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'saslStart.mechanism' is missing but a required field",
            ))
        }
    };
    let Some(mechanism) = Mechanism::from_name(&mech_name) else {
        return Err(Error::new(
            ErrorCode::MechanismUnavailable,
            format!(
                "Received authentication for mechanism {mech_name} which is unknown or not enabled"
            ),
        ));
    };
    state.auth.counters.received(mechanism.name(), speculative);
    let skip_empty_exchange = body
        .get_document("options")
        .ok()
        .and_then(|o| o.get("skipEmptyExchange"))
        .is_some_and(|v| matches!(v, Bson::Boolean(true)) || v.as_i32() == Some(1));
    let bytes = payload("saslStart", body)?;
    auth.sasl = None;
    let first = match scram::parse_client_first(&bytes) {
        Ok(f) => f,
        Err(e) => {
            log_failure(conn_id, &mech_name, "", db, &e.0);
            return Err(auth_failed());
        }
    };
    if let Some(u) = &auth.user {
        if u.user != first.user || u.db != db {
            return Err(Error::new(
                ErrorCode::Location(5626701),
                format!(
                    "Each client connection may only be authenticated once. Previously authenticated as: {}",
                    u.name()
                ),
            ));
        }
    }
    let internal = state
        .auth
        .internal
        .as_ref()
        .and_then(|k| k.credentials(db, &first.user, mechanism));
    let creds = match internal {
        Some(c) => Some(c),
        None => store::get_user(&state.engine, db, &first.user)?
            .and_then(|d| d.get_document("credentials").ok().cloned())
            .and_then(|c| c.get_document(mechanism.name()).ok().cloned())
            .and_then(|c| Credentials::from_document(&c)),
    };
    let Some(creds) = creds else {
        log_failure(
            conn_id,
            &mech_name,
            &first.user,
            db,
            "user or credentials not found",
        );
        return Err(auth_failed());
    };
    let user = first.user.clone();
    let (conv, server_first) =
        Conversation::start(mechanism, first, creds, &Conversation::random_nonce());
    let id = auth.next_conversation_id();
    auth.sasl = Some(Sasl {
        id,
        db: db.to_string(),
        user,
        step: SaslStep::Proof(Box::new(conv)),
        skip_empty_exchange,
        speculative,
    });
    Ok(doc! {
        "conversationId": id,
        "done": false,
        "payload": binary(server_first.into_bytes()),
    })
}

pub fn sasl_start(ctx: &mut Ctx) -> Result<Document> {
    let body = ctx.body.clone();
    let db = ctx.db.clone();
    start(
        ctx.state,
        &mut ctx.conn.auth,
        ctx.conn.id,
        &db,
        &body,
        false,
    )
}

pub fn sasl_continue(ctx: &mut Ctx) -> Result<Document> {
    let id = match ctx.body.get("conversationId") {
        Some(Bson::Int32(n)) => *n,
        Some(Bson::Int64(n)) => *n as i32,
        Some(Bson::Double(f)) => *f as i32,
        Some(other) => {
            return Err(super::wrong_type(
                "saslContinue",
                "conversationId",
                other,
                "int",
            ))
        }
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'saslContinue.conversationId' is missing but a required field",
            ))
        }
    };
    let bytes = payload("saslContinue", &ctx.body)?;
    let Some(sasl) = ctx.conn.auth.sasl.take() else {
        return Err(Error::new(
            ErrorCode::ProtocolError,
            "No SASL session state found",
        ));
    };
    if sasl.id != id {
        return Err(Error::new(
            ErrorCode::ProtocolError,
            format!("Mismatched conversation id: {id} vs {}", sasl.id),
        ));
    }
    if sasl.db != ctx.db {
        return Err(Error::new(
            ErrorCode::ProtocolError,
            format!(
                "Attempt to switch database target during SASL authentication from {} to {}",
                sasl.db, ctx.db
            ),
        ));
    }
    match &sasl.step {
        SaslStep::Proof(conv) => {
            let mech = conv.mechanism.name();
            let server_final = match conv.finish(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    log_failure(ctx.conn.id, mech, &sasl.user, &sasl.db, &e.0);
                    return Err(auth_failed());
                }
            };
            let done = sasl.skip_empty_exchange;
            if done {
                complete(ctx, &sasl, mech)?;
            } else {
                ctx.conn.auth.sasl = Some(Sasl {
                    step: SaslStep::Done(mech),
                    ..sasl.clone()
                });
            }
            Ok(doc! {
                "conversationId": id,
                "done": done,
                "payload": binary(server_final.into_bytes()),
            })
        }
        SaslStep::Done(mech) => {
            if !bytes.is_empty() {
                return Err(auth_failed());
            }
            complete(ctx, &sasl, mech)?;
            Ok(doc! { "conversationId": id, "done": true, "payload": binary(Vec::new()) })
        }
    }
}

/// The proof checked out: the connection is now authenticated as the user.
fn complete(ctx: &mut Ctx, sasl: &Sasl, mechanism: &str) -> Result<()> {
    let Some(user) = auth::load_user(ctx.state, &sasl.db, &sasl.user)? else {
        return Err(auth_failed());
    };
    log::info(
        "ACCESS",
        5286306,
        &format!("conn{}", ctx.conn.id),
        "Successfully authenticated",
        serde_json::json!({ "mechanism": mechanism, "user": &sasl.user, "db": &sasl.db }),
    );
    ctx.conn.auth.user = Some(user);
    ctx.state
        .auth
        .counters
        .successful(mechanism, sasl.speculative);
    Ok(())
}

pub fn logout(ctx: &mut Ctx) -> Result<Document> {
    ctx.conn.auth.user = None;
    ctx.conn.auth.sasl = None;
    Ok(Document::new())
}

pub fn connection_status(ctx: &mut Ctx) -> Result<Document> {
    auth::refresh(ctx.state, &mut ctx.conn.auth)?;
    let show = ctx.opt_bool("showPrivileges")?.unwrap_or(false);
    let (users, roles, privileges) = match &ctx.conn.auth.user {
        Some(u) => (
            vec![Bson::Document(doc! { "user": &u.user, "db": &u.db })],
            u.all_roles
                .iter()
                .map(|r| Bson::Document(r.to_document()))
                .collect(),
            u.privileges.to_bson(),
        ),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    let mut info = doc! { "authenticatedUsers": users, "authenticatedUserRoles": roles };
    if show {
        info.insert("authenticatedUserPrivileges", privileges);
    }
    Ok(doc! { "authInfo": info })
}

/// The MONGODB-X509 mechanism's name.
const X509: &str = "MONGODB-X509";

/// `authenticate {mechanism: "MONGODB-X509"[, user]}` on `$external`: the connection becomes
/// the user named by its TLS client certificate's subject.
pub fn authenticate(ctx: &mut Ctx) -> Result<Document> {
    let body = ctx.body.clone();
    let db = ctx.db.clone();
    authenticate_x509(ctx, &db, &body, false)
}

/// MongoDB's `authCommand` with `_authenticateX509` (authentication_commands.cpp, 8.0):
/// whatever fails is AuthenticationFailed (18) "Authentication failed." (the reason goes to
/// the log), except ProtocolError (17, a database other than `$external`) and UserNotFound
/// (11, no user has the certificate's subject), which reach the client as they are.
fn authenticate_x509(
    ctx: &mut Ctx,
    db: &str,
    body: &Document,
    speculative: bool,
) -> Result<Document> {
    let mechanism = match body.get("mechanism") {
        Some(Bson::String(m)) => m.clone(),
        Some(other) => {
            return Err(super::wrong_type(
                "authenticate",
                "mechanism",
                other,
                "string",
            ))
        }
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'authenticate.mechanism' is missing but a required field",
            ))
        }
    };
    let claimed = match body.get("user") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(u)) => Some(u.clone()),
        Some(other) => return Err(super::wrong_type("authenticate", "user", other, "string")),
    };
    ctx.state.auth.counters.received(&mechanism, speculative);
    let fail = |why: &str| {
        log_failure(
            ctx.conn.id,
            &mechanism,
            claimed.as_deref().unwrap_or(""),
            db,
            why,
        );
        auth_failed()
    };
    if mechanism.is_empty() {
        return Err(fail("BadValue: Auth mechanism not specified"));
    }
    if mechanism != X509 {
        return Err(fail(&format!(
            "BadValue: Unsupported mechanism: {mechanism}"
        )));
    }
    let Some(subject) = ctx.conn.tls.as_ref().and_then(|t| t.subject.clone()) else {
        return Err(fail("No verified subject name available from client"));
    };
    if claimed.as_ref().is_some_and(|u| *u != subject) {
        return Err(fail(
            "There is no x.509 client certificate matching the user.",
        ));
    }
    if db != super::users::EXTERNAL_DB {
        return Err(Error::new(
            ErrorCode::ProtocolError,
            "X.509 authentication must always use the $external database.",
        ));
    }
    // An array, or the comma-separated list `--setParameter authenticationMechanisms=...`.
    let enabled = match ctx.state.params.get("authenticationMechanisms") {
        Some(Bson::Array(list)) => list.iter().any(|m| m.as_str() == Some(X509)),
        Some(Bson::String(list)) => list.split(',').any(|m| m.trim() == X509),
        _ => false,
    };
    if !enabled {
        return Err(fail("BadValue: x.509 authentication is disabled."));
    }
    if let Some(u) = &ctx.conn.auth.user {
        if u.user != subject || u.db != db {
            return Err(fail(&format!(
                "Each client connection may only be authenticated once. Previously authenticated as: {}",
                u.name()
            )));
        }
    }
    let Some(user) = auth::load_user(ctx.state, db, &subject)? else {
        return Err(Error::new(
            ErrorCode::UserNotFound,
            format!("Could not find user \"{subject}\" for db \"{db}\""),
        ));
    };
    log::info(
        "ACCESS",
        5286306,
        &format!("conn{}", ctx.conn.id),
        "Successfully authenticated",
        serde_json::json!({ "mechanism": X509, "user": &subject, "db": db }),
    );
    ctx.conn.auth.user = Some(user);
    ctx.conn.auth.sasl = None;
    ctx.state.auth.counters.successful(X509, speculative);
    Ok(doc! { "user": subject, "dbname": db })
}

/// `hello`'s `speculativeAuthenticate`: the first SCRAM step, or a whole MONGODB-X509
/// `authenticate` (its `db` defaults to `$external`), inside the handshake. A failure
/// leaves the field out of the reply (the driver then authenticates normally and sees the error).
pub fn speculative(ctx: &mut Ctx) -> Option<Document> {
    let Some(Bson::Document(spec)) = ctx.body.get("speculativeAuthenticate") else {
        return None;
    };
    if spec.contains_key("authenticate") {
        let db = spec
            .get_str("db")
            .unwrap_or(super::users::EXTERNAL_DB)
            .to_string();
        let spec = spec.clone();
        return authenticate_x509(ctx, &db, &spec, true).ok();
    }
    if !spec.contains_key("saslStart") {
        return None;
    }
    let db = spec.get_str("db").unwrap_or(&ctx.db).to_string();
    let spec = spec.clone();
    start(ctx.state, &mut ctx.conn.auth, ctx.conn.id, &db, &spec, true).ok()
}

/// `hello`'s `saslSupportedMechs: "<db>.<user>"`: the mechanisms the user has credentials for.
pub fn supported_mechs(ctx: &Ctx) -> Result<Option<Vec<String>>> {
    let Some(v) = ctx.body.get("saslSupportedMechs") else {
        return Ok(None);
    };
    let Bson::String(name) = v else {
        return Err(super::wrong_type(
            "hello",
            "saslSupportedMechs",
            v,
            "string",
        ));
    };
    ctx.state.auth.counters.sasl_supported_mechs_received();
    let Some((db, user)) = name.split_once('.') else {
        return Err(Error::bad_value(format!(
            "UserName must contain a '.' separated database.user pair: {name}"
        )));
    };
    if ctx.state.auth.internal.is_some() && crate::auth::keyfile::is_internal_user(db, user) {
        return Ok(Some(
            Mechanism::ALL
                .iter()
                .map(|m| m.name().to_string())
                .collect(),
        ));
    }
    let Some(d) = store::get_user(&ctx.state.engine, db, user)? else {
        return Ok(None);
    };
    let creds = d.get_document("credentials").ok();
    Ok(Some(
        Mechanism::ALL
            .iter()
            .filter(|m| creds.is_some_and(|c| c.contains_key(m.name())))
            .map(|m| m.name().to_string())
            .collect(),
    ))
}
