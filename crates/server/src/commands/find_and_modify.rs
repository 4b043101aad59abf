//! `findAndModify`: find one document (with sort), update or remove it, return it.

use super::find::check_fields;
use super::{wrong_type, Ctx};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::stmt_record::Executed;
use nidus_engine::write::prepare_insert;
use nidus_engine::Engine;
use nidus_query::projection::Projection;
use nidus_query::update::Update;

const FIELDS: &[&str] = &[
    "findAndModify",
    "findandmodify",
    "query",
    "sort",
    "remove",
    "update",
    "new",
    "fields",
    "upsert",
    "bypassDocumentValidation",
    "bypassEmptyTsReplacement",
    "collation",
    "arrayFilters",
    "hint",
    "let",
];

/// How many times the find-then-modify step restarts when the chosen document changed
/// between the read and the write (another writer won); MongoDB retries likewise.
const MAX_RESTARTS: usize = 100;

pub(super) struct Request {
    pub(super) filter: Document,
    pub(super) sort: Option<Document>,
    pub(super) remove: bool,
    pub(super) update: Option<Update>,
    pub(super) return_new: bool,
    pub(super) upsert: bool,
    fields: Option<Projection>,
    pub(super) hint: Option<Bson>,
}

pub(super) fn parse(ctx: &Ctx) -> Result<Request> {
    check_fields(ctx, FIELDS)?;
    let remove = ctx.opt_bool("remove")?.unwrap_or(false);
    let return_new = ctx.opt_bool("new")?.unwrap_or(false);
    let upsert = ctx.opt_bool("upsert")?.unwrap_or(false);
    let array_filters = match ctx.body.get("arrayFilters") {
        None | Some(Bson::Null) => None,
        Some(Bson::Array(a)) => Some(
            a.iter()
                .map(|f| match f {
                    Bson::Document(d) => Ok(d.clone()),
                    other => Err(wrong_type("findAndModify", "arrayFilters", other, "object")),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        Some(other) => return Err(wrong_type("findAndModify", "arrayFilters", other, "array")),
    };
    let update = match ctx.body.get("update") {
        None | Some(Bson::Null) => None,
        Some(u) => {
            let scope = nidus_expr::LetScope::new(ctx.opt_document("let")?.as_ref())?;
            let mut update = Update::parse_in(u, array_filters.as_deref(), &scope)?;
            super::write::fill_replacement_timestamps(
                &mut update,
                super::write::empty_ts_clock(ctx)?,
            );
            Some(update)
        }
    };
    let fail = |m: &str| Err(Error::new(ErrorCode::FailedToParse, m.to_string()));
    match (remove, &update) {
        (true, Some(_)) => return fail("Cannot specify both an update and remove=true"),
        (false, None) => return fail("Either an update or remove=true must be specified"),
        _ => {}
    }
    if remove && upsert {
        return fail("Cannot specify both upsert=true and remove=true ");
    }
    if remove && return_new {
        return fail("Cannot specify both new=true and remove=true; 'remove' always returns the deleted document");
    }
    Ok(Request {
        filter: ctx.opt_document("query")?.unwrap_or_default(),
        sort: ctx.opt_document("sort")?,
        remove,
        update,
        return_new,
        upsert,
        fields: ctx
            .opt_document("fields")?
            .filter(|f| !f.is_empty())
            .map(|f| Projection::parse(&f))
            .transpose()?,
        hint: match ctx.body.get("hint") {
            Some(h @ (Bson::String(_) | Bson::Document(_))) => Some(h.clone()),
            _ => None,
        },
    })
}

fn project(fields: &Option<Projection>, doc: Document) -> Result<Bson> {
    match fields {
        None => Ok(Bson::Document(doc)),
        Some(p) => {
            let raw = nidus_common::encode::document_to_raw(&doc)
                .map_err(|e| Error::internal(e.to_string()))?;
            Ok(Bson::Document(p.apply(&raw)?))
        }
    }
}

/// The document an applied oplog insert holds (its `o`), while this member's oplog still has
/// the entry: a member that applied an upserting findAndModify's insert keeps no image of its
/// own, and the entry is what MongoDB answers a retry of it from.
fn inserted_by_entry(engine: &Engine, ts: bson::Timestamp) -> Result<Option<Document>> {
    let Some(oplog) = engine.oplog() else {
        return Ok(None);
    };
    let Some(bytes) = oplog.entry_at(engine.kv(), ts)? else {
        return Ok(None);
    };
    let internal = |e: bson::raw::Error| Error::internal(e.to_string());
    let entry = bson::RawDocument::from_bytes(&bytes).map_err(internal)?;
    match entry.get_document("o") {
        Ok(o) => Ok(Some(Document::try_from(o).map_err(internal)?)),
        Err(_) => Ok(None),
    }
}

/// The reply of a retried findAndModify whose first attempt changed a document.
fn replay(req: &Request, done: Executed, engine: &Engine) -> Result<Document> {
    let image = |d: Option<Document>| match d {
        Some(d) => project(&req.fields, d),
        None => Ok(Bson::Null),
    };
    Ok(match done {
        Executed::Deleted(pre) => doc! { "lastErrorObject": { "n": 1 }, "value": image(pre)? },
        Executed::Updated { pre, post, .. } => doc! {
            "lastErrorObject": { "n": 1, "updatedExisting": true },
            "value": image(if req.return_new { post } else { pre })?,
        },
        Executed::Inserted { id, doc, entry_ts } => {
            let doc = match (doc, entry_ts) {
                (None, Some(ts)) if req.return_new => inserted_by_entry(engine, ts)?,
                (doc, _) => doc,
            };
            doc! {
                "lastErrorObject": { "n": 1, "updatedExisting": false, "upserted": id.unwrap_or(Bson::Null) },
                "value": if req.return_new { image(doc)? } else { Bson::Null },
            }
        }
    })
}

pub fn find_and_modify(ctx: &mut Ctx) -> Result<Document> {
    let ns = ctx.namespace(&ctx.command_name())?;
    let req = parse(ctx)?;
    let engine = &ctx.state.engine;
    let (mut record, done) = ctx.retryable_statement(0, true)?;
    if let Some(done) = done {
        return replay(&req, done, engine);
    }
    if let Some(r) = record.as_mut() {
        r.retry_image = Some(if req.return_new {
            "postImage"
        } else {
            "preImage"
        });
    }
    let opts = super::write::opts(ctx)?.with_collation(ctx.command_collation(&ns)?);
    let opts = super::write::with_statement(&opts, record);
    let matcher = std::sync::Arc::new(opts.filter_matcher(&req.filter)?);
    engine.check_not_view(&ns)?;
    let coll = match ctx.collection(&ns) {
        Some(c) => Some(c),
        None if req.upsert => Some(ctx.ensure_collection(&ns)?),
        None => None,
    };
    if let Some(coll) = &coll {
        let spec = FindSpec {
            filter: req.filter.clone(),
            sort: req.sort.clone(),
            limit: 1,
            hint: req.hint.clone(),
            deadline: ctx.deadline,
            let_vars: opts.let_vars.clone(),
            collation: opts.collation.clone(),
            source: opts.txn.clone().map(nidus_engine::txn::ReadSource::Txn),
            matcher: Some(matcher.clone()),
            ..FindSpec::default()
        };
        for _ in 0..MAX_RESTARTS {
            let mut exec = engine.plan_find(Some(coll), &spec)?;
            let Some(rid) = exec.get_next()?.and_then(|m| m.rid) else {
                break;
            };
            if req.remove {
                if let Some(old) = engine.delete_record(coll, rid, &matcher, &opts)? {
                    ctx.state
                        .opcounters
                        .delete
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(
                        doc! { "lastErrorObject": { "n": 1 }, "value": project(&req.fields, old)? },
                    );
                }
            } else if let Some(update) = &req.update {
                if let Some((_, old, new)) =
                    engine.update_record_returning(coll, rid, &matcher, update, &opts)?
                {
                    ctx.state
                        .opcounters
                        .update
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let shown = if req.return_new { new } else { old };
                    return Ok(doc! {
                        "lastErrorObject": { "n": 1, "updatedExisting": true },
                        "value": project(&req.fields, shown)?,
                    });
                }
            }
        }
        if let (true, Some(update)) = (req.upsert, &req.update) {
            let doc = engine.upsert_document(&req.filter, update)?;
            let raw = prepare_insert(
                &nidus_common::encode::document_to_raw(&doc)
                    .map_err(|e| Error::internal(e.to_string()))?,
            )?;
            engine.insert_one(coll, &raw, &opts)?;
            let inserted = raw
                .to_document()
                .map_err(|e| Error::internal(e.to_string()))?;
            let id = inserted.get("_id").cloned().unwrap_or(Bson::Null);
            let value = if req.return_new {
                project(&req.fields, inserted)?
            } else {
                Bson::Null
            };
            return Ok(doc! {
                "lastErrorObject": { "n": 1, "updatedExisting": false, "upserted": id },
                "value": value,
            });
        }
    }
    let mut leo = doc! { "n": 0 };
    if !req.remove {
        leo.insert("updatedExisting", false);
    }
    Ok(doc! { "lastErrorObject": leo, "value": Bson::Null })
}
