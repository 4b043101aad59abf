//! `$addFields` (and its alias `$set`): computes fields and sets them at their paths,
//! keeping the rest of the document. The semantics live in
//! `nidus_query::projection::add_fields` (shared with pipeline-style updates); this stage
//! streams documents through it with the pipeline's variables.

use super::{DocStream, DocumentSource, ExpCtx, Modified, ParseCtx, StageRef, Stream};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::projection::add_fields::AddFields as Spec;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct AddFields {
    /// `$addFields` or `$set` (explain prints the name used).
    name: &'static str,
    spec: Arc<Spec>,
}

pub fn parse_add_fields(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(AddFields::parse("$addFields", arg, pcx)?)])
}

pub fn parse_set(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    Ok(vec![Arc::new(AddFields::parse("$set", arg, pcx)?)])
}

impl AddFields {
    fn parse(name: &'static str, arg: &Bson, pcx: &ParseCtx) -> Result<AddFields> {
        let Bson::Document(spec) = arg else {
            return Err(Error::new(
                ErrorCode::Location(40272),
                format!(
                    "{name} specification stage must be an object, got {}",
                    super::type_name(arg)
                ),
            ));
        };
        Ok(AddFields {
            name,
            spec: Arc::new(Spec::parse_in_context(name, spec, &pcx.exprs)?),
        })
    }

    /// Sets the computed fields on `doc`.
    pub fn apply(&self, doc: &Document, ctx: &ExpCtx) -> Result<Document> {
        let raw = nidus_common::encode::document_to_raw(doc)
            .map_err(|e| Error::internal(e.to_string()))?;
        self.spec.apply_bound(&raw, ctx)
    }
}

impl DocumentSource for AddFields {
    fn name(&self) -> &'static str {
        self.name
    }

    fn serialize(&self) -> Bson {
        Bson::Document(self.spec.serialize())
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(AddFieldsStream {
            input,
            stage: self.clone(),
            ctx: ctx.clone(),
        }))
    }

    fn modified(&self) -> Modified {
        Modified::Paths(self.spec.paths())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct AddFieldsStream {
    input: Stream,
    stage: AddFields,
    ctx: ExpCtx,
}

impl DocStream for AddFieldsStream {
    fn next(&mut self) -> Result<Option<Document>> {
        let Some(d) = self.input.next()? else {
            return Ok(None);
        };
        let out = self.stage.apply(&d, &self.ctx)?;
        super::context::check_size(&out)?;
        Ok(Some(out))
    }
}
