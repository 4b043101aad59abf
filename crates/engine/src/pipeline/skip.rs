//! `$skip`: drops the first n documents.

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Skip {
    pub n: u64,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    match super::exact_i64(arg) {
        Some(n) if n >= 0 => Ok(vec![Arc::new(Skip { n: n as u64 })]),
        Some(n) => Err(Error::new(
            ErrorCode::Location(15956),
            format!("invalid argument to $skip stage: Cannot be negative, value: {n}"),
        )),
        None => Err(Error::new(
            ErrorCode::Location(15972),
            "invalid argument to $skip stage: Argument must be a number",
        )),
    }
}

impl DocumentSource for Skip {
    fn name(&self) -> &'static str {
        "$skip"
    }

    fn serialize(&self) -> Bson {
        Bson::Int64(self.n as i64)
    }

    fn open(&self, input: Stream, _ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(SkipStream {
            input,
            left: self.n,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct SkipStream {
    input: Stream,
    left: u64,
}

impl DocStream for SkipStream {
    fn next(&mut self) -> Result<Option<Document>> {
        while self.left > 0 {
            if self.input.next()?.is_none() {
                self.left = 0;
                return Ok(None);
            }
            self.left -= 1;
        }
        self.input.next()
    }
}
