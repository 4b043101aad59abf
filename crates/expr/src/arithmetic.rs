//! Arithmetic: `$add $subtract $multiply $divide $mod $abs $ceil $floor $round $trunc $exp
//! $ln $log $log10 $pow $sqrt`, trigonometry, and the accumulator-style expressions `$sum
//! $avg $min $max $stdDevPop $stdDevSamp`.
//!
//! Numeric results follow MongoDB's promotion: the result has the widest operand type
//! (int < long < double < decimal), an int result that overflows becomes a long, a long that
//! overflows becomes a double.

use crate::accumulators;
use crate::decimal::{self, Rounding};
use crate::expression::{fixed, ranged, variadic, Expression, Nary, Parser};
use crate::value::{
    err, format_double, int_or_long, integral64, is_numeric, nullish, num_type, to_decimal, to_f64,
    to_i64, type_name, NumType, Value,
};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, DateTime, Decimal128};
use nidus_common::{Error, ErrorCode, Result};

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$add", |n, a, c| variadic(n, a, c, add)),
    ("$subtract", |n, a, c| fixed(n, a, c, 2, subtract)),
    ("$multiply", |n, a, c| variadic(n, a, c, multiply)),
    ("$divide", |n, a, c| fixed(n, a, c, 2, divide)),
    ("$mod", |n, a, c| fixed(n, a, c, 2, modulo)),
    ("$abs", |n, a, c| fixed(n, a, c, 1, abs)),
    ("$ceil", |n, a, c| fixed(n, a, c, 1, ceil)),
    ("$floor", |n, a, c| fixed(n, a, c, 1, floor)),
    ("$round", |n, a, c| ranged(n, a, c, 1, 2, round)),
    ("$trunc", |n, a, c| ranged(n, a, c, 1, 2, trunc)),
    ("$exp", |n, a, c| fixed(n, a, c, 1, exp)),
    ("$ln", |n, a, c| fixed(n, a, c, 1, ln)),
    ("$log", |n, a, c| fixed(n, a, c, 2, log)),
    ("$log10", |n, a, c| fixed(n, a, c, 1, log10)),
    ("$pow", |n, a, c| fixed(n, a, c, 2, pow)),
    ("$sqrt", |n, a, c| fixed(n, a, c, 1, sqrt)),
    ("$sin", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$cos", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$tan", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$asin", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$acos", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$atan", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$sinh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$cosh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$tanh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$asinh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$acosh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$atanh", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$degreesToRadians", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$radiansToDegrees", |n, a, c| fixed(n, a, c, 1, trig)),
    ("$atan2", |n, a, c| fixed(n, a, c, 2, atan2)),
    ("$sum", parse_acc_expr),
    ("$avg", parse_acc_expr),
    ("$min", parse_acc_expr),
    ("$max", parse_acc_expr),
    ("$stdDevPop", parse_acc_expr),
    ("$stdDevSamp", parse_acc_expr),
    ("$percentile", accumulators::percentile::parse_expression),
    ("$median", accumulators::percentile::parse_expression),
];

fn type_mismatch(msg: String) -> Error {
    Error::new(ErrorCode::TypeMismatch, msg)
}

fn date_millis(d: &DateTime) -> i64 {
    d.timestamp_millis()
}

/// Running sum with MongoDB's type widening (`AddState`).
#[derive(Debug, Clone)]
pub(crate) struct AddState {
    long_total: i64,
    double_total: f64,
    dec_total: Decimal128,
    widest: NumType,
    is_date: bool,
}

impl AddState {
    pub(crate) fn new() -> AddState {
        AddState {
            long_total: 0,
            double_total: 0.0,
            dec_total: decimal::from_i64(0),
            widest: NumType::Int,
            is_date: false,
        }
    }

    /// Adds a number or a date (the caller has checked the type).
    pub(crate) fn add(&mut self, v: &Bson) -> Result<()> {
        let old = self.widest;
        let val = match v {
            Bson::DateTime(d) => {
                if self.is_date {
                    return Err(err(16612, "only one date allowed in an $add expression"));
                }
                self.is_date = true;
                Bson::Int64(date_millis(d))
            }
            other => {
                if let Some(t) = num_type(other) {
                    self.widest = self.widest.max(t);
                }
                other.clone()
            }
        };
        if old != self.widest {
            match self.widest {
                NumType::Double => self.double_total = self.long_total as f64,
                NumType::Decimal => {
                    self.dec_total = match old {
                        NumType::Double => decimal::from_f64(self.double_total, 34),
                        _ => decimal::from_i64(self.long_total),
                    }
                }
                _ => {}
            }
        }
        match self.widest {
            NumType::Int | NumType::Long => match self.long_total.checked_add(to_i64(&val)) {
                Some(t) => self.long_total = t,
                None => {
                    self.widest = NumType::Double;
                    self.double_total = self.long_total as f64 + to_f64(&val);
                }
            },
            NumType::Double => self.double_total += to_f64(&val),
            NumType::Decimal => self.dec_total = decimal::add(&self.dec_total, &to_decimal(&val)),
        }
        Ok(())
    }

    pub(crate) fn value(&self) -> Result<Bson> {
        if self.is_date {
            let ms = match self.widest {
                NumType::Int | NumType::Long => self.long_total,
                NumType::Double => {
                    let d = self.double_total;
                    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&d) {
                        return Err(Error::new(ErrorCode::Overflow, "date overflow in $add"));
                    }
                    d.round() as i64
                }
                NumType::Decimal => {
                    decimal::to_i64_rounded(&self.dec_total, Rounding::HalfEven).unwrap_or(0)
                }
            };
            return Ok(Bson::DateTime(DateTime::from_millis(ms)));
        }
        Ok(match self.widest {
            NumType::Int => int_or_long(self.long_total),
            NumType::Long => Bson::Int64(self.long_total),
            NumType::Double => Bson::Double(self.double_total),
            NumType::Decimal => Bson::Decimal128(self.dec_total),
        })
    }
}

fn add(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut st = AddState::new();
    for e in &op.args {
        let b = match e.evaluate(vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(b) => b,
        };
        if !is_numeric(&b) && !matches!(b, Bson::DateTime(_)) {
            return Err(type_mismatch(format!(
                "$add only supports numeric or date types, not {}",
                crate::value::type_name_bson(&b)
            )));
        }
        st.add(&b)?;
    }
    st.value().map(Some)
}

fn subtract(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    subtract_values(&l, &r).map(Some)
}

pub(crate) fn subtract_values(l: &Value, r: &Value) -> Result<Bson> {
    let (lt, rt) = (l.as_ref().and_then(num_type), r.as_ref().and_then(num_type));
    if let (Some(lt), Some(rt), Some(lb), Some(rb)) = (lt, rt, l.as_ref(), r.as_ref()) {
        return Ok(match lt.max(rt) {
            NumType::Decimal => Bson::Decimal128(decimal::sub(&to_decimal(lb), &to_decimal(rb))),
            NumType::Double => Bson::Double(to_f64(lb) - to_f64(rb)),
            NumType::Long => match to_i64(lb).checked_sub(to_i64(rb)) {
                Some(v) => Bson::Int64(v),
                None => Bson::Double(to_f64(lb) - to_f64(rb)),
            },
            NumType::Int => int_or_long(to_i64(lb) - to_i64(rb)),
        });
    }
    if nullish(l) || nullish(r) {
        return Ok(Bson::Null);
    }
    match (l, r) {
        (Some(Bson::DateTime(a)), Some(Bson::DateTime(b))) => {
            Ok(Bson::Int64(date_millis(a).wrapping_sub(date_millis(b))))
        }
        (Some(Bson::DateTime(a)), Some(b)) if is_numeric(b) => {
            let ms = match b {
                Bson::Double(d) => d.round() as i64,
                Bson::Decimal128(d) => decimal::to_i64_rounded(d, Rounding::HalfEven).unwrap_or(0),
                other => to_i64(other),
            };
            Ok(Bson::DateTime(DateTime::from_millis(
                date_millis(a).wrapping_sub(ms),
            )))
        }
        (Some(Bson::DateTime(_)), r) => Err(type_mismatch(format!(
            "can't $subtract {} from Date",
            type_name(r)
        ))),
        (l, r) => Err(type_mismatch(format!(
            "can't $subtract {} from {}",
            type_name(r),
            type_name(l)
        ))),
    }
}

/// Running product with type widening (`MultiplyState`).
struct MulState {
    double_product: f64,
    long_product: i64,
    dec_product: Decimal128,
    ty: NumType,
}

impl MulState {
    fn mul(&mut self, v: &Bson) {
        let old = self.ty;
        if let Some(t) = num_type(v) {
            self.ty = self.ty.max(t);
        }
        if self.ty == NumType::Decimal {
            if old != NumType::Decimal {
                self.dec_product = if old == NumType::Double {
                    decimal::from_f64(self.double_product, 15)
                } else {
                    decimal::from_i64(self.long_product)
                };
            }
            self.dec_product = decimal::mul(&self.dec_product, &to_decimal(v));
        } else {
            let d = to_f64(v);
            self.double_product *= d;
            if self.ty != NumType::Double {
                match self.long_product.checked_mul(to_i64(v)) {
                    Some(p) if d.is_finite() => self.long_product = p,
                    _ => self.ty = NumType::Double,
                }
            }
        }
    }

    fn value(&self) -> Bson {
        match self.ty {
            NumType::Double => Bson::Double(self.double_product),
            NumType::Long => Bson::Int64(self.long_product),
            NumType::Int => int_or_long(self.long_product),
            NumType::Decimal => Bson::Decimal128(self.dec_product),
        }
    }
}

fn multiply(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut st = MulState {
        double_product: 1.0,
        long_product: 1,
        dec_product: decimal::from_i64(1),
        ty: NumType::Int,
    };
    for e in &op.args {
        let v = e.evaluate(vars)?;
        match v {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(b) if is_numeric(&b) => st.mul(&b),
            Some(b) => {
                return Err(type_mismatch(format!(
                    "$multiply only supports numeric types, not {}",
                    crate::value::type_name_bson(&b)
                )))
            }
        }
    }
    Ok(Some(st.value()))
}

fn divide(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    match (&l, &r) {
        (Some(a), Some(b)) if is_numeric(a) && is_numeric(b) => {
            if matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
                let den = to_decimal(b);
                if decimal::is_zero(&den) {
                    return Err(Error::bad_value("can't $divide by zero"));
                }
                return Ok(Some(Bson::Decimal128(decimal::div(&to_decimal(a), &den))));
            }
            let den = to_f64(b);
            if den == 0.0 {
                return Err(Error::bad_value("can't $divide by zero"));
            }
            Ok(Some(Bson::Double(to_f64(a) / den)))
        }
        _ if nullish(&l) || nullish(&r) => Ok(Some(Bson::Null)),
        _ => Err(type_mismatch(format!(
            "$divide only supports numeric types, not {} and {}",
            type_name(&l),
            type_name(&r)
        ))),
    }
}

fn modulo(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    match (&l, &r) {
        (Some(a), Some(b)) if is_numeric(a) && is_numeric(b) => {
            let (lt, rt) = (num_type(a), num_type(b));
            if lt == Some(NumType::Decimal) || rt == Some(NumType::Decimal) {
                let den = to_decimal(b);
                if decimal::is_zero(&den) {
                    return Err(err(5733415, "can't $mod by zero"));
                }
                return Ok(Some(Bson::Decimal128(decimal::rem(&to_decimal(a), &den))));
            }
            let right = to_f64(b);
            if right == 0.0 {
                return Err(err(16610, "can't $mod by zero"));
            }
            if lt == Some(NumType::Double)
                || (rt == Some(NumType::Double) && !crate::value::integral32(b))
            {
                return Ok(Some(Bson::Double(to_f64(a) % right)));
            }
            if lt == Some(NumType::Long) || rt == Some(NumType::Long) {
                let (x, y) = (to_i64(a), to_i64(b));
                return Ok(Some(Bson::Int64(x.wrapping_rem(y))));
            }
            let (x, y) = (to_i64(a) as i32, to_i64(b) as i32);
            Ok(Some(Bson::Int32(x.wrapping_rem(y))))
        }
        _ if nullish(&l) || nullish(&r) => Ok(Some(Bson::Null)),
        _ => Err(err(
            16611,
            format!(
                "$mod only supports numeric types, not {} and {}",
                type_name(&l),
                type_name(&r)
            ),
        )),
    }
}

/// Evaluates the single numeric argument: `Ok(None)` for a nullish argument (the result is
/// null), error 28765 for a non-number.
fn numeric_arg(op: &Nary, vars: &mut Variables) -> Result<Option<Bson>> {
    let v = op.arg(0, vars)?;
    if nullish(&v) {
        return Ok(None);
    }
    match v {
        Some(b) if is_numeric(&b) => Ok(Some(b)),
        other => Err(err(
            28765,
            format!(
                "{} only supports numeric types, not {}",
                op.name,
                type_name(&other)
            ),
        )),
    }
}

fn abs(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    Ok(Some(match v {
        Bson::Double(d) => Bson::Double(d.abs()),
        Bson::Decimal128(d) => Bson::Decimal128(decimal::abs(&d)),
        other => {
            let n = to_i64(&other);
            if n == i64::MIN {
                return Err(err(28680, "can't take $abs of long long min"));
            }
            if matches!(other, Bson::Int64(_)) {
                Bson::Int64(n.abs())
            } else {
                int_or_long(n.abs())
            }
        }
    }))
}

fn ceil(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    Ok(Some(match v {
        Bson::Double(d) => Bson::Double(d.ceil()),
        Bson::Decimal128(d) => {
            Bson::Decimal128(decimal::quantize(&d, 0, Rounding::Up).unwrap_or(d))
        }
        other => other,
    }))
}

fn floor(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    Ok(Some(match v {
        Bson::Double(d) => Bson::Double(d.floor()),
        Bson::Decimal128(d) => {
            Bson::Decimal128(decimal::quantize(&d, 0, Rounding::Down).unwrap_or(d))
        }
        other => other,
    }))
}

fn round(op: &Nary, vars: &mut Variables) -> Result<Value> {
    round_or_trunc(op, vars, Rounding::HalfEven)
}

fn trunc(op: &Nary, vars: &mut Variables) -> Result<Value> {
    round_or_trunc(op, vars, Rounding::TowardZero)
}

fn round_or_trunc(op: &Nary, vars: &mut Variables, mode: Rounding) -> Result<Value> {
    let v = op.arg(0, vars)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let v = match v {
        Some(b) if is_numeric(&b) => b,
        other => {
            return Err(err(
                51081,
                format!(
                    "{} only supports numeric types, not {}",
                    op.name,
                    type_name(&other)
                ),
            ))
        }
    };
    let mut precision = 0i64;
    if op.args.len() > 1 {
        let p = op.arg(1, vars)?;
        if nullish(&p) {
            return Ok(Some(Bson::Null));
        }
        let p = p.unwrap_or(Bson::Null);
        precision = to_i64(&p);
        if !crate::value::integral32(&p) && !integral64(&p) {
            return Err(err(
                51082,
                format!(
                    "precision argument to  {} must be a integral value",
                    op.name
                ),
            ));
        }
        if !(-20..=100).contains(&precision) {
            return Err(err(
                51083,
                format!(
                    "cannot apply {} with precision value {precision} value must be in [-20, 100]",
                    op.name
                ),
            ));
        }
    }
    let target = -(precision as i32);
    Ok(Some(match v {
        Bson::Decimal128(d) => {
            if decimal::is_infinite(&d) {
                Bson::Decimal128(d)
            } else {
                Bson::Decimal128(decimal::quantize(&d, target, mode).unwrap_or_else(decimal::nan))
            }
        }
        Bson::Double(x) => {
            if !x.is_finite() {
                Bson::Double(x)
            } else {
                let dec = decimal::from_f64(x, 34);
                let q = decimal::quantize(&dec, target, mode).unwrap_or_else(decimal::nan);
                Bson::Double(decimal::to_f64(&q))
            }
        }
        other => {
            if precision >= 0 {
                other
            } else {
                let n = to_i64(&other);
                let q = decimal::quantize(&decimal::from_i64(n), target, mode)
                    .and_then(|q| decimal::to_i64_exact(&q));
                let Some(out) = q else {
                    return Err(err(
                        51080,
                        format!(
                            "invalid conversion from Decimal128 result in {} resulting from arguments: [{n}, {precision}]",
                            op.name
                        ),
                    ));
                };
                if matches!(other, Bson::Int64(_)) {
                    Bson::Int64(out)
                } else {
                    int_or_long(out)
                }
            }
        }
    }))
}

/// A transcendental function on a decimal, computed in double precision.
fn dec_fn(d: &Decimal128, f: impl Fn(f64) -> f64) -> Bson {
    Bson::Decimal128(decimal::from_f64(f(decimal::to_f64(d)), 15))
}

fn exp(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    Ok(Some(match v {
        Bson::Decimal128(d) => dec_fn(&d, f64::exp),
        other => Bson::Double(to_f64(&other).exp()),
    }))
}

fn ln(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    if let Bson::Decimal128(d) = &v {
        if decimal::to_f64(d) > 0.0 {
            return Ok(Some(dec_fn(d, f64::ln)));
        }
    }
    let x = to_f64(&v);
    if !(x > 0.0 || x.is_nan()) {
        return Err(err(
            28766,
            format!(
                "$ln's argument must be a positive number, but is {}",
                format_double(x)
            ),
        ));
    }
    Ok(Some(Bson::Double(x.ln())))
}

fn log10(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    if let Bson::Decimal128(d) = &v {
        if decimal::to_f64(d) > 0.0 {
            return Ok(Some(dec_fn(d, f64::log10)));
        }
    }
    let x = to_f64(&v);
    if !(x > 0.0 || x.is_nan()) {
        return Err(err(
            28761,
            format!(
                "$log10's argument must be a positive number, but is {}",
                format_double(x)
            ),
        ));
    }
    Ok(Some(Bson::Double(x.log10())))
}

fn log(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = op.arg(0, vars)?;
    let b = op.arg(1, vars)?;
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    let (Some(a), Some(b)) = (a, b) else {
        return Ok(Some(Bson::Null));
    };
    if !is_numeric(&a) {
        return Err(err(
            28756,
            format!(
                "$log's argument must be numeric, not {}",
                crate::value::type_name_bson(&a)
            ),
        ));
    }
    if !is_numeric(&b) {
        return Err(err(
            28757,
            format!(
                "$log's base must be numeric, not {}",
                crate::value::type_name_bson(&b)
            ),
        ));
    }
    let (x, base) = (to_f64(&a), to_f64(&b));
    if (matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)))
        && x > 0.0
        && base > 0.0
        && base != 1.0
    {
        return Ok(Some(Bson::Decimal128(decimal::from_f64(
            x.ln() / base.ln(),
            15,
        ))));
    }
    if !(x > 0.0 || x.is_nan()) {
        return Err(err(
            28758,
            format!(
                "$log's argument must be a positive number, but is {}",
                format_double(x)
            ),
        ));
    }
    if !((base > 0.0 && base != 1.0) || base.is_nan()) {
        return Err(err(
            28759,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                format_double(base)
            ),
        ));
    }
    Ok(Some(Bson::Double(x.ln() / base.ln())))
}

fn pow(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = op.arg(0, vars)?;
    let b = op.arg(1, vars)?;
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    let (Some(base), Some(ex)) = (a, b) else {
        return Ok(Some(Bson::Null));
    };
    if !is_numeric(&base) {
        return Err(err(
            28762,
            format!(
                "$pow's base must be numeric, not {}",
                crate::value::type_name_bson(&base)
            ),
        ));
    }
    if !is_numeric(&ex) {
        return Err(err(
            28763,
            format!(
                "$pow's exponent must be numeric, not {}",
                crate::value::type_name_bson(&ex)
            ),
        ));
    }
    let zero_neg = || {
        err(
            28764,
            "$pow cannot take a base of 0 and a negative exponent",
        )
    };
    let (bt, et) = (num_type(&base), num_type(&ex));
    if bt == Some(NumType::Decimal) || et == Some(NumType::Decimal) {
        let (bd, ed) = (to_decimal(&base), to_decimal(&ex));
        if decimal::is_zero(&bd) && decimal::is_negative(&ed) {
            return Err(zero_neg());
        }
        // Exact for integral exponents of moderate size; double precision otherwise.
        if let Some(n) = decimal::to_i64_exact(&ed).filter(|n| (0..=1000).contains(n)) {
            let mut acc = decimal::from_i64(1);
            for _ in 0..n {
                acc = decimal::mul(&acc, &bd);
            }
            return Ok(Some(Bson::Decimal128(acc)));
        }
        return Ok(Some(Bson::Decimal128(decimal::from_f64(
            decimal::to_f64(&bd).powf(decimal::to_f64(&ed)),
            15,
        ))));
    }
    let (bf, ef) = (to_f64(&base), to_f64(&ex));
    if bf == 0.0 && ef < 0.0 {
        return Err(zero_neg());
    }
    if bt == Some(NumType::Double) || et == Some(NumType::Double) {
        return Ok(Some(Bson::Double(bf.powf(ef))));
    }
    let long_result = bt == Some(NumType::Long) || et == Some(NumType::Long);
    let fmt = |r: i64| {
        if long_result {
            Bson::Int64(r)
        } else {
            int_or_long(r)
        }
    };
    let (bl, el) = (to_i64(&base), to_i64(&ex));
    match bl {
        0 => return Ok(Some(fmt(if el == 0 { 1 } else { 0 }))),
        1 => return Ok(Some(fmt(1))),
        -1 => return Ok(Some(fmt(if el % 2 == 0 { 1 } else { -1 }))),
        _ => {}
    }
    if !(0..=63).contains(&el) {
        return Ok(Some(Bson::Double((bl as f64).powf(el as f64))));
    }
    match bl.checked_pow(el as u32) {
        Some(r) => Ok(Some(fmt(r))),
        None => Ok(Some(Bson::Double((bl as f64).powf(el as f64)))),
    }
}

fn sqrt(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    let neg = || err(28714, "$sqrt's argument must be greater than or equal to 0");
    if let Bson::Decimal128(d) = &v {
        if decimal::is_negative(d) {
            return Err(neg());
        }
        return Ok(Some(dec_fn(d, f64::sqrt)));
    }
    let x = to_f64(&v);
    if x < 0.0 {
        return Err(neg());
    }
    Ok(Some(Bson::Double(x.sqrt())))
}

/// Trigonometric functions (double precision; decimals in, decimals out).
fn trig(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(v) = numeric_arg(op, vars)? else {
        return Ok(Some(Bson::Null));
    };
    let x = to_f64(&v);
    let bounded = |lo: f64, hi: f64, lo_open: bool, hi_open: bool| -> Result<()> {
        let below = if lo_open { x <= lo } else { x < lo };
        let above = if hi_open { x >= hi } else { x > hi };
        if !x.is_nan() && (below || above) {
            let l = if lo_open { "(" } else { "[" };
            let h = if hi_open { ")" } else { "]" };
            return Err(err(
                50989,
                format!(
                    "cannot apply {} to {}, value must be in {l}{},{}{h}",
                    op.name,
                    crate::value::display_bson(&v),
                    format_double(lo),
                    format_double(hi)
                ),
            ));
        }
        Ok(())
    };
    let r = match op.name {
        "$sin" | "$cos" | "$tan" if x.is_infinite() => {
            return Err(err(
                50989,
                format!(
                    "cannot apply {} to {}, value must be in (-inf,inf)",
                    op.name,
                    crate::value::display_bson(&v)
                ),
            ))
        }
        "$sin" => x.sin(),
        "$cos" => x.cos(),
        "$tan" => x.tan(),
        "$asin" => {
            bounded(-1.0, 1.0, false, false)?;
            x.asin()
        }
        "$acos" => {
            bounded(-1.0, 1.0, false, false)?;
            x.acos()
        }
        "$atan" => x.atan(),
        "$sinh" => x.sinh(),
        "$cosh" => x.cosh(),
        "$tanh" => x.tanh(),
        "$asinh" => x.asinh(),
        "$acosh" => {
            bounded(1.0, f64::INFINITY, false, false)?;
            x.acosh()
        }
        "$atanh" => {
            bounded(-1.0, 1.0, false, false)?;
            x.atanh()
        }
        "$degreesToRadians" => x.to_radians(),
        _ => x.to_degrees(),
    };
    Ok(Some(match v {
        Bson::Decimal128(_) => Bson::Decimal128(decimal::from_f64(r, 15)),
        _ => Bson::Double(r),
    }))
}

fn atan2(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = op.arg(0, vars)?;
    let b = op.arg(1, vars)?;
    if nullish(&a) || nullish(&b) {
        return Ok(Some(Bson::Null));
    }
    let (Some(y), Some(x)) = (a, b) else {
        return Ok(Some(Bson::Null));
    };
    for v in [&y, &x] {
        if !is_numeric(v) {
            return Err(err(
                51044,
                format!(
                    "$atan2 only supports numeric types, not {}",
                    crate::value::type_name_bson(v)
                ),
            ));
        }
    }
    let r = to_f64(&y).atan2(to_f64(&x));
    if matches!(y, Bson::Decimal128(_)) || matches!(x, Bson::Decimal128(_)) {
        return Ok(Some(Bson::Decimal128(decimal::from_f64(r, 15))));
    }
    Ok(Some(Bson::Double(r)))
}

// ---- accumulator-style expressions ---------------------------------------------------------

/// `$sum`, `$avg`, `$min`, `$max`, `$stdDevPop`, `$stdDevSamp` as expressions: with one
/// argument that evaluates to an array, over its elements; otherwise over the arguments.
fn parse_acc_expr(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    variadic(name, arg, ctx, eval_acc_expr)
}

fn eval_acc_expr(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let Some(mut acc) = accumulators::create(op.name) else {
        return Ok(Some(Bson::Null));
    };
    if op.args.len() == 1 {
        let v = op.arg(0, vars)?;
        match v {
            Some(Bson::Array(items)) => {
                for it in items {
                    acc.process(Some(it))?;
                }
            }
            other => acc.process(other)?,
        }
    } else {
        for e in &op.args {
            let v = e.evaluate(vars)?;
            acc.process(v)?;
        }
    }
    Ok(Some(acc.finalize()?))
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson, DateTime};

    #[test]
    fn arithmetic_values() {
        let d = doc! {"i": 5, "l": 7i64, "d": 2.5, "s": "x", "dt": DateTime::from_millis(1000), "n": null,
        "big": i64::MAX, "imax": i32::MAX};
        let dec = |s: &str| Bson::Decimal128(s.parse().expect("dec"));
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$add": [1, 2]}), Some(bson!(3))),
            (bson!({"$add": ["$i", "$l"]}), Some(bson!(12i64))),
            (bson!({"$add": ["$i", "$d"]}), Some(bson!(7.5))),
            (bson!({"$add": ["$imax", 1]}), Some(bson!(2147483648i64))),
            (
                bson!({"$add": ["$big", 1]}),
                Some(bson!(9.223372036854776e18)),
            ),
            (
                bson!({"$add": ["$dt", 500]}),
                Some(Bson::DateTime(DateTime::from_millis(1500))),
            ),
            (bson!({"$add": [1, "$n"]}), Some(Bson::Null)),
            (bson!({"$add": [1, "$missing"]}), Some(Bson::Null)),
            (bson!({"$add": []}), Some(bson!(0))),
            (
                bson!({"$add": [1, {"$literal": dec("1.5")}]}),
                Some(dec("2.5")),
            ),
            (bson!({"$subtract": [10, 3]}), Some(bson!(7))),
            (
                bson!({"$subtract": ["$dt", 1000]}),
                Some(Bson::DateTime(DateTime::from_millis(0))),
            ),
            (bson!({"$subtract": ["$dt", "$dt"]}), Some(bson!(0i64))),
            (
                bson!({"$subtract": [i64::MIN, 1i64]}),
                Some(bson!(-9.223372036854776e18)),
            ),
            (bson!({"$subtract": ["$n", "$s"]}), Some(Bson::Null)),
            (bson!({"$multiply": [2, 3, 4]}), Some(bson!(24))),
            (
                bson!({"$multiply": ["$imax", 2]}),
                Some(bson!(4294967294i64)),
            ),
            (
                bson!({"$multiply": ["$big", 2]}),
                Some(bson!(1.8446744073709552e19)),
            ),
            (bson!({"$multiply": [2, 1.5]}), Some(bson!(3.0))),
            (bson!({"$divide": [1, 4]}), Some(bson!(0.25))),
            (
                bson!({"$divide": [{"$literal": dec("1")}, 4]}),
                Some(dec("0.25")),
            ),
            (bson!({"$mod": [7, 3]}), Some(bson!(1))),
            (bson!({"$mod": [-7, 3]}), Some(bson!(-1))),
            (bson!({"$mod": [7i64, 3]}), Some(bson!(1i64))),
            (bson!({"$mod": [7.5, 2]}), Some(bson!(1.5))),
            (bson!({"$mod": [7, 2.0]}), Some(bson!(1))),
            (bson!({"$abs": -5}), Some(bson!(5))),
            (bson!({"$abs": [i32::MIN]}), Some(bson!(2147483648i64))),
            (bson!({"$abs": -2.5}), Some(bson!(2.5))),
            (bson!({"$abs": null}), Some(Bson::Null)),
            (bson!({"$ceil": 2.1}), Some(bson!(3.0))),
            (bson!({"$floor": -2.1}), Some(bson!(-3.0))),
            (bson!({"$floor": 7}), Some(bson!(7))),
            (bson!({"$ceil": {"$literal": dec("1.1")}}), Some(dec("2"))),
            (bson!({"$round": [2.5]}), Some(bson!(2.0))),
            (bson!({"$round": [3.5]}), Some(bson!(4.0))),
            (bson!({"$round": [1.2345, 2]}), Some(bson!(1.23))),
            (bson!({"$round": [1234, -2]}), Some(bson!(1200))),
            (bson!({"$round": [1250i64, -2]}), Some(bson!(1200i64))),
            (bson!({"$trunc": [-1.99]}), Some(bson!(-1.0))),
            (bson!({"$trunc": [1.999, 1]}), Some(bson!(1.9))),
            (
                bson!({"$round": [{"$literal": dec("1.25")}, 1]}),
                Some(dec("1.2")),
            ),
            (bson!({"$exp": 0}), Some(bson!(1.0))),
            (bson!({"$ln": 1}), Some(bson!(0.0))),
            (bson!({"$log": [100, 10]}), Some(bson!(2.0))),
            (bson!({"$log10": 1000}), Some(bson!(3.0))),
            (bson!({"$pow": [2, 10]}), Some(bson!(1024))),
            (bson!({"$pow": [2, 31]}), Some(bson!(2147483648i64))),
            (bson!({"$pow": [2i64, 3]}), Some(bson!(8i64))),
            (bson!({"$pow": [2, -1]}), Some(bson!(0.5))),
            (bson!({"$pow": [2, 64]}), Some(bson!(1.8446744073709552e19))),
            (bson!({"$pow": [-1, 3]}), Some(bson!(-1))),
            (bson!({"$pow": [2.0, 2]}), Some(bson!(4.0))),
            (bson!({"$sqrt": 16}), Some(bson!(4.0))),
            (bson!({"$sum": [1, 2, "a", 3.5]}), Some(bson!(6.5))),
            (bson!({"$sum": [[1, 2, 3]]}), Some(bson!(6))),
            (bson!({"$sum": "$s"}), Some(bson!(0))),
            (bson!({"$avg": [1, 2, 3, 4]}), Some(bson!(2.5))),
            (bson!({"$avg": "$s"}), Some(Bson::Null)),
            (bson!({"$max": [1, 5, 3, null]}), Some(bson!(5))),
            (bson!({"$min": [[4, 2, "a"]]}), Some(bson!(2))),
            (bson!({"$min": [null, "$missing"]}), Some(Bson::Null)),
            (
                bson!({"$stdDevPop": [[1, 2, 3, 4]]}),
                Some(bson!(1.118033988749895)),
            ),
            (bson!({"$sin": 0}), Some(bson!(0.0))),
            (
                bson!({"$degreesToRadians": 180}),
                Some(bson!(std::f64::consts::PI)),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
    }

    #[test]
    fn arithmetic_errors() {
        let d = doc! {"s": "x", "dt": DateTime::from_millis(0)};
        let cases = [
            (bson!({"$add": [1, "$s"]}), 14),
            (bson!({"$add": ["$dt", "$dt"]}), 16612),
            (bson!({"$subtract": [1, "$s"]}), 14),
            (bson!({"$subtract": ["$dt", "$s"]}), 14),
            (bson!({"$subtract": [1]}), 16020),
            (bson!({"$multiply": [2, "$s"]}), 14),
            (bson!({"$divide": [1, 0]}), 2),
            (bson!({"$divide": [1, "$s"]}), 14),
            (bson!({"$mod": [1, 0]}), 16610),
            (bson!({"$mod": [1, "$s"]}), 16611),
            (bson!({"$abs": "$s"}), 28765),
            (bson!({"$abs": [i64::MIN]}), 28680),
            (bson!({"$abs": [1, 2]}), 16020),
            (bson!({"$round": [1, 2, 3]}), 28667),
            (bson!({"$round": [1.5, 1.5]}), 51082),
            (bson!({"$round": [1.5, 101]}), 51083),
            (bson!({"$ln": 0}), 28766),
            (bson!({"$log": [10, 1]}), 28759),
            (bson!({"$log": ["$s", 1]}), 28756),
            (bson!({"$pow": [0, -1]}), 28764),
            (bson!({"$sqrt": -1}), 28714),
            (bson!({"$acos": 2}), 50989),
        ];
        for (e, code) in cases {
            case_err(&d, &e, code);
        }
    }
}
