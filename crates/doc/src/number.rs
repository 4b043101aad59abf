//! Numbers of the four BSON numeric types compared exactly by value.
//!
//! MongoDB orders int32, int64, double and decimal128 together by their mathematical value,
//! with NaN (of either floating type) equal to NaN and below every other number. Decimal128
//! is decoded from its IEEE 754-2008 BID bytes into `(sign, coefficient, exponent)`.

use std::cmp::Ordering;

/// A decoded decimal128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dec {
    NaN,
    Inf {
        neg: bool,
    },
    /// `(-1)^neg * coef * 10^exp`; `coef < 10^34`.
    Finite {
        neg: bool,
        coef: u128,
        exp: i32,
    },
}

/// Exponent bias of decimal128.
pub const DEC_BIAS: i32 = 6176;
/// The largest canonical coefficient plus one: 10^34.
pub const DEC_COEF_LIMIT: u128 = 10_000_000_000_000_000_000_000_000_000_000_000;

/// Decodes the 16 little-endian BSON bytes of a decimal128.
pub fn decode_decimal(bytes: [u8; 16]) -> Dec {
    let v = u128::from_le_bytes(bytes);
    let neg = (v >> 127) & 1 == 1;
    let comb = (v >> 122) & 0x1f;
    if comb == 0x1f {
        return Dec::NaN;
    }
    if comb == 0x1e {
        return Dec::Inf { neg };
    }
    let (exp_bits, coef) = if (v >> 125) & 0x3 == 0x3 {
        // Coefficient would be 0b100 << 111 | ..., always >= 10^34: non-canonical, i.e. zero.
        ((v >> 111) & 0x3fff, 0u128)
    } else {
        ((v >> 113) & 0x3fff, v & ((1u128 << 113) - 1))
    };
    let coef = if coef >= DEC_COEF_LIMIT { 0 } else { coef };
    Dec::Finite {
        neg,
        coef,
        exp: exp_bits as i32 - DEC_BIAS,
    }
}

/// Encodes a finite decimal (coefficient < 10^34, exponent within range) into BID bytes.
pub fn encode_decimal(d: Dec) -> [u8; 16] {
    let v: u128 = match d {
        Dec::NaN => 0x1f << 122,
        Dec::Inf { neg } => (u128::from(neg) << 127) | (0x1e << 122),
        Dec::Finite { neg, coef, exp } => {
            let e = (exp + DEC_BIAS).clamp(0, 0x2fff) as u128;
            (u128::from(neg) << 127) | (e << 113) | (coef & ((1u128 << 113) - 1))
        }
    };
    v.to_le_bytes()
}

/// A BSON number viewed for comparison.
#[derive(Debug, Clone, Copy)]
pub enum Num {
    Int(i64),
    Double(f64),
    Dec(Dec),
}

impl Num {
    pub fn is_nan(&self) -> bool {
        match self {
            Num::Int(_) => false,
            Num::Double(d) => d.is_nan(),
            Num::Dec(d) => matches!(d, Dec::NaN),
        }
    }

    /// -1, 0, 1 for finite or infinite non-NaN numbers (NaN gives 0; check `is_nan` first).
    fn signum(&self) -> i8 {
        match *self {
            Num::Int(i) => i.signum() as i8,
            Num::Double(d) => {
                if d > 0.0 {
                    1
                } else if d < 0.0 {
                    -1
                } else {
                    0
                }
            }
            Num::Dec(Dec::NaN) => 0,
            Num::Dec(Dec::Inf { neg }) => {
                if neg {
                    -1
                } else {
                    1
                }
            }
            Num::Dec(Dec::Finite { neg, coef, .. }) => match (coef, neg) {
                (0, _) => 0,
                (_, true) => -1,
                (_, false) => 1,
            },
        }
    }

    fn is_inf(&self) -> bool {
        match self {
            Num::Int(_) => false,
            Num::Double(d) => d.is_infinite(),
            Num::Dec(d) => matches!(d, Dec::Inf { .. }),
        }
    }

    /// Lossy conversion (used for `$mod`, bit tests, estimates).
    pub fn to_f64(&self) -> f64 {
        match *self {
            Num::Int(i) => i as f64,
            Num::Double(d) => d,
            Num::Dec(Dec::NaN) => f64::NAN,
            Num::Dec(Dec::Inf { neg }) => {
                if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            Num::Dec(Dec::Finite { neg, coef, exp }) => {
                let s = format!("{}{}e{}", if neg { "-" } else { "" }, coef, exp);
                s.parse().unwrap_or(f64::NAN)
            }
        }
    }
}

/// MongoDB's numeric total order: NaN == NaN < -inf < ... < +inf; -0 == 0.
pub fn cmp_num(a: Num, b: Num) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let (sa, sb) = (a.signum(), b.signum());
    if sa != sb {
        return sa.cmp(&sb);
    }
    if sa == 0 {
        return Ordering::Equal;
    }
    match (a.is_inf(), b.is_inf()) {
        (true, true) => return Ordering::Equal,
        (true, false) => {
            return if sa > 0 {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (false, true) => {
            return if sa > 0 {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        _ => {}
    }
    let mag = cmp_abs_finite(a, b);
    if sa > 0 {
        mag
    } else {
        mag.reverse()
    }
}

/// Compares |a| and |b| for finite, non-zero numbers of the same sign.
fn cmp_abs_finite(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.unsigned_abs().cmp(&y.unsigned_abs()),
        (Num::Double(x), Num::Double(y)) => {
            x.abs().partial_cmp(&y.abs()).unwrap_or(Ordering::Equal)
        }
        (Num::Int(x), Num::Double(y)) => cmp_u64_f64(x.unsigned_abs(), y.abs()),
        (Num::Double(x), Num::Int(y)) => cmp_u64_f64(y.unsigned_abs(), x.abs()).reverse(),
        _ => {
            let (ca, ea) = as_dec_or_double(a);
            let (cb, eb) = as_dec_or_double(b);
            match (ca, cb) {
                (Some(ca), Some(cb)) => cmp_dec_abs(ca, ea, cb, eb),
                (Some(ca), None) => cmp_dec_f64(ca, ea, b.to_f64().abs()),
                (None, Some(cb)) => cmp_dec_f64(cb, eb, a.to_f64().abs()).reverse(),
                (None, None) => Ordering::Equal,
            }
        }
    }
}

fn as_dec_or_double(n: Num) -> (Option<u128>, i32) {
    match n {
        Num::Int(i) => (Some(u128::from(i.unsigned_abs())), 0),
        Num::Dec(Dec::Finite { coef, exp, .. }) => (Some(coef), exp),
        _ => (None, 0),
    }
}

/// Exact comparison of an integer magnitude with a finite non-negative double.
fn cmp_u64_f64(x: u64, y: f64) -> Ordering {
    if y >= 18_446_744_073_709_551_616.0 {
        return Ordering::Less;
    }
    let t = y.trunc();
    let ti = t as u64; // exact: t < 2^64 and integral
    match x.cmp(&ti) {
        Ordering::Equal if y > t => Ordering::Less,
        o => o,
    }
}

fn digits(mut c: u128) -> i32 {
    let mut n = 0;
    while c > 0 {
        c /= 10;
        n += 1;
    }
    n
}

/// Compares `ca*10^ea` with `cb*10^eb`, both coefficients non-zero.
fn cmp_dec_abs(ca: u128, ea: i32, cb: u128, eb: i32) -> Ordering {
    let (aa, ab) = (digits(ca) + ea, digits(cb) + eb);
    if aa != ab {
        return aa.cmp(&ab);
    }
    // Same adjusted exponent: scaling the one with the larger exponent stays below 10^39.
    if ea >= eb {
        scale(ca, (ea - eb) as u32).cmp(&cb)
    } else {
        ca.cmp(&scale(cb, (eb - ea) as u32))
    }
}

fn scale(c: u128, k: u32) -> u128 {
    10u128
        .checked_pow(k)
        .and_then(|p| c.checked_mul(p))
        .unwrap_or(u128::MAX)
}

/// Exact comparison of `c*10^e` (c > 0) with a finite positive double.
fn cmp_dec_f64(c: u128, e: i32, d: f64) -> Ordering {
    let adj_dec = digits(c) - 1 + e; // c*10^e in [10^adj, 10^(adj+1))
    let adj_dbl = d.log10().floor() as i32;
    if adj_dec > adj_dbl + 1 {
        return Ordering::Greater;
    }
    if adj_dec + 1 < adj_dbl {
        return Ordering::Less;
    }
    let (m, e2) = decompose_f64(d);
    // c*5^e*2^e  vs  m*2^e2
    let mut left = Big::from_u128(c);
    let mut right = Big::from_u128(u128::from(m));
    let (mut lpow2, mut rpow2) = (e, e2);
    if e >= 0 {
        left.mul_pow5(e as u32);
    } else {
        right.mul_pow5((-e) as u32);
    }
    let min = lpow2.min(rpow2);
    lpow2 -= min;
    rpow2 -= min;
    left.shl(lpow2 as u32);
    right.shl(rpow2 as u32);
    left.cmp(&right)
}

/// `d = m * 2^e` exactly, for finite positive `d`.
fn decompose_f64(d: f64) -> (u64, i32) {
    let bits = d.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp - 1075)
    }
}

/// Minimal unsigned big integer (little-endian u32 limbs) for exact comparisons.
#[derive(Debug, Clone)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(v: u128) -> Big {
        let mut limbs = Vec::with_capacity(4);
        let mut v = v;
        while v > 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for l in self.0.iter_mut() {
            let p = u64::from(*l) * u64::from(m) + carry;
            *l = p as u32;
            carry = p >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow5(&mut self, mut k: u32) {
        while k >= 13 {
            self.mul_small(1_220_703_125); // 5^13
            k -= 13;
        }
        if k > 0 {
            self.mul_small(5u32.pow(k));
        }
    }

    fn shl(&mut self, bits: u32) {
        let (words, rem) = ((bits / 32) as usize, bits % 32);
        if rem > 0 {
            self.mul_small(1u32 << rem);
        }
        if words > 0 && !self.0.is_empty() {
            let mut v = vec![0u32; words];
            v.extend_from_slice(&self.0);
            self.0 = v;
        }
    }

    fn trimmed(&self) -> &[u32] {
        let mut n = self.0.len();
        while n > 0 && self.0[n - 1] == 0 {
            n -= 1;
        }
        &self.0[..n]
    }

    fn cmp(&self, other: &Big) -> Ordering {
        let (a, b) = (self.trimmed(), other.trimmed());
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Num {
        let d: bson::Decimal128 = s.parse().expect("decimal literal");
        Num::Dec(decode_decimal(d.bytes()))
    }

    #[test]
    fn decodes_decimal() {
        let d: bson::Decimal128 = "-1.25".parse().expect("lit");
        assert_eq!(
            decode_decimal(d.bytes()),
            Dec::Finite {
                neg: true,
                coef: 125,
                exp: -2
            }
        );
        assert_eq!(
            encode_decimal(decode_decimal(d.bytes())),
            d.bytes(),
            "round trip"
        );
    }

    #[test]
    fn mixed_order() {
        use Ordering::*;
        let cases = [
            (Num::Int(1), Num::Double(1.0), Equal),
            (Num::Int(1), dec("1.0"), Equal),
            (Num::Double(0.1), dec("0.1"), Greater),
            (Num::Double(0.5), dec("0.5"), Equal),
            (Num::Double(-0.0), Num::Int(0), Equal),
            (Num::Double(f64::NAN), dec("NaN"), Equal),
            (Num::Double(f64::NAN), Num::Double(f64::NEG_INFINITY), Less),
            (dec("-Infinity"), Num::Double(f64::NEG_INFINITY), Equal),
            (
                Num::Int(i64::MAX),
                Num::Double(9.223_372_036_854_776e18),
                Less,
            ),
            (
                Num::Int(i64::MIN),
                Num::Double(-9.223_372_036_854_776e18),
                Equal,
            ),
            (dec("1E+400"), Num::Double(f64::MAX), Greater),
            (dec("1E-400"), Num::Double(5e-324), Less),
            (
                dec("123456789012345678901234567890"),
                Num::Int(i64::MAX),
                Greater,
            ),
            (dec("2.5"), Num::Double(2.4999999999999996), Greater),
            (dec("10"), dec("1E+1"), Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(cmp_num(a, b), want, "{a:?} vs {b:?}");
            assert_eq!(cmp_num(b, a), want.reverse(), "{b:?} vs {a:?}");
        }
    }
}
