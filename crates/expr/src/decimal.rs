//! Decimal128 arithmetic (IEEE 754-2008 decimal, 34 significant digits, round half to even),
//! enough for the expression language: add, subtract, multiply, divide, remainder, quantize
//! and conversions. Values are decoded with [`nidus_doc::number::decode_decimal`]; exact
//! intermediate results use a small unsigned big integer.

use bson::Decimal128;
use nidus_doc::number::{cmp_num, decode_decimal, encode_decimal, Dec, Num};
use std::cmp::Ordering;

const MAX_DIGITS: u32 = 34;
const EXP_MAX: i32 = 6111;
const EXP_MIN: i32 = -6176;

/// Rounding modes of quantize and conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    HalfEven,
    TowardZero,
    Up,   // toward +infinity
    Down, // toward -infinity
}

pub fn decode(d: &Decimal128) -> Dec {
    decode_decimal(d.bytes())
}

pub fn encode(d: Dec) -> Decimal128 {
    Decimal128::from_bytes(encode_decimal(d))
}

pub fn nan() -> Decimal128 {
    encode(Dec::NaN)
}

pub fn is_zero(d: &Decimal128) -> bool {
    matches!(decode(d), Dec::Finite { coef: 0, .. })
}

pub fn is_nan(d: &Decimal128) -> bool {
    matches!(decode(d), Dec::NaN)
}

pub fn is_infinite(d: &Decimal128) -> bool {
    matches!(decode(d), Dec::Inf { .. })
}

pub fn is_negative(d: &Decimal128) -> bool {
    matches!(
        decode(d),
        Dec::Inf { neg: true }
            | Dec::Finite {
                neg: true,
                coef: 1..,
                ..
            }
    )
}

pub fn cmp(a: &Decimal128, b: &Decimal128) -> Ordering {
    cmp_num(Num::Dec(decode(a)), Num::Dec(decode(b)))
}

pub fn to_f64(d: &Decimal128) -> f64 {
    Num::Dec(decode(d)).to_f64()
}

pub fn from_i64(i: i64) -> Decimal128 {
    encode(Dec::Finite {
        neg: i < 0,
        coef: u128::from(i.unsigned_abs()),
        exp: 0,
    })
}

/// A double rounded to `digits` significant digits (MongoDB uses 15 for conversions and 34
/// when widening a sum).
pub fn from_f64(d: f64, digits: usize) -> Decimal128 {
    if d.is_nan() {
        return nan();
    }
    if d.is_infinite() {
        return encode(Dec::Inf { neg: d < 0.0 });
    }
    if d == 0.0 {
        return encode(Dec::Finite {
            neg: d.is_sign_negative(),
            coef: 0,
            exp: 0,
        });
    }
    let s = format!("{:.*e}", digits.saturating_sub(1), d);
    parse_sci(&s).map_or_else(nan, encode)
}

/// Parses Rust's `{:e}` output (`-1.2345e-7`) into a decimal keeping all digits.
fn parse_sci(s: &str) -> Option<Dec> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (mant, e) = s.split_once('e')?;
    let e: i32 = e.parse().ok()?;
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits = format!("{int}{frac}");
    let coef: u128 = digits.parse().ok()?;
    Some(Dec::Finite {
        neg,
        coef,
        exp: e - frac.len() as i32,
    })
}

/// The value truncated toward zero, if it fits an i64.
pub fn to_i64_trunc(d: &Decimal128) -> Option<i64> {
    to_i64_rounded(d, Rounding::TowardZero)
}

/// The value when it is an integer that fits an i64.
pub fn to_i64_exact(d: &Decimal128) -> Option<i64> {
    match decode(d) {
        Dec::Finite { neg, coef, exp } => {
            let (q, r) = if exp >= 0 {
                (Big::from_u128(coef).mul_pow10(exp as u32), Big::zero())
            } else {
                Big::from_u128(coef).divrem(&Big::pow10((-exp) as u32))
            };
            if !r.is_zero() {
                return None;
            }
            big_to_i64(&q, neg)
        }
        _ => None,
    }
}

/// Rounds to an integer with the given mode, if it fits an i64.
pub fn to_i64_rounded(d: &Decimal128, mode: Rounding) -> Option<i64> {
    let q = quantize_dec(decode(d), 0, mode)?;
    match q {
        Dec::Finite { neg, coef, exp: 0 } => big_to_i64(&Big::from_u128(coef), neg),
        Dec::Finite { neg, coef, exp } if exp > 0 => {
            big_to_i64(&Big::from_u128(coef).mul_pow10(exp as u32), neg)
        }
        _ => None,
    }
}

fn big_to_i64(b: &Big, neg: bool) -> Option<i64> {
    let v = b.to_u128()?;
    if neg {
        if v <= 1u128 << 63 {
            Some((v as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(v).ok()
    }
}

pub fn negate(d: &Decimal128) -> Decimal128 {
    match decode(d) {
        Dec::NaN => nan(),
        Dec::Inf { neg } => encode(Dec::Inf { neg: !neg }),
        Dec::Finite { neg, coef, exp } => encode(Dec::Finite {
            neg: !neg,
            coef,
            exp,
        }),
    }
}

pub fn abs(d: &Decimal128) -> Decimal128 {
    match decode(d) {
        Dec::NaN => nan(),
        Dec::Inf { .. } => encode(Dec::Inf { neg: false }),
        Dec::Finite { coef, exp, .. } => encode(Dec::Finite {
            neg: false,
            coef,
            exp,
        }),
    }
}

pub fn add(a: &Decimal128, b: &Decimal128) -> Decimal128 {
    encode(add_dec(decode(a), decode(b)))
}

pub fn sub(a: &Decimal128, b: &Decimal128) -> Decimal128 {
    add(a, &negate(b))
}

fn add_dec(a: Dec, b: Dec) -> Dec {
    match (a, b) {
        (Dec::NaN, _) | (_, Dec::NaN) => Dec::NaN,
        (Dec::Inf { neg: x }, Dec::Inf { neg: y }) => {
            if x == y {
                Dec::Inf { neg: x }
            } else {
                Dec::NaN
            }
        }
        (Dec::Inf { neg }, _) | (_, Dec::Inf { neg }) => Dec::Inf { neg },
        (
            Dec::Finite {
                neg: na,
                coef: ca,
                exp: ea,
            },
            Dec::Finite {
                neg: nb,
                coef: cb,
                exp: eb,
            },
        ) => {
            if ca == 0 && cb == 0 {
                return Dec::Finite {
                    neg: na && nb,
                    coef: 0,
                    exp: ea.min(eb),
                };
            }
            if ca == 0 {
                return zero_plus(nb, cb, eb, ea);
            }
            if cb == 0 {
                return zero_plus(na, ca, ea, eb);
            }
            // Align exponents. When they are far apart, the smaller operand only decides the
            // rounding: replace it by a tiny "sticky" amount below the 36th digit.
            let (hi, lo) = if ea >= eb {
                ((na, ca, ea), (nb, cb, eb))
            } else {
                ((nb, cb, eb), (na, ca, ea))
            };
            let lo_top = digits_u128(lo.1) as i32 + lo.2; // exclusive top power of ten
            let (lo_neg, lo_coef, lo_exp) = if lo_top < hi.2 - 37 {
                // |lo| only makes the result inexact: any amount this far below the last kept
                // digit rounds the same way, so use a small one.
                (lo.0, 1u128, hi.2 - 40)
            } else {
                (lo.0, lo.1, lo.2)
            };
            let e = hi.2.min(lo_exp);
            let a_big = Big::from_u128(hi.1).mul_pow10((hi.2 - e) as u32);
            let b_big = Big::from_u128(lo_coef).mul_pow10((lo_exp - e) as u32);
            let (neg, mag) = if hi.0 == lo_neg {
                (hi.0, a_big.add(&b_big))
            } else {
                match a_big.cmp(&b_big) {
                    Ordering::Greater => (hi.0, a_big.sub(&b_big)),
                    Ordering::Less => (lo_neg, b_big.sub(&a_big)),
                    Ordering::Equal => {
                        return Dec::Finite {
                            neg: false,
                            coef: 0,
                            exp: ea.min(eb),
                        }
                    }
                }
            };
            round_big(neg, mag, e, false)
        }
    }
}

pub fn mul(a: &Decimal128, b: &Decimal128) -> Decimal128 {
    encode(match (decode(a), decode(b)) {
        (Dec::NaN, _) | (_, Dec::NaN) => Dec::NaN,
        (Dec::Inf { neg: x }, Dec::Finite { coef: 0, .. })
        | (Dec::Finite { coef: 0, .. }, Dec::Inf { neg: x }) => {
            let _ = x;
            Dec::NaN
        }
        (Dec::Inf { neg: x }, Dec::Inf { neg: y }) => Dec::Inf { neg: x != y },
        (Dec::Inf { neg: x }, Dec::Finite { neg: y, .. })
        | (Dec::Finite { neg: y, .. }, Dec::Inf { neg: x }) => Dec::Inf { neg: x != y },
        (
            Dec::Finite {
                neg: na,
                coef: ca,
                exp: ea,
            },
            Dec::Finite {
                neg: nb,
                coef: cb,
                exp: eb,
            },
        ) => {
            let p = Big::from_u128(ca).mul(&Big::from_u128(cb));
            round_big(na != nb, p, ea + eb, false)
        }
    })
}

/// Division; `None` when dividing a finite number by zero (the caller reports the error).
pub fn div(a: &Decimal128, b: &Decimal128) -> Decimal128 {
    encode(match (decode(a), decode(b)) {
        (Dec::NaN, _) | (_, Dec::NaN) => Dec::NaN,
        (Dec::Inf { .. }, Dec::Inf { .. }) => Dec::NaN,
        (Dec::Inf { neg: x }, Dec::Finite { neg: y, .. }) => Dec::Inf { neg: x != y },
        (Dec::Finite { neg: x, exp, .. }, Dec::Inf { neg: y }) => Dec::Finite {
            neg: x != y,
            coef: 0,
            exp: exp.min(EXP_MIN),
        },
        (Dec::Finite { coef: 0, .. }, Dec::Finite { coef: 0, .. }) => Dec::NaN,
        (
            Dec::Finite { neg: x, .. },
            Dec::Finite {
                neg: y, coef: 0, ..
            },
        ) => Dec::Inf { neg: x != y },
        (
            Dec::Finite {
                neg: na,
                coef: ca,
                exp: ea,
            },
            Dec::Finite {
                neg: nb,
                coef: cb,
                exp: eb,
            },
        ) => {
            let neg = na != nb;
            let preferred = ea - eb;
            if ca == 0 {
                return encode(Dec::Finite {
                    neg,
                    coef: 0,
                    exp: preferred.clamp(EXP_MIN, EXP_MAX),
                });
            }
            // Scale the dividend so the quotient has at least 35 digits.
            let k = (MAX_DIGITS as i32 + 1 + digits_u128(cb) as i32 - digits_u128(ca) as i32).max(0)
                as u32;
            let num = Big::from_u128(ca).mul_pow10(k);
            let (q, r) = num.divrem(&Big::from_u128(cb));
            let exp = preferred - k as i32;
            if r.is_zero() {
                // Exact: strip trailing zeros toward the preferred exponent.
                let mut q = q;
                let mut exp = exp;
                while exp < preferred {
                    let (q2, r2) = q.divrem_small(10);
                    if r2 != 0 {
                        break;
                    }
                    q = q2;
                    exp += 1;
                }
                round_big(neg, q, exp, false)
            } else {
                round_big(neg, q, exp, true)
            }
        }
    })
}

/// Remainder with the sign of the dividend (C's `fmod`, MongoDB's `$mod` on decimals).
pub fn rem(a: &Decimal128, b: &Decimal128) -> Decimal128 {
    encode(match (decode(a), decode(b)) {
        (Dec::NaN, _) | (_, Dec::NaN) | (Dec::Inf { .. }, _) => Dec::NaN,
        (_, Dec::Finite { coef: 0, .. }) => Dec::NaN,
        (a @ Dec::Finite { .. }, Dec::Inf { .. }) => a,
        (
            Dec::Finite {
                neg: na,
                coef: ca,
                exp: ea,
            },
            Dec::Finite {
                coef: cb, exp: eb, ..
            },
        ) => {
            let e = ea.min(eb);
            let r = if ea >= eb {
                // (ca * 10^(ea-eb)) mod cb, with modular exponentiation of 10.
                let m = Big::from_u128(cb);
                let p = pow10_mod(((ea - eb) as u32).min(20000), &m);
                Big::from_u128(ca).mul(&p).divrem(&m).1
            } else {
                let d = (eb - ea) as u32;
                if d > 40 {
                    Big::from_u128(ca)
                } else {
                    Big::from_u128(ca)
                        .divrem(&Big::from_u128(cb).mul_pow10(d))
                        .1
                }
            };
            round_big(na, r, e, false)
        }
    })
}

fn pow10_mod(mut k: u32, m: &Big) -> Big {
    let mut result = Big::from_u128(1).divrem(m).1;
    let mut base = Big::from_u128(10).divrem(m).1;
    while k > 0 {
        if k & 1 == 1 {
            result = result.mul(&base).divrem(m).1;
        }
        base = base.mul(&base).divrem(m).1;
        k >>= 1;
    }
    result
}

/// Rounds to exponent `target` with the given mode (`quantize` with a quantum of
/// 10^target). `None` when the result needs more than 34 digits (MongoDB's invalid flag).
pub fn quantize(d: &Decimal128, target: i32, mode: Rounding) -> Option<Decimal128> {
    quantize_dec(decode(d), target, mode).map(encode)
}

fn quantize_dec(d: Dec, target: i32, mode: Rounding) -> Option<Dec> {
    match d {
        Dec::Finite { neg, coef, exp } => {
            if exp >= target {
                let c = Big::from_u128(coef).mul_pow10((exp - target).min(100) as u32);
                let c = c.to_u128().filter(|c| digits_u128(*c) <= MAX_DIGITS)?;
                Some(Dec::Finite {
                    neg,
                    coef: c,
                    exp: target,
                })
            } else {
                let shift = (target - exp) as u32;
                let (q, r) = if shift > 40 {
                    (Big::zero(), Big::from_u128(coef))
                } else {
                    Big::from_u128(coef).divrem(&Big::pow10(shift))
                };
                let half_cmp = if shift > 40 {
                    Ordering::Less
                } else {
                    r.mul_small(2).cmp(&Big::pow10(shift))
                };
                let q = apply_rounding(q, !r.is_zero(), half_cmp, neg, mode);
                let c = q.to_u128().filter(|c| digits_u128(*c) <= MAX_DIGITS)?;
                Some(Dec::Finite {
                    neg,
                    coef: c,
                    exp: target,
                })
            }
        }
        other => Some(other),
    }
}

/// Adjusts a truncated quotient `q` for the discarded part (`inexact`, and how it compares
/// with one half).
fn apply_rounding(q: Big, inexact: bool, half: Ordering, neg: bool, mode: Rounding) -> Big {
    if !inexact {
        return q;
    }
    let up = match mode {
        Rounding::TowardZero => false,
        Rounding::Up => !neg,
        Rounding::Down => neg,
        Rounding::HalfEven => match half {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => q.is_odd(),
        },
    };
    if up {
        q.add(&Big::from_u128(1))
    } else {
        q
    }
}

/// Rounds `mag * 10^exp` to 34 digits (half even) and into the exponent range.
/// `sticky` says that a non-zero amount below `mag`'s last digit was already discarded.
fn round_big(neg: bool, mag: Big, exp: i32, sticky: bool) -> Dec {
    let nd = mag.digits();
    let mut drop = nd.saturating_sub(MAX_DIGITS) as i32;
    if exp + drop < EXP_MIN {
        drop = EXP_MIN - exp;
    }
    if drop <= 0 {
        // Any discarded remainder (sticky) is below half of the last digit.
        return finish(neg, mag, exp);
    }
    let drop = drop as u32;
    let p = Big::pow10(drop.min(7000));
    let (q, r) = mag.divrem(&p);
    let half = r.mul_small(2).cmp(&p);
    let half = if half == Ordering::Equal && sticky {
        Ordering::Greater
    } else {
        half
    };
    let q = apply_rounding(q, !r.is_zero() || sticky, half, neg, Rounding::HalfEven);
    // Rounding up may have produced 35 digits (999..9 + 1).
    if q.digits() > MAX_DIGITS {
        let (q2, _) = q.divrem_small(10);
        return finish(neg, q2, exp + drop as i32 + 1);
    }
    finish(neg, q, exp + drop as i32)
}

/// `0E<zero_exp> + coef*10^exp`: the non-zero operand, with its exponent lowered toward the
/// zero's exponent as far as 34 digits allow (IEEE's preferred exponent is the smaller one).
fn zero_plus(neg: bool, coef: u128, exp: i32, zero_exp: i32) -> Dec {
    let (mut c, mut e) = (coef, exp);
    while e > zero_exp && digits_u128(c) < MAX_DIGITS {
        c *= 10;
        e -= 1;
    }
    Dec::Finite {
        neg,
        coef: c,
        exp: e,
    }
}

/// Clamps the exponent into range (overflow → infinity; large exponents are folded into the
/// coefficient when it has room).
fn finish(neg: bool, mag: Big, exp: i32) -> Dec {
    let Some(mut coef) = mag.to_u128() else {
        return Dec::Inf { neg };
    };
    let mut exp = exp;
    if coef == 0 {
        return Dec::Finite {
            neg,
            coef: 0,
            exp: exp.clamp(EXP_MIN, EXP_MAX),
        };
    }
    while exp > EXP_MAX {
        if digits_u128(coef) >= MAX_DIGITS {
            return Dec::Inf { neg };
        }
        coef *= 10;
        exp -= 1;
    }
    if exp < EXP_MIN {
        return Dec::Finite {
            neg,
            coef: 0,
            exp: EXP_MIN,
        };
    }
    Dec::Finite { neg, coef, exp }
}

fn digits_u128(mut c: u128) -> u32 {
    let mut n = 0;
    while c > 0 {
        c /= 10;
        n += 1;
    }
    n
}

/// Minimal unsigned big integer, little-endian u32 limbs, no leading zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(Vec::new())
    }

    fn from_u128(mut v: u128) -> Big {
        let mut l = Vec::new();
        while v > 0 {
            l.push(v as u32);
            v >>= 32;
        }
        Big(l)
    }

    fn pow10(k: u32) -> Big {
        Big::from_u128(1).mul_pow10(k)
    }

    fn trim(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn is_odd(&self) -> bool {
        self.0.first().is_some_and(|l| l & 1 == 1)
    }

    fn to_u128(&self) -> Option<u128> {
        if self.0.len() > 4 {
            return None;
        }
        let mut v = 0u128;
        for (i, l) in self.0.iter().enumerate() {
            v |= u128::from(*l) << (32 * i);
        }
        Some(v)
    }

    fn mul_small(&self, m: u32) -> Big {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let mut carry = 0u64;
        for l in &self.0 {
            let p = u64::from(*l) * u64::from(m) + carry;
            out.push(p as u32);
            carry = p >> 32;
        }
        if carry > 0 {
            out.push(carry as u32);
        }
        Big(out).trim()
    }

    fn mul_pow10(self, mut k: u32) -> Big {
        let mut b = self;
        while k >= 9 {
            b = b.mul_small(1_000_000_000);
            k -= 9;
        }
        if k > 0 {
            b = b.mul_small(10u32.pow(k));
        }
        b
    }

    fn mul(&self, o: &Big) -> Big {
        if self.is_zero() || o.is_zero() {
            return Big::zero();
        }
        let mut out = vec![0u32; self.0.len() + o.0.len()];
        for (i, a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, b) in o.0.iter().enumerate() {
                let cur = u64::from(out[i + j]) + u64::from(*a) * u64::from(*b) + carry;
                out[i + j] = cur as u32;
                carry = cur >> 32;
            }
            let mut k = i + o.0.len();
            while carry > 0 {
                let cur = u64::from(out[k]) + carry;
                out[k] = cur as u32;
                carry = cur >> 32;
                k += 1;
            }
        }
        Big(out).trim()
    }

    fn add(&self, o: &Big) -> Big {
        let n = self.0.len().max(o.0.len());
        let mut out = Vec::with_capacity(n + 1);
        let mut carry = 0u64;
        for i in 0..n {
            let s = u64::from(*self.0.get(i).unwrap_or(&0))
                + u64::from(*o.0.get(i).unwrap_or(&0))
                + carry;
            out.push(s as u32);
            carry = s >> 32;
        }
        if carry > 0 {
            out.push(carry as u32);
        }
        Big(out).trim()
    }

    /// `self - o`, requires `self >= o`.
    fn sub(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let mut d = i64::from(self.0[i]) - i64::from(*o.0.get(i).unwrap_or(&0)) - borrow;
            if d < 0 {
                d += 1 << 32;
                borrow = 1;
            } else {
                borrow = 0;
            }
            out.push(d as u32);
        }
        Big(out).trim()
    }

    fn cmp(&self, o: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }

    fn bits(&self) -> usize {
        match self.0.last() {
            None => 0,
            Some(top) => (self.0.len() - 1) * 32 + (32 - top.leading_zeros() as usize),
        }
    }

    fn bit(&self, i: usize) -> bool {
        self.0.get(i / 32).is_some_and(|l| (l >> (i % 32)) & 1 == 1)
    }

    fn shl1_or(&self, bit: bool) -> Big {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let mut carry = u32::from(bit);
        for l in &self.0 {
            out.push((l << 1) | carry);
            carry = l >> 31;
        }
        if carry > 0 {
            out.push(carry);
        }
        Big(out).trim()
    }

    fn divrem_small(&self, d: u32) -> (Big, u32) {
        let mut out = vec![0u32; self.0.len()];
        let mut rem = 0u64;
        for i in (0..self.0.len()).rev() {
            let cur = (rem << 32) | u64::from(self.0[i]);
            out[i] = (cur / u64::from(d)) as u32;
            rem = cur % u64::from(d);
        }
        (Big(out).trim(), rem as u32)
    }

    /// Binary long division. `d` must be non-zero.
    fn divrem(&self, d: &Big) -> (Big, Big) {
        if d.0.len() == 1 {
            let (q, r) = self.divrem_small(d.0[0]);
            return (q, Big::from_u128(u128::from(r)));
        }
        if self.cmp(d) == Ordering::Less {
            return (Big::zero(), self.clone());
        }
        let n = self.bits();
        let mut q = vec![0u32; self.0.len()];
        let mut r = Big::zero();
        for i in (0..n).rev() {
            r = r.shl1_or(self.bit(i));
            if r.cmp(d) != Ordering::Less {
                r = r.sub(d);
                q[i / 32] |= 1 << (i % 32);
            }
        }
        (Big(q).trim(), r)
    }

    /// Number of decimal digits (0 for zero).
    fn digits(&self) -> u32 {
        if self.is_zero() {
            return 0;
        }
        // Estimate from the bit length, then correct.
        let est = ((self.bits() as f64 - 1.0) * std::f64::consts::LOG10_2).floor() as u32;
        let mut n = est.max(1);
        while Big::pow10(n).cmp(self) != Ordering::Greater {
            n += 1;
        }
        while n > 1 && Big::pow10(n - 1).cmp(self) == Ordering::Greater {
            n -= 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal128 {
        s.parse().expect("decimal literal")
    }

    #[test]
    fn arithmetic() {
        type Op = fn(&Decimal128, &Decimal128) -> Decimal128;
        let cases: &[(&str, &str, Op, &str)] = &[
            ("1.5", "2.25", add, "3.75"),
            ("1", "-1", add, "0"),
            ("0.1", "0.2", add, "0.3"),
            (
                "9999999999999999999999999999999999",
                "1",
                add,
                "1.000000000000000000000000000000000E+34",
            ),
            (
                "1E+100",
                "1",
                add,
                "1.000000000000000000000000000000000E+100",
            ),
            ("5", "3", sub, "2"),
            ("1.5", "2", mul, "3.0"),
            ("1", "4", div, "0.25"),
            ("10", "2", div, "5"),
            ("1", "3", div, "0.3333333333333333333333333333333333"),
            ("2", "3", div, "0.6666666666666666666666666666666667"),
            ("7", "3", rem, "1"),
            ("-7", "3", rem, "-1"),
            ("7.5", "2", rem, "1.5"),
            ("0.00", "5", add, "5.00"),
            (
                "0E-6176",
                "1E+6111",
                add,
                "1.000000000000000000000000000000000E+6111",
            ),
        ];
        for (a, b, f, want) in cases {
            assert_eq!(f(&d(a), &d(b)).to_string(), *want, "{a} op {b}");
        }
    }

    #[test]
    fn conversions() {
        assert_eq!(from_f64(0.1, 15).to_string(), "0.100000000000000");
        assert_eq!(from_f64(1.0, 15).to_string(), "1.00000000000000");
        assert_eq!(to_i64_exact(&d("42.000")), Some(42));
        assert_eq!(to_i64_exact(&d("42.5")), None);
        assert_eq!(to_i64_rounded(&d("2.5"), Rounding::HalfEven), Some(2));
        assert_eq!(to_i64_rounded(&d("-2.5"), Rounding::Down), Some(-3));
        assert_eq!(
            quantize(&d("1.2345"), -2, Rounding::HalfEven).map(|x| x.to_string()),
            Some("1.23".to_string())
        );
        assert_eq!(
            quantize(&d("1.5"), 0, Rounding::Up).map(|x| x.to_string()),
            Some("2".to_string())
        );
    }
}
