//! `$limit` + `$limit` → the smaller limit; `$skip` + `$skip` → their sum.

use super::Rule;
use crate::pipeline::{downcast, Limit, Skip, StageRef};
use nidus_common::Result;
use std::sync::Arc;

pub const RULE: Rule = Rule {
    name: "limit/skip coalesce",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 1..stages.len() {
        let merged: Option<StageRef> = if let (Some(a), Some(b)) = (
            downcast::<Limit>(&stages[i - 1]),
            downcast::<Limit>(&stages[i]),
        ) {
            Some(Arc::new(Limit { n: a.n.min(b.n) }))
        } else if let (Some(a), Some(b)) = (
            downcast::<Skip>(&stages[i - 1]),
            downcast::<Skip>(&stages[i]),
        ) {
            Some(Arc::new(Skip {
                n: a.n.saturating_add(b.n),
            }))
        } else {
            None
        };
        if let Some(m) = merged {
            stages[i - 1] = m;
            stages.remove(i);
            return Ok(true);
        }
    }
    Ok(false)
}
