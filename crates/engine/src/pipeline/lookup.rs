//! `$lookup`: for each input document, the matching documents of another collection as an
//! array field.
//!
//! Equality form (`localField`/`foreignField`): the foreign filter is `foreignField $in` the
//! values at `localField` (array elements taken one by one; missing means null), so the
//! foreign collection's indexes serve it through the find planner. Pipeline form (`let`,
//! `pipeline`): the sub-pipeline runs with the `let` variables bound to values computed from
//! the input document; its `$match` stages are re-bound for each document and pushed into
//! the foreign find plan. Both forms may be combined (the equality filter runs first).

use super::context::{check_size, Binding};
use super::lookup_hash_join::HashTable;
use super::r#match::Match;
use super::unwind::{set_nested, Unwind};
use super::{run, stage_document, DocStream, DocumentSource, ExpCtx, Modified, ParseCtx};
use super::{StageRef, Stream};
use crate::namespace::Namespace;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::{Expression, VarId};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Lookup {
    pub from: Option<Namespace>,
    pub as_field: String,
    pub local_field: Option<String>,
    pub foreign_field: Option<String>,
    pub let_vars: Vec<(String, VarId, Expression)>,
    pub pipeline: Vec<StageRef>,
    /// A following `$unwind` of the `as` field, folded in by the optimizer.
    pub unwind: Option<Unwind>,
}

fn parse_err(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::FailedToParse, msg)
}

fn string_arg(k: &str, v: &Bson) -> Result<String> {
    match v {
        Bson::String(s) => Ok(s.clone()),
        other => Err(parse_err(format!(
            "$lookup argument '{k}: {}' must be a string, is type {}",
            nidus_common::shell::format(other),
            super::type_name(other)
        ))),
    }
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(parse_err(format!(
            "the $lookup stage specification must be an object, but found {}",
            super::type_name(arg)
        )));
    };
    let mut from = None;
    let mut as_field = None;
    let mut local = None;
    let mut foreign = None;
    let mut let_spec = None;
    let mut pipeline_spec = None;
    for (k, v) in spec {
        match k.as_str() {
            "from" => from = Some(string_arg(k, v)?),
            "as" => as_field = Some(string_arg(k, v)?),
            "localField" => local = Some(string_arg(k, v)?),
            "foreignField" => foreign = Some(string_arg(k, v)?),
            "let" => match v {
                Bson::Document(d) => let_spec = Some(d.clone()),
                other => {
                    return Err(parse_err(format!(
                        "$lookup argument 'let' must be an object, is type {}",
                        super::type_name(other)
                    )))
                }
            },
            "pipeline" => match v {
                Bson::Array(a) => pipeline_spec = Some(a.clone()),
                other => {
                    return Err(parse_err(format!(
                        "$lookup argument 'pipeline' must be an array, is type {}",
                        super::type_name(other)
                    )))
                }
            },
            other => return Err(parse_err(format!("unknown argument to $lookup: {other}"))),
        }
    }
    let as_field = as_field.ok_or_else(|| parse_err("must specify 'as' field for a $lookup"))?;
    if local.is_some() != foreign.is_some() {
        return Err(parse_err(
            "$lookup requires both or neither of 'localField' and 'foreignField' to be specified",
        ));
    }
    if local.is_none() && pipeline_spec.is_none() {
        return Err(parse_err(
            "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
        ));
    }
    let mut let_vars = Vec::new();
    for (name, e) in let_spec.iter().flatten() {
        let_vars.push((name.clone(), Expression::parse(e, &pcx.exprs)?));
    }
    let mark = pcx.mark();
    let mut bound = Vec::new();
    for (name, e) in let_vars {
        let id = pcx.define(&name, None)?;
        bound.push((name, id, e));
    }
    let from_ns = from.as_ref().map(|c| Namespace::new(&pcx.db, c));
    let items = pipeline_spec.as_deref().unwrap_or_default();
    let pipeline = pcx.parse_sub_pipeline(from_ns.as_ref(), items);
    pcx.restore(mark);
    let pipeline = pipeline?;
    super::reject_writing_stage(&pipeline, "$lookup", 51047)?;
    let starts_with_source = pipeline.first().is_some_and(|s| s.is_source());
    if from.is_none() && !starts_with_source {
        return Err(parse_err("must specify 'from' field for a $lookup"));
    }
    Ok(vec![Arc::new(Lookup {
        from: from_ns,
        as_field,
        local_field: local,
        foreign_field: foreign,
        let_vars: bound,
        pipeline,
        unwind: None,
    })])
}

/// The values at a path, array elements taken one by one (MongoDB's "all elements along
/// the path").
fn values_along(v: &Bson, path: &[&str], out: &mut Vec<Bson>) {
    match path.split_first() {
        None => match v {
            Bson::Array(items) => out.extend(items.iter().cloned()),
            other => out.push(other.clone()),
        },
        Some((first, rest)) => match v {
            Bson::Document(d) => {
                if let Some(x) = d.get(*first) {
                    values_along(x, rest, out);
                }
            }
            Bson::Array(items) => {
                for e in items.iter().filter(|e| matches!(e, Bson::Document(_))) {
                    values_along(e, path, out);
                }
            }
            _ => {}
        },
    }
}

impl Lookup {
    /// The equality filter on the foreign collection for one input document.
    fn equality_filter(&self, doc: &Document) -> Option<Document> {
        let (local, foreign) = (self.local_field.as_ref()?, self.foreign_field.as_ref()?);
        let values = local_values(doc, local);
        Some(equality_filter_for(foreign, values))
    }

    /// The strategy MongoDB 8.0 picks for this `$lookup` (explain's `strategy`), or None
    /// for the forms it runs as a sub-pipeline per document (`let`/`pipeline`).
    fn strategy(&self, ctx: &ExpCtx) -> Result<Option<Strategy>> {
        let (Some(from), Some(foreign)) = (&self.from, &self.foreign_field) else {
            return Ok(None);
        };
        if !self.pipeline.is_empty() || !self.let_vars.is_empty() {
            return Ok(None);
        }
        if ctx.engine.resolve_view(from)?.is_some() {
            return Ok(Some(Strategy::NestedLoopJoin));
        }
        let txn = ctx.source.as_ref().and_then(|s| s.txn());
        let Some(coll) = ctx.engine.collection_in(from, txn) else {
            return Ok(Some(Strategy::NonExistentForeignCollection));
        };
        let collation = crate::find::parse_collation(ctx.collation.as_ref())?;
        let indexed = coll.meta.read().indexes.iter().find_map(|ix| {
            let usable = ix.build.is_none()
                && ix.partial.is_none()
                && !ix.sparse
                && ix.hashed != Some(0)
                && ix.geo != Some(0)
                && ix.twod.is_none()
                && ix.pattern.first().is_some_and(|(p, _)| p == foreign)
                && match (&ix.collation, &collation) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a == b,
                    _ => false,
                };
            usable.then(|| ix.name.clone())
        });
        if let Some(name) = indexed {
            return Ok(Some(Strategy::IndexedLoopJoin(name)));
        }
        let records = coll.count.load(std::sync::atomic::Ordering::Relaxed);
        let bytes = coll.data_size.load(std::sync::atomic::Ordering::Relaxed);
        if !ctx.lookup_hash_join {
            return Ok(Some(Strategy::NestedLoopJoin));
        }
        if ctx.allow_disk_use
            || (records <= HASH_JOIN_MAX_DOCUMENTS && bytes <= HASH_JOIN_MAX_BYTES)
        {
            return Ok(Some(Strategy::HashJoin));
        }
        Ok(Some(Strategy::NestedLoopJoin))
    }
}

/// The strategies of MongoDB 8.0's `$lookup` (`EqLookupNode::LookupStrategy`).
#[derive(Debug, Clone, PartialEq)]
enum Strategy {
    /// The foreign collection has an index led by `foreignField` (its name).
    IndexedLoopJoin(String),
    /// A hash table of the foreign collection, built once per execution.
    HashJoin,
    /// A foreign query per input document.
    NestedLoopJoin,
    NonExistentForeignCollection,
}

impl Strategy {
    fn name(&self) -> &'static str {
        match self {
            Strategy::IndexedLoopJoin(_) => "IndexedLoopJoin",
            Strategy::HashJoin => "HashJoin",
            Strategy::NestedLoopJoin => "NestedLoopJoin",
            Strategy::NonExistentForeignCollection => "NonExistentForeignCollection",
        }
    }
}

/// Without `allowDiskUse`, a hash join only for a foreign collection of at most this many
/// documents and bytes (MongoDB's `internalQueryCollectionMaxNoOfDocumentsToChooseHashJoin`
/// and `internalQueryCollectionMaxDataSizeBytesToChooseHashJoin`); larger ones run as a
/// nested loop join.
const HASH_JOIN_MAX_DOCUMENTS: i64 = 10_000;
const HASH_JOIN_MAX_BYTES: i64 = 100 * 1024 * 1024;

/// The values at `localField` (array elements one by one; missing means null).
fn local_values(doc: &Document, local: &str) -> Vec<Bson> {
    let parts: Vec<&str> = local.split('.').collect();
    let mut values = Vec::new();
    if let Some((first, rest)) = parts.split_first() {
        if let Some(v) = doc.get(*first) {
            values_along(v, rest, &mut values);
        }
    }
    if values.is_empty() {
        values.push(Bson::Null);
    }
    values
}

/// `{foreignField: {$in: values}}` (an `$or` of `$eq`s when a value is a regex, which `$in`
/// would run as a pattern).
fn equality_filter_for(foreign: &str, values: Vec<Bson>) -> Document {
    let mut f = Document::new();
    if values
        .iter()
        .any(|v| matches!(v, Bson::RegularExpression(_)))
    {
        let alternatives: Vec<Bson> = values
            .into_iter()
            .map(|v| {
                let mut d = Document::new();
                d.insert(foreign.to_string(), bson::bson!({"$eq": v}));
                Bson::Document(d)
            })
            .collect();
        f.insert("$or", alternatives);
    } else {
        f.insert(foreign.to_string(), bson::bson!({"$in": values}));
    }
    f
}

impl Lookup {
    fn lookup(&self, doc: Document, ctx: &ExpCtx) -> Result<Document> {
        let mut bindings = Vec::with_capacity(self.let_vars.len());
        for (name, id, e) in &self.let_vars {
            bindings.push(Binding {
                name: name.clone(),
                id: *id,
                value: ctx.evaluate(e, &doc)?,
            });
        }
        let sub_ctx = ctx.with_more(bindings);
        let mut stages = Vec::with_capacity(self.pipeline.len() + 1);
        if let Some(f) = self.equality_filter(&doc) {
            stages.push(Arc::new(Match::new(f)?) as StageRef);
        }
        stages.extend(self.pipeline.iter().cloned());
        let results = run::collect(&sub_ctx, self.from.as_ref(), &stages, None)?;
        attach_as(doc, &self.as_field, results)
    }
}

/// Stores the joined documents at the `as` path (`$lookup`, `$graphLookup`), within the
/// 16 MiB document limit.
pub(super) fn attach_as(
    mut doc: Document,
    as_field: &str,
    found: Vec<Document>,
) -> Result<Document> {
    let parts: Vec<String> = as_field.split('.').map(str::to_string).collect();
    set_nested(
        &mut doc,
        &parts,
        Bson::Array(found.into_iter().map(Bson::Document).collect()),
    );
    check_size(&doc)?;
    Ok(doc)
}

impl DocumentSource for Lookup {
    fn name(&self) -> &'static str {
        "$lookup"
    }

    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        if let Some(ns) = &self.from {
            d.insert("from", ns.coll.clone());
        }
        d.insert("as", self.as_field.clone());
        if let (Some(l), Some(f)) = (&self.local_field, &self.foreign_field) {
            d.insert("localField", l.clone());
            d.insert("foreignField", f.clone());
        }
        if !self.let_vars.is_empty() {
            let mut lets = Document::new();
            for (name, _, e) in &self.let_vars {
                lets.insert(name.clone(), e.serialize());
            }
            d.insert("let", lets);
        }
        if !self.pipeline.is_empty() || self.local_field.is_none() {
            let items: Vec<Bson> = self
                .pipeline
                .iter()
                .map(|s| Bson::Document(stage_document(s.as_ref())))
                .collect();
            d.insert("pipeline", items);
        }
        if let Some(u) = &self.unwind {
            let mut unwinding = bson::doc! {"preserveNullAndEmptyArrays": u.preserve};
            if let Some(ix) = &u.include_array_index {
                unwinding.insert("includeArrayIndex", ix.join("."));
            }
            d.insert("unwinding", unwinding);
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let strategy = self.strategy(ctx)?;
        if let Some(s) = &strategy {
            let mut d = bson::doc! {"strategy": s.name()};
            if let Strategy::IndexedLoopJoin(name) = s {
                d.insert("indexName", name.clone());
            }
            ctx.report(d);
        }
        Ok(Box::new(LookupStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
            pending: VecDeque::new(),
            hash_join: strategy == Some(Strategy::HashJoin),
            table: None,
        }))
    }

    fn modified(&self) -> Modified {
        let mut paths = vec![self.as_field.clone()];
        if let Some(ix) = self
            .unwind
            .as_ref()
            .and_then(|u| u.include_array_index.as_ref())
        {
            paths.push(ix.join("."));
        }
        Modified::Paths(paths)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct LookupStream {
    input: Stream,
    stage: Lookup,
    ctx: ExpCtx,
    /// Unwound results of the current input document.
    pending: VecDeque<Document>,
    hash_join: bool,
    /// The hash join's table, built on the first input document.
    table: Option<HashTable>,
}

impl LookupStream {
    /// Joins one input document through the hash table.
    fn hash_lookup(&mut self, doc: Document) -> Result<Document> {
        let (Some(from), Some(local), Some(foreign)) = (
            &self.stage.from,
            &self.stage.local_field,
            &self.stage.foreign_field,
        ) else {
            return self.stage.lookup(doc, &self.ctx);
        };
        if self.table.is_none() {
            let txn = self.ctx.source.as_ref().and_then(|s| s.txn());
            let coll = self.ctx.engine.collection_in(from, txn);
            let collation = crate::find::parse_collation(self.ctx.collation.as_ref())?;
            let table = HashTable::build(
                &self.ctx,
                coll.as_ref(),
                foreign,
                collation,
                self.ctx.lookup_max_memory,
            )?;
            if table.spilled_records > 0 {
                self.ctx.report(bson::doc! {
                    "usedDisk": true,
                    "spilledRecords": table.spilled_records as i64,
                    "spilledDataStorageSize": table.spilled_bytes() as i64,
                });
            }
            self.table = Some(table);
        }
        let Some(table) = &self.table else {
            return Err(Error::internal("$lookup hash table missing"));
        };
        let values = local_values(&doc, local);
        let filter = equality_filter_for(foreign, values.clone());
        let found = table.probe(&values, &filter)?;
        attach_as(doc, &self.stage.as_field, found)
    }
}

impl DocStream for LookupStream {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(d) = self.pending.pop_front() {
                return Ok(Some(d));
            }
            let Some(d) = self.input.next()? else {
                return Ok(None);
            };
            self.ctx.check_interrupt()?;
            let joined = if self.hash_join {
                self.hash_lookup(d)?
            } else {
                self.stage.lookup(d, &self.ctx)?
            };
            match &self.stage.unwind {
                Some(u) => u.unwind(joined, &mut self.pending),
                None => return Ok(Some(joined)),
            }
        }
    }
}
