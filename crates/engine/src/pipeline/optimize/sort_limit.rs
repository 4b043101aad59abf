//! `$sort` + `$limit` → a `$sort` that keeps only the first n documents (top-k).

use super::Rule;
use crate::pipeline::{downcast, Limit, Sort, StageRef};
use nidus_common::Result;
use std::sync::Arc;

pub const RULE: Rule = Rule {
    name: "sort limit coalesce",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 1..stages.len() {
        if let (Some(s), Some(l)) = (
            downcast::<Sort>(&stages[i - 1]),
            downcast::<Limit>(&stages[i]),
        ) {
            stages[i - 1] = Arc::new(s.with_limit(l.n));
            stages.remove(i);
            return Ok(true);
        }
    }
    Ok(false)
}
