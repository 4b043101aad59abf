//! `$first`, `$last`: the value of the first / last document of the group (missing gives
//! null).

use super::Accumulator;
use crate::value::Value;
use bson::Bson;
use nidus_common::Result;

#[derive(Debug, Clone, Default)]
pub struct First {
    seen: bool,
    value: Value,
}

impl Accumulator for First {
    fn process(&mut self, v: Value) -> Result<()> {
        if !self.seen {
            self.seen = true;
            self.value = v;
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(self.value.clone().unwrap_or(Bson::Null))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        self.process(Some(partial))
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.value.clone().unwrap_or(Bson::Null))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Last {
    value: Value,
}

impl Accumulator for Last {
    fn process(&mut self, v: Value) -> Result<()> {
        self.value = v;
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(self.value.clone().unwrap_or(Bson::Null))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        self.process(Some(partial))
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.value.clone().unwrap_or(Bson::Null))
    }
}
