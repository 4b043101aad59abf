//! `$bitsAllSet`, `$bitsAllClear`, `$bitsAnySet`, `$bitsAnyClear`.
//!
//! The mask is given as a non-negative integer, an array of bit positions, or BinData
//! (little-endian bytes). Candidates are integral numbers representable as int64 (two's
//! complement, sign-extended beyond bit 63) and BinData (bits beyond its length are 0).

use bson::{Bson, RawBsonRef};
use nidus_common::{Error, Result};
use nidus_doc::compare::{bson_num, raw_num};
use nidus_doc::number::Num;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitsOp {
    AllSet,
    AllClear,
    AnySet,
    AnyClear,
}

impl BitsOp {
    pub fn from_name(name: &str) -> Option<BitsOp> {
        match name {
            "$bitsAllSet" => Some(BitsOp::AllSet),
            "$bitsAllClear" => Some(BitsOp::AllClear),
            "$bitsAnySet" => Some(BitsOp::AnySet),
            "$bitsAnyClear" => Some(BitsOp::AnyClear),
            _ => None,
        }
    }
}

/// A bit test: the operator and the bit positions of the mask.
#[derive(Debug, Clone)]
pub struct BitTest {
    pub op: BitsOp,
    pub positions: Vec<u32>,
}

/// An integral number as i64, if it is one (doubles must be integral and in range).
fn integral(n: Num) -> Option<i64> {
    match n {
        Num::Int(i) => Some(i),
        other => {
            let f = other.to_f64();
            (f.is_finite()
                && f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f))
            .then_some(f as i64)
        }
    }
}

impl BitTest {
    pub fn parse(op_name: &str, op: BitsOp, arg: &Bson) -> Result<BitTest> {
        let positions = match arg {
            Bson::Binary(b) => bytes_positions(&b.bytes),
            Bson::Array(items) => items
                .iter()
                .map(|it| array_position(op_name, it))
                .collect::<Result<Vec<u32>>>()?,
            other => match bson_num(other) {
                Some(n) => number_positions(op_name, n, other)?,
                None => {
                    return Err(Error::bad_value(format!(
                    "{op_name} takes an Array, a number, or a BinData but received: {op_name}: {}",
                    super::parse::display(other)
                )))
                }
            },
        };
        Ok(BitTest { op, positions })
    }

    pub fn matches(&self, v: RawBsonRef) -> bool {
        let bit: Box<dyn Fn(u32) -> bool> = match v {
            RawBsonRef::Binary(b) => {
                let bytes = b.bytes;
                Box::new(move |p| {
                    bytes
                        .get((p / 8) as usize)
                        .is_some_and(|byte| byte & (1 << (p % 8)) != 0)
                })
            }
            other => match raw_num(other).and_then(integral) {
                Some(i) => Box::new(move |p| if p >= 64 { i < 0 } else { (i >> p) & 1 == 1 }),
                None => return false,
            },
        };
        let mut it = self.positions.iter();
        match self.op {
            BitsOp::AllSet => it.all(|p| bit(*p)),
            BitsOp::AllClear => it.all(|p| !bit(*p)),
            BitsOp::AnySet => it.any(|p| bit(*p)),
            BitsOp::AnyClear => it.any(|p| !bit(*p)),
        }
    }
}

fn bytes_positions(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        for bit in 0..8 {
            if b & (1 << bit) != 0 {
                out.push(i as u32 * 8 + bit);
            }
        }
    }
    out
}

fn number_positions(op_name: &str, n: Num, v: &Bson) -> Result<Vec<u32>> {
    let i = integral(n).ok_or_else(|| {
        Error::bad_value(format!(
            "{op_name} cannot take a non-integral or out-of-range number: {}",
            super::parse::display(v)
        ))
    })?;
    if i < 0 {
        return Err(Error::bad_value(format!(
            "{op_name} cannot take a negative number: {i}"
        )));
    }
    Ok((0..63).filter(|p| (i >> p) & 1 == 1).collect())
}

fn array_position(op_name: &str, v: &Bson) -> Result<u32> {
    let n = bson_num(v).ok_or_else(|| {
        Error::bad_value(format!(
            "bit positions must be an integer but got: {}",
            super::parse::display(v)
        ))
    })?;
    let i = integral(n).ok_or_else(|| {
        Error::bad_value(format!(
            "bit positions must be an integer but got: {}",
            super::parse::display(v)
        ))
    })?;
    if i < 0 {
        return Err(Error::bad_value(format!(
            "bit positions must be >= 0 but got: {}",
            super::parse::display(v)
        )));
    }
    u32::try_from(i).map_err(|_| {
        Error::bad_value(format!(
            "bit positions cannot be represented as a 32-bit signed integer in {op_name}: {i}"
        ))
    })
}
