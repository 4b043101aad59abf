//! `2d` indexes: MongoDB's GeoHash of a flat point and the coverings of flat regions.
//!
//! The index's `min`/`max` (default -180/180) and `bits` (default 26, 1..32) define a grid:
//! a coordinate maps to a 32-bit unsigned cell number (`(v - min) * 2^32 / (max - min)`,
//! `max` itself moved just inside), and the key of a point interleaves the first `bits` bits
//! of its x and y numbers, x first, from the most significant bit of a 64-bit hash. The key
//! is stored as the 8 bytes of the hash, big-endian, in a BinData of subtype 128, so key
//! order is hash order. A cell of level `l` (its first `l` bits of x and y) is the key range
//! from its hash to its hash with every later bit set. Coverings follow MongoDB's
//! `R2RegionCoverer`: from the whole plane, cells that partially meet the region are split,
//! largest first, until at most `max_cells` cells (or the index's `bits` level) remain.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The number of cells per axis of the finest grid (2^32).
const NUM_BUCKETS: f64 = 4.0 * 1024.0 * 1024.0 * 1024.0;

/// MongoDB's `internalGeoPredicateQuery2DMaxCoveringCells` (and the `$near` one).
pub const MAX_COVERING_CELLS: usize = 16;

/// A 2d index's grid parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct TwoDParams {
    pub min: f64,
    pub max: f64,
    pub bits: u32,
    scaling: f64,
    /// The diagonal of a finest cell plus a hundredth of a grid unit (MongoDB's `_error`).
    pub error: f64,
    /// The slack a cell's box gets for rounding (MongoDB's `_errorUnhashToBox`).
    box_error: f64,
}

/// A number as MongoDB's C++ stream prints a double (`-180`, `0.5`).
pub fn fmt_number(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

impl TwoDParams {
    /// The parameters of an index spec's `bits`, `min`, `max` (already known to be numbers
    /// when present), or MongoDB's refusal (`InvalidOptions`).
    pub fn new(
        bits: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Result<TwoDParams, String> {
        let bits_f = bits.unwrap_or(26.0);
        let bits_i = bits_f as i64;
        let (min, max) = (min.unwrap_or(-180.0), max.unwrap_or(180.0));
        if !(1..=32).contains(&bits_i) {
            return Err(format!(
                "bits for hash must be > 0 and <= 32, but {bits_i} bits were specified"
            ));
        }
        if min >= max || min.is_infinite() || max.is_infinite() || min.is_nan() || max.is_nan() {
            return Err(format!(
                "region for hash must be valid and have positive area, but [{}, {}] was specified",
                fmt_number(min),
                fmt_number(max)
            ));
        }
        let scaling = NUM_BUCKETS / (max - min);
        if scaling.is_nan() || scaling <= 0.0 || scaling.is_infinite() {
            return Err(format!(
                "range [{}, {}] is too small.",
                fmt_number(min),
                fmt_number(max)
            ));
        }
        let bits = bits_i as u32;
        let cell = (max - min) / 2f64.powi(bits as i32);
        let error = (2.0 * cell * cell).sqrt() + 0.001 / scaling;
        Ok(TwoDParams {
            min,
            max,
            bits,
            scaling,
            error,
            box_error: min.abs().max(max.abs()) * (f64::EPSILON / 2.0) * 8.0,
        })
    }

    /// Whether a coordinate lies in `[min, max]`.
    pub fn in_range(&self, v: f64) -> bool {
        v >= self.min && v <= self.max
    }

    fn to_grid(&self, v: f64) -> u32 {
        let mut v = v;
        if v == self.max {
            v -= self.error / 2.0;
        }
        ((v - self.min).max(0.0) * self.scaling) as u32
    }

    fn grid_to_value(&self, n: u32) -> f64 {
        f64::from(n) / self.scaling + self.min
    }

    /// The finest cell of a point (both coordinates in range).
    pub fn hash(&self, x: f64, y: f64) -> Cell {
        Cell::from_xy(self.to_grid(x), self.to_grid(y), self.bits)
    }

    /// The box of a cell, widened by the rounding slack.
    pub fn cell_box(&self, c: &Cell) -> FlatBox {
        if c.level == 0 {
            return FlatBox {
                lo: (self.min, self.min),
                hi: (self.max, self.max),
            };
        }
        let (gx, gy) = c.unhash();
        let edge = (self.max - self.min) / 2f64.powi(c.level as i32);
        let lo = (self.grid_to_value(gx), self.grid_to_value(gy));
        let e = self.box_error;
        FlatBox {
            lo: (lo.0 - e, lo.1 - e),
            hi: (lo.0 + edge + e, lo.1 + edge + e),
        }
    }

    /// MongoDB's covering of `region` by at most `max_cells` cells between levels 0 and
    /// `bits`, as inclusive key ranges `(first hash, last hash)` in key order, merged.
    pub fn cover(&self, region: &FlatRegion, max_cells: usize) -> Vec<(u64, u64)> {
        let mut cells = Coverer {
            params: self,
            region,
            max_cells,
            queue: BinaryHeap::new(),
            results: Vec::new(),
            seq: 0,
        }
        .run();
        cells.sort();
        cells.dedup();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for c in cells {
            let (lo, hi) = (c.hash, c.range_max());
            match out.last_mut() {
                // A cell inside the previous one's range adds nothing.
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        out
    }
}

/// A GeoHash: the first `level` bits of x and y, interleaved from the top of `hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cell {
    pub hash: u64,
    pub level: u32,
}

impl Cell {
    pub fn from_xy(x: u32, y: u32, level: u32) -> Cell {
        let mut hash = 0u64;
        for i in 0..level {
            if x & (1 << (31 - i)) != 0 {
                hash |= 1 << (63 - 2 * i);
            }
            if y & (1 << (31 - i)) != 0 {
                hash |= 1 << (63 - (2 * i + 1));
            }
        }
        Cell { hash, level }
    }

    /// The x and y grid numbers of the cell's lower-left corner.
    pub fn unhash(&self) -> (u32, u32) {
        let (mut x, mut y) = (0u32, 0u32);
        for i in 0..self.level {
            if self.hash & (1 << (63 - 2 * i)) != 0 {
                x |= 1 << (31 - i);
            }
            if self.hash & (1 << (63 - (2 * i + 1))) != 0 {
                y |= 1 << (31 - i);
            }
        }
        (x, y)
    }

    /// The greatest hash inside the cell (every bit after its level set).
    pub fn range_max(&self) -> u64 {
        if self.level >= 32 {
            self.hash
        } else {
            self.hash | (u64::MAX >> (2 * self.level))
        }
    }

    fn children(&self) -> [Cell; 4] {
        let l = self.level;
        let xbit = 1u64 << (63 - 2 * l);
        let ybit = 1u64 << (63 - (2 * l + 1));
        let c = |h: u64| Cell {
            hash: h,
            level: l + 1,
        };
        [
            c(self.hash),
            c(self.hash | ybit),
            c(self.hash | xbit),
            c(self.hash | xbit | ybit),
        ]
    }

    /// The 8 bytes an index key holds (big-endian).
    pub fn key_bytes(hash: u64) -> Vec<u8> {
        hash.to_be_bytes().to_vec()
    }
}

/// An axis-aligned box (inclusive).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlatBox {
    pub lo: (f64, f64),
    pub hi: (f64, f64),
}

impl FlatBox {
    fn intersects(&self, o: &FlatBox) -> bool {
        self.lo.0 <= o.hi.0 && o.lo.0 <= self.hi.0 && self.lo.1 <= o.hi.1 && o.lo.1 <= self.hi.1
    }

    fn contains_box(&self, o: &FlatBox) -> bool {
        self.lo.0 <= o.lo.0 && o.hi.0 <= self.hi.0 && self.lo.1 <= o.lo.1 && o.hi.1 <= self.hi.1
    }

    fn corners(&self) -> [(f64, f64); 4] {
        [
            self.lo,
            (self.hi.0, self.lo.1),
            self.hi,
            (self.lo.0, self.hi.1),
        ]
    }
}

/// A region a 2d index scan covers.
#[derive(Debug, Clone)]
pub enum FlatRegion {
    Box(FlatBox),
    /// Centre and radius (the distance test is `<=`).
    Circle((f64, f64), f64),
    /// A polygon's vertices (open ring).
    Polygon(Vec<(f64, f64)>),
}

impl FlatRegion {
    /// True only when the region and the box certainly share no point.
    fn disjoint(&self, b: &FlatBox) -> bool {
        match self {
            FlatRegion::Box(r) => !r.intersects(b),
            FlatRegion::Circle(c, r) => {
                let dx = (b.lo.0 - c.0).max(0.0).max(c.0 - b.hi.0);
                let dy = (b.lo.1 - c.1).max(0.0).max(c.1 - b.hi.1);
                (dx * dx + dy * dy).sqrt() > *r
            }
            FlatRegion::Polygon(ring) => !bounds_of(ring).intersects(b),
        }
    }

    /// True only when the box certainly lies inside the region.
    fn contains(&self, b: &FlatBox) -> bool {
        match self {
            FlatRegion::Box(r) => r.contains_box(b),
            FlatRegion::Circle(c, r) => b
                .corners()
                .iter()
                .all(|p| ((p.0 - c.0).powi(2) + (p.1 - c.1).powi(2)).sqrt() <= *r),
            FlatRegion::Polygon(ring) => {
                b.corners()
                    .iter()
                    .all(|p| crate::geo::shape::in_ring(*p, ring))
                    && !ring_meets_box(ring, b)
            }
        }
    }
}

fn bounds_of(ring: &[(f64, f64)]) -> FlatBox {
    let mut b = FlatBox {
        lo: (f64::INFINITY, f64::INFINITY),
        hi: (f64::NEG_INFINITY, f64::NEG_INFINITY),
    };
    for p in ring {
        b.lo = (b.lo.0.min(p.0), b.lo.1.min(p.1));
        b.hi = (b.hi.0.max(p.0), b.hi.1.max(p.1));
    }
    b
}

/// Whether some edge of the ring reaches into the box (a vertex inside it, or an edge
/// crossing one of its sides).
fn ring_meets_box(ring: &[(f64, f64)], b: &FlatBox) -> bool {
    let inside = |p: &(f64, f64)| p.0 >= b.lo.0 && p.0 <= b.hi.0 && p.1 >= b.lo.1 && p.1 <= b.hi.1;
    if ring.iter().any(inside) {
        return true;
    }
    let corners = b.corners();
    let n = ring.len();
    (0..n).any(|i| {
        let (p, q) = (ring[i], ring[(i + 1) % n]);
        (0..4).any(|j| segments_cross(p, q, corners[j], corners[(j + 1) % 4]))
    })
}

fn segments_cross(a: (f64, f64), b: (f64, f64), c: (f64, f64), d: (f64, f64)) -> bool {
    let orient = |p: (f64, f64), q: (f64, f64), r: (f64, f64)| {
        (q.0 - p.0) * (r.1 - p.1) - (q.1 - p.1) * (r.0 - p.0)
    };
    let (d1, d2) = (orient(c, d, a), orient(c, d, b));
    let (d3, d4) = (orient(a, b, c), orient(a, b, d));
    (d1 * d2 <= 0.0) && (d3 * d4 <= 0.0)
}

/// MongoDB's `computeXScanDistance`: the longitude span (degrees) holding every point within
/// `dist` degrees of latitude `y` on the sphere.
pub fn x_scan_distance(y: f64, dist: f64) -> f64 {
    let c1 = (89f64.min(y + dist)).to_radians().cos();
    let c2 = ((-89f64).max(y - dist)).to_radians().cos();
    dist / c1.min(c2)
}

/// The flat box (degrees) holding a spherical cap of `radius` radians around (x, y) for a
/// 2d index, or None when it would wrap around the plane's edges (MongoDB's
/// `twoDWontWrap`: such a query cannot use the index).
pub fn sphere_cap_box(p: &TwoDParams, center: (f64, f64), radius: f64) -> Option<FlatBox> {
    let yscan = radius.to_degrees() + p.error.to_radians();
    let xscan = x_scan_distance(center.1, yscan);
    let fits = center.0 + xscan < 180.0
        && center.0 - xscan > -180.0
        && center.1 + yscan < 90.0
        && center.1 - yscan > -90.0;
    fits.then_some(FlatBox {
        lo: (center.0 - xscan, center.1 - yscan),
        hi: (center.0 + xscan, center.1 + yscan),
    })
}

struct Candidate {
    cell: Cell,
    terminal: bool,
    children: Vec<Candidate>,
}

/// Queue order: larger cells first, then fewer intersecting children, then fewer terminal
/// children; ties in insertion order (deterministic).
struct Queued {
    priority: i64,
    seq: u64,
    candidate: Candidate,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

struct Coverer<'a> {
    params: &'a TwoDParams,
    region: &'a FlatRegion,
    max_cells: usize,
    queue: BinaryHeap<Queued>,
    results: Vec<Cell>,
    seq: u64,
}

impl Coverer<'_> {
    fn run(mut self) -> Vec<Cell> {
        if let Some(root) = self.candidate(Cell { hash: 0, level: 0 }) {
            self.add(root);
        }
        while let Some(Queued { mut candidate, .. }) = self.queue.pop() {
            let n = candidate.children.len();
            if n == 1 || self.results.len() + self.queue.len() + n <= self.max_cells {
                for child in std::mem::take(&mut candidate.children) {
                    self.add(child);
                }
            } else {
                candidate.terminal = true;
                candidate.children.clear();
                self.add(candidate);
            }
        }
        self.results
    }

    fn candidate(&self, cell: Cell) -> Option<Candidate> {
        let b = self.params.cell_box(&cell);
        if self.region.disjoint(&b) {
            return None;
        }
        Some(Candidate {
            cell,
            terminal: cell.level >= self.params.bits || self.region.contains(&b),
            children: Vec::new(),
        })
    }

    fn add(&mut self, mut c: Candidate) {
        if c.terminal {
            self.results.push(c.cell);
            return;
        }
        let children: Vec<Candidate> = c
            .cell
            .children()
            .into_iter()
            .filter_map(|k| self.candidate(k))
            .collect();
        let terminals = children.iter().filter(|k| k.terminal).count();
        if children.is_empty() {
            return;
        }
        if terminals == 4 {
            self.results.push(c.cell);
            return;
        }
        let priority =
            -((((i64::from(c.cell.level) << 4) + children.len() as i64) << 4) + terminals as i64);
        c.children = children;
        self.seq += 1;
        self.queue.push(Queued {
            priority,
            seq: self.seq,
            candidate: c,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> TwoDParams {
        TwoDParams::new(None, None, None).unwrap()
    }

    #[test]
    fn hash_interleaves_x_first() {
        let p = params();
        // (0, 0) is the centre: x and y both have their top bit set.
        let c = p.hash(0.0, 0.0);
        assert_eq!(c.hash >> 62, 0b11);
        // The lower-left corner is all zeros; the upper-right corner all ones (26 bits).
        assert_eq!(p.hash(-180.0, -180.0).hash, 0);
        assert_eq!(p.hash(180.0, 180.0).hash, u64::MAX << 12);
        // x in the upper half, y in the lower: 10 at the top.
        assert_eq!(p.hash(90.0, -90.0).hash >> 62, 0b10);
    }

    #[test]
    fn parameters_are_checked() {
        assert!(TwoDParams::new(Some(0.0), None, None)
            .unwrap_err()
            .contains("bits for hash must be > 0 and <= 32, but 0 bits"));
        assert!(TwoDParams::new(None, Some(1.0), Some(1.0))
            .unwrap_err()
            .contains("[1, 1]"));
    }

    #[test]
    fn covering_holds_every_point_of_the_region() {
        let p = params();
        let regions = [
            FlatRegion::Box(FlatBox {
                lo: (-10.5, 3.0),
                hi: (20.0, 7.25),
            }),
            FlatRegion::Circle((5.0, 5.0), 3.0),
            FlatRegion::Polygon(vec![(0.0, 0.0), (10.0, 0.0), (0.0, 10.0)]),
        ];
        for r in &regions {
            let cover = p.cover(r, MAX_COVERING_CELLS);
            assert!(!cover.is_empty() && cover.len() <= MAX_COVERING_CELLS);
            let mut x = -12.0;
            while x < 22.0 {
                let mut y = -1.0;
                while y < 12.0 {
                    let inside = match r {
                        FlatRegion::Box(b) => {
                            x >= b.lo.0 && x <= b.hi.0 && y >= b.lo.1 && y <= b.hi.1
                        }
                        FlatRegion::Circle(c, rad) => {
                            ((x - c.0).powi(2) + (y - c.1).powi(2)).sqrt() <= *rad
                        }
                        FlatRegion::Polygon(ring) => crate::geo::shape::in_ring((x, y), ring),
                    };
                    if inside {
                        let h = p.hash(x, y).hash;
                        assert!(
                            cover.iter().any(|(lo, hi)| h >= *lo && h <= *hi),
                            "{x},{y} outside the covering of {r:?}"
                        );
                    }
                    y += 0.25;
                }
                x += 0.25;
            }
        }
    }
}
