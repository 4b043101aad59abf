//! `$push`, `$addToSet`, `$mergeObjects`.

use super::{Accumulator, MEMORY_LIMIT_BYTES};
use crate::value::{display_bson, err, nullish, type_name_bson, Value};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;
use std::collections::BTreeSet;

/// Approximate in-memory size of a value (for the 100 MiB limit).
pub(crate) fn approx_size(v: &Bson) -> usize {
    match v {
        Bson::String(s) => 16 + s.len(),
        Bson::Array(a) => 16 + a.iter().map(approx_size).sum::<usize>(),
        Bson::Document(d) => {
            16 + d
                .iter()
                .map(|(k, v)| k.len() + approx_size(v))
                .sum::<usize>()
        }
        Bson::Binary(b) => 16 + b.bytes.len(),
        _ => 16,
    }
}

pub(super) fn too_much_memory(name: &str) -> Error {
    Error::new(
        ErrorCode::ExceededMemoryLimit,
        format!(
            "{name} used too much memory and cannot spill to disk. Memory limit: {MEMORY_LIMIT_BYTES} bytes"
        ),
    )
}

/// `$push`: every non-missing value, in order.
#[derive(Debug, Clone)]
pub struct Push {
    name: &'static str,
    items: Vec<Bson>,
    bytes: usize,
}

impl Push {
    pub fn new(name: &'static str) -> Push {
        Push {
            name,
            items: Vec::new(),
            bytes: 0,
        }
    }
}

impl Accumulator for Push {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(v) = v {
            self.bytes += approx_size(&v);
            if self.bytes > MEMORY_LIMIT_BYTES {
                return Err(too_much_memory(self.name));
            }
            self.items.push(v);
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(Bson::Array(self.items.clone()))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        if let Bson::Array(a) = partial {
            for v in a {
                self.process(Some(v))?;
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(Bson::Array(self.items.clone()))
    }

    fn mem_usage(&self) -> usize {
        self.bytes
    }
}

/// A value ordered by MongoDB's comparison, for sets.
#[derive(Debug, Clone)]
pub struct Ordered(pub Bson);

impl PartialEq for Ordered {
    fn eq(&self, o: &Self) -> bool {
        cmp_bson(&self.0, &o.0) == Ordering::Equal
    }
}
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ordered {
    fn cmp(&self, o: &Self) -> Ordering {
        cmp_bson(&self.0, &o.0)
    }
}

/// `$addToSet`: the distinct non-missing values (in BSON order).
#[derive(Debug, Clone, Default)]
pub struct AddToSet {
    set: BTreeSet<Ordered>,
    bytes: usize,
}

impl AddToSet {
    pub fn new() -> AddToSet {
        AddToSet::default()
    }
}

impl Accumulator for AddToSet {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(v) = v {
            let size = approx_size(&v);
            if self.set.insert(Ordered(v)) {
                self.bytes += size;
                if self.bytes > MEMORY_LIMIT_BYTES {
                    return Err(too_much_memory("$addToSet"));
                }
            }
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(Bson::Array(self.set.iter().map(|o| o.0.clone()).collect()))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        if let Bson::Array(a) = partial {
            for v in a {
                self.process(Some(v))?;
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        self.partial()
    }

    fn mem_usage(&self) -> usize {
        self.bytes
    }
}

/// `$mergeObjects`: later documents' fields overwrite earlier ones; nullish inputs are
/// ignored.
#[derive(Debug, Clone, Default)]
pub struct MergeObjects {
    out: Document,
}

impl Accumulator for MergeObjects {
    fn process(&mut self, v: Value) -> Result<()> {
        if nullish(&v) {
            return Ok(());
        }
        match v {
            Some(Bson::Document(d)) => {
                for (k, v) in d {
                    self.out.insert(k, v);
                }
                Ok(())
            }
            Some(other) => Err(err(
                40400,
                format!(
                    "$mergeObjects requires object inputs, but input {} is of type {}",
                    display_bson(&other),
                    type_name_bson(&other)
                ),
            )),
            None => Ok(()),
        }
    }

    fn partial(&self) -> Result<Bson> {
        Ok(Bson::Document(self.out.clone()))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        self.process(Some(partial))
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(Bson::Document(self.out.clone()))
    }
}
