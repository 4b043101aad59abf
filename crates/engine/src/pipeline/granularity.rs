//! `$bucketAuto`'s `granularity`: rounding bucket boundaries up and down to a preferred
//! number series (Renard R5..R80, E6..E192, 1-2-5, scaled by powers of ten) or to powers of
//! two, as MongoDB's `GranularityRounder`s do. The arithmetic follows theirs operation for
//! operation (a series value times a power of ten reached by repeated multiplication or
//! division by ten), so the boundaries are the same doubles, down to their rounding errors.
//! Decimal128 values round in Decimal128; zero rounds to itself.

use bson::{Bson, Decimal128, Document};
use nidus_common::{Error, Result};
use nidus_expr::decimal;
use std::cmp::Ordering;

const R5: &[f64] = &[10.0, 16.0, 25.0, 40.0, 63.0];
const R10: &[f64] = &[
    100.0, 125.0, 160.0, 200.0, 250.0, 315.0, 400.0, 500.0, 630.0, 800.0,
];
const R20: &[f64] = &[
    100.0, 112.0, 125.0, 140.0, 160.0, 180.0, 200.0, 224.0, 250.0, 280.0, 315.0, 355.0, 400.0,
    450.0, 500.0, 560.0, 630.0, 710.0, 800.0, 900.0,
];
const R40: &[f64] = &[
    100.0, 106.0, 112.0, 118.0, 125.0, 132.0, 140.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0,
    212.0, 224.0, 236.0, 250.0, 265.0, 280.0, 300.0, 315.0, 355.0, 375.0, 400.0, 425.0, 450.0,
    475.0, 500.0, 530.0, 560.0, 600.0, 630.0, 670.0, 710.0, 750.0, 800.0, 850.0, 900.0, 950.0,
];
const R80: &[f64] = &[
    103.0, 109.0, 115.0, 122.0, 128.0, 136.0, 145.0, 155.0, 165.0, 175.0, 185.0, 195.0, 206.0,
    218.0, 230.0, 243.0, 258.0, 272.0, 290.0, 307.0, 325.0, 345.0, 365.0, 387.0, 412.0, 437.0,
    462.0, 487.0, 515.0, 545.0, 575.0, 615.0, 650.0, 690.0, 730.0, 775.0, 825.0, 875.0, 925.0,
    975.0,
];
const S125: &[f64] = &[10.0, 20.0, 50.0];
const E6: &[f64] = &[10.0, 15.0, 22.0, 33.0, 47.0, 68.0];
const E12: &[f64] = &[
    10.0, 12.0, 15.0, 18.0, 22.0, 27.0, 33.0, 39.0, 47.0, 56.0, 68.0, 82.0,
];
const E24: &[f64] = &[
    10.0, 11.0, 12.0, 13.0, 15.0, 16.0, 18.0, 20.0, 22.0, 24.0, 27.0, 30.0, 33.0, 36.0, 39.0, 43.0,
    47.0, 51.0, 56.0, 62.0, 68.0, 75.0, 82.0, 91.0,
];
const E48: &[f64] = &[
    100.0, 105.0, 110.0, 115.0, 121.0, 127.0, 133.0, 140.0, 147.0, 154.0, 162.0, 169.0, 178.0,
    187.0, 196.0, 205.0, 215.0, 226.0, 237.0, 249.0, 261.0, 274.0, 287.0, 301.0, 316.0, 332.0,
    348.0, 365.0, 383.0, 402.0, 422.0, 442.0, 464.0, 487.0, 511.0, 536.0, 562.0, 590.0, 619.0,
    649.0, 681.0, 715.0, 750.0, 787.0, 825.0, 866.0, 909.0, 953.0,
];
const E96: &[f64] = &[
    100.0, 102.0, 105.0, 107.0, 110.0, 113.0, 115.0, 118.0, 121.0, 124.0, 127.0, 130.0, 133.0,
    137.0, 140.0, 143.0, 147.0, 150.0, 154.0, 158.0, 162.0, 165.0, 169.0, 174.0, 178.0, 182.0,
    187.0, 191.0, 196.0, 200.0, 205.0, 210.0, 215.0, 221.0, 226.0, 232.0, 237.0, 243.0, 249.0,
    255.0, 261.0, 267.0, 274.0, 280.0, 287.0, 294.0, 301.0, 309.0, 316.0, 324.0, 332.0, 340.0,
    348.0, 357.0, 365.0, 374.0, 383.0, 392.0, 402.0, 412.0, 422.0, 432.0, 442.0, 453.0, 464.0,
    475.0, 487.0, 499.0, 511.0, 523.0, 536.0, 549.0, 562.0, 576.0, 590.0, 604.0, 619.0, 634.0,
    649.0, 665.0, 681.0, 698.0, 715.0, 732.0, 750.0, 768.0, 787.0, 806.0, 825.0, 845.0, 866.0,
    887.0, 909.0, 931.0, 953.0, 976.0,
];
const E192: &[f64] = &[
    100.0, 101.0, 102.0, 104.0, 105.0, 106.0, 107.0, 109.0, 110.0, 111.0, 113.0, 114.0, 115.0,
    117.0, 118.0, 120.0, 121.0, 123.0, 124.0, 126.0, 127.0, 129.0, 130.0, 132.0, 133.0, 135.0,
    137.0, 138.0, 140.0, 142.0, 143.0, 145.0, 147.0, 149.0, 150.0, 152.0, 154.0, 156.0, 158.0,
    160.0, 162.0, 164.0, 165.0, 167.0, 169.0, 172.0, 174.0, 176.0, 178.0, 180.0, 182.0, 184.0,
    187.0, 189.0, 191.0, 193.0, 196.0, 198.0, 200.0, 203.0, 205.0, 208.0, 210.0, 213.0, 215.0,
    218.0, 221.0, 223.0, 226.0, 229.0, 232.0, 234.0, 237.0, 240.0, 243.0, 246.0, 249.0, 252.0,
    255.0, 258.0, 261.0, 264.0, 267.0, 271.0, 274.0, 277.0, 280.0, 284.0, 287.0, 291.0, 294.0,
    298.0, 301.0, 305.0, 309.0, 312.0, 316.0, 320.0, 324.0, 328.0, 332.0, 336.0, 340.0, 344.0,
    348.0, 352.0, 357.0, 361.0, 365.0, 370.0, 374.0, 379.0, 383.0, 388.0, 392.0, 397.0, 402.0,
    407.0, 412.0, 417.0, 422.0, 427.0, 432.0, 437.0, 442.0, 448.0, 453.0, 459.0, 464.0, 470.0,
    475.0, 481.0, 487.0, 493.0, 499.0, 505.0, 511.0, 517.0, 523.0, 530.0, 536.0, 542.0, 549.0,
    556.0, 562.0, 569.0, 576.0, 583.0, 590.0, 597.0, 604.0, 612.0, 619.0, 626.0, 634.0, 642.0,
    649.0, 657.0, 665.0, 673.0, 681.0, 690.0, 698.0, 706.0, 715.0, 723.0, 732.0, 741.0, 750.0,
    759.0, 768.0, 777.0, 787.0, 796.0, 806.0, 816.0, 825.0, 835.0, 845.0, 856.0, 866.0, 876.0,
    887.0, 898.0, 909.0, 920.0, 931.0, 942.0, 953.0, 965.0, 976.0, 988.0,
];

const SERIES: &[(&str, &[f64])] = &[
    ("R5", R5),
    ("R10", R10),
    ("R20", R20),
    ("R40", R40),
    ("R80", R80),
    ("1-2-5", S125),
    ("E6", E6),
    ("E12", E12),
    ("E24", E24),
    ("E48", E48),
    ("E96", E96),
    ("E192", E192),
];

/// A `granularity`: a preferred number series by name, or `POWERSOF2`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Granularity {
    Series(&'static str, &'static [f64]),
    PowersOf2,
}

impl Granularity {
    /// Parses `granularity` with MongoDB's errors.
    pub fn parse(v: &Bson) -> Result<Granularity> {
        let Bson::String(name) = v else {
            return Err(Error::location(
                40261,
                format!(
                    "$bucketAuto 'granularity' field must be a string, but found type: {}",
                    super::type_name(v)
                ),
            ));
        };
        if name == "POWERSOF2" {
            return Ok(Granularity::PowersOf2);
        }
        SERIES
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, s)| Granularity::Series(n, s))
            .ok_or_else(|| Error::location(40257, format!("Unknown rounding granularity '{name}'")))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Granularity::Series(n, _) => n,
            Granularity::PowersOf2 => "POWERSOF2",
        }
    }

    /// The rounders refuse non-numbers, NaN and negative numbers (each rounder its codes).
    fn check(&self, v: &Bson) -> Result<f64> {
        let (not_number, nan, negative) = match self {
            Granularity::Series(..) => (40262, 40263, 40268),
            Granularity::PowersOf2 => (40265, 40266, 40267),
        };
        if !super::is_number(v) {
            return Err(Error::location(
                not_number,
                format!(
                    "A granularity rounder can only round numeric values, but found type: {}",
                    super::type_name(v)
                ),
            ));
        }
        let x = nidus_expr::value::to_f64(v);
        if x.is_nan() {
            return Err(Error::location(
                nan,
                "A granularity rounder cannot round NaN",
            ));
        }
        if x < 0.0 {
            return Err(Error::location(
                negative,
                "A granularity rounder can only round non-negative numbers",
            ));
        }
        Ok(x)
    }

    /// The smallest boundary of the granularity strictly greater than `v`.
    pub fn round_up(&self, v: &Bson) -> Result<Bson> {
        let x = self.check(v)?;
        if x == 0.0 {
            return Ok(v.clone());
        }
        Ok(match (self, v) {
            (Granularity::Series(_, s), Bson::Decimal128(d)) => {
                Bson::Decimal128(series_up_decimal(s, d))
            }
            (Granularity::Series(_, s), _) => Bson::Double(series_up(s, x)),
            (Granularity::PowersOf2, Bson::Double(d)) => {
                pow2(Exponent::Int(d.log2().floor() as i32 + 1))
            }
            (Granularity::PowersOf2, Bson::Decimal128(d)) => pow2(Exponent::Decimal(
                decimal::to_f64(d).log2().floor() as i32 + 1,
            )),
            (Granularity::PowersOf2, _) => {
                let n = nidus_expr::value::to_i64(v);
                pow2(Exponent::Int(63 - n.leading_zeros() as i32 + 1))
            }
        })
    }

    /// The largest boundary of the granularity strictly less than `v`.
    pub fn round_down(&self, v: &Bson) -> Result<Bson> {
        let x = self.check(v)?;
        if x == 0.0 {
            return Ok(v.clone());
        }
        Ok(match (self, v) {
            (Granularity::Series(_, s), Bson::Decimal128(d)) => {
                Bson::Decimal128(series_down_decimal(s, d))
            }
            (Granularity::Series(_, s), _) => Bson::Double(series_down(s, x)),
            (Granularity::PowersOf2, Bson::Double(d)) => {
                pow2(Exponent::Int(d.log2().ceil() as i32 - 1))
            }
            (Granularity::PowersOf2, Bson::Decimal128(d)) => pow2(Exponent::Decimal(
                decimal::to_f64(d).log2().ceil() as i32 - 1,
            )),
            (Granularity::PowersOf2, _) => {
                let n = nidus_expr::value::to_i64(v);
                let top = 63 - n.leading_zeros() as i32;
                pow2(Exponent::Int(if n.count_ones() == 1 {
                    top - 1
                } else {
                    top
                }))
            }
        })
    }
}

fn series_up(s: &[f64], x: f64) -> f64 {
    let (first, last) = (s[0], s[s.len() - 1]);
    let mut m = 1.0;
    while x >= last * m {
        m *= 10.0;
    }
    while x < first * m {
        let previous_min = first * m;
        m /= 10.0;
        if x >= last * m {
            return previous_min;
        }
    }
    s.iter().find(|v| x < **v * m).map_or(last * m, |v| v * m)
}

fn series_down(s: &[f64], x: f64) -> f64 {
    let (first, last) = (s[0], s[s.len() - 1]);
    let mut m = 1.0;
    while x <= first * m {
        m /= 10.0;
    }
    while x > last * m {
        let previous_max = last * m;
        m *= 10.0;
        if x <= first * m {
            return previous_max;
        }
    }
    let at = s.iter().position(|v| v * m >= x).unwrap_or(s.len());
    s[at.saturating_sub(1)] * m
}

fn dec(v: f64) -> Decimal128 {
    decimal::from_i64(v as i64)
}

fn lt(a: &Decimal128, b: &Decimal128) -> bool {
    decimal::cmp(a, b) == Ordering::Less
}

fn series_up_decimal(s: &[f64], x: &Decimal128) -> Decimal128 {
    let ten = decimal::from_i64(10);
    let series: Vec<Decimal128> = s.iter().map(|v| dec(*v)).collect();
    let (first, last) = (&series[0], &series[series.len() - 1]);
    let mut m = decimal::from_i64(1);
    while !lt(x, &decimal::mul(last, &m)) {
        m = decimal::mul(&m, &ten);
    }
    while lt(x, &decimal::mul(first, &m)) {
        let previous_min = decimal::mul(first, &m);
        m = decimal::div(&m, &ten);
        if !lt(x, &decimal::mul(last, &m)) {
            return previous_min;
        }
    }
    series
        .iter()
        .map(|v| decimal::mul(v, &m))
        .find(|v| lt(x, v))
        .unwrap_or_else(|| decimal::mul(last, &m))
}

fn series_down_decimal(s: &[f64], x: &Decimal128) -> Decimal128 {
    let ten = decimal::from_i64(10);
    let series: Vec<Decimal128> = s.iter().map(|v| dec(*v)).collect();
    let (first, last) = (&series[0], &series[series.len() - 1]);
    let mut m = decimal::from_i64(1);
    while !lt(&decimal::mul(first, &m), x) {
        m = decimal::div(&m, &ten);
    }
    while lt(&decimal::mul(last, &m), x) {
        let previous_max = decimal::mul(last, &m);
        m = decimal::mul(&m, &ten);
        if !lt(&decimal::mul(first, &m), x) {
            return previous_max;
        }
    }
    let scaled: Vec<Decimal128> = series.iter().map(|v| decimal::mul(v, &m)).collect();
    let at = scaled
        .iter()
        .position(|v| !lt(v, x))
        .unwrap_or(scaled.len());
    scaled[at.saturating_sub(1)]
}

/// The exponent of a power of two, as MongoDB passes it to `$pow` (an int, or a Decimal128
/// for a Decimal128 input).
enum Exponent {
    Int(i32),
    Decimal(i32),
}

/// `{$pow: [2, exp]}` evaluated as MongoDB's POWERSOF2 rounder does: an int while it fits,
/// else a long, a double for a negative exponent, a Decimal128 for a Decimal128 exponent.
fn pow2(exp: Exponent) -> Bson {
    let exp = match exp {
        Exponent::Int(e) => Bson::Int32(e),
        Exponent::Decimal(e) => Bson::Decimal128(decimal::from_i64(i64::from(e))),
    };
    let expr = bson::doc! {"$pow": [2, exp]};
    nidus_expr::Expression::parse(&Bson::Document(expr), &nidus_expr::ParseContext::new())
        .and_then(|e| e.evaluate(&mut nidus_expr::Variables::for_doc(&Document::new())))
        .ok()
        .flatten()
        .unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nidus_common::ErrorCode;

    #[test]
    fn series_rounding_as_mongodb_computes_it() {
        let e6 = Granularity::parse(&Bson::String("E6".into())).unwrap();
        let up = |v: f64| e6.round_up(&Bson::Double(v)).unwrap();
        let down = |v: f64| e6.round_down(&Bson::Double(v)).unwrap();
        assert_eq!(up(0.8), Bson::Double(1.0));
        assert_eq!(down(0.8), Bson::Double(0.68));
        assert_eq!(up(15.0), Bson::Double(22.0));
        assert_eq!(down(15.0), Bson::Double(10.0));
        assert_eq!(up(100.0), Bson::Double(150.0));
        assert_eq!(down(100.0), Bson::Double(68.0));
        assert_eq!(e6.round_up(&Bson::Int32(0)).unwrap(), Bson::Int32(0));
        let p2 = Granularity::PowersOf2;
        assert_eq!(p2.round_up(&Bson::Int32(4)).unwrap(), Bson::Int32(8));
        assert_eq!(p2.round_down(&Bson::Int32(4)).unwrap(), Bson::Int32(2));
        assert_eq!(p2.round_down(&Bson::Int32(5)).unwrap(), Bson::Int32(4));
        assert_eq!(p2.round_up(&Bson::Double(0.3)).unwrap(), Bson::Double(0.5));
        assert_eq!(
            e6.round_up(&Bson::Int32(-1)).unwrap_err().code,
            ErrorCode::Location(40268)
        );
    }
}
