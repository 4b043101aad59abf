//! `$redact: <expr>`: the expression decides per (sub)document: `$$KEEP` keeps it whole,
//! `$$PRUNE` drops it, `$$DESCEND` keeps its scalar fields and applies the expression to its
//! embedded documents (also inside arrays), with `$$CURRENT` bound to each of them.
//!
//! The three variables are written into the expression as `$literal` strings before parsing
//! (the expression parser has no such builtins); a result is compared with those strings.

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::Expression;
use std::any::Any;
use std::sync::Arc;

// The variables' names themselves: a string only `$literal` can spell, so no ordinary
// string result is taken for one of them.
const KEEP: &str = "$$KEEP";
const PRUNE: &str = "$$PRUNE";
const DESCEND: &str = "$$DESCEND";

#[derive(Debug, Clone)]
pub struct Redact {
    pub expr: Expression,
}

fn substitute(v: &Bson) -> Bson {
    match v {
        Bson::String(s) => match s.as_str() {
            KEEP | PRUNE | DESCEND => bson::bson!({"$literal": s.clone()}),
            _ => v.clone(),
        },
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k, v) in d {
                out.insert(k.clone(), substitute(v));
            }
            Bson::Document(out)
        }
        Bson::Array(a) => Bson::Array(a.iter().map(substitute).collect()),
        other => other.clone(),
    }
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(Redact {
        expr: Expression::parse(&substitute(arg), &pcx.exprs)?,
    })])
}

impl Redact {
    fn decide(&self, current: &Document, root: &Document, ctx: &ExpCtx) -> Result<&'static str> {
        let mut vars = ctx.variables(root);
        vars.set_current(Some(Bson::Document(current.clone())));
        match self.expr.evaluate(&mut vars)? {
            Some(Bson::String(s)) if s == KEEP => Ok(KEEP),
            Some(Bson::String(s)) if s == PRUNE => Ok(PRUNE),
            Some(Bson::String(s)) if s == DESCEND => Ok(DESCEND),
            other => Err(Error::new(
                ErrorCode::Location(17053),
                format!(
                    "$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned {}",
                    other.as_ref().map_or("MISSING".to_string(), nidus_common::shell::format)
                ),
            )),
        }
    }

    fn redact(&self, doc: &Document, root: &Document, ctx: &ExpCtx) -> Result<Option<Document>> {
        match self.decide(doc, root, ctx)? {
            KEEP => Ok(Some(doc.clone())),
            PRUNE => Ok(None),
            _ => {
                let mut out = Document::new();
                for (k, v) in doc {
                    if let Some(v) = self.redact_value(v, root, ctx)? {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Some(out))
            }
        }
    }

    fn redact_value(&self, v: &Bson, root: &Document, ctx: &ExpCtx) -> Result<Option<Bson>> {
        Ok(match v {
            Bson::Document(d) => self.redact(d, root, ctx)?.map(Bson::Document),
            Bson::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    if let Some(e) = self.redact_value(e, root, ctx)? {
                        out.push(e);
                    }
                }
                Some(Bson::Array(out))
            }
            other => Some(other.clone()),
        })
    }
}

impl DocumentSource for Redact {
    fn name(&self) -> &'static str {
        "$redact"
    }

    fn serialize(&self) -> Bson {
        self.expr.serialize()
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(RedactStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RedactStream {
    input: Stream,
    stage: Redact,
    ctx: ExpCtx,
}

impl DocStream for RedactStream {
    fn next(&mut self) -> Result<Option<Document>> {
        while let Some(d) = self.input.next()? {
            self.ctx.check_interrupt()?;
            if let Some(out) = self.stage.redact(&d, &d, &self.ctx)? {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }
}
