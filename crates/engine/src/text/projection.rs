//! The projection of a `$text` query's results, where `{$meta: "textScore"}` reads the
//! score TEXT_OR gave each document.

use crate::exec::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::{Error, Result};
use nidus_query::projection::Projection;
use std::sync::Arc;

pub struct TextProjection {
    child: Box<Stage>,
    projection: Arc<Projection>,
    spec: Document,
}

impl TextProjection {
    pub fn new(child: Stage, projection: Arc<Projection>, spec: Document) -> TextProjection {
        TextProjection {
            child: Box::new(child),
            projection,
            spec,
        }
    }
}

impl StageImpl for TextProjection {
    fn name(&self) -> &'static str {
        if self.projection.is_simple() {
            "PROJECTION_SIMPLE"
        } else {
            "PROJECTION_DEFAULT"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        match self.child.work()? {
            StageState::Advanced(m) => {
                let doc = m.doc()?;
                let projected = match m.text_score {
                    Some(score) => self.projection.apply_with_text_score(doc, score)?,
                    None => self.projection.apply(doc)?,
                };
                let doc = nidus_common::encode::document_to_raw(&projected)
                    .map_err(|e| Error::internal(e.to_string()))?;
                let mut out = Member::with_doc(m.rid, doc);
                out.text_score = m.text_score;
                Ok(StageState::Advanced(out))
            }
            other => Ok(other),
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("transformBy", self.spec.clone());
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
