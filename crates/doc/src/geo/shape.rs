//! Geometries as MongoDB parses them (GeoJSON objects and legacy coordinate pairs) and the
//! spherical predicates over them: intersection, containment in a region, distance.

use super::sphere::{
    angle, arcs_cross, arcs_cross_strictly, distance_to_arc, from_lng_lat, normalize, Gnomonic, P3,
};
use bson::{Bson, Document};

/// Two points closer than this (radians, ~6 µm on the earth) are the same point.
const EPS: f64 = 1e-12;

#[derive(Debug, Clone)]
pub struct Point {
    /// Longitude (or legacy x) and latitude (or legacy y).
    pub x: f64,
    pub y: f64,
    pub p: P3,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Point {
        Point {
            x,
            y,
            p: from_lng_lat(x, y),
        }
    }
}

/// A polygon smaller than a hemisphere: its outer ring and holes (open rings, the closing
/// vertex dropped), with their gnomonic projection about the centre of the outer ring for
/// point-in-ring tests (great-circle edges become straight lines there).
#[derive(Debug, Clone)]
pub struct Polygon {
    pub rings: Vec<Vec<P3>>,
    planar: Vec<Vec<(f64, f64)>>,
    center: P3,
}

impl Polygon {
    pub fn new(rings: Vec<Vec<P3>>) -> Result<Polygon, String> {
        let outer = rings.first().ok_or("Polygon has no loops.")?;
        let sum = outer
            .iter()
            .fold([0.0; 3], |a, p| [a[0] + p[0], a[1] + p[1], a[2] + p[2]]);
        let center = normalize(&sum);
        let g = Gnomonic::new(center);
        let mut planar = Vec::with_capacity(rings.len());
        for ring in &rings {
            let mut pr = Vec::with_capacity(ring.len());
            for p in ring {
                pr.push(g.project(p).ok_or(
                    "Polygon is larger than a hemisphere; big polygons need the strict winding CRS, which is not supported",
                )?);
            }
            planar.push(pr);
        }
        Ok(Polygon {
            rings,
            planar,
            center,
        })
    }

    fn edges(&self) -> impl Iterator<Item = (&P3, &P3)> {
        self.rings.iter().flat_map(|r| {
            r.iter()
                .zip(r.iter().skip(1).chain(r.first()))
                .collect::<Vec<_>>()
        })
    }

    fn on_boundary(&self, p: &P3) -> bool {
        self.edges().any(|(a, b)| distance_to_arc(p, a, b) < EPS)
    }

    /// Inside the outer ring and outside every hole; boundary points count as inside.
    pub fn contains(&self, p: &P3) -> bool {
        let Some(q) = Gnomonic::new(self.center).project(p) else {
            return false;
        };
        if self.on_boundary(p) {
            return true;
        }
        let mut rings = self.planar.iter();
        let inside_outer = rings.next().is_some_and(|r| in_ring(q, r));
        inside_outer && !rings.any(|r| in_ring(q, r))
    }

    fn crosses_arc(&self, a: &P3, b: &P3) -> bool {
        self.edges().any(|(c, d)| arcs_cross(a, b, c, d))
    }

    /// Whether the arc AB passes from inside to outside (touching the boundary is not).
    fn arc_leaves(&self, a: &P3, b: &P3) -> bool {
        self.edges().any(|(c, d)| arcs_cross_strictly(a, b, c, d))
    }
}

/// Planar ray casting.
pub fn in_ring(q: (f64, f64), ring: &[(f64, f64)]) -> bool {
    let mut inside = false;
    let n = ring.len();
    let mut j = n.wrapping_sub(1);
    for i in 0..n {
        let (xi, yi) = ring[i];
        let (xj, yj) = ring[j];
        if (yi > q.1) != (yj > q.1) && q.0 < (xj - xi) * (q.1 - yi) / (yj - yi) + xi {
            inside = !inside;
        }
        j = i;
    }
    inside
}

#[derive(Debug, Clone)]
pub enum Geometry {
    Point(Point),
    MultiPoint(Vec<Point>),
    LineString(Vec<Point>),
    MultiLineString(Vec<Vec<Point>>),
    Polygon(Polygon),
    MultiPolygon(Vec<Polygon>),
    Collection(Vec<Geometry>),
}

/// The simple parts of a geometry.
enum Part<'a> {
    Point(&'a P3),
    Line(&'a [Point]),
    Polygon(&'a Polygon),
}

impl Geometry {
    pub fn is_point(&self) -> bool {
        matches!(self, Geometry::Point(_))
    }

    fn parts(&self) -> Vec<Part<'_>> {
        let mut out = Vec::new();
        self.collect_parts(&mut out);
        out
    }

    fn collect_parts<'a>(&'a self, out: &mut Vec<Part<'a>>) {
        match self {
            Geometry::Point(p) => out.push(Part::Point(&p.p)),
            Geometry::MultiPoint(ps) => out.extend(ps.iter().map(|p| Part::Point(&p.p))),
            Geometry::LineString(l) => out.push(Part::Line(l)),
            Geometry::MultiLineString(ls) => out.extend(ls.iter().map(|l| Part::Line(l))),
            Geometry::Polygon(p) => out.push(Part::Polygon(p)),
            Geometry::MultiPolygon(ps) => out.extend(ps.iter().map(Part::Polygon)),
            Geometry::Collection(gs) => gs.iter().for_each(|g| g.collect_parts(out)),
        }
    }

    /// Every vertex (the outer rings of polygons).
    pub fn vertices(&self) -> Vec<P3> {
        let mut out = Vec::new();
        for part in self.parts() {
            match part {
                Part::Point(p) => out.push(*p),
                Part::Line(l) => out.extend(l.iter().map(|p| p.p)),
                Part::Polygon(poly) => out.extend(poly.rings[0].iter().copied()),
            }
        }
        out
    }

    /// A cap (centre, radius in radians) holding the whole geometry, or None when no cap
    /// narrower than a hemisphere does (then a covering is the whole sphere). Lines and
    /// polygons lie in the spherical convex hull of their vertices, which a cap narrower
    /// than a hemisphere holding the vertices holds.
    pub fn bounding_cap(&self) -> Option<(P3, f64)> {
        cap_of(&self.vertices())
    }

    pub fn intersects(&self, other: &Geometry) -> bool {
        let theirs = other.parts();
        self.parts()
            .iter()
            .any(|a| theirs.iter().any(|b| parts_intersect(a, b)))
    }

    /// The smallest distance (radians) from `q` to the geometry (0 inside a polygon).
    pub fn distance_from(&self, q: &P3) -> f64 {
        self.parts()
            .iter()
            .map(|part| match part {
                Part::Point(p) => angle(q, p),
                Part::Line(l) => line_arcs(l)
                    .map(|(a, b)| distance_to_arc(q, a, b))
                    .fold(f64::INFINITY, f64::min)
                    .min(l.first().map_or(f64::INFINITY, |p| angle(q, &p.p))),
                Part::Polygon(poly) => {
                    if poly.contains(q) {
                        0.0
                    } else {
                        poly.edges()
                            .map(|(a, b)| distance_to_arc(q, a, b))
                            .fold(f64::INFINITY, f64::min)
                    }
                }
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// The point `$near` measures from and `includeLocs` shows: a point's own coordinates.
    pub fn as_point(&self) -> Option<&Point> {
        match self {
            Geometry::Point(p) => Some(p),
            _ => None,
        }
    }
}

pub fn cap_of(vertices: &[P3]) -> Option<(P3, f64)> {
    let sum = vertices
        .iter()
        .fold([0.0; 3], |a, p| [a[0] + p[0], a[1] + p[1], a[2] + p[2]]);
    let center = if vertices.len() == 1 {
        vertices[0]
    } else {
        normalize(&sum)
    };
    let radius = vertices
        .iter()
        .map(|p| angle(&center, p))
        .fold(0.0, f64::max);
    (radius < std::f64::consts::FRAC_PI_2 - 1e-6).then_some((center, radius + 1e-9))
}

fn line_arcs(l: &[Point]) -> impl Iterator<Item = (&P3, &P3)> {
    l.iter().zip(l.iter().skip(1)).map(|(a, b)| (&a.p, &b.p))
}

fn parts_intersect(a: &Part, b: &Part) -> bool {
    match (a, b) {
        (Part::Point(p), Part::Point(q)) => angle(p, q) < EPS,
        (Part::Point(p), Part::Line(l)) | (Part::Line(l), Part::Point(p)) => {
            l.iter().any(|v| angle(p, &v.p) < EPS)
                || line_arcs(l).any(|(a, b)| distance_to_arc(p, a, b) < EPS)
        }
        (Part::Point(p), Part::Polygon(poly)) | (Part::Polygon(poly), Part::Point(p)) => {
            poly.contains(p)
        }
        (Part::Line(l), Part::Line(m)) => {
            line_arcs(l).any(|(a, b)| line_arcs(m).any(|(c, d)| arcs_cross(a, b, c, d)))
                || l.iter().any(|v| parts_intersect(&Part::Point(&v.p), b))
                || m.iter().any(|v| parts_intersect(&Part::Point(&v.p), a))
        }
        (Part::Line(l), Part::Polygon(poly)) | (Part::Polygon(poly), Part::Line(l)) => {
            l.iter().any(|v| poly.contains(&v.p))
                || line_arcs(l).any(|(a, b)| poly.crosses_arc(a, b))
        }
        (Part::Polygon(p), Part::Polygon(q)) => {
            p.rings[0].iter().any(|v| q.contains(v))
                || q.rings[0].iter().any(|v| p.contains(v))
                || p.edges().any(|(a, b)| q.crosses_arc(a, b))
        }
    }
}

/// A region `$geoWithin` tests against.
#[derive(Debug, Clone)]
pub enum Region {
    /// `$geometry` Polygon or MultiPolygon: within the union (each part within one polygon).
    Polygons(Vec<Polygon>),
    /// `$centerSphere`: centre and radius in radians.
    Cap(P3, f64),
    /// `$box` (flat): lower-left and upper-right corners.
    FlatBox((f64, f64), (f64, f64)),
    /// `$polygon` (flat).
    FlatPolygon(Vec<(f64, f64)>),
    /// `$center` (flat): centre and radius.
    FlatCircle((f64, f64), f64),
}

impl Region {
    /// Whether the geometry lies inside the region. Flat regions hold only points.
    pub fn contains(&self, g: &Geometry) -> bool {
        match self {
            Region::Polygons(polys) => g.parts().iter().all(|part| {
                polys.iter().any(|poly| match part {
                    Part::Point(p) => poly.contains(p),
                    Part::Line(l) => {
                        l.iter().all(|v| poly.contains(&v.p))
                            && !line_arcs(l).any(|(a, b)| poly.arc_leaves(a, b))
                    }
                    Part::Polygon(inner) => {
                        inner.rings[0].iter().all(|v| poly.contains(v))
                            && !inner.edges().any(|(a, b)| poly.arc_leaves(a, b))
                            && !poly.rings.iter().skip(1).any(|hole| {
                                hole.iter()
                                    .any(|v| inner.contains(v) && !inner.on_boundary(v))
                            })
                    }
                })
            }),
            Region::Cap(center, r) => g.vertices().iter().all(|v| angle(center, v) <= *r),
            Region::FlatBox(lo, hi) => {
                flat_point(g).is_some_and(|(x, y)| x >= lo.0 && x <= hi.0 && y >= lo.1 && y <= hi.1)
            }
            Region::FlatPolygon(ring) => {
                flat_point(g).is_some_and(|q| in_ring(q, ring) || flat_on_ring(q, ring))
            }
            Region::FlatCircle(c, r) => flat_point(g)
                .is_some_and(|(x, y)| ((x - c.0).powi(2) + (y - c.1).powi(2)).sqrt() <= *r),
        }
    }

    /// A cap holding the region, on the sphere (None: no narrower than a hemisphere, or a
    /// flat region, which a 2dsphere index cannot answer).
    pub fn bounding_cap(&self) -> Option<(P3, f64)> {
        match self {
            Region::Polygons(polys) => {
                let vs: Vec<P3> = polys
                    .iter()
                    .flat_map(|p| p.rings[0].iter().copied())
                    .collect();
                cap_of(&vs)
            }
            Region::Cap(c, r) => (*r < std::f64::consts::FRAC_PI_2).then_some((*c, r + 1e-9)),
            _ => None,
        }
    }

    pub fn is_flat(&self) -> bool {
        matches!(
            self,
            Region::FlatBox(..) | Region::FlatPolygon(_) | Region::FlatCircle(..)
        )
    }
}

fn flat_point(g: &Geometry) -> Option<(f64, f64)> {
    g.as_point().map(|p| (p.x, p.y))
}

fn flat_on_ring(q: (f64, f64), ring: &[(f64, f64)]) -> bool {
    let n = ring.len();
    (0..n).any(|i| {
        let (a, b) = (ring[i], ring[(i + 1) % n]);
        let cross = (b.0 - a.0) * (q.1 - a.1) - (b.1 - a.1) * (q.0 - a.0);
        cross.abs() < 1e-12
            && q.0 >= a.0.min(b.0)
            && q.0 <= a.0.max(b.0)
            && q.1 >= a.1.min(b.1)
            && q.1 <= a.1.max(b.1)
    })
}

// ---- parsing ----

pub fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Double(f) => Some(*f),
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Decimal128(d) => d.to_string().parse().ok(),
        _ => None,
    }
}

fn shown(v: &Bson) -> String {
    nidus_common::shell::format(v)
}

/// A legacy coordinate pair: an array or document whose first two values are numbers.
pub fn legacy_point(v: &Bson) -> Option<(f64, f64)> {
    let vals: Vec<&Bson> = match v {
        Bson::Array(a) => a.iter().collect(),
        Bson::Document(d) => d.values().collect(),
        _ => return None,
    };
    if vals.len() < 2 {
        return None;
    }
    Some((number(vals[0])?, number(vals[1])?))
}

fn check_lng_lat(x: f64, y: f64) -> Result<(), String> {
    if (-180.0..=180.0).contains(&x) && (-90.0..=90.0).contains(&y) {
        Ok(())
    } else {
        Err(format!(
            "longitude/latitude is out of bounds, lng: {} lat: {}",
            fmt_num(x),
            fmt_num(y)
        ))
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

fn position(v: &Bson) -> Result<Point, String> {
    let Bson::Array(a) = v else {
        return Err(format!(
            "Point must be an array or object, instead got type {}",
            type_name(v)
        ));
    };
    if a.len() < 2 {
        return Err(format!(
            "Point must only contain numeric elements: {}",
            shown(v)
        ));
    }
    let (Some(x), Some(y)) = (number(&a[0]), number(&a[1])) else {
        return Err(format!(
            "Point must only contain numeric elements: {}",
            shown(v)
        ));
    };
    if a.len() > 3 || a.iter().any(|c| number(c).is_none()) {
        return Err(format!(
            "Point must only contain numeric elements: {}",
            shown(v)
        ));
    }
    check_lng_lat(x, y)?;
    Ok(Point::new(x, y))
}

fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        _ => "other",
    }
}

fn array<'a>(v: Option<&'a Bson>, what: &str) -> Result<&'a Vec<Bson>, String> {
    match v {
        Some(Bson::Array(a)) => Ok(a),
        _ => Err(format!("{what} must be an array")),
    }
}

fn points(v: &Bson, what: &str) -> Result<Vec<Point>, String> {
    array(Some(v), what)?.iter().map(position).collect()
}

fn line(v: &Bson) -> Result<Vec<Point>, String> {
    let pts = points(v, "LineString coordinates")?;
    if pts.len() < 2 {
        return Err(format!(
            "GeoJSON LineString must have at least 2 vertices: {}",
            shown(v)
        ));
    }
    Ok(pts)
}

fn polygon(v: &Bson) -> Result<Polygon, String> {
    let rings = array(Some(v), "Polygon coordinates")?;
    if rings.is_empty() {
        return Err(format!("Polygon has no loops. {}", shown(v)));
    }
    let mut out = Vec::with_capacity(rings.len());
    for ring in rings {
        let pts = points(ring, "Polygon ring")?;
        if pts.len() < 4 {
            return Err(format!(
                "Loop must have at least 3 different vertices: {}",
                shown(ring)
            ));
        }
        let (first, last) = (&pts[0], &pts[pts.len() - 1]);
        if first.x != last.x || first.y != last.y {
            return Err(format!(
                "Loop is not closed, first vertex does not equal last vertex: {}",
                shown(ring)
            ));
        }
        let mut open: Vec<P3> = Vec::with_capacity(pts.len());
        for p in &pts[..pts.len() - 1] {
            if open.last().is_none_or(|q| angle(q, &p.p) >= EPS) {
                open.push(p.p);
            }
        }
        while open.len() > 1 && angle(&open[0], &open[open.len() - 1]) < EPS {
            open.pop();
        }
        if open.len() < 3 {
            return Err(format!(
                "Loop must have at least 3 different vertices: {}",
                shown(ring)
            ));
        }
        out.push(open);
    }
    let poly = Polygon::new(out)?;
    // Edges of one polygon must not cross (MongoDB's loop validation); edges sharing a
    // vertex are not compared (their shared end is no crossing).
    let ring_edges: Vec<Vec<(P3, P3)>> = poly
        .rings
        .iter()
        .map(|r| {
            r.iter()
                .copied()
                .zip(r.iter().copied().cycle().skip(1))
                .collect()
        })
        .collect();
    for (ri, ring) in ring_edges.iter().enumerate() {
        let n = ring.len();
        for (i, (a, b)) in ring.iter().enumerate() {
            for (j, (c, d)) in ring.iter().enumerate().skip(i + 2) {
                if i == 0 && j == n - 1 {
                    continue;
                }
                if arcs_cross_strictly(a, b, c, d) {
                    return Err(format!("Edges {i} and {j} cross in polygon: {}", shown(v)));
                }
            }
            for other in ring_edges.iter().skip(ri + 1) {
                if other.iter().any(|(c, d)| arcs_cross_strictly(a, b, c, d)) {
                    return Err(format!("Loops cross in polygon: {}", shown(v)));
                }
            }
        }
    }
    Ok(poly)
}

/// A GeoJSON object (`{type, coordinates}` or a GeometryCollection's `geometries`).
pub fn geojson(d: &Document) -> Result<Geometry, String> {
    let Some(Bson::String(t)) = d.get("type") else {
        return Err(format!(
            "unknown GeoJSON type: {}",
            shown(&Bson::Document(d.clone()))
        ));
    };
    if t == "GeometryCollection" {
        let gs = array(d.get("geometries"), "GeometryCollection geometries")?;
        let mut out = Vec::with_capacity(gs.len());
        for g in gs {
            let Bson::Document(gd) = g else {
                return Err("Element in 'geometries' is not an object".into());
            };
            out.push(geojson(gd)?);
        }
        return Ok(Geometry::Collection(out));
    }
    let coords = d.get("coordinates").ok_or_else(|| {
        format!(
            "coordinates must be an array: {}",
            shown(&Bson::Document(d.clone()))
        )
    })?;
    Ok(match t.as_str() {
        "Point" => Geometry::Point(position(coords)?),
        "MultiPoint" => {
            let pts = points(coords, "MultiPoint coordinates")?;
            if pts.is_empty() {
                return Err("MultiPoint coordinates must have at least 1 element".into());
            }
            Geometry::MultiPoint(pts)
        }
        "LineString" => Geometry::LineString(line(coords)?),
        "MultiLineString" => Geometry::MultiLineString(
            array(Some(coords), "MultiLineString coordinates")?
                .iter()
                .map(line)
                .collect::<Result<_, _>>()?,
        ),
        "Polygon" => Geometry::Polygon(polygon(coords)?),
        "MultiPolygon" => Geometry::MultiPolygon(
            array(Some(coords), "MultiPolygon coordinates")?
                .iter()
                .map(polygon)
                .collect::<Result<_, _>>()?,
        ),
        _ => {
            return Err(format!(
                "unknown GeoJSON type: {}",
                shown(&Bson::Document(d.clone()))
            ))
        }
    })
}

/// A stored value as a geometry: GeoJSON, or a legacy pair (unchecked coordinates unless
/// `lng_lat`, as a 2dsphere index requires).
pub fn stored(v: &Bson, lng_lat: bool) -> Result<Geometry, String> {
    if let Bson::Document(d) = v {
        if d.contains_key("type") {
            return geojson(d);
        }
    }
    match legacy_point(v) {
        Some((x, y)) => {
            if lng_lat {
                check_lng_lat(x, y)?;
            }
            Ok(Geometry::Point(Point::new(x, y)))
        }
        None => Err(format!(
            "Point must only contain numeric elements: {}",
            shown(v)
        )),
    }
}
