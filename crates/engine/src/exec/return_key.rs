use super::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::{Error, Result};

/// `RETURN_KEY` (`find`'s `returnKey`): each result becomes the index key it was found by,
/// under the key pattern's field names as written (`{"a.b": 1}`, not nested), or `{}` when
/// no index scan produced it (a collection scan). The result has no record id any more, so
/// `showRecordId` adds none to it (as MongoDB's stage clears it).
pub struct ReturnKey {
    child: Box<Stage>,
}

impl ReturnKey {
    pub fn new(child: Stage) -> ReturnKey {
        ReturnKey {
            child: Box::new(child),
        }
    }
}

impl StageImpl for ReturnKey {
    fn name(&self) -> &'static str {
        "RETURN_KEY"
    }

    fn work(&mut self) -> Result<StageState> {
        let m = match self.child.work()? {
            StageState::Advanced(m) => m,
            other => return Ok(other),
        };
        let mut key = Document::new();
        if let Some(k) = &m.key {
            for (path, v) in k.paths.iter().zip(&k.values) {
                key.insert(path.clone(), v.clone());
            }
        }
        let doc = nidus_common::encode::document_to_raw(&key)
            .map_err(|e| Error::internal(e.to_string()))?;
        Ok(StageState::Advanced(Member::with_doc(None, doc)))
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
