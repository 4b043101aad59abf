use super::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;
use std::collections::VecDeque;

/// `DELETE` / `BATCHED_DELETE` as explain runs them: counts the documents its child returns
/// (one unless `multi`) as would-be deletions; nothing is removed. MongoDB 8.0 deletes many
/// documents (no sort, none returned) through `BATCHED_DELETE`, one through `DELETE`.
pub struct DeleteExplain {
    child: Box<Stage>,
    /// Results the multi-planner's trial already produced, consumed before the child.
    pending: VecDeque<Member>,
    multi: bool,
    /// findAndModify's `remove`: hand the document back.
    return_deleted: bool,
    batched: bool,
    docs_deleted: i64,
}

impl DeleteExplain {
    pub fn new(
        child: Stage,
        pending: VecDeque<Member>,
        multi: bool,
        return_deleted: bool,
        sorted: bool,
    ) -> DeleteExplain {
        DeleteExplain {
            child: Box::new(child),
            pending,
            multi,
            return_deleted,
            batched: multi && !return_deleted && !sorted,
            docs_deleted: 0,
        }
    }

    fn finished(&self) -> bool {
        (self.pending.is_empty() && self.child.common.is_eof)
            || (self.docs_deleted > 0 && !self.multi)
    }
}

impl StageImpl for DeleteExplain {
    fn name(&self) -> &'static str {
        if self.batched {
            "BATCHED_DELETE"
        } else {
            "DELETE"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        if self.finished() {
            return Ok(StageState::IsEof);
        }
        let m = match self.pending.pop_front() {
            Some(m) => m,
            None => match self.child.work()? {
                StageState::Advanced(m) => m,
                other => return Ok(other),
            },
        };
        self.docs_deleted += 1;
        Ok(if self.return_deleted {
            StageState::Advanced(m)
        } else {
            StageState::NeedTime
        })
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("nWouldDelete", self.docs_deleted);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
