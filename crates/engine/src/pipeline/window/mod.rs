//! Window functions of `$setWindowFields`: parsing each `output` field with MongoDB's errors
//! (window_function_expression.cpp) and computing it over one sorted partition.
//!
//! Accumulator-style functions (`$sum`, `$avg`, `$push`, `$topN`, ...) reuse the `$group`
//! accumulators of `nidus_expr`: a window `[unbounded, x]` feeds one accumulator as the window
//! grows and snapshots it through `partial`/`merge`; other windows feed a fresh accumulator
//! per document.

pub mod bounds;

use bounds::{Bound, Bounds, UNBOUNDED};
use bson::{Bson, Decimal128, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::accumulators::{Accumulator, AccumulatorSpec};
use nidus_expr::decimal;
use nidus_expr::value::to_f64;
use nidus_expr::{Expression, ParseContext, Value};

use super::ExpCtx;

fn fail(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::FailedToParse, msg)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rank {
    Plain,
    Dense,
    DocumentNumber,
}

#[derive(Debug, Clone)]
pub enum Func {
    Acc(AccumulatorSpec),
    Rank(Rank),
    Shift {
        output: Expression,
        by: i64,
        default: Bson,
    },
    Derivative {
        input: Expression,
        unit: Option<String>,
    },
    Integral {
        input: Expression,
        unit: Option<String>,
    },
    ExpMovingAvg {
        input: Expression,
        /// Computed in Decimal128 as MongoDB's accumulator does.
        alpha: Decimal128,
    },
    Covariance {
        x: Expression,
        y: Expression,
        samp: bool,
    },
    Locf(Expression),
    LinearFill(Expression),
}

/// One `output` field.
#[derive(Debug, Clone)]
pub struct WindowOutput {
    pub field: String,
    pub name: String,
    pub func: Func,
    pub bounds: Bounds,
    /// The argument as written (explain).
    pub arg: Bson,
}

const ACCUMULATORS: &[&str] = &[
    "$sum",
    "$avg",
    "$min",
    "$max",
    "$count",
    "$push",
    "$addToSet",
    "$first",
    "$last",
    "$stdDevPop",
    "$stdDevSamp",
    "$mergeObjects",
    "$top",
    "$bottom",
    "$topN",
    "$bottomN",
    "$firstN",
    "$lastN",
    "$minN",
    "$maxN",
    "$percentile",
    "$median",
];

const OTHERS: &[&str] = &[
    "$rank",
    "$denseRank",
    "$documentNumber",
    "$shift",
    "$derivative",
    "$integral",
    "$expMovingAvg",
    "$covariancePop",
    "$covarianceSamp",
    "$locf",
    "$linearFill",
];

/// The sortBy of the stage as the functions need it.
pub struct SortInfo<'a> {
    pub fields: Option<&'a Document>,
}

impl SortInfo<'_> {
    fn count(&self) -> Option<usize> {
        self.fields.map(|d| d.len())
    }
}

impl WindowOutput {
    /// Parses `field: {$fn: arg, window: {...}}`.
    pub fn parse(
        field: &str,
        spec: &Bson,
        sort: &SortInfo,
        ctx: &ParseContext,
    ) -> Result<WindowOutput> {
        let Bson::Document(d) = spec else {
            return Err(fail(format!("The field '{field}' must be an object")));
        };
        let Some((name, arg)) = d.iter().find(|(k, _)| k.starts_with('$')) else {
            let first = d
                .keys()
                .next()
                .map(|k| format!(", {k}"))
                .unwrap_or_default();
            return Err(fail(format!(
                "Expected a $-prefixed window function{first}"
            )));
        };
        if !ACCUMULATORS.contains(&name.as_str()) && !OTHERS.contains(&name.as_str()) {
            return Err(fail(format!("Unrecognized window function, {name}")));
        }
        let mut window = None;
        for (k, v) in d {
            if k == name {
                continue;
            }
            if k == "window" {
                window = Some(v);
                continue;
            }
            return Err(match name.as_str() {
                "$first" | "$last" => fail(format!("{name} got unexpected argument: {k}")),
                "$expMovingAvg" => {
                    fail("$expMovingAvg must have exactly one argument that is an object")
                }
                _ => fail(format!("Window function found an unknown argument: {k}")),
            });
        }
        let parsed_bounds = |w: Option<&Bson>| -> Result<Bounds> {
            match w {
                Some(w) => Bounds::parse(w, sort.count()),
                None => Ok(UNBOUNDED),
            }
        };
        let name_s = name.to_string();
        let (func, bounds) = match name.as_str() {
            "$rank" | "$denseRank" | "$documentNumber" => {
                if window.is_some() {
                    return Err(Error::new(
                        ErrorCode::Location(5371601),
                        "Rank style window functions take no other arguments",
                    ));
                }
                if !matches!(arg, Bson::Document(a) if a.is_empty()) {
                    return Err(Error::new(
                        ErrorCode::Location(5371603),
                        format!("{name} must be specified with '{{}}' as the value"),
                    ));
                }
                if sort.count() != Some(1) {
                    return Err(Error::new(
                        ErrorCode::Location(5371602),
                        format!("{name} must be specified with a top level sortBy expression with exactly one element"),
                    ));
                }
                let kind = match name.as_str() {
                    "$rank" => Rank::Plain,
                    "$denseRank" => Rank::Dense,
                    _ => Rank::DocumentNumber,
                };
                (Func::Rank(kind), UNBOUNDED)
            }
            "$shift" => {
                if window.is_some() {
                    return Err(fail("$shift does not accept a 'window' field"));
                }
                let shift = parse_shift(arg, ctx)?;
                if sort.count().is_none() {
                    // MongoDB streams the name as a boost::optional (optional_io: a space
                    // before the value).
                    return Err(fail("' $shift' requires a sortBy"));
                }
                (shift, UNBOUNDED)
            }
            "$derivative" | "$integral" => {
                let Bson::Document(a) = arg else {
                    return Err(fail(format!(
                        "{name} expects an object, but got a {}: {}",
                        super::type_name(arg),
                        nidus_expr::value::display_bson(arg)
                    )));
                };
                let mut input = None;
                let mut unit = None;
                for (k, v) in a {
                    match k.as_str() {
                        "input" => input = Some(Expression::parse(v, ctx)?),
                        "unit" => match v {
                            Bson::String(u) if nidus_expr::date::time_unit_millis(u).is_some() => {
                                unit = Some(u.clone())
                            }
                            Bson::String(u) if nidus_expr::date::is_time_unit(u) => {
                                return Err(fail(format!(
                                    "{name} 'unit' must be 'week' or a shorter unit, not '{u}'"
                                )))
                            }
                            _ => {
                                return Err(fail(format!(
                                    "{name} 'unit' must be a string naming a time unit"
                                )))
                            }
                        },
                        other => {
                            return Err(fail(format!("{name} got unexpected argument: {other}")))
                        }
                    }
                }
                let Some(input) = input else {
                    return Err(fail(format!("{name} requires an 'input' expression")));
                };
                if sort.count().is_none() {
                    return Err(fail(format!("{name} requires a sortBy")));
                }
                if sort.count() != Some(1) {
                    return Err(fail(format!(
                        "{name} requires a sortBy that consists of exactly one field"
                    )));
                }
                if name == "$derivative" {
                    let Some(w) = window else {
                        return Err(fail("$derivative requires explicit window bounds"));
                    };
                    (Func::Derivative { input, unit }, parsed_bounds(Some(w))?)
                } else {
                    (Func::Integral { input, unit }, parsed_bounds(window)?)
                }
            }
            "$expMovingAvg" => {
                if window.is_some() {
                    return Err(fail(
                        "$expMovingAvg must have exactly one argument that is an object",
                    ));
                }
                (parse_ema(arg, sort, ctx)?, UNBOUNDED)
            }
            "$covariancePop" | "$covarianceSamp" => {
                let Bson::Array(a) = arg else {
                    return Err(fail(format!("{name} requires an array of two expressions")));
                };
                if a.len() != 2 {
                    return Err(fail(format!("{name} requires an array of two expressions")));
                }
                let x = Expression::parse(&a[0], ctx)?;
                let y = Expression::parse(&a[1], ctx)?;
                (
                    Func::Covariance {
                        x,
                        y,
                        samp: name == "$covarianceSamp",
                    },
                    parsed_bounds(window)?,
                )
            }
            "$locf" => {
                if window.is_some() {
                    return Err(fail("$locf does not accept a window"));
                }
                (Func::Locf(Expression::parse(arg, ctx)?), UNBOUNDED)
            }
            "$linearFill" => {
                if window.is_some() {
                    return Err(fail("$linearFill does not accept a window"));
                }
                if sort.count() != Some(1) {
                    return Err(Error::new(
                        ErrorCode::Location(605001),
                        "$linearFill must be specified with a top level sortBy expression with exactly one element",
                    ));
                }
                (Func::LinearFill(Expression::parse(arg, ctx)?), UNBOUNDED)
            }
            _ => {
                let spec = AccumulatorSpec::parse(field, name, arg, ctx)?;
                (Func::Acc(spec), parsed_bounds(window)?)
            }
        };
        Ok(WindowOutput {
            field: field.to_string(),
            name: name_s,
            func,
            bounds,
            arg: arg.clone(),
        })
    }

    pub fn serialize(&self) -> Document {
        let mut d = Document::new();
        d.insert(self.name.clone(), self.arg.clone());
        if !matches!(
            self.func,
            Func::Rank(_)
                | Func::Shift { .. }
                | Func::ExpMovingAvg { .. }
                | Func::Locf(_)
                | Func::LinearFill(_)
        ) {
            d.insert("window", self.bounds.serialize());
        }
        d
    }
}

fn parse_shift(arg: &Bson, ctx: &ParseContext) -> Result<Func> {
    let Bson::Document(a) = arg else {
        return Err(fail("Argument to $shift must be an object".to_string()));
    };
    let mut output = None;
    let mut by = None;
    let mut default = Bson::Null;
    for (k, v) in a {
        match k.as_str() {
            "output" => output = Some(Expression::parse(v, ctx)?),
            "by" => {
                by = Some(
                    super::exact_i64(v)
                        .filter(|n| n.abs() <= i32::MAX as i64)
                        .ok_or_else(|| {
                            fail(format!(
                                "'$shift:by' field must be an integer, but found {}",
                                nidus_expr::value::display_bson(v)
                            ))
                        })?,
                )
            }
            "default" => {
                let e = Expression::parse(v, ctx)?;
                match e {
                    Expression::Constant(c) => default = c,
                    _ => {
                        return Err(fail(
                            "'$shift:default' expression must yield a constant value.",
                        ))
                    }
                }
            }
            other => return Err(fail(format!("Unknown argument in $shift: {other}"))),
        }
    }
    let Some(output) = output else {
        return Err(fail("$shift requires an 'output' expression."));
    };
    let Some(by) = by else {
        return Err(fail("$shift requires 'by' as an integer value."));
    };
    Ok(Func::Shift {
        output,
        by,
        default,
    })
}

fn parse_ema(arg: &Bson, sort: &SortInfo, ctx: &ParseContext) -> Result<Func> {
    let Bson::Document(a) = arg else {
        return Err(fail(
            "$expMovingAvg must have exactly one argument that is an object",
        ));
    };
    const SHAPE: &str = "$expMovingAvg sub object must have exactly two fields: An 'input' field, and either an 'N' field or an 'alpha' field";
    if a.len() != 2 || !a.contains_key("input") {
        return Err(fail(SHAPE));
    }
    if sort.count().is_none() {
        return Err(fail("$expMovingAvg requires an explicit 'sortBy'"));
    }
    let input = Expression::parse(a.get("input").unwrap_or(&Bson::Null), ctx)?;
    let alpha = if let Some(n) = a.get("N") {
        if !super::is_number(n) {
            return Err(fail(format!(
                "'N' field must be an integer, but found type {}",
                super::type_name(n)
            )));
        }
        let f = to_f64(n);
        if f.fract() != 0.0 {
            return Err(fail(format!(
                "'N' field must be an integer, but found  {}. To use a non-integer, use the 'alpha' argument instead",
                nidus_expr::value::display_bson(n)
            )));
        }
        if f <= 0.0 {
            return Err(fail(format!(
                "'N' must be greater than zero. Got {}",
                f as i64
            )));
        }
        decimal::div(&decimal::from_i64(2), &decimal::from_i64(f as i64 + 1))
    } else if let Some(al) = a.get("alpha") {
        if !super::is_number(al) {
            return Err(fail("'alpha' must be a number"));
        }
        let f = to_f64(al);
        if f <= 0.0 || f >= 1.0 {
            return Err(fail(format!(
                "'alpha' must be between 0 and 1 (exclusive), found alpha: {}",
                nidus_expr::value::display_bson(al)
            )));
        }
        nidus_expr::value::to_decimal(al)
    } else {
        return Err(fail(format!(
            "Got unrecognized field in $expMovingAvg{SHAPE}"
        )));
    };
    Ok(Func::ExpMovingAvg { input, alpha })
}

/// A partition: the sortBy value of each document (the first sortBy field; None without).
/// The documents themselves are not needed: each output read what it uses from them into its
/// [`Inputs`] as the partition was read (so the documents may be spilled meanwhile).
pub struct Partition {
    pub sort_values: Vec<Value>,
    /// Whether the (single) sortBy field sorts descending.
    pub descending: bool,
}

/// What one output reads from each document of a partition, in order: `x` its argument (the
/// accumulator's input, `$shift`'s output, ...), `y` the second argument of `$covariance*`.
#[derive(Default)]
pub struct Inputs {
    pub x: Vec<Value>,
    pub y: Vec<Value>,
}

fn is_num(v: &Value) -> bool {
    matches!(v, Some(b) if super::is_number(b))
}

fn sort_number(v: &Value) -> Option<f64> {
    match v {
        Some(Bson::DateTime(d)) => Some(d.timestamp_millis() as f64),
        Some(b) if super::is_number(b) => Some(to_f64(b)),
        _ => None,
    }
}

impl WindowOutput {
    /// Reads what this output uses from the next document of the partition; returns the bytes
    /// the values hold.
    pub fn read(&self, d: &Document, ctx: &ExpCtx, inputs: &mut Inputs) -> Result<usize> {
        let x = match &self.func {
            Func::Rank(_) => return Ok(0),
            Func::Acc(spec) => spec.input(&mut ctx.variables(d))?,
            Func::Shift { output: e, .. }
            | Func::Derivative { input: e, .. }
            | Func::Integral { input: e, .. }
            | Func::ExpMovingAvg { input: e, .. }
            | Func::Locf(e)
            | Func::LinearFill(e) => ctx.evaluate(e, d)?,
            Func::Covariance { x, y, .. } => {
                let y = ctx.evaluate(y, d)?;
                let bytes = value_bytes(&y);
                inputs.y.push(y);
                let x = ctx.evaluate(x, d)?;
                let bytes = bytes + value_bytes(&x);
                inputs.x.push(x);
                return Ok(bytes);
            }
        };
        let bytes = value_bytes(&x);
        inputs.x.push(x);
        Ok(bytes)
    }

    /// The values of this output for every document of the partition, in order.
    pub fn compute(&self, part: &Partition, inputs: Inputs, ctx: &ExpCtx) -> Result<Vec<Value>> {
        let n = part.sort_values.len();
        let Inputs { x: vals, y: ys } = inputs;
        match &self.func {
            Func::Rank(kind) => {
                let mut out = Vec::with_capacity(n);
                let (mut rank, mut dense) = (0i64, 0i64);
                for i in 0..n {
                    let same = i > 0
                        && cmp_bson(
                            part.sort_values[i].as_ref().unwrap_or(&Bson::Null),
                            part.sort_values[i - 1].as_ref().unwrap_or(&Bson::Null),
                        )
                        .is_eq();
                    if !same {
                        rank = i as i64 + 1;
                        dense += 1;
                    }
                    let v = match kind {
                        Rank::Plain => rank,
                        Rank::Dense => dense,
                        Rank::DocumentNumber => i as i64 + 1,
                    };
                    out.push(Some(nidus_expr::value::int_or_long(v)));
                }
                Ok(out)
            }
            Func::Shift { by, default, .. } => {
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    let j = i as i64 + by;
                    if j < 0 || j >= n as i64 {
                        out.push(Some(default.clone()));
                    } else {
                        out.push(Some(vals[j as usize].clone().unwrap_or(Bson::Null)));
                    }
                }
                Ok(out)
            }
            Func::Locf(_) => {
                let mut last: Value = None;
                Ok(vals
                    .into_iter()
                    .map(|v| {
                        if nidus_expr::value::nullish(&v) {
                            Some(last.clone().unwrap_or(Bson::Null))
                        } else {
                            last = v.clone();
                            v
                        }
                    })
                    .collect())
            }
            Func::LinearFill(_) => self.linear_fill(vals, part),
            Func::ExpMovingAvg { alpha, .. } => {
                // As MongoDB's AccumulatorExpMovingAvg: Decimal128 arithmetic, a double result
                // unless a decimal was seen, non-numbers skipped (the current average stays),
                // null before the first number.
                let keep = decimal::sub(&decimal::from_i64(1), alpha);
                let mut state: Option<Decimal128> = None;
                let mut is_decimal = false;
                Ok(vals
                    .into_iter()
                    .map(|v| {
                        if let Some(b) = v.as_ref().filter(|b| super::is_number(b)) {
                            is_decimal |= matches!(b, Bson::Decimal128(_));
                            let x = nidus_expr::value::to_decimal(b);
                            state = Some(match state {
                                None => x,
                                Some(s) => {
                                    decimal::add(&decimal::mul(&x, alpha), &decimal::mul(&s, &keep))
                                }
                            });
                        }
                        Some(match state {
                            None => Bson::Null,
                            Some(s) if is_decimal => Bson::Decimal128(s),
                            Some(s) => Bson::Double(decimal::to_f64(&s)),
                        })
                    })
                    .collect())
            }
            _ => self.windowed(part, vals, ys, ctx),
        }
    }

    fn linear_fill(&self, vals: Vec<Value>, part: &Partition) -> Result<Vec<Value>> {
        let xs: Vec<Option<f64>> = part.sort_values.iter().map(sort_number).collect();
        let mut out: Vec<Value> = vals.clone();
        let known: Vec<usize> = (0..vals.len())
            .filter(|&i| !nidus_expr::value::nullish(&vals[i]))
            .collect();
        for &i in &known {
            if !is_num(&vals[i]) {
                return Err(Error::new(
                    ErrorCode::Location(6050106),
                    format!(
                        "There can be no non-numeric values for $linearFill, found {}",
                        nidus_expr::value::display(&vals[i])
                    ),
                ));
            }
        }
        for w in known.windows(2) {
            let (a, b) = (w[0], w[1]);
            let (Some(xa), Some(xb)) = (xs[a], xs[b]) else {
                continue;
            };
            let ya = vals[a].as_ref().map(to_f64).unwrap_or(0.0);
            let yb = vals[b].as_ref().map(to_f64).unwrap_or(0.0);
            for (i, slot) in out.iter_mut().enumerate().take(b).skip(a + 1) {
                if let Some(x) = xs[i] {
                    let y = if xb == xa {
                        ya
                    } else {
                        ya + (x - xa) * (yb - ya) / (xb - xa)
                    };
                    *slot = Some(Bson::Double(y));
                }
            }
        }
        for v in out.iter_mut() {
            if v.is_none() {
                *v = Some(Bson::Null);
            }
        }
        Ok(out)
    }

    /// The window `[lo, hi)` (document indexes) of each document.
    fn windows(&self, part: &Partition) -> Result<Vec<(usize, usize)>> {
        let n = part.sort_values.len();
        match &self.bounds {
            Bounds::Documents(lo, hi) => Ok((0..n)
                .map(|i| {
                    let at = |b: &Bound, unbounded: i64| -> i64 {
                        match b {
                            Bound::Unbounded => unbounded,
                            Bound::Current => i as i64,
                            Bound::At(k) => i as i64 + *k as i64,
                        }
                    };
                    let l = at(lo, 0).clamp(0, n as i64) as usize;
                    let h = (at(hi, n as i64 - 1) + 1).clamp(0, n as i64) as usize;
                    (l, h.max(l))
                })
                .collect()),
            Bounds::Range(lo, hi, unit) => {
                let mut keys = Vec::with_capacity(n);
                for v in &part.sort_values {
                    keys.push(range_key(v, unit.is_some())?);
                }
                let offset = |base: f64, k: f64| -> f64 {
                    match unit {
                        Some(u) => nidus_expr::date::add_time_unit(base as i64, u, k as i64)
                            .map(|x| x as f64)
                            .unwrap_or(if k < 0.0 { f64::MIN } else { f64::MAX }),
                        None => base + k,
                    }
                };
                Ok((0..n)
                    .map(|i| {
                        let base = keys[i];
                        let lower = match lo {
                            Bound::Unbounded => f64::NEG_INFINITY,
                            Bound::Current => base,
                            Bound::At(k) => offset(base, *k),
                        };
                        let upper = match hi {
                            Bound::Unbounded => f64::INFINITY,
                            Bound::Current => base,
                            Bound::At(k) => offset(base, *k),
                        };
                        let inside = |x: f64| x >= lower && x <= upper;
                        let (l, h) = if part.descending {
                            (
                                keys.partition_point(|&x| x > upper),
                                keys.partition_point(|&x| x >= lower),
                            )
                        } else {
                            (
                                keys.partition_point(|&x| x < lower),
                                keys.partition_point(|&x| x <= upper),
                            )
                        };
                        debug_assert!((l..h).all(|j| inside(keys[j])));
                        (l, h.max(l))
                    })
                    .collect())
            }
        }
    }

    fn windowed(
        &self,
        part: &Partition,
        inputs: Vec<Value>,
        second: Vec<Value>,
        ctx: &ExpCtx,
    ) -> Result<Vec<Value>> {
        let n = part.sort_values.len();
        let windows = self.windows(part)?;
        match &self.func {
            Func::Acc(spec) => {
                let empty = Document::new();
                let create = || -> Result<Box<dyn Accumulator>> {
                    let mut vars = ctx.variables(&empty);
                    spec.create(&mut vars)
                };
                let mut out = Vec::with_capacity(n);
                if self.bounds.is_unbounded() {
                    let mut acc = create()?;
                    for v in &inputs {
                        acc.process(v.clone())?;
                    }
                    let v = acc.finalize()?;
                    return Ok(vec![Some(v); n]);
                }
                let growing = windows.iter().all(|(l, _)| *l == 0);
                if growing {
                    let mut acc = create()?;
                    let mut fed = 0;
                    for &(_, h) in &windows {
                        while fed < h {
                            acc.process(inputs[fed].clone())?;
                            fed += 1;
                        }
                        let mut snap = create()?;
                        if fed > 0 {
                            snap.merge(acc.partial()?)?;
                        }
                        out.push(Some(snap.finalize()?));
                    }
                    return Ok(out);
                }
                for &(l, h) in &windows {
                    let mut acc = create()?;
                    for v in &inputs[l..h] {
                        acc.process(v.clone())?;
                    }
                    out.push(Some(acc.finalize()?));
                }
                Ok(out)
            }
            Func::Derivative { unit, .. } | Func::Integral { unit, .. } => {
                let derivative = matches!(self.func, Func::Derivative { .. });
                let ys = inputs;
                let mut xs = Vec::with_capacity(n);
                for v in &part.sort_values {
                    xs.push(self.time_x(v, unit, derivative)?);
                }
                let unit_ms = unit
                    .as_deref()
                    .and_then(nidus_expr::date::time_unit_millis)
                    .unwrap_or(1) as f64;
                let mut out = Vec::with_capacity(n);
                for &(l, h) in &windows {
                    if h <= l {
                        out.push(Some(Bson::Null));
                        continue;
                    }
                    let num = |i: usize| ys[i].as_ref().filter(|b| super::is_number(b)).map(to_f64);
                    if derivative {
                        let (a, b) = (l, h - 1);
                        let v = match (num(a), num(b), xs[a], xs[b]) {
                            (Some(ya), Some(yb), Some(xa), Some(xb)) if b > a && xb != xa => {
                                Bson::Double((yb - ya) / ((xb - xa) / unit_ms))
                            }
                            _ => Bson::Null,
                        };
                        out.push(Some(v));
                    } else {
                        let mut total = 0.0;
                        for k in l..h.saturating_sub(1) {
                            if let (Some(ya), Some(yb), Some(xa), Some(xb)) =
                                (num(k), num(k + 1), xs[k], xs[k + 1])
                            {
                                total += (xb - xa) / unit_ms * (ya + yb) / 2.0;
                            }
                        }
                        out.push(Some(Bson::Double(total)));
                    }
                }
                Ok(out)
            }
            Func::Covariance { samp, .. } => {
                let as_num = |v: Value| -> Option<f64> {
                    match v {
                        Some(Bson::DateTime(d)) => Some(d.timestamp_millis() as f64),
                        Some(b) if super::is_number(&b) => Some(to_f64(&b)),
                        _ => None,
                    }
                };
                let pts: Vec<Option<(f64, f64)>> = inputs
                    .into_iter()
                    .zip(second)
                    .map(|(x, y)| as_num(x).zip(as_num(y)))
                    .collect();
                Ok(windows
                    .iter()
                    .map(|&(l, h)| {
                        let p: Vec<(f64, f64)> = pts[l..h].iter().flatten().copied().collect();
                        let c = p.len() as f64;
                        if p.is_empty() || (*samp && p.len() < 2) {
                            return Some(Bson::Null);
                        }
                        let mx = p.iter().map(|q| q.0).sum::<f64>() / c;
                        let my = p.iter().map(|q| q.1).sum::<f64>() / c;
                        let s: f64 = p.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum();
                        Some(Bson::Double(if *samp { s / (c - 1.0) } else { s / c }))
                    })
                    .collect())
            }
            _ => Ok(vec![Some(Bson::Null); n]),
        }
    }

    /// The x coordinate of a document for `$derivative`/`$integral`: a number, or a date's
    /// milliseconds when `unit` is given (MongoDB's checks and codes).
    fn time_x(&self, v: &Value, unit: &Option<String>, derivative: bool) -> Result<Option<f64>> {
        let is_date = matches!(v, Some(Bson::DateTime(_)));
        if unit.is_some() && !is_date {
            return Err(if derivative {
                Error::new(
                    ErrorCode::Location(5624900),
                    "$derivative with unit expects the sortBy field to be a Date",
                )
            } else {
                Error::new(
                    ErrorCode::Location(5423901),
                    "$integral with unit expects the sortBy field to be a Date",
                )
            });
        }
        if unit.is_none() && is_date {
            return Err(if derivative {
                Error::new(
                    ErrorCode::Location(5624901),
                    "$derivative where the sortBy is a Date requires an 'unit'",
                )
            } else {
                Error::new(
                    ErrorCode::Location(5423902),
                    "$integral where the sortBy is a Date requires an 'unit'",
                )
            });
        }
        Ok(sort_number(v))
    }
}

/// A document's position on a range window's axis.
fn range_key(v: &Value, unit: bool) -> Result<f64> {
    let type_name = |v: &Value| v.as_ref().map_or("missing", super::type_name);
    if unit {
        return match v {
            Some(Bson::DateTime(d)) => Ok(d.timestamp_millis() as f64),
            _ => Err(Error::new(
                ErrorCode::Location(5429513),
                format!(
                    "Invalid range: Expected the sortBy field to be a Date, but it was {}",
                    type_name(v)
                ),
            )),
        };
    }
    match v {
        Some(Bson::DateTime(_)) => Err(Error::new(
            ErrorCode::Location(5429413),
            "Invalid range: For windows that involve date or time ranges, a unit must be provided.",
        )),
        Some(b) if super::is_number(b) => Ok(to_f64(b)),
        _ => Err(Error::new(
            ErrorCode::Location(5429414),
            format!(
                "Invalid range: Expected the sortBy field to be a number, but it was {}",
                type_name(v)
            ),
        )),
    }
}

/// The bytes a value holds (memory accounting).
fn value_bytes(v: &Value) -> usize {
    v.as_ref().map_or(16, super::context::bson_bytes)
}
