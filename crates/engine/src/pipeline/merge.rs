//! `$merge`: writes the pipeline's results into a collection, matching existing documents on
//! the `on` fields (default `_id`).
//!
//! `whenMatched`: `merge` (default; top-level fields of the result overwrite the target's),
//! `replace`, `keepExisting`, `fail`, or an update pipeline (`$addFields`/`$set`, `$project`/
//! `$unset`, `$replaceRoot`/`$replaceWith`) run on the matched document with the `let`
//! variables evaluated over the result (default `{new: "$$ROOT"}`); `whenNotMatched`:
//! `insert` (default; with a pipeline, the result itself), `discard`, `fail`.
//! Each result is one update (upsert when inserting) through the engine's write path. The
//! input is read whole before the first write, so merging into the collection being read
//! never sees its own writes.
//! `on` fields other than `_id` need a unique index on exactly those fields. On a secondary
//! (`ExpCtx::primary`) the writes go to the primary as batched `insert`/`update` commands.

use super::stream::{collect, Deferred, Empty};
use super::{DocumentSource, ExpCtx, ParseCtx, Position, PrimaryWrites, StageRef, Stream};
use crate::namespace::Namespace;
use crate::write::{prepare_insert, UpdateSpec, WriteOpts};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::update::Update;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum WhenMatched {
    Merge,
    Replace,
    KeepExisting,
    Fail,
    /// An update pipeline's stages, and the `let` variables its expressions may read.
    Pipeline {
        stages: Vec<Bson>,
        vars: Document,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Merge {
    pub into: Namespace,
    pub on: Vec<String>,
    pub when_matched: WhenMatched,
    pub when_not_matched: WhenNotMatched,
}

fn unknown(k: &str) -> Error {
    Error::new(
        ErrorCode::Location(40415),
        format!("BSON field '$merge.{k}' is an unknown field."),
    )
}

fn bad_value(field: &str, v: &Bson) -> Error {
    Error::new(
        ErrorCode::BadValue,
        format!(
            "Enumeration value '{}' for field '$merge.{field}' is not a valid value.",
            match v {
                Bson::String(s) => s.clone(),
                other => nidus_common::shell::format(other),
            }
        ),
    )
}

fn target(v: &Bson, db: &str) -> Result<Namespace> {
    match v {
        Bson::String(c) => Ok(Namespace::new(db, c)),
        Bson::Document(d) => {
            let db = match d.get("db") {
                Some(Bson::String(s)) => s.clone(),
                _ => db.to_string(),
            };
            match d.get("coll") {
                Some(Bson::String(c)) => Ok(Namespace::new(&db, c)),
                _ => Err(Error::new(
                    ErrorCode::Location(40414),
                    "BSON field 'into.coll' is missing but a required field",
                )),
            }
        }
        other => Err(Error::new(
            ErrorCode::Location(51178),
            format!(
                "$merge 'into' field  must be either a string or an object, but found {}",
                super::type_name(other)
            ),
        )),
    }
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = match arg {
        Bson::String(_) => bson::doc! {"into": arg.clone()},
        Bson::Document(d) => d.clone(),
        other => {
            return Err(Error::new(
                ErrorCode::Location(51182),
                format!(
                    "$merge only supports a string or object argument, not {}",
                    super::type_name(other)
                ),
            ))
        }
    };
    let mut into = None;
    let mut on = vec!["_id".to_string()];
    let mut when_matched = WhenMatched::Merge;
    let mut when_not_matched = WhenNotMatched::Insert;
    let mut let_vars: Option<Document> = None;
    for (k, v) in &spec {
        match k.as_str() {
            "into" => into = Some(target(v, &pcx.db)?),
            "on" => on = parse_on(v)?,
            "whenMatched" => {
                when_matched = match v {
                    Bson::String(s) if s == "merge" => WhenMatched::Merge,
                    Bson::String(s) if s == "replace" => WhenMatched::Replace,
                    Bson::String(s) if s == "keepExisting" => WhenMatched::KeepExisting,
                    Bson::String(s) if s == "fail" => WhenMatched::Fail,
                    Bson::Array(stages) => WhenMatched::Pipeline {
                        stages: stages.clone(),
                        vars: Document::new(),
                    },
                    other => return Err(bad_value("whenMatched", other)),
                }
            }
            "whenNotMatched" => {
                when_not_matched = match v {
                    Bson::String(s) if s == "insert" => WhenNotMatched::Insert,
                    Bson::String(s) if s == "discard" => WhenNotMatched::Discard,
                    Bson::String(s) if s == "fail" => WhenNotMatched::Fail,
                    other => return Err(bad_value("whenNotMatched", other)),
                }
            }
            "let" => {
                let_vars = match v {
                    Bson::Document(d) => Some(d.clone()),
                    other => {
                        return Err(Error::type_mismatch(format!(
                        "BSON field '$merge.let' is the wrong type '{}', expected type 'object'",
                        super::type_name(other)
                    )))
                    }
                }
            }
            other => return Err(unknown(other)),
        }
    }
    let into = into.ok_or_else(|| {
        Error::new(
            ErrorCode::Location(40414),
            "BSON field '$merge.into' is missing but a required field",
        )
    })?;
    crate::namespace::validate_coll_name(&into.db, &into.coll)?;
    let when_matched = match when_matched {
        WhenMatched::Pipeline { stages, .. } => {
            // MongoDB's defaults: `{new: "$$ROOT"}`; `new` is reserved for the result.
            let mut vars = let_vars.unwrap_or_else(|| bson::doc! {"new": "$$ROOT"});
            match vars.get("new") {
                None => {
                    if when_not_matched == WhenNotMatched::Insert {
                        vars.insert("new", "$$ROOT");
                    }
                }
                Some(Bson::String(s)) if s == "$$ROOT" => {}
                Some(_) => {
                    return Err(Error::new(
                        ErrorCode::Location(51273),
                        "'let' may not define a value for the reserved 'new' variable other than '$$ROOT'",
                    ))
                }
            }
            // The pipeline is checked now (its stages, its expressions, the variables they
            // name) in a scope that defines the variables; it runs with their values.
            let names: Document = pcx
                .bindings()
                .into_iter()
                .map(|b| b.name)
                .chain(vars.keys().cloned())
                .map(|k| (k, Bson::Document(bson::doc! {"$literal": Bson::Null})))
                .collect();
            Update::parse_in(
                &Bson::Array(stages.clone()),
                None,
                &nidus_expr::LetScope::new(Some(&names))?,
            )?;
            WhenMatched::Pipeline { stages, vars }
        }
        other => {
            if let_vars.is_some() {
                return Err(Error::new(
                    ErrorCode::Location(51199),
                    format!(
                        "Cannot use 'let' variables with 'whenMatched: {}' mode",
                        other.name()
                    ),
                ));
            }
            other
        }
    };
    Ok(vec![Arc::new(Merge {
        into,
        on,
        when_matched,
        when_not_matched,
    })])
}

fn parse_on(v: &Bson) -> Result<Vec<String>> {
    let fields: Vec<String> = match v {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(items) => items
            .iter()
            .map(|i| match i {
                Bson::String(s) => Ok(s.clone()),
                _ => Err(Error::new(
                    ErrorCode::Location(51134),
                    "Array passed as 'on' field to the $merge stage must only contain strings",
                )),
            })
            .collect::<Result<_>>()?,
        _ => {
            return Err(Error::new(
                ErrorCode::Location(51186),
                "The 'on' field of $merge must be a string or an array of strings",
            ))
        }
    };
    if fields.is_empty() {
        return Err(Error::new(
            ErrorCode::Location(51187),
            "If explicitly specifying $merge 'on', must include at least one field",
        ));
    }
    Ok(fields)
}

impl WhenMatched {
    /// The mode's name as `$merge` is written (`pipeline` for a pipeline).
    fn name(&self) -> &'static str {
        match self {
            WhenMatched::Merge => "merge",
            WhenMatched::Replace => "replace",
            WhenMatched::KeepExisting => "keepExisting",
            WhenMatched::Fail => "fail",
            WhenMatched::Pipeline { .. } => "pipeline",
        }
    }
}

impl Merge {
    fn on_is_id(&self) -> bool {
        self.on.len() == 1 && self.on[0] == "_id"
    }

    /// `on` fields other than `_id` must be backed by a unique index.
    fn check_unique_index(&self, ctx: &ExpCtx) -> Result<()> {
        if self.on_is_id() {
            return Ok(());
        }
        let found = ctx.engine.collection(&self.into).is_some_and(|c| {
            c.meta.read().indexes.iter().any(|ix| {
                ix.unique
                    && ix.pattern.len() == self.on.len()
                    && ix.pattern.iter().all(|(f, _)| self.on.contains(f))
            })
        });
        if found {
            Ok(())
        } else {
            Err(Error::new(
                ErrorCode::Location(51183),
                "Cannot find index to verify that join fields will be unique",
            ))
        }
    }

    fn inserts_only(&self) -> bool {
        self.when_matched == WhenMatched::Fail && self.when_not_matched == WhenNotMatched::Insert
    }

    fn run(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        self.check_unique_index(ctx)?;
        let mut docs = collect(input)?;
        // As MongoDB's: a result without `_id` gets a new ObjectId when `on` includes `_id`
        // (it is then inserted, matching nothing).
        if self.on.iter().any(|f| f == "_id") {
            for d in docs.iter_mut().filter(|d| !d.contains_key("_id")) {
                let mut with_id = bson::doc! { "_id": bson::oid::ObjectId::new() };
                with_id.extend(std::mem::take(d));
                *d = with_id;
            }
        }
        if let Some(primary) = &ctx.primary {
            self.run_on_primary(docs, ctx, primary.as_ref())?;
            return Ok(Box::new(Empty));
        }
        let coll = ctx.engine.ensure_collection(&self.into)?;
        let opts = WriteOpts {
            deadline: ctx.deadline(),
            ..WriteOpts::default()
        };
        if let WhenMatched::Pipeline { stages, vars } = &self.when_matched {
            for d in docs {
                ctx.check_interrupt()?;
                self.merge_with_pipeline(&coll, &d, stages, vars, ctx, &opts)?;
            }
            return Ok(Box::new(Empty));
        }
        for d in docs {
            ctx.check_interrupt()?;
            if self.inserts_only() {
                let raw = nidus_common::encode::document_to_raw(&d)
                    .map_err(|e| Error::internal(e.to_string()))?;
                ctx.engine
                    .insert_one(&coll, &prepare_insert(&raw)?, &opts)?;
                continue;
            }
            let (filter, update) = self.statement(&d)?;
            let spec = UpdateSpec {
                filter,
                update: match update {
                    Bson::Document(replacement) if self.when_matched == WhenMatched::Replace => {
                        Update::Replacement(replacement)
                    }
                    modifiers => Update::parse(&modifiers, None)?,
                },
                multi: false,
                upsert: self.when_not_matched == WhenNotMatched::Insert,
                sort: None,
                hint: None,
            };
            let outcome = ctx.engine.update(&coll, &spec, &opts)?;
            if outcome.n_matched == 0 && self.when_not_matched == WhenNotMatched::Fail {
                return Err(no_match());
            }
        }
        Ok(Box::new(Empty))
    }

    /// `whenMatched: [pipeline]` for one result `d`: the pipeline updates the document its
    /// `on` fields match; without one, `d` itself is inserted (MongoDB's upsert of the
    /// supplied document), discarded, or the stage fails.
    fn merge_with_pipeline(
        &self,
        coll: &crate::CollectionRef,
        d: &Document,
        stages: &[Bson],
        vars: &Document,
        ctx: &ExpCtx,
        opts: &WriteOpts,
    ) -> Result<()> {
        let spec = UpdateSpec {
            filter: self.filter(d)?,
            update: Update::parse_in(
                &Bson::Array(stages.to_vec()),
                None,
                &pipeline_scope(vars, d, ctx)?,
            )?,
            multi: false,
            upsert: false,
            sort: None,
            hint: None,
        };
        if ctx.engine.update(coll, &spec, opts)?.n_matched > 0 {
            return Ok(());
        }
        match self.when_not_matched {
            WhenNotMatched::Discard => Ok(()),
            WhenNotMatched::Fail => Err(no_match()),
            WhenNotMatched::Insert => {
                let raw = nidus_common::encode::document_to_raw(d)
                    .map_err(|e| Error::internal(e.to_string()))?;
                match ctx.engine.insert_one(coll, &prepare_insert(&raw)?, opts) {
                    // Inserted by another writer since the update looked: it is matched now.
                    Err(e) if e.code == ErrorCode::DuplicateKey => {
                        if ctx.engine.update(coll, &spec, opts)?.n_matched > 0 {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    }
                    other => other.map(|_| ()),
                }
            }
        }
    }

    /// The writes of [`Merge::run`] as batched commands on the primary (the target created
    /// there first, as `ensure_collection` does here).
    fn run_on_primary(
        &self,
        docs: Vec<Document>,
        ctx: &ExpCtx,
        primary: &dyn PrimaryWrites,
    ) -> Result<()> {
        let db = self.into.db.as_str();
        match primary.run(db, bson::doc! {"create": &self.into.coll}) {
            Err(e) if e.code != ErrorCode::NamespaceExists => return Err(e),
            _ => {}
        }
        if let WhenMatched::Pipeline { stages, vars } = &self.when_matched {
            // One update per result: whether it matched decides whether it is inserted.
            for d in &docs {
                ctx.check_interrupt()?;
                let constants: Document = pipeline_values(vars, d, ctx)?
                    .into_iter()
                    .map(|(k, v)| (k, Bson::Document(bson::doc! {"$literal": v})))
                    .collect();
                let statement = bson::doc! {
                    "q": self.filter(d)?, "u": stages.to_vec(), "c": constants,
                    "upsert": false, "multi": false,
                };
                let reply = primary.run(
                    db,
                    bson::doc! {"update": &self.into.coll, "updates": [statement], "ordered": true},
                )?;
                if matches!(reply.get("n"), Some(Bson::Int32(n)) if *n > 0) {
                    continue;
                }
                match self.when_not_matched {
                    WhenNotMatched::Discard => {}
                    WhenNotMatched::Fail => return Err(no_match()),
                    WhenNotMatched::Insert => {
                        primary.run(
                            db,
                            bson::doc! {"insert": &self.into.coll, "documents": [d.clone()]},
                        )?;
                    }
                }
            }
            return Ok(());
        }
        for chunk in remote_batches(&docs) {
            ctx.check_interrupt()?;
            if self.inserts_only() {
                let documents: Vec<Bson> = chunk.iter().cloned().map(Bson::Document).collect();
                primary.run(
                    db,
                    bson::doc! {"insert": &self.into.coll, "documents": documents, "ordered": true},
                )?;
                continue;
            }
            let updates = chunk
                .iter()
                .map(|d| {
                    let (q, u) = self.statement(d)?;
                    Ok(Bson::Document(bson::doc! {
                        "q": q,
                        "u": u,
                        "upsert": self.when_not_matched == WhenNotMatched::Insert,
                        "multi": false,
                    }))
                })
                .collect::<Result<Vec<_>>>()?;
            let n = updates.len() as i64;
            let reply = primary.run(
                db,
                bson::doc! {"update": &self.into.coll, "updates": updates, "ordered": true},
            )?;
            let matched = match reply.get("n") {
                Some(Bson::Int32(k)) => *k as i64,
                Some(Bson::Int64(k)) => *k,
                _ => 0,
            };
            if matched < n && self.when_not_matched == WhenNotMatched::Fail {
                return Err(no_match());
            }
        }
        Ok(())
    }

    /// The update statement for one result document: its filter on the `on` fields and its
    /// update (a replacement document for `whenMatched: "replace"`, else modifiers).
    fn statement(&self, d: &Document) -> Result<(Document, Bson)> {
        let filter = self.filter(d)?;
        let without_id: Document = d
            .iter()
            .filter(|(k, _)| k.as_str() != "_id")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let id_on_insert = match (self.on_is_id(), d.get("_id")) {
            (false, Some(id)) => Some(bson::doc! {"_id": id.clone()}),
            _ => None,
        };
        let update = match &self.when_matched {
            WhenMatched::Replace => Bson::Document(without_id),
            WhenMatched::Pipeline { stages, .. } => Bson::Array(stages.clone()),
            WhenMatched::Merge | WhenMatched::Fail => {
                let mut u = Document::new();
                if !without_id.is_empty() {
                    u.insert("$set", without_id);
                }
                if let Some(id) = id_on_insert {
                    u.insert("$setOnInsert", id);
                }
                if u.is_empty() {
                    // Nothing but the `on` fields: an empty pipeline changes a match not at
                    // all and inserts the filter's fields (an empty modifier is an error).
                    return Ok((filter, Bson::Array(Vec::new())));
                }
                Bson::Document(u)
            }
            WhenMatched::KeepExisting => {
                let mut on_insert = without_id;
                if let Some(id) = id_on_insert {
                    on_insert.extend(id);
                }
                for f in &self.on {
                    on_insert.remove(f);
                }
                if on_insert.is_empty() {
                    return Ok((filter, Bson::Array(Vec::new())));
                }
                bson::bson!({"$setOnInsert": on_insert})
            }
        };
        Ok((filter, update))
    }

    /// The filter on the `on` fields that finds the target document of result `d`.
    fn filter(&self, d: &Document) -> Result<Document> {
        let mut filter = Document::new();
        for f in &self.on {
            let v = nidus_doc::path::get_path_raw(
                &nidus_common::encode::document_to_raw(d).map_err(|e| Error::internal(e.to_string()))?,
                f,
            )
            .and_then(|r| Bson::try_from(r.to_raw_bson()).ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::Location(51132),
                    format!("$merge write error: 'on' field '{f}' cannot be missing, null, undefined or an array"),
                )
            })?;
            filter.insert(f.clone(), bson::bson!({"$eq": v}));
        }
        Ok(filter)
    }
}

/// The values of a pipeline's variables for result `d`: the command's `let` variables, then
/// `$merge`'s own, evaluated over `d`.
fn pipeline_values(vars: &Document, d: &Document, ctx: &ExpCtx) -> Result<Document> {
    let spec = pipeline_let(vars, ctx);
    let scope = nidus_expr::LetScope::over(Some(&spec), d)?;
    Ok(spec.keys().cloned().zip(scope.values().cloned()).collect())
}

/// The scope a `whenMatched` pipeline runs in for result `d` (see [`pipeline_values`]).
fn pipeline_scope(vars: &Document, d: &Document, ctx: &ExpCtx) -> Result<nidus_expr::LetScope> {
    nidus_expr::LetScope::over(Some(&pipeline_let(vars, ctx)), d)
}

/// The command's `let` variables (as constants) followed by `$merge`'s.
fn pipeline_let(vars: &Document, ctx: &ExpCtx) -> Document {
    let mut spec: Document = ctx
        .bindings
        .iter()
        .filter_map(|b| {
            let v = b.value.clone()?;
            Some((b.name.clone(), Bson::Document(bson::doc! {"$literal": v})))
        })
        .collect();
    spec.extend(vars.clone());
    spec
}

/// The result documents cut into the batches of one command each (by count and size, as
/// `$out` sends them).
fn remote_batches(docs: &[Document]) -> Vec<&[Document]> {
    use super::out::{REMOTE_BATCH_BYTES, REMOTE_BATCH_DOCS};
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, d) in docs.iter().enumerate() {
        let size = bson::to_vec(d).map_or(0, |v| v.len());
        if i > start && (i - start >= REMOTE_BATCH_DOCS || bytes + size > REMOTE_BATCH_BYTES) {
            out.push(&docs[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < docs.len() {
        out.push(&docs[start..]);
    }
    out
}

fn no_match() -> Error {
    Error::new(
        ErrorCode::Location(13113),
        "$merge could not find a matching document in the target collection for at least one document in the source collection",
    )
}

impl DocumentSource for Merge {
    fn name(&self) -> &'static str {
        "$merge"
    }

    fn serialize(&self) -> Bson {
        let matched = match &self.when_matched {
            WhenMatched::Pipeline { stages, .. } => Bson::Array(stages.clone()),
            other => Bson::String(other.name().to_string()),
        };
        let not_matched = match self.when_not_matched {
            WhenNotMatched::Insert => "insert",
            WhenNotMatched::Discard => "discard",
            WhenNotMatched::Fail => "fail",
        };
        let on: Bson = if self.on.len() == 1 {
            Bson::String(self.on[0].clone())
        } else {
            Bson::Array(self.on.iter().cloned().map(Bson::String).collect())
        };
        let mut spec = bson::doc! {
            "into": {"db": self.into.db.clone(), "coll": self.into.coll.clone()},
            "on": on,
            "whenMatched": matched,
            "whenNotMatched": not_matched,
        };
        if let WhenMatched::Pipeline { vars, .. } = &self.when_matched {
            spec.insert("let", vars.clone());
        }
        Bson::Document(spec)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Merge, input, ctx| stage.run(input, ctx),
        )))
    }

    fn position(&self) -> Position {
        Position::Last
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
