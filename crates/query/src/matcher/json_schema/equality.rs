//! The equality of `enum` and `uniqueItems`: MongoDB's value order, except that embedded
//! documents are equal when they hold the same fields in any order (JSON objects are
//! unordered). Numbers of every type compare by value (`1 == 1.0`).

use bson::{RawArray, RawBsonRef, RawDocument};
use nidus_doc::compare::cmp_raw;

/// True when `a` and `b` are equal values, ignoring field order at every depth.
pub fn unordered_eq(a: RawBsonRef, b: RawBsonRef) -> bool {
    match (a, b) {
        (RawBsonRef::Document(x), RawBsonRef::Document(y)) => documents_eq(x, y),
        (RawBsonRef::Array(x), RawBsonRef::Array(y)) => arrays_eq(x, y),
        _ => cmp_raw(a, b).is_eq(),
    }
}

fn documents_eq(x: &RawDocument, y: &RawDocument) -> bool {
    let fields = |d: &RawDocument| d.into_iter().take_while(|r| r.is_ok()).count();
    fields(x) == fields(y)
        && x.into_iter()
            .map_while(|r| r.ok())
            .all(|(k, v)| y.get(k).ok().flatten().is_some_and(|w| unordered_eq(v, w)))
}

fn arrays_eq(x: &RawArray, y: &RawArray) -> bool {
    let mut xs = x.into_iter();
    let mut ys = y.into_iter();
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return true,
            (Some(Ok(a)), Some(Ok(b))) if unordered_eq(a, b) => {}
            _ => return false,
        }
    }
}
