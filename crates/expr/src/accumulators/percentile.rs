//! `$percentile` and `$median` (MongoDB 7.0+): as `$group` and window accumulators and as
//! expressions over an array.
//!
//! The only method is `"approximate"` (MongoDB 8.0 refuses the others). MongoDB computes it
//! with a t-digest whose centroids, for the inputs of any realistic group size below its
//! compression, each hold one value, and then answers the value at the discrete rank
//! `max(0, ceil(n * p) - 1)` of the sorted numeric inputs (`p >= 1`: the largest). This keeps
//! every numeric input and answers that rank exactly, which is what the digest answers for
//! such inputs and a closer answer for larger ones. Non-numeric inputs and NaN are ignored;
//! the results are doubles; without numeric inputs, null (one per `p` for `$percentile`).

use super::Accumulator;
use crate::expression::{Expression, Operator};
use crate::value::{err, is_numeric, to_f64, Value};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// What `$percentile`/`$median` compute: the percentiles `ps` (`[0.5]` for `$median`).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileSpec {
    pub median: bool,
    pub ps: Vec<f64>,
}

/// Where the specification is parsed: MongoDB's error codes for a non-object differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Accumulator,
    Expression,
}

fn idl_error(code: i32, msg: String) -> Error {
    Error::new(ErrorCode::Location(code), msg)
}

/// Parses `{$percentile: {input, p, method}}` / `{$median: {input, method}}`: the input
/// expression and what to compute, with MongoDB's IDL and `parseP` errors in their order.
pub fn parse(
    name: &str,
    arg: &Bson,
    ctx: &ParseContext,
    context: Context,
) -> Result<(Expression, QuantileSpec)> {
    let median = name == "$median";
    let Bson::Document(spec) = arg else {
        let code = match (median, context) {
            (false, Context::Accumulator) => 7429703,
            (true, Context::Accumulator) => 7436100,
            (false, Context::Expression) => 7436200,
            (true, Context::Expression) => 7436201,
        };
        return Err(err(
            code,
            format!(
                "specification must be an object; found {name}: {}",
                nidus_common::shell::format(arg)
            ),
        ));
    };
    let (mut input, mut p, mut method) = (None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "input" => input = Some(v),
            "p" if !median => p = Some(v),
            "method" => match v {
                Bson::String(m) if m == "approximate" => method = Some(m),
                Bson::String(_) => {
                    return Err(Error::bad_value(
                        "Currently only 'approximate' can be used as percentile 'method'.",
                    ))
                }
                other => {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '{name}.method' is the wrong type '{}', expected type 'string'",
                        crate::value::type_name_bson(other)
                    )))
                }
            },
            other => {
                return Err(idl_error(
                    40415,
                    format!("BSON field '{name}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let missing = |field: &str| {
        idl_error(
            40414,
            format!("BSON field '{name}.{field}' is missing but a required field"),
        )
    };
    let input = input.ok_or_else(|| missing("input"))?;
    let p = match (median, p) {
        (true, _) => None,
        (false, Some(p)) => Some(p),
        (false, None) => return Err(missing("p")),
    };
    if method.is_none() {
        return Err(missing("method"));
    }
    let input = Expression::parse(input, ctx)?;
    let ps = match p {
        None => vec![0.5],
        Some(p) => parse_p(p, ctx)?,
    };
    Ok((input, QuantileSpec { median, ps }))
}

/// A constant expression's value (a literal, `$literal`, or an array of them).
fn constant(e: &Expression) -> Option<Bson> {
    match e {
        Expression::Constant(b) => Some(b.clone()),
        Expression::Array(items) => items
            .iter()
            .map(constant)
            .collect::<Option<Vec<_>>>()
            .map(Bson::Array),
        _ => None,
    }
}

/// MongoDB's `parseP`: a constant array of numbers from [0, 1].
fn parse_p(p: &Bson, ctx: &ParseContext) -> Result<Vec<f64>> {
    let Some(value) = constant(&Expression::parse(p, ctx)?) else {
        return Err(err(
            7750300,
            format!(
                "The $percentile 'p' field must be an array of constant values, but found value: {}.",
                nidus_common::shell::format(p)
            ),
        ));
    };
    const MSG: &str =
        "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: ";
    let items = match &value {
        Bson::Array(items) if !items.is_empty() => items,
        other => {
            return Err(err(
                7750301,
                format!("{MSG}{}", crate::value::display_bson(other)),
            ))
        }
    };
    items
        .iter()
        .map(|item| {
            if !is_numeric(item) {
                return Err(err(
                    7750302,
                    format!("{MSG}{}", crate::value::display_bson(item)),
                ));
            }
            let p = to_f64(item);
            if !(0.0..=1.0).contains(&p) {
                return Err(err(
                    7750303,
                    format!("{MSG}{}", crate::value::format_double(p)),
                ));
            }
            Ok(p)
        })
        .collect()
}

/// The 0-based rank of percentile `p` among `n` sorted values (MongoDB's
/// `computeTrueRank`, resolving ties toward the lower rank).
fn rank(n: usize, p: f64) -> usize {
    if p >= 1.0 {
        return n - 1;
    }
    ((n as f64 * p).ceil() as usize).saturating_sub(1)
}

/// The percentiles `ps` of `values` (sorted here), or None without values.
fn percentiles(values: &mut [f64], ps: &[f64]) -> Option<Vec<f64>> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(ps.iter().map(|p| values[rank(values.len(), *p)]).collect())
}

impl QuantileSpec {
    /// The result for `values`: a double (`$median`) or an array of doubles, nulls without
    /// values.
    fn result(&self, values: &mut [f64]) -> Bson {
        match (percentiles(values, &self.ps), self.median) {
            (Some(r), true) => Bson::Double(r[0]),
            (None, true) => Bson::Null,
            (Some(r), false) => Bson::Array(r.into_iter().map(Bson::Double).collect()),
            (None, false) => Bson::Array(vec![Bson::Null; self.ps.len()]),
        }
    }

    pub fn create(&self) -> Box<dyn Accumulator> {
        Box::new(Quantile {
            spec: self.clone(),
            values: Vec::new(),
        })
    }
}

/// The accumulator: every numeric input, as a double.
#[derive(Debug)]
pub struct Quantile {
    spec: QuantileSpec,
    values: Vec<f64>,
}

impl Accumulator for Quantile {
    fn process(&mut self, v: Value) -> Result<()> {
        if let Some(b) = v.filter(is_numeric) {
            let x = to_f64(&b);
            if !x.is_nan() {
                self.values.push(x);
            }
        }
        Ok(())
    }

    fn partial(&self) -> Result<Bson> {
        Ok(Bson::Array(
            self.values.iter().map(|x| Bson::Double(*x)).collect(),
        ))
    }

    fn merge(&mut self, partial: Bson) -> Result<()> {
        let Bson::Array(items) = partial else {
            return Err(Error::internal("a $percentile partial state is an array"));
        };
        self.values
            .extend(items.iter().filter(|b| is_numeric(b)).map(to_f64));
        Ok(())
    }

    fn finalize(&mut self) -> Result<Bson> {
        Ok(self.spec.result(&mut self.values))
    }

    fn mem_usage(&self) -> usize {
        std::mem::size_of::<f64>() * self.values.capacity()
    }
}

/// The expression form: over a number (every percentile is that number), an array (its
/// numeric elements), or anything else (no values).
#[derive(Debug)]
struct QuantileExpr {
    name: &'static str,
    input: Expression,
    spec: QuantileSpec,
}

impl Operator for QuantileExpr {
    fn name(&self) -> &str {
        self.name
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let mut values: Vec<f64> = match self.input.evaluate(vars)? {
            Some(b) if is_numeric(&b) => vec![to_f64(&b)],
            Some(Bson::Array(items)) => items
                .iter()
                .filter(|b| is_numeric(b))
                .map(to_f64)
                .filter(|x| !x.is_nan())
                .collect(),
            _ => Vec::new(),
        };
        Ok(Some(self.spec.result(&mut values)))
    }

    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        d.insert("input", self.input.serialize());
        if !self.spec.median {
            d.insert(
                "p",
                Bson::Array(self.spec.ps.iter().map(|p| Bson::Double(*p)).collect()),
            );
        }
        d.insert("method", "approximate");
        let mut out = Document::new();
        out.insert(self.name, d);
        Bson::Document(out)
    }

    fn children(&self) -> Vec<&Expression> {
        vec![&self.input]
    }
}

/// `{$percentile: ...}` / `{$median: ...}` as an expression.
pub(crate) fn parse_expression(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
) -> Result<Expression> {
    let (input, spec) = parse(name, arg, ctx, Context::Expression)?;
    Ok(Expression::Op(std::sync::Arc::new(QuantileExpr {
        name,
        input,
        spec,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_ranks_as_mongodb_computes_them() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        let r = percentiles(&mut v, &[0.0, 0.2, 0.21, 0.5, 0.9, 1.0]).unwrap();
        assert_eq!(r, vec![1.0, 1.0, 2.0, 3.0, 5.0, 5.0]);
        let mut even = vec![1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentiles(&mut even, &[0.5]).unwrap(), vec![2.0]);
        assert_eq!(percentiles(&mut [], &[0.5]), None);
        let mut inf = vec![f64::INFINITY, 1.0, f64::NEG_INFINITY];
        assert_eq!(
            percentiles(&mut inf, &[0.0, 0.5, 1.0]).unwrap(),
            vec![f64::NEG_INFINITY, 1.0, f64::INFINITY]
        );
    }
}
