//! `multipleOf` in decimal arithmetic, as MongoDB evaluates it: both numbers are converted to
//! decimal128 (doubles rounded to 15 significant digits, so `0.3` is a multiple of `0.1`)
//! and the remainder of the division must be zero. NaN and infinities are never multiples.

use bson::{Decimal128, RawBsonRef};
use nidus_doc::number::Num;
use nidus_expr::decimal;

/// A number as MongoDB's `numberDecimal()` sees it.
pub fn to_decimal(n: Num) -> Decimal128 {
    match n {
        Num::Int(i) => decimal::from_i64(i),
        Num::Double(d) => decimal::from_f64(d, 15),
        Num::Dec(d) => decimal::encode(d),
    }
}

/// True when the divisor can be used: strictly positive (NaN passes, and divides nothing).
pub fn is_valid_divisor(d: &Decimal128) -> bool {
    !decimal::is_negative(d) && !decimal::is_zero(d)
}

/// True when `v` is a number and an integral multiple of `divisor`.
pub fn is_multiple(v: RawBsonRef, divisor: &Decimal128) -> bool {
    nidus_doc::compare::raw_num(v)
        .is_some_and(|n| decimal::is_zero(&decimal::rem(&to_decimal(n), divisor)))
}
