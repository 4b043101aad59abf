//! `2dsphere` indexes: spec checks and normalization (`2dsphereIndexVersion: 3`) and key
//! generation. The geo field's keys are S2 cell ids as int64: a point's leaf cell, or a
//! covering of a line's or polygon's bounding cap between the indexed levels
//! (`nidus_doc::geo::cover`); other fields are keyed as in a btree index, one key per
//! combination. Documents without the geo field get no key (the index is always sparse).

use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::geo::{cover, shape};
use nidus_doc::keys::IndexKeys;
use nidus_doc::path::{walk, FieldPath};

const INDEX_VERSION_FIELD: &str = "2dsphereIndexVersion";

fn is_geo(v: &Bson) -> bool {
    matches!(v, Bson::String(s) if s == "2dsphere")
}

/// One 2dsphere field per index, not mixed with another index type.
pub fn validate_key(key: &Document) -> Result<()> {
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

/// Adds `2dsphereIndexVersion: 3` to a 2dsphere spec (listIndexes shows it), refusing other
/// versions.
pub fn normalize_options(key: &Document, out: &mut Document) -> Result<()> {
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
