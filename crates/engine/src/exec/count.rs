use super::{Member, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;
use std::collections::VecDeque;

/// `COUNT`: counts its child's results after skipping `skip`, up to `limit` (0 = no limit),
/// returning none itself; `count` reads `nCounted`.
pub struct Count {
    child: Box<Stage>,
    /// Results the child produced before it was wrapped (the multi-planner's trial).
    produced: VecDeque<Member>,
    skip: u64,
    limit: u64,
    n_counted: u64,
    n_skipped: u64,
}

impl Count {
    pub fn new(child: Stage, produced: VecDeque<Member>, skip: u64, limit: u64) -> Count {
        Count {
            child: Box::new(child),
            produced,
            skip,
            limit,
            n_counted: 0,
            n_skipped: 0,
        }
    }
}

impl StageImpl for Count {
    fn name(&self) -> &'static str {
        "COUNT"
    }

    fn work(&mut self) -> Result<StageState> {
        if self.limit > 0 && self.n_counted >= self.limit {
            return Ok(StageState::IsEof);
        }
        let state = match self.produced.pop_front() {
            Some(m) => StageState::Advanced(m),
            None => self.child.work()?,
        };
        match state {
            StageState::Advanced(_) if self.n_skipped < self.skip => self.n_skipped += 1,
            StageState::Advanced(_) => self.n_counted += 1,
            StageState::NeedTime => {}
            StageState::IsEof => return Ok(StageState::IsEof),
        }
        Ok(StageState::NeedTime)
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("nCounted", self.n_counted as i64);
        d.insert("nSkipped", self.n_skipped as i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}

/// `RECORD_STORE_FAST_COUNT`: a count with no filter, answered from the collection's
/// document count without reading anything.
pub struct RecordStoreFastCount {
    n_counted: u64,
    n_skipped: u64,
}

impl RecordStoreFastCount {
    pub fn new(records: u64, skip: u64, limit: u64) -> RecordStoreFastCount {
        let n_skipped = skip.min(records);
        let left = records - n_skipped;
        RecordStoreFastCount {
            n_counted: if limit > 0 { left.min(limit) } else { left },
            n_skipped,
        }
    }
}

impl StageImpl for RecordStoreFastCount {
    fn name(&self) -> &'static str {
        "RECORD_STORE_FAST_COUNT"
    }

    fn work(&mut self) -> Result<StageState> {
        Ok(StageState::IsEof)
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("nCounted", self.n_counted as i64);
        d.insert("nSkipped", self.n_skipped as i64);
        d
    }
}
