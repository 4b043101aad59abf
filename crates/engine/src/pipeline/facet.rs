//! `$facet: {<name>: [<stage>, ...], ...}`: runs every sub-pipeline over the whole input and
//! returns one document holding each sub-pipeline's results as an array.

use super::context::{check_size, doc_bytes};
use super::stream::Deferred;
use super::{run, stage_document, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use std::any::Any;
use std::sync::Arc;

/// Stages that cannot run inside a facet (they read a collection themselves or write).
const NOT_IN_FACET: &[&str] = &[
    "$facet",
    "$out",
    "$merge",
    "$documents",
    "$unionWith",
    "$planCacheStats",
];

#[derive(Debug, Clone)]
pub struct Facet {
    pub facets: Vec<(String, Vec<StageRef>)>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = match arg {
        Bson::Document(d) if !d.is_empty() => d,
        _ => {
            return Err(Error::location(
                40169,
                format!(
                    "the $facet specification must be a non-empty object, but found: {}",
                    nidus_common::shell::format(arg)
                ),
            ))
        }
    };
    let mut facets = Vec::new();
    for (name, v) in spec {
        if name.is_empty() || name.starts_with('$') || name.contains('.') {
            return Err(Error::location(
                40174,
                format!(
                    "$facet field names must not be empty, start with '$' or contain '.': {name}"
                ),
            ));
        }
        let Bson::Array(items) = v else {
            return Err(Error::location(
                40170,
                format!(
                    "arguments to $facet must be arrays, {name} is type {}",
                    super::type_name(v)
                ),
            ));
        };
        if items.is_empty() {
            return Err(Error::location(
                40171,
                format!("sub-pipeline in $facet stage cannot be empty: {name}"),
            ));
        }
        let stages = super::parse_pipeline(items, pcx)?;
        if let Some(bad) = stages.iter().find(|s| NOT_IN_FACET.contains(&s.name())) {
            return Err(Error::location(
                40600,
                format!(
                    "{} is not allowed to be used within a $facet stage",
                    bad.name()
                ),
            ));
        }
        facets.push((name.clone(), stages));
    }
    Ok(vec![Arc::new(Facet { facets })])
}

impl Facet {
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let mut docs = Vec::new();
        let mut memory = ctx.memory("$facet");
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            memory.add(doc_bytes(&d))?;
            docs.push(d);
        }
        let mut out = Document::new();
        for (name, stages) in &self.facets {
            let results = run::collect(ctx, None, stages, Some(VecStream::boxed(docs.clone())))?;
            out.insert(
                name.clone(),
                results.into_iter().map(Bson::Document).collect::<Vec<_>>(),
            );
        }
        check_size(&out)?;
        Ok(VecStream::boxed(vec![out]))
    }
}

impl DocumentSource for Facet {
    fn name(&self) -> &'static str {
        "$facet"
    }

    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        for (name, stages) in &self.facets {
            let items: Vec<Bson> = stages
                .iter()
                .map(|s| Bson::Document(stage_document(s.as_ref())))
                .collect();
            d.insert(name.clone(), items);
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Facet, input, ctx| stage.run(input, ctx),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
