//! S2 cell ids: the six cube faces, the quadratic (u,v) → (s,t) projection and the Hilbert
//! curve order of each face's 2^30 × 2^30 leaf cells, so a cell's descendants are one
//! contiguous id range (`range_min..=range_max`).
//!
//! An id is `face (3 bits) ++ position (2 bits per level) ++ 1 ++ zeros`; the trailing 1
//! marks the level. 2dsphere indexes store ids as int64 (MongoDB casts the unsigned id):
//! faces 4 and 5 become negative, but no cell spans two faces, so each cell's range stays
//! ordered as signed values too.

use super::sphere::{angle, normalize, P3};

pub const MAX_LEVEL: u32 = 30;
const SWAP: u8 = 1;
const INVERT: u8 = 2;
/// For each orientation, the (i, j) bits (`i << 1 | j`) of the sub-cell at each curve position.
const POS_TO_IJ: [[u8; 4]; 4] = [[0, 1, 3, 2], [0, 2, 3, 1], [3, 2, 0, 1], [3, 1, 0, 2]];
/// The inverse of `POS_TO_IJ`.
const IJ_TO_POS: [[u8; 4]; 4] = [[0, 1, 3, 2], [0, 3, 1, 2], [2, 3, 1, 0], [2, 1, 3, 0]];
/// How the orientation changes when descending into the sub-cell at a position.
const POS_TO_ORIENTATION: [u8; 4] = [SWAP, 0, 0, INVERT | SWAP];
const LEAF_SCALE: f64 = (1u64 << MAX_LEVEL) as f64;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CellId(pub u64);

/// The cube face of a unit vector and its (u, v) coordinates on that face.
pub fn xyz_to_face_uv(p: &P3) -> (u8, f64, f64) {
    let a = [p[0].abs(), p[1].abs(), p[2].abs()];
    let mut face = if a[0] > a[1] {
        if a[0] > a[2] {
            0
        } else {
            2
        }
    } else if a[1] > a[2] {
        1
    } else {
        2
    };
    if p[face] < 0.0 {
        face += 3;
    }
    let [x, y, z] = *p;
    let (u, v) = match face {
        0 => (y / x, z / x),
        1 => (-x / y, z / y),
        2 => (-x / z, -y / z),
        3 => (z / x, y / x),
        4 => (z / y, -x / y),
        _ => (-y / z, -x / z),
    };
    (face as u8, u, v)
}

/// The (not normalized) point of face coordinates (u, v).
pub fn face_uv_to_xyz(face: u8, u: f64, v: f64) -> P3 {
    match face {
        0 => [1.0, u, v],
        1 => [-u, 1.0, v],
        2 => [-u, -v, 1.0],
        3 => [-1.0, -v, -u],
        4 => [v, -1.0, -u],
        _ => [v, u, -1.0],
    }
}

fn uv_to_st(u: f64) -> f64 {
    if u >= 0.0 {
        0.5 * (1.0 + 3.0 * u).sqrt()
    } else {
        1.0 - 0.5 * (1.0 - 3.0 * u).sqrt()
    }
}

fn st_to_uv(s: f64) -> f64 {
    if s >= 0.5 {
        (4.0 * s * s - 1.0) / 3.0
    } else {
        (1.0 - 4.0 * (1.0 - s) * (1.0 - s)) / 3.0
    }
}

fn st_to_ij(s: f64) -> u32 {
    let max = (1u64 << MAX_LEVEL) - 1;
    ((s * LEAF_SCALE).floor().max(0.0) as u64).min(max) as u32
}

fn lsb_for_level(level: u32) -> u64 {
    1u64 << (2 * (MAX_LEVEL - level))
}

impl CellId {
    /// The leaf cell holding a unit vector.
    pub fn from_point(p: &P3) -> CellId {
        let (face, u, v) = xyz_to_face_uv(p);
        CellId::from_face_ij(face, st_to_ij(uv_to_st(u)), st_to_ij(uv_to_st(v)))
    }

    pub fn from_face_ij(face: u8, i: u32, j: u32) -> CellId {
        let mut orientation = face & SWAP;
        let mut pos: u64 = 0;
        for k in (0..MAX_LEVEL).rev() {
            let ij = ((((i >> k) & 1) << 1) | ((j >> k) & 1)) as usize;
            let p = IJ_TO_POS[orientation as usize][ij];
            pos = (pos << 2) | u64::from(p);
            orientation ^= POS_TO_ORIENTATION[p as usize];
        }
        CellId((u64::from(face) << 61) | (pos << 1) | 1)
    }

    pub fn face_cell(face: u8) -> CellId {
        CellId((u64::from(face) << 61) | lsb_for_level(0))
    }

    pub fn face(self) -> u8 {
        (self.0 >> 61) as u8
    }

    pub fn lsb(self) -> u64 {
        self.0 & self.0.wrapping_neg()
    }

    pub fn level(self) -> u32 {
        MAX_LEVEL - self.0.trailing_zeros() / 2
    }

    pub fn parent(self, level: u32) -> CellId {
        let l = lsb_for_level(level);
        CellId((self.0 & l.wrapping_neg()) | l)
    }

    pub fn range_min(self) -> u64 {
        self.0 - (self.lsb() - 1)
    }

    pub fn range_max(self) -> u64 {
        self.0 + (self.lsb() - 1)
    }

    pub fn contains(self, other: CellId) -> bool {
        other.0 >= self.range_min() && other.0 <= self.range_max()
    }

    /// The four sub-cells in curve order (none for a leaf).
    pub fn children(self) -> Vec<CellId> {
        if self.level() >= MAX_LEVEL {
            return Vec::new();
        }
        let l = self.lsb() >> 2;
        let first = self.0 - self.lsb() + l;
        (0..4).map(|k| CellId(first + k * 2 * l)).collect()
    }

    /// The id as a 2dsphere index key stores it (MongoDB's cast to a signed long).
    pub fn as_key(self) -> i64 {
        self.0 as i64
    }

    /// Face, the (i, j) of the cell's lower corner in leaf units, and its size in leaf units.
    fn face_ij_size(self) -> (u8, u64, u64, u64) {
        let face = self.face();
        let level = self.level();
        let mut orientation = face & SWAP;
        let (mut i, mut j) = (0u64, 0u64);
        for k in 0..level {
            let shift = 61 - 2 * (k + 1);
            let pos = ((self.0 >> shift) & 3) as usize;
            let ij = POS_TO_IJ[orientation as usize][pos];
            i = (i << 1) | u64::from(ij >> 1);
            j = (j << 1) | u64::from(ij & 1);
            orientation ^= POS_TO_ORIENTATION[pos];
        }
        let shift = MAX_LEVEL - level;
        (face, i << shift, j << shift, 1u64 << shift)
    }

    /// The four corners (unit vectors).
    pub fn vertices(self) -> [P3; 4] {
        let (face, i, j, size) = self.face_ij_size();
        let uv = |x: u64| st_to_uv(x as f64 / LEAF_SCALE);
        let (u0, u1, v0, v1) = (uv(i), uv(i + size), uv(j), uv(j + size));
        [
            normalize(&face_uv_to_xyz(face, u0, v0)),
            normalize(&face_uv_to_xyz(face, u1, v0)),
            normalize(&face_uv_to_xyz(face, u1, v1)),
            normalize(&face_uv_to_xyz(face, u0, v1)),
        ]
    }

    /// A cap holding the whole cell: its centre and the largest angle to a corner. The cell
    /// is a convex spherical quadrilateral (its edges are great-circle arcs) narrower than a
    /// hemisphere, so a cap holding its corners holds all of it.
    pub fn cap(self) -> (P3, f64) {
        let (face, i, j, size) = self.face_ij_size();
        let mid = |x: u64| st_to_uv((x as f64 + size as f64 / 2.0) / LEAF_SCALE);
        let center = normalize(&face_uv_to_xyz(face, mid(i), mid(j)));
        let radius = self
            .vertices()
            .iter()
            .map(|v| angle(&center, v))
            .fold(0.0, f64::max);
        (center, radius)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::sphere::from_lng_lat;
    use proptest::prelude::*;

    #[test]
    fn known_leaf_ids() {
        let c = CellId::from_point(&from_lng_lat(0.0, 0.0));
        assert_eq!(c.face(), 0);
        assert_eq!(c.level(), 30);
        assert_eq!(c.parent(0), CellId::face_cell(0));
        // A face cell: the face in the top 3 bits, then the level marker.
        assert_eq!(CellId::face_cell(3).0, 0x7000_0000_0000_0000);
    }

    proptest! {
        #[test]
        fn leaf_cell_holds_its_point(lng in -180.0f64..180.0, lat in -90.0f64..90.0, level in 0u32..=30) {
            let p = from_lng_lat(lng, lat);
            let leaf = CellId::from_point(&p);
            let cell = leaf.parent(level);
            prop_assert!(cell.contains(leaf));
            prop_assert_eq!(cell.level(), level);
            let (c, r) = cell.cap();
            prop_assert!(angle(&c, &p) <= r + 1e-9);
            if level < 30 {
                let kids = cell.children();
                prop_assert_eq!(kids.iter().filter(|k| k.contains(leaf)).count(), 1);
                prop_assert_eq!(kids[0].range_min(), cell.range_min());
                prop_assert_eq!(kids[3].range_max(), cell.range_max());
            }
        }
    }
}
