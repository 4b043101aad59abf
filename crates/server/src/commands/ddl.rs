//! Catalog commands: databases, collections and indexes.

use super::{wrong_type, Ctx};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::capped::{option_number, CappedLimits};
use nidus_engine::namespace::Namespace;
use nidus_engine::view::ViewDef;
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
    // mongod always has `admin` (system.version), `config` and `local` (startup_log), so
    // they are listed, sorted in with the rest, even before anything is stored in them.
    let mut names = engine.database_names();
    for system in ["admin", "config", "local"] {
        if !names.iter().any(|n| n == system) {
            names.push(system.to_string());
        }
    }
    names.sort();
    for name in names {
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
            let raw = nidus_common::encode::document_to_raw(&entry)
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
            let mut entry = doc! {
                "name": coll.ns.coll.clone(),
                "type": "collection",
                "options": meta.options.clone(),
                "info": { "readOnly": false, "uuid": meta.uuid },
                "idIndex": nidus_engine::catalog::id_index_spec_for(&meta.options),
            };
            // A clustered collection has no `_id` index to describe.
            if nidus_engine::clustered::is_clustered(&meta.options) {
                entry.remove("idIndex");
            }
            entry
        };
        if let Some(m) = &filter {
            let raw = nidus_common::encode::document_to_raw(&entry)
                .map_err(|e| Error::internal(e.to_string()))?;
            if !m.matches(&raw)? {
                continue;
            }
        }
        out.push(Bson::Document(entry));
    }
    for view in ctx.state.engine.views_in(&ctx.db) {
        if !all && !user.is_some_and(|u| u.privileges.touches_ns(&ctx.db, &view.ns.coll)) {
            continue;
        }
        let ts_entry = super::timeseries::list_entry(&ctx.state.engine, &view.ns, name_only);
        let entry = if let Some(e) = ts_entry {
            e
        } else if name_only {
            doc! { "name": view.ns.coll.clone(), "type": "view" }
        } else {
            doc! {
                "name": view.ns.coll.clone(),
                "type": "view",
                "options": view.options(),
                "info": { "readOnly": true },
            }
        };
        if let Some(m) = &filter {
            let raw = nidus_common::encode::document_to_raw(&entry)
                .map_err(|e| Error::internal(e.to_string()))?;
            if !m.matches(&raw)? {
                continue;
            }
        }
        out.push(Bson::Document(entry));
    }
    let ns = Namespace::new(&ctx.db, "$cmd.listCollections");
    super::find::queued_cursor(ctx, ns, out)
}

pub fn create(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("create")?;
    let mut options = Document::new();
    let (mut view_on, mut pipeline) = (None, None);
    let (mut capped, mut size, mut max) = (false, None, None);
    let (mut clustered_index, mut expire_after, mut timeseries) = (None, None, None);
    for (k, v) in ctx.body.iter().skip(1) {
        if super::is_generic_arg(k) {
            continue;
        }
        match k.as_str() {
            "viewOn" => match v {
                Bson::String(s) => view_on = Some(s.clone()),
                Bson::Null => {}
                other => return Err(wrong_type("create", k, other, "string")),
            },
            "pipeline" => match v {
                Bson::Array(a) => pipeline = Some(pipeline_documents("create", a)?),
                Bson::Null => {}
                other => return Err(wrong_type("create", k, other, "array")),
            },
            "capped" => match v {
                Bson::Null => {}
                Bson::Boolean(b) => capped = *b,
                n if number(n).is_some() => capped = number(n) != Some(0),
                other => {
                    return Err(wrong_types(
                        "create",
                        k,
                        other,
                        "[bool, long, int, decimal, double']",
                    ))
                }
            },
            "size" | "max" => {
                let n = match v {
                    Bson::Null => continue,
                    n => number(n).ok_or_else(|| {
                        wrong_types("create", k, n, "[long, int, decimal, double']")
                    })?,
                };
                if k == "size" {
                    size = Some(capped_size(n)?);
                } else {
                    max = Some(capped_max(n)?);
                }
            }
            "timeseries" => match v {
                Bson::Document(d) => timeseries = Some(d.clone()),
                other => return Err(wrong_type("create", k, other, "object")),
            },
            "expireAfterSeconds" => match v {
                Bson::Null => {}
                v => expire_after = Some(nidus_engine::clustered::parse_expire_after_seconds(v)?),
            },
            "clusteredIndex" => {
                clustered_index = Some(nidus_engine::clustered::parse_clustered_index(v)?);
            }
            "autoIndexId" => {}
            // Stored resolved (every field, as listCollections shows it); the simple
            // collation is no collation.
            "collation" => match v {
                Bson::Document(c) => {
                    if let Some(c) = nidus_doc::collation::Collation::parse(c)? {
                        options.insert("collation", c.to_document());
                    }
                }
                other => return Err(wrong_type("create", k, other, "object")),
            },
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
    if expire_after.is_some() && clustered_index.is_none() && timeseries.is_none() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is specified",
        ));
    }
    if clustered_index.is_some() && options.contains_key("idIndex") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "The 'clusteredIndex' option is not supported with the 'idIndex' option",
        ));
    }
    if capped && size.is_none() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "the 'size' field is required when 'capped' is true",
        ));
    }
    if (size.is_some() || max.is_some()) && !capped {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are present",
        ));
    }
    if pipeline.is_some() && view_on.is_none() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "'pipeline' requires 'viewOn' to also be specified",
        ));
    }
    if let Some(view_on) = view_on {
        if ctx.txn.is_some() {
            return Err(Error::new(
                ErrorCode::OperationNotSupportedInTransaction,
                "Cannot create a view in a multi-document transaction.",
            ));
        }
        return create_view(
            ctx,
            ns,
            view_on,
            pipeline.unwrap_or_default(),
            capped,
            options,
        );
    }
    // `idIndex` describes the `_id` index (mongorestore passes the dumped one); it is not a
    // collection option, and listCollections shows the `_id` index's spec on its own.
    if let Some(id_index) = options.remove("idIndex") {
        check_id_index(&id_index)?;
    }
    if let Some(ts) = timeseries {
        const WITH_TIMESERIES: &[&str] = &[
            "timeseries",
            "expireAfterSeconds",
            "storageEngine",
            "indexOptionDefaults",
            "collation",
        ];
        let other = ctx
            .body
            .keys()
            .skip(1)
            .find(|k| !super::is_generic_arg(k) && !WITH_TIMESERIES.contains(&k.as_str()));
        if let Some(k) = other {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!("{ns}: 'timeseries' is not allowed with '{k}'"),
            ));
        }
        if ctx.txn.is_some() {
            return Err(Error::new(
                ErrorCode::OperationNotSupportedInTransaction,
                "Cannot create a time-series collection in a multi-document transaction.",
            ));
        }
        ctx.state
            .engine
            .create_timeseries(&ns, ts, expire_after, options)?;
        return Ok(Document::new());
    }
    if let Some(ci) = clustered_index {
        // Stored as MongoDB shows them: `clusteredIndex`, then `expireAfterSeconds`.
        let mut clustered_options = doc! { "clusteredIndex": ci };
        if let Some(e) = expire_after {
            clustered_options.insert("expireAfterSeconds", e);
        }
        clustered_options.extend(options);
        options = clustered_options;
    }
    if let Some(size) = size {
        // Stored as MongoDB shows them: `capped`, `size`, then `max`.
        let mut capped_options = doc! { "capped": true, "size": option_number(size) };
        if let Some(m) = max {
            capped_options.insert("max", option_number(m));
        }
        capped_options.extend(options);
        options = capped_options;
    }
    match &ctx.txn {
        Some(txn) => ctx
            .state
            .engine
            .create_collection_in_txn(&ns, options, txn)?,
        None => ctx.state.engine.create_collection(&ns, options)?,
    };
    Ok(Document::new())
}

/// `create`'s `idIndex`: the `_id` index spec, `{key: {_id: 1}, name: "_id_", v, ns?}`.
fn check_id_index(v: &Bson) -> Result<()> {
    let Bson::Document(d) = v else {
        return Err(wrong_type("create", "idIndex", v, "object"));
    };
    match d.get("key") {
        Some(Bson::Document(k)) if k.len() == 1 && k.contains_key("_id") => {}
        _ => {
            return Err(Error::bad_value(format!(
                "The field 'key' for an _id index must be {{_id: 1}}, but got {}",
                nidus_common::shell::format(d.get("key").unwrap_or(&Bson::Null))
            )))
        }
    }
    if let Some(name) = d.get("name") {
        if name != &Bson::String("_id_".into()) {
            return Err(Error::bad_value(format!(
                "The index name for an _id index must be '_id_', but got {}",
                nidus_common::shell::format(name)
            )));
        }
    }
    Ok(())
}

fn create_view(
    ctx: &mut Ctx,
    ns: Namespace,
    view_on: String,
    pipeline: Vec<Document>,
    capped: bool,
    mut options: Document,
) -> Result<Document> {
    if let Ok(id_index) = options.get_document("idIndex") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            format!(
                "'idIndex' is not allowed with 'viewOn': {}",
                nidus_common::shell::format(&Bson::Document(id_index.clone()))
            ),
        ));
    }
    if matches!(options.get_document("changeStreamPreAndPostImages"), Ok(d) if d.get_bool("enabled") == Ok(true))
    {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "option not supported on a view: changeStreamPreAndPostImages",
        ));
    }
    let not_on_view = [
        "validator",
        "validationLevel",
        "validationAction",
        "storageEngine",
        "indexOptionDefaults",
    ];
    if let Some(k) = options.keys().find(|k| not_on_view.contains(&k.as_str())) {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("option not supported on a view: {k}"),
        ));
    }
    if capped {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "option not supported on a view: capped",
        ));
    }
    if ns.is_system() {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Cannot create a view called '{}'", ns.coll),
        ));
    }
    if view_on.is_empty() {
        return Err(Error::bad_value("'viewOn' cannot be empty"));
    }
    let collation = options.remove("collation").and_then(|c| match c {
        Bson::Document(d) => Some(d),
        _ => None,
    });
    ctx.state.engine.create_view(ViewDef {
        ns,
        view_on,
        pipeline,
        collation,
    })?;
    Ok(Document::new())
}

/// A `pipeline` option: an array of stage documents.
fn pipeline_documents(command: &str, stages: &[Bson]) -> Result<Vec<Document>> {
    stages
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Bson::Document(d) => Ok(d.clone()),
            other => Err(wrong_type(
                command,
                &format!("pipeline.{i}"),
                other,
                "object",
            )),
        })
        .collect()
}

fn number(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_finite() => Some(*f as i64),
        Bson::Decimal128(d) => d.to_string().parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    }
}

fn wrong_types(command: &str, field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{command}.{field}' is the wrong type '{}', expected types '{expected}",
        super::type_name(v)
    ))
}

/// A capped `size`: 1 byte to 1 PB (MongoDB 8.0 no longer rounds it to 256 bytes).
fn capped_size(n: i64) -> Result<i64> {
    const PB: i64 = 1 << 50;
    if n < 1 {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'size' value must be >= 1, actual value '{n}'"),
        ));
    }
    if n > PB {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field 'size' value must be <= {PB}, actual value '{n}'"),
        ));
    }
    Ok(n)
}

/// A capped `max`: below 2^31; zero or negative is stored as 2^31 - 1, as MongoDB does.
fn capped_max(n: i64) -> Result<i64> {
    if n >= 1 << 31 {
        return Err(Error::bad_value(
            "max in a capped collection has to be < 2^31 or not set",
        ));
    }
    Ok(if n <= 0 { i32::MAX as i64 } else { n })
}

/// `collMod`: validation options and capped limits of a collection, `viewOn`/`pipeline` of
/// a view (other modifications are refused, not ignored).
pub fn coll_mod(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("collMod")?;
    let is_view = ctx.state.engine.view(&ns).is_some();
    let mut changes = Document::new();
    let (mut view_on, mut pipeline) = (None, None);
    let mut index_change = None;
    for (k, v) in ctx.body.iter().skip(1) {
        if super::is_generic_arg(k) {
            continue;
        }
        let known = matches!(
            k.as_str(),
            "validator"
                | "validationLevel"
                | "validationAction"
                | "viewOn"
                | "pipeline"
                | "cappedSize"
                | "cappedMax"
                | "index"
                | "expireAfterSeconds"
                | "changeStreamPreAndPostImages"
                | "timeseries"
        );
        if !known {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field 'collMod.{k}' is an unknown field."),
            ));
        }
        let view_option = matches!(k.as_str(), "viewOn" | "pipeline");
        if is_view && !view_option {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!("option not supported on a view: {k}"),
            ));
        }
        if !is_view && view_option {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!("option only supported on a view: {k}"),
            ));
        }
        match k.as_str() {
            "validator" | "validationLevel" | "validationAction" => {
                changes.insert(k.clone(), v.clone());
            }
            "changeStreamPreAndPostImages" => {
                changes.insert(k.clone(), pre_and_post_images(v)?);
            }
            "viewOn" => match v {
                Bson::String(s) => view_on = Some(s.clone()),
                other => return Err(wrong_type("collMod", k, other, "string")),
            },
            "pipeline" => match v {
                Bson::Array(a) => pipeline = Some(pipeline_documents("collMod", a)?),
                other => return Err(wrong_type("collMod", k, other, "array")),
            },
            "cappedSize" | "cappedMax" => {
                let n = number(v).ok_or_else(|| wrong_type("collMod", k, v, "long"))?;
                let capped = ctx
                    .state
                    .engine
                    .collection(&ns)
                    .is_some_and(|c| c.is_capped());
                if !capped {
                    return Err(Error::new(
                        ErrorCode::InvalidOptions,
                        "Collection must be capped.",
                    ));
                }
                if k == "cappedSize" {
                    if n < 0 {
                        return Err(Error::bad_value("size has to be >= 0"));
                    }
                    changes.insert("size", option_number(capped_size(n.max(1))?));
                } else {
                    changes.insert("max", option_number(capped_max(n)?));
                }
            }
            "index" => match v {
                Bson::Document(spec) => index_change = Some(parse_index_change(spec)?),
                other => return Err(wrong_type("collMod", k, other, "object")),
            },
            _ => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    format!("collMod '{k}' is not supported by this server yet"),
                ))
            }
        }
    }
    if is_view {
        ctx.state.engine.modify_view(&ns, view_on, pipeline)?;
        return Ok(Document::new());
    }
    if !changes.is_empty() || index_change.is_none() {
        ctx.state.engine.set_validation_options(&ns, &changes)?;
    }
    match index_change {
        Some(change) => ctx.state.engine.modify_index(&ns, &change),
        None => Ok(Document::new()),
    }
}

/// collMod's `index: {name | keyPattern, hidden?, expireAfterSeconds?}`.
fn parse_index_change(spec: &Document) -> Result<nidus_engine::IndexChange> {
    let mut change = nidus_engine::IndexChange::default();
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("name", Bson::String(n)) => change.name = Some(n.clone()),
            ("keyPattern", Bson::Document(d)) => change.key_pattern = Some(d.clone()),
            ("hidden", Bson::Boolean(b)) => change.hidden = Some(*b),
            ("expireAfterSeconds", v) => {
                change.expire_after_seconds =
                    Some(number(v).ok_or_else(|| {
                        wrong_type("collMod.index", "expireAfterSeconds", v, "long")
                    })?)
            }
            ("name", other) => return Err(wrong_type("collMod.index", "name", other, "string")),
            ("keyPattern", other) => {
                return Err(wrong_type("collMod.index", "keyPattern", other, "object"))
            }
            ("hidden", other) => return Err(wrong_type("collMod.index", "hidden", other, "bool")),
            (other, _) => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'collMod.index.{other}' is an unknown field."),
                ))
            }
        }
    }
    if change.name.is_some() == change.key_pattern.is_some() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "Must specify either index name or key pattern.",
        ));
    }
    if change.hidden.is_none() && change.expire_after_seconds.is_none() {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "no expireAfterSeconds or hidden field",
        ));
    }
    Ok(change)
}

/// `changeStreamPreAndPostImages: {enabled: <bool>}` as `collMod` takes it.
fn pre_and_post_images(v: &Bson) -> Result<Bson> {
    let Bson::Document(d) = v else {
        return Err(wrong_type(
            "collMod",
            "changeStreamPreAndPostImages",
            v,
            "object",
        ));
    };
    for (k, _) in d {
        if k != "enabled" {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!(
                    "BSON field 'collMod.changeStreamPreAndPostImages.{k}' is an unknown field."
                ),
            ));
        }
    }
    match d.get("enabled") {
        Some(Bson::Boolean(b)) => Ok(Bson::Document(doc! { "enabled": *b })),
        Some(other) => Err(wrong_type(
            "collMod.changeStreamPreAndPostImages",
            "enabled",
            other,
            "bool",
        )),
        None => Err(Error::new(
            ErrorCode::Location(40414),
            "BSON field 'collMod.changeStreamPreAndPostImages.enabled' is missing but a required field",
        )),
    }
}

pub fn drop(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("drop")?;
    if let Some(reply) = super::timeseries::drop(ctx, &ns)? {
        return Ok(reply);
    }
    if ctx.state.engine.drop_view(&ns)? {
        return Ok(doc! { "ns": ns.full() });
    }
    match ctx.state.engine.drop_collection(&ns)? {
        Some(n) => Ok(doc! { "nIndexesWas": n as i32, "ns": ns.full() }),
        None => Ok(Document::new()),
    }
}

/// The `size` and `max` fields of `convertToCapped` and `cloneCollectionAsCapped`.
fn capped_limits(ctx: &Ctx) -> Result<CappedLimits> {
    let cmd = ctx.command_name();
    let size = match ctx.body.get("size") {
        None | Some(Bson::Null) => {
            return Err(Error::new(
                ErrorCode::Location(40414),
                format!("BSON field '{cmd}.size' is missing but a required field"),
            ))
        }
        Some(v) => number(v).ok_or_else(|| wrong_type(&cmd, "size", v, "double"))?,
    };
    let max = match ctx.body.get("max") {
        None | Some(Bson::Null) => None,
        Some(v) => Some(capped_max(
            number(v).ok_or_else(|| wrong_type(&cmd, "max", v, "long"))?,
        )?),
    };
    Ok(CappedLimits {
        size: capped_size(size)?,
        max,
    })
}

pub fn convert_to_capped(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("convertToCapped")?;
    let limits = capped_limits(ctx)?;
    ctx.state.engine.convert_to_capped(&ns, limits)?;
    Ok(Document::new())
}

pub fn clone_collection_as_capped(ctx: &mut Ctx) -> Result<Document> {
    let from = ctx.namespace("cloneCollectionAsCapped")?;
    let to =
        match ctx.body.get("toCollection") {
            Some(Bson::String(c)) if !c.is_empty() => Namespace::new(&ctx.db, c),
            Some(Bson::String(_)) => {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    format!("Invalid namespace specified '{}.'", ctx.db),
                ))
            }
            Some(other) => {
                return Err(wrong_type(
                    "cloneCollectionAsCapped",
                    "toCollection",
                    other,
                    "string",
                ))
            }
            None => return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'cloneCollectionAsCapped.toCollection' is missing but a required field",
            )),
        };
    let limits = capped_limits(ctx)?;
    ctx.state
        .engine
        .clone_collection_as_capped(&from, &to, limits)?;
    Ok(Document::new())
}

pub fn drop_database(ctx: &mut Ctx) -> Result<Document> {
    ctx.state.engine.drop_database(&ctx.db)?;
    Ok(doc! { "dropped": ctx.db.clone() })
}

pub fn rename_collection(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin("renameCollection")?;
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
    ctx.state.engine.check_not_view(&from)?;
    if ctx.state.engine.view(&to).is_some() {
        return Err(Error::new(
            ErrorCode::NamespaceExists,
            format!("a view already exists with that name: {to}"),
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
    // The same index (key and name) twice in one request is refused, as MongoDB does; an
    // index that already exists is not (the reply then notes it).
    for (i, a) in specs.iter().enumerate() {
        let dup = specs[..i]
            .iter()
            .any(|b| a.get("key") == b.get("key") && a.get("name") == b.get("name"));
        if dup {
            return Err(Error::new(
                ErrorCode::IndexAlreadyExists,
                format!(
                    "Identical index already exists: {}",
                    a.get_str("name").unwrap_or_default()
                ),
            ));
        }
    }
    let quorum = commit_quorum(ctx)?;
    if let Some(reply) = super::timeseries::create_indexes(ctx, &ns, &specs)? {
        return Ok(reply);
    }
    let out = match &ctx.txn {
        Some(txn) => ctx.state.engine.create_indexes_in_txn(&ns, &specs, txn)?,
        None => ctx.state.engine.create_indexes(&ns, &specs)?,
    };
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
    if let Some((value, majority, members)) = quorum {
        wait_for_commit_quorum(ctx, majority, &members)?;
        reply.insert("commitQuorum", value);
    }
    Ok(reply)
}

/// The members a commit quorum names: a count, or a custom write concern mode.
enum QuorumMembers {
    Count(i64),
    Mode(String),
}

/// `createIndexes.commitQuorum`: which voting, index-building members must hold the build
/// before the command returns, as (the value given, majority, the members: a count or a
/// custom mode of `settings.getLastErrorModes`). A standalone refuses it (BadValue); a count
/// above the voting members, or a mode they cannot satisfy, is 278. Without it the command
/// does not wait (MongoDB's default `votingMembers` would).
fn commit_quorum(ctx: &Ctx) -> Result<Option<(Bson, bool, QuorumMembers)>> {
    let Some(value) = ctx.body.get("commitQuorum") else {
        return Ok(None);
    };
    let Some(repl) = &ctx.state.repl else {
        return Err(Error::bad_value("Standalones can't specify commitQuorum"));
    };
    let voters = repl.voting_index_builders() as i64;
    let (majority, nodes) = match value {
        Bson::String(s) if s.is_empty() => {
            return Err(Error::failed_to_parse(
                "commitQuorum can't be an empty string",
            ))
        }
        Bson::String(s) if s == "votingMembers" => (false, QuorumMembers::Count(voters)),
        Bson::String(s) if s == "majority" => (true, QuorumMembers::Count(1)),
        Bson::String(mode) => {
            let config = repl
                .view()
                .config
                .ok_or_else(|| nidus_repl::config::unknown_write_mode(mode))?;
            let pattern = config.write_mode(mode)?;
            // MongoDB's checkIfCommitQuorumCanBeSatisfied: by the voting, index-building
            // members' tags.
            let builders = |id: u64| {
                config
                    .member_by_raft_id(id)
                    .is_some_and(|m| m.is_voter() && m.build_indexes)
            };
            if !config.satisfies(pattern, builders) {
                return Err(Error::new(
                    ErrorCode::UnsatisfiableCommitQuorum,
                    "Commit quorum cannot be satisfied with the current replica set configuration",
                ));
            }
            (false, QuorumMembers::Mode(mode.clone()))
        }
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => {
            let n = super::opt_i64("createIndexes", &ctx.body, "commitQuorum")?.unwrap_or(0);
            // MongoDB's bound is its largest replica set (kMaxMembers).
            if !(0..=50).contains(&n) {
                return Err(Error::failed_to_parse(
                    "commitQuorum has to be a non-negative number and not greater than 50",
                ));
            }
            if n > voters {
                return Err(Error::new(
                    ErrorCode::UnsatisfiableCommitQuorum,
                    "Not enough data-bearing voting nodes to satisfy commit quorum",
                ));
            }
            (false, QuorumMembers::Count(n))
        }
        _ => {
            return Err(Error::failed_to_parse(
                "commitQuorum has to be a number or a string",
            ))
        }
    };
    Ok(Some((value.clone(), majority, nodes)))
}

/// Waits (up to the command's `maxTimeMS`) until the commit quorum holds the build's oplog
/// entry, so the index is on that many members when the command returns.
fn wait_for_commit_quorum(ctx: &Ctx, majority: bool, members: &QuorumMembers) -> Result<()> {
    let (Some(repl), Some(ts)) = (&ctx.state.repl, nidus_engine::oplog::last_write_ts()) else {
        return Ok(());
    };
    let quorum = match members {
        QuorumMembers::Count(n) if !majority && *n <= 1 => return Ok(()),
        QuorumMembers::Count(n) => nidus_repl::Acknowledgers::Count(*n),
        QuorumMembers::Mode(mode) => nidus_repl::Acknowledgers::Mode(mode),
    };
    match repl.wait_for_replication(ts, majority, quorum, ctx.deadline) {
        nidus_repl::ReplicationWait::Satisfied | nidus_repl::ReplicationWait::Alone => Ok(()),
        // A reconfiguration since the command was checked dropped or changed the mode.
        nidus_repl::ReplicationWait::UnknownMode(e) => Err(e),
        nidus_repl::ReplicationWait::Unsatisfiable(_) => Err(Error::new(
            ErrorCode::UnsatisfiableCommitQuorum,
            "Commit quorum cannot be satisfied with the current replica set configuration",
        )),
        nidus_repl::ReplicationWait::TimedOut => Err(Error::new(
            ErrorCode::MaxTimeMSExpired,
            "operation exceeded time limit",
        )),
        nidus_repl::ReplicationWait::NotPrimary => Err(Error::new(
            ErrorCode::InterruptedDueToReplStateChange,
            "Index build aborted: the primary stepped down while waiting for its commit quorum",
        )),
    }
}

pub fn list_indexes(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace("listIndexes")?;
    if let Some(specs) = super::timeseries::list_indexes(ctx, &ns) {
        return super::find::queued_cursor(ctx, ns, specs);
    }
    ctx.state.engine.check_not_view(&ns)?;
    let coll = ctx.state.engine.collection(&ns).ok_or_else(|| {
        Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        )
    })?;
    let meta = coll.meta.read();
    let clustered = nidus_engine::clustered::is_clustered(&meta.options);
    let specs: Vec<Bson> = meta
        .indexes
        .iter()
        .map(|ix| match (clustered, ix.is_id()) {
            (true, true) => Bson::Document(nidus_engine::clustered::id_index_spec(&meta.options)),
            _ => Bson::Document((*ix.spec).clone()),
        })
        .collect();
    std::mem::drop(meta);
    super::find::queued_cursor(ctx, ns, specs)
}

pub fn drop_indexes(ctx: &mut Ctx) -> Result<Document> {
    let mut ns = ctx.namespace(&ctx.command_name())?;
    let mut which = ctx.body.get("index").cloned().ok_or_else(|| {
        Error::new(
            ErrorCode::Location(40414),
            "BSON field 'dropIndexes.index' is missing but a required field",
        )
    })?;
    if let Some(target) = super::timeseries::drop_index_target(ctx, &ns, &which)? {
        which = target;
        ns = nidus_engine::timeseries::buckets_ns(&ns);
    }
    ctx.state.engine.check_not_view(&ns)?;
    let was = ctx.state.engine.drop_indexes(&ns, &which)?;
    let mut reply = doc! { "nIndexesWas": was as i32 };
    if matches!(&which, Bson::String(s) if s == "*") {
        reply.insert("msg", "non-_id indexes dropped for collection");
    }
    Ok(reply)
}
