//! `$out: "<coll>"` or `{db, coll}`: replaces a collection with the pipeline's results.
//!
//! The results are written to a temporary collection (created with the target's indexes),
//! which then replaces the target by a rename, so readers see the old or the new contents,
//! never a mix. On any error the temporary collection is dropped and the target is left
//! alone. Produces no documents.

use super::stream::{Deferred, Empty};
use super::{DocumentSource, ExpCtx, ParseCtx, Position, StageRef, Stream};
use crate::namespace::Namespace;
use crate::write::{prepare_insert, WriteOpts};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Out {
    pub target: Namespace,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let target = match arg {
        Bson::String(c) => Namespace::new(&pcx.db, c),
        Bson::Document(d) => {
            let db = match d.get("db") {
                Some(Bson::String(s)) => s.clone(),
                None => pcx.db.clone(),
                Some(other) => return Err(wrong_type("db", other)),
            };
            let coll = match d.get("coll") {
                Some(Bson::String(s)) => s.clone(),
                Some(other) => return Err(wrong_type("coll", other)),
                None => {
                    return Err(Error::new(
                        ErrorCode::Location(40414),
                        "BSON field 'coll' is missing but a required field",
                    ))
                }
            };
            if let Some(k) = d
                .keys()
                .find(|k| !matches!(k.as_str(), "db" | "coll" | "timeseries"))
            {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field '$out.{k}' is an unknown field."),
                ));
            }
            Namespace::new(&db, &coll)
        }
        other => {
            return Err(Error::new(
                ErrorCode::Location(16990),
                format!(
                    "$out only supports a string or object argument, not {}",
                    super::type_name(other)
                ),
            ))
        }
    };
    crate::namespace::validate_coll_name(&target.db, &target.coll)?;
    Ok(vec![Arc::new(Out { target })])
}

fn wrong_type(field: &str, v: &Bson) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '$out.{field}' is the wrong type '{}', expected type 'string'",
            super::type_name(v)
        ),
    )
}

impl Out {
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let engine = &ctx.engine;
        let temp = Namespace::new(
            &self.target.db,
            &format!("tmp.agg_out.{}", bson::oid::ObjectId::new().to_hex()),
        );
        let coll = engine.create_collection(&temp, Document::new())?;
        let written = (|| {
            if let Some(existing) = engine.collection(&self.target) {
                let specs: Vec<Document> = existing
                    .meta
                    .read()
                    .indexes
                    .iter()
                    .filter(|ix| !ix.is_id())
                    .map(|ix| ix.spec.clone())
                    .collect();
                if !specs.is_empty() {
                    engine.create_indexes(&temp, &specs)?;
                }
            }
            let opts = WriteOpts {
                deadline: ctx.deadline(),
                ..WriteOpts::default()
            };
            while let Some(d) = input.next()? {
                ctx.check_interrupt()?;
                let raw = RawDocumentBuf::from_document(&d)
                    .map_err(|e| Error::internal(e.to_string()))?;
                let prepared = prepare_insert(&raw)?;
                engine.insert_one(&coll, &prepared, &opts)?;
            }
            engine.rename_collection(&temp, &self.target, true)
        })();
        if let Err(e) = written {
            let _ = engine.drop_collection(&temp);
            return Err(e);
        }
        Ok(Box::new(Empty))
    }
}

impl DocumentSource for Out {
    fn name(&self) -> &'static str {
        "$out"
    }

    fn serialize(&self) -> Bson {
        bson::bson!({"db": self.target.db.clone(), "coll": self.target.coll.clone()})
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Out, input, ctx| stage.run(input, ctx),
        )))
    }

    fn position(&self) -> Position {
        Position::Last
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
