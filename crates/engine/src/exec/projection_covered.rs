use super::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::{Error, Result};
use nidus_query::projection::Projection;
use std::sync::Arc;

/// `PROJECTION_COVERED`: projects the document its child's index key describes (the child is
/// one IXSCAN whose key holds every field the projection needs).
pub struct ProjectionCovered {
    child: Box<Stage>,
    projection: Arc<Projection>,
    spec: Document,
}

impl ProjectionCovered {
    pub fn new(child: Stage, projection: Arc<Projection>, spec: Document) -> Self {
        ProjectionCovered {
            child: Box::new(child),
            projection,
            spec,
        }
    }
}

impl StageImpl for ProjectionCovered {
    fn name(&self) -> &'static str {
        "PROJECTION_COVERED"
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
