//! Strings: `$concat $substr $substrBytes $substrCP $strLenBytes $strLenCP $toLower $toUpper
//! $trim $ltrim $rtrim $split $indexOfBytes $indexOfCP $strcasecmp $regexMatch $regexFind
//! $regexFindAll $replaceOne $replaceAll`. Byte-based operators work on UTF-8 bytes, `CP`
//! operators on code points.

use crate::expression::{
    fixed, named_from, named_raw, ranged, variadic, Expression, Named, Nary, Operator, Parser,
};
use crate::value::{
    display, err, format_double, integral32, nullish, to_i64, type_name, type_name_bson, Value,
};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, Document};
use fancy_regex::Regex;
use nidus_common::Result;
use std::sync::Arc;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$concat", |n, a, c| variadic(n, a, c, concat)),
    ("$substr", |_, a, c| {
        fixed("$substrBytes", a, c, 3, substr_bytes)
    }),
    ("$substrBytes", |n, a, c| fixed(n, a, c, 3, substr_bytes)),
    ("$substrCP", |n, a, c| fixed(n, a, c, 3, substr_cp)),
    ("$strLenBytes", |n, a, c| fixed(n, a, c, 1, str_len_bytes)),
    ("$strLenCP", |n, a, c| fixed(n, a, c, 1, str_len_cp)),
    ("$toLower", |n, a, c| fixed(n, a, c, 1, to_lower)),
    ("$toUpper", |n, a, c| fixed(n, a, c, 1, to_upper)),
    ("$trim", parse_trim),
    ("$ltrim", parse_trim),
    ("$rtrim", parse_trim),
    ("$split", |n, a, c| fixed(n, a, c, 2, split)),
    ("$indexOfBytes", |n, a, c| {
        ranged(n, a, c, 2, 4, index_of_bytes)
    }),
    ("$indexOfCP", |n, a, c| ranged(n, a, c, 2, 4, index_of_cp)),
    ("$strcasecmp", |n, a, c| fixed(n, a, c, 2, strcasecmp)),
    ("$regexMatch", parse_regex),
    ("$regexFind", parse_regex),
    ("$regexFindAll", parse_regex),
    ("$replaceOne", parse_replace),
    ("$replaceAll", parse_replace),
];

fn s(v: String) -> Value {
    Some(Bson::String(v))
}

/// MongoDB's `coerceToString`: nullish is `""`, numbers and dates are formatted.
pub(crate) fn coerce_to_string(v: &Value) -> Result<String> {
    Ok(match v {
        None | Some(Bson::Null) | Some(Bson::Undefined) => String::new(),
        Some(Bson::String(x)) | Some(Bson::Symbol(x)) | Some(Bson::JavaScriptCode(x)) => x.clone(),
        Some(Bson::Int32(i)) => i.to_string(),
        Some(Bson::Int64(i)) => i.to_string(),
        Some(Bson::Double(d)) => format_double(*d),
        Some(Bson::Decimal128(d)) => d.to_string(),
        Some(Bson::DateTime(d)) => crate::date::iso_string(d.timestamp_millis()),
        Some(Bson::Timestamp(t)) => format!("Timestamp({}, {})", t.time, t.increment),
        Some(other) => {
            return Err(err(
                16007,
                format!(
                    "can't convert from BSON type {} to String",
                    type_name_bson(other)
                ),
            ))
        }
    })
}

fn concat(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut out = String::new();
    for e in &op.args {
        let v = e.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        match v {
            Some(Bson::String(x)) => out.push_str(&x),
            other => {
                return Err(err(
                    16702,
                    format!("$concat only supports strings, not {}", type_name(&other)),
                ))
            }
        }
    }
    Ok(s(out))
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

fn substr_bytes(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let st = coerce_to_string(&op.arg(0, vars)?)?;
    let lower = op.arg(1, vars)?;
    let length = op.arg(2, vars)?;
    let name = op.name;
    let lower = match lower {
        Some(b) if crate::value::is_numeric(&b) => to_i64(&b),
        other => {
            return Err(err(
                16034,
                format!(
                    "{name}:  starting index must be a numeric type (is BSON type {})",
                    type_name(&other)
                ),
            ))
        }
    };
    let length = match length {
        Some(b) if crate::value::is_numeric(&b) => to_i64(&b),
        other => {
            return Err(err(
                16035,
                format!(
                    "{name}:  length must be a numeric type (is BSON type {})",
                    type_name(&other)
                ),
            ))
        }
    };
    if lower < 0 {
        return Err(err(
            50752,
            format!("{name}:  starting index must be non-negative (got: {lower})"),
        ));
    }
    let bytes = st.as_bytes();
    let lower = lower as usize;
    let len = if length < 0 {
        bytes.len()
    } else {
        length as usize
    };
    if lower < bytes.len() && is_continuation(bytes[lower]) {
        return Err(err(
            28656,
            format!("{name}:  Invalid range, starting index is a UTF-8 continuation byte."),
        ));
    }
    let end = lower.saturating_add(len);
    if end < bytes.len() && is_continuation(bytes[end]) {
        return Err(err(
            28657,
            format!("{name}:  Invalid range, ending index is in the middle of a UTF-8 character."),
        ));
    }
    if lower >= bytes.len() {
        return Ok(s(String::new()));
    }
    let end = end.min(bytes.len());
    Ok(s(String::from_utf8_lossy(&bytes[lower..end]).into_owned()))
}

fn substr_cp(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let st = coerce_to_string(&op.arg(0, vars)?)?;
    let lower = op.arg(1, vars)?;
    let length = op.arg(2, vars)?;
    let name = op.name;
    let check = |v: &Value, c1: i32, c2: i32, what: &str| -> Result<i64> {
        match v {
            Some(b) if crate::value::is_numeric(b) => {
                if !integral32(b) {
                    return Err(err(
                        c2,
                        format!(
                            "{name}: {what} cannot be represented as a 32-bit integral value: {}",
                            display(v)
                        ),
                    ));
                }
                Ok(to_i64(b))
            }
            other => Err(err(
                c1,
                format!(
                    "{name}: {what} must be a numeric type (is BSON type {})",
                    type_name(other)
                ),
            )),
        }
    };
    let start = check(&lower, 34450, 34451, "starting index")?;
    let len = check(&length, 34452, 34453, "length")?;
    if len < 0 {
        return Err(err(
            34454,
            format!("{name}: length must be a nonnegative integer."),
        ));
    }
    if start < 0 {
        return Err(err(
            34455,
            format!("{name}: the starting index must be nonnegative integer."),
        ));
    }
    let out: String = st.chars().skip(start as usize).take(len as usize).collect();
    Ok(s(out))
}

fn str_len_bytes(op: &Nary, vars: &mut Variables) -> Result<Value> {
    match op.arg(0, vars)? {
        Some(Bson::String(x)) => Ok(Some(Bson::Int32(x.len() as i32))),
        other => Err(err(
            34473,
            format!(
                "$strLenBytes requires a string argument, found: {}",
                type_name(&other)
            ),
        )),
    }
}

fn str_len_cp(op: &Nary, vars: &mut Variables) -> Result<Value> {
    match op.arg(0, vars)? {
        Some(Bson::String(x)) => Ok(Some(Bson::Int32(x.chars().count() as i32))),
        other => Err(err(
            34471,
            format!(
                "$strLenCP requires a string argument, found: {}",
                type_name(&other)
            ),
        )),
    }
}

fn to_lower(op: &Nary, vars: &mut Variables) -> Result<Value> {
    Ok(s(coerce_to_string(&op.arg(0, vars)?)?.to_ascii_lowercase()))
}

fn to_upper(op: &Nary, vars: &mut Variables) -> Result<Value> {
    Ok(s(coerce_to_string(&op.arg(0, vars)?)?.to_ascii_uppercase()))
}

fn strcasecmp(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = coerce_to_string(&op.arg(0, vars)?)?.to_ascii_uppercase();
    let b = coerce_to_string(&op.arg(1, vars)?)?.to_ascii_uppercase();
    Ok(Some(Bson::Int32(match a.cmp(&b) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    })))
}

fn split(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let input = op.arg(0, vars)?;
    let sep = op.arg(1, vars)?;
    if nullish(&input) || nullish(&sep) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(input)) = input else {
        return Err(err(
            40085,
            format!(
                "$split requires an expression that evaluates to a string as a first argument, found: {}",
                type_name(&input)
            ),
        ));
    };
    let Some(Bson::String(sep)) = sep else {
        return Err(err(
            40086,
            format!(
                "$split requires an expression that evaluates to a string as a second argument, found: {}",
                type_name(&sep)
            ),
        ));
    };
    if sep.is_empty() {
        return Err(err(40087, "$split requires a non-empty separator"));
    }
    Ok(Some(Bson::Array(
        input
            .split(sep.as_str())
            .map(|p| Bson::String(p.to_string()))
            .collect(),
    )))
}

/// Index arguments of `$indexOf*`: integral and non-negative.
fn index_arg(v: &Value, name: &str, what: &str) -> Result<i64> {
    let b = v.clone().unwrap_or(Bson::Null);
    if !integral32(&b) {
        return Err(err(
            40096,
            format!(
                "{name}requires an integral {what}, found a value of type: {}, with value: {}",
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
                "{name} requires a nonnegative {what}, found: {}",
                display(v)
            ),
        ));
    }
    Ok(n)
}

fn index_of_bytes(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let input = op.arg(0, vars)?;
    if nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(input)) = input else {
        return Err(err(
            40091,
            format!(
                "$indexOfBytes requires a string as the first argument, found: {}",
                type_name(&input)
            ),
        ));
    };
    let token = op.arg(1, vars)?;
    let Some(Bson::String(token)) = token else {
        return Err(err(
            40092,
            format!(
                "$indexOfBytes requires a string as the second argument, found: {}",
                type_name(&token)
            ),
        ));
    };
    let start = if op.args.len() > 2 {
        index_arg(&op.arg(2, vars)?, op.name, "starting index")? as usize
    } else {
        0
    };
    let mut end = input.len();
    if op.args.len() > 3 {
        end = end.min(index_arg(&op.arg(3, vars)?, op.name, "ending index")? as usize);
    }
    if start > input.len() || end < start {
        return Ok(Some(Bson::Int32(-1)));
    }
    let hay = &input.as_bytes()[..end];
    let t = token.as_bytes();
    let found = (start..=hay.len().saturating_sub(t.len()))
        .find(|&i| i + t.len() <= hay.len() && &hay[i..i + t.len()] == t);
    Ok(Some(Bson::Int32(found.map_or(-1, |i| i as i32))))
}

fn index_of_cp(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let input = op.arg(0, vars)?;
    if nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(input)) = input else {
        return Err(err(
            40093,
            format!(
                "$indexOfCP requires a string as the first argument, found: {}",
                type_name(&input)
            ),
        ));
    };
    let token = op.arg(1, vars)?;
    let Some(Bson::String(token)) = token else {
        return Err(err(
            40094,
            format!(
                "$indexOfCP requires a string as the second argument, found: {}",
                type_name(&token)
            ),
        ));
    };
    let start = if op.args.len() > 2 {
        index_arg(&op.arg(2, vars)?, op.name, "starting index")? as usize
    } else {
        0
    };
    let offsets: Vec<usize> = input.char_indices().map(|(i, _)| i).collect();
    let cp_len = offsets.len();
    let mut end = cp_len;
    if op.args.len() > 3 {
        end = end.min(index_arg(&op.arg(3, vars)?, op.name, "ending index")? as usize);
    }
    if end < start {
        return Ok(Some(Bson::Int32(-1)));
    }
    if start == 0 && input.is_empty() && token.is_empty() {
        return Ok(Some(Bson::Int32(0)));
    }
    for (cp, &b) in offsets.iter().enumerate().take(end).skip(start) {
        if input.as_bytes()[b..].starts_with(token.as_bytes()) {
            return Ok(Some(Bson::Int32(cp as i32)));
        }
    }
    Ok(Some(Bson::Int32(-1)))
}

// ---- $trim -----------------------------------------------------------------------------------

const DEFAULT_TRIM: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200A}',
];

fn parse_trim(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["input", "chars"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                50696,
                format!(
                    "{name} only supports an object as an argument, found {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(50694, format!("{name} found an unknown argument: {k}")),
    )?;
    if raw[0].is_none() {
        return Err(err(50695, format!("{name} requires an 'input' field")));
    }
    named_from(name, &allowed, &raw, ctx, eval_trim)
}

fn eval_trim(op: &Named, vars: &mut Variables) -> Result<Value> {
    let input = op.eval("input", vars)?;
    if nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::String(input)) = input else {
        return Err(err(
            50699,
            format!(
                "{} requires its input to be a string, got {} (of type {}) instead.",
                op.name,
                display(&input),
                type_name(&input)
            ),
        ));
    };
    let chars: Vec<char> = if op.has("chars") {
        let c = op.eval("chars", vars)?;
        if nullish(&c) {
            return Ok(Some(Bson::Null));
        }
        match c {
            Some(Bson::String(c)) => c.chars().collect(),
            other => {
                return Err(err(
                    50700,
                    format!(
                        "{} requires 'chars' to be a string, got {} (of type {}) instead.",
                        op.name,
                        display(&other),
                        type_name(&other)
                    ),
                ))
            }
        }
    } else {
        DEFAULT_TRIM.to_vec()
    };
    let pat = |c: char| chars.contains(&c);
    let out = match op.name {
        "$ltrim" => input.trim_start_matches(pat),
        "$rtrim" => input.trim_end_matches(pat),
        _ => input.trim_start_matches(pat).trim_end_matches(pat),
    };
    Ok(s(out.to_string()))
}

// ---- $replaceOne / $replaceAll ----------------------------------------------------------------

fn parse_replace(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["input", "find", "replacement"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                51751,
                format!(
                    "{name} requires an object as an argument, found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(51750, format!("{name} found an unknown argument: {k}")),
    )?;
    for (i, code) in [(0usize, 51749), (1, 51748), (2, 51747)] {
        if raw[i].is_none() {
            return Err(err(
                code,
                format!("{name} requires '{}' to be specified", allowed[i]),
            ));
        }
    }
    named_from(name, &allowed, &raw, ctx, eval_replace)
}

fn eval_replace(op: &Named, vars: &mut Variables) -> Result<Value> {
    let input = op.eval("input", vars)?;
    let find = op.eval("find", vars)?;
    let repl = op.eval("replacement", vars)?;
    for (v, what, code) in [
        (&input, "input", 51746),
        (&find, "find", 51745),
        (&repl, "replacement", 51744),
    ] {
        if !(nullish(v) || matches!(v, Some(Bson::String(_)))) {
            return Err(err(
                code,
                format!(
                    "{} requires that '{what}' be a string, found: {}",
                    op.name,
                    display(v)
                ),
            ));
        }
    }
    let (Some(Bson::String(input)), Some(Bson::String(find)), Some(Bson::String(repl))) =
        (input, find, repl)
    else {
        return Ok(Some(Bson::Null));
    };
    if op.name == "$replaceOne" {
        return Ok(s(input.replacen(find.as_str(), &repl, 1)));
    }
    if find.is_empty() {
        let mut out = String::new();
        for b in input.chars() {
            out.push_str(&repl);
            out.push(b);
        }
        out.push_str(&repl);
        return Ok(s(out));
    }
    Ok(s(input.replace(find.as_str(), &repl)))
}

// ---- regex -----------------------------------------------------------------------------------

/// `$regexMatch`, `$regexFind`, `$regexFindAll`.
#[derive(Debug)]
pub struct RegexOp {
    name: &'static str,
    input: Expression,
    regex: Expression,
    options: Option<Expression>,
    /// Compiled once when `regex` and `options` are constants (`None` inside = null pattern).
    constant: Option<Option<Arc<Regex>>>,
}

fn parse_regex(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["input", "regex", "options"],
        || {
            err(
                51103,
                format!(
                    "{name} expects an object of named arguments but found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(31024, format!("{name} found an unknown argument: {k}")),
    )?;
    let input = raw[0].ok_or_else(|| err(31022, format!("{name} requires 'input' parameter")))?;
    let regex = raw[1].ok_or_else(|| err(31023, format!("{name} requires 'regex' parameter")))?;
    let input = Expression::parse(input, ctx)?;
    let regex = Expression::parse(regex, ctx)?;
    let options = match raw[2] {
        Some(o) => Some(Expression::parse(o, ctx)?),
        None => None,
    };
    let mut op = RegexOp {
        name,
        input,
        regex,
        options,
        constant: None,
    };
    let const_opts = match &op.options {
        None => Some(None),
        Some(Expression::Constant(b)) => Some(Some(b.clone())),
        Some(_) => None,
    };
    if let (Some(p), Some(o)) = (op.regex.as_constant().cloned(), const_opts) {
        op.constant = Some(op.compile(&Some(p), &o)?);
    }
    Ok(Expression::op(op))
}

impl RegexOp {
    fn compile(&self, pattern: &Value, options: &Value) -> Result<Option<Arc<Regex>>> {
        let name = self.name;
        let opts = match options {
            v if nullish(v) => None,
            Some(Bson::String(o)) => Some(o.clone()),
            _ => {
                return Err(err(
                    51106,
                    format!("{name} needs 'options' to be of type string"),
                ))
            }
        };
        let (pat, opts) = match pattern {
            v if nullish(v) => {
                if let Some(o) = &opts {
                    validate_flags(name, o)?;
                }
                return Ok(None);
            }
            Some(Bson::String(p)) => (p.clone(), opts.unwrap_or_default()),
            Some(Bson::RegularExpression(r)) => {
                if opts.is_some() && !r.options.is_empty() {
                    return Err(err(
                        51107,
                        format!(
                            "{name}: found regex option(s) specified in both 'regex' and 'option' fields"
                        ),
                    ));
                }
                (
                    r.pattern.clone(),
                    if r.options.is_empty() {
                        opts.unwrap_or_default()
                    } else {
                        r.options.clone()
                    },
                )
            }
            _ => {
                return Err(err(
                    51105,
                    format!("{name} needs 'regex' to be of type string or regex"),
                ))
            }
        };
        if pat.contains('\0') {
            return Err(err(
                51109,
                format!("{name}: regular expression cannot contain an embedded null byte"),
            ));
        }
        validate_flags(name, &opts)?;
        let flags: String = opts.chars().filter(|c| "imsx".contains(*c)).collect();
        let full = if flags.is_empty() {
            pat
        } else {
            format!("(?{flags}){pat}")
        };
        Regex::new(&full)
            .map(|r| Some(Arc::new(r)))
            .map_err(|e| err(51111, format!("Invalid Regex in {name}: {e}")))
    }
}

fn validate_flags(name: &str, opts: &str) -> Result<()> {
    if opts.contains('\0') {
        return Err(err(
            51110,
            format!("{name}: regular expression options cannot contain an embedded null byte"),
        ));
    }
    for c in opts.chars() {
        if !"imsxu".contains(c) {
            return Err(err(
                51108,
                format!("{name} invalid flag in regex options: {c}"),
            ));
        }
    }
    Ok(())
}

fn match_doc(
    re: &Regex,
    input: &str,
    from: usize,
    cp_index: i32,
) -> Result<Option<(Document, usize, usize)>> {
    let caps = re.captures_from_pos(input, from).map_err(|e| {
        err(
            51156,
            format!("Error occurred while executing the regular expression. Result code: {e}"),
        )
    })?;
    let Some(caps) = caps else {
        return Ok(None);
    };
    let Some(m) = caps.get(0) else {
        return Ok(None);
    };
    let idx = cp_index + input[from..m.start()].chars().count() as i32;
    let mut captures = Vec::new();
    for i in 1..caps.len() {
        captures.push(match caps.get(i) {
            Some(c) => Bson::String(c.as_str().to_string()),
            None => Bson::Null,
        });
    }
    let mut d = Document::new();
    d.insert("match", m.as_str());
    d.insert("idx", idx);
    d.insert("captures", captures);
    Ok(Some((d, m.start(), m.end())))
}

impl Operator for RegexOp {
    fn name(&self) -> &str {
        self.name
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let input = self.input.evaluate(vars)?;
        let re = match &self.constant {
            Some(re) => re.clone(),
            None => {
                let p = self.regex.evaluate(vars)?;
                let o = match &self.options {
                    Some(o) => o.evaluate(vars)?,
                    None => None,
                };
                self.compile(&p, &o)?
            }
        };
        let name = self.name;
        if !(nullish(&input) || matches!(input, Some(Bson::String(_)))) {
            return Err(err(
                51104,
                format!("{name} needs 'input' to be of type string"),
            ));
        }
        let (Some(Bson::String(input)), Some(re)) = (input, re) else {
            return Ok(Some(match name {
                "$regexMatch" => Bson::Boolean(false),
                "$regexFind" => Bson::Null,
                _ => Bson::Array(Vec::new()),
            }));
        };
        match name {
            "$regexMatch" => Ok(Some(Bson::Boolean(
                re.is_match(&input)
                    .map_err(|e| err(51156, format!("Error occurred while executing the regular expression in {name}. Result code: {e}")))?,
            ))),
            "$regexFind" => Ok(Some(
                match_doc(&re, &input, 0, 0)?.map_or(Bson::Null, |(d, _, _)| Bson::Document(d)),
            )),
            _ => {
                let mut out = Vec::new();
                let mut pos = 0usize;
                let mut cp = 0i32;
                let mut total = 0usize;
                loop {
                    let Some((d, start, end)) = match_doc(&re, &input, pos, cp)? else {
                        break;
                    };
                    cp += input[pos..start].chars().count() as i32;
                    total += crate::accumulators::MEMORY_LIMIT_BYTES.min(end - start + 64);
                    if total > 64 * 1024 * 1024 {
                        return Err(err(
                            51151,
                            format!("{name}: the size of buffer to store output exceeded the 64MB limit"),
                        ));
                    }
                    out.push(Bson::Document(d));
                    if end == start {
                        // Empty match: move on by one code point.
                        match input[start..].chars().next() {
                            Some(c) => {
                                pos = start + c.len_utf8();
                                cp += 1;
                            }
                            None => break,
                        }
                    } else {
                        cp += input[start..end].chars().count() as i32;
                        pos = end;
                    }
                    if pos >= input.len() {
                        break;
                    }
                }
                Ok(Some(Bson::Array(out)))
            }
        }
    }

    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        args.insert("input", self.input.serialize());
        args.insert("regex", self.regex.serialize());
        if let Some(o) = &self.options {
            args.insert("options", o.serialize());
        }
        let mut d = Document::new();
        d.insert(self.name, args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        let mut c = vec![&self.input, &self.regex];
        if let Some(o) = &self.options {
            c.push(o);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson, Regex};

    #[test]
    fn strings() {
        let d = doc! {"s": "héllo wörld", "n": 5, "e": ""};
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$concat": ["a", "b", "c"]}), Some(bson!("abc"))),
            (bson!({"$concat": ["a", "$missing"]}), Some(Bson::Null)),
            (bson!({"$substr": ["abcdef", 1, 3]}), Some(bson!("bcd"))),
            (bson!({"$substrBytes": ["abc", 1, -1]}), Some(bson!("bc"))),
            (bson!({"$substrBytes": ["abc", 5, 1]}), Some(bson!(""))),
            (bson!({"$substrBytes": ["$n", 0, 1]}), Some(bson!("5"))),
            (bson!({"$substrCP": ["$s", 1, 4]}), Some(bson!("éllo"))),
            (bson!({"$strLenBytes": "$s"}), Some(bson!(13))),
            (bson!({"$strLenCP": "$s"}), Some(bson!(11))),
            (bson!({"$toUpper": "abC1"}), Some(bson!("ABC1"))),
            (bson!({"$toLower": "$missing"}), Some(bson!(""))),
            (bson!({"$toLower": 12}), Some(bson!("12"))),
            (bson!({"$trim": {"input": "  x  "}}), Some(bson!("x"))),
            (
                bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}}),
                Some(bson!("axx")),
            ),
            (
                bson!({"$rtrim": {"input": "xxaxx", "chars": "x"}}),
                Some(bson!("xxa")),
            ),
            (bson!({"$trim": {"input": null}}), Some(Bson::Null)),
            (
                bson!({"$split": ["a,b,,c", ","]}),
                Some(bson!(["a", "b", "", "c"])),
            ),
            (bson!({"$split": ["abc", "x"]}), Some(bson!(["abc"]))),
            (bson!({"$indexOfBytes": ["cafeteria", "e"]}), Some(bson!(3))),
            (
                bson!({"$indexOfBytes": ["cafeteria", "e", 4]}),
                Some(bson!(5)),
            ),
            (
                bson!({"$indexOfBytes": ["cafeteria", "e", 6, 9]}),
                Some(bson!(-1)),
            ),
            (bson!({"$indexOfBytes": [null, "e"]}), Some(Bson::Null)),
            (bson!({"$indexOfCP": ["$s", "w"]}), Some(bson!(6))),
            (bson!({"$indexOfBytes": ["$s", "w"]}), Some(bson!(7))),
            (bson!({"$indexOfCP": ["", ""]}), Some(bson!(0))),
            (bson!({"$strcasecmp": ["ABC", "abc"]}), Some(bson!(0))),
            (bson!({"$strcasecmp": ["a", "B"]}), Some(bson!(-1))),
            (
                bson!({"$regexMatch": {"input": "Hello", "regex": "^h", "options": "i"}}),
                Some(bson!(true)),
            ),
            (
                bson!({"$regexMatch": {"input": "Hello", "regex": Bson::RegularExpression(Regex { pattern: "^h".into(), options: "i".into() })}}),
                Some(bson!(true)),
            ),
            (
                bson!({"$regexMatch": {"input": "$missing", "regex": "x"}}),
                Some(bson!(false)),
            ),
            (
                bson!({"$regexFind": {"input": "ab12cd34", "regex": "([a-z]+)(\\d+)"}}),
                Some(bson!({"match": "ab12", "idx": 0, "captures": ["ab", "12"]})),
            ),
            (
                bson!({"$regexFind": {"input": "xyz", "regex": "a"}}),
                Some(Bson::Null),
            ),
            (
                bson!({"$regexFindAll": {"input": "ab12cd34", "regex": "\\d+"}}),
                Some(
                    bson!([{"match": "12", "idx": 2, "captures": []}, {"match": "34", "idx": 6, "captures": []}]),
                ),
            ),
            (
                bson!({"$regexFindAll": {"input": "héé", "regex": "é"}}),
                Some(
                    bson!([{"match": "é", "idx": 1, "captures": []}, {"match": "é", "idx": 2, "captures": []}]),
                ),
            ),
            (
                bson!({"$regexFindAll": {"input": "ab", "regex": "x*"}}),
                Some(
                    bson!([{"match": "", "idx": 0, "captures": []}, {"match": "", "idx": 1, "captures": []}]),
                ),
            ),
            (
                bson!({"$regexFind": {"input": "a", "regex": "(b)?a"}}),
                Some(bson!({"match": "a", "idx": 0, "captures": [null]})),
            ),
            (
                bson!({"$replaceOne": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                Some(bson!("a-bXc")),
            ),
            (
                bson!({"$replaceAll": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
                Some(bson!("a-b-c")),
            ),
            (
                bson!({"$replaceAll": {"input": "ab", "find": "", "replacement": "-"}}),
                Some(bson!("-a-b-")),
            ),
            (
                bson!({"$replaceAll": {"input": null, "find": "", "replacement": "-"}}),
                Some(Bson::Null),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$concat": ["a", 1]}), 16702),
            (bson!({"$substrBytes": ["abc", "x", 1]}), 16034),
            (bson!({"$substrBytes": ["abc", -1, 1]}), 50752),
            (bson!({"$substrBytes": ["é", 1, 1]}), 28656),
            (bson!({"$substrBytes": ["é", 0, 1]}), 28657),
            (bson!({"$substrCP": ["abc", 0.5, 1]}), 34451),
            (bson!({"$substrCP": ["abc", 0, -1]}), 34454),
            (bson!({"$strLenCP": 1}), 34471),
            (bson!({"$strLenBytes": "$missing"}), 34473),
            (bson!({"$split": ["a", ""]}), 40087),
            (bson!({"$split": [1, "a"]}), 40085),
            (bson!({"$indexOfBytes": ["a", "b", -1]}), 40097),
            (bson!({"$indexOfBytes": ["a", "b", 1.5]}), 40096),
            (bson!({"$indexOfCP": [1, "b"]}), 40093),
            (bson!({"$trim": {"chars": "x"}}), 50695),
            (bson!({"$trim": {"input": 1}}), 50699),
            (bson!({"$regexMatch": {"input": 1, "regex": "a"}}), 51104),
            (bson!({"$regexMatch": {"input": "a", "regex": 1}}), 51105),
            (bson!({"$regexMatch": {"input": "a", "regex": "("}}), 51111),
            (bson!({"$regexMatch": {"input": "a"}}), 31023),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a", "options": "z"}}),
                51108,
            ),
            (
                bson!({"$replaceOne": {"input": "a", "find": 1, "replacement": "b"}}),
                51745,
            ),
            (bson!({"$replaceOne": {"input": "a", "find": "a"}}), 51747),
            (bson!({"$toUpper": [[1]]}), 16007),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
