//! `$sample: {size: n}`: n documents chosen at random (all of them, shuffled, when the input
//! has fewer). Blocking: the input is read whole, then sampled without replacement.

use super::context::doc_bytes;
use super::stream::Deferred;
use super::{DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Sample {
    pub size: u64,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            28745,
            "the $sample stage specification must be an object",
        ));
    };
    let mut size = None;
    for (k, v) in spec {
        if k != "size" {
            return Err(Error::location(
                28748,
                format!("unrecognized option to $sample: {k}"),
            ));
        }
        if !super::is_number(v) {
            return Err(Error::location(
                28746,
                "size argument to $sample must be a number",
            ));
        }
        let n = match (super::exact_i64(v), v) {
            (Some(n), _) => n,
            (None, Bson::Double(f)) => *f as i64,
            _ => 0,
        };
        if n < 0 {
            return Err(Error::location(
                28747,
                "size argument to $sample must not be negative",
            ));
        }
        size = Some(n as u64);
    }
    let size = size.ok_or_else(|| Error::location(28749, "$sample stage must specify a size"))?;
    Ok(vec![Arc::new(Sample { size })])
}

/// xorshift64*, seeded from the clock: enough randomness for sampling, no dependency.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        Rng(seed | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

impl Sample {
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let mut docs: Vec<Document> = Vec::new();
        let mut memory = ctx.memory("$sample");
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            memory.add(doc_bytes(&d))?;
            docs.push(d);
        }
        let mut rng = Rng::new();
        let k = (self.size as usize).min(docs.len());
        for i in 0..k {
            let j = i + rng.below(docs.len() - i);
            docs.swap(i, j);
        }
        docs.truncate(k);
        Ok(VecStream::boxed(docs))
    }
}

impl DocumentSource for Sample {
    fn name(&self) -> &'static str {
        "$sample"
    }

    fn serialize(&self) -> Bson {
        bson::bson!({"size": self.size as i64})
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Sample, input, ctx| stage.run(input, ctx),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
