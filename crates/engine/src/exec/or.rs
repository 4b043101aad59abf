use super::{Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;
use std::collections::HashSet;

/// `OR`: the results of its children one child after another (the index scans of an
/// indexed `$or`, one per clause), dropping record ids an earlier clause already returned.
pub struct OrStage {
    children: Vec<Stage>,
    current: usize,
    seen: HashSet<u64>,
    dups_tested: i64,
    dups_dropped: i64,
}

impl OrStage {
    pub fn new(children: Vec<Stage>) -> OrStage {
        OrStage {
            children,
            current: 0,
            seen: HashSet::new(),
            dups_tested: 0,
            dups_dropped: 0,
        }
    }
}

impl StageImpl for OrStage {
    fn name(&self) -> &'static str {
        "OR"
    }

    fn work(&mut self) -> Result<StageState> {
        let Some(child) = self.children.get_mut(self.current) else {
            return Ok(StageState::IsEof);
        };
        match child.work()? {
            StageState::Advanced(m) => {
                if let Some(rid) = m.rid {
                    self.dups_tested += 1;
                    if !self.seen.insert(rid) {
                        self.dups_dropped += 1;
                        return Ok(StageState::NeedTime);
                    }
                }
                Ok(StageState::Advanced(m))
            }
            StageState::NeedTime => Ok(StageState::NeedTime),
            StageState::IsEof => {
                self.current += 1;
                Ok(if self.current < self.children.len() {
                    StageState::NeedTime
                } else {
                    StageState::IsEof
                })
            }
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("dupsTested", self.dups_tested);
        d.insert("dupsDropped", self.dups_dropped);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        self.children.iter().collect()
    }
}
