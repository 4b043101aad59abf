//! Moves a `$match` before the stage in front of it when the filter reads no path that
//! stage computes, renames or drops (`$project`, `$addFields`/`$set`, `$unwind`, `$sort`,
//! `$lookup`...), so filtering happens early and can reach the find plan's indexes.
//!
//! A renamed path is never traced back: after `{$project: {email: "$contact.email"}}` a
//! filter on `email` stays put, because with arrays (and arrays of arrays) `email` and
//! `contact.email` do not match the same documents.

use super::Rule;
use crate::pipeline::{downcast, Match, Modified, StageRef};
use nidus_common::Result;

pub const RULE: Rule = Rule {
    name: "match before independent stage",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 1..stages.len() {
        let Some(m) = downcast::<Match>(&stages[i]) else {
            continue;
        };
        if downcast::<Match>(&stages[i - 1]).is_some() {
            continue;
        }
        let Some(deps) = m.dependencies() else {
            continue;
        };
        if independent(&deps, &stages[i - 1].modified()) {
            stages.swap(i - 1, i);
            return Ok(true);
        }
    }
    Ok(false)
}

/// `a` is `b` or lies below it.
fn under(a: &str, b: &str) -> bool {
    a == b || (a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'.')
}

/// Whether a filter reading `deps` gives the same result before a stage that changes
/// `modified`.
pub fn independent(deps: &[String], modified: &Modified) -> bool {
    match modified {
        Modified::All => false,
        Modified::Paths(paths) => deps
            .iter()
            .all(|d| paths.iter().all(|p| !under(d, p) && !under(p, d))),
        Modified::Preserved(kept) => deps.iter().all(|d| kept.iter().any(|k| under(d, k))),
    }
}
