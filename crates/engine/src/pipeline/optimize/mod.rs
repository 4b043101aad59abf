//! The pipeline optimizer: rewrite rules, one per file, each with the name explain prints
//! (`optimizerRewrites`), applied until none changes the pipeline; then
//! [`cursor_pushdown`] moves the leading stages into the collection's find plan.

pub mod coalesce_limits;
pub mod cursor_pushdown;
pub mod lookup_unwind;
pub mod match_coalesce;
pub mod match_swap;
pub mod sort_limit;
pub mod timeseries_pushdown;

use super::StageRef;
use nidus_common::Result;

/// A rewrite: returns true when it changed the pipeline.
pub struct Rule {
    pub name: &'static str,
    pub apply: fn(&mut Vec<StageRef>) -> Result<bool>,
}

const RULES: &[Rule] = &[
    match_swap::RULE,
    match_coalesce::RULE,
    sort_limit::RULE,
    coalesce_limits::RULE,
    lookup_unwind::RULE,
    timeseries_pushdown::RULE,
];

/// Each rewrite moves a stage earlier or removes one, so the loop ends; the bound is a
/// guard against a rule pair undoing each other.
const MAX_PASSES: usize = 64;

/// Applies the rules until the pipeline stops changing; returns the names of the rules
/// that fired (in order, once per change).
pub fn optimize(stages: &mut Vec<StageRef>) -> Result<Vec<&'static str>> {
    let mut fired = Vec::new();
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for rule in RULES {
            if (rule.apply)(stages)? {
                fired.push(rule.name);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(fired)
}
