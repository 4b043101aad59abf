//! `$bucketAuto`: splits the documents, ordered by a `groupBy` expression, into at most
//! `buckets` groups of about equal size. Documents with equal values stay in one bucket;
//! each bucket's `_id` is `{min, max}` where `max` is the next bucket's `min` (the last
//! bucket's largest value for the last one). `output` accumulators default to
//! `{count: {$sum: 1}}`. With `granularity` (a preferred number series or powers of two,
//! `granularity.rs`) every `groupBy` value must be a non-negative number, and the boundaries
//! are rounded as MongoDB rounds them: the first `min` down, each `max` up (taking in the
//! documents below it), the next bucket's `min` is the previous `max`.
//!
//! The input is sorted by the `groupBy` value through a spilling sorter (past
//! `internalDocumentSourceBucketAutoMaxMemoryBytes`, sorted runs go to `<dbpath>/_tmp` when
//! `allowDiskUse`; otherwise 292 QueryExceededMemoryLimitNoDiskUseAllowed), then the buckets
//! are built one at a time from the sorted stream.

use super::context::{bson_bytes, check_size, doc_bytes};
use super::granularity::Granularity;
use super::stream::Deferred;
use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use crate::exec::spill::{SpillRun, SpilledRuns};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::accumulators::AccumulatorSpec;
use nidus_expr::Expression;
use std::any::Any;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct BucketAuto {
    pub group_by: Expression,
    pub buckets: usize,
    pub output: Vec<(AccumulatorSpec, Bson)>,
    pub granularity: Option<Granularity>,
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            40240,
            format!(
                "The argument to $bucketAuto must be an object, but found type: {}.",
                super::type_name(arg)
            ),
        ));
    };
    let mut group_by = None;
    let mut buckets = None;
    let mut output = None;
    let mut granularity = None;
    for (k, v) in spec {
        match k.as_str() {
            "groupBy" => group_by = Some(parse_group_by(v, pcx)?),
            "buckets" => buckets = Some(parse_buckets(v)?),
            "output" => output = Some(parse_output(v, pcx)?),
            "granularity" => granularity = Some(Granularity::parse(v)?),
            other => {
                return Err(Error::location(
                    40245,
                    format!("Unrecognized option to $bucketAuto: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
        return Err(Error::location(
            40246,
            "$bucketAuto requires 'groupBy' and 'buckets' to be specified",
        ));
    };
    let output = match output {
        Some(o) => o,
        None => parse_output(&bson::bson!({"count": {"$sum": 1}}), pcx)?,
    };
    Ok(vec![Arc::new(BucketAuto {
        group_by,
        buckets,
        output,
        granularity,
    })])
}

fn parse_group_by(v: &Bson, pcx: &ParseCtx) -> Result<Expression> {
    match v {
        Bson::String(s) if s.starts_with('$') => Expression::parse(v, &pcx.exprs),
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
            Expression::parse(v, &pcx.exprs)
        }
        other => Err(Error::location(
            40239,
            format!(
                "The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or an expression object, but found: {}.",
                nidus_common::shell::format(other)
            ),
        )),
    }
}

fn parse_buckets(v: &Bson) -> Result<usize> {
    if !super::is_number(v) {
        return Err(Error::location(
            40241,
            format!(
                "The 'buckets' field in $bucketAuto must be a numeric value, but found type: {}.",
                super::type_name(v)
            ),
        ));
    }
    let n = super::exact_i64(v)
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or_else(|| {
            Error::location(
                40242,
                format!(
                    "The 'buckets' field in $bucketAuto must be representable as a 32-bit integer, but found {}.",
                    nidus_common::shell::format(v)
                ),
            )
        })?;
    if n <= 0 {
        return Err(Error::location(
            40243,
            format!("The 'buckets' field in $bucketAuto must be greater than 0, but found: {n}."),
        ));
    }
    Ok(n as usize)
}

fn parse_output(v: &Bson, pcx: &ParseCtx) -> Result<Vec<(AccumulatorSpec, Bson)>> {
    let Bson::Document(d) = v else {
        return Err(Error::location(
            40244,
            format!(
                "The 'output' field in $bucketAuto must be an object, but found type: {}.",
                super::type_name(v)
            ),
        ));
    };
    d.iter()
        .map(|(f, a)| Ok((AccumulatorSpec::parse_field(f, a, &pcx.exprs)?, a.clone())))
        .collect()
}

impl BucketAuto {
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        let mut sorter = KeySorter {
            limit: ctx.bucket_auto_max_memory,
            buffered: Vec::new(),
            memory: 0,
            spilled: SpilledRuns::default(),
        };
        let mut n = 0usize;
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            let key = ctx.evaluate(&self.group_by, &d)?.unwrap_or(Bson::Null);
            if self.granularity.is_some() {
                check_granular_key(&key)?;
            }
            sorter.add(ctx, key, d)?;
            n += 1;
        }
        let size = ((n as f64 / self.buckets as f64).round() as usize).max(1);
        ctx.report(sorter.spilled.stats());
        Ok(Box::new(BucketStream {
            stage: self.clone(),
            ctx: ctx.clone(),
            sorted: sorter.finish()?,
            size,
            made: 0,
            pending: None,
            previous_max: None,
        }))
    }
}

/// With a `granularity`, MongoDB takes only non-negative numbers as `groupBy` values.
fn check_granular_key(key: &Bson) -> Result<()> {
    if !super::is_number(key) {
        return Err(Error::location(
            40258,
            format!(
                "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found a value with type: {}",
                super::type_name(key)
            ),
        ));
    }
    let x = nidus_expr::value::to_f64(key);
    if x.is_nan() {
        return Err(Error::location(
            40259,
            "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found a value that is NaN",
        ));
    }
    if x < 0.0 {
        return Err(Error::location(
            40260,
            "$bucketAuto can specify a 'granularity' with non-negative numbers only, but found a negative value",
        ));
    }
    Ok(())
}

/// The input keyed by `groupBy`, sorted (stable) in memory up to the stage's memory limit and
/// beyond it, with disk use allowed, as sorted runs of `{k: key, d: document}` merged at the
/// end (MongoDB's $bucketAuto sorts through its external sorter).
struct KeySorter {
    limit: usize,
    buffered: Vec<(Bson, Document)>,
    memory: usize,
    spilled: SpilledRuns,
}

impl KeySorter {
    fn add(&mut self, ctx: &ExpCtx, key: Bson, d: Document) -> Result<()> {
        self.memory += bson_bytes(&key) + doc_bytes(&d);
        self.buffered.push((key, d));
        if self.memory > self.limit {
            let Some(dir) = ctx.spill_dir() else {
                return Err(Error::new(
                    ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                    format!(
                        "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                        self.limit
                    ),
                ));
            };
            self.buffered.sort_by(|a, b| cmp_bson(&a.0, &b.0));
            let buffered = std::mem::take(&mut self.buffered);
            self.spilled.write(
                &dir,
                buffered
                    .into_iter()
                    .map(|(k, d)| Ok(bson::doc! {"k": k, "d": d})),
            )?;
            self.memory = 0;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Sorted> {
        self.buffered.sort_by(|a, b| cmp_bson(&a.0, &b.0));
        let mut sorted = Sorted {
            runs: std::mem::take(&mut self.spilled.runs),
            memory: std::mem::take(&mut self.buffered).into_iter(),
            heads: Vec::new(),
        };
        for source in 0..sorted.runs.len() {
            let head = sorted.pull(source)?;
            sorted.heads.push(head);
        }
        Ok(sorted)
    }
}

/// The sorted runs merged with the sorted memory remainder; among equal keys the earlier run
/// (earlier input) goes first, the memory remainder (the latest input) last.
struct Sorted {
    runs: Vec<SpillRun>,
    memory: std::vec::IntoIter<(Bson, Document)>,
    /// The next entry of each run.
    heads: Vec<Option<(Bson, Document)>>,
}

impl Sorted {
    fn pull(&mut self, run: usize) -> Result<Option<(Bson, Document)>> {
        let Some((_, raw)) = self.runs[run].next()? else {
            return Ok(None);
        };
        let mut d = raw
            .to_document()
            .map_err(|e| Error::internal(e.to_string()))?;
        let key = d.remove("k").unwrap_or(Bson::Null);
        match d.remove("d") {
            Some(Bson::Document(doc)) => Ok(Some((key, doc))),
            _ => Err(Error::internal(
                "$bucketAuto spill record without a document",
            )),
        }
    }

    fn next(&mut self) -> Result<Option<(Bson, Document)>> {
        let mut best: Option<usize> = None;
        for i in 0..self.heads.len() {
            let Some((k, _)) = &self.heads[i] else {
                continue;
            };
            if best
                .and_then(|b| self.heads[b].as_ref())
                .is_none_or(|(bk, _)| cmp_bson(k, bk).is_lt())
            {
                best = Some(i);
            }
        }
        let memory_first = match (
            best.and_then(|b| self.heads[b].as_ref()),
            self.memory.as_slice().first(),
        ) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some((bk, _)), Some((mk, _))) => cmp_bson(mk, bk).is_lt(),
        };
        match best {
            Some(b) if !memory_first => {
                let taken = self.heads[b].take();
                self.heads[b] = self.pull(b)?;
                Ok(taken)
            }
            _ => Ok(self.memory.next()),
        }
    }
}

/// Builds the buckets one at a time from the sorted input (as MongoDB does): about
/// `size` documents each (all the rest for the last), plus the documents equal to the
/// bucket's largest key; a bucket's `max` is the next bucket's `min`.
struct BucketStream {
    stage: BucketAuto,
    ctx: ExpCtx,
    sorted: Sorted,
    size: usize,
    made: usize,
    /// The first entry of the next bucket.
    pending: Option<(Bson, Document)>,
    /// With a granularity: the previous bucket's (rounded) `max`, this one's `min`.
    previous_max: Option<Bson>,
}

impl DocStream for BucketStream {
    fn next(&mut self) -> Result<Option<Document>> {
        if self.made >= self.stage.buckets {
            return Ok(None);
        }
        let first = match self.pending.take() {
            Some(e) => e,
            None => match self.sorted.next()? {
                Some(e) => e,
                None => return Ok(None),
            },
        };
        self.made += 1;
        let last_bucket = self.made == self.stage.buckets;
        let ctx = &self.ctx;
        let empty = Document::new();
        let mut accs = Vec::with_capacity(self.stage.output.len());
        for (spec, _) in &self.stage.output {
            accs.push(spec.create(&mut ctx.variables(&empty))?);
        }
        let output = &self.stage.output;
        let mut add = |d: &Document| -> Result<()> {
            for ((spec, _), acc) in output.iter().zip(accs.iter_mut()) {
                acc.process(spec.input(&mut ctx.variables(d))?)?;
            }
            Ok(())
        };
        let min = match (&self.stage.granularity, self.previous_max.take()) {
            (None, _) => first.0.clone(),
            (Some(_), Some(previous)) => previous,
            (Some(g), None) => g.round_down(&first.0)?,
        };
        let mut max = first.0;
        add(&first.1)?;
        let mut count = 1;
        while last_bucket || count < self.size {
            ctx.check_interrupt()?;
            let Some((k, d)) = self.sorted.next()? else {
                break;
            };
            add(&d)?;
            max = k;
            count += 1;
        }
        let mut next = self.sorted.next()?;
        match &self.stage.granularity {
            None => {
                // Documents equal to the largest key stay in this bucket.
                while let Some((k, d)) = &next {
                    if !cmp_bson(k, &max).is_eq() {
                        break;
                    }
                    ctx.check_interrupt()?;
                    add(d)?;
                    next = self.sorted.next()?;
                }
                if let Some((k, _)) = &next {
                    max = k.clone();
                }
            }
            Some(g) => {
                // The rounded-up boundary takes in the documents below it (and those equal
                // to the largest key).
                let boundary = g.round_up(&max)?;
                while let Some((k, d)) = &next {
                    if !(cmp_bson(&boundary, k).is_gt() || cmp_bson(&max, k).is_eq()) {
                        break;
                    }
                    ctx.check_interrupt()?;
                    add(d)?;
                    next = self.sorted.next()?;
                }
                // A first bucket of zeros ends where the next bucket's rounded-down min is.
                max = match &next {
                    Some((k, _)) if nidus_expr::value::to_f64(&boundary) == 0.0 => {
                        g.round_down(k)?
                    }
                    _ => boundary,
                };
                self.previous_max = Some(max.clone());
            }
        }
        self.pending = next;
        let mut d = bson::doc! {"_id": {"min": min, "max": max}};
        for ((spec, _), mut acc) in self.stage.output.iter().zip(accs) {
            d.insert(spec.field.clone(), acc.finalize()?);
        }
        check_size(&d)?;
        Ok(Some(d))
    }
}

impl DocumentSource for BucketAuto {
    fn name(&self) -> &'static str {
        "$bucketAuto"
    }

    fn serialize(&self) -> Bson {
        let mut output = Document::new();
        for (spec, raw) in &self.output {
            output.insert(spec.field.clone(), raw.clone());
        }
        let mut spec = bson::doc! {
            "groupBy": self.group_by.serialize(),
            "buckets": self.buckets as i32,
            "output": output,
        };
        if let Some(g) = &self.granularity {
            spec.insert("granularity", g.name());
        }
        Bson::Document(spec)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &BucketAuto, input, ctx| stage.run(input, ctx),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
