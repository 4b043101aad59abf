use super::{Member, Stage, StageImpl, StageState};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::{Error, Result};
use nidus_query::projection::Projection;
use std::sync::Arc;

/// `PROJECTION_COVERED`: builds the projected document from the index key alone.
pub struct ProjectionCovered {
    child: Box<Stage>,
    projection: Arc<Projection>,
    spec: Document,
    /// Key pattern paths, in key order.
    paths: Vec<String>,
}

impl ProjectionCovered {
    pub fn new(
        child: Stage,
        projection: Arc<Projection>,
        spec: Document,
        paths: Vec<String>,
    ) -> Self {
        ProjectionCovered {
            child: Box::new(child),
            projection,
            spec,
            paths,
        }
    }

    fn key_document(&self, values: &[Bson]) -> Document {
        let mut d = Document::new();
        for (path, v) in self.paths.iter().zip(values) {
            set_path(&mut d, path, v.clone());
        }
        d
    }
}

fn set_path(d: &mut Document, path: &str, v: Bson) {
    match path.split_once('.') {
        None => {
            d.insert(path, v);
        }
        Some((head, rest)) => {
            if !matches!(d.get(head), Some(Bson::Document(_))) {
                d.insert(head, Document::new());
            }
            if let Some(Bson::Document(sub)) = d.get_mut(head) {
                set_path(sub, rest, v);
            }
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
                let values = m.key.as_deref().unwrap_or(&[]);
                let raw = RawDocumentBuf::from_document(&self.key_document(values))
                    .map_err(|e| Error::internal(e.to_string()))?;
                let projected = self.projection.apply(&raw)?;
                let doc = RawDocumentBuf::from_document(&projected)
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
