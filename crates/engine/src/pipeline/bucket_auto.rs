//! `$bucketAuto`: splits the documents, ordered by a `groupBy` expression, into at most
//! `buckets` groups of about equal size. Documents with equal values stay in one bucket;
//! each bucket's `_id` is `{min, max}` where `max` is the next bucket's `min` (the last
//! bucket's largest value for the last one). `output` accumulators default to
//! `{count: {$sum: 1}}`. `granularity` (preferred number series) is not supported yet.

use super::context::{bson_bytes, check_size};
use super::stream::Deferred;
use super::{DocumentSource, ExpCtx, ParseCtx, StageRef, Stream, VecStream};
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
}

fn err(code: i32, msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Location(code), msg)
}

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(err(
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
    for (k, v) in spec {
        match k.as_str() {
            "groupBy" => group_by = Some(parse_group_by(v, pcx)?),
            "buckets" => buckets = Some(parse_buckets(v)?),
            "output" => output = Some(parse_output(v, pcx)?),
            "granularity" => {
                return Err(Error::new(
                    ErrorCode::BadValue,
                    "$bucketAuto 'granularity' is not supported by this server yet",
                ))
            }
            other => {
                return Err(err(
                    40245,
                    format!("Unrecognized option to $bucketAuto: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
        return Err(err(
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
    })])
}

fn parse_group_by(v: &Bson, pcx: &ParseCtx) -> Result<Expression> {
    match v {
        Bson::String(s) if s.starts_with('$') => Expression::parse(v, &pcx.exprs),
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
            Expression::parse(v, &pcx.exprs)
        }
        other => Err(err(
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
        return Err(err(
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
            err(
                40242,
                format!(
                    "The 'buckets' field in $bucketAuto must be representable as a 32-bit integer, but found {}.",
                    nidus_common::shell::format(v)
                ),
            )
        })?;
    if n <= 0 {
        return Err(err(
            40243,
            format!("The 'buckets' field in $bucketAuto must be greater than 0, but found: {n}."),
        ));
    }
    Ok(n as usize)
}

fn parse_output(v: &Bson, pcx: &ParseCtx) -> Result<Vec<(AccumulatorSpec, Bson)>> {
    let Bson::Document(d) = v else {
        return Err(err(
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
        let mut keyed: Vec<(Bson, Document)> = Vec::new();
        let mut memory = ctx.memory("$bucketAuto");
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            let key = ctx.evaluate(&self.group_by, &d)?.unwrap_or(Bson::Null);
            memory.add(bson_bytes(&key) + super::context::doc_bytes(&d))?;
            keyed.push((key, d));
        }
        keyed.sort_by(|a, b| cmp_bson(&a.0, &b.0));
        let n = keyed.len();
        let size = ((n as f64 / self.buckets as f64).round() as usize).max(1);
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        while start < n {
            let mut end = if ranges.len() + 1 == self.buckets {
                n
            } else {
                (start + size).min(n)
            };
            while end < n && cmp_bson(&keyed[end - 1].0, &keyed[end].0).is_eq() {
                end += 1;
            }
            ranges.push((start, end));
            start = end;
        }
        let mut out = Vec::with_capacity(ranges.len());
        for (i, (s, e)) in ranges.iter().enumerate() {
            let min = keyed[*s].0.clone();
            let max = match ranges.get(i + 1) {
                Some((next, _)) => keyed[*next].0.clone(),
                None => keyed[*e - 1].0.clone(),
            };
            let mut d = bson::doc! {"_id": {"min": min, "max": max}};
            for (spec, _) in &self.output {
                let key_doc = bson::doc! {"_id": d.get("_id").cloned().unwrap_or(Bson::Null)};
                let mut acc = spec.create(&mut ctx.variables(&key_doc))?;
                for (_, doc) in &keyed[*s..*e] {
                    acc.process(spec.input(&mut ctx.variables(doc))?)?;
                }
                d.insert(spec.field.clone(), acc.finalize()?);
            }
            check_size(&d)?;
            out.push(d);
        }
        Ok(VecStream::boxed(out))
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
        bson::bson!({
            "groupBy": self.group_by.serialize(),
            "buckets": self.buckets as i32,
            "output": output,
        })
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
