//! Helpers shared by the update operators: MongoDB's type names, element printing for error
//! messages, exact ("identical") value equality and numeric-aware field-name order.

use bson::{Bson, Document};
use nidus_common::shell;
use nidus_doc::path::array_index;
use std::cmp::Ordering;

pub use nidus_doc::compare::type_name;

/// `name: value` as MongoDB's `BSONElement::toString()` prints it.
pub fn elem(name: &str, v: &Bson) -> String {
    format!("{name}: {}", shell::format(v))
}

/// A document printed as in server messages (`{ $set: { a: 1 } }`).
pub fn doc_str(d: &Document) -> String {
    shell::format(&Bson::Document(d.clone()))
}

/// `{_id: 1}`: how update errors name the document.
pub fn id_desc(id: Option<&Bson>) -> String {
    match id {
        Some(id) => format!("{{{}}}", elem("_id", id)),
        None => "{}".to_string(),
    }
}

/// Same type and same value (what makes an update a no-op); NaN is identical to NaN.
pub fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits() || x == y,
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| identical(a, b))
        }
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        _ => a == b,
    }
}

/// The order in which sibling update paths are applied: array indexes numerically, other
/// names by bytes (MongoDB's `cmpPathsAndArrayIndexes`).
pub fn cmp_field_names(a: &str, b: &str) -> Ordering {
    match (array_index(a), array_index(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.as_bytes().cmp(b.as_bytes()),
    }
}

/// `a` + `.` + `b`, or `b` at the top.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Whether the number is integral and fits an i64 (for `$slice`, `$position`).
pub fn as_integer(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        _ => None,
    }
}

pub fn is_number(v: &Bson) -> bool {
    matches!(
        v,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}
