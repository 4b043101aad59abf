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
        let parts: Vec<&str> = local.split('.').collect();
        let mut values = Vec::new();
        values_along(&Bson::Document(doc.clone()), &parts, &mut values);
        if values.is_empty() {
            values.push(Bson::Null);
        }
        let mut f = Document::new();
        if values
            .iter()
            .any(|v| matches!(v, Bson::RegularExpression(_)))
        {
            let alternatives: Vec<Bson> = values
                .into_iter()
                .map(|v| {
                    let mut d = Document::new();
                    d.insert(foreign.clone(), bson::bson!({"$eq": v}));
                    Bson::Document(d)
                })
                .collect();
            f.insert("$or", alternatives);
        } else {
            f.insert(foreign.clone(), bson::bson!({"$in": values}));
        }
        Some(f)
    }

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
        Ok(Box::new(LookupStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
            pending: VecDeque::new(),
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
            let joined = self.stage.lookup(d, &self.ctx)?;
            match &self.stage.unwind {
                Some(u) => u.unwind(joined, &mut self.pending),
                None => return Ok(Some(joined)),
            }
        }
    }
}
