//! Types: `$type`, `$isNumber`, `$convert` (with `onError`/`onNull`) and its shortcuts
//! `$toInt $toLong $toDouble $toDecimal $toString $toBool $toObjectId $toDate`, and
//! `$toHashedIndexKey`.

use crate::date;
use crate::decimal::{self, Rounding};
use crate::expression::{fixed, named_raw, parse_args, Expression, Named, Nary, Operator, Parser};
use crate::value::{
    err, format_double, integral32, is_numeric, nullish, to_decimal, truthy_bson, type_name,
    type_name_bson, Value,
};
use crate::variables::{ParseContext, Variables};
use bson::oid::ObjectId;
use bson::{Bson, DateTime, Decimal128};
use nidus_common::{Error, ErrorCode, Result};

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$type", |n, a, c| fixed(n, a, c, 1, type_of)),
    ("$isNumber", |n, a, c| fixed(n, a, c, 1, is_number)),
    ("$convert", parse_convert),
    ("$toInt", parse_shortcut),
    ("$toLong", parse_shortcut),
    ("$toDouble", parse_shortcut),
    ("$toDecimal", parse_shortcut),
    ("$toString", parse_shortcut),
    ("$toBool", parse_shortcut),
    ("$toObjectId", parse_shortcut),
    ("$toDate", parse_shortcut),
    ("$toHashedIndexKey", parse_to_hashed_index_key),
];

/// `{$toHashedIndexKey: <expression>}`: the operand is one expression (an array literal is
/// the value hashed, not an argument list), serialized back without an argument list.
#[derive(Debug)]
struct ToHashedIndexKey {
    operand: Expression,
}

fn parse_to_hashed_index_key(
    _name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
) -> Result<Expression> {
    Ok(Expression::op(ToHashedIndexKey {
        operand: Expression::parse(arg, ctx)?,
    }))
}

impl Operator for ToHashedIndexKey {
    fn name(&self) -> &str {
        "$toHashedIndexKey"
    }

    /// The key a hashed index stores for the value (a missing value hashes as null).
    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let v = self.operand.evaluate(vars)?.unwrap_or(Bson::Null);
        Ok(Some(Bson::Int64(nidus_doc::hashed::hash64(
            &v,
            nidus_doc::hashed::DEFAULT_HASH_SEED,
        ))))
    }

    fn serialize(&self) -> Bson {
        let mut d = bson::Document::new();
        d.insert("$toHashedIndexKey", self.operand.serialize());
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        vec![&self.operand]
    }
}

fn type_of(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let v = op.arg(0, vars)?;
    Ok(Some(Bson::String(type_name(&v).to_string())))
}

fn is_number(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let v = op.arg(0, vars)?;
    Ok(Some(Bson::Boolean(v.as_ref().is_some_and(is_numeric))))
}

/// Conversion targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Double,
    String,
    Object,
    Array,
    BinData,
    Undefined,
    ObjectId,
    Bool,
    Date,
    Null,
    Regex,
    DbPointer,
    JavaScript,
    Symbol,
    JavaScriptWithScope,
    Int,
    Timestamp,
    Long,
    Decimal,
    MinKey,
    MaxKey,
    Missing,
}

const TARGETS: &[(&str, i32, Target)] = &[
    ("double", 1, Target::Double),
    ("string", 2, Target::String),
    ("object", 3, Target::Object),
    ("array", 4, Target::Array),
    ("binData", 5, Target::BinData),
    ("undefined", 6, Target::Undefined),
    ("objectId", 7, Target::ObjectId),
    ("bool", 8, Target::Bool),
    ("date", 9, Target::Date),
    ("null", 10, Target::Null),
    ("regex", 11, Target::Regex),
    ("dbPointer", 12, Target::DbPointer),
    ("javascript", 13, Target::JavaScript),
    ("symbol", 14, Target::Symbol),
    ("javascriptWithScope", 15, Target::JavaScriptWithScope),
    ("int", 16, Target::Int),
    ("timestamp", 17, Target::Timestamp),
    ("long", 18, Target::Long),
    ("decimal", 19, Target::Decimal),
    ("minKey", -1, Target::MinKey),
    ("maxKey", 127, Target::MaxKey),
];

fn target_name(t: Target) -> &'static str {
    if t == Target::Missing {
        return "missing";
    }
    TARGETS
        .iter()
        .find(|(_, _, x)| *x == t)
        .map_or("missing", |(n, _, _)| n)
}

/// `computeTargetType`.
fn target_type(to: &Bson) -> Result<Target> {
    match to {
        Bson::String(s) => {
            if s == "missing" {
                return Ok(Target::Missing);
            }
            TARGETS
                .iter()
                .find(|(n, _, _)| n == s)
                .map(|(_, _, t)| *t)
                .ok_or_else(|| Error::bad_value(format!("Unknown type name: {s}")))
        }
        b if is_numeric(b) => {
            if !integral32(b) {
                return Err(Error::failed_to_parse(
                    "In $convert, numeric 'to' argument is not an integer",
                ));
            }
            let code = crate::value::to_i64(b) as i32;
            TARGETS
                .iter()
                .find(|(_, c, _)| *c == code)
                .map(|(_, _, t)| *t)
                .ok_or_else(|| {
                    Error::failed_to_parse(format!(
                        "In $convert, numeric value for 'to' does not correspond to a BSON type: {code}"
                    ))
                })
        }
        other => Err(Error::failed_to_parse(format!(
            "$convert's 'to' argument must be a string or number, but is {}",
            type_name_bson(other)
        ))),
    }
}

fn conversion_failure(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::ConversionFailure, msg)
}

fn overflow(v: &str) -> Error {
    conversion_failure(format!(
        "Conversion would overflow target type in $convert with no onError value: {v}"
    ))
}

fn check_finite(d: f64) -> Result<()> {
    if d.is_nan() {
        return Err(conversion_failure(
            "Attempt to convert NaN value to integer type in $convert with no onError value",
        ));
    }
    if d.is_infinite() {
        return Err(conversion_failure(
            "Attempt to convert infinity value to integer type in $convert with no onError value",
        ));
    }
    Ok(())
}

fn double_to_long(d: f64) -> Result<i64> {
    check_finite(d)?;
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&d) {
        return Err(overflow(&format_double(d)));
    }
    Ok(d as i64)
}

fn decimal_to_long(d: &Decimal128) -> Result<i64> {
    if decimal::is_nan(d) {
        return Err(conversion_failure(
            "Attempt to convert NaN value to integer type in $convert with no onError value",
        ));
    }
    if decimal::is_infinite(d) {
        return Err(conversion_failure(
            "Attempt to convert infinity value to integer type in $convert with no onError value",
        ));
    }
    decimal::to_i64_rounded(d, Rounding::TowardZero).ok_or_else(|| overflow(&d.to_string()))
}

fn parse_number_string(s: &str, target: Target) -> Result<Bson> {
    if s.starts_with("0x") {
        return Err(conversion_failure(format!(
            "Illegal hexadecimal input in $convert with no onError value: {s}"
        )));
    }
    let fail = |why: &str| {
        conversion_failure(format!(
            "Failed to parse number '{s}' in $convert with no onError value: {why}"
        ))
    };
    match target {
        Target::Int => s
            .parse::<i32>()
            .map(Bson::Int32)
            .map_err(|_| fail("Did not consume whole string.")),
        Target::Long => s
            .parse::<i64>()
            .map(Bson::Int64)
            .map_err(|_| fail("Did not consume whole string.")),
        Target::Double => {
            let lower = s.to_ascii_lowercase();
            let t = lower.trim_start_matches(['+', '-']);
            let special = matches!(t, "inf" | "infinity" | "nan");
            if s.is_empty()
                || (!special
                    && !s
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)))
            {
                return Err(fail("Did not consume whole string."));
            }
            s.parse::<f64>()
                .map(Bson::Double)
                .map_err(|_| fail("Did not consume whole string."))
        }
        _ => s
            .parse::<Decimal128>()
            .map(Bson::Decimal128)
            .map_err(|_| fail("Failed to parse string to decimal")),
    }
}

/// Converts a non-nullish value (`performConversion`).
pub fn convert(v: &Bson, target: Target) -> Result<Bson> {
    use Target as T;
    let unsupported = || {
        conversion_failure(format!(
            "Unsupported conversion from {} to {} in $convert with no onError value",
            type_name_bson(v),
            target_name(target)
        ))
    };
    Ok(match (v, target) {
        (Bson::MinKey | Bson::MaxKey, T::Bool) => Bson::Boolean(true),
        (
            Bson::Document(_)
            | Bson::Array(_)
            | Bson::Binary(_)
            | Bson::RegularExpression(_)
            | Bson::DbPointer(_)
            | Bson::JavaScriptCode(_)
            | Bson::Symbol(_)
            | Bson::JavaScriptCodeWithScope(_)
            | Bson::Timestamp(_)
            | Bson::ObjectId(_)
            | Bson::String(_),
            T::Bool,
        ) => Bson::Boolean(true),
        (Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) | Bson::DateTime(_) | Bson::Boolean(_), T::Bool) => {
            Bson::Boolean(truthy_bson(v))
        }
        // Identity.
        (Bson::Double(_), T::Double)
        | (Bson::String(_), T::String)
        | (Bson::ObjectId(_), T::ObjectId)
        | (Bson::DateTime(_), T::Date)
        | (Bson::Int32(_), T::Int)
        | (Bson::Int64(_), T::Long)
        | (Bson::Decimal128(_), T::Decimal) => v.clone(),
        // From double.
        (Bson::Double(d), T::String) => Bson::String(double_to_string(*d)),
        (Bson::Double(d), T::Date) => Bson::DateTime(DateTime::from_millis(double_to_long(*d)?)),
        (Bson::Double(d), T::Int) => {
            check_finite(*d)?;
            if *d < f64::from(i32::MIN) || *d > f64::from(i32::MAX) {
                return Err(overflow(&format_double(*d)));
            }
            Bson::Int32(*d as i32)
        }
        (Bson::Double(d), T::Long) => Bson::Int64(double_to_long(*d)?),
        (Bson::Double(_), T::Decimal) => Bson::Decimal128(to_decimal(v)),
        // From string.
        (Bson::String(s), T::Double | T::Int | T::Long | T::Decimal) => {
            parse_number_string(s, target)?
        }
        (Bson::String(s), T::ObjectId) => Bson::ObjectId(ObjectId::parse_str(s).map_err(|_| {
            conversion_failure(format!(
                "Failed to parse objectId '{s}' in $convert with no onError value: Invalid string length for parsing to OID, expected 24 but found {}",
                s.len()
            ))
        })?),
        (Bson::String(s), T::Date) => Bson::DateTime(DateTime::from_millis(
            date::parse_date_string(s).map_err(|e| Error::new(ErrorCode::ConversionFailure, e.message.clone()))?,
        )),
        // From objectId.
        (Bson::ObjectId(o), T::String) => Bson::String(o.to_hex()),
        (Bson::ObjectId(o), T::Date) => {
            Bson::DateTime(DateTime::from_millis((o.timestamp().timestamp_millis() / 1000) * 1000))
        }
        // From bool.
        (Bson::Boolean(b), T::Double) => Bson::Double(if *b { 1.0 } else { 0.0 }),
        (Bson::Boolean(b), T::String) => Bson::String(b.to_string()),
        (Bson::Boolean(b), T::Int) => Bson::Int32(i32::from(*b)),
        (Bson::Boolean(b), T::Long) => Bson::Int64(i64::from(*b)),
        (Bson::Boolean(b), T::Decimal) => Bson::Decimal128(decimal::from_i64(i64::from(*b))),
        // From date.
        (Bson::DateTime(d), T::Double) => Bson::Double(d.timestamp_millis() as f64),
        (Bson::DateTime(d), T::String) => Bson::String(date::iso_string(d.timestamp_millis())),
        (Bson::DateTime(d), T::Long) => Bson::Int64(d.timestamp_millis()),
        (Bson::DateTime(d), T::Decimal) => Bson::Decimal128(decimal::from_i64(d.timestamp_millis())),
        // From timestamp.
        (Bson::Timestamp(ts), T::Date) => {
            Bson::DateTime(DateTime::from_millis(i64::from(ts.time) * 1000))
        }
        // From int.
        (Bson::Int32(i), T::Double) => Bson::Double(f64::from(*i)),
        (Bson::Int32(i), T::String) => Bson::String(i.to_string()),
        (Bson::Int32(i), T::Long) => Bson::Int64(i64::from(*i)),
        (Bson::Int32(i), T::Decimal) => Bson::Decimal128(decimal::from_i64(i64::from(*i))),
        // From long.
        (Bson::Int64(i), T::Double) => Bson::Double(*i as f64),
        (Bson::Int64(i), T::String) => Bson::String(i.to_string()),
        (Bson::Int64(i), T::Date) => Bson::DateTime(DateTime::from_millis(*i)),
        (Bson::Int64(i), T::Int) => Bson::Int32(i32::try_from(*i).map_err(|_| overflow(""))?),
        (Bson::Int64(i), T::Decimal) => Bson::Decimal128(decimal::from_i64(*i)),
        // From decimal.
        (Bson::Decimal128(d), T::Double) => {
            let x = decimal::to_f64(d);
            if x.is_infinite() && !decimal::is_infinite(d) {
                return Err(overflow(&d.to_string()));
            }
            Bson::Double(x)
        }
        (Bson::Decimal128(d), T::String) => Bson::String(d.to_string()),
        (Bson::Decimal128(d), T::Date) => Bson::DateTime(DateTime::from_millis(decimal_to_long(d)?)),
        (Bson::Decimal128(d), T::Int) => {
            let l = decimal_to_long(d)?;
            Bson::Int32(i32::try_from(l).map_err(|_| overflow(&d.to_string()))?)
        }
        (Bson::Decimal128(d), T::Long) => Bson::Int64(decimal_to_long(d)?),
        _ => return Err(unsupported()),
    })
}

/// `performFormatDouble`.
fn double_to_string(d: f64) -> String {
    if d.is_infinite() {
        return if d < 0.0 { "-Infinity" } else { "Infinity" }.to_string();
    }
    if d.is_nan() {
        return "NaN".to_string();
    }
    format_double(d)
}

fn parse_convert(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["input", "to", "onError", "onNull"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            Error::failed_to_parse(format!(
                "$convert expects an object of named arguments but found: {}",
                type_name_bson(arg)
            ))
        },
        |k| Error::failed_to_parse(format!("$convert found an unknown argument: {k}")),
    )?;
    if raw[0].is_none() {
        return Err(Error::failed_to_parse(
            "Missing 'input' parameter to $convert",
        ));
    }
    if raw[1].is_none() {
        return Err(Error::failed_to_parse("Missing 'to' parameter to $convert"));
    }
    crate::expression::named_from(name, &allowed, &raw, ctx, eval_convert)
}

fn parse_shortcut(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let mut args = parse_args(arg, ctx)?;
    if args.len() != 1 {
        return Err(err(
            50723,
            format!("{name} requires a single argument, got {}", args.len()),
        ));
    }
    let to = match name {
        "$toInt" => "int",
        "$toLong" => "long",
        "$toDouble" => "double",
        "$toDecimal" => "decimal",
        "$toString" => "string",
        "$toBool" => "bool",
        "$toObjectId" => "objectId",
        _ => "date",
    };
    let input = args.pop();
    Ok(Expression::op(Named {
        name: "$convert",
        fields: vec![
            ("input", input),
            (
                "to",
                Some(Expression::Constant(Bson::String(to.to_string()))),
            ),
            ("onError", None),
            ("onNull", None),
        ],
        f: eval_convert,
    }))
}

fn eval_convert(op: &Named, vars: &mut Variables) -> Result<Value> {
    let to = op.eval("to", vars)?;
    let input = op.eval("input", vars)?;
    let target = if nullish(&to) {
        None
    } else {
        Some(target_type(to.as_ref().unwrap_or(&Bson::Null))?)
    };
    if nullish(&input) {
        return match op.get("onNull") {
            Some(e) => e.evaluate(vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let (Some(target), Some(input)) = (target, input) else {
        return Ok(Some(Bson::Null));
    };
    match convert(&input, target) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == ErrorCode::ConversionFailure => match op.get("onError") {
            Some(h) => h.evaluate(vars),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::oid::ObjectId;
    use bson::{bson, doc, Bson, DateTime};

    #[test]
    fn types_and_conversions() {
        let oid = ObjectId::parse_str("5ab9c3da31c2ab715d421285").expect("oid");
        let d = doc! {"i": 5, "s": "12", "oid": oid, "dt": DateTime::from_millis(1522169931538i64)};
        let dec = |s: &str| Bson::Decimal128(s.parse().expect("dec"));
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$type": "$i"}), Some(bson!("int"))),
            (bson!({"$type": "$missing"}), Some(bson!("missing"))),
            (bson!({"$type": [[1]]}), Some(bson!("array"))),
            (bson!({"$type": 1.5}), Some(bson!("double"))),
            (bson!({"$type": 5i64}), Some(bson!("long"))),
            (bson!({"$isNumber": "$s"}), Some(bson!(false))),
            (bson!({"$toInt": "$s"}), Some(bson!(12))),
            (bson!({"$toInt": 2.9}), Some(bson!(2))),
            (bson!({"$toInt": -2.9}), Some(bson!(-2))),
            (bson!({"$toLong": "$dt"}), Some(bson!(1522169931538i64))),
            (bson!({"$toDouble": "1.5"}), Some(bson!(1.5))),
            (bson!({"$toDouble": true}), Some(bson!(1.0))),
            (bson!({"$toDecimal": 2.5}), Some(dec("2.50000000000000"))),
            (bson!({"$toDecimal": 5}), Some(dec("5"))),
            (bson!({"$toString": true}), Some(bson!("true"))),
            (bson!({"$toString": 2.5}), Some(bson!("2.5"))),
            (bson!({"$toString": 2}), Some(bson!("2"))),
            (bson!({"$toString": 1000i64}), Some(bson!("1000"))),
            (
                bson!({"$toString": "$oid"}),
                Some(bson!("5ab9c3da31c2ab715d421285")),
            ),
            (
                bson!({"$toString": "$dt"}),
                Some(bson!("2018-03-27T16:58:51.538Z")),
            ),
            (
                bson!({"$toString": {"$literal": dec("2.5")}}),
                Some(bson!("2.5")),
            ),
            (bson!({"$toBool": 0}), Some(bson!(false))),
            (bson!({"$toBool": ""}), Some(bson!(true))),
            (bson!({"$toBool": "$missing"}), Some(Bson::Null)),
            (
                bson!({"$toObjectId": "5ab9c3da31c2ab715d421285"}),
                Some(Bson::ObjectId(oid)),
            ),
            (
                bson!({"$toDate": "2018-03-27T16:58:51.538Z"}),
                Some(Bson::DateTime(DateTime::from_millis(1522169931538i64))),
            ),
            (
                bson!({"$toDate": 1522169931538i64}),
                Some(Bson::DateTime(DateTime::from_millis(1522169931538i64))),
            ),
            (
                bson!({"$convert": {"input": "abc", "to": "int", "onError": "bad"}}),
                Some(bson!("bad")),
            ),
            (
                bson!({"$convert": {"input": null, "to": "int", "onNull": "nul"}}),
                Some(bson!("nul")),
            ),
            (
                bson!({"$convert": {"input": "$missing", "to": "int"}}),
                Some(Bson::Null),
            ),
            (
                bson!({"$convert": {"input": 1, "to": null}}),
                Some(Bson::Null),
            ),
            (bson!({"$convert": {"input": 1, "to": 2}}), Some(bson!("1"))),
            (
                bson!({"$convert": {"input": 1.5, "to": "long"}}),
                Some(bson!(1i64)),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$toInt": "abc"}), 241),
            (bson!({"$toInt": 1e10}), 241),
            (bson!({"$toInt": "0x1F"}), 241),
            (bson!({"$toInt": [1, 2]}), 50723),
            (bson!({"$convert": {"input": 1, "to": "foo"}}), 2),
            (bson!({"$convert": {"input": 1}}), 9),
            (bson!({"$convert": {"input": 1, "to": "int", "x": 1}}), 9),
            (bson!({"$convert": {"input": 1, "to": 1.5}}), 9),
            (bson!({"$toObjectId": "abc"}), 241),
            (bson!({"$convert": {"input": 1, "to": "objectId"}}), 241),
            (bson!({"$type": [1, 2]}), 16020),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
