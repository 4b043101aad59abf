//! `$match` + `$match` → one `$match` of the `$and` of both filters.

use super::Rule;
use crate::pipeline::{downcast, Match, StageRef};
use nidus_common::Result;
use std::sync::Arc;

pub const RULE: Rule = Rule {
    name: "match coalesce",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 1..stages.len() {
        if let (Some(a), Some(b)) = (
            downcast::<Match>(&stages[i - 1]),
            downcast::<Match>(&stages[i]),
        ) {
            let merged = a.and(b)?;
            stages[i - 1] = Arc::new(merged);
            stages.remove(i);
            return Ok(true);
        }
    }
    Ok(false)
}
