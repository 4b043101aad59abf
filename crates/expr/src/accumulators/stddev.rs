//! `$stdDevPop`, `$stdDevSamp` (Welford's algorithm over the numeric values).

use super::Accumulator;
use crate::value::{is_numeric, to_f64, Value};
use bson::{Bson, Document};
use nidus_common::Result;

#[derive(Debug, Clone)]
pub struct StdDev {
    sample: bool,
    count: i64,
    mean: f64,
    m2: f64,
}

impl StdDev {
    pub fn new(sample: bool) -> StdDev {
        StdDev {
            sample,
            count: 0,
            mean: 0.0,
            m2: 0.0,
        }
    }
}

impl Accumulator for StdDev {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(v) = v.filter(is_numeric) {
            let x = to_f64(&v);
            self.count += 1;
            let delta = x - self.mean;
            self.mean += delta / self.count as f64;
            self.m2 += delta * (x - self.mean);
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        let mut d = Document::new();
        d.insert("count", self.count);
        d.insert("mean", self.mean);
        d.insert("m2", self.m2);
        Ok(Bson::Document(d))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        let Bson::Document(d) = partial else {
            return Ok(());
        };
        let n2 = d.get("count").map(crate::value::to_i64).unwrap_or(0);
        if n2 == 0 {
            return Ok(());
        }
        let mean2 = d.get("mean").map(to_f64).unwrap_or(0.0);
        let m2b = d.get("m2").map(to_f64).unwrap_or(0.0);
        let n1 = self.count;
        let n = n1 + n2;
        let delta = mean2 - self.mean;
        self.mean += delta * n2 as f64 / n as f64;
        self.m2 += m2b + delta * delta * (n1 as f64) * (n2 as f64) / n as f64;
        self.count = n;
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        let n = if self.sample {
            self.count - 1
        } else {
            self.count
        };
        if n <= 0 {
            return Ok(Bson::Null);
        }
        Ok(Bson::Double((self.m2 / n as f64).sqrt()))
    }
}
