//! `$sum`, `$avg` (and `$count`, which is `$sum: 1`).
//!
//! Integers are summed exactly, doubles with compensated (Neumaier) summation, decimals
//! separately; the result has the widest type seen, an int total that no longer fits becomes
//! a long, a long total that overflows becomes a double (MongoDB's `AccumulatorSum`).

use super::Accumulator;
use crate::decimal;
use crate::value::{int_or_long, num_type, NumType, Value};
use bson::{Bson, Decimal128, Document};
use nidus_common::Result;

/// The running sum shared by `$sum` and `$avg`.
#[derive(Debug, Clone)]
pub(crate) struct Total {
    int: i128,
    dbl: f64,
    comp: f64,
    dec: Option<Decimal128>,
    ty: NumType,
    pub(crate) count: i64,
}

impl Total {
    pub(crate) fn new() -> Total {
        Total {
            int: 0,
            dbl: 0.0,
            comp: 0.0,
            dec: None,
            ty: NumType::Int,
            count: 0,
        }
    }

    fn add_double(&mut self, x: f64) {
        let t = self.dbl + x;
        if self.dbl.abs() >= x.abs() {
            self.comp += (self.dbl - t) + x;
        } else {
            self.comp += (x - t) + self.dbl;
        }
        self.dbl = t;
    }

    /// Adds a value; non-numbers are ignored. Returns whether it was a number.
    pub(crate) fn add(&mut self, v: &Bson) -> bool {
        let Some(t) = num_type(v) else {
            return false;
        };
        self.ty = self.ty.max(t);
        self.count += 1;
        match v {
            Bson::Int32(i) => self.int += i128::from(*i),
            Bson::Int64(i) => self.int += i128::from(*i),
            Bson::Double(d) => self.add_double(*d),
            Bson::Decimal128(d) => {
                self.dec = Some(match &self.dec {
                    Some(acc) => decimal::add(acc, d),
                    None => *d,
                })
            }
            _ => {}
        }
        true
    }

    /// Adds another running sum's exact state (its integers exactly, its double sum with
    /// its compensation).
    fn absorb(&mut self, o: &Total) {
        self.ty = self.ty.max(o.ty);
        self.count += o.count;
        self.int += o.int;
        self.add_double(o.dbl);
        self.comp += o.comp;
        if let Some(d) = &o.dec {
            self.dec = Some(match &self.dec {
                Some(acc) => decimal::add(acc, d),
                None => *d,
            });
        }
    }

    /// The doubles' sum: compensated, unless the compensation turned NaN, which an infinite
    /// input or an overflow to infinity does; then the plain running sum (`dbl`), which is
    /// what MongoDB's `DoubleDoubleSummation` returns in that case (`$sum` of `[5, Infinity]`
    /// is Infinity, of `[Infinity, -Infinity]` NaN).
    fn doubles(&self) -> f64 {
        let compensated = self.dbl + self.comp;
        if compensated.is_nan() {
            self.dbl
        } else {
            compensated
        }
    }

    fn double_value(&self) -> f64 {
        self.int as f64 + self.doubles()
    }

    fn decimal_value(&self) -> Decimal128 {
        let mut acc = self.dec.unwrap_or_else(|| decimal::from_i64(0));
        if self.int != 0 {
            let i = match i64::try_from(self.int) {
                Ok(i) => decimal::from_i64(i),
                Err(_) => decimal::from_f64(self.int as f64, 34),
            };
            acc = decimal::add(&acc, &i);
        }
        let d = self.doubles();
        if d != 0.0 || d.is_nan() {
            acc = decimal::add(&acc, &decimal::from_f64(d, 34));
        }
        acc
    }

    pub(crate) fn value(&self) -> Bson {
        match self.ty {
            NumType::Int => match i64::try_from(self.int) {
                Ok(i) => int_or_long(i),
                Err(_) => Bson::Double(self.double_value()),
            },
            NumType::Long => match i64::try_from(self.int) {
                Ok(i) => Bson::Int64(i),
                Err(_) => Bson::Double(self.double_value()),
            },
            NumType::Double => Bson::Double(self.double_value()),
            NumType::Decimal => Bson::Decimal128(self.decimal_value()),
        }
    }

    /// The average (`None` when nothing numeric was seen).
    pub(crate) fn average(&self) -> Option<Bson> {
        if self.count == 0 {
            return None;
        }
        if self.ty == NumType::Decimal {
            return Some(Bson::Decimal128(decimal::div(
                &self.decimal_value(),
                &decimal::from_i64(self.count),
            )));
        }
        Some(Bson::Double(self.double_value() / self.count as f64))
    }
}

/// `$sum`.
#[derive(Debug, Clone)]
pub struct Sum {
    total: Total,
}

impl Sum {
    pub fn new() -> Sum {
        Sum {
            total: Total::new(),
        }
    }
}

impl Default for Sum {
    fn default() -> Self {
        Sum::new()
    }
}

impl Accumulator for Sum {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(v) = v {
            self.total.add(&v);
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(self.total.value())
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        self.total.add(&partial);
        Ok(())
    }

    fn absorb(&mut self, later: Box<dyn Accumulator>) -> Result<()> {
        let any: &dyn std::any::Any = &*later;
        match any.downcast_ref::<Sum>() {
            Some(o) => self.total.absorb(&o.total),
            None => self.merge(later.partial()?)?,
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.total.value())
    }
}

/// `$avg`: the mean of the numeric values, null when there are none.
#[derive(Debug, Clone)]
pub struct Avg {
    total: Total,
}

impl Avg {
    pub fn new() -> Avg {
        Avg {
            total: Total::new(),
        }
    }
}

impl Default for Avg {
    fn default() -> Self {
        Avg::new()
    }
}

impl Accumulator for Avg {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(v) = v {
            self.total.add(&v);
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        let mut d = Document::new();
        d.insert("subTotal", self.total.value());
        d.insert("count", self.total.count);
        Ok(Bson::Document(d))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        if let Bson::Document(d) = partial {
            let count = d.get("count").map(crate::value::to_i64).unwrap_or(0);
            if let Some(sub) = d.get("subTotal") {
                if self.total.add(sub) {
                    self.total.count += count - 1;
                }
            }
        }
        Ok(())
    }

    fn absorb(&mut self, later: Box<dyn Accumulator>) -> Result<()> {
        let any: &dyn std::any::Any = &*later;
        match any.downcast_ref::<Avg>() {
            Some(o) => self.total.absorb(&o.total),
            None => self.merge(later.partial()?)?,
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.total.average().unwrap_or(Bson::Null))
    }
}
