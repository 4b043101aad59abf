//! Unit vectors on the sphere and the few predicates the geo shapes need.

pub type P3 = [f64; 3];

pub fn from_lng_lat(lng_deg: f64, lat_deg: f64) -> P3 {
    let (lng, lat) = (lng_deg.to_radians(), lat_deg.to_radians());
    [lat.cos() * lng.cos(), lat.cos() * lng.sin(), lat.sin()]
}

pub fn dot(a: &P3, b: &P3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

pub fn cross(a: &P3, b: &P3) -> P3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

pub fn norm(a: &P3) -> f64 {
    dot(a, a).sqrt()
}

pub fn normalize(a: &P3) -> P3 {
    let n = norm(a);
    if n == 0.0 {
        return [1.0, 0.0, 0.0];
    }
    [a[0] / n, a[1] / n, a[2] / n]
}

/// The angle between two unit vectors (radians), accurate for small and large angles.
pub fn angle(a: &P3, b: &P3) -> f64 {
    norm(&cross(a, b)).atan2(dot(a, b))
}

/// Whether the arcs AB and CD cross at a point interior to both (S2's simple crossing test).
pub fn arcs_cross(a: &P3, b: &P3, c: &P3, d: &P3) -> bool {
    let ab = cross(a, b);
    let acb = -dot(&ab, c);
    let bda = dot(&ab, d);
    if acb * bda <= 0.0 {
        return false;
    }
    let cd = cross(c, d);
    let cbd = -dot(&cd, b);
    let dac = dot(&cd, a);
    acb * cbd > 0.0 && acb * dac > 0.0
}

/// [`arcs_cross`] where neither arc's end lies on (within ~1e-13 rad of) the other's great
/// circle: arcs that only touch or run along each other (shared edges) do not cross.
pub fn arcs_cross_strictly(a: &P3, b: &P3, c: &P3, d: &P3) -> bool {
    const TOUCH: f64 = 1e-13;
    let ab = normalize(&cross(a, b));
    let cd = normalize(&cross(c, d));
    let sides = [dot(&ab, c), dot(&ab, d), dot(&cd, a), dot(&cd, b)];
    sides.iter().all(|s| s.abs() > TOUCH) && arcs_cross(a, b, c, d)
}

/// The distance (radians) from `p` to the arc AB.
pub fn distance_to_arc(p: &P3, a: &P3, b: &P3) -> f64 {
    let n = cross(a, b);
    let nn = norm(&n);
    if nn > 1e-15 {
        let n = [n[0] / nn, n[1] / nn, n[2] / nn];
        // The projection of p onto the great circle lies on the arc when it is on the inner
        // side of both A and B.
        if dot(&cross(a, p), &n) > 0.0 && dot(&cross(p, b), &n) > 0.0 {
            let s = dot(p, &n).clamp(-1.0, 1.0);
            return s.abs().asin();
        }
    }
    angle(p, a).min(angle(p, b))
}

/// The gnomonic projection about `center` (great circles map to straight lines), for points
/// in the open hemisphere around it.
pub struct Gnomonic {
    center: P3,
    e1: P3,
    e2: P3,
}

impl Gnomonic {
    pub fn new(center: P3) -> Gnomonic {
        let helper = if center[0].abs() < 0.9 {
            [1.0, 0.0, 0.0]
        } else {
            [0.0, 1.0, 0.0]
        };
        let e1 = normalize(&cross(&center, &helper));
        let e2 = cross(&center, &e1);
        Gnomonic { center, e1, e2 }
    }

    pub fn project(&self, p: &P3) -> Option<(f64, f64)> {
        let d = dot(p, &self.center);
        (d > 1e-12).then(|| (dot(p, &self.e1) / d, dot(p, &self.e2) / d))
    }
}
