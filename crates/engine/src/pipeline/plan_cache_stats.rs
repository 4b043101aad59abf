//! `$planCacheStats: {}`: one document per plan cache entry of the pipeline's collection
//! (the first stage only; what `db.coll.getPlanCache().list()` runs).

use super::{DocumentSource, ExpCtx, ParseCtx, Position, StageRef, Stream, VecStream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct PlanCacheStats;

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(opts) = arg else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "$planCacheStats value must be an object",
        ));
    };
    for (k, v) in opts {
        match (k.as_str(), v) {
            // Only meaningful on a sharded cluster, where `true` reaches every host.
            ("allHosts", Bson::Boolean(false)) => {}
            ("allHosts", Bson::Boolean(true)) => return Err(Error::new(
                ErrorCode::Location(4503200),
                "$planCacheStats stage does not support allHosts:true outside of a sharded cluster",
            )),
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field '$planCacheStats.{k}' is an unknown field."),
                ))
            }
        }
    }
    Ok(vec![Arc::new(PlanCacheStats)])
}

impl DocumentSource for PlanCacheStats {
    fn name(&self) -> &'static str {
        "$planCacheStats"
    }

    fn serialize(&self) -> Bson {
        Bson::Document(Document::new())
    }

    fn open(&self, _input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let coll = ctx
            .namespace
            .as_ref()
            .and_then(|ns| ctx.engine.collection(ns));
        let host = nidus_common::hostname();
        let docs = coll
            .map(|c| {
                c.plan_cache
                    .entries(&c.meta.read().indexes)
                    .iter()
                    .map(|e| e.stats_document(&host))
                    .collect()
            })
            .unwrap_or_default();
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
