//! `$documents: <array expression>`: a source stage producing the given documents (the
//! first stage of a collectionless `aggregate: 1`, or of a `$lookup`/`$unionWith`
//! sub-pipeline).

use super::{DocumentSource, ExpCtx, ParseCtx, Position, StageRef, Stream, VecStream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::Expression;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Documents {
    pub expr: Expression,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(Documents {
        expr: Expression::parse(arg, &pcx.exprs)?,
    })])
}

impl DocumentSource for Documents {
    fn name(&self) -> &'static str {
        "$documents"
    }

    fn serialize(&self) -> Bson {
        self.expr.serialize()
    }

    fn open(&self, _input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let empty = Document::new();
        let items = match ctx.evaluate(&self.expr, &empty)? {
            Some(Bson::Array(items)) => items,
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(5858203),
                    "error during $documents: an array is expected",
                ))
            }
        };
        let docs = items
            .into_iter()
            .map(|v| match v {
                Bson::Document(d) => Ok(d),
                other => Err(Error::new(
                    ErrorCode::TypeMismatch,
                    format!(
                        "$documents expects an array of objects, found {}",
                        super::type_name(&other)
                    ),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VecStream::boxed(docs))
    }

    fn position(&self) -> Position {
        Position::First
    }

    fn is_source(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
