//! `$listLocalSessions`: the sessions this server holds in memory, as
//! `{_id: {id, uid}, lastUse}` documents (the server hands them to the pipeline in
//! [`ExpCtx::local_sessions`]).

use super::{DocumentSource, ExpCtx, ParseCtx, Position, StageRef, Stream, VecStream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ListLocalSessions {
    spec: Document,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::type_mismatch(
            "$listLocalSessions options must be a nested Object",
        ));
    };
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("allUsers", Bson::Boolean(_)) | ("users", Bson::Array(_)) => {}
            ("allUsers" | "users", _) => {
                return Err(Error::type_mismatch(format!(
                    "BSON field 'ListSessionsSpec.{k}' is the wrong type"
                )))
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'ListSessionsSpec.{k}' is an unknown field."),
                ))
            }
        }
    }
    Ok(vec![Arc::new(ListLocalSessions { spec: spec.clone() })])
}

impl DocumentSource for ListLocalSessions {
    fn name(&self) -> &'static str {
        "$listLocalSessions"
    }

    fn serialize(&self) -> Bson {
        Bson::Document(self.spec.clone())
    }

    fn open(&self, _input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let docs = ctx.local_sessions.as_deref().cloned().unwrap_or_default();
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
