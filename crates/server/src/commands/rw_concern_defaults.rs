//! `setDefaultRWConcern` / `getDefaultRWConcern`: the cluster-wide default read and write
//! concerns, for commands that name none.
//!
//! They are stored as MongoDB stores them, one document `{_id: "ReadWriteConcernDefaults",
//! defaultReadConcern?, defaultWriteConcern?, updateOpTime, updateWallClockTime}` in
//! `config.settings`, written through the oplog so every member of a set applies the same
//! defaults, and read where they are needed: a member learns of a change, a rollback or an
//! initial sync by reading the collection, with no cache to keep coherent. Until the
//! collection exists (nobody set a default) that is one catalog lookup.
//!
//! Without a global default, the implicit ones apply: `local` reads, and `w: "majority"`
//! writes on an initiated set (MongoDB 5.0+ for a set without arbiters; Nidus has none),
//! `w: 1` on the implicit one-member set (see `WriteConcern::for_command`).

use super::Ctx;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;

const DOCUMENT_ID: &str = "ReadWriteConcernDefaults";

fn settings_ns() -> Namespace {
    Namespace::new("config", "settings")
}

/// The stored defaults document, if any.
fn stored(engine: &Engine) -> Result<Option<Document>> {
    let Some(coll) = engine.collection(&settings_ns()) else {
        return Ok(None);
    };
    let spec = FindSpec {
        filter: doc! { "_id": DOCUMENT_ID },
        ..FindSpec::default()
    };
    let mut exec = engine.plan_find(Some(&coll), &spec)?;
    match exec.next_doc()? {
        Some(raw) => Document::try_from(raw.as_ref())
            .map(Some)
            .map_err(|e| Error::internal(e.to_string())),
        None => Ok(None),
    }
}

fn stored_field(engine: &Engine, field: &str) -> Result<Option<Document>> {
    Ok(stored(engine)?.and_then(|d| match d.get(field) {
        Some(Bson::Document(v)) if !v.is_empty() => Some(v.clone()),
        _ => None,
    }))
}

/// The global default write concern (`setDefaultRWConcern`'s `defaultWriteConcern`).
pub fn write_concern(engine: &Engine) -> Result<Option<Document>> {
    stored_field(engine, "defaultWriteConcern")
}

/// The global default read concern (`setDefaultRWConcern`'s `defaultReadConcern`).
pub fn read_concern(engine: &Engine) -> Result<Option<Document>> {
    stored_field(engine, "defaultReadConcern")
}

fn admin_only_replica_set(ctx: &Ctx) -> Result<()> {
    let name = ctx.command_name();
    ctx.require_admin(&name)?;
    if ctx.state.repl.is_none() {
        return Err(Error::new(
            ErrorCode::Location(51300),
            format!("'{name}' is not supported on standalone nodes."),
        ));
    }
    Ok(())
}

/// A write concern as MongoDB's `WriteConcernOptions::toBSON` shows it: `w`, `j` when given,
/// `wtimeout` (0: none).
fn normalized_write_concern(wc: &Document) -> Document {
    let mut out = Document::new();
    out.insert("w", wc.get("w").cloned().unwrap_or(Bson::Int32(1)));
    if let Some(j) = wc.get("j") {
        let j = match j {
            Bson::Boolean(b) => *b,
            Bson::Int32(n) => *n != 0,
            Bson::Int64(n) => *n != 0,
            Bson::Double(f) => *f != 0.0,
            _ => false,
        };
        out.insert("j", j);
    }
    let wtimeout = super::WriteConcern::parse(&doc! { "writeConcern": wc.clone() })
        .ok()
        .and_then(|w| w.wtimeout_ms)
        .unwrap_or(0);
    out.insert(
        "wtimeout",
        Bson::Int32(wtimeout.clamp(0, i32::MAX as i64) as i32),
    );
    out
}

/// `getDefaultRWConcern`'s and `setDefaultRWConcern`'s reply: the defaults in force and where
/// they come from.
fn reply(ctx: &Ctx, stored: Option<&Document>) -> Document {
    let mut out = Document::new();
    let read = stored.and_then(|d| d.get_document("defaultReadConcern").ok());
    let write = stored.and_then(|d| d.get_document("defaultWriteConcern").ok());
    match read.filter(|r| !r.is_empty()) {
        Some(r) => out.insert("defaultReadConcern", r.clone()),
        None => out.insert("defaultReadConcern", doc! { "level": "local" }),
    };
    let implicit_w = match &ctx.state.repl {
        Some(repl) if repl.implicit() => Bson::Int32(1),
        _ => Bson::String("majority".into()),
    };
    match write.filter(|w| !w.is_empty()) {
        Some(w) => out.insert("defaultWriteConcern", w.clone()),
        None => out.insert(
            "defaultWriteConcern",
            doc! { "w": implicit_w, "wtimeout": 0 },
        ),
    };
    if let Some(d) = stored {
        for field in ["updateOpTime", "updateWallClockTime"] {
            if let Some(v) = d.get(field) {
                out.insert(field, v.clone());
            }
        }
    }
    let source = |set: bool| if set { "global" } else { "implicit" };
    out.insert(
        "defaultWriteConcernSource",
        source(write.is_some_and(|w| !w.is_empty())),
    );
    out.insert(
        "defaultReadConcernSource",
        source(read.is_some_and(|r| !r.is_empty())),
    );
    out.insert("localUpdateWallClockTime", bson::DateTime::now());
    out
}

pub fn get(ctx: &mut Ctx) -> Result<Document> {
    admin_only_replica_set(ctx)?;
    let stored = stored(&ctx.state.engine)?;
    let mut out = reply(ctx, stored.as_ref());
    if matches!(ctx.body.get("inMemory"), Some(Bson::Boolean(true))) {
        out.insert("inMemory", true);
    }
    Ok(out)
}

/// Checks a requested default read concern as MongoDB's `checkSuitabilityAsDefault`; `None`
/// for `{}` (the default read concern unset).
fn suitable_read_concern(rc: &Bson) -> Result<Option<Document>> {
    let parsed = nidus_repl::read_concern::parse(&doc! { "readConcern": rc.clone() })
        .map_err(|e| rename_field(e, "readConcern", "defaultReadConcern"))?;
    let Bson::Document(rc) = rc else {
        return Ok(None);
    };
    if rc.is_empty() || parsed.is_none() {
        return Ok(None);
    }
    if let Ok(level) = rc.get_str("level") {
        if matches!(level, "snapshot" | "linearizable") {
            return Err(Error::bad_value(format!(
                "level: '{level}' is not suitable for the default read concern"
            )));
        }
    }
    for field in ["afterOpTime", "afterClusterTime", "atClusterTime"] {
        if rc.contains_key(field) {
            return Err(Error::bad_value(format!(
                "'{field}' is not suitable for the default read concern"
            )));
        }
    }
    if rc.contains_key("provenance") {
        return Err(Error::bad_value(
            "'provenance' must be unset in default read concern",
        ));
    }
    let level = rc.get_str("level").unwrap_or("local");
    Ok(Some(doc! { "level": level }))
}

fn rename_field(mut e: Error, from: &str, to: &str) -> Error {
    e.message = e.message.replace(&format!("'{from}"), &format!("'{to}"));
    e
}

/// Checks a requested default write concern as MongoDB's `generateNewCWRWCToBeSavedOnDisk`
/// and the set's `validateWriteConcern`; `None` for `{}` (nothing to set).
fn suitable_write_concern(ctx: &Ctx, wc: &Bson) -> Result<Option<Document>> {
    let parsed = super::WriteConcern::parse(&doc! { "writeConcern": wc.clone() })
        .map_err(|e| rename_field(e, "writeConcern", "defaultWriteConcern"))?;
    let Bson::Document(wc) = wc else {
        return Ok(None);
    };
    if wc.is_empty() {
        return Ok(None);
    }
    if !wc.contains_key("w") {
        return Err(Error::bad_value(
            "Default write concern must have 'w' field.",
        ));
    }
    if parsed.nodes == Some(0) {
        return Err(Error::bad_value(
            "Unacknowledged write concern is not suitable for the default write concern",
        ));
    }
    if wc.contains_key("provenance") {
        return Err(Error::bad_value(
            "'provenance' must be unset in default write concern",
        ));
    }
    parsed.check_mode(ctx.state)?;
    let members = ctx
        .state
        .repl
        .as_ref()
        .map_or(1, |r| r.data_bearing_members());
    if parsed.nodes.is_some_and(|n| n > members as i64) {
        return Err(Error::new(
            ErrorCode::UnsatisfiableWriteConcern,
            "Not enough data-bearing nodes",
        ));
    }
    Ok(Some(normalized_write_concern(wc)))
}

pub fn set(ctx: &mut Ctx) -> Result<Document> {
    admin_only_replica_set(ctx)?;
    for k in ctx.body.keys().skip(1) {
        if !matches!(k.as_str(), "defaultReadConcern" | "defaultWriteConcern")
            && !super::is_generic_arg(k)
        {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field 'setDefaultRWConcern.{k}' is an unknown field."),
            ));
        }
    }
    let rc = ctx.body.get("defaultReadConcern").cloned();
    let wc = ctx.body.get("defaultWriteConcern").cloned();
    if rc.is_none() && wc.is_none() {
        return Err(Error::bad_value(
            "At least one of the \"defaultReadConcern\" or \"defaultWriteConcern\" fields must be present",
        ));
    }
    let read = rc.as_ref().map(suitable_read_concern).transpose()?;
    let write = wc
        .as_ref()
        .map(|wc| suitable_write_concern(ctx, wc))
        .transpose()?;
    let engine = &ctx.state.engine;
    let current = stored(engine)?;
    let current_field = |f: &str| {
        current
            .as_ref()
            .and_then(|d| d.get_document(f).ok())
            .filter(|d| !d.is_empty())
            .cloned()
    };
    // `{defaultWriteConcern: {}}` sets nothing, and cannot take a set default away.
    if matches!(write, Some(None)) && current_field("defaultWriteConcern").is_some() {
        return Err(Error::new(
            ErrorCode::IllegalOperation,
            "The global default write concern cannot be unset once it is set.",
        ));
    }
    let read = match read {
        Some(r) => r,
        None => current_field("defaultReadConcern"),
    };
    let write = match write {
        Some(w) => w,
        None => current_field("defaultWriteConcern"),
    };
    let mut new = doc! { "_id": DOCUMENT_ID };
    if let Some(r) = read {
        new.insert("defaultReadConcern", r);
    }
    if let Some(w) = write {
        new.insert("defaultWriteConcern", w);
    }
    new.insert("updateOpTime", ctx.state.cluster_time.tick());
    new.insert("updateWallClockTime", bson::DateTime::now());
    let coll = engine.ensure_collection(&settings_ns())?;
    let spec = UpdateSpec {
        filter: doc! { "_id": DOCUMENT_ID },
        update: Update::parse(&Bson::Document(new.clone()), None)?,
        multi: false,
        upsert: true,
        sort: None,
        hint: None,
    };
    engine.update(&coll, &spec, &WriteOpts::default())?;
    Ok(reply(ctx, Some(&new)))
}
