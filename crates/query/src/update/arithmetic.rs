//! Numeric operators: `$inc`, `$mul` (with MongoDB's type promotion: int32 overflows into
//! int64, int64 overflow is an error, doubles win), `$min`, `$max` (BSON order) and `$bit`.

use super::leaf::{Env, Op};
use super::util::{elem, identical, is_number, type_name};
use bson::Bson;
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::decimal;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Inc,
    Mul,
}

impl ArithOp {
    fn modifier(self) -> &'static str {
        match self {
            ArithOp::Inc => "$inc",
            ArithOp::Mul => "$mul",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpKind {
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOp {
    And,
    Or,
    Xor,
}

pub fn parse_arith(op: ArithOp, path: &str, arg: &Bson) -> Result<Op> {
    if !is_number(arg) {
        let verb = match op {
            ArithOp::Inc => "increment",
            ArithOp::Mul => "multiply",
        };
        return Err(Error::type_mismatch(format!(
            "Cannot {verb} with non-numeric argument: {{{}}}",
            elem(path, arg)
        )));
    }
    Ok(Op::Arith(op, arg.clone()))
}

/// A number in SafeNum's kinds.
#[derive(Debug, Clone, Copy)]
enum N {
    I32(i32),
    I64(i64),
    F(f64),
    D(bson::Decimal128),
}

fn to_n(v: &Bson) -> Result<Option<N>> {
    Ok(match v {
        Bson::Int32(i) => Some(N::I32(*i)),
        Bson::Int64(i) => Some(N::I64(*i)),
        Bson::Double(d) => Some(N::F(*d)),
        Bson::Decimal128(d) => Some(N::D(*d)),
        _ => None,
    })
}

fn from_n(n: N) -> Bson {
    match n {
        N::I32(i) => Bson::Int32(i),
        N::I64(i) => Bson::Int64(i),
        N::F(f) => Bson::Double(f),
        N::D(d) => Bson::Decimal128(d),
    }
}

/// SafeNum's widening to decimal: integers exactly, doubles rounded to 15 digits.
fn as_decimal(n: N) -> bson::Decimal128 {
    match n {
        N::I32(i) => decimal::from_i64(i64::from(i)),
        N::I64(i) => decimal::from_i64(i),
        N::F(f) => decimal::from_f64(f, 15),
        N::D(d) => d,
    }
}

fn as_i64(n: N) -> i64 {
    match n {
        N::I32(i) => i64::from(i),
        N::I64(i) => i,
        N::F(f) => f as i64,
        N::D(d) => decimal::to_i64_trunc(&d).unwrap_or(0),
    }
}

fn as_f64(n: N) -> f64 {
    match n {
        N::I32(i) => f64::from(i),
        N::I64(i) => i as f64,
        N::F(f) => f,
        N::D(d) => decimal::to_f64(&d),
    }
}

/// `a op b` with SafeNum's promotion; `None` when an int64 result overflows.
fn compute(op: ArithOp, a: N, b: N) -> Option<N> {
    match (a, b) {
        // A decimal operand makes the operation decimal (no overflow: it saturates to
        // infinity, as IEEE 754-2008 decimal arithmetic does).
        (N::D(_), _) | (_, N::D(_)) => {
            let (x, y) = (as_decimal(a), as_decimal(b));
            Some(N::D(match op {
                ArithOp::Inc => decimal::add(&x, &y),
                ArithOp::Mul => decimal::mul(&x, &y),
            }))
        }
        (N::F(_), _) | (_, N::F(_)) => Some(N::F(match op {
            ArithOp::Inc => as_f64(a) + as_f64(b),
            ArithOp::Mul => as_f64(a) * as_f64(b),
        })),
        (N::I32(x), N::I32(y)) => {
            let r = match op {
                ArithOp::Inc => x.checked_add(y),
                ArithOp::Mul => x.checked_mul(y),
            };
            Some(r.map(N::I32).unwrap_or_else(|| {
                let (x, y) = (i64::from(x), i64::from(y));
                N::I64(match op {
                    ArithOp::Inc => x + y,
                    ArithOp::Mul => x * y,
                })
            }))
        }
        _ => {
            let (x, y) = (as_i64(a), as_i64(b));
            match op {
                ArithOp::Inc => x.checked_add(y),
                ArithOp::Mul => x.checked_mul(y),
            }
            .map(N::I64)
        }
    }
}

fn debug_num(n: N) -> String {
    match n {
        N::I32(i) => format!("(NumberInt){i}"),
        N::I64(i) => format!("(NumberLong){i}"),
        N::F(f) => format!("(NumberDouble){f}"),
        N::D(d) => format!("(NumberDecimal){d}"),
    }
}

/// The value `$inc`/`$mul` give a missing field: the argument, or a zero of its type.
pub fn arith_new(op: ArithOp, arg: &Bson) -> Result<Bson> {
    let Some(n) = to_n(arg)? else {
        return Ok(arg.clone());
    };
    Ok(match op {
        ArithOp::Inc => arg.clone(),
        ArithOp::Mul => from_n(compute(ArithOp::Mul, n, N::I32(0)).unwrap_or(N::I32(0))),
    })
}

pub fn arith_existing(
    op: ArithOp,
    arg: &Bson,
    v: &mut Bson,
    name: &str,
    env: &Env,
) -> Result<bool> {
    let Some(cur) = (if is_number(v) { to_n(v)? } else { None }) else {
        return Err(Error::type_mismatch(format!(
            "Cannot apply {} to a value of non-numeric type. {} has the field '{name}' of non-numeric type {}",
            op.modifier(),
            env.id_desc(),
            type_name(v)
        )));
    };
    let Some(a) = to_n(arg)? else {
        return Ok(false);
    };
    let Some(result) = compute(op, a, cur) else {
        return Err(Error::bad_value(format!(
            "Failed to apply {} operations to current value ({}) for document {}",
            op.modifier(),
            debug_num(cur),
            env.id_desc()
        )));
    };
    let new = from_n(result);
    if identical(v, &new) {
        return Ok(false);
    }
    *v = new;
    Ok(true)
}

pub fn compare_existing(kind: CmpKind, arg: &Bson, v: &mut Bson) -> bool {
    let want = match kind {
        CmpKind::Min => Ordering::Less,
        CmpKind::Max => Ordering::Greater,
    };
    if cmp_bson(arg, v) == want {
        *v = arg.clone();
        true
    } else {
        false
    }
}

const BIT_FORMAT: &str = "{$bit: {field: {and/or/xor: #}}";

pub fn parse_bit(arg: &Bson) -> Result<Op> {
    let Bson::Document(d) = arg else {
        return Err(Error::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {BIT_FORMAT}",
            type_name(arg)
        )));
    };
    if d.is_empty() {
        return Err(Error::bad_value(format!(
            "You must pass in at least one bitwise operation. The format is: {BIT_FORMAT}"
        )));
    }
    let mut ops = Vec::with_capacity(d.len());
    for (k, v) in d {
        let op = match k.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => {
                return Err(Error::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{k}' which is an unknown operator: {{{}}}",
                    elem(k, v)
                )))
            }
        };
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(Error::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                type_name(v),
                elem(k, v)
            )));
        }
        ops.push((op, v.clone()));
    }
    Ok(Op::Bit(ops))
}

/// Applies the bitwise operations in order; int32 with int32 stays int32.
pub fn bit_apply(start: &Bson, ops: &[(BitOp, Bson)]) -> Result<Bson> {
    let mut cur = start.clone();
    for (op, arg) in ops {
        cur = match (&cur, arg) {
            (Bson::Int32(a), Bson::Int32(b)) => Bson::Int32(bit32(*op, *a, *b)),
            (a, b) => {
                let (Some(a), Some(b)) = (int_of(a), int_of(b)) else {
                    return Err(Error::internal("$bit on a non-integer"));
                };
                Bson::Int64(bit64(*op, a, b))
            }
        };
    }
    Ok(cur)
}

fn int_of(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

fn bit32(op: BitOp, a: i32, b: i32) -> i32 {
    match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    }
}

fn bit64(op: BitOp, a: i64, b: i64) -> i64 {
    match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    }
}

pub fn bit_existing(ops: &[(BitOp, Bson)], v: &mut Bson, name: &str, env: &Env) -> Result<bool> {
    if int_of(v).is_none() {
        return Err(Error::new(
            ErrorCode::BadValue,
            format!(
                "Cannot apply $bit to a value of non-integral type.{} has the field {name} of non-integer type {}",
                env.id_desc(),
                type_name(v)
            ),
        ));
    }
    let new = bit_apply(v, ops)?;
    if identical(v, &new) {
        return Ok(false);
    }
    *v = new;
    Ok(true)
}
