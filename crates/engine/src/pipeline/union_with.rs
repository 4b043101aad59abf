//! `$unionWith`: the input documents, then the results of a pipeline over another
//! collection (`"coll"` or `{coll, pipeline}`).

use super::{run, stage_document, DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use crate::namespace::Namespace;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct UnionWith {
    pub coll: Option<Namespace>,
    pub pipeline: Vec<StageRef>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let (coll, pipeline) = match arg {
        Bson::String(c) => (Some(c.clone()), Vec::<Bson>::new()),
        Bson::Document(d) => {
            let mut coll = None;
            let mut pipeline = None;
            for (k, v) in d {
                match (k.as_str(), v) {
                    ("coll", Bson::String(c)) => coll = Some(c.clone()),
                    ("pipeline", Bson::Array(items)) => pipeline = Some(items.clone()),
                    ("coll", other) | ("pipeline", other) => {
                        let want = if k == "coll" { "string" } else { "array" };
                        return Err(Error::new(
                            ErrorCode::TypeMismatch,
                            format!(
                                "BSON field '$unionWith.{k}' is the wrong type '{}', expected type '{want}'",
                                super::type_name(other)
                            ),
                        ));
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorCode::Location(40415),
                            format!("BSON field '$unionWith.{k}' is an unknown field."),
                        ))
                    }
                }
            }
            (coll, pipeline.unwrap_or_default())
        }
        other => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                format!(
                    "the $unionWith stage specification must be an object or string, but found {}",
                    super::type_name(other)
                ),
            ))
        }
    };
    let coll = coll.map(|c| Namespace::new(&pcx.db, &c));
    let pipeline = pcx.parse_sub_pipeline(coll.as_ref(), &pipeline)?;
    super::reject_writing_stage(&pipeline, "$unionWith", 31441)?;
    let source_first = pipeline.first().is_some_and(|s| s.is_source());
    if coll.is_none() && !source_first {
        return Err(Error::new(
            ErrorCode::Location(40414),
            "BSON field '$unionWith.coll' is missing but a required field",
        ));
    }
    Ok(vec![Arc::new(UnionWith { coll, pipeline })])
}

impl DocumentSource for UnionWith {
    fn name(&self) -> &'static str {
        "$unionWith"
    }

    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        if let Some(ns) = &self.coll {
            d.insert("coll", ns.coll.clone());
        }
        let items: Vec<Bson> = self
            .pipeline
            .iter()
            .map(|s| Bson::Document(stage_document(s.as_ref())))
            .collect();
        d.insert("pipeline", items);
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(UnionStream {
            input: Some(input),
            other: None,
            stage: self.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct UnionStream {
    input: Option<Stream>,
    other: Option<Stream>,
    stage: UnionWith,
    ctx: ExpCtx,
}

impl DocStream for UnionStream {
    fn next(&mut self) -> Result<Option<Document>> {
        if let Some(input) = &mut self.input {
            if let Some(d) = input.next()? {
                return Ok(Some(d));
            }
            self.input = None;
            let opened = run::open(
                &self.ctx,
                self.stage.coll.as_ref(),
                &self.stage.pipeline,
                None,
            )?;
            self.other = Some(opened.stream);
        }
        match &mut self.other {
            Some(s) => s.next(),
            None => Ok(None),
        }
    }
}
