//! Values as expressions see them: `Option<Bson>` with `None` for *missing*, MongoDB's type
//! names, truthiness, and the numeric coercions the operators share.

use crate::decimal;
use bson::{Bson, Decimal128};
use nidus_common::{Error, ErrorCode};
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;

/// The result of an expression: `None` is *missing*.
pub type Value = Option<Bson>;

/// An error with an assertion-site code (`Location<n>`).
pub fn err(code: i32, msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::from_code(code), msg)
}

pub use nidus_doc::compare::type_name as type_name_bson;

/// [`type_name_bson`], with `"missing"` for a missing value.
pub fn type_name(v: &Value) -> &'static str {
    v.as_ref().map_or("missing", type_name_bson)
}

/// Missing, null or undefined.
pub fn nullish(v: &Value) -> bool {
    matches!(v, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// MongoDB's `coerceToBool`: false for missing, null, undefined, false and numeric zero.
pub fn truthy(v: &Value) -> bool {
    match v {
        None => false,
        Some(b) => truthy_bson(b),
    }
}

/// [`truthy`] on a present value.
pub fn truthy_bson(b: &Bson) -> bool {
    match b {
        Bson::Null | Bson::Undefined => false,
        Bson::Boolean(x) => *x,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !decimal::is_zero(d),
        _ => true,
    }
}

pub fn is_numeric(b: &Bson) -> bool {
    matches!(
        b,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}

pub fn is_numeric_value(v: &Value) -> bool {
    v.as_ref().is_some_and(is_numeric)
}

/// Numeric type ranks used for the widest-type rule (int < long < double < decimal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NumType {
    Int,
    Long,
    Double,
    Decimal,
}

pub fn num_type(b: &Bson) -> Option<NumType> {
    match b {
        Bson::Int32(_) => Some(NumType::Int),
        Bson::Int64(_) => Some(NumType::Long),
        Bson::Double(_) => Some(NumType::Double),
        Bson::Decimal128(_) => Some(NumType::Decimal),
        _ => None,
    }
}

/// `coerceToDouble` for numbers (0 otherwise).
pub fn to_f64(b: &Bson) -> f64 {
    match b {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(d) => *d,
        Bson::Decimal128(d) => decimal::to_f64(d),
        Bson::DateTime(d) => d.timestamp_millis() as f64,
        Bson::Boolean(b) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

/// `coerceToLong` for numbers: doubles and decimals truncate toward zero, saturating.
pub fn to_i64(b: &Bson) -> i64 {
    match b {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        Bson::Double(d) => f64_to_i64(*d),
        Bson::Decimal128(d) => decimal::to_i64_trunc(d).unwrap_or(0),
        Bson::DateTime(d) => d.timestamp_millis(),
        Bson::Boolean(b) => i64::from(*b),
        _ => 0,
    }
}

/// Truncating, saturating double → i64 (NaN → 0).
pub fn f64_to_i64(d: f64) -> i64 {
    if d.is_nan() {
        0
    } else {
        d as i64
    }
}

/// `coerceToDecimal` for numbers.
pub fn to_decimal(b: &Bson) -> Decimal128 {
    match b {
        Bson::Int32(i) => decimal::from_i64(i64::from(*i)),
        Bson::Int64(i) => decimal::from_i64(*i),
        Bson::Double(d) => decimal::from_f64(*d, 15),
        Bson::Decimal128(d) => *d,
        _ => decimal::from_i64(0),
    }
}

/// MongoDB's `Value::integral()`: a number whose value is an integer representable as int32.
pub fn integral32(b: &Bson) -> bool {
    as_exact_i64(b).is_some_and(|i| i32::try_from(i).is_ok())
}

/// MongoDB's `Value::integral64Bit()`.
pub fn integral64(b: &Bson) -> bool {
    as_exact_i64(b).is_some()
}

/// The value as an i64 when it is a number with an integral value that fits.
pub fn as_exact_i64(b: &Bson) -> Option<i64> {
    match b {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => {
            if d.fract() == 0.0 && *d >= -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18
            {
                Some(*d as i64)
            } else {
                None
            }
        }
        Bson::Decimal128(d) => decimal::to_i64_exact(d),
        _ => None,
    }
}

/// An int32 when it fits, otherwise an int64 (`Value::createIntOrLong`).
pub fn int_or_long(i: i64) -> Bson {
    match i32::try_from(i) {
        Ok(v) => Bson::Int32(v),
        Err(_) => Bson::Int64(i),
    }
}

/// MongoDB's value comparison (the BSON total order, no collation).
pub fn cmp_values(a: &Value, b: &Value) -> Ordering {
    // Missing compares like null... except that missing sorts before null in sorts; for
    // expression comparisons MongoDB treats missing and null as distinct values where missing
    // is lowest (Value::compare: EOO < everything).
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => cmp_bson(x, y),
    }
}

/// Equality in MongoDB's order.
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    cmp_bson(a, b) == Ordering::Equal
}

/// Shell-like rendering of a value for error messages (`Value::toString`).
pub fn display(v: &Value) -> String {
    match v {
        None => "MISSING".to_string(),
        Some(b) => display_bson(b),
    }
}

pub fn display_bson(b: &Bson) -> String {
    match b {
        Bson::String(s) => format!("\"{s}\""),
        Bson::Double(d) => format_double(*d),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::Null => "null".to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::Array(a) => {
            let items: Vec<String> = a.iter().map(display_bson).collect();
            format!("[{}]", items.join(", "))
        }
        Bson::Document(d) => {
            if d.is_empty() {
                return "{}".to_string();
            }
            let items: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k}: {}", display_bson(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// Formats a double as MongoDB's `str::stream() << double` does (`%g`-like, up to 17
/// significant digits, shortest round-trip).
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let exp = d.abs().log10().floor() as i32;
    if !(-5..17).contains(&exp) {
        // Scientific: shortest digits.
        let s = format!("{d:e}");
        // Rust prints "1e20" / "1.5e-7"; C prints "1e+20" / "1.5e-07".
        if let Some((m, e)) = s.split_once('e') {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(rest) => ('-', rest),
                None => ('+', e),
            };
            let digits = if digits.len() < 2 {
                format!("0{digits}")
            } else {
                digits.to_string()
            };
            return format!("{m}e{sign}{digits}");
        }
        return s;
    }
    format!("{d}")
}
