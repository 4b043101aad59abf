use super::{Member, StageImpl, StageState};
use bson::RawDocumentBuf;
use nidus_common::Result;
use std::collections::VecDeque;

/// `QUEUED_DATA`: results computed ahead of time (catalog listings, in-memory pipelines).
pub struct QueuedData {
    docs: VecDeque<RawDocumentBuf>,
}

impl QueuedData {
    pub fn new(docs: Vec<RawDocumentBuf>) -> QueuedData {
        QueuedData { docs: docs.into() }
    }
}

impl StageImpl for QueuedData {
    fn name(&self) -> &'static str {
        "QUEUED_DATA"
    }

    fn work(&mut self) -> Result<StageState> {
        Ok(match self.docs.pop_front() {
            Some(doc) => StageState::Advanced(Member::with_doc(None, doc)),
            None => StageState::IsEof,
        })
    }
}
