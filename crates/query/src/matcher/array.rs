//! `$all`, `$elemMatch` and `$size`.

use super::{Expr, Pred};
use bson::{Bson, RawBsonRef, RawDocument};
use nidus_common::{Error, Result};
use nidus_doc::compare::bson_num;

/// `$elemMatch`: the object form applies a filter to each element that is a document (or an
/// array, seen as a document with keys "0", "1", ...); the value form applies operators to
/// each element itself.
#[derive(Debug, Clone)]
pub enum ElemMatch {
    Object(Box<Expr>),
    Value(Vec<Pred>),
}

impl ElemMatch {
    /// `Some(Some(i))` with the index of the first matching element, `None` when the value
    /// is not an array or no element matches.
    pub fn matches(&self, v: RawBsonRef) -> Option<Option<usize>> {
        let RawBsonRef::Array(arr) = v else {
            return None;
        };
        for (i, e) in arr.into_iter().map_while(|r| r.ok()).enumerate() {
            if self.element_matches(e) {
                return Some(Some(i));
            }
        }
        None
    }

    fn element_matches(&self, e: RawBsonRef) -> bool {
        match self {
            ElemMatch::Object(expr) => {
                let doc = match e {
                    RawBsonRef::Document(d) => d,
                    RawBsonRef::Array(a) => match RawDocument::from_bytes(a.as_bytes()) {
                        Ok(d) => d,
                        Err(_) => return false,
                    },
                    _ => return false,
                };
                // Parsed without `$expr` (see `ParseOptions::nested`): cannot fail.
                matches!(expr.eval(doc), Ok(Some(_)))
            }
            ElemMatch::Value(preds) => preds.iter().all(|p| p.matches_single(e)),
        }
    }
}

/// `$size`: arrays of exactly `n` elements.
pub fn size_matches(n: i64, v: RawBsonRef) -> bool {
    match v {
        RawBsonRef::Array(a) => a.into_iter().take_while(|r| r.is_ok()).count() as i64 == n,
        _ => false,
    }
}

/// Parses the argument of `$size`.
pub fn parse_size(arg: &Bson) -> Result<i64> {
    let n = bson_num(arg).ok_or_else(|| Error::bad_value("$size needs a number"))?;
    let f = n.to_f64();
    if f.is_nan() || f.fract() != 0.0 {
        return Err(Error::bad_value(format!(
            "Failed to parse $size. Expected an integer, but found {}",
            super::parse::display(arg)
        )));
    }
    if f < 0.0 {
        return Err(Error::bad_value(format!(
            "Failed to parse $size. Expected a non-negative number in: $size: {}",
            super::parse::display(arg)
        )));
    }
    if f > i32::MAX as f64 {
        return Err(Error::bad_value(format!(
            "Failed to parse $size. Cannot represent as a 32-bit integer: $size: {}",
            super::parse::display(arg)
        )));
    }
    Ok(f as i64)
}
