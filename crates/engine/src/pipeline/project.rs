//! `$project`: reshapes documents with a projection (inclusions, exclusions, computed fields).
//!
//! The projection itself is `nidus_query::projection`; this stage adds the aggregation
//! spelling for explain (`{_id: true, a: true, b: "$x"}`: inclusions as booleans, dotted
//! paths nested, constants as `$const`) and what the optimizer needs to know.

use super::{DocStream, DocumentSource, ExpCtx, Modified, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::ParseContext;
use nidus_query::projection::{Policy, Projection};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Project {
    /// As written by the user.
    pub spec: Document,
    /// As MongoDB prints it.
    pub normalized: Document,
    pub projection: Arc<Projection>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::Location(15969),
            "$project specification must be an object",
        ));
    };
    Ok(vec![Arc::new(Project::new_in(spec, &pcx.exprs)?)])
}

impl Project {
    /// A `$project` without user variables (e.g. the one `$unset` stands for).
    pub fn new(spec: &Document) -> Result<Project> {
        Self::new_in(spec, &ParseContext::new())
    }

    /// Parses in the pipeline's variable scope.
    pub fn new_in(spec: &Document, exprs: &ParseContext) -> Result<Project> {
        Self::new_as(spec, exprs, "$project")
    }

    /// Parses a projection written as stage `stage` (`$project`, or `$unset` standing for
    /// an exclusion): parse errors name that stage, as MongoDB's do.
    pub fn new_as(spec: &Document, exprs: &ParseContext, stage: &str) -> Result<Project> {
        let projection = Projection::parse_in_context_text_score(spec, Policy::Aggregate, exprs)
            .map_err(|e| {
                Error::new(
                    e.code,
                    format!("Invalid {stage} :: caused by :: {}", e.message),
                )
            })?;
        let projection = Arc::new(projection);
        let mut normalized = normalize(spec);
        if projection.is_inclusion() && !normalized.contains_key("_id") {
            let mut with_id = bson::doc! {"_id": true};
            with_id.extend(normalized);
            normalized = with_id;
        }
        Ok(Project {
            spec: spec.clone(),
            normalized,
            projection,
        })
    }

    /// The projection document to hand to the find layer: the printed form when the
    /// projection parser accepts it (so explain shows it), else the original.
    pub fn pushdown_spec(&self) -> Document {
        if Projection::parse_in_context(&self.normalized, Policy::Aggregate, &ParseContext::new())
            .is_ok()
        {
            self.normalized.clone()
        } else {
            self.spec.clone()
        }
    }
}

impl DocumentSource for Project {
    fn name(&self) -> &'static str {
        "$project"
    }

    fn serialize(&self) -> Bson {
        Bson::Document(self.normalized.clone())
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(ProjectStream {
            input,
            projection: self.projection.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn modified(&self) -> Modified {
        let mut leaves = Vec::new();
        let want = self.projection.is_inclusion();
        boolean_leaves(&self.normalized, "", want, &mut leaves);
        if want {
            Modified::Preserved(leaves)
        } else {
            Modified::Paths(leaves)
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ProjectStream {
    input: Stream,
    projection: Arc<Projection>,
    ctx: ExpCtx,
}

impl DocStream for ProjectStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        let raw = nidus_common::encode::document_to_raw(&d)
            .map_err(|e| Error::internal(e.to_string()))?;
        Ok(Some(self.projection.apply_bound(&raw, None, &self.ctx)?))
    }
}

/// The printed form of a projection: dotted fields nested, inclusion/exclusion values as
/// booleans, expressions serialized (constants as `{$const: ...}`).
pub(crate) fn normalize(spec: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in spec {
        let value = normalize_value(v);
        insert_nested(&mut out, k, value);
    }
    out
}

fn normalize_value(v: &Bson) -> Bson {
    match v {
        Bson::Boolean(b) => Bson::Boolean(*b),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            Bson::Boolean(nidus_expr::value::truthy_bson(v))
        }
        Bson::Document(d) if d.keys().next().is_some_and(|k| !k.starts_with('$')) => {
            Bson::Document(normalize(d))
        }
        other => nidus_expr::Expression::parse(other, &nidus_expr::ParseContext::new())
            .map(|e| e.serialize())
            .unwrap_or_else(|_| other.clone()),
    }
}

fn insert_nested(out: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            out.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(out.get(head), Some(Bson::Document(_))) {
                out.insert(head, Document::new());
            }
            if let Some(Bson::Document(sub)) = out.get_mut(head) {
                insert_nested(sub, rest, value);
            }
        }
    }
}

/// Dotted paths of the boolean leaves equal to `want` (the included or excluded fields).
pub(crate) fn boolean_leaves(d: &Document, prefix: &str, want: bool, out: &mut Vec<String>) {
    for (k, v) in d {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Bson::Boolean(b) if *b == want => out.push(path),
            Bson::Document(sub) if sub.keys().next().is_some_and(|k| !k.starts_with('$')) => {
                boolean_leaves(sub, &path, want, out)
            }
            _ => {}
        }
    }
}
