//! `$min`, `$max`: the extreme value in the BSON order, ignoring missing, null and undefined
//! (null when nothing else was seen).

use super::Accumulator;
use crate::value::{nullish, Value};
use bson::Bson;
use nidus_common::Result;
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;

#[derive(Debug, Clone)]
pub struct MinMax {
    want: Ordering,
    best: Option<Bson>,
}

impl MinMax {
    pub fn min() -> MinMax {
        MinMax {
            want: Ordering::Less,
            best: None,
        }
    }

    pub fn max() -> MinMax {
        MinMax {
            want: Ordering::Greater,
            best: None,
        }
    }
}

impl Accumulator for MinMax {
    fn process(&mut self, v: Value) -> Result<()> {
        if nullish(&v) {
            return Ok(());
        }
        if let Some(v) = v {
            let better = match &self.best {
                None => true,
                Some(b) => cmp_bson(&v, b) == self.want,
            };
            if better {
                self.best = Some(v);
            }
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(self.best.clone().unwrap_or(Bson::Null))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        self.process(Some(partial))
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.best.clone().unwrap_or(Bson::Null))
    }
}
