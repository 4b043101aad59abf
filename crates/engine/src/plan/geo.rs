//! Index bounds for geo predicates over a `2dsphere` field: the int64 cell-id intervals of a
//! covering of the predicate's region (`nidus_doc::geo::cover::query_intervals`), never
//! exact (FETCH re-checks the predicate on every document). Over a `2d` field: the GeoHash
//! ranges of MongoDB's R2 covering (`nidus_doc::geo::flat`) of a `$box`, `$polygon`,
//! `$center`, or the flat box around a `$centerSphere` that does not wrap.

use super::bounds::Interval;
use super::builder::Translated;
use bson::Bson;
use nidus_doc::geo::cover::query_intervals;
use nidus_doc::geo::flat::{self, FlatBox, FlatRegion, TwoDParams};
use nidus_doc::geo::shape::{legacy_point, Region};
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

/// The flat region a 2d index scan must cover for `leaf`, None when a 2d index cannot answer
/// it (not `$geoWithin`, a `$geometry`, or a `$centerSphere` that wraps: MongoDB's
/// `QueryPlannerIXSelect` rules for 2d).
pub fn twod_region(leaf: &Leaf, params: &TwoDParams) -> Option<FlatRegion> {
    let Leaf::Geo(g) = leaf else {
        return None;
    };
    match g.op.as_ref() {
        GeoOp::Within(Region::FlatBox(lo, hi)) => {
            Some(FlatRegion::Box(FlatBox { lo: *lo, hi: *hi }))
        }
        GeoOp::Within(Region::FlatPolygon(ring)) => Some(FlatRegion::Polygon(ring.clone())),
        GeoOp::Within(Region::FlatCircle(c, r)) => Some(FlatRegion::Circle(*c, *r)),
        GeoOp::Within(Region::Cap(_, r)) => {
            let center = match g.arg.get("$centerSphere") {
                Some(bson::Bson::Array(a)) => legacy_point(a.first()?)?,
                _ => return None,
            };
            flat::sphere_cap_box(params, center, *r).map(FlatRegion::Box)
        }
        _ => None,
    }
}

/// GeoHash ranges covering `region` as BinData intervals.
pub fn twod_intervals(params: &TwoDParams, region: &FlatRegion) -> Vec<Interval> {
    params
        .cover(region, flat::MAX_COVERING_CELLS)
        .into_iter()
        .map(|(lo, hi)| {
            Interval::new(
                crate::geo_keys::twod_key_value(lo),
                true,
                crate::geo_keys::twod_key_value(hi),
                true,
            )
        })
        .collect()
}

/// Bounds of a 2d field for `leaf` (never exact).
pub fn twod_translate(leaf: &Leaf, params: &TwoDParams) -> Translated {
    let intervals = match twod_region(leaf, params) {
        Some(r) => twod_intervals(params, &r),
        None => vec![Interval::all()],
    };
    Translated {
        intervals,
        exact: false,
    }
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

/// A `$near`/`$nearSphere` query planned over a 2dsphere index.
pub struct NearPlan {
    pub index: crate::catalog::IndexMeta,
    pub bounds: super::bounds::IndexBounds,
    pub query: nidus_query::matcher::geo::NearQuery,
    pub path: String,
    /// Canonical conjuncts (by position) FETCH applies: all but the `$near`.
    pub residual: Vec<usize>,
}

/// Plans the query's top-level `$near`, if it has one: the 2dsphere or 2d index on its path
/// (the hinted one when a hint names it), scanned over the cells within `$maxDistance`.
/// MongoDB's errors: no index that can answer it (a flat legacy `$near` needs a 2d index, a
/// GeoJSON point a 2dsphere one) → NoQueryExecutionPlans; two `$near` → BadValue.
pub fn find_near(
    matcher: &nidus_query::matcher::Matcher,
    indexes: &[crate::catalog::IndexMeta],
    hint: Option<&Bson>,
) -> nidus_common::Result<Option<NearPlan>> {
    use super::bounds::{IndexBounds, OrderedIntervalList};
    use nidus_query::matcher::serialize::canonical_conjuncts;
    use nidus_query::matcher::Expr;
    let conjuncts = canonical_conjuncts(matcher.expr());
    let nears: Vec<(usize, &str, &nidus_query::matcher::geo::NearQuery)> = conjuncts
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Expr::Path {
                path,
                leaf: Leaf::Geo(g),
            } => g.near().map(|n| (i, path.as_str(), n)),
            _ => None,
        })
        .collect();
    let Some(&(at, path, near)) = nears.first() else {
        return Ok(None);
    };
    if nears.len() > 1 {
        return Err(nidus_common::Error::bad_value(
            "Too many geoNear expressions",
        ));
    }
    let hinted = match hint {
        Some(Bson::String(name)) => Some(name.as_str()),
        _ => None,
    };
    // A 2dsphere index answers spherical queries; a 2d index legacy points, flat or
    // spherical (GeoJSON points make wrapping queries it cannot answer).
    let index = indexes.iter().find(|ix| {
        let answers = match (ix.geo, &ix.twod) {
            (Some(g), _) => ix.pattern[g].0 == path && near.spherical,
            (None, Some(_)) => ix.pattern[0].0 == path && !near.geojson,
            _ => false,
        };
        answers
            && match hinted {
                Some(name) => ix.name == name,
                None => !ix.is_hidden(),
            }
    });
    let Some(index) = index else {
        return Err(super::planner_error(
            nidus_common::ErrorCode::NoQueryExecutionPlans,
            "unable to find index for $geoNear query",
        ));
    };
    let geo_intervals = match &index.twod {
        Some(params) => {
            let region = match (near.max_distance, near.spherical) {
                (Some(d), false) => Some(FlatRegion::Circle((near.point.x, near.point.y), d)),
                (Some(d), true) => flat::sphere_cap_box(params, (near.point.x, near.point.y), d)
                    .map(FlatRegion::Box),
                (None, _) => None,
            };
            match region {
                Some(r) => twod_intervals(params, &r),
                None => vec![Interval::all()],
            }
        }
        None => cap_intervals(near.cap().as_ref()),
    };
    let fields = index
        .pattern
        .iter()
        .enumerate()
        .map(|(i, (f, desc))| {
            if index.is_geo_field(i) {
                OrderedIntervalList::from_ascending(f, geo_intervals.clone(), false)
            } else {
                OrderedIntervalList::all(f, *desc)
            }
        })
        .collect();
    Ok(Some(NearPlan {
        index: index.clone(),
        bounds: IndexBounds { fields },
        query: near.clone(),
        path: path.to_string(),
        residual: (0..conjuncts.len()).filter(|&i| i != at).collect(),
    }))
}
