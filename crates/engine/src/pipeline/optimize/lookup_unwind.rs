//! `$lookup` + `$unwind` of its `as` field → one `$lookup` that unwinds as it joins
//! (explain shows `unwinding` inside the `$lookup`, as MongoDB does).

use super::Rule;
use crate::pipeline::lookup::Lookup;
use crate::pipeline::unwind::Unwind;
use crate::pipeline::{downcast, StageRef};
use nidus_common::Result;
use std::sync::Arc;

pub const RULE: Rule = Rule {
    name: "lookup unwind coalesce",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 1..stages.len() {
        let (Some(l), Some(u)) = (
            downcast::<Lookup>(&stages[i - 1]),
            downcast::<Unwind>(&stages[i]),
        ) else {
            continue;
        };
        if l.unwind.is_some() || u.path.join(".") != l.as_field {
            continue;
        }
        let mut folded = l.clone();
        folded.unwind = Some(u.clone());
        stages[i - 1] = Arc::new(folded);
        stages.remove(i);
        return Ok(true);
    }
    Ok(false)
}
