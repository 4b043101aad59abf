//! `$eq $ne $gt $gte $lt $lte $in $nin` and implicit equality.
//!
//! Comparisons only hold within one canonical type bracket (`{$gt: 1}` never matches a
//! string), except that `$gt/$gte MinKey` and `$lt/$lte MaxKey` match every value. Equality
//! to null also matches a missing path. NaN equals NaN and is not less or greater than any
//! number.

use super::evaluation::RegexPred;
use bson::{Bson, RawBson, RawBsonRef};
use nidus_common::{Error, Result};
use nidus_doc::collation::Collation;
use nidus_doc::compare::{canonical_type, cmp_raw_with, raw_num};
use std::cmp::Ordering;

/// A constant operand, kept both owned (for callers) and raw (for fast comparison), with
/// the collation its strings compare under.
#[derive(Debug, Clone)]
pub struct Value {
    pub bson: Bson,
    pub raw: RawBson,
    pub collation: Option<Collation>,
}

impl Value {
    /// Fails on `undefined` ("cannot compare to undefined", as MongoDB).
    pub fn new(bson: &Bson) -> Result<Value> {
        if matches!(bson, Bson::Undefined) {
            return Err(Error::bad_value("cannot compare to undefined"));
        }
        let raw = RawBson::try_from(bson.clone())
            .map_err(|e| Error::bad_value(format!("invalid BSON value: {e}")))?;
        Ok(Value {
            bson: bson.clone(),
            raw,
            collation: None,
        })
    }

    pub fn as_ref(&self) -> RawBsonRef<'_> {
        self.raw.as_raw_bson_ref()
    }

    fn is_null(&self) -> bool {
        matches!(self.bson, Bson::Null)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Lt,
    Lte,
    Gt,
    Gte,
}

impl CmpOp {
    pub fn from_name(name: &str) -> Option<CmpOp> {
        match name {
            "$lt" => Some(CmpOp::Lt),
            "$lte" => Some(CmpOp::Lte),
            "$gt" => Some(CmpOp::Gt),
            "$gte" => Some(CmpOp::Gte),
            _ => None,
        }
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Lte => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Gte => o != Ordering::Less,
        }
    }

    fn includes_equal(self) -> bool {
        matches!(self, CmpOp::Lte | CmpOp::Gte)
    }
}

/// Equality of a candidate with the operand (null also matches missing).
pub fn eq_matches(val: &Value, v: Option<RawBsonRef>) -> bool {
    match v {
        None => val.is_null(),
        Some(v) => {
            canonical_type(v) == canonical_type(val.as_ref())
                && cmp_raw_with(v, val.as_ref(), val.collation.as_ref()).is_eq()
        }
    }
}

fn is_nan(v: RawBsonRef) -> bool {
    raw_num(v).is_some_and(|n| n.is_nan())
}

/// `$lt/$lte/$gt/$gte` of a candidate against the operand.
pub fn cmp_matches(op: CmpOp, val: &Value, v: Option<RawBsonRef>) -> bool {
    let rhs = val.as_ref();
    // A missing field is below MaxKey and above MinKey (MongoDB compares it as EOO, whose
    // canonical type is neither), so index bounds including its null key are exact.
    let Some(v) = v else {
        return match rhs {
            RawBsonRef::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            RawBsonRef::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            _ => val.is_null() && op.includes_equal(),
        };
    };
    if canonical_type(v) != canonical_type(rhs) {
        return match rhs {
            RawBsonRef::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            RawBsonRef::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            _ => false,
        };
    }
    if is_nan(v) || is_nan(rhs) {
        return op.includes_equal() && is_nan(v) && is_nan(rhs);
    }
    op.holds(cmp_raw_with(v, rhs, val.collation.as_ref()))
}

/// The operand list of `$in` (values and regexes).
#[derive(Debug, Clone, Default)]
pub struct InList {
    pub values: Vec<Value>,
    pub regexes: Vec<RegexPred>,
    has_null: bool,
}

impl InList {
    /// Parses the array of `$in`/`$nin` (`op` names the operator in errors).
    pub fn parse(op: &str, arg: &Bson) -> Result<InList> {
        let Bson::Array(items) = arg else {
            return Err(Error::bad_value(format!("{op} needs an array")));
        };
        let mut list = InList::default();
        for item in items {
            match item {
                Bson::RegularExpression(re) => list.regexes.push(RegexPred::from_bson(re)?),
                Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                    if !is_dbref(d) {
                        return Err(Error::bad_value("cannot nest $ under $in"));
                    }
                    list.values.push(Value::new(item)?);
                }
                Bson::Undefined => {
                    return Err(Error::bad_value(
                        "InMatchExpression equality cannot be undefined",
                    ))
                }
                _ => {
                    list.has_null |= matches!(item, Bson::Null);
                    list.values.push(Value::new(item)?);
                }
            }
        }
        Ok(list)
    }

    pub fn matches(&self, v: Option<RawBsonRef>) -> bool {
        match v {
            None => self.has_null,
            Some(v) => {
                self.values.iter().any(|val| eq_matches(val, Some(v)))
                    || self.regexes.iter().any(|r| r.matches(v))
            }
        }
    }
}

/// `{$ref, $id, $db?}` documents are values, not operator documents.
pub fn is_dbref(d: &bson::Document) -> bool {
    matches!(
        d.keys().next().map(String::as_str),
        Some("$ref" | "$id" | "$db")
    )
}
