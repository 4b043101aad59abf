//! Clustered collections (`create` with `clusteredIndex: {key: {_id: 1}, unique: true}`).
//!
//! The collection's documents are read in `_id` order: every scan of a clustered collection
//! walks its cluster key (the `_id` entries, which map each `_id` to its record) and reads the
//! record each key names, so natural order is `_id` order and a range predicate on `_id`
//! bounds the scan (`CLUSTERED_IXSCAN` with `minRecord`/`maxRecord`, as MongoDB explains it).
//! The cluster key is not a separate, droppable index: `listIndexes` shows it as MongoDB does
//! (`clustered: true`), the planner never offers it as an `IXSCAN`, and `listCollections`
//! shows the `clusteredIndex` option instead of an `idIndex`.
//!
//! `expireAfterSeconds` on a clustered collection makes the TTL monitor delete the documents
//! whose `_id` is a date older than that many seconds (other `_id` types never expire).

use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

pub const CLUSTERED_INDEX: &str = "clusteredIndex";

/// Whether collection options describe a clustered collection (`clusteredIndex` as a spec,
/// or `true` as time-series buckets collections store it).
pub fn is_clustered(options: &Document) -> bool {
    match options.get(CLUSTERED_INDEX) {
        Some(Bson::Document(_)) => true,
        Some(Bson::Boolean(b)) => *b,
        _ => false,
    }
}

/// The cluster key's index name (`_id_` unless the spec named it).
pub fn index_name(options: &Document) -> String {
    match options.get(CLUSTERED_INDEX) {
        Some(Bson::Document(d)) => d.get_str("name").unwrap_or("_id_").to_string(),
        _ => crate::catalog::ID_INDEX_NAME.to_string(),
    }
}

/// The `_id` index spec of a clustered collection, as `listIndexes` shows it.
pub fn id_index_spec(options: &Document) -> Document {
    doc! {
        "v": 2,
        "key": { "_id": 1 },
        "name": index_name(options),
        "unique": true,
        "clustered": true,
    }
}

fn is_one(v: &Bson) -> bool {
    match v {
        Bson::Int32(n) => *n == 1,
        Bson::Int64(n) => *n == 1,
        Bson::Double(f) => *f == 1.0,
        _ => false,
    }
}

fn bad_type(field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field 'create.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(v)
    ))
}

fn type_name(v: &Bson) -> &'static str {
    nidus_doc::compare::type_name(v)
}

/// Checks a user's `clusteredIndex` option as MongoDB's `create` does and returns it
/// normalized (`v`, `key`, `name`, `unique`), the form `listCollections` shows.
pub fn parse_clustered_index(v: &Bson) -> Result<Document> {
    let spec = match v {
        Bson::Document(d) => d,
        Bson::Boolean(_) => {
            return Err(Error::new(
                ErrorCode::Location(5979703),
                "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for specific internal collections and vice versa",
            ))
        }
        other => {
            return Err(Error::new(
                ErrorCode::Location(5979702),
                format!(
                    "'clusteredIndex' has to be a boolean or object. (got {})",
                    type_name(other)
                ),
            ))
        }
    };
    let (mut key, mut unique, mut name, mut version) = (None, None, None, 2i32);
    for (k, v) in spec {
        match k.as_str() {
            "key" => match v {
                Bson::Document(d) => key = Some(d.clone()),
                other => return Err(bad_type("clusteredIndex.key", other, "object")),
            },
            "unique" => match v {
                Bson::Boolean(b) => unique = Some(*b),
                other => return Err(bad_type("clusteredIndex.unique", other, "bool")),
            },
            "name" => match v {
                Bson::String(s) => name = Some(s.clone()),
                other => return Err(bad_type("clusteredIndex.name", other, "string")),
            },
            "v" => match v {
                Bson::Int32(n) => version = *n,
                Bson::Int64(n) => version = *n as i32,
                Bson::Double(f) => version = *f as i32,
                other => return Err(bad_type("clusteredIndex.v", other, "int")),
            },
            other => {
                return Err(Error::new(
                    ErrorCode::Location(40415),
                    format!("BSON field 'clusteredIndex.{other}' is an unknown field."),
                ))
            }
        }
    }
    let Some(key) = key else {
        return Err(Error::new(
            ErrorCode::Location(40414),
            "BSON field 'clusteredIndex.key' is missing but a required field",
        ));
    };
    let Some(unique) = unique else {
        return Err(Error::new(
            ErrorCode::Location(40414),
            "BSON field 'clusteredIndex.unique' is missing but a required field",
        ));
    };
    if !unique {
        return Err(Error::new(
            ErrorCode::Location(5979700),
            "The clusteredIndex option requires unique: true to be specified",
        ));
    }
    let on_id = key.len() == 1 && key.get("_id").is_some_and(is_one);
    if !on_id {
        return Err(Error::new(
            ErrorCode::InvalidIndexSpecificationOption,
            "The clusteredIndex option is only supported for key: {_id: 1}",
        ));
    }
    if version != 2 {
        let mut shown = doc! { "v": version, "key": key.clone() };
        if let Some(n) = &name {
            shown.insert("name", n.clone());
        }
        shown.insert("unique", true);
        return Err(Error::new(
            ErrorCode::Location(5979704),
            format!(
                "Invalid clusteredIndex specification {}; cannot create a clusteredIndex with v={version}",
                nidus_common::shell::format(&Bson::Document(shown))
            ),
        ));
    }
    Ok(doc! {
        "v": 2,
        "key": { "_id": 1 },
        "name": name.unwrap_or_else(|| crate::catalog::ID_INDEX_NAME.to_string()),
        "unique": true,
    })
}

/// `expireAfterSeconds` of a clustered or time-series collection: a non-negative number of
/// seconds within MongoDB's TTL range, stored as a long.
pub fn parse_expire_after_seconds(v: &Bson) -> Result<i64> {
    let n = match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(f) if f.is_finite() => *f as i64,
        Bson::Decimal128(d) => d.to_string().parse::<f64>().map(|f| f as i64).unwrap_or(-1),
        other => return Err(bad_type("expireAfterSeconds", other, "long")),
    };
    if n < 0 {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "TTL index 'expireAfterSeconds' option cannot be less than 0",
        ));
    }
    // MongoDB's upper bound for TTL lifetimes (the largest 32-bit signed number).
    if n > i64::from(i32::MAX) {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
        ));
    }
    Ok(n)
}

/// The bounds of a clustered scan over `_id` (MongoDB's `minRecord`/`maxRecord`): from the
/// filter's top-level conjuncts on `_id`, an equality bounds both ends, `$gt`/`$gte` the
/// start and `$lt`/`$lte` the end (the scan's filter keeps the exact predicate). Values
/// that cannot bound a scan (regexes, arrays, documents with operators) give no bound.
pub fn record_bounds(filter: &Document) -> (Option<Bson>, Option<Bson>) {
    let mut min: Option<Bson> = None;
    let mut max: Option<Bson> = None;
    let mut conjuncts: Vec<(&String, &Bson)> = Vec::new();
    collect_conjuncts(filter, &mut conjuncts);
    let tighter = |cur: &Option<Bson>, new: &Bson, want_greater: bool| match cur {
        None => true,
        Some(c) => {
            let ord = nidus_doc::compare::cmp_bson(new, c);
            if want_greater {
                ord.is_gt()
            } else {
                ord.is_lt()
            }
        }
    };
    let mut take = |op: &str, v: &Bson| {
        if !boundable(v) {
            return;
        }
        if matches!(op, "$eq" | "$gt" | "$gte") && tighter(&min, v, true) {
            min = Some(v.clone());
        }
        if matches!(op, "$eq" | "$lt" | "$lte") && tighter(&max, v, false) {
            max = Some(v.clone());
        }
    };
    for (k, v) in conjuncts {
        if k != "_id" {
            continue;
        }
        match v {
            Bson::Document(ops) if ops.keys().next().is_some_and(|k| k.starts_with('$')) => {
                for (op, operand) in ops {
                    take(op, operand);
                }
            }
            other => take("$eq", other),
        }
    }
    (min, max)
}

fn collect_conjuncts<'a>(filter: &'a Document, out: &mut Vec<(&'a String, &'a Bson)>) {
    for (k, v) in filter {
        if k == "$and" {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect_conjuncts(d, out);
                    }
                }
            }
        } else {
            out.push((k, v));
        }
    }
}

fn boundable(v: &Bson) -> bool {
    !matches!(
        v,
        Bson::RegularExpression(_) | Bson::Array(_) | Bson::Undefined
    ) && !matches!(v, Bson::Document(d) if d.keys().any(|k| k.starts_with('$')))
}

/// Whether a `hint` names the cluster key (`{_id: 1}` or its name): MongoDB answers it with
/// a clustered scan.
pub fn hint_names_cluster_key(hint: &Bson, name: &str) -> bool {
    match hint {
        Bson::String(s) => s == name,
        Bson::Document(d) => d.len() == 1 && d.get("_id").is_some_and(is_one),
        _ => false,
    }
}

/// The scan direction that provides `sort` when it is the cluster key alone (`{_id: 1}`
/// forward, `{_id: -1}` backward) and needs no collation.
pub fn sort_direction(sort: &Document, collated: bool) -> Option<bool> {
    if sort.len() != 1 || collated {
        return None;
    }
    match sort.get("_id")? {
        Bson::Int32(n) => Some(*n > 0),
        Bson::Int64(n) => Some(*n > 0),
        Bson::Double(f) => Some(*f > 0.0),
        _ => None,
    }
}

impl crate::Engine {
    /// The TTL pass of a clustered collection with `expireAfterSeconds`: deletes the
    /// documents whose `_id` is a date before `now` minus that many seconds. A time-series
    /// buckets collection expires a bucket once its whole span (the `_id`'s time, which is
    /// the bucket's rounded minimum time, plus `bucketMaxSpanSeconds`) is past the cutoff.
    pub(crate) fn expire_clustered(
        &self,
        coll: &crate::catalog::CollectionRef,
        now: bson::DateTime,
    ) -> Result<u64> {
        let (seconds, span) = {
            let meta = coll.meta.read();
            if !is_clustered(&meta.options) {
                return Ok(0);
            }
            let Some(seconds) = meta
                .options
                .get("expireAfterSeconds")
                .and_then(crate::clustered::as_i64)
            else {
                return Ok(0);
            };
            let span = meta
                .options
                .get_document("timeseries")
                .ok()
                .and_then(|t| t.get("bucketMaxSpanSeconds").and_then(as_i64));
            (seconds, span)
        };
        let cutoff_ms = now
            .timestamp_millis()
            .saturating_sub(seconds.saturating_mul(1000));
        let filter = match span {
            None => doc! { "_id": { "$lt": bson::DateTime::from_millis(cutoff_ms) } },
            Some(span) => {
                let secs = (cutoff_ms / 1000).saturating_sub(span).max(0);
                doc! { "_id": { "$lt": crate::timeseries::object_id_at(secs as u32, false) } }
            }
        };
        self.delete(
            coll,
            &filter,
            true,
            None,
            &crate::write::WriteOpts::default(),
        )
    }
}

pub(crate) fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_finite() => Some(*f as i64),
        _ => None,
    }
}
