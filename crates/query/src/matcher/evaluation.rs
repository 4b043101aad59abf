//! `$mod` and `$regex`/`$options`.

use bson::{Bson, RawBsonRef};
use fancy_regex::Regex;
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::raw_num;
use nidus_doc::number::Num;

/// `{$mod: [divisor, remainder]}`: numeric values truncated to integers.
#[derive(Debug, Clone, Copy)]
pub struct ModPred {
    pub divisor: i64,
    pub remainder: i64,
}

/// Truncates a number to i64 (saturating); `None` for NaN and infinities.
fn trunc_i64(n: Num) -> Option<i64> {
    match n {
        Num::Int(i) => Some(i),
        other => {
            let f = other.to_f64().trunc();
            // Values outside the 64-bit range have no remainder to compare.
            (f.is_finite() && (-TWO_POW_63..TWO_POW_63).contains(&f)).then_some(f as i64)
        }
    }
}

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// A `$mod` argument as MongoDB's `BSONElement::tryCoerce<long long>` reads it: truncated
/// toward zero; NaN, infinities and values past 2^63 refused. 2^63 itself is accepted and
/// wraps to the smallest 64-bit integer, as the server's conversion does.
fn coerce_mod_argument(n: Num) -> std::result::Result<i64, &'static str> {
    match n {
        Num::Int(i) => Ok(i),
        other => {
            let f = other.to_f64();
            if !f.is_finite() {
                return Err("Unable to coerce NaN/Inf to integral type");
            }
            let t = f.trunc();
            if t == TWO_POW_63 {
                Ok(i64::MIN)
            } else if (-TWO_POW_63..TWO_POW_63).contains(&t) {
                Ok(t as i64)
            } else {
                Err("Out of bounds coercing to integral value")
            }
        }
    }
}

fn bson_number(v: &Bson) -> Option<Num> {
    nidus_doc::compare::bson_num(v)
}

impl ModPred {
    pub fn parse(arg: &Bson) -> Result<ModPred> {
        let Bson::Array(items) = arg else {
            return Err(Error::bad_value("malformed mod, needs to be an array"));
        };
        if items.len() < 2 {
            return Err(Error::bad_value("malformed mod, not enough elements"));
        }
        if items.len() > 2 {
            return Err(Error::bad_value("malformed mod, too many elements"));
        }
        let divisor = bson_number(&items[0])
            .ok_or_else(|| Error::bad_value("malformed mod, divisor not a number"))?;
        let remainder = bson_number(&items[1])
            .ok_or_else(|| Error::bad_value("malformed mod, remainder not a number"))?;
        let divisor = coerce_mod_argument(divisor).map_err(|why| {
            Error::bad_value(format!(
                "malformed mod, divisor value is invalid :: caused by :: {why}"
            ))
        })?;
        let remainder = coerce_mod_argument(remainder).map_err(|why| {
            Error::bad_value(format!(
                "malformed mod, remainder value is invalid :: caused by :: {why}"
            ))
        })?;
        if divisor == 0 {
            return Err(Error::bad_value("divisor cannot be 0"));
        }
        Ok(ModPred { divisor, remainder })
    }

    pub fn matches(&self, v: RawBsonRef) -> bool {
        raw_num(v)
            .and_then(trunc_i64)
            .is_some_and(|x| x.wrapping_rem(self.divisor) == self.remainder)
    }
}

/// A compiled `$regex` (PCRE-like via `fancy-regex`); matches strings and symbols, and
/// equals BSON regex values with the same pattern and flags.
#[derive(Debug, Clone)]
pub struct RegexPred {
    pub pattern: String,
    pub options: String,
    re: Regex,
}

impl RegexPred {
    /// The regex as a BSON value (for `$in` lists, explain and index bounds).
    pub fn to_bson(&self) -> bson::Bson {
        bson::Bson::RegularExpression(bson::Regex {
            pattern: self.pattern.clone(),
            options: self.options.clone(),
        })
    }

    pub fn new(pattern: &str, options: &str) -> Result<RegexPred> {
        if pattern.contains('\0') {
            return Err(Error::new(
                ErrorCode::Location(51091),
                "Regular expression cannot contain an embedded null byte",
            ));
        }
        let mut flags = String::new();
        for c in options.chars() {
            match c {
                'i' | 'm' | 's' | 'x' => flags.push(c),
                'u' => {}
                other => {
                    return Err(Error::new(
                        ErrorCode::Location(51108),
                        format!("invalid flag in regex options: {other}"),
                    ))
                }
            }
        }
        let full = if flags.is_empty() {
            pattern.to_string()
        } else {
            format!("(?{flags}){pattern}")
        };
        let re = Regex::new(&full).map_err(|e| {
            Error::new(
                ErrorCode::Location(51091),
                format!("Regular expression is invalid: {e}"),
            )
        })?;
        Ok(RegexPred {
            pattern: pattern.to_string(),
            options: options.to_string(),
            re,
        })
    }

    pub fn from_bson(re: &bson::Regex) -> Result<RegexPred> {
        RegexPred::new(&re.pattern, &re.options)
    }

    /// True when the regex finds a match in `s` (a backtracking limit counts as no match).
    pub fn is_match(&self, s: &str) -> bool {
        self.re.is_match(s).unwrap_or(false)
    }

    pub fn matches(&self, v: RawBsonRef) -> bool {
        match v {
            RawBsonRef::String(s) | RawBsonRef::Symbol(s) => self.is_match(s),
            RawBsonRef::RegularExpression(r) => {
                r.pattern == self.pattern && sorted(r.options) == sorted(&self.options)
            }
            _ => false,
        }
    }
}

fn sorted(s: &str) -> Vec<char> {
    let mut v: Vec<char> = s.chars().collect();
    v.sort_unstable();
    v
}

/// Builds the regex of an operator document from its `$regex` and `$options` arguments.
pub fn parse_regex_operator(regex: Option<&Bson>, options: Option<&Bson>) -> Result<RegexPred> {
    let opts = match options {
        None => None,
        Some(Bson::String(s)) => Some(s.as_str()),
        Some(_) => return Err(Error::bad_value("$options has to be a string")),
    };
    match regex {
        None => Err(Error::bad_value("$options needs a $regex")),
        Some(Bson::String(p)) | Some(Bson::Symbol(p)) => RegexPred::new(p, opts.unwrap_or("")),
        Some(Bson::RegularExpression(re)) => match opts {
            Some(o) if !re.options.is_empty() && !o.is_empty() => Err(Error::new(
                ErrorCode::Location(51075),
                "options set in both $regex and $options",
            )),
            Some(o) if !o.is_empty() => RegexPred::new(&re.pattern, o),
            _ => RegexPred::from_bson(re),
        },
        Some(_) => Err(Error::bad_value("$regex has to be a string")),
    }
}
