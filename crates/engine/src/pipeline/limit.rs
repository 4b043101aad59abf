//! `$limit`: passes the first n documents.

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Limit {
    pub n: u64,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    if !super::is_number(arg) {
        return Err(Error::new(
            ErrorCode::Location(15957),
            "the limit must be specified as a number",
        ));
    }
    match super::exact_i64(arg) {
        Some(n) if n > 0 => Ok(vec![Arc::new(Limit { n: n as u64 })]),
        Some(_) => Err(Error::new(
            ErrorCode::Location(15958),
            "the limit must be positive",
        )),
        None => Err(Error::new(
            ErrorCode::Location(15957),
            format!(
                "invalid argument to $limit stage: Cannot represent as a 64-bit integer: $limit: {}",
                nidus_expr::value::display_bson(arg)
            ),
        )),
    }
}

impl DocumentSource for Limit {
    fn name(&self) -> &'static str {
        "$limit"
    }

    fn serialize(&self) -> Bson {
        Bson::Int64(self.n as i64)
    }

    fn open(&self, input: Stream, _ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(LimitStream {
            input,
            left: self.n,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct LimitStream {
    input: Stream,
    left: u64,
}

impl DocStream for LimitStream {
    fn next(&mut self) -> Result<Option<Document>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.input.next()
    }
}
