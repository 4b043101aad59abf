//! `createIndexes` spec validation and normalization, with MongoDB's errors.

use crate::catalog::ID_INDEX_NAME;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// Options a spec may carry, and whether they take part in "same index" comparisons.
const KNOWN_OPTIONS: &[&str] = &[
    "v",
    "key",
    "name",
    "unique",
    "sparse",
    "background",
    "partialFilterExpression",
    "expireAfterSeconds",
    "hidden",
    "collation",
    "ns",
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
    "wildcardProjection",
    "storageEngine",
    "prepareUnique",
];

/// The default name: `a_1_b_-1`.
pub fn default_name(key: &Document) -> String {
    key.iter()
        .map(|(k, v)| format!("{k}_{}", direction_text(v)))
        .collect::<Vec<_>>()
        .join("_")
}

fn direction_text(v: &Bson) -> String {
    match v {
        Bson::Int32(n) => n.to_string(),
        Bson::Int64(n) => n.to_string(),
        Bson::Double(f) if f.fract() == 0.0 => format!("{}", *f as i64),
        Bson::Double(f) => f.to_string(),
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn validate_key(key: &Document) -> Result<()> {
    if key.is_empty() {
        return Err(Error::new(
            ErrorCode::CannotCreateIndex,
            "Index keys cannot be an empty object.",
        ));
    }
    for (field, v) in key {
        if field.is_empty() || field.split('.').any(str::is_empty) {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "Index keys cannot contain an empty field.",
            ));
        }
        // A `$` part is only allowed as a wildcard index's `$**`.
        if field
            .split('.')
            .any(|part| part.starts_with('$') && part != "$**")
        {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "Index key contains an illegal field name: field name starts with '$'.",
            ));
        }
        match v {
            Bson::Int32(0) | Bson::Int64(0) => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!("Values in the index key pattern can't be all zero; found {field}: 0"),
                ))
            }
            Bson::Double(f) if *f == 0.0 || f.is_nan() => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!("Values in v:2 index key pattern cannot be of type {f}. Only numbers > 0, numbers < 0, and strings are allowed."),
                ))
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => {}
            Bson::String(kind) if kind == "hashed" && field != "$**" && !field.ends_with(".$**") => {}
            Bson::String(kind) if kind == "2dsphere" && field != "$**" && !field.ends_with(".$**") => {}
            Bson::String(kind) if kind == "2d" && field != "$**" && !field.ends_with(".$**") => {}
            Bson::String(kind) if kind == "text" => {}
            Bson::String(kind) => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!("Index type '{kind}' is not supported yet by this server"),
                ))
            }
            other => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!(
                        "Values in v:2 index key pattern cannot be of type {}. Only numbers > 0, numbers < 0, and strings are allowed.",
                        type_name(other)
                    ),
                ))
            }
        }
    }
    let hashed = key
        .values()
        .filter(|v| matches!(v, Bson::String(s) if s == "hashed"))
        .count();
    crate::geo_keys::validate_key(key)?;
    if hashed > 1 {
        return Err(Error::new(
            ErrorCode::Location(31303),
            format!(
                "A maximum of one index field is allowed to be hashed but found {hashed} for 'key' {}",
                nidus_common::shell::format(&Bson::Document(key.clone()))
            ),
        ));
    }
    Ok(())
}

fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        _ => "unknown",
    }
}

/// Validates one spec from `createIndexes.indexes` and returns it normalized
/// (`v: 2`, `key`, `name`, then the options in the order given). Errors name the spec as
/// MongoDB's do: `Error in specification { ... } :: caused by :: ...`, the spec as given,
/// with `v: 2` added for a refused partial filter (checked after normalization there).
/// [`normalize`] for each spec of a `createIndexes`; a spec without `collation` takes the
/// collection's `default` (an explicit `{locale: "simple"}` keeps the simple collation).
pub fn normalize_all(specs: &[Document], default: Option<&Document>) -> Result<Vec<Document>> {
    specs
        .iter()
        .map(|spec| match default {
            Some(c) if !spec.contains_key("collation") => {
                let mut spec = spec.clone();
                spec.insert("collation", c.clone());
                normalize(&spec)
            }
            _ => normalize(spec),
        })
        .collect()
}

pub fn normalize(spec: &Document) -> Result<Document> {
    let context = |spec: &Document| {
        format!(
            "Error in specification {}",
            nidus_common::shell::format(&Bson::Document(spec.clone()))
        )
    };
    let out = validate(spec)
        .and_then(crate::text::fix_index_spec)
        .map_err(|e| e.with_context(context(spec)))?;
    if let Some(Bson::Document(filter)) = out.get("partialFilterExpression") {
        let check = nidus_query::matcher::Matcher::parse(filter)
            .and_then(|m| crate::plan::partial::check_filter(m.expr()));
        if let Err(e) = check {
            let mut shown = spec.clone();
            if !shown.contains_key("v") {
                shown.insert("v", 2);
            }
            return Err(e.with_context(context(&shown)));
        }
    }
    Ok(out)
}

fn validate(spec: &Document) -> Result<Document> {
    let key = match spec.get("key") {
        Some(Bson::Document(k)) => k.clone(),
        Some(_) => return Err(Error::type_mismatch("The field 'key' must be an object")),
        None => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    validate_key(&key)?;
    let name = match spec.get("name") {
        Some(Bson::String(n)) if n.is_empty() => {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "The index name cannot be empty",
            ))
        }
        Some(Bson::String(n)) if n.contains('\0') => {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                format!("The index name cannot contain null characters: {n:?}"),
            ))
        }
        Some(Bson::String(n)) => n.clone(),
        Some(_) => return Err(Error::type_mismatch("The field 'name' must be a string")),
        None => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                "The 'name' field is a required property of an index specification",
            ))
        }
    };
    let mut out = Document::new();
    out.insert("v", 2);
    out.insert("key", key.clone());
    out.insert("name", name.clone());
    for (k, v) in spec {
        match k.as_str() {
            // `dropDups` has been ignored since MongoDB 3.0; it is accepted and dropped.
            "v" | "key" | "name" | "ns" | "dropDups" => {}
            "background" => {
                let b = as_bool(v).ok_or_else(|| {
                    Error::type_mismatch("The field 'background' must be a boolean")
                })?;
                out.insert(k.clone(), b);
            }
            "unique" | "sparse" | "hidden" => {
                let b = as_bool(v).ok_or_else(|| {
                    Error::type_mismatch(format!("The field '{k}' must be a boolean"))
                })?;
                if b || k != "hidden" {
                    out.insert(k.clone(), b);
                }
            }
            "expireAfterSeconds" => {
                if !matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) {
                    return Err(Error::type_mismatch(
                        "TTL index 'expireAfterSeconds' option must be numeric",
                    ));
                }
                out.insert(k.clone(), v.clone());
            }
            "collation" => {
                let Bson::Document(c) = v else {
                    return Err(Error::type_mismatch(
                        "The field 'collation' must be an object",
                    ));
                };
                // Stored resolved, as listIndexes shows it; the simple collation is omitted.
                if let Some(c) = nidus_doc::collation::Collation::parse(c)? {
                    out.insert(k.clone(), c.to_document());
                }
            }
            "partialFilterExpression" => {
                if !matches!(v, Bson::Document(_)) {
                    return Err(Error::type_mismatch(
                        "The field 'partialFilterExpression' must be an object",
                    ));
                }
                out.insert(k.clone(), v.clone());
            }
            other if KNOWN_OPTIONS.contains(&other) => {
                out.insert(k.clone(), v.clone());
            }
            other => {
                return Err(Error::new(
                    ErrorCode::InvalidIndexSpecificationOption,
                    format!("The field '{other}' is not valid for an index specification. Specification: {}", nidus_common::shell::format(&Bson::Document(spec.clone()))),
                ))
            }
        }
    }
    crate::geo_keys::normalize_options(&key, &mut out)?;
    if out.get_bool("unique").unwrap_or(false)
        && key
            .values()
            .any(|v| matches!(v, Bson::String(s) if s == "hashed"))
    {
        return Err(Error::new(
            ErrorCode::Location(16764),
            "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
        ));
    }
    if let Some(Bson::Document(_)) = out.get("partialFilterExpression") {
        if out.get_bool("sparse").unwrap_or(false) {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "cannot mix \"partialFilterExpression\" and \"sparse\" options",
            ));
        }
        if is_id_key(&key) {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "_id index cannot be a partial index",
            ));
        }
    }
    if name == ID_INDEX_NAME && !is_id_key(&key) {
        return Err(Error::new(
            ErrorCode::BadValue,
            "The index name '_id_' is reserved for the _id index, which must have key pattern {_id: 1}",
        ));
    }
    if is_id_key(&key) && (out.contains_key("unique") || out.contains_key("sparse")) {
        let opt = if out.contains_key("unique") {
            "unique"
        } else {
            "sparse"
        };
        return Err(Error::new(
            ErrorCode::InvalidIndexSpecificationOption,
            format!("The field '{opt}' is not valid for an _id index specification."),
        ));
    }
    Ok(out)
}

fn as_bool(v: &Bson) -> Option<bool> {
    match v {
        Bson::Boolean(b) => Some(*b),
        Bson::Int32(n) => Some(*n != 0),
        Bson::Int64(n) => Some(*n != 0),
        Bson::Double(f) => Some(*f != 0.0),
        _ => None,
    }
}

pub fn is_id_key(key: &Document) -> bool {
    key.len() == 1
        && key.get("_id").is_some_and(|v| {
            matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
                && !crate::catalog::direction_is_descending(v)
        })
}

/// What makes two indexes on one key pattern different indexes that may coexist (MongoDB's
/// index signature): the key pattern, collation, partial filter, and whether unique or sparse.
pub fn signature(spec: &Document) -> Document {
    let mut d = Document::new();
    for k in ["key", "collation", "partialFilterExpression"] {
        if let Some(v) = spec.get(k) {
            d.insert(k, v.clone());
        }
    }
    for k in ["unique", "sparse"] {
        if spec.get_bool(k).unwrap_or(false) {
            d.insert(k, true);
        }
    }
    d
}

/// Options compared to decide "same index" vs IndexOptionsConflict.
pub fn comparable_options(spec: &Document) -> Document {
    let mut d = Document::new();
    for k in [
        "unique",
        "sparse",
        "partialFilterExpression",
        "expireAfterSeconds",
        "collation",
        "hidden",
        "weights",
        "default_language",
        "language_override",
        "textIndexVersion",
    ] {
        if let Some(v) = spec.get(k) {
            d.insert(k, v.clone());
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn default_names_follow_mongodb() {
        assert_eq!(default_name(&doc! {"contact.email": 1}), "contact.email_1");
        assert_eq!(
            default_name(&doc! {"country_id": 1, "order_details.product_id": 1, "created_at": -1}),
            "country_id_1_order_details.product_id_1_created_at_-1"
        );
    }

    #[test]
    fn rejects_bad_specs() {
        assert_eq!(
            normalize(&doc! {"key": {}, "name": "x"}).unwrap_err().code,
            ErrorCode::CannotCreateIndex
        );
        assert_eq!(
            normalize(&doc! {"key": {"a": 1}}).unwrap_err().code,
            ErrorCode::FailedToParse
        );
        assert_eq!(
            normalize(&doc! {"key": {"a": 1}, "name": "a_1", "bogus": 1})
                .unwrap_err()
                .code,
            ErrorCode::InvalidIndexSpecificationOption
        );
        let ok = normalize(&doc! {"key": {"a": 1}, "name": "a_1", "unique": true}).unwrap();
        assert_eq!(
            ok,
            doc! {"v": 2, "key": {"a": 1}, "name": "a_1", "unique": true}
        );
    }
}
