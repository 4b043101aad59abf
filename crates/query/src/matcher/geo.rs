//! Geo operators: `$geoWithin` (`$within`), `$geoIntersects`, `$near`, `$nearSphere`.
//!
//! A value matches when it parses as a geometry (GeoJSON or a legacy pair) that satisfies
//! the operator; other values never match (array elements are tried one by one, as for
//! any leaf, and an array of two numbers is also tried whole as a legacy point).

use bson::{Bson, Document, RawBsonRef};
use nidus_common::{Error, Result};
use nidus_doc::geo::shape::{self, legacy_point, number, Geometry, Point, Region};
use nidus_doc::geo::sphere::P3;
use nidus_doc::geo::RADIUS_OF_EARTH_METERS;
use std::sync::Arc;

#[derive(Debug)]
pub enum GeoOp {
    Within(Region),
    Intersects(Geometry),
    Near(NearQuery),
}

/// `$near`/`$nearSphere`: the point, whether it was GeoJSON (distances in meters on the
/// sphere) or a legacy pair (radians with `$nearSphere`, flat units with `$near`), and the
/// distance limits in those units.
#[derive(Debug, Clone)]
pub struct NearQuery {
    pub point: Point,
    pub geojson: bool,
    pub spherical: bool,
    pub min_distance: Option<f64>,
    pub max_distance: Option<f64>,
}

impl NearQuery {
    /// The distance from the query point to a geometry, in the query's units.
    pub fn distance(&self, g: &Geometry) -> f64 {
        if !self.spherical && !self.geojson {
            return match g.as_point() {
                Some(p) => ((p.x - self.point.x).powi(2) + (p.y - self.point.y).powi(2)).sqrt(),
                None => f64::INFINITY,
            };
        }
        let rad = g.distance_from(&self.point.p);
        if self.geojson {
            rad * RADIUS_OF_EARTH_METERS
        } else {
            rad
        }
    }

    pub fn in_range(&self, d: f64) -> bool {
        self.min_distance.is_none_or(|m| d >= m) && self.max_distance.is_none_or(|m| d <= m)
    }

    /// The spherical cap (radians) holding every match, when the distances are spherical
    /// and bounded; None = anywhere.
    pub fn cap(&self) -> Option<(P3, f64)> {
        let max = self.max_distance?;
        let r = if self.geojson {
            max / RADIUS_OF_EARTH_METERS
        } else {
            max
        };
        (r < std::f64::consts::FRAC_PI_2).then_some((self.point.p, r + 1e-9))
    }
}

/// A parsed geo operator with the argument as given (for the canonical filter).
#[derive(Debug, Clone)]
pub struct GeoLeaf {
    pub op: Arc<GeoOp>,
    pub operator: &'static str,
    pub arg: Document,
}

impl GeoLeaf {
    pub fn matches(&self, v: RawBsonRef) -> bool {
        let Ok(raw) = v.to_raw_bson().try_into() else {
            return false;
        };
        let v: Bson = raw;
        let geojson = matches!(&v, Bson::Document(d) if d.contains_key("type"));
        let Ok(g) = shape::stored(&v, false) else {
            return false;
        };
        // A legacy point takes part in spherical predicates only as a valid longitude and
        // latitude (MongoDB's `flatUpgradedToSphere`).
        let on_sphere = geojson
            || g.as_point()
                .is_some_and(|p| (-180.0..=180.0).contains(&p.x) && (-90.0..=90.0).contains(&p.y));
        match self.op.as_ref() {
            // Flat regions hold legacy points only.
            GeoOp::Within(r) if r.is_flat() => !geojson && r.contains(&g),
            GeoOp::Within(r) => on_sphere && r.contains(&g),
            GeoOp::Intersects(q) => on_sphere && q.intersects(&g),
            GeoOp::Near(n) => n.in_range(n.distance(&g)),
        }
    }

    pub fn near(&self) -> Option<&NearQuery> {
        match self.op.as_ref() {
            GeoOp::Near(n) => Some(n),
            _ => None,
        }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::bad_value(msg)
}

fn shown(d: &Document) -> String {
    nidus_common::shell::format(&Bson::Document(d.clone()))
}

fn query_geometry(d: &Document) -> Result<Geometry> {
    if let Some(crs) = d.get("crs") {
        let name = match crs {
            Bson::Document(c) => c
                .get_document("properties")
                .ok()
                .and_then(|p| p.get_str("name").ok()),
            _ => None,
        };
        if !matches!(
            name,
            Some("EPSG:4326" | "urn:ogc:def:crs:OGC:1.3:CRS84" | "EPSG:4326:EPSG::4326")
        ) {
            return Err(bad(format!(
                "unknown CRS type or CRS not supported: {}",
                shown(d)
            )));
        }
    }
    shape::geojson(d).map_err(bad)
}

fn pair(v: &Bson, what: &str) -> Result<(f64, f64)> {
    legacy_point(v).ok_or_else(|| bad(format!("{what}: point must be an array of two numbers")))
}

/// `$geoWithin: {...}`.
pub fn parse_within(op: &'static str, arg: &Bson) -> Result<GeoLeaf> {
    let Bson::Document(d) = arg else {
        return Err(bad(format!("{op} operator must be an object")));
    };
    let Some((shape_name, spec)) = d.iter().next() else {
        return Err(bad(format!("{op} operator must be an object")));
    };
    let region = match shape_name.as_str() {
        "$geometry" => {
            let Bson::Document(g) = spec else {
                return Err(bad("$geometry must be an object"));
            };
            match query_geometry(g)? {
                Geometry::Polygon(p) => Region::Polygons(vec![p]),
                Geometry::MultiPolygon(ps) => Region::Polygons(ps),
                _ => {
                    return Err(bad(format!(
                        "$geoWithin not supported with provided geometry: {}",
                        shown(d)
                    )))
                }
            }
        }
        "$box" => {
            let Bson::Array(a) = spec else {
                return Err(bad("$box must be an array"));
            };
            if a.len() != 2 {
                return Err(bad("Point must only contain numeric elements"));
            }
            let (p, q) = (pair(&a[0], "$box")?, pair(&a[1], "$box")?);
            Region::FlatBox((p.0.min(q.0), p.1.min(q.1)), (p.0.max(q.0), p.1.max(q.1)))
        }
        "$polygon" => {
            let Bson::Array(a) = spec else {
                return Err(bad("$polygon must be an array"));
            };
            let pts = a
                .iter()
                .map(|p| pair(p, "$polygon"))
                .collect::<Result<Vec<_>>>()?;
            if pts.len() < 3 {
                return Err(bad("Polygon must have at least 3 points"));
            }
            Region::FlatPolygon(pts)
        }
        "$center" | "$centerSphere" => {
            let Bson::Array(a) = spec else {
                return Err(bad(format!("{shape_name} must be an array")));
            };
            let (c, r) = match a.as_slice() {
                [c, r] => (pair(c, shape_name)?, number(r)),
                _ => return Err(bad(format!("{shape_name} must have a center and a radius"))),
            };
            let r = r
                .filter(|r| *r >= 0.0)
                .ok_or_else(|| bad("radius must be a non-negative number"))?;
            if shape_name == "$center" {
                Region::FlatCircle(c, r)
            } else {
                if !(-180.0..=180.0).contains(&c.0) || !(-90.0..=90.0).contains(&c.1) {
                    return Err(bad(
                        "Invalid $centerSphere: longitude/latitude is out of bounds",
                    ));
                }
                Region::Cap(Point::new(c.0, c.1).p, r)
            }
        }
        other => return Err(bad(format!("unknown geo specifier: {other}: {}", shown(d)))),
    };
    Ok(GeoLeaf {
        op: Arc::new(GeoOp::Within(region)),
        operator: "$geoWithin",
        arg: d.clone(),
    })
}

/// `$geoIntersects: {$geometry: ...}`.
pub fn parse_intersects(arg: &Bson) -> Result<GeoLeaf> {
    let geometry = match arg {
        Bson::Document(d) => match d.get("$geometry") {
            Some(Bson::Document(g)) => query_geometry(g)?,
            _ => {
                return Err(bad(format!(
                    "$geoIntersects not supported with provided geometry: {}",
                    shown(d)
                )))
            }
        },
        _ => return Err(bad("$geoIntersects must be an object")),
    };
    let Bson::Document(d) = arg else {
        return Err(bad("$geoIntersects must be an object"));
    };
    Ok(GeoLeaf {
        op: Arc::new(GeoOp::Intersects(geometry)),
        operator: "$geoIntersects",
        arg: d.clone(),
    })
}

fn distance_arg(v: &Bson, name: &str) -> Result<f64> {
    match number(v) {
        Some(f) if f >= 0.0 => Ok(f),
        Some(_) => Err(bad(format!("{name} must be non-negative"))),
        None => Err(bad(format!("{name} must be a number"))),
    }
}

/// The operator document of a field holding `$near` or `$nearSphere` (with its sibling
/// `$minDistance`/`$maxDistance` in the legacy form).
pub fn parse_near(d: &Document) -> Result<GeoLeaf> {
    let (op, spherical) = if d.contains_key("$nearSphere") {
        ("$nearSphere", true)
    } else {
        ("$near", false)
    };
    let spec = d.get(op).ok_or_else(|| bad("missing $near"))?;
    let (mut min_distance, mut max_distance) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "$near" | "$nearSphere" => {}
            "$minDistance" => min_distance = Some(distance_arg(v, k)?),
            "$maxDistance" => max_distance = Some(distance_arg(v, k)?),
            other => return Err(bad(format!("invalid argument in geo near query: {other}"))),
        }
    }
    let (point, geojson) = match spec {
        Bson::Document(s) if s.contains_key("$geometry") => {
            for (k, v) in s {
                match k.as_str() {
                    "$geometry" => {}
                    "$minDistance" => min_distance = Some(distance_arg(v, k)?),
                    "$maxDistance" => max_distance = Some(distance_arg(v, k)?),
                    other => {
                        return Err(bad(format!("invalid argument in geo near query: {other}")))
                    }
                }
            }
            let Some(Bson::Document(g)) = s.get("$geometry") else {
                return Err(bad("$geometry must be an object"));
            };
            match query_geometry(g)? {
                Geometry::Point(p) => (p, true),
                _ => return Err(bad("$near requires a point, given a non-point geometry")),
            }
        }
        other => match legacy_point(other) {
            Some((x, y)) => (Point::new(x, y), false),
            None => return Err(bad(format!("{op} must be a point"))),
        },
    };
    if geojson && (!(-180.0..=180.0).contains(&point.x) || !(-90.0..=90.0).contains(&point.y)) {
        return Err(bad("invalid point in geo near query $geometry argument"));
    }
    if let (Some(lo), Some(hi)) = (min_distance, max_distance) {
        if lo > hi {
            return Err(bad(
                "$minDistance must be less than or equal to $maxDistance",
            ));
        }
    }
    Ok(GeoLeaf {
        op: Arc::new(GeoOp::Near(NearQuery {
            point,
            geojson,
            spherical: spherical || geojson,
            min_distance,
            max_distance,
        })),
        operator: if spherical { "$nearSphere" } else { "$near" },
        arg: d.clone(),
    })
}
