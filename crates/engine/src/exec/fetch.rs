use super::{Stage, StageImpl, StageState};
use crate::catalog::RecordStore;
use crate::txn::ReadSource;
use bson::{Document, RawDocumentBuf};
use nidus_common::Result;
use nidus_query::matcher::Matcher;
use nidus_storage::KvRead;
use std::sync::Arc;

/// `FETCH`: reads the document an index key points at (in the snapshot the key was read
/// in) and applies the part of the filter the index bounds did not answer.
pub struct Fetch {
    src: ReadSource,
    records: RecordStore,
    child: Box<Stage>,
    filter: Option<(Arc<Matcher>, Document)>,
    docs_examined: i64,
    already_has_obj: i64,
    /// Keeps each result's index key (for RETURN_KEY above); else it is dropped with the
    /// snapshot, the document standing for the key from here on.
    keep_key: bool,
}

impl Fetch {
    pub fn new(
        src: ReadSource,
        records: RecordStore,
        child: Stage,
        filter: Option<(Arc<Matcher>, Document)>,
    ) -> Fetch {
        Fetch {
            src,
            records,
            child: Box::new(child),
            filter,
            docs_examined: 0,
            already_has_obj: 0,
            keep_key: false,
        }
    }

    pub fn keeping_key(mut self, keep: bool) -> Fetch {
        self.keep_key = keep;
        self
    }
}

impl StageImpl for Fetch {
    fn name(&self) -> &'static str {
        "FETCH"
    }

    fn work(&mut self) -> Result<StageState> {
        let mut m = match self.child.work()? {
            StageState::Advanced(m) => m,
            other => return Ok(other),
        };
        if m.doc.is_some() {
            self.already_has_obj += 1;
        } else {
            let Some(rid) = m.rid else {
                return Ok(StageState::NeedTime);
            };
            let key = self.records.key(rid);
            let bytes = match &m.snapshot {
                Some(s) => s.get(self.records.space, &key)?,
                None => self.src.view()?.get(self.records.space, &key)?,
            };
            // The record went away between reading the key and here (a later snapshot).
            let Some(bytes) = bytes else {
                return Ok(StageState::NeedTime);
            };
            self.docs_examined += 1;
            m.doc = Some(RawDocumentBuf::from_bytes(bytes)?);
        }
        if let Some((matcher, _)) = &self.filter {
            if !matcher.matches(m.doc()?)? {
                return Ok(StageState::NeedTime);
            }
        }
        if !self.keep_key {
            m.key = None;
        }
        m.snapshot = None;
        Ok(StageState::Advanced(m))
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        if let Some((_, f)) = &self.filter {
            d.insert("filter", f.clone());
        }
        d.insert("docsExamined", self.docs_examined);
        d.insert("alreadyHasObj", self.already_has_obj);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
