//! Index bounds for geo predicates over a `2dsphere` field: the int64 cell-id intervals of a
//! covering of the predicate's region (`nidus_doc::geo::cover::query_intervals`), never
//! exact (FETCH re-checks the predicate on every document).

use super::bounds::Interval;
use super::builder::Translated;
use bson::Bson;
use nidus_doc::geo::cover::query_intervals;
use nidus_doc::geo::sphere::P3;
use nidus_query::matcher::geo::GeoOp;
use nidus_query::matcher::Leaf;

/// The spherical cap a 2dsphere index scan must cover for `leaf`: `Some(None)` = the whole
/// index, `None` = the index cannot answer it (not a geo predicate, a flat legacy region, or
/// `$near`, which `GEO_NEAR_2DSPHERE` plans).
fn region_cap(leaf: &Leaf) -> Option<Option<(P3, f64)>> {
    let Leaf::Geo(g) = leaf else {
        return None;
    };
    match g.op.as_ref() {
        GeoOp::Within(r) if r.is_flat() => None,
        GeoOp::Within(r) => Some(r.bounding_cap()),
        GeoOp::Intersects(q) => Some(q.bounding_cap()),
        GeoOp::Near(_) => None,
    }
}

/// Whether a 2dsphere field's bounds can answer `leaf`.
pub fn answers(leaf: &Leaf) -> bool {
    region_cap(leaf).is_some()
}

/// Cell-id intervals for a cap (None = every cell).
pub fn cap_intervals(cap: Option<&(P3, f64)>) -> Vec<Interval> {
    query_intervals(cap)
        .into_iter()
        .map(|(lo, hi)| Interval::new(Bson::Int64(lo), true, Bson::Int64(hi), true))
        .collect()
}

pub fn translate(leaf: &Leaf) -> Translated {
    let intervals = match region_cap(leaf) {
        Some(cap) => cap_intervals(cap.as_ref()),
        None => vec![Interval::all()],
    };
    Translated {
        intervals,
        exact: false,
    }
}
