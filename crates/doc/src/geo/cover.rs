//! Cell coverings: sets of S2 cells whose union holds a cap, for 2dsphere index keys of
//! non-point geometries and for the index bounds of geo queries.
//!
//! A cell is kept when its own bounding cap meets the region's cap, so the kept cells hold
//! every point of the region (a covering may be larger than the region, never smaller:
//! the FETCH filter re-checks each document).

use super::cell::{CellId, MAX_LEVEL};
use super::sphere::{angle, P3};

/// Levels MongoDB's 2dsphere version 3 uses for non-point geometries (cells about 2000 km
/// to 110 m across) and its advisory cell budget; points are keyed by their leaf cell.
pub const COARSEST_INDEXED_LEVEL: u32 = 2;
pub const FINEST_INDEXED_LEVEL: u32 = 16;
pub const MAX_CELLS_IN_COVERING: usize = 20;

fn meets(cell: CellId, cap: &(P3, f64)) -> bool {
    let (c, r) = cell.cap();
    angle(&c, &cap.0) <= r + cap.1 + 1e-12
}

fn inside(cell: CellId, cap: &(P3, f64)) -> bool {
    let (c, r) = cell.cap();
    angle(&c, &cap.0) + r <= cap.1
}

/// Cells between `min_level` and `max_level` covering `cap` (None = the whole sphere),
/// refined coarsest first while the count stays within `max_cells` (advisory: the cells
/// at `min_level` are all kept).
pub fn cover(
    cap: Option<&(P3, f64)>,
    min_level: u32,
    max_level: u32,
    max_cells: usize,
) -> Vec<CellId> {
    let mut cells: Vec<CellId> = (0..6).map(CellId::face_cell).collect();
    let Some(cap) = cap else {
        return cells;
    };
    cells.retain(|c| meets(*c, cap));
    for _ in 0..min_level {
        cells = cells
            .iter()
            .flat_map(|c| c.children())
            .filter(|c| meets(*c, cap))
            .collect();
    }
    let max_level = max_level.min(MAX_LEVEL);
    // Split the coarsest cell still worth splitting (not at the finest level, not inside).
    while let Some(at) = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.level() < max_level && !inside(**c, cap))
        .min_by_key(|(_, c)| c.level())
        .map(|(i, _)| i)
    {
        let kids: Vec<CellId> = cells[at]
            .children()
            .into_iter()
            .filter(|c| meets(*c, cap))
            .collect();
        if cells.len() - 1 + kids.len() > max_cells {
            break;
        }
        cells.swap_remove(at);
        cells.extend(kids);
    }
    cells.sort();
    cells
}

/// The cells a 2dsphere index stores for a geometry's bounding cap: its leaf cell for a
/// point, else a covering between the indexed levels.
pub fn index_cells(point: Option<&P3>, cap: Option<&(P3, f64)>) -> Vec<CellId> {
    match point {
        Some(p) => vec![CellId::from_point(p)],
        None => cover(
            cap,
            COARSEST_INDEXED_LEVEL,
            FINEST_INDEXED_LEVEL,
            MAX_CELLS_IN_COVERING,
        ),
    }
}

/// The key intervals (inclusive, as int64 keys, ascending, disjoint) a query over `cap`
/// scans: each covering cell's whole range (the cells of geometries inside it), and every
/// ancestor cell of it as a point (the cells of larger geometries holding it).
pub fn query_intervals(cap: Option<&(P3, f64)>) -> Vec<(i64, i64)> {
    let cells = cover(cap, 0, MAX_LEVEL, 24);
    let mut out: Vec<(i64, i64)> = Vec::new();
    for c in &cells {
        out.push((c.range_min() as i64, c.range_max() as i64));
        for level in 0..c.level() {
            let a = c.parent(level).as_key();
            out.push((a, a));
        }
    }
    out.sort();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(out.len());
    for (lo, hi) in out {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::sphere::from_lng_lat;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn covering_holds_every_point_of_the_cap(
            lng in -180.0f64..180.0, lat in -90.0f64..90.0, r in 0.0f64..0.5,
            dlng in -30.0f64..30.0, dlat in -30.0f64..30.0,
        ) {
            let c = from_lng_lat(lng, lat);
            let q = from_lng_lat((lng + dlng).clamp(-180.0, 180.0), (lat + dlat).clamp(-90.0, 90.0));
            let cap = (c, r);
            let leaf = CellId::from_point(&q);
            if angle(&c, &q) <= r {
                let cells = cover(Some(&cap), 0, 30, 20);
                prop_assert!(cells.iter().any(|cell| cell.contains(leaf)));
                let ivs = query_intervals(Some(&cap));
                let k = leaf.as_key();
                prop_assert!(ivs.iter().any(|(lo, hi)| *lo <= k && k <= *hi));
            }
        }
    }
}
