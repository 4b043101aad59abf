//! `$replaceRoot: {newRoot: <expr>}` and its alias `$replaceWith: <expr>`: each document
//! becomes the value of an expression, which must be an object. The semantics live in
//! `nidus_query::projection::replace_root` (shared with pipeline-style updates).

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use nidus_query::projection::replace_root::ReplaceRoot as Spec;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ReplaceRoot {
    spec: Arc<Spec>,
}

pub fn parse_replace_root(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = Spec::replace_root_in(arg, &pcx.exprs)?;
    Ok(vec![Arc::new(ReplaceRoot {
        spec: Arc::new(spec),
    })])
}

pub fn parse_replace_with(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = Spec::replace_with_in(arg, &pcx.exprs)?;
    Ok(vec![Arc::new(ReplaceRoot {
        spec: Arc::new(spec),
    })])
}

impl DocumentSource for ReplaceRoot {
    fn name(&self) -> &'static str {
        "$replaceRoot"
    }

    fn serialize(&self) -> Bson {
        bson::bson!({"newRoot": self.spec.new_root().serialize()})
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(ReplaceRootStream {
            input,
            spec: self.spec.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ReplaceRootStream {
    input: Stream,
    spec: Arc<Spec>,
    ctx: ExpCtx,
}

impl DocStream for ReplaceRootStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        let raw = nidus_common::encode::document_to_raw(&d)
            .map_err(|e| Error::internal(e.to_string()))?;
        Ok(Some(self.spec.apply_bound(&raw, &self.ctx)?))
    }
}
