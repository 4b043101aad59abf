//! `$match`: keeps the documents a query filter matches.
//!
//! `$expr` inside the filter may read user variables (the command's `let`, `$lookup`'s
//! `let`). The matcher's `$expr` parser knows no variables, so their values are written
//! into the filter as `$literal`s before it is parsed ([`Match::bind`]); a filter whose
//! variables are only known per `$lookup` input document is re-bound for each one.

use super::context::Binding;
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Match {
    /// The filter as written (variables not yet replaced).
    pub spec: Document,
    /// The filter with every variable known so far replaced.
    pub filter: Document,
    pub matcher: Arc<Matcher>,
    /// Some variable's value is not known yet (bound at run time).
    pub unbound: bool,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::Location(15959),
            "the match filter must be an expression in an object",
        ));
    };
    Ok(vec![Arc::new(Match::with_bindings(spec, &pcx.bindings())?)])
}

/// The matcher of a `$match` filter; a `$text` in it is answered by the find plan the
/// leading `$match` moves into (`crate::text`), so the matcher holds the other predicates.
fn parse_matcher(filter: &Document) -> Result<Matcher> {
    if crate::text::filter_has_text(filter) {
        return Matcher::parse(&crate::text::filter_without_text(filter));
    }
    Matcher::parse(filter)
}

impl Match {
    /// A `$match` on a filter without variables.
    pub fn new(filter: Document) -> Result<Match> {
        Match::with_bindings(&filter, &[])
    }

    fn with_bindings(spec: &Document, bindings: &[Binding]) -> Result<Match> {
        let mut unbound = false;
        let filter = bind_document(spec, bindings, false, &mut unbound);
        let matcher = Arc::new(parse_matcher(&filter)?);
        Ok(Match {
            spec: spec.clone(),
            filter,
            matcher,
            unbound,
        })
    }

    /// The top-level dotted paths the filter reads; None when it may read anything
    /// (`$where`, `$expr` on `$$ROOT`, operators not analysed).
    pub fn dependencies(&self) -> Option<Vec<String>> {
        let mut out = Vec::new();
        filter_paths(&self.filter, &mut out).then_some(out)
    }

    /// `$and` of two filters (adjacent `$match` stages).
    pub fn and(&self, other: &Match) -> Result<Match> {
        let spec = bson::doc! {"$and": [self.spec.clone(), other.spec.clone()]};
        let filter = bson::doc! {"$and": [self.filter.clone(), other.filter.clone()]};
        Ok(Match {
            spec,
            matcher: Arc::new(parse_matcher(&filter)?),
            filter,
            unbound: self.unbound || other.unbound,
        })
    }
}

impl DocumentSource for Match {
    fn name(&self) -> &'static str {
        "$match"
    }

    fn serialize(&self) -> Bson {
        Bson::Document(self.matcher.canonical_document())
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(MatchStream {
            input,
            matcher: self.matcher.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn bind(&self, ctx: &ExpCtx) -> Result<Option<StageRef>> {
        if !self.unbound {
            return Ok(None);
        }
        Ok(Some(Arc::new(Match::with_bindings(
            &self.spec,
            &ctx.bindings,
        )?)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct MatchStream {
    input: Stream,
    matcher: Arc<Matcher>,
    ctx: ExpCtx,
}

impl DocStream for MatchStream {
    fn next(&mut self) -> Result<Option<Document>> {
        while let Some(d) = self.input.next()? {
            self.ctx.check_interrupt()?;
            let raw = nidus_common::encode::document_to_raw(&d)
                .map_err(|e| Error::internal(e.to_string()))?;
            if self.matcher.matches(&raw)? {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }
}

/// Replaces `$$var` references inside `$expr` with the variables' values. A variable whose
/// value is not known yet becomes null (so the filter still parses) and sets `unbound`.
fn bind_document(
    d: &Document,
    bindings: &[Binding],
    in_expr: bool,
    unbound: &mut bool,
) -> Document {
    let mut out = Document::new();
    for (k, v) in d {
        let inside = in_expr || k == "$expr";
        out.insert(k.clone(), bind_value(v, bindings, inside, unbound));
    }
    out
}

fn bind_value(v: &Bson, bindings: &[Binding], in_expr: bool, unbound: &mut bool) -> Bson {
    match v {
        Bson::Document(d) => Bson::Document(bind_document(d, bindings, in_expr, unbound)),
        Bson::Array(a) => Bson::Array(
            a.iter()
                .map(|e| bind_value(e, bindings, in_expr, unbound))
                .collect(),
        ),
        Bson::String(s) if in_expr && s.starts_with("$$") => {
            bind_variable(s, bindings, unbound).unwrap_or_else(|| v.clone())
        }
        other => other.clone(),
    }
}

fn bind_variable(s: &str, bindings: &[Binding], unbound: &mut bool) -> Option<Bson> {
    let mut parts = s[2..].split('.');
    let name = parts.next()?;
    let b = bindings.iter().rev().find(|b| b.name == name)?;
    let Some(value) = &b.value else {
        *unbound = true;
        return Some(Bson::Null);
    };
    let path: Vec<&str> = parts.collect();
    Some(match value_at(value, &path) {
        Some(v) => bson::bson!({ "$literal": v }),
        None => Bson::String("$$REMOVE".into()),
    })
}

/// A path below a value with expression semantics (arrays map over their documents).
fn value_at(v: &Bson, path: &[&str]) -> Option<Bson> {
    let Some((first, rest)) = path.split_first() else {
        return Some(v.clone());
    };
    match v {
        Bson::Document(d) => value_at(d.get(*first)?, rest),
        Bson::Array(a) => Some(Bson::Array(
            a.iter()
                .filter(|e| matches!(e, Bson::Document(_)))
                .filter_map(|e| value_at(e, path))
                .collect(),
        )),
        _ => None,
    }
}

/// Collects the paths a filter reads; false when it may read anything.
fn filter_paths(filter: &Document, out: &mut Vec<String>) -> bool {
    for (k, v) in filter {
        match k.as_str() {
            "$and" | "$or" | "$nor" => {
                let Bson::Array(items) = v else { return false };
                for item in items {
                    let Bson::Document(d) = item else {
                        return false;
                    };
                    if !filter_paths(d, out) {
                        return false;
                    }
                }
            }
            "$expr" => {
                let Ok(e) = nidus_expr::Expression::parse(v, &nidus_expr::ParseContext::new())
                else {
                    return false;
                };
                let deps = e.dependencies();
                if deps.need_whole_document {
                    return false;
                }
                out.extend(deps.fields);
            }
            "$comment" | "$alwaysTrue" | "$alwaysFalse" => {}
            other if other.starts_with('$') => return false,
            path => out.push(path.to_string()),
        }
    }
    true
}
