//! `$group` accumulators: `$sum $avg $count $min $max $first $last $push $addToSet
//! $mergeObjects $stdDevPop $stdDevSamp`, the n-valued `$firstN $lastN $maxN $minN $top
//! $bottom $topN $bottomN`, and `$percentile $median`.
//!
//! A group stage parses each output field with [`AccumulatorSpec::parse_field`], creates one
//! [`Accumulator`] per group with [`AccumulatorSpec::create`], feeds it
//! [`AccumulatorSpec::input`] of every document of the group, and reads
//! [`Accumulator::finalize`]. [`Accumulator::partial`] and [`Accumulator::merge`] combine
//! partial states (spilled runs, parallel partitions).

mod collect;
mod first_last;
mod minmax;
mod multi;
pub mod percentile;
mod stddev;
mod sum;

pub use collect::{AddToSet, MergeObjects, Ordered, Push};
pub use first_last::{First, Last};
pub use minmax::MinMax;
pub use multi::{MultiKind, MultiN};
pub use stddev::StdDev;
pub use sum::{Avg, Sum};

use crate::expression::Expression;
use crate::value::{err, Value};
use crate::variables::{ParseContext, Variables};
use bson::Bson;
use nidus_common::Result;
use std::fmt;

/// MongoDB's per-accumulator memory limit for `$push`/`$addToSet` (100 MiB).
pub const MEMORY_LIMIT_BYTES: usize = 100 * 1024 * 1024;

/// The running state of one accumulator for one group.
pub trait Accumulator: Send + fmt::Debug + std::any::Any {
    /// Feeds the value of the accumulator's argument for one document (`None` = missing).
    fn process(&mut self, v: Value) -> Result<()>;
    /// The state as a value that [`Accumulator::merge`] of another instance accepts.
    fn partial(&self) -> Result<Bson>;
    /// Folds in a partial state produced by [`Accumulator::partial`].
    fn merge(&mut self, partial: Bson) -> Result<()>;
    /// Folds in another instance of the same accumulator that saw the documents after this
    /// one's (a parallel `$group`'s later partition). By default through
    /// [`Accumulator::partial`]; an accumulator whose partial state rounds (`$sum`, `$avg`)
    /// folds its exact state.
    fn absorb(&mut self, later: Box<dyn Accumulator>) -> Result<()> {
        self.merge(later.partial()?)
    }
    /// The group's result.
    fn finalize(&mut self) -> Result<Bson>;
    /// Approximate memory held, in bytes.
    fn mem_usage(&self) -> usize {
        0
    }
}

/// A fresh accumulator for the simple (single-argument) operators, by name.
pub fn create(name: &str) -> Option<Box<dyn Accumulator>> {
    Some(match name {
        "$sum" => Box::new(Sum::new()),
        "$avg" => Box::new(Avg::new()),
        "$min" => Box::new(MinMax::min()),
        "$max" => Box::new(MinMax::max()),
        "$first" => Box::new(First::default()),
        "$last" => Box::new(Last::default()),
        "$push" => Box::new(Push::new("$push")),
        "$addToSet" => Box::new(AddToSet::new()),
        "$mergeObjects" => Box::new(MergeObjects::default()),
        "$stdDevPop" => Box::new(StdDev::new(false)),
        "$stdDevSamp" => Box::new(StdDev::new(true)),
        _ => return None,
    })
}

const SIMPLE: &[&str] = &[
    "$sum",
    "$avg",
    "$min",
    "$max",
    "$first",
    "$last",
    "$push",
    "$addToSet",
    "$mergeObjects",
    "$stdDevPop",
    "$stdDevSamp",
];

/// The accumulators whose state, folded from consecutive parts of the input in input order
/// ([`Accumulator::absorb`]), equals the state of the whole input: a parallel `$group` may
/// use them. (`$stdDevPop`/`$stdDevSamp` fold through rounded moments; the n-valued ones are
/// not folded.)
pub const FOLD_EXACTLY: &[&str] = &[
    "$sum",
    "$avg",
    "$count",
    "$min",
    "$max",
    "$first",
    "$last",
    "$push",
    "$addToSet",
    "$mergeObjects",
];

/// One `$group` output field: `{<field>: {<$acc>: <argument>}}`.
#[derive(Debug, Clone)]
pub struct AccumulatorSpec {
    /// The output field name.
    pub field: String,
    /// The accumulator (`$sum`, ...).
    pub name: String,
    /// The per-document input expression (`output` for `$top`/`$bottom`, `input` for
    /// `$firstN`...).
    pub input: Expression,
    kind: SpecKind,
}

#[derive(Debug, Clone)]
enum SpecKind {
    Simple,
    Count,
    Multi(multi::MultiSpec),
    Quantile(percentile::QuantileSpec),
}

impl AccumulatorSpec {
    /// Parses `field: {$acc: arg}` with `$group`'s errors.
    pub fn parse_field(field: &str, spec: &Bson, ctx: &ParseContext) -> Result<AccumulatorSpec> {
        let Bson::Document(d) = spec else {
            return Err(err(
                40234,
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        if d.len() != 1 {
            return Err(err(
                40238,
                format!("The field '{field}' must specify one accumulator"),
            ));
        }
        let Some((name, arg)) = d.iter().next() else {
            return Err(err(
                40238,
                format!("The field '{field}' must specify one accumulator"),
            ));
        };
        if !name.starts_with('$') {
            return Err(err(
                40234,
                format!("The field '{field}' must be an accumulator object"),
            ));
        }
        Self::parse(field, name, arg, ctx)
    }

    /// Parses one accumulator `{name: arg}` for output field `field`.
    pub fn parse(
        field: &str,
        name: &str,
        arg: &Bson,
        ctx: &ParseContext,
    ) -> Result<AccumulatorSpec> {
        if name == "$count" {
            match arg {
                Bson::Document(d) if d.is_empty() => {}
                _ => return Err(err(40181, "$count takes no arguments, i.e. $count:{}")),
            }
            return Ok(AccumulatorSpec {
                field: field.to_string(),
                name: name.to_string(),
                input: Expression::Constant(Bson::Int32(1)),
                kind: SpecKind::Count,
            });
        }
        if SIMPLE.contains(&name) {
            if matches!(arg, Bson::Array(_)) {
                return Err(err(
                    40237,
                    format!("The {name} accumulator is a unary operator"),
                ));
            }
            return Ok(AccumulatorSpec {
                field: field.to_string(),
                name: name.to_string(),
                input: Expression::parse(arg, ctx)?,
                kind: SpecKind::Simple,
            });
        }
        if let Some(kind) = MultiKind::from_name(name) {
            let (input, spec) = multi::parse(kind, name, arg, ctx)?;
            return Ok(AccumulatorSpec {
                field: field.to_string(),
                name: name.to_string(),
                input,
                kind: SpecKind::Multi(spec),
            });
        }
        if name == "$percentile" || name == "$median" {
            let (input, spec) =
                percentile::parse(name, arg, ctx, percentile::Context::Accumulator)?;
            return Ok(AccumulatorSpec {
                field: field.to_string(),
                name: name.to_string(),
                input,
                kind: SpecKind::Quantile(spec),
            });
        }
        Err(err(15952, format!("Unknown group operator '{name}'")))
    }

    /// The value to feed [`Accumulator::process`] for one document.
    pub fn input(&self, vars: &mut Variables) -> Result<Value> {
        match &self.kind {
            SpecKind::Multi(m) => m.input(&self.input, vars),
            _ => self.input.evaluate(vars),
        }
    }

    /// A fresh accumulator for one group. `vars` is evaluated against the group key (as
    /// `$$ROOT`: `{_id: <key>}`) for arguments such as `n`.
    pub fn create(&self, vars: &mut Variables) -> Result<Box<dyn Accumulator>> {
        match &self.kind {
            SpecKind::Simple => create(&self.name)
                .ok_or_else(|| err(15952, format!("Unknown group operator '{}'", self.name))),
            SpecKind::Count => Ok(Box::new(Sum::new())),
            SpecKind::Multi(m) => m.create(vars),
            SpecKind::Quantile(q) => Ok(q.create()),
        }
    }
}

#[cfg(test)]
mod tests;
