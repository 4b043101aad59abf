//! Arrays: `$arrayElemAt $first $last $concatArrays $filter $map $reduce $in $indexOfArray
//! $isArray $range $reverseArray $size $slice $zip $sortArray`.

use crate::expression::{fixed, named_raw, ranged, variadic, Expression, Nary, Operator, Parser};
use crate::value::{
    display, err, integral32, is_numeric, nullish, to_i64, truthy, type_name, type_name_bson,
    values_equal, Value,
};
use crate::variables::{validate_name_for_write, ParseContext, VarId, Variables};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$arrayElemAt", |n, a, c| fixed(n, a, c, 2, array_elem_at)),
    ("$first", |n, a, c| fixed(n, a, c, 1, first_last)),
    ("$last", |n, a, c| fixed(n, a, c, 1, first_last)),
    ("$concatArrays", |n, a, c| variadic(n, a, c, concat_arrays)),
    ("$filter", parse_filter),
    ("$map", parse_map),
    ("$reduce", parse_reduce),
    ("$in", |n, a, c| fixed(n, a, c, 2, in_array)),
    ("$indexOfArray", |n, a, c| {
        ranged(n, a, c, 2, 4, index_of_array)
    }),
    ("$isArray", |n, a, c| fixed(n, a, c, 1, is_array)),
    ("$range", |n, a, c| ranged(n, a, c, 2, 3, range)),
    ("$reverseArray", |n, a, c| fixed(n, a, c, 1, reverse_array)),
    ("$size", |n, a, c| fixed(n, a, c, 1, size)),
    ("$slice", |n, a, c| ranged(n, a, c, 2, 3, slice)),
    ("$zip", parse_zip),
    ("$sortArray", parse_sort_array),
];

/// MongoDB's `internalQueryMaxRangeBytes` default.
const MAX_RANGE_BYTES: i64 = 64 * 1024 * 1024;

fn elem_at(name: &str, arity: usize, array: Value, index: Value) -> Result<Value> {
    if nullish(&array) || nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = array else {
        return Err(err(
            28689,
            format!(
                "{name}'s {} must be an array, but is {}",
                if arity == 1 {
                    "argument"
                } else {
                    "first argument"
                },
                type_name(&array)
            ),
        ));
    };
    let idx = index.unwrap_or(Bson::Null);
    if !is_numeric(&idx) {
        return Err(err(
            28690,
            format!(
                "{name}'s second argument must be a numeric value, but is {}",
                type_name_bson(&idx)
            ),
        ));
    }
    if !integral32(&idx) {
        return Err(err(
            28691,
            format!(
                "{name}'s second argument must be representable as a 32-bit integer: {}",
                crate::value::format_double(crate::value::to_f64(&idx))
            ),
        ));
    }
    let i = to_i64(&idx);
    let len = a.len() as i64;
    let pos = if i < 0 { len + i } else { i };
    if pos < 0 || pos >= len {
        return Ok(None);
    }
    Ok(a.into_iter().nth(pos as usize))
}

fn array_elem_at(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = op.arg(0, vars)?;
    let i = op.arg(1, vars)?;
    elem_at(op.name, 2, a, i)
}

fn first_last(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = op.arg(0, vars)?;
    let i = if op.name == "$first" { 0 } else { -1 };
    elem_at(op.name, 1, a, Some(Bson::Int32(i)))
}

fn concat_arrays(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut out = Vec::new();
    for e in &op.args {
        let v = e.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        match v {
            Some(Bson::Array(a)) => out.extend(a),
            other => {
                return Err(err(
                    28664,
                    format!(
                        "$concatArrays only supports arrays, not {}",
                        type_name(&other)
                    ),
                ))
            }
        }
    }
    Ok(Some(Bson::Array(out)))
}

fn in_array(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let needle = op.arg(0, vars)?;
    let hay = op.arg(1, vars)?;
    let Some(Bson::Array(a)) = hay else {
        return Err(err(
            40081,
            format!(
                "$in requires an array as a second argument, found: {}",
                type_name(&hay)
            ),
        ));
    };
    let found = match &needle {
        Some(n) => a.iter().any(|x| values_equal(n, x)),
        None => false,
    };
    Ok(Some(Bson::Boolean(found)))
}

fn index_arg(v: &Value, what: &str) -> Result<i64> {
    let b = v.clone().unwrap_or(Bson::Null);
    if !integral32(&b) {
        return Err(err(
            40096,
            format!(
                "$indexOfArrayrequires an integral {what}, found a value of type: {}, with value: {}",
                type_name(v),
                display(v)
            ),
        ));
    }
    let n = to_i64(&b);
    if n < 0 {
        return Err(err(
            40097,
            format!(
                "$indexOfArray requires a nonnegative {what}, found: {}",
                display(v)
            ),
        ));
    }
    Ok(n)
}

fn index_of_array(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let arr = op.arg(0, vars)?;
    if nullish(&arr) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = arr else {
        return Err(err(
            40090,
            format!(
                "$indexOfArray requires an array as a first argument, found: {}",
                type_name(&arr)
            ),
        ));
    };
    let start = if op.args.len() > 2 {
        index_arg(&op.arg(2, vars)?, "starting index")? as usize
    } else {
        0
    };
    let mut end = a.len();
    if op.args.len() > 3 {
        end = end.min(index_arg(&op.arg(3, vars)?, "ending index")? as usize);
    }
    let target = op.arg(1, vars)?;
    for (i, el) in a.iter().enumerate().take(end).skip(start) {
        if target.as_ref().is_some_and(|t| values_equal(el, t)) {
            return Ok(Some(Bson::Int32(i as i32)));
        }
    }
    Ok(Some(Bson::Int32(-1)))
}

fn is_array(op: &Nary, vars: &mut Variables) -> Result<Value> {
    Ok(Some(Bson::Boolean(matches!(
        op.arg(0, vars)?,
        Some(Bson::Array(_))
    ))))
}

fn range(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let start = op.arg(0, vars)?;
    let end = op.arg(1, vars)?;
    let int_arg = |v: &Value, c1: i32, c2: i32, what: &str| -> Result<i64> {
        match v {
            Some(b) if is_numeric(b) => {
                if !integral32(b) {
                    return Err(err(
                        c2,
                        format!(
                            "$range requires a{} {what} value that can be represented as a 32-bit integer, found value: {}",
                            if what == "ending" { "n" } else { "" },
                            display(v)
                        ),
                    ));
                }
                Ok(to_i64(b))
            }
            other => Err(err(
                c1,
                format!(
                    "$range requires a numeric {what} value, found value of type: {}",
                    type_name(other)
                ),
            )),
        }
    };
    let mut cur = int_arg(&start, 34443, 34444, "starting")?;
    let end = int_arg(&end, 34445, 34446, "ending")?;
    let mut step = 1i64;
    if op.args.len() == 3 {
        let s = op.arg(2, vars)?;
        step = match &s {
            Some(b) if is_numeric(b) => {
                if !integral32(b) {
                    return Err(err(
                        34448,
                        format!(
                            "$range requires a step value that can be represented as a 32-bit integer, found value: {}",
                            display(&s)
                        ),
                    ));
                }
                to_i64(b)
            }
            other => {
                return Err(err(
                    34447,
                    format!(
                        "$range requires a numeric step value, found value of type:{}",
                        type_name(other)
                    ),
                ))
            }
        };
        if step == 0 {
            return Err(err(34449, "$range requires a non-zero step value"));
        }
    }
    let steps = (end - cur) / step;
    let length = if steps >= 0 { 1 + steps } else { 0 };
    let mem = 24 + length * 16;
    if mem >= MAX_RANGE_BYTES {
        return Err(Error::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "$range would use too much memory ({mem} bytes) and cannot spill to disk. Memory limit: {MAX_RANGE_BYTES} bytes"
            ),
        ));
    }
    let mut out = Vec::new();
    while if step > 0 { cur < end } else { cur > end } {
        out.push(Bson::Int32(cur as i32));
        cur += step;
    }
    Ok(Some(Bson::Array(out)))
}

fn reverse_array(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let v = op.arg(0, vars)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    match v {
        Some(Bson::Array(mut a)) => {
            a.reverse();
            Ok(Some(Bson::Array(a)))
        }
        other => Err(err(
            34435,
            format!(
                "The argument to $reverseArray must be an array, but was of type: {}",
                type_name(&other)
            ),
        )),
    }
}

fn size(op: &Nary, vars: &mut Variables) -> Result<Value> {
    match op.arg(0, vars)? {
        Some(Bson::Array(a)) => Ok(Some(crate::value::int_or_long(a.len() as i64))),
        other => Err(err(
            17124,
            format!(
                "The argument to $size must be an array. Type of argument: {}",
                type_name(&other)
            ),
        )),
    }
}

fn slice(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let arr = op.arg(0, vars)?;
    let arg2 = op.arg(1, vars)?;
    if nullish(&arr) || nullish(&arg2) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(a)) = arr else {
        return Err(err(
            28724,
            format!(
                "First argument to $slice must be an array, but is of type: {}",
                type_name(&arr)
            ),
        ));
    };
    let a2 = arg2.clone().unwrap_or(Bson::Null);
    if !is_numeric(&a2) {
        return Err(err(
            28725,
            format!(
                "Second argument to $slice must be a numeric value, but is of type: {}",
                type_name(&arg2)
            ),
        ));
    }
    if !integral32(&a2) {
        return Err(err(
            28726,
            format!(
                "Second argument to $slice can't be represented as a 32-bit integer: {}",
                crate::value::format_double(crate::value::to_f64(&a2))
            ),
        ));
    }
    let len = a.len() as i64;
    let n2 = to_i64(&a2);
    let (start, end) = if op.args.len() == 2 {
        if n2 >= 0 {
            (0, n2.min(len))
        } else {
            ((len + n2).max(0), len)
        }
    } else {
        let start = if n2 < 0 {
            (len + n2).max(0)
        } else {
            n2.min(len)
        };
        let c = op.arg(2, vars)?;
        if nullish(&c) {
            return Ok(Some(Bson::Null));
        }
        let cb = c.clone().unwrap_or(Bson::Null);
        if !is_numeric(&cb) {
            return Err(err(
                28727,
                format!(
                    "Third argument to $slice must be numeric, but is of type: {}",
                    type_name(&c)
                ),
            ));
        }
        if !integral32(&cb) {
            return Err(err(
                28728,
                format!(
                    "Third argument to $slice can't be represented as a 32-bit integer: {}",
                    crate::value::format_double(crate::value::to_f64(&cb))
                ),
            ));
        }
        let count = to_i64(&cb);
        if count <= 0 {
            return Err(err(
                28729,
                format!("Third argument to $slice must be positive: {count}"),
            ));
        }
        (start, (start + count).min(len))
    };
    Ok(Some(Bson::Array(
        a[start as usize..end.max(start) as usize].to_vec(),
    )))
}

// ---- $map / $filter / $reduce ----------------------------------------------------------------

/// Parses `as` (default `this`) and the expression that sees it.
fn bind_var(
    as_raw: Option<&Bson>,
    body: &Bson,
    ctx: &ParseContext,
) -> Result<(String, VarId, Expression)> {
    let name = match as_raw {
        None => "this".to_string(),
        Some(Bson::String(s)) => s.clone(),
        Some(other) => crate::value::display_bson(other),
    };
    validate_name_for_write(&name)?;
    let mark = ctx.mark();
    let id = ctx.define(&name);
    let e = Expression::parse(body, ctx);
    ctx.restore(mark);
    Ok((name, id, e?))
}

/// `{$map: {input, as, in}}`.
#[derive(Debug)]
pub struct Map {
    input: Expression,
    var_name: String,
    var: VarId,
    body: Expression,
}

fn parse_map(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["input", "as", "in"],
        || err(16878, "$map only supports an object as its argument"),
        |k| err(16879, format!("Unrecognized parameter to $map: {k}")),
    )?;
    let input = raw[0].ok_or_else(|| err(16880, "Missing 'input' parameter to $map"))?;
    let body = raw[2].ok_or_else(|| err(16882, "Missing 'in' parameter to $map"))?;
    let input = Expression::parse(input, ctx)?;
    let (var_name, var, body) = bind_var(raw[1], body, ctx)?;
    Ok(Expression::op(Map {
        input,
        var_name,
        var,
        body,
    }))
}

impl Operator for Map {
    fn name(&self) -> &str {
        "$map"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let v = self.input.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        let Some(Bson::Array(items)) = v else {
            return Err(err(
                16883,
                format!("input to $map must be an array not {}", type_name(&v)),
            ));
        };
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            vars.set(self.var, Some(it));
            out.push(self.body.evaluate(vars)?.unwrap_or(Bson::Null));
        }
        Ok(Some(Bson::Array(out)))
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert("input", self.input.serialize());
        args.insert("as", self.var_name.clone());
        args.insert("in", self.body.serialize());
        let mut d = Document::new();
        d.insert("$map", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        vec![&self.input, &self.body]
    }
}

/// `{$filter: {input, as, cond, limit}}`.
#[derive(Debug)]
pub struct Filter {
    input: Expression,
    var_name: String,
    var: VarId,
    cond: Expression,
    limit: Option<Expression>,
}

fn parse_filter(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["input", "as", "cond", "limit"],
        || err(28646, "$filter only supports an object as its argument"),
        |k| err(28647, format!("Unrecognized parameter to $filter: {k}")),
    )?;
    let input = raw[0].ok_or_else(|| err(28648, "Missing 'input' parameter to $filter"))?;
    let cond = raw[2].ok_or_else(|| err(28650, "Missing 'cond' parameter to $filter"))?;
    let input = Expression::parse(input, ctx)?;
    let (var_name, var, cond) = bind_var(raw[1], cond, ctx)?;
    let limit = match raw[3] {
        Some(l) => Some(Expression::parse(l, ctx)?),
        None => None,
    };
    Ok(Expression::op(Filter {
        input,
        var_name,
        var,
        cond,
        limit,
    }))
}

impl Operator for Filter {
    fn name(&self) -> &str {
        "$filter"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let v = self.input.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        let Some(Bson::Array(items)) = v else {
            return Err(err(
                28651,
                format!("input to $filter must be an array not {}", type_name(&v)),
            ));
        };
        if items.is_empty() {
            return Ok(Some(Bson::Array(items)));
        }
        let mut remaining: Option<i64> = None;
        if let Some(l) = &self.limit {
            let lv = l.evaluate(vars)?;
            if !nullish(&lv) {
                let b = lv.clone().unwrap_or(Bson::Null);
                if !integral32(&b) {
                    return Err(err(
                        327391,
                        format!(
                            "$filter: limit must be represented as a 32-bit integral value: {}",
                            display(&lv)
                        ),
                    ));
                }
                let n = to_i64(&b);
                if n <= 0 {
                    return Err(err(
                        327392,
                        format!("$filter: limit must be greater than 0: {}", display(&lv)),
                    ));
                }
                remaining = Some(n);
            }
        }
        let mut out = Vec::new();
        for it in items {
            vars.set(self.var, Some(it.clone()));
            if truthy(&self.cond.evaluate(vars)?) {
                out.push(it);
                if let Some(r) = remaining.as_mut() {
                    *r -= 1;
                    if *r == 0 {
                        break;
                    }
                }
            }
        }
        Ok(Some(Bson::Array(out)))
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert("input", self.input.serialize());
        args.insert("as", self.var_name.clone());
        args.insert("cond", self.cond.serialize());
        if let Some(l) = &self.limit {
            args.insert("limit", l.serialize());
        }
        let mut d = Document::new();
        d.insert("$filter", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        let mut c = vec![&self.input, &self.cond];
        if let Some(l) = &self.limit {
            c.push(l);
        }
        c
    }
}

/// `{$reduce: {input, initialValue, in}}` with `$$this` and `$$value`.
#[derive(Debug)]
pub struct Reduce {
    input: Expression,
    initial: Expression,
    body: Expression,
    this: VarId,
    value: VarId,
}

fn parse_reduce(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["input", "initialValue", "in"],
        || {
            err(
                40075,
                format!(
                    "$reduce requires an object as an argument, found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(40076, format!("$reduce found an unknown argument: {k}")),
    )?;
    let input = raw[0].ok_or_else(|| err(40077, "$reduce requires 'input' to be specified"))?;
    let initial =
        raw[1].ok_or_else(|| err(40078, "$reduce requires 'initialValue' to be specified"))?;
    let body = raw[2].ok_or_else(|| err(40079, "$reduce requires 'in' to be specified"))?;
    let input = Expression::parse(input, ctx)?;
    let initial = Expression::parse(initial, ctx)?;
    let mark = ctx.mark();
    let this = ctx.define("this");
    let value = ctx.define("value");
    let body = Expression::parse(body, ctx);
    ctx.restore(mark);
    Ok(Expression::op(Reduce {
        input,
        initial,
        body: body?,
        this,
        value,
    }))
}

impl Operator for Reduce {
    fn name(&self) -> &str {
        "$reduce"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let v = self.input.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        let Some(Bson::Array(items)) = v else {
            return Err(err(
                40080,
                format!(
                    "$reduce requires that 'input' be an array, found: {}",
                    display(&v)
                ),
            ));
        };
        let mut acc = self.initial.evaluate(vars)?;
        for it in items {
            vars.set(self.this, Some(it));
            vars.set(self.value, acc);
            acc = self.body.evaluate(vars)?;
        }
        Ok(acc)
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert("input", self.input.serialize());
        args.insert("initialValue", self.initial.serialize());
        args.insert("in", self.body.serialize());
        let mut d = Document::new();
        d.insert("$reduce", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        vec![&self.input, &self.initial, &self.body]
    }
}

// ---- $zip ------------------------------------------------------------------------------------

/// `{$zip: {inputs, useLongestLength, defaults}}`.
#[derive(Debug)]
pub struct Zip {
    inputs: Vec<Expression>,
    defaults: Vec<Expression>,
    longest: bool,
}

fn parse_zip(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["inputs", "defaults", "useLongestLength"],
        || {
            err(
                34460,
                format!(
                    "$zip only supports an object as an argument, found {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(34464, format!("$zip found an unknown argument: {k}")),
    )?;
    let mut inputs = Vec::new();
    if let Some(i) = raw[0] {
        let Bson::Array(a) = i else {
            return Err(err(
                34461,
                format!(
                    "inputs must be an array of expressions, found {}",
                    type_name_bson(i)
                ),
            ));
        };
        for e in a {
            inputs.push(Expression::parse(e, ctx)?);
        }
    }
    let mut defaults = Vec::new();
    if let Some(d) = raw[1] {
        let Bson::Array(a) = d else {
            return Err(err(
                34462,
                format!(
                    "defaults must be an array of expressions, found {}",
                    type_name_bson(d)
                ),
            ));
        };
        for e in a {
            defaults.push(Expression::parse(e, ctx)?);
        }
    }
    let longest = match raw[2] {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(_) => {
            return Err(err(
                34463,
                format!(
                    "useLongestLength must be a bool, found {}",
                    type_name_bson(arg)
                ),
            ))
        }
    };
    if inputs.is_empty() {
        return Err(err(34465, "$zip requires at least one input array"));
    }
    if !longest && !defaults.is_empty() {
        return Err(err(
            34466,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    if !defaults.is_empty() && defaults.len() != inputs.len() {
        return Err(err(34467, "defaults and inputs must have the same length"));
    }
    Ok(Expression::op(Zip {
        inputs,
        defaults,
        longest,
    }))
}

impl Operator for Zip {
    fn name(&self) -> &str {
        "$zip"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let mut arrays = Vec::with_capacity(self.inputs.len());
        for e in &self.inputs {
            let v = e.evaluate(vars)?;
            if nullish(&v) {
                return Ok(Some(Bson::Null));
            }
            match v {
                Some(Bson::Array(a)) => arrays.push(a),
                other => {
                    return Err(err(
                        34468,
                        format!(
                            "$zip found a non-array expression in input: {}",
                            display(&other)
                        ),
                    ))
                }
            }
        }
        let min = arrays.iter().map(Vec::len).min().unwrap_or(0);
        let max = arrays.iter().map(Vec::len).max().unwrap_or(0);
        let mut defaults = vec![Bson::Null; arrays.len()];
        if min != max {
            for (i, d) in self.defaults.iter().enumerate() {
                defaults[i] = d.evaluate(vars)?.unwrap_or(Bson::Null);
            }
        }
        let n = if self.longest { max } else { min };
        let out = (0..n)
            .map(|row| {
                Bson::Array(
                    arrays
                        .iter()
                        .enumerate()
                        .map(|(c, a)| a.get(row).cloned().unwrap_or_else(|| defaults[c].clone()))
                        .collect(),
                )
            })
            .collect();
        Ok(Some(Bson::Array(out)))
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert(
            "inputs",
            self.inputs
                .iter()
                .map(Expression::serialize)
                .collect::<Vec<_>>(),
        );
        args.insert(
            "defaults",
            self.defaults
                .iter()
                .map(Expression::serialize)
                .collect::<Vec<_>>(),
        );
        args.insert("useLongestLength", self.longest);
        let mut d = Document::new();
        d.insert("$zip", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        self.inputs.iter().chain(self.defaults.iter()).collect()
    }
}

// ---- $sortArray ------------------------------------------------------------------------------

/// `{$sortArray: {input, sortBy}}`.
#[derive(Debug)]
pub struct SortArray {
    input: Expression,
    sort_by: Bson,
    /// Whole-value direction, or per-field (path, descending).
    pattern: SortPattern,
}

#[derive(Debug)]
enum SortPattern {
    Whole(bool),
    Fields(Vec<(Vec<String>, bool)>),
}

fn direction(v: &Bson) -> Option<bool> {
    match crate::value::as_exact_i64(v) {
        Some(1) if is_numeric(v) => Some(false),
        Some(-1) if is_numeric(v) => Some(true),
        _ => None,
    }
}

fn parse_sort_array(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["input", "sortBy"],
        || {
            err(
                2942500,
                format!(
                    "$sortArray requires an object as an argument, found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| {
            err(
                2942501,
                format!("$sortArray found an unknown argument: {k}"),
            )
        },
    )?;
    let input =
        raw[0].ok_or_else(|| err(2942502, "$sortArray requires 'input' to be specified"))?;
    let sort_by =
        raw[1].ok_or_else(|| err(2942503, "$sortArray requires 'sortBy' to be specified"))?;
    let pattern = match sort_by {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(err(2942505, "$sortArray: sortBy must not be empty"));
            }
            let mut fields = Vec::new();
            for (k, v) in d {
                let desc = direction(v).ok_or_else(|| {
                    err(
                        2942505,
                        "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
                    )
                })?;
                fields.push((k.split('.').map(str::to_string).collect(), desc));
            }
            SortPattern::Fields(fields)
        }
        v if is_numeric(v) => SortPattern::Whole(direction(v).ok_or_else(|| {
            err(2942506, "The $sort element value must be either 1 or -1")
        })?),
        _ => {
            return Err(err(
                2942507,
                "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
            ))
        }
    };
    Ok(Expression::op(SortArray {
        input: Expression::parse(input, ctx)?,
        sort_by: sort_by.clone(),
        pattern,
    }))
}

fn sort_key(v: &Bson, path: &[String]) -> Bson {
    match v {
        Bson::Document(d) => crate::expression::path_in_doc(d, path).unwrap_or(Bson::Null),
        _ => Bson::Null,
    }
}

impl Operator for SortArray {
    fn name(&self) -> &str {
        "$sortArray"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let v = self.input.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        let Some(Bson::Array(mut a)) = v else {
            return Err(err(
                2942504,
                format!(
                    "The input argument to $sortArray must be an array, but was of type: {}",
                    type_name(&v)
                ),
            ));
        };
        match &self.pattern {
            SortPattern::Whole(desc) => a.sort_by(|x, y| {
                let o = cmp_bson(x, y);
                if *desc {
                    o.reverse()
                } else {
                    o
                }
            }),
            SortPattern::Fields(fields) => a.sort_by(|x, y| {
                for (path, desc) in fields {
                    let o = cmp_bson(&sort_key(x, path), &sort_key(y, path));
                    let o = if *desc { o.reverse() } else { o };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            }),
        }
        Ok(Some(Bson::Array(a)))
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert("input", self.input.serialize());
        args.insert("sortBy", self.sort_by.clone());
        let mut d = Document::new();
        d.insert("$sortArray", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        vec![&self.input]
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson};

    #[test]
    fn arrays() {
        let d = doc! {"a": [1, 2, 3], "docs": [{"x": 3, "n": "c"}, {"x": 1, "n": "a"}, {"x": 2, "n": "b"}], "s": "str"};
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$arrayElemAt": ["$a", 0]}), Some(bson!(1))),
            (bson!({"$arrayElemAt": ["$a", -1]}), Some(bson!(3))),
            (bson!({"$arrayElemAt": ["$a", 5]}), None),
            (bson!({"$arrayElemAt": ["$a", -5]}), None),
            (bson!({"$arrayElemAt": ["$missing", 0]}), Some(Bson::Null)),
            (bson!({"$first": "$a"}), Some(bson!(1))),
            (bson!({"$last": "$a"}), Some(bson!(3))),
            (bson!({"$first": [[]]}), None),
            (
                bson!({"$concatArrays": ["$a", [4], []]}),
                Some(bson!([1, 2, 3, 4])),
            ),
            (bson!({"$concatArrays": ["$a", null]}), Some(Bson::Null)),
            (
                bson!({"$filter": {"input": "$a", "as": "x", "cond": {"$gte": ["$$x", 2]}}}),
                Some(bson!([2, 3])),
            ),
            (
                bson!({"$filter": {"input": "$a", "cond": {"$gte": ["$$this", 2]}, "limit": 1}}),
                Some(bson!([2])),
            ),
            (
                bson!({"$map": {"input": "$a", "as": "x", "in": {"$multiply": ["$$x", 10]}}}),
                Some(bson!([10, 20, 30])),
            ),
            (
                bson!({"$map": {"input": "$a", "in": "$$this.nope"}}),
                Some(bson!([null, null, null])),
            ),
            (
                bson!({"$map": {"input": "$missing", "in": 1}}),
                Some(Bson::Null),
            ),
            (
                bson!({"$reduce": {"input": "$a", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}}),
                Some(bson!(6)),
            ),
            (
                bson!({"$reduce": {"input": [[1], [2]], "initialValue": [], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                Some(bson!([1, 2])),
            ),
            (bson!({"$in": [2, "$a"]}), Some(bson!(true))),
            (bson!({"$in": [2.0, "$a"]}), Some(bson!(true))),
            (bson!({"$in": ["$missing", [null]]}), Some(bson!(false))),
            (bson!({"$indexOfArray": ["$a", 3]}), Some(bson!(2))),
            (bson!({"$indexOfArray": ["$a", 1, 1]}), Some(bson!(-1))),
            (bson!({"$indexOfArray": [null, 1]}), Some(Bson::Null)),
            (bson!({"$range": [0, 5]}), Some(bson!([0, 1, 2, 3, 4]))),
            (bson!({"$range": [0, 10, 3]}), Some(bson!([0, 3, 6, 9]))),
            (bson!({"$range": [5, 0, -2]}), Some(bson!([5, 3, 1]))),
            (bson!({"$range": [5, 0]}), Some(bson!([]))),
            (bson!({"$reverseArray": "$a"}), Some(bson!([3, 2, 1]))),
            (bson!({"$size": "$a"}), Some(bson!(3))),
            (bson!({"$slice": ["$a", 2]}), Some(bson!([1, 2]))),
            (bson!({"$slice": ["$a", -2]}), Some(bson!([2, 3]))),
            (bson!({"$slice": ["$a", 1, 1]}), Some(bson!([2]))),
            (bson!({"$slice": ["$a", -5, 2]}), Some(bson!([1, 2]))),
            (bson!({"$slice": ["$a", 10, 2]}), Some(bson!([]))),
            (
                bson!({"$zip": {"inputs": [[1, 2], ["a", "b", "c"]]}}),
                Some(bson!([[1, "a"], [2, "b"]])),
            ),
            (
                bson!({"$zip": {"inputs": [[1, 2], ["a", "b", "c"]], "useLongestLength": true, "defaults": [0, "z"]}}),
                Some(bson!([[1, "a"], [2, "b"], [0, "c"]])),
            ),
            (
                bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}),
                Some(bson!([3, 2, 1])),
            ),
            (
                bson!({"$sortArray": {"input": "$docs", "sortBy": {"x": 1}}}),
                Some(bson!([{"x": 1, "n": "a"}, {"x": 2, "n": "b"}, {"x": 3, "n": "c"}])),
            ),
            (bson!({"$isArray": "$docs"}), Some(bson!(true))),
            (bson!("$docs.n"), Some(bson!(["c", "a", "b"]))),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$arrayElemAt": ["$s", 0]}), 28689),
            (bson!({"$arrayElemAt": ["$a", "x"]}), 28690),
            (bson!({"$arrayElemAt": ["$a", 1.5]}), 28691),
            (bson!({"$concatArrays": ["$a", 1]}), 28664),
            (bson!({"$filter": {"input": "$s", "cond": true}}), 28651),
            (bson!({"$filter": {"input": "$a"}}), 28650),
            (
                bson!({"$filter": {"input": "$a", "cond": true, "limit": 0}}),
                327392,
            ),
            (bson!({"$map": {"input": "$s", "in": 1}}), 16883),
            (bson!({"$map": {"input": "$a", "as": "X", "in": 1}}), 16867),
            (bson!({"$map": {"input": "$a", "in": "$$x"}}), 17276),
            (bson!({"$reduce": {"input": "$a", "in": 1}}), 40078),
            (
                bson!({"$reduce": {"input": "$s", "initialValue": 0, "in": 1}}),
                40080,
            ),
            (bson!({"$in": [1, "$s"]}), 40081),
            (bson!({"$in": [1, "$missing"]}), 40081),
            (bson!({"$indexOfArray": ["$s", 1]}), 40090),
            (bson!({"$range": [0, 1, 0]}), 34449),
            (bson!({"$range": ["a", 1]}), 34443),
            (bson!({"$range": [0, 2000000000]}), 146),
            (bson!({"$reverseArray": 1}), 34435),
            (bson!({"$size": "$missing"}), 17124),
            (bson!({"$slice": ["$a", 1, 0]}), 28729),
            (bson!({"$slice": ["$s", 1]}), 28724),
            (bson!({"$zip": {"inputs": ["$s"]}}), 34468),
            (bson!({"$zip": {"inputs": []}}), 34465),
            (bson!({"$zip": {"inputs": ["$a"], "defaults": [1]}}), 34466),
            (bson!({"$sortArray": {"input": "$a"}}), 2942503),
            (bson!({"$sortArray": {"input": "$a", "sortBy": 2}}), 2942506),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
