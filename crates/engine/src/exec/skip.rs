use super::{Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;

/// `SKIP`: drops the first `n` results of its child.
pub struct Skip {
    child: Box<Stage>,
    to_skip: u64,
    skip_amount: u64,
}

impl Skip {
    pub fn new(child: Stage, n: u64) -> Skip {
        Skip {
            child: Box::new(child),
            to_skip: n,
            skip_amount: n,
        }
    }
}

impl StageImpl for Skip {
    fn name(&self) -> &'static str {
        "SKIP"
    }

    fn work(&mut self) -> Result<StageState> {
        match self.child.work()? {
            StageState::Advanced(_) if self.to_skip > 0 => {
                self.to_skip -= 1;
                Ok(StageState::NeedTime)
            }
            other => Ok(other),
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("skipAmount", self.skip_amount as i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
