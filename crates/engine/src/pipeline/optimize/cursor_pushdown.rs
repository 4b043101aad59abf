//! Moves the leading `$match`, `$sort` (with its top-k limit), `$skip`, `$limit` and a
//! following `$project` into the find plan, so the planner can use indexes and the
//! projection runs in the query layer (`PROJECTION_*` in `$cursor`'s plan).
//!
//! Order matters: a filter goes in only before any sort/skip/limit, a sort only before a
//! skip or limit, a skip only before a limit; a projection ends the prefix (stages after it
//! see projected documents).

use crate::find::FindSpec;
use crate::pipeline::{downcast, Limit, Match, Project, Skip, Sort, StageRef};
use nidus_query::projection::Policy;
use std::time::Instant;

pub const NAME: &str = "cursor pushdown";

/// Takes the pushable prefix of `stages` into a find; returns it and whether any stage
/// moved.
pub fn take(stages: &mut Vec<StageRef>, deadline: Option<Instant>) -> (FindSpec, bool) {
    let mut spec = FindSpec {
        deadline,
        ..FindSpec::default()
    };
    let mut n = 0;
    for s in stages.iter() {
        if !absorb(&mut spec, s) {
            break;
        }
        n += 1;
        if spec.projection.is_some() {
            break;
        }
    }
    stages.drain(..n);
    (spec, n > 0)
}

fn absorb(spec: &mut FindSpec, s: &StageRef) -> bool {
    let untouched = spec.sort.is_none() && spec.skip == 0 && spec.limit == 0;
    if let Some(m) = downcast::<Match>(s) {
        if !untouched || !spec.filter.is_empty() || m.unbound {
            return false;
        }
        spec.filter = m.filter.clone();
        return true;
    }
    if let Some(sort) = downcast::<Sort>(s) {
        if !untouched {
            return false;
        }
        spec.sort = Some(sort.spec.clone());
        spec.limit = sort.limit;
        return true;
    }
    if let Some(skip) = downcast::<Skip>(s) {
        if spec.limit != 0 {
            return false;
        }
        spec.skip = spec.skip.saturating_add(skip.n);
        return true;
    }
    if let Some(limit) = downcast::<Limit>(s) {
        spec.limit = if spec.limit == 0 {
            limit.n
        } else {
            spec.limit.min(limit.n)
        };
        return true;
    }
    if let Some(p) = downcast::<Project>(s) {
        // The find layer binds only the command's `let`, not a `$lookup`'s variables.
        if p.projection.uses_user_variables() {
            return false;
        }
        spec.projection = Some(p.pushdown_spec());
        spec.projection_policy = Policy::Aggregate;
        return true;
    }
    false
}
