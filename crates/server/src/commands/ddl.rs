//! Catalog commands: databases, collections and indexes.

use super::{wrong_type, Ctx};
use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::namespace::Namespace;
use nidus_query::matcher::Matcher;
use std::sync::atomic::Ordering;

/// `create` options this server stores; the others are refused rather than ignored.
const CREATE_OPTIONS: &[&str] = &[
    "capped",
    "size",
    "max",
    "validator",
    "validationLevel",
    "validationAction",
    "collation",
    "storageEngine",
    "indexOptionDefaults",
    "idIndex",
    "changeStreamPreAndPostImages",
];
pub fn list_databases(ctx: &mut Ctx) -> Result<Document> {
    let name_only = ctx.opt_bool("nameOnly")?.unwrap_or(false);
    let filter = ctx
        .opt_document("filter")?
        .map(|f| Matcher::parse(&f))
        .transpose()?;
    let engine = &ctx.state.engine;
    let mut dbs = Vec::new();
    let mut total = 0i64;
    // Without the cluster's listDatabases action, only the databases the user has privileges on.
    let all = crate::auth::is_allowed(
        ctx.state,
        &ctx.conn.auth,
        &crate::auth::roles::Target::Cluster,
        "listDatabases",
    );
    let visible = |name: &str| {
        all || ctx
            .conn
            .auth
            .user
            .as_ref()
            .is_some_and(|u| u.privileges.touches_db(name))
    };
    for name in engine.database_names() {
        if !visible(&name) {
            continue;
        }
        let size: i64 = engine
            .collections_in(&name)
            .iter()
            .map(|c| c.data_size.load(Ordering::Relaxed))
            .sum::<i64>()
            .max(4096);
        let entry = if name_only {
            doc! { "name": name }
        } else {
            doc! { "name": name, "sizeOnDisk": size, "empty": false }
        };
        if let Some(m) = &filter {
            let raw = RawDocumentBuf::from_document(&entry)
                .map_err(|e| Error::internal(e.to_string()))?;
            if !m.matches(&raw)? {
                continue;
            }
        }
        total += size;
        dbs.push(Bson::Document(entry));
    }
    if name_only {
        return Ok(doc! { "databases": dbs });
    }
    Ok(doc! { "databases": dbs, "totalSize": total, "totalSizeMb": total / (1024 * 1024) })
}

pub fn list_collections(ctx: &mut Ctx) -> Result<Document> {
    let name_only = ctx.opt_bool("nameOnly")?.unwrap_or(false);
    let filter = ctx
        .opt_document("filter")?
        .map(|f| Matcher::parse(&f))
        .transpose()?;
    // Under --auth without the database's listCollections action (authorizedCollections),
    // only the collections the user has some privilege on.
    let db_target = crate::auth::roles::Target::Database(ctx.db.clone());
    let all = crate::auth::is_allowed(ctx.state, &ctx.conn.auth, &db_target, "listCollections");
    let user = ctx.conn.auth.user.as_ref();
    let mut out = Vec::new();
    for coll in ctx.state.engine.collections_in(&ctx.db) {
        if !all && !user.is_some_and(|u| u.privileges.touches_ns(&ctx.db, &coll.ns.coll)) {
            continue;
        }
        let meta = coll.meta.read();
        let entry = if name_only {
            doc! { "name": coll.ns.coll.clone(), "type": "collection" }
        } else {
            doc! {
                "name": coll.ns.coll.clone(),
                "type": "collection",
                "options": meta.options.clone(),
                "info": { "readOnly": false, "uuid": meta.uuid },
                "idIndex": nidus_engine::catalog::id_index_spec(),
            }
        };
        if let Some(m) = &filter {
            let raw = RawDocumentBuf::from_document(&entry)
                .map_err(|e| Error::internal(e.to_string()))?;
            if !m.matches(&raw)? {
                continue;
            }
        }
        out.push(Bson::Document(entry));
    }
    Ok(cursor_reply(
        &format!("{}.$cmd.listCollections", ctx.db),
        out,
    ))
}

/// A reply holding everything in the first batch (catalog listings are small).
pub fn cursor_reply(ns: &str, docs: Vec<Bson>) -> Document {
    doc! { "cursor": { "id": 0i64, "ns": ns, "firstBatch": docs } }
}

pub fn create(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("create")?;
    let mut options = Document::new();
    for (k, v) in ctx.body.iter().skip(1) {
        if super::is_generic_arg(k) {
            continue;
        }
        match k.as_str() {
            "viewOn" | "pipeline" => {
                return Err(Error::new(
                    ErrorCode::CommandNotSupported,
                    "views are not supported yet by this server",
                ))
            }
            "timeseries" | "expireAfterSeconds" | "clusteredIndex" => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    format!("the '{k}' option is not supported by this server"),
                ))
            }
            "autoIndexId" => {}
            _ if CREATE_OPTIONS.contains(&k.as_str()) => {
                options.insert(k.clone(), v.clone());
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'create.{k}' is an unknown field."),
                ))
            }
        }
    }
    if options.get_bool("capped").unwrap_or(false) && !options.contains_key("size") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "the 'size' field is required when 'capped' is true",
        ));
    }
    ctx.state.engine.create_collection(&ns, options)?;
    Ok(Document::new())
}

/// `collMod` of the validation options (other modifications are refused, not ignored).
pub fn coll_mod(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("collMod")?;
    let mut changes = Document::new();
    for (k, v) in ctx.body.iter().skip(1) {
        if super::is_generic_arg(k) {
            continue;
        }
        match k.as_str() {
            "validator" | "validationLevel" | "validationAction" => {
                changes.insert(k.clone(), v.clone());
            }
            "index"
            | "expireAfterSeconds"
            | "viewOn"
            | "pipeline"
            | "changeStreamPreAndPostImages"
            | "timeseries"
            | "cappedSize"
            | "cappedMax" => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    format!("collMod '{k}' is not supported by this server yet"),
                ))
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'collMod.{k}' is an unknown field."),
                ))
            }
        }
    }
    ctx.state.engine.set_validation_options(&ns, &changes)?;
    Ok(Document::new())
}

pub fn drop(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("drop")?;
    match ctx.state.engine.drop_collection(&ns)? {
        Some(n) => Ok(doc! { "nIndexesWas": n as i32, "ns": ns.full() }),
        None => Ok(Document::new()),
    }
}

pub fn drop_database(ctx: &mut Ctx) -> Result<Document> {
    ctx.state.engine.drop_database(&ctx.db)?;
    Ok(doc! { "dropped": ctx.db.clone() })
}

pub fn rename_collection(ctx: &mut Ctx) -> Result<Document> {
    if ctx.db != "admin" {
        return Err(Error::new(
            ErrorCode::Unauthorized,
            "renameCollection may only be run against the admin database.",
        ));
    }
    let from = match ctx.body.get("renameCollection") {
        Some(Bson::String(s)) => Namespace::parse(s)?,
        Some(other) => {
            return Err(wrong_type(
                "renameCollection",
                "renameCollection",
                other,
                "string",
            ))
        }
        None => return Err(Error::bad_value("renameCollection requires a source")),
    };
    let to = match ctx.body.get("to") {
        Some(Bson::String(s)) => Namespace::parse(s)?,
        Some(other) => return Err(wrong_type("renameCollection", "to", other, "string")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'renameCollection.to' is missing but a required field",
            ))
        }
    };
    if from == to {
        return Err(Error::new(
            ErrorCode::IllegalOperation,
            "Can't rename a collection to itself",
        ));
    }
    if ctx.state.engine.collection(&from).is_none() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Source collection {from} does not exist"),
        ));
    }
    let drop_target = ctx.opt_bool("dropTarget")?.unwrap_or(false);
    ctx.state
        .engine
        .rename_collection(&from, &to, drop_target)?;
    Ok(Document::new())
}

pub fn create_indexes(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("createIndexes")?;
    let specs = match ctx.body.get("indexes") {
        Some(Bson::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|s| match s {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(wrong_type("createIndexes", "indexes", other, "object")),
            })
            .collect::<Result<Vec<_>>>()?,
        Some(Bson::Array(_)) => {
            return Err(Error::bad_value(
                "Must specify at least one index to create",
            ))
        }
        Some(other) => return Err(wrong_type("createIndexes", "indexes", other, "array")),
        None => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'createIndexes.indexes' is missing but a required field",
            ))
        }
    };
    let out = ctx.state.engine.create_indexes(&ns, &specs)?;
    let mut reply = doc! {
        "numIndexesBefore": out.num_indexes_before as i32,
        "numIndexesAfter": out.num_indexes_after as i32,
    };
    match out.note {
        Some(note) => {
            reply.insert("note", note);
        }
        None => {
            reply.insert(
                "createdCollectionAutomatically",
                out.created_collection_automatically,
            );
        }
    }
    Ok(reply)
}

pub fn list_indexes(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("listIndexes")?;
    let coll = ctx.state.engine.collection(&ns).ok_or_else(|| {
        Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        )
    })?;
    let specs: Vec<Bson> = coll
        .meta
        .read()
        .indexes
        .iter()
        .map(|ix| Bson::Document(ix.spec.clone()))
        .collect();
    Ok(cursor_reply(&ns.full(), specs))
}

pub fn drop_indexes(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace(&ctx.command_name())?;
    let which = ctx.body.get("index").cloned().ok_or_else(|| {
        Error::new(
            ErrorCode::Location(40414),
            "BSON field 'dropIndexes.index' is missing but a required field",
        )
    })?;
    let was = ctx.state.engine.drop_indexes(&ns, &which)?;
    let mut reply = doc! { "nIndexesWas": was as i32 };
    if matches!(&which, Bson::String(s) if s == "*") {
        reply.insert("msg", "non-_id indexes dropped for collection");
    }
    Ok(reply)
}
