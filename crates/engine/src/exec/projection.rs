use super::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::{Error, Result};
use nidus_query::projection::Projection;
use std::sync::Arc;

/// `PROJECTION_SIMPLE` / `PROJECTION_DEFAULT`: reshapes each result of its child (its document,
/// or the document its index key describes when the plan is covered but not by one IXSCAN).
pub struct ProjectionStage {
    child: Box<Stage>,
    projection: Arc<Projection>,
    spec: Document,
    simple: bool,
}

impl ProjectionStage {
    /// `fetched`: the child returns documents (a simple projection of index keys is still
    /// PROJECTION_DEFAULT, as MongoDB names it).
    pub fn new(
        child: Stage,
        projection: Arc<Projection>,
        spec: Document,
        fetched: bool,
    ) -> ProjectionStage {
        let simple = fetched && projection.is_simple();
        ProjectionStage {
            child: Box::new(child),
            projection,
            spec,
            simple,
        }
    }
}

impl StageImpl for ProjectionStage {
    fn name(&self) -> &'static str {
        if self.simple {
            "PROJECTION_SIMPLE"
        } else {
            "PROJECTION_DEFAULT"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        match self.child.work()? {
            StageState::Advanced(m) => {
                let projected = self.projection.apply(&m.doc_or_key()?)?;
                let doc = nidus_common::encode::document_to_raw(&projected)
                    .map_err(|e| Error::internal(e.to_string()))?;
                Ok(StageState::Advanced(Member::with_doc(m.rid, doc)))
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
