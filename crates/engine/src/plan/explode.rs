//! Explode for sort (MongoDB's `QueryPlannerAnalysis::explodeForSort`): an index scan whose
//! leading fields are unions of points (`$in`, `$or` of equalities) and whose remaining key
//! fields give the requested sort becomes one scan per combination of points, merged in
//! sort order by `SORT_MERGE` instead of a blocking `SORT`.

use super::bounds::{IndexBounds, OrderedIntervalList};
use crate::catalog::IndexMeta;
use nidus_query::sort::SortPattern;

/// MongoDB's `internalQueryMaxScansToExplode`.
pub const MAX_SCANS_TO_EXPLODE: usize = 200;

/// What exploding an index scan gives.
pub enum Explosion {
    /// One scan per point combination (in index order), all in `forward` direction.
    Scans {
        bounds: Vec<IndexBounds>,
        forward: bool,
    },
    /// It would need more than [`MAX_SCANS_TO_EXPLODE`] scans (`maxScansToExplodeReached`).
    TooManyScans,
    /// The bounds or the key pattern do not allow it.
    No,
}

pub fn explode_for_sort(ix: &IndexMeta, bounds: &IndexBounds, sort: &SortPattern) -> Explosion {
    let prefix = bounds.fields.iter().take_while(|f| f.is_points()).count();
    if prefix == 0 || prefix == bounds.fields.len() {
        return Explosion::No;
    }
    let Some(forward) = sort_after_prefix(ix, prefix, sort) else {
        return Explosion::No;
    };
    let scans = bounds.fields[..prefix]
        .iter()
        .try_fold(1usize, |n, f| n.checked_mul(f.intervals.len()));
    match scans {
        Some(n) if n <= MAX_SCANS_TO_EXPLODE => Explosion::Scans {
            bounds: point_combinations(bounds, prefix),
            forward,
        },
        _ => Explosion::TooManyScans,
    }
}

/// The scan direction in which the key fields after `prefix` return `sort` (the sort must be
/// a prefix of them, or of their reverse), with no array and no hash on a sorted path.
fn sort_after_prefix(ix: &IndexMeta, prefix: usize, sort: &SortPattern) -> Option<bool> {
    let rest = &ix.pattern[prefix..];
    if sort.fields.is_empty() || sort.fields.len() > rest.len() {
        return None;
    }
    let mut direction = None;
    for (i, (f, (path, desc))) in sort.fields.iter().zip(rest).enumerate() {
        // A hashed field's keys are ordered by hash, not by value.
        if f.path.as_str() != path
            || !ix.multikey_components(prefix + i).is_empty()
            || ix.is_hashed_field(prefix + i)
        {
            return None;
        }
        let forward = f.descending == *desc;
        if *direction.get_or_insert(forward) != forward {
            return None;
        }
    }
    direction
}

/// Every combination of one point per leading field, the first field varying slowest.
fn point_combinations(bounds: &IndexBounds, prefix: usize) -> Vec<IndexBounds> {
    let mut out = vec![bounds.clone()];
    for fi in 0..prefix {
        let field = &bounds.fields[fi];
        out = out
            .into_iter()
            .flat_map(|b| {
                field.intervals.iter().map(move |iv| {
                    let mut one = b.clone();
                    one.fields[fi] = OrderedIntervalList {
                        field: field.field.clone(),
                        intervals: vec![iv.clone()],
                    };
                    one
                })
            })
            .collect();
    }
    out
}
