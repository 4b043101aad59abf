//! `$replaceRoot: {newRoot: <expr>}` and its alias `$replaceWith: <expr>`: each document
//! becomes the value of an expression, which must be an object.

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::Expression;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ReplaceRoot {
    pub new_root: Expression,
}

pub fn parse_replace_root(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = super::object_arg(arg, 40229, || {
        format!(
            "expected an object as specification for $replaceRoot stage, got {}",
            super::type_name(arg)
        )
    })?;
    let mut new_root = None;
    for (k, v) in spec {
        if k != "newRoot" {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field '$replaceRoot.{k}' is an unknown field."),
            ));
        }
        new_root = Some(Expression::parse(v, &pcx.exprs)?);
    }
    let new_root = new_root.ok_or_else(|| {
        Error::new(
            ErrorCode::Location(40414),
            "BSON field '$replaceRoot.newRoot' is missing but a required field",
        )
    })?;
    Ok(vec![Arc::new(ReplaceRoot { new_root })])
}

pub fn parse_replace_with(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(ReplaceRoot {
        new_root: Expression::parse(arg, &pcx.exprs)?,
    })])
}

impl DocumentSource for ReplaceRoot {
    fn name(&self) -> &'static str {
        "$replaceRoot"
    }

    fn serialize(&self) -> Bson {
        bson::bson!({"newRoot": self.new_root.serialize()})
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(ReplaceRootStream {
            input,
            new_root: self.new_root.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ReplaceRootStream {
    input: Stream,
    new_root: Expression,
    ctx: ExpCtx,
}

impl DocStream for ReplaceRootStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        match self.ctx.evaluate(&self.new_root, &d)? {
            Some(Bson::Document(out)) => Ok(Some(out)),
            other => Err(Error::new(
                ErrorCode::Location(40228),
                format!(
                    "'newRoot' expression must evaluate to an object, but resulting value was: {}. Type of resulting value: '{}'. Input document: {}",
                    other.as_ref().map_or("MISSING".to_string(), nidus_common::shell::format),
                    nidus_expr::value::type_name(&other),
                    nidus_common::shell::format(&Bson::Document(d.clone())),
                ),
            )),
        }
    }
}
