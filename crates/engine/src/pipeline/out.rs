//! `$out: "<coll>"` or `{db, coll}`: replaces a collection with the pipeline's results.
//!
//! The results are written to a temporary collection (created with the target's indexes),
//! which then replaces the target by a rename, so readers see the old or the new contents,
//! never a mix. On any error the temporary collection is dropped and the target is left
//! alone. Produces no documents. On a secondary (`ExpCtx::primary`) the same steps run as
//! commands on the primary, with the documents read here.

use super::stream::{Deferred, Empty};
use super::{DocumentSource, ExpCtx, ParseCtx, Position, PrimaryWrites, StageRef, Stream};
use crate::namespace::Namespace;
use crate::write::{prepare_insert, WriteOpts};
use bson::{Bson, Document};
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

/// Documents per `insert` command sent to the primary, and their size bound (under the
/// 16 MiB document limit the command body has, like MongoDB's write batches).
pub(super) const REMOTE_BATCH_DOCS: usize = 1000;
pub(super) const REMOTE_BATCH_BYTES: usize = 8 * 1024 * 1024;

impl Out {
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        if let Some(primary) = &ctx.primary {
            return self.run_on_primary(input, ctx, primary.as_ref());
        }
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
                    .map(|ix| (*ix.spec).clone())
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
                let raw = nidus_common::encode::document_to_raw(&d)
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

    /// The steps of [`Out::run`] as commands on the primary: create the temporary
    /// collection, copy the target's indexes, insert in batches, rename over the target;
    /// on any error drop the temporary collection.
    fn run_on_primary(
        &self,
        mut input: Stream,
        ctx: &ExpCtx,
        primary: &dyn PrimaryWrites,
    ) -> Result<Stream> {
        let db = self.target.db.as_str();
        let temp = format!("tmp.agg_out.{}", bson::oid::ObjectId::new().to_hex());
        primary.run(db, bson::doc! {"create": &temp})?;
        let written = (|| {
            let specs = match primary.run(
                db,
                bson::doc! {"listIndexes": &self.target.coll, "cursor": {"batchSize": 1000}},
            ) {
                Ok(reply) => reply
                    .get_document("cursor")
                    .and_then(|c| c.get_array("firstBatch"))
                    .map(|b| {
                        b.iter()
                            .filter_map(Bson::as_document)
                            .filter(|spec| spec.get_str("name") != Ok("_id_"))
                            .cloned()
                            .map(Bson::Document)
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default(),
                Err(e) if e.code == ErrorCode::NamespaceNotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            if !specs.is_empty() {
                primary.run(db, bson::doc! {"createIndexes": &temp, "indexes": specs})?;
            }
            let mut batch: Vec<Bson> = Vec::new();
            let mut bytes = 0;
            let send = |batch: &mut Vec<Bson>| -> Result<()> {
                if !batch.is_empty() {
                    let documents = std::mem::take(batch);
                    primary.run(
                        db,
                        bson::doc! {"insert": &temp, "documents": documents, "ordered": true},
                    )?;
                }
                Ok(())
            };
            while let Some(d) = input.next()? {
                ctx.check_interrupt()?;
                let raw = nidus_common::encode::document_to_raw(&d)
                    .map_err(|e| Error::internal(e.to_string()))?;
                if !batch.is_empty()
                    && (batch.len() >= REMOTE_BATCH_DOCS
                        || bytes + raw.as_bytes().len() > REMOTE_BATCH_BYTES)
                {
                    send(&mut batch)?;
                    bytes = 0;
                }
                bytes += raw.as_bytes().len();
                batch.push(Bson::Document(d));
            }
            send(&mut batch)?;
            primary
                .run(
                    "admin",
                    bson::doc! {
                        "renameCollection": format!("{db}.{temp}"),
                        "to": self.target.to_string(),
                        "dropTarget": true,
                    },
                )
                .map(|_| ())
        })();
        if let Err(e) = written {
            let _ = primary.run(db, bson::doc! {"drop": &temp});
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
