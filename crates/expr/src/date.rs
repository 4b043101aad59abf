//! Dates: the part extractors (`$year $month $dayOfMonth $hour $minute $second $millisecond
//! $dayOfWeek $dayOfYear $week $isoWeek $isoWeekYear $isoDayOfWeek`), `$dateToString`,
//! `$dateFromString`, `$dateFromParts`, `$dateToParts`, `$dateAdd`, `$dateSubtract`,
//! `$dateDiff`, `$dateTrunc`.
//!
//! Calendar arithmetic is proleptic Gregorian on milliseconds since the epoch. Time zones:
//! `UTC`/`GMT`/`Z` and fixed offsets (`+05:30`, `-0800`, `+03`); Olson names are not
//! available yet and give MongoDB's "unrecognized time zone identifier" error.

use crate::expression::{named_from, named_raw, Expression, Named, Parser};
use crate::value::{display, err, integral64, nullish, to_i64, type_name, type_name_bson, Value};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, DateTime, Document};
use nidus_common::{Error, ErrorCode, Result};

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$year", parse_part),
    ("$month", parse_part),
    ("$dayOfMonth", parse_part),
    ("$hour", parse_part),
    ("$minute", parse_part),
    ("$second", parse_part),
    ("$millisecond", parse_part),
    ("$dayOfWeek", parse_part),
    ("$dayOfYear", parse_part),
    ("$week", parse_part),
    ("$isoWeek", parse_part),
    ("$isoWeekYear", parse_part),
    ("$isoDayOfWeek", parse_part),
    ("$dateToString", parse_date_to_string),
    ("$dateFromString", parse_date_from_string),
    ("$dateFromParts", parse_date_from_parts),
    ("$dateToParts", parse_date_to_parts),
    ("$dateAdd", parse_date_arith),
    ("$dateSubtract", parse_date_arith),
    ("$dateDiff", parse_date_diff),
    ("$dateTrunc", parse_date_trunc),
];

const MS_PER_DAY: i64 = 86_400_000;

// ---- civil calendar --------------------------------------------------------------------------

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1-12).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1-12, day 1-31) of a day number.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap(y) {
                29
            } else {
                28
            }
        }
    }
}

/// A broken-down local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub millisecond: i64,
    /// 0 = Sunday.
    pub dow0: i64,
    /// 1-based.
    pub day_of_year: i64,
    pub days: i64,
}

pub fn parts(ms: i64) -> Parts {
    let days = ms.div_euclid(MS_PER_DAY);
    let rem = ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Parts {
        year,
        month,
        day,
        hour: rem / 3_600_000,
        minute: rem / 60_000 % 60,
        second: rem / 1000 % 60,
        millisecond: rem % 1000,
        dow0: (days + 4).rem_euclid(7),
        day_of_year: days - days_from_civil(year, 1, 1) + 1,
        days,
    }
}

fn iso_dow(dow0: i64) -> i64 {
    if dow0 == 0 {
        7
    } else {
        dow0
    }
}

fn iso_weeks_in_year(y: i64) -> i64 {
    let jan1 = (days_from_civil(y, 1, 1) + 4).rem_euclid(7);
    if jan1 == 4 || (is_leap(y) && jan1 == 3) {
        53
    } else {
        52
    }
}

/// (ISO week-numbering year, ISO week).
pub fn iso_week(p: &Parts) -> (i64, i64) {
    let wd = iso_dow(p.dow0);
    let w = (p.day_of_year - wd + 10) / 7;
    if w < 1 {
        (p.year - 1, iso_weeks_in_year(p.year - 1))
    } else if w > iso_weeks_in_year(p.year) {
        (p.year + 1, 1)
    } else {
        (p.year, w)
    }
}

/// `%Y-%m-%dT%H:%M:%S.%LZ` in UTC.
pub fn iso_string(ms: i64) -> String {
    let p = parts(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        p.year, p.month, p.day, p.hour, p.minute, p.second, p.millisecond
    )
}

// ---- time zones ------------------------------------------------------------------------------

/// A time zone: a fixed offset in minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeZone {
    pub offset_minutes: i64,
}

impl TimeZone {
    pub const UTC: TimeZone = TimeZone { offset_minutes: 0 };

    pub fn parse(s: &str) -> Result<TimeZone> {
        if matches!(
            s,
            "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" | "UCT" | "Zulu"
        ) {
            return Ok(TimeZone::UTC);
        }
        let bad = || err(40485, format!("unrecognized time zone identifier: \"{s}\""));
        let (sign, rest) = match s.as_bytes().first() {
            Some(b'+') => (1, &s[1..]),
            Some(b'-') => (-1, &s[1..]),
            _ => return Err(bad()),
        };
        let digits: String = rest.chars().filter(|c| *c != ':').collect();
        if !digits.bytes().all(|b| b.is_ascii_digit())
            || !(digits.len() == 2 || digits.len() == 4)
            || (rest.contains(':') && rest.len() != 5)
        {
            return Err(bad());
        }
        let h: i64 = digits[..2].parse().map_err(|_| bad())?;
        let m: i64 = if digits.len() == 4 {
            digits[2..].parse().map_err(|_| bad())?
        } else {
            0
        };
        Ok(TimeZone {
            offset_minutes: sign * (h * 60 + m),
        })
    }

    fn local(&self, utc_ms: i64) -> i64 {
        utc_ms.saturating_add(self.offset_minutes * 60_000)
    }

    fn utc(&self, local_ms: i64) -> i64 {
        local_ms.saturating_sub(self.offset_minutes * 60_000)
    }
}

/// Evaluates an optional timezone argument: `Ok(None)` when it is nullish (the result is
/// null).
fn eval_tz(e: Option<&Expression>, vars: &mut Variables) -> Result<Option<TimeZone>> {
    let Some(e) = e else {
        return Ok(Some(TimeZone::UTC));
    };
    let v = e.evaluate(vars)?;
    if nullish(&v) {
        return Ok(None);
    }
    match v {
        Some(Bson::String(s)) => TimeZone::parse(&s).map(Some),
        other => Err(err(
            40517,
            format!(
                "timezone must evaluate to a string, found {}",
                type_name(&other)
            ),
        )),
    }
}

/// `coerceToDate`: dates, timestamps and ObjectIds.
fn coerce_to_date(v: &Bson) -> Result<i64> {
    match v {
        Bson::DateTime(d) => Ok(d.timestamp_millis()),
        Bson::Timestamp(t) => Ok(i64::from(t.time) * 1000),
        Bson::ObjectId(o) => Ok(o.timestamp().timestamp_millis()),
        other => Err(err(
            16006,
            format!(
                "can't convert from BSON type {} to Date",
                type_name_bson(other)
            ),
        )),
    }
}

fn coercible_to_date(v: &Bson) -> bool {
    matches!(
        v,
        Bson::DateTime(_) | Bson::Timestamp(_) | Bson::ObjectId(_)
    )
}

// ---- date parts ------------------------------------------------------------------------------

fn parse_part(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    match arg {
        Bson::Document(d) if d.keys().next().is_some_and(|k| !k.starts_with('$')) => {
            let raw = named_raw(
                arg,
                &["date", "timezone"],
                || err(40535, "unreachable"),
                |k| err(40535, format!("unrecognized option to {name}: \"{k}\"")),
            )?;
            if raw[0].is_none() {
                return Err(err(
                    40539,
                    format!(
                        "missing 'date' argument to {name}, provided: {}",
                        display(&Some(arg.clone()))
                    ),
                ));
            }
            named_from(name, &["date", "timezone"], &raw, ctx, eval_part)
        }
        Bson::Array(a) => {
            if a.len() != 1 {
                return Err(err(
                    40536,
                    format!(
                        "{name} accepts exactly one argument if given an array, but was given {}",
                        a.len()
                    ),
                ));
            }
            Ok(Expression::op(Named {
                name,
                fields: vec![
                    ("date", Some(Expression::parse(&a[0], ctx)?)),
                    ("timezone", None),
                ],
                f: eval_part,
            }))
        }
        other => Ok(Expression::op(Named {
            name,
            fields: vec![
                ("date", Some(Expression::parse(other, ctx)?)),
                ("timezone", None),
            ],
            f: eval_part,
        })),
    }
}

fn eval_part(op: &Named, vars: &mut Variables) -> Result<Value> {
    let date = op.eval("date", vars)?;
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return Ok(Some(Bson::Null));
    };
    let Some(date) = date.filter(|d| !matches!(d, Bson::Null | Bson::Undefined)) else {
        return Ok(Some(Bson::Null));
    };
    let p = parts(tz.local(coerce_to_date(&date)?));
    let v = match op.name {
        "$year" => p.year,
        "$month" => p.month,
        "$dayOfMonth" => p.day,
        "$hour" => p.hour,
        "$minute" => p.minute,
        "$second" => p.second,
        "$millisecond" => p.millisecond,
        "$dayOfWeek" => p.dow0 + 1,
        "$dayOfYear" => p.day_of_year,
        "$week" => (p.day_of_year - 1 + 7 - p.dow0) / 7,
        "$isoWeek" => iso_week(&p).1,
        "$isoWeekYear" => {
            return Ok(Some(Bson::Int64(iso_week(&p).0)));
        }
        _ => iso_dow(p.dow0),
    };
    Ok(Some(Bson::Int32(v as i32)))
}

// ---- $dateToString ---------------------------------------------------------------------------

const ISO_FORMAT: &str = "%Y-%m-%dT%H:%M:%S.%LZ";

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn validate_format(fmt: &str) -> Result<()> {
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            continue;
        }
        match it.next() {
            None => return Err(err(18535, "Unmatched '%' at end of format string")),
            Some(
                'd' | 'G' | 'H' | 'j' | 'L' | 'm' | 'M' | 'S' | 'u' | 'U' | 'V' | 'w' | 'Y' | 'z'
                | 'Z' | '%' | 'b' | 'B',
            ) => {}
            Some(o) => {
                return Err(err(
                    18536,
                    format!("Invalid format character '%{o}' in format string"),
                ))
            }
        }
    }
    Ok(())
}

/// Formats a UTC instant in a time zone.
pub fn format_date(fmt: &str, utc_ms: i64, tz: TimeZone) -> Result<String> {
    validate_format(fmt)?;
    let p = parts(tz.local(utc_ms));
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let spec = it.next().unwrap_or('%');
        let needs_year = matches!(spec, 'Y' | 'G');
        if needs_year && !(0..=9999).contains(&p.year) {
            return Err(err(
                18537,
                format!(
                    "$dateToString is only defined on year 0-9999, tried to use year {}",
                    p.year
                ),
            ));
        }
        match spec {
            'd' => out.push_str(&format!("{:02}", p.day)),
            'G' => out.push_str(&format!("{:04}", iso_week(&p).0)),
            'H' => out.push_str(&format!("{:02}", p.hour)),
            'j' => out.push_str(&format!("{:03}", p.day_of_year)),
            'L' => out.push_str(&format!("{:03}", p.millisecond)),
            'm' => out.push_str(&format!("{:02}", p.month)),
            'M' => out.push_str(&format!("{:02}", p.minute)),
            'S' => out.push_str(&format!("{:02}", p.second)),
            'u' => out.push_str(&iso_dow(p.dow0).to_string()),
            'U' => out.push_str(&format!("{:02}", (p.day_of_year - 1 + 7 - p.dow0) / 7)),
            'V' => out.push_str(&format!("{:02}", iso_week(&p).1)),
            'w' => out.push_str(&(p.dow0 + 1).to_string()),
            'Y' => out.push_str(&format!("{:04}", p.year)),
            'z' => {
                let o = tz.offset_minutes;
                let sign = if o < 0 { '-' } else { '+' };
                out.push_str(&format!("{sign}{:02}{:02}", o.abs() / 60, o.abs() % 60));
            }
            'Z' => out.push_str(&tz.offset_minutes.to_string()),
            'b' => out.push_str(&MONTHS[(p.month - 1) as usize][..3]),
            'B' => out.push_str(MONTHS[(p.month - 1) as usize]),
            _ => out.push('%'),
        }
    }
    Ok(out)
}

fn parse_date_to_string(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["date", "format", "timezone", "onNull"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                18629,
                "$dateToString only supports an object as its argument",
            )
        },
        |k| {
            err(
                18534,
                format!("Unrecognized argument to $dateToString: {k}"),
            )
        },
    )?;
    if raw[0].is_none() {
        return Err(err(18628, "Missing 'date' parameter to $dateToString"));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_to_string)
}

fn eval_date_to_string(op: &Named, vars: &mut Variables) -> Result<Value> {
    let date = op.eval("date", vars)?;
    let fmt = match op.get("format") {
        Some(e) => {
            let f = e.evaluate(vars)?;
            match &f {
                f if nullish(f) => Some(None),
                Some(Bson::String(s)) => {
                    validate_format(s)?;
                    Some(Some(s.clone()))
                }
                other => {
                    return Err(err(
                        18533,
                        format!(
                        "$dateToString requires that 'format' be a string, found: {} with value {}",
                        type_name(other),
                        display(other)
                    ),
                    ))
                }
            }
        }
        None => None,
    };
    let tz = eval_tz(op.get("timezone"), vars)?;
    if nullish(&date) {
        return match op.get("onNull") {
            Some(e) => e.evaluate(vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let Some(tz) = tz else {
        return Ok(Some(Bson::Null));
    };
    let fmt = match fmt {
        Some(None) => return Ok(Some(Bson::Null)),
        Some(Some(f)) => f,
        None => ISO_FORMAT.to_string(),
    };
    let ms = coerce_to_date(date.as_ref().unwrap_or(&Bson::Null))?;
    Ok(Some(Bson::String(format_date(&fmt, ms, tz)?)))
}

// ---- $dateFromString -------------------------------------------------------------------------

fn parse_failure(s: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::ConversionFailure,
        format!("Error parsing date string '{s}'; {why}"),
    )
}

/// Parses an ISO-8601-like date string (`2018-03-27`, `2018-03-27T16:58:51.538Z`,
/// `2018-03-27 16:58:51+02:00`) into UTC milliseconds.
pub fn parse_date_string(s: &str) -> Result<i64> {
    parse_date_string_tz(s, TimeZone::UTC)
}

fn parse_date_string_tz(s: &str, tz: TimeZone) -> Result<i64> {
    let b = s.as_bytes();
    let mut i = 0;
    let num = |i: &mut usize, n: usize| -> Option<i64> {
        let part = b.get(*i..*i + n)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *i += n;
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let bad = |why: &str| parse_failure(s, why);
    let year = num(&mut i, 4).ok_or_else(|| bad("0: Unexpected character while parsing year"))?;
    let sep = |i: &mut usize, c: u8| -> bool {
        if b.get(*i) == Some(&c) {
            *i += 1;
            true
        } else {
            false
        }
    };
    let (mut month, mut day) = (1, 1);
    if sep(&mut i, b'-') {
        month = num(&mut i, 2).ok_or_else(|| bad("Unexpected character while parsing month"))?;
        if sep(&mut i, b'-') {
            day = num(&mut i, 2).ok_or_else(|| bad("Unexpected character while parsing day"))?;
        }
    } else if let Some(m) = num(&mut i, 2) {
        month = m;
        day = num(&mut i, 2).ok_or_else(|| bad("Unexpected character"))?;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad("The parsed date was invalid"));
    }
    let (mut h, mut mi, mut sec, mut ms) = (0, 0, 0, 0);
    let mut offset: Option<i64> = None;
    if sep(&mut i, b'T') || sep(&mut i, b' ') {
        h = num(&mut i, 2).ok_or_else(|| bad("Unexpected character while parsing hour"))?;
        if sep(&mut i, b':') {
            mi = num(&mut i, 2).ok_or_else(|| bad("Unexpected character while parsing minute"))?;
            if sep(&mut i, b':') {
                sec = num(&mut i, 2)
                    .ok_or_else(|| bad("Unexpected character while parsing second"))?;
                if sep(&mut i, b'.') {
                    let start = i;
                    while b.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                    let frac = &s[start..i];
                    if frac.is_empty() {
                        return Err(bad("Unexpected character"));
                    }
                    let padded = format!("{:0<3}", &frac[..frac.len().min(3)]);
                    ms = padded.parse().map_err(|_| bad("Unexpected character"))?;
                }
            }
        }
        if h > 24 || mi > 59 || sec > 60 {
            return Err(bad("The parsed time was invalid"));
        }
    }
    if i < b.len() {
        let rest = &s[i..];
        if rest == "Z" {
            offset = Some(0);
        } else {
            let tz = TimeZone::parse(rest).map_err(|_| bad("Trailing data"))?;
            offset = Some(tz.offset_minutes);
        }
    }
    let local = (days_from_civil(year, month, day) * MS_PER_DAY)
        + h * 3_600_000
        + mi * 60_000
        + sec * 1000
        + ms;
    Ok(match offset {
        Some(o) => local - o * 60_000,
        None => tz.utc(local),
    })
}

fn parse_date_from_string(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
) -> Result<Expression> {
    let allowed = ["dateString", "format", "timezone", "onNull", "onError"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                40540,
                format!(
                    "$dateFromString only supports an object as an argument, found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| {
            err(
                40541,
                format!("Unrecognized argument to $dateFromString: {k}"),
            )
        },
    )?;
    if raw[0].is_none() {
        return Err(err(
            40542,
            "Missing 'dateString' parameter to $dateFromString",
        ));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_from_string)
}

fn eval_date_from_string(op: &Named, vars: &mut Variables) -> Result<Value> {
    let s = op.eval("dateString", vars)?;
    let fmt = op.eval("format", vars)?;
    if !nullish(&fmt) {
        match &fmt {
            Some(Bson::String(f)) => validate_format(f)?,
            other => {
                return Err(err(
                    40684,
                    format!(
                    "$dateFromString requires that 'format' be a string, found: {} with value {}",
                    type_name(other),
                    display(other)
                ),
                ))
            }
        }
    }
    let tz = eval_tz(op.get("timezone"), vars)?;
    if nullish(&s) {
        return match op.get("onNull") {
            Some(e) => e.evaluate(vars),
            None => Ok(Some(Bson::Null)),
        };
    }
    let r = (|| -> Result<Value> {
        let Some(Bson::String(s)) = &s else {
            return Err(Error::new(
                ErrorCode::ConversionFailure,
                format!(
                    "$dateFromString requires that 'dateString' be a string, found: {} with value {}",
                    type_name(&s),
                    display(&s)
                ),
            ));
        };
        let Some(tz) = tz else {
            return Ok(Some(Bson::Null));
        };
        if op.has("format") && nullish(&fmt) {
            return Ok(Some(Bson::Null));
        }
        Ok(Some(Bson::DateTime(DateTime::from_millis(
            parse_date_string_tz(s, tz)?,
        ))))
    })();
    match r {
        Err(e) if e.code == ErrorCode::ConversionFailure && op.has("onError") => {
            op.eval("onError", vars)
        }
        other => other,
    }
}

// ---- $dateFromParts / $dateToParts -----------------------------------------------------------

const PART_MIN: i64 = -32768;
const PART_MAX: i64 = 32767;

fn parse_date_from_parts(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = [
        "year",
        "month",
        "day",
        "hour",
        "minute",
        "second",
        "millisecond",
        "isoWeekYear",
        "isoWeek",
        "isoDayOfWeek",
        "timezone",
    ];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                40519,
                "$dateFromParts only supports an object as its argument",
            )
        },
        |k| {
            err(
                40518,
                format!("Unrecognized argument to $dateFromParts: {k}"),
            )
        },
    )?;
    let has = |i: usize| raw[i].is_some();
    if !has(0) && !has(7) {
        return Err(err(
            40516,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present",
        ));
    }
    if has(0) && (has(7) || has(8) || has(9)) {
        return Err(err(
            40489,
            "$dateFromParts does not allow mixing natural dates with ISO dates",
        ));
    }
    if has(7) && (has(0) || has(1) || has(2)) {
        return Err(err(
            40525,
            "$dateFromParts does not allow mixing ISO dates with natural dates",
        ));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_from_parts)
}

/// Evaluates a numeric part: `Ok(None)` when nullish.
fn part_value(
    op: &Named,
    key: &str,
    default: i64,
    bounded: bool,
    vars: &mut Variables,
) -> Result<Option<i64>> {
    let Some(e) = op.get(key) else {
        return Ok(Some(default));
    };
    let v = e.evaluate(vars)?;
    if nullish(&v) {
        return Ok(None);
    }
    let b = v.clone().unwrap_or(Bson::Null);
    if !integral64(&b) {
        return Err(err(
            40515,
            format!(
                "'{key}' must evaluate to an integer, found {} with value {}",
                type_name(&v),
                display(&v)
            ),
        ));
    }
    let n = to_i64(&b);
    if bounded && !(PART_MIN..=PART_MAX).contains(&n) {
        return Err(err(
            31034,
            format!(
                "'{key}' must evaluate to a value in the range [{PART_MIN}, {PART_MAX}]; value {n} is not in range"
            ),
        ));
    }
    Ok(Some(n))
}

fn eval_date_from_parts(op: &Named, vars: &mut Variables) -> Result<Value> {
    let null = Ok(Some(Bson::Null));
    let Some(hour) = part_value(op, "hour", 0, true, vars)? else {
        return null;
    };
    let Some(minute) = part_value(op, "minute", 0, true, vars)? else {
        return null;
    };
    let Some(second) = part_value(op, "second", 0, false, vars)? else {
        return null;
    };
    let Some(millis) = part_value(op, "millisecond", 0, false, vars)? else {
        return null;
    };
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return null;
    };
    let days = if op.has("year") {
        let Some(year) = part_value(op, "year", 1970, false, vars)? else {
            return null;
        };
        let Some(month) = part_value(op, "month", 1, true, vars)? else {
            return null;
        };
        let Some(day) = part_value(op, "day", 1, true, vars)? else {
            return null;
        };
        if !(1..=9999).contains(&year) {
            return Err(err(
                40523,
                format!("'year' must evaluate to an integer in the range 1 to 9999, found {year}"),
            ));
        }
        let months = year * 12 + (month - 1);
        let (y, m) = (months.div_euclid(12), months.rem_euclid(12) + 1);
        days_from_civil(y, m, 1) + (day - 1)
    } else {
        let Some(wy) = part_value(op, "isoWeekYear", 1970, false, vars)? else {
            return null;
        };
        let Some(week) = part_value(op, "isoWeek", 1, true, vars)? else {
            return null;
        };
        let Some(dow) = part_value(op, "isoDayOfWeek", 1, true, vars)? else {
            return null;
        };
        if !(1..=9999).contains(&wy) {
            return Err(err(
                31095,
                format!(
                    "'isoWeekYear' must evaluate to an integer in the range 1 to 9999, found {wy}"
                ),
            ));
        }
        let jan4 = days_from_civil(wy, 1, 4);
        let week1_monday = jan4 - (iso_dow((jan4 + 4).rem_euclid(7)) - 1);
        week1_monday + (week - 1) * 7 + (dow - 1)
    };
    let local = days
        .saturating_mul(MS_PER_DAY)
        .saturating_add(hour * 3_600_000)
        .saturating_add(minute * 60_000)
        .saturating_add(second.saturating_mul(1000))
        .saturating_add(millis);
    Ok(Some(Bson::DateTime(DateTime::from_millis(tz.utc(local)))))
}

fn parse_date_to_parts(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["date", "timezone", "iso8601"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                40524,
                "$dateToParts only supports an object as its argument",
            )
        },
        |k| err(40520, format!("Unrecognized argument to $dateToParts: {k}")),
    )?;
    if raw[0].is_none() {
        return Err(err(40522, "Missing 'date' parameter to $dateToParts"));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_to_parts)
}

fn eval_date_to_parts(op: &Named, vars: &mut Variables) -> Result<Value> {
    let date = op.eval("date", vars)?;
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return Ok(Some(Bson::Null));
    };
    let iso = match op.get("iso8601") {
        None => false,
        Some(e) => match e.evaluate(vars)? {
            v if nullish(&v) => return Ok(Some(Bson::Null)),
            Some(Bson::Boolean(b)) => b,
            other => {
                return Err(err(
                    40521,
                    format!(
                        "iso8601 must evaluate to a bool, found {}",
                        type_name(&other)
                    ),
                ))
            }
        },
    };
    let Some(date) = date.filter(|d| !matches!(d, Bson::Null | Bson::Undefined)) else {
        return Ok(Some(Bson::Null));
    };
    let p = parts(tz.local(coerce_to_date(&date)?));
    let mut d = Document::new();
    let i = |v: i64| Bson::Int32(v as i32);
    if iso {
        let (wy, w) = iso_week(&p);
        d.insert("isoWeekYear", i(wy));
        d.insert("isoWeek", i(w));
        d.insert("isoDayOfWeek", i(iso_dow(p.dow0)));
    } else {
        d.insert("year", i(p.year));
        d.insert("month", i(p.month));
        d.insert("day", i(p.day));
    }
    d.insert("hour", i(p.hour));
    d.insert("minute", i(p.minute));
    d.insert("second", i(p.second));
    d.insert("millisecond", i(p.millisecond));
    Ok(Some(Bson::Document(d)))
}

// ---- $dateAdd / $dateSubtract / $dateDiff / $dateTrunc ---------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

fn parse_unit(s: &str) -> Option<Unit> {
    Some(match s {
        "year" => Unit::Year,
        "quarter" => Unit::Quarter,
        "month" => Unit::Month,
        "week" => Unit::Week,
        "day" => Unit::Day,
        "hour" => Unit::Hour,
        "minute" => Unit::Minute,
        "second" => Unit::Second,
        "millisecond" => Unit::Millisecond,
        _ => return None,
    })
}

fn unit_arg(v: &Value, op: &str) -> Result<Unit> {
    match v {
        Some(Bson::String(s)) => parse_unit(s).ok_or_else(|| {
            err(
                5439014,
                format!("{op} parameter 'unit' value cannot be recognized as a time unit: {s}"),
            )
        }),
        other => Err(err(
            5439013,
            format!(
                "{op} requires 'unit' to be a string, but got {}",
                type_name(other)
            ),
        )),
    }
}

fn fixed_unit_ms(u: Unit) -> Option<i64> {
    Some(match u {
        Unit::Week => 7 * MS_PER_DAY,
        Unit::Day => MS_PER_DAY,
        Unit::Hour => 3_600_000,
        Unit::Minute => 60_000,
        Unit::Second => 1000,
        Unit::Millisecond => 1,
        _ => return None,
    })
}

/// True for MongoDB's time unit names (`year` ... `millisecond`).
pub fn is_time_unit(unit: &str) -> bool {
    parse_unit(unit).is_some()
}

/// Adds `amount` of a named time unit to a UTC instant (`$dateAdd` in UTC; used by window
/// ranges, `$densify`); `None` on overflow or an unknown unit.
pub fn add_time_unit(ms: i64, unit: &str, amount: i64) -> Option<i64> {
    date_add(ms, parse_unit(unit)?, amount, TimeZone::UTC)
}

/// The length of a fixed-length unit in milliseconds (`week` and shorter), None for months,
/// quarters and years.
pub fn time_unit_millis(unit: &str) -> Option<i64> {
    fixed_unit_ms(parse_unit(unit)?)
}

/// Adds `amount` units to a UTC instant, in a time zone; `None` on overflow.
fn date_add(ms: i64, unit: Unit, amount: i64, tz: TimeZone) -> Option<i64> {
    if let Some(step) = fixed_unit_ms(unit) {
        return ms.checked_add(amount.checked_mul(step)?);
    }
    let months = match unit {
        Unit::Year => amount.checked_mul(12)?,
        Unit::Quarter => amount.checked_mul(3)?,
        _ => amount,
    };
    let local = tz.local(ms);
    let p = parts(local);
    let total = (p.year * 12 + p.month - 1).checked_add(months)?;
    let (y, m) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    if !(-300_000..=300_000).contains(&y) {
        return None;
    }
    let day = p.day.min(days_in_month(y, m));
    let tod = local.rem_euclid(MS_PER_DAY);
    let out = days_from_civil(y, m, day)
        .checked_mul(MS_PER_DAY)?
        .checked_add(tod)?;
    Some(tz.utc(out))
}

fn parse_date_arith(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["startDate", "unit", "amount", "timezone"];
    let raw = named_raw(
        arg,
        &allowed,
        || err(5166400, format!("{name} expects an object as its argument")),
        |k| {
            err(
                5166401,
                format!(
                    "Unrecognized argument to {name}: {k}. Expected arguments are startDate, unit, amount, and optionally timezone."
                ),
            )
        },
    )?;
    if raw[0].is_none() || raw[1].is_none() || raw[2].is_none() {
        return Err(err(
            5166402,
            format!("{name} requires startDate, unit, and amount to be present"),
        ));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_arith)
}

fn eval_date_arith(op: &Named, vars: &mut Variables) -> Result<Value> {
    let start = op.eval("startDate", vars)?;
    if nullish(&start) {
        return Ok(Some(Bson::Null));
    }
    let unit = op.eval("unit", vars)?;
    if nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let amount = op.eval("amount", vars)?;
    if nullish(&amount) {
        return Ok(Some(Bson::Null));
    }
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return Ok(Some(Bson::Null));
    };
    let start = start.unwrap_or(Bson::Null);
    if !coercible_to_date(&start) {
        return Err(err(
            5166403,
            format!("{} requires startDate to be convertible to a date", op.name),
        ));
    }
    let unit = match &unit {
        Some(Bson::String(s)) => parse_unit(s)
            .ok_or_else(|| Error::failed_to_parse(format!("unknown time unit value: {s}")))?,
        _ => {
            return Err(err(
                5166404,
                format!("{} expects string defining the time unit", op.name),
            ))
        }
    };
    let amount = amount.unwrap_or(Bson::Null);
    if !integral64(&amount) {
        return Err(err(
            5166405,
            format!("{} expects integer amount of time units", op.name),
        ));
    }
    let mut n = to_i64(&amount);
    if op.name == "$dateSubtract" {
        if n == i64::MIN {
            return Err(err(
                6045000,
                format!("invalid $dateSubtract 'amount' parameter value: {n}"),
            ));
        }
        n = -n;
    }
    let ms = coerce_to_date(&start)?;
    match date_add(ms, unit, n, tz) {
        Some(r) => Ok(Some(Bson::DateTime(DateTime::from_millis(r)))),
        None => Err(err(5166406, format!("{} overflowed", op.name))),
    }
}

fn parse_date_diff(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["startDate", "endDate", "unit", "timezone", "startOfWeek"];
    let raw = named_raw(
        arg,
        &allowed,
        || err(5166301, "$dateDiff only supports an object as its argument"),
        |k| err(5166302, format!("Unrecognized argument to $dateDiff: {k}")),
    )?;
    if raw[0].is_none() {
        return Err(err(5166303, "Missing 'startDate' parameter to $dateDiff"));
    }
    if raw[1].is_none() {
        return Err(err(5166304, "Missing 'endDate' parameter to $dateDiff"));
    }
    if raw[2].is_none() {
        return Err(err(5166305, "Missing 'unit' parameter to $dateDiff"));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_diff)
}

fn day_of_week_arg(v: &Value, op: &str) -> Result<i64> {
    let names = [
        ("sunday", "sun", 0),
        ("monday", "mon", 1),
        ("tuesday", "tue", 2),
        ("wednesday", "wed", 3),
        ("thursday", "thu", 4),
        ("friday", "fri", 5),
        ("saturday", "sat", 6),
    ];
    match v {
        Some(Bson::String(s)) => {
            let l = s.to_ascii_lowercase();
            names
                .iter()
                .find(|(a, b, _)| *a == l || *b == l)
                .map(|(_, _, d)| *d)
                .ok_or_else(|| {
                    err(
                        5439016,
                        format!(
                            "{op} parameter 'startOfWeek' value cannot be recognized as a day of a week: {s}"
                        ),
                    )
                })
        }
        other => Err(err(
            5439015,
            format!(
                "{op} requires 'startOfWeek' to be a string, but got {}",
                type_name(other)
            ),
        )),
    }
}

fn eval_date_diff(op: &Named, vars: &mut Variables) -> Result<Value> {
    let start = op.eval("startDate", vars)?;
    if nullish(&start) {
        return Ok(Some(Bson::Null));
    }
    let end = op.eval("endDate", vars)?;
    if nullish(&end) {
        return Ok(Some(Bson::Null));
    }
    let unit_v = op.eval("unit", vars)?;
    if nullish(&unit_v) {
        return Ok(Some(Bson::Null));
    }
    let is_week = matches!(&unit_v, Some(Bson::String(s)) if s == "week");
    let mut sow = 0;
    if is_week && op.has("startOfWeek") {
        let v = op.eval("startOfWeek", vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        sow = day_of_week_arg(&v, "$dateDiff")?;
    }
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return Ok(Some(Bson::Null));
    };
    let to_date = |v: &Value, which: &str| -> Result<i64> {
        match v {
            Some(b) if coercible_to_date(b) => coerce_to_date(b),
            other => Err(err(
                5166307,
                format!(
                    "$dateDiff requires '{which}' to be a date, but got {}",
                    type_name(other)
                ),
            )),
        }
    };
    let s = to_date(&start, "startDate")?;
    let e = to_date(&end, "endDate")?;
    let unit = unit_arg(&unit_v, "$dateDiff")?;
    let (ls, le) = (tz.local(s), tz.local(e));
    let (ps, pe) = (parts(ls), parts(le));
    let diff = match unit {
        Unit::Year => pe.year - ps.year,
        Unit::Quarter => (pe.year * 4 + (pe.month - 1) / 3) - (ps.year * 4 + (ps.month - 1) / 3),
        Unit::Month => (pe.year * 12 + pe.month) - (ps.year * 12 + ps.month),
        Unit::Week => {
            let week_start = |p: &Parts| p.days - (p.dow0 - sow).rem_euclid(7);
            (week_start(&pe) - week_start(&ps)) / 7
        }
        Unit::Day => pe.days - ps.days,
        Unit::Millisecond => le.wrapping_sub(ls),
        u => {
            let step = fixed_unit_ms(u).unwrap_or(1);
            le.div_euclid(step) - ls.div_euclid(step)
        }
    };
    Ok(Some(Bson::Int64(diff)))
}

fn parse_date_trunc(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let allowed = ["date", "unit", "binSize", "timezone", "startOfWeek"];
    let raw = named_raw(
        arg,
        &allowed,
        || {
            err(
                5439007,
                "$dateTrunc only supports an object as its argument",
            )
        },
        |k| {
            err(
                5439008,
                format!(
                    "Unrecognized argument to $dateTrunc: {k}. Expected arguments are date, unit, and optionally, binSize, timezone, startOfWeek"
                ),
            )
        },
    )?;
    if raw[0].is_none() {
        return Err(err(5439009, "Missing 'date' parameter to $dateTrunc"));
    }
    if raw[1].is_none() {
        return Err(err(5439010, "Missing 'unit' parameter to $dateTrunc"));
    }
    named_from(name, &allowed, &raw, ctx, eval_date_trunc)
}

fn eval_date_trunc(op: &Named, vars: &mut Variables) -> Result<Value> {
    let date = op.eval("date", vars)?;
    if nullish(&date) {
        return Ok(Some(Bson::Null));
    }
    let unit_v = op.eval("unit", vars)?;
    if nullish(&unit_v) {
        return Ok(Some(Bson::Null));
    }
    let mut bin = 1i64;
    if op.has("binSize") {
        let b = op.eval("binSize", vars)?;
        if nullish(&b) {
            return Ok(Some(Bson::Null));
        }
        let bb = b.clone().unwrap_or(Bson::Null);
        if !integral64(&bb) {
            return Err(err(
                5439017,
                format!(
                    "$dateTrunc requires 'binSize' to be a 64-bit integer, but got value '{}' of type {}",
                    display(&b),
                    type_name(&b)
                ),
            ));
        }
        bin = to_i64(&bb);
        if bin <= 0 {
            return Err(err(
                5439018,
                format!("$dateTrunc requires 'binSize' to be greater than 0, but got value {bin}"),
            ));
        }
    }
    let is_week = matches!(&unit_v, Some(Bson::String(s)) if s == "week");
    let mut sow = 0;
    if is_week && op.has("startOfWeek") {
        let v = op.eval("startOfWeek", vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        sow = day_of_week_arg(&v, "$dateTrunc")?;
    }
    let Some(tz) = eval_tz(op.get("timezone"), vars)? else {
        return Ok(Some(Bson::Null));
    };
    let d = match &date {
        Some(b) if coercible_to_date(b) => coerce_to_date(b)?,
        other => {
            return Err(err(
                5439012,
                format!(
                    "$dateTrunc requires 'date' to be a date, but got {}",
                    type_name(other)
                ),
            ))
        }
    };
    let unit = unit_arg(&unit_v, "$dateTrunc")?;
    let local = tz.local(d);
    let p = parts(local);
    // Bins are counted from the reference 2000-01-01T00:00:00 (local), as MongoDB does.
    let reference = days_from_civil(2000, 1, 1) * MS_PER_DAY;
    let out = match unit {
        Unit::Year | Unit::Quarter | Unit::Month => {
            let months_per = match unit {
                Unit::Year => 12,
                Unit::Quarter => 3,
                _ => 1,
            } * bin;
            let m = (p.year - 2000) * 12 + (p.month - 1);
            let start = m.div_euclid(months_per) * months_per;
            let (y, mo) = (2000 + start.div_euclid(12), start.rem_euclid(12) + 1);
            days_from_civil(y, mo, 1) * MS_PER_DAY
        }
        Unit::Week => {
            // Reference: the first `startOfWeek` day on or after 2000-01-01 (a Saturday).
            let ref_days = days_from_civil(2000, 1, 1);
            let ref_days = ref_days + (sow - (ref_days + 4).rem_euclid(7)).rem_euclid(7);
            let step = 7 * bin;
            (ref_days + (p.days - ref_days).div_euclid(step) * step) * MS_PER_DAY
        }
        u => {
            let step = fixed_unit_ms(u).unwrap_or(1).saturating_mul(bin);
            reference + (local - reference).div_euclid(step) * step
        }
    };
    Ok(Some(Bson::DateTime(DateTime::from_millis(tz.utc(out)))))
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, days_from_civil};
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson, DateTime};

    fn dt(ms: i64) -> Bson {
        Bson::DateTime(DateTime::from_millis(ms))
    }

    #[test]
    fn civil_round_trip() {
        for z in [-800_000, -1, 0, 1, 11_016, 19_000, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }

    #[test]
    fn date_operators() {
        // 2018-03-27T16:58:51.538Z, a Tuesday.
        let t = 1_522_169_931_538i64;
        let d = doc! {"d": DateTime::from_millis(t), "jan1": DateTime::from_millis(1_609_459_200_000i64)};
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (bson!({"$year": "$d"}), Some(bson!(2018))),
            (bson!({"$month": "$d"}), Some(bson!(3))),
            (bson!({"$dayOfMonth": "$d"}), Some(bson!(27))),
            (bson!({"$hour": "$d"}), Some(bson!(16))),
            (bson!({"$minute": "$d"}), Some(bson!(58))),
            (bson!({"$second": "$d"}), Some(bson!(51))),
            (bson!({"$millisecond": "$d"}), Some(bson!(538))),
            (bson!({"$dayOfWeek": "$d"}), Some(bson!(3))),
            (bson!({"$dayOfYear": "$d"}), Some(bson!(86))),
            (bson!({"$week": "$d"}), Some(bson!(12))),
            (bson!({"$isoWeek": "$d"}), Some(bson!(13))),
            (bson!({"$isoDayOfWeek": "$d"}), Some(bson!(2))),
            (bson!({"$isoWeekYear": "$jan1"}), Some(bson!(2020i64))),
            (bson!({"$isoWeek": "$jan1"}), Some(bson!(53))),
            (
                bson!({"$hour": {"date": "$d", "timezone": "+05:30"}}),
                Some(bson!(22)),
            ),
            (
                bson!({"$hour": {"date": "$d", "timezone": "-0800"}}),
                Some(bson!(8)),
            ),
            (bson!({"$year": ["$d"]}), Some(bson!(2018))),
            (bson!({"$year": "$missing"}), Some(Bson::Null)),
            (
                bson!({"$dateToString": {"date": "$d"}}),
                Some(bson!("2018-03-27T16:58:51.538Z")),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M %j %u %w %U %V %G %% %z"}}),
                Some(bson!("2018/03/27 16:58 086 2 3 12 13 2018 % +0000")),
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%H:%M%z", "timezone": "+03"}}),
                Some(bson!("19:58+0300")),
            ),
            (
                bson!({"$dateToString": {"date": "$missing", "onNull": "none"}}),
                Some(bson!("none")),
            ),
            (
                bson!({"$dateFromParts": {"year": 2018, "month": 3, "day": 27, "hour": 16, "minute": 58, "second": 51, "millisecond": 538}}),
                Some(dt(t)),
            ),
            (
                bson!({"$dateFromParts": {"year": 2017, "month": 15, "day": 27, "hour": 16, "minute": 58, "second": 51, "millisecond": 538}}),
                Some(dt(t)),
            ),
            (
                bson!({"$dateFromParts": {"isoWeekYear": 2018, "isoWeek": 13, "isoDayOfWeek": 2, "hour": 16, "minute": 58, "second": 51, "millisecond": 538}}),
                Some(dt(t)),
            ),
            (
                bson!({"$dateToParts": {"date": "$d"}}),
                Some(
                    bson!({"year": 2018, "month": 3, "day": 27, "hour": 16, "minute": 58, "second": 51, "millisecond": 538}),
                ),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2018-03-27T16:58:51.538Z"}}),
                Some(dt(t)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "2018-03-27T18:58:51.538+02:00"}}),
                Some(dt(t)),
            ),
            (
                bson!({"$dateFromString": {"dateString": "nope", "onError": "bad"}}),
                Some(bson!("bad")),
            ),
            (
                bson!({"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1}}),
                Some(dt(t + 86_400_000)),
            ),
            (
                bson!({"$dateSubtract": {"startDate": "$d", "unit": "hour", "amount": 2}}),
                Some(dt(t - 7_200_000)),
            ),
            (
                bson!({"$dateAdd": {"startDate": {"$dateFromParts": {"year": 2021, "month": 1, "day": 31}}, "unit": "month", "amount": 1}}),
                Some(dt(1_614_470_400_000)),
            ),
            (
                bson!({"$dateDiff": {"startDate": {"$dateFromParts": {"year": 2020, "month": 12, "day": 31}}, "endDate": {"$dateFromParts": {"year": 2021, "month": 1, "day": 1}}, "unit": "year"}}),
                Some(bson!(1i64)),
            ),
            (
                bson!({"$dateDiff": {"startDate": "$d", "endDate": {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 10}}, "unit": "week"}}),
                Some(bson!(1i64)),
            ),
            (
                bson!({"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "millisecond"}}),
                Some(bson!(0i64)),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "day"}}),
                Some(dt(t - (t % 86_400_000))),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "month"}}),
                Some(dt(1_519_862_400_000)),
            ),
            (
                bson!({"$dateTrunc": {"date": "$d", "unit": "hour", "binSize": 6}}),
                Some(dt(1_522_152_000_000)),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$year": "abc"}), 16006),
            (bson!({"$year": ["$d", "$d"]}), 40536),
            (bson!({"$year": {"date": "$d", "tz": 1}}), 40535),
            (
                bson!({"$year": {"date": "$d", "timezone": "Mars/Olympus"}}),
                40485,
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "%Q"}}),
                18536,
            ),
            (
                bson!({"$dateToString": {"date": "$d", "format": "abc%"}}),
                18535,
            ),
            (bson!({"$dateToString": {"format": "%Y"}}), 18628),
            (bson!({"$dateFromParts": {"month": 1}}), 40516),
            (bson!({"$dateFromParts": {"year": 10000}}), 40523),
            (
                bson!({"$dateFromParts": {"year": 2000, "month": 40000}}),
                31034,
            ),
            (
                bson!({"$dateFromParts": {"year": 2000, "isoWeek": 1}}),
                40489,
            ),
            (bson!({"$dateFromString": {"dateString": "nope"}}), 241),
            (
                bson!({"$dateAdd": {"startDate": "$d", "unit": "day"}}),
                5166402,
            ),
            (
                bson!({"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1.5}}),
                5166405,
            ),
            (
                bson!({"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "fortnight"}}),
                5439014,
            ),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
