//! `$geoNear`: the documents nearest a point first, each with its distance in
//! `distanceField` (times `distanceMultiplier`) and, with `includeLocs`, the location that
//! was measured. It runs as the collection's query `{key: {$nearSphere | $near: ...}}` and
//! `query` (so through GEO_NEAR_2DSPHERE over the 2dsphere index on `key`, or GEO_NEAR_2D
//! over a 2d index; without `key`, the only 2d index, else the only 2dsphere index), and must
//! be the pipeline's first stage (40603).

use super::{DocumentSource, ExpCtx, ParseCtx, Position, StageRef, Stream, VecStream};
use crate::find::FindSpec;
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::geo::shape::{legacy_point, number};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct GeoNear {
    spec: Document,
    near: Bson,
    geojson: bool,
    spherical: bool,
    distance_field: String,
    include_locs: Option<String>,
    min_distance: Option<f64>,
    max_distance: Option<f64>,
    multiplier: f64,
    query: Document,
    key: Option<String>,
}

fn non_negative(v: &Bson, name: &str) -> Result<f64> {
    match number(v) {
        Some(f) if f >= 0.0 => Ok(f),
        Some(_) => Err(Error::bad_value(format!("{name} must be nonnegative"))),
        None => Err(Error::type_mismatch(format!("{name} must be a number"))),
    }
}

fn string(v: &Bson, name: &str) -> Result<String> {
    match v {
        Bson::String(s) if !s.is_empty() => Ok(s.clone()),
        Bson::String(_) => Err(Error::bad_value(format!(
            "$geoNear parameter '{name}' cannot be the empty string"
        ))),
        _ => Err(Error::type_mismatch(format!("{name} must be a string"))),
    }
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            10065,
            "invalid parameter: expected an object ($geoNear)",
        ));
    };
    let mut near = None;
    let mut out = GeoNear {
        spec: spec.clone(),
        near: Bson::Null,
        geojson: false,
        spherical: false,
        distance_field: String::new(),
        include_locs: None,
        min_distance: None,
        max_distance: None,
        multiplier: 1.0,
        query: Document::new(),
        key: None,
    };
    let mut distance_field = None;
    for (k, v) in spec {
        match k.as_str() {
            "near" => near = Some(v.clone()),
            "distanceField" => distance_field = Some(string(v, k)?),
            "includeLocs" => out.include_locs = Some(string(v, k)?),
            "spherical" => {
                out.spherical =
                    matches!(v, Bson::Boolean(true)) || number(v).is_some_and(|f| f != 0.0)
            }
            "maxDistance" => out.max_distance = Some(non_negative(v, "maxDistance")?),
            "minDistance" => out.min_distance = Some(non_negative(v, "minDistance")?),
            "distanceMultiplier" => out.multiplier = non_negative(v, "distanceMultiplier")?,
            "key" => out.key = Some(string(v, k)?),
            "query" => match v {
                Bson::Document(q) => out.query = q.clone(),
                _ => return Err(Error::type_mismatch("query must be an object")),
            },
            other => {
                return Err(Error::location(
                    16605,
                    format!("Unknown argument to $geoNear: {other}"),
                ))
            }
        }
    }
    let near =
        near.ok_or_else(|| Error::location(5860400, "$geoNear requires a 'near' argument"))?;
    out.geojson = matches!(&near, Bson::Document(d) if d.contains_key("type"));
    if !out.geojson && legacy_point(&near).is_none() {
        return Err(Error::bad_value(
            "$geoNear requires near argument to be a GeoJSON object or a legacy point(array)",
        ));
    }
    out.near = near;
    out.distance_field = distance_field.ok_or_else(|| {
        Error::location(
            16606,
            "$geoNear requires a 'distanceField' option as a String",
        )
    })?;
    // The query's own `$near` would be a second one.
    if out.query.keys().any(|k| k == "$near" || k == "$nearSphere") {
        return Err(Error::bad_value(
            "$geoNear 'query' may not contain $near or $nearSphere",
        ));
    }
    Ok(vec![Arc::new(out)])
}

impl GeoNear {
    /// The operator document of the equivalent query on the geo field.
    fn near_operator(&self) -> Document {
        let op = if self.geojson || self.spherical {
            "$nearSphere"
        } else {
            "$near"
        };
        let mut d = Document::new();
        if self.geojson {
            let mut inner = doc! {"$geometry": self.near.clone()};
            if let Some(m) = self.min_distance {
                inner.insert("$minDistance", m);
            }
            if let Some(m) = self.max_distance {
                inner.insert("$maxDistance", m);
            }
            d.insert(op, inner);
        } else {
            d.insert(op, self.near.clone());
            if let Some(m) = self.min_distance {
                d.insert("$minDistance", m);
            }
            if let Some(m) = self.max_distance {
                d.insert("$maxDistance", m);
            }
        }
        d
    }

    fn run(&self, ctx: &ExpCtx) -> Result<Vec<Document>> {
        let Some(ns) = ctx.namespace.as_ref() else {
            return Ok(Vec::new());
        };
        let Some(coll) = ctx.engine.collection(ns) else {
            return Ok(Vec::new());
        };
        let key = match &self.key {
            Some(k) => k.clone(),
            None => {
                let meta = coll.meta.read();
                // A 2d index first (MongoDB's order), else the 2dsphere index.
                let flat: Vec<String> = meta
                    .indexes
                    .iter()
                    .filter(|ix| ix.twod.is_some())
                    .map(|ix| ix.pattern[0].0.clone())
                    .collect();
                if flat.len() > 1 {
                    return Err(Error::new(
                        ErrorCode::IndexNotFound,
                        format!("There is more than one 2d index on {ns}; unsure which to use for $geoNear"),
                    ));
                }
                let geo: Vec<String> = if flat.is_empty() {
                    meta.indexes
                        .iter()
                        .filter_map(|ix| ix.geo.map(|g| ix.pattern[g].0.clone()))
                        .collect()
                } else {
                    flat
                };
                match geo.as_slice() {
                    [one] => one.clone(),
                    [] => {
                        return Err(crate::plan::planner_error(
                            ErrorCode::NoQueryExecutionPlans,
                            "unable to find index for $geoNear query",
                        ))
                    }
                    _ => {
                        return Err(Error::bad_value(format!(
                            "There is more than one 2dsphere index on {ns}; unsure which to use for $geoNear"
                        )))
                    }
                }
            }
        };
        let near_op = self.near_operator();
        let parsed = nidus_query::matcher::geo::parse_near(&near_op)?;
        let Some(near) = parsed.near() else {
            return Ok(Vec::new());
        };
        let mut filter = doc! {key.clone(): near_op.clone()};
        if !self.query.is_empty() {
            filter = doc! {"$and": [filter, self.query.clone()]};
        }
        let find = FindSpec {
            filter,
            source: ctx.source.clone(),
            deadline: ctx.deadline(),
            ..FindSpec::default()
        };
        let mut exec = ctx.engine.plan_find(Some(&coll), &find)?;
        let mut out = Vec::new();
        while let Some(raw) = exec.next_doc()? {
            ctx.check_interrupt()?;
            let Some((distance, loc)) = crate::exec::nearest_distance(near, &raw, &key) else {
                continue;
            };
            let mut d = raw
                .to_document()
                .map_err(|e| Error::internal(format!("document: {e}")))?;
            nidus_doc::path::set_path(
                &mut d,
                &self.distance_field,
                Bson::Double(distance * self.multiplier),
            );
            if let Some(field) = &self.include_locs {
                nidus_doc::path::set_path(&mut d, field, loc);
            }
            out.push(d);
        }
        Ok(out)
    }
}

impl DocumentSource for GeoNear {
    fn name(&self) -> &'static str {
        "$geoNear"
    }

    fn serialize(&self) -> Bson {
        Bson::Document(self.spec.clone())
    }

    fn open(&self, _input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(VecStream::boxed(self.run(ctx)?))
    }

    fn position(&self) -> Position {
        Position::First
    }

    fn is_source(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
