//! Sort patterns: `{a: 1, "b.c": -1}` with MongoDB's rules.
//!
//! Each field's key is the smallest value at the path for an ascending field and the largest
//! for a descending one, array elements included (`{a: [3, 1]}` sorts as 1 ascending, 3
//! descending); a missing field sorts as null and an empty array as undefined (below null).
//! Ties keep the input order (callers use a stable sort).

use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::collation::Collation;
use nidus_doc::compare::{bson_num, cmp_bson_with, cmp_raw_with};
use nidus_doc::keys::sort_key_value_with;
use nidus_doc::number::{cmp_num, Num};
use nidus_doc::path::FieldPath;
use std::cmp::Ordering;

/// One sort field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortField {
    pub path: FieldPath,
    pub descending: bool,
}

/// A parsed sort specification.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SortPattern {
    pub fields: Vec<SortField>,
    /// `{$natural: 1 | -1}`: `Some(descending)`; not part of the keys (the planner scans the
    /// collection in that direction).
    pub natural: Option<bool>,
    /// Strings compare under this collation (None = binary).
    pub collation: Option<Collation>,
}

fn direction(field: &str, v: &Bson) -> Result<bool> {
    if let Bson::Document(d) = v {
        return Err(meta_error(field, d));
    }
    let Some(n) = bson_num(v) else {
        return Err(Error::new(
            ErrorCode::Location(15974),
            format!("Illegal key in $sort specification: {field}: {v}"),
        ));
    };
    if cmp_num(n, Num::Int(1)).is_eq() {
        Ok(false)
    } else if cmp_num(n, Num::Int(-1)).is_eq() {
        Ok(true)
    } else {
        Err(Error::new(
            ErrorCode::Location(15975),
            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
        ))
    }
}

fn meta_error(field: &str, d: &Document) -> Error {
    match d.get("$meta") {
        Some(Bson::String(m)) if m == "textScore" && d.len() == 1 => Error::new(
            ErrorCode::Location(40218),
            "query requires text score metadata, but it is not available",
        ),
        Some(Bson::String(m)) if d.len() == 1 => {
            Error::bad_value(format!("$meta sort by '{m}' metadata is not supported"))
        }
        _ => Error::new(
            ErrorCode::Location(17312),
            format!("$meta is the only expression supported by $sort right now: {field}: {d}"),
        ),
    }
}

impl SortPattern {
    /// Parses a sort document (values 1/-1 of any numeric type).
    pub fn parse(spec: &Document) -> Result<SortPattern> {
        let mut pat = SortPattern::default();
        for (k, v) in spec {
            let descending = direction(k, v)?;
            if k == "$natural" {
                pat.natural = Some(descending);
                continue;
            }
            validate_path(k)?;
            pat.fields.push(SortField {
                path: FieldPath::parse(k),
                descending,
            });
        }
        Ok(pat)
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The same pattern with strings ordered by `collation`.
    pub fn with_collation(mut self, collation: Option<Collation>) -> SortPattern {
        self.collation = collation;
        self
    }

    /// Compares two documents by the pattern.
    pub fn compare(&self, a: &RawDocument, b: &RawDocument) -> Ordering {
        for f in &self.fields {
            let c = self.collation.as_ref();
            let ka = sort_key_value_with(a, &f.path, f.descending, c);
            let kb = sort_key_value_with(b, &f.path, f.descending, c);
            let o = cmp_raw_with(ka, kb, c);
            let o = if f.descending { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// The sort key of a document (one value per field), to extract once and compare with
    /// [`SortPattern::compare_keys`].
    pub fn sort_key(&self, doc: &RawDocument) -> Vec<Bson> {
        self.fields
            .iter()
            .map(|f| {
                let v = sort_key_value_with(doc, &f.path, f.descending, self.collation.as_ref());
                Bson::try_from(v).unwrap_or(Bson::Null)
            })
            .collect()
    }

    /// Compares two keys produced by [`SortPattern::sort_key`].
    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for ((f, x), y) in self.fields.iter().zip(a).zip(b) {
            let o = cmp_bson_with(x, y, self.collation.as_ref());
            let o = if f.descending { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

fn validate_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::new(
            ErrorCode::Location(40352),
            "FieldPath cannot be constructed with empty string",
        ));
    }
    for part in path.split('.') {
        if part.is_empty() {
            return Err(Error::new(
                ErrorCode::Location(15998),
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') {
            return Err(Error::new(
                ErrorCode::Location(16410),
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<i32> {
        let p = SortPattern::parse(&spec).expect("parse");
        let mut raws: Vec<RawDocumentBuf> = docs
            .iter()
            .map(|d| nidus_common::encode::document_to_raw(d).expect("doc"))
            .collect();
        raws.sort_by(|a, b| p.compare(a, b));
        let by_doc: Vec<i32> = raws
            .iter()
            .map(|r| r.get_i32("_id").expect("_id"))
            .collect();
        let mut keyed: Vec<(Vec<Bson>, i32)> = raws
            .iter()
            .map(|r| (p.sort_key(r), r.get_i32("_id").expect("_id")))
            .collect();
        keyed.sort_by(|a, b| p.compare_keys(&a.0, &b.0));
        assert_eq!(keyed.iter().map(|k| k.1).collect::<Vec<_>>(), by_doc);
        by_doc
    }

    #[test]
    fn arrays_missing_and_types() {
        let docs = vec![
            doc! {"_id": 1, "a": [3, 1]},
            doc! {"_id": 2, "a": 2},
            doc! {"_id": 3},
            doc! {"_id": 4, "a": []},
            doc! {"_id": 5, "a": "s"},
            doc! {"_id": 6, "a": null},
        ];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), vec![4, 3, 6, 1, 2, 5]);
        assert_eq!(sorted(doc! {"a": -1}, docs), vec![5, 1, 2, 3, 6, 4]);
    }

    #[test]
    fn compound_and_dotted() {
        let docs = vec![
            doc! {"_id": 1, "a": {"b": 2}, "c": 1},
            doc! {"_id": 2, "a": [{"b": 5}, {"b": 1}], "c": 1},
            doc! {"_id": 3, "a": {"b": 2}, "c": 0},
        ];
        assert_eq!(sorted(doc! {"a.b": 1, "c": -1.0}, docs), vec![2, 1, 3]);
    }

    #[test]
    fn parse_errors() {
        let e = SortPattern::parse(&doc! {"a": 2}).expect_err("bad");
        assert_eq!(e.code.code(), 15975);
        let e = SortPattern::parse(&doc! {"a": "x"}).expect_err("bad");
        assert_eq!(e.code.code(), 15974);
        let e = SortPattern::parse(&doc! {"a": {"$meta": "textScore"}}).expect_err("bad");
        assert_eq!(e.code.code(), 40218);
        let p = SortPattern::parse(&doc! {"a": 1i64, "$natural": -1}).expect("ok");
        assert_eq!(p.natural, Some(true));
        assert_eq!(p.fields.len(), 1);
        assert!(SortPattern::parse(&doc! {"$a": 1}).is_err());
    }
}
