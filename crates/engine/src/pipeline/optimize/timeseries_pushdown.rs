//! A `$match` right after `$_internalUnpackBucket` becomes the unpack stage's
//! `eventFilter`, and the bucket-level predicates it implies (`timeseries/pushdown.rs`:
//! the metaField renamed to `meta`, time bounds on `control.min`/`control.max` and `_id`)
//! go into a `$match` before it, which the find plan of the buckets collection then
//! answers (indexes on `meta` and `control`, the clustered `_id` scan).

use super::Rule;
use crate::pipeline::unpack_bucket::UnpackBucket;
use crate::pipeline::{downcast, Match, StageRef};
use nidus_common::Result;
use std::sync::Arc;

pub const RULE: Rule = Rule {
    name: "time-series predicates pushed into the bucket scan",
    apply,
};

fn apply(stages: &mut Vec<StageRef>) -> Result<bool> {
    for i in 0..stages.len().saturating_sub(1) {
        let Some(unpack) = downcast::<UnpackBucket>(&stages[i]) else {
            continue;
        };
        let Some(m) = downcast::<Match>(&stages[i + 1]) else {
            continue;
        };
        if m.unbound {
            continue;
        }
        let bucket_filter = crate::timeseries::pushdown::bucket_filter(
            &m.filter,
            &unpack.time_field,
            unpack.meta_field.as_deref(),
            unpack.bucket_max_span_seconds,
        );
        let new_unpack = unpack.with_event_filter(m.filter.clone())?;
        stages[i] = Arc::new(new_unpack);
        stages.remove(i + 1);
        if let Some(f) = bucket_filter {
            stages.insert(i, Arc::new(Match::new(f)?));
        }
        return Ok(true);
    }
    Ok(false)
}
