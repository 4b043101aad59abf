use super::{Stage, StageImpl, StageState};
use bson::Document;
use nidus_common::Result;

/// `LIMIT`: ends after `n` results without working its child again.
pub struct Limit {
    child: Box<Stage>,
    remaining: u64,
    limit_amount: u64,
}

impl Limit {
    pub fn new(child: Stage, n: u64) -> Limit {
        Limit {
            child: Box::new(child),
            remaining: n,
            limit_amount: n,
        }
    }
}

impl StageImpl for Limit {
    fn name(&self) -> &'static str {
        "LIMIT"
    }

    fn work(&mut self) -> Result<StageState> {
        if self.remaining == 0 {
            return Ok(StageState::IsEof);
        }
        let state = self.child.work()?;
        if matches!(state, StageState::Advanced(_)) {
            self.remaining -= 1;
        }
        Ok(state)
    }

    fn counter(&self, field: &str) -> Option<i64> {
        (field == "limitAmount").then_some(self.limit_amount as i64)
    }

    fn index_fields(&self) -> (Option<bson::Bson>, Option<String>) {
        (None, None)
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("limitAmount", self.limit_amount as i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
