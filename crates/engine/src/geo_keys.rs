//! `2dsphere` indexes: spec checks and normalization (`2dsphereIndexVersion: 3`) and key
//! generation. The geo field's keys are S2 cell ids as int64: a point's leaf cell, or a
//! covering of a line's or polygon's bounding cap between the indexed levels
//! (`nidus_doc::geo::cover`); other fields are keyed as in a btree index, one key per
//! combination. Documents without the geo field get no key (the index is always sparse).
//!
//! `2d` indexes (MongoDB's `get2DKeys`): the first field is the geo field, whose keys are the
//! GeoHashes of its legacy points (`nidus_doc::geo::flat`), as BinData of subtype 128; the
//! other fields are keyed once per point with their value (null when missing, the sorted
//! distinct values as an array when there are several), never exploded.

use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::geo::{cover, shape};
use nidus_doc::keys::IndexKeys;
use nidus_doc::path::{walk, FieldPath};

const INDEX_VERSION_FIELD: &str = "2dsphereIndexVersion";

fn is_geo(v: &Bson) -> bool {
    matches!(v, Bson::String(s) if s == "2dsphere")
}

fn is_2d(v: &Bson) -> bool {
    matches!(v, Bson::String(s) if s == "2d")
}

/// One 2dsphere field per index, not mixed with another index type; a 2d field first, once.
pub fn validate_key(key: &Document) -> Result<()> {
    if key.values().any(is_2d) {
        if key
            .values()
            .any(|v| matches!(v, Bson::String(s) if s != "2d"))
        {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "Can't use more than one index plugin for a single index.",
            ));
        }
        let mut seen_other = false;
        let mut seen_geo = false;
        for v in key.values() {
            if is_2d(v) {
                if seen_geo {
                    return Err(Error::new(
                        ErrorCode::Location(16800),
                        "can't have 2 geo fields",
                    ));
                }
                if seen_other {
                    return Err(Error::new(
                        ErrorCode::Location(16801),
                        "2d has to be first in index",
                    ));
                }
                seen_geo = true;
            } else {
                seen_other = true;
            }
        }
        return Ok(());
    }
    let geo = key.values().filter(|v| is_geo(v)).count();
    if geo == 0 {
        return Ok(());
    }
    if key
        .values()
        .any(|v| matches!(v, Bson::String(s) if s != "2dsphere"))
    {
        return Err(Error::new(
            ErrorCode::CannotCreateIndex,
            "Can't use more than one index plugin for a single index.",
        ));
    }
    if geo > 1 {
        return Err(Error::new(
            ErrorCode::CannotCreateIndex,
            "Index type '2dsphere' with more than one geo field is not supported yet by this server",
        ));
    }
    Ok(())
}

/// A 2d index spec's grid (`bits`, `min`, `max`), with MongoDB's errors (InvalidOptions).
pub fn twod_params(spec: &Document) -> Result<nidus_doc::geo::flat::TwoDParams> {
    let field = |name: &str| -> Result<Option<f64>> {
        match spec.get(name) {
            None => Ok(None),
            Some(v) => shape::number(v).map(Some).ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidOptions,
                    format!("wrong type for field ({name}) {} != number", type_code(v)),
                )
            }),
        }
    };
    nidus_doc::geo::flat::TwoDParams::new(field("bits")?, field("min")?, field("max")?)
        .map_err(|m| Error::new(ErrorCode::InvalidOptions, m))
}

fn type_code(v: &Bson) -> i32 {
    v.element_type() as i32
}

/// Adds `2dsphereIndexVersion: 3` to a 2dsphere spec (listIndexes shows it), refusing other
/// versions; checks a 2d spec's grid options.
pub fn normalize_options(key: &Document, out: &mut Document) -> Result<()> {
    if key.values().any(is_2d) {
        twod_params(out)?;
        return Ok(());
    }
    if !key.values().any(is_geo) {
        return Ok(());
    }
    match out.get(INDEX_VERSION_FIELD) {
        None => {
            out.insert(INDEX_VERSION_FIELD, 3);
        }
        Some(v) if shape::number(v) == Some(3.0) => {
            out.insert(INDEX_VERSION_FIELD, 3);
        }
        Some(v) => {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                format!(
                    "unsupported geo index version {{ {INDEX_VERSION_FIELD} : {} }}, only support versions: [3]",
                    nidus_common::shell::format(v)
                ),
            ))
        }
    }
    Ok(())
}

/// The candidate geometry values at `path`: none for missing, null or an empty array; an
/// array that is not itself a legacy pair holds one candidate per element.
fn values_at(doc: &RawDocument, path: &str) -> Vec<Bson> {
    let mut out = Vec::new();
    walk(doc, &FieldPath::parse(path), false, &mut |item| {
        let Some(v) = item
            .value
            .and_then(|v| Bson::try_from(v.to_raw_bson()).ok())
        else {
            return false;
        };
        match v {
            Bson::Null | Bson::Undefined => {}
            Bson::Array(_) if shape::legacy_point(&v).is_none() => {
                if let Bson::Array(items) = v {
                    out.extend(items);
                }
            }
            other => out.push(other),
        }
        false
    });
    out
}

/// The geometries at the geo path, or the reason the first bad one is refused.
fn geometries(doc: &RawDocument, path: &str) -> std::result::Result<Vec<shape::Geometry>, String> {
    values_at(doc, path)
        .iter()
        .map(|v| shape::stored(v, true))
        .collect()
}

fn extraction_error(doc: &RawDocument, reason: &str) -> Error {
    let shown = Document::try_from(doc)
        .map(|d| nidus_common::shell::format(&Bson::Document(d)))
        .unwrap_or_default();
    Error::new(
        ErrorCode::Location(16755),
        format!("Can't extract geo keys: {shown}  {reason}"),
    )
}

/// The keys of `doc` for a 2dsphere index whose geo field is `pattern[geo]`.
pub fn s2_index_keys(
    doc: &RawDocument,
    pattern: &[(String, bool)],
    geo: usize,
) -> Result<IndexKeys> {
    let geo_path = &pattern[geo].0;
    let geometries = geometries(doc, geo_path).map_err(|reason| extraction_error(doc, &reason))?;
    let mut multikey_paths = vec![Vec::new(); pattern.len()];
    if geometries.is_empty() {
        return Ok(IndexKeys {
            keys: Vec::new(),
            multikey_paths,
            is_multikey: false,
        });
    }
    let mut cells = Vec::new();
    for g in &geometries {
        let cap = g.bounding_cap();
        let point = g.as_point().filter(|_| g.is_point()).map(|p| p.p);
        cells.extend(cover::index_cells(point.as_ref(), cap.as_ref()));
    }
    cells.sort();
    cells.dedup();
    let others: Vec<(String, bool)> = pattern
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != geo)
        .map(|(_, f)| f.clone())
        .collect();
    let other_keys = if others.is_empty() {
        IndexKeys {
            keys: vec![Vec::new()],
            multikey_paths: Vec::new(),
            is_multikey: false,
        }
    } else {
        nidus_doc::keys::index_keys(doc, &others, false)?
    };
    let mut other_paths = other_keys.multikey_paths.into_iter();
    for (i, slot) in multikey_paths.iter_mut().enumerate() {
        if i != geo {
            *slot = other_paths.next().unwrap_or_default();
        }
    }
    // Several cells for one document make the geo field multikey (scans deduplicate).
    if cells.len() > 1 {
        multikey_paths[geo] = vec![0];
    }
    let mut keys = Vec::with_capacity(other_keys.keys.len() * cells.len());
    for base in &other_keys.keys {
        for c in &cells {
            let mut k = base.clone();
            k.insert(geo, Bson::Int64(c.as_key()));
            keys.push(k);
        }
    }
    let is_multikey = multikey_paths.iter().any(|p| !p.is_empty());
    Ok(IndexKeys {
        keys,
        multikey_paths,
        is_multikey,
    })
}

/// The geometries at `path` with the values they came from (values that are no geometry
/// are skipped): what `$near` measures.
pub fn geometries_at(doc: &RawDocument, path: &str) -> Vec<(Bson, shape::Geometry)> {
    values_at(doc, path)
        .into_iter()
        .filter_map(|v| shape::stored(&v, false).ok().map(|g| (v, g)))
        .collect()
}

/// The location objects of a 2d geo value (MongoDB's grammar: a point `[x, y]` or
/// `{a: x, b: y}`, or an array/object of points; empty ones are skipped), or the error a
/// write gets.
fn twod_locations(v: RawBsonRef<'_>) -> Result<Vec<Vec<Bson>>> {
    let items: Vec<Bson> = match Bson::try_from(v.to_raw_bson()) {
        Ok(Bson::Array(a)) => a,
        Ok(Bson::Document(d)) => d.into_iter().map(|(_, v)| v).collect(),
        _ => return Ok(Vec::new()),
    };
    if items.is_empty() {
        return Ok(Vec::new());
    }
    if shape::number(&items[0]).is_some() {
        return Ok(vec![items]);
    }
    let mut out = Vec::new();
    for item in items {
        let values: Vec<Bson> = match item {
            Bson::Array(a) => a,
            Bson::Document(d) => d.into_iter().map(|(_, v)| v).collect(),
            _ => {
                return Err(Error::new(
                    ErrorCode::Location(16804),
                    "location object expected, location array not in correct format",
                ))
            }
        };
        if !values.is_empty() {
            out.push(values);
        }
    }
    Ok(out)
}

fn shown_doc(doc: &RawDocument) -> String {
    Document::try_from(doc)
        .map(|d| nidus_common::shell::format(&Bson::Document(d)))
        .unwrap_or_default()
}

/// The GeoHash key of one location (MongoDB's `GeoHashConverter::hash` checks).
fn twod_hash(
    loc: &[Bson],
    params: &nidus_doc::geo::flat::TwoDParams,
    doc: &RawDocument,
) -> Result<u64> {
    use nidus_doc::geo::flat::fmt_number;
    if loc.len() < 2 {
        return Err(Error::new(
            ErrorCode::Location(13068),
            format!(
                "geo field only has 1 element :: caused by :: {}",
                shown_doc(doc)
            ),
        ));
    }
    let (Some(x), Some(y)) = (shape::number(&loc[0]), shape::number(&loc[1])) else {
        return Err(Error::new(
            ErrorCode::Location(13026),
            format!(
                "geo values must be 'legacy coordinate pairs' for 2d indexes :: caused by :: {}",
                shown_doc(doc)
            ),
        ));
    };
    if !params.in_range(x) || !params.in_range(y) {
        return Err(Error::new(
            ErrorCode::Location(13027),
            format!(
                "point not in interval of [ {}, {} ] :: caused by :: {}",
                fmt_number(params.min),
                fmt_number(params.max),
                shown_doc(doc)
            ),
        ));
    }
    Ok(params.hash(x, y).hash)
}

/// The key value of a GeoHash: 8 big-endian bytes in a BinData of subtype 128.
pub fn twod_key_value(hash: u64) -> Bson {
    Bson::Binary(bson::Binary {
        subtype: bson::spec::BinarySubtype::from(0x80u8),
        bytes: nidus_doc::geo::flat::Cell::key_bytes(hash),
    })
}

/// The keys of `doc` for a 2d index (`pattern[0]` is the geo field).
pub fn twod_index_keys(
    doc: &RawDocument,
    pattern: &[(String, bool)],
    params: &nidus_doc::geo::flat::TwoDParams,
) -> Result<IndexKeys> {
    let mut geo_values: Vec<RawBsonRef<'_>> = Vec::new();
    walk(doc, &FieldPath::parse(&pattern[0].0), false, &mut |item| {
        if let Some(v) = item.value {
            geo_values.push(v);
        }
        false
    });
    let mut hashes = Vec::new();
    for v in geo_values {
        for loc in twod_locations(v)? {
            hashes.push(twod_hash(&loc, params, doc)?);
        }
    }
    let mut multikey_paths = vec![Vec::new(); pattern.len()];
    if hashes.is_empty() {
        return Ok(IndexKeys {
            keys: Vec::new(),
            multikey_paths,
            is_multikey: false,
        });
    }
    // The other fields: every value along the path (arrays at its end expanded), one value
    // as itself, several as the array of the distinct values in order, none as null.
    let others: Vec<Bson> = pattern[1..]
        .iter()
        .map(|(path, _)| {
            let mut vals: Vec<Bson> = Vec::new();
            walk(doc, &FieldPath::parse(path), true, &mut |item| {
                // An array at the end of the path counts by its elements only.
                let whole_array =
                    !item.from_leaf_array && matches!(item.value, Some(RawBsonRef::Array(_)));
                if let (Some(b), false) = (
                    item.value
                        .and_then(|v| Bson::try_from(v.to_raw_bson()).ok()),
                    whole_array,
                ) {
                    vals.push(b);
                }
                false
            });
            vals.sort_by(nidus_doc::compare::cmp_bson);
            vals.dedup_by(|a, b| nidus_doc::compare::cmp_bson(a, b).is_eq());
            match vals.len() {
                0 => Bson::Null,
                1 => vals.pop().unwrap_or(Bson::Null),
                _ => Bson::Array(vals),
            }
        })
        .collect();
    let mut keys = Vec::with_capacity(hashes.len());
    for h in &hashes {
        let mut k = Vec::with_capacity(pattern.len());
        k.push(twod_key_value(*h));
        k.extend(others.iter().cloned());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    if hashes.len() > 1 {
        multikey_paths[0] = vec![0];
    }
    let is_multikey = hashes.len() > 1;
    Ok(IndexKeys {
        keys,
        multikey_paths,
        is_multikey,
    })
}
