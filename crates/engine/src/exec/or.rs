use super::{RecordIdDedup, Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;

/// `OR`: the results of its children one child after another (the index scans of an
/// indexed `$or`, one per clause), dropping record ids an earlier clause already returned.
pub struct OrStage {
    children: Vec<Stage>,
    current: usize,
    dedup: RecordIdDedup,
}

impl OrStage {
    pub fn new(children: Vec<Stage>) -> OrStage {
        OrStage {
            children,
            current: 0,
            dedup: RecordIdDedup::default(),
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
                    if !self.dedup.first_time(rid) {
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
        self.dedup.add_stats(&mut d);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        self.children.iter().collect()
    }
}
