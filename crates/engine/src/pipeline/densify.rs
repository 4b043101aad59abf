//! `$densify`: documents for the missing values of a numeric or date field, every `step`
//! (with `unit` for dates), within `bounds` ("full", "partition" or `[lo, hi)`), per
//! partition of `partitionByFields`.
//!
//! As in MongoDB it parses into a `$sort` (partition fields then the field; the field alone
//! for "full") and `$_internalDensify`. Generated documents hold the partition fields and
//! the field only. Documents whose field is null or missing pass through unchanged.

use super::context::doc_bytes;
use super::{DocumentSource, ExpCtx, ParseCtx, Sort, StageRef, Stream};
use bson::{Bson, DateTime, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::cmp_bson;
use nidus_expr::accumulators::Ordered;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

const NAME: &str = "$densify";

#[derive(Debug, Clone)]
enum Range {
    Full,
    Partition,
    Explicit(Box<(Bson, Bson)>),
}

#[derive(Debug, Clone)]
pub struct Densify {
    field: String,
    partition_fields: Vec<String>,
    step: Bson,
    unit: Option<String>,
    range: Range,
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!(
                "The {NAME} stage specification must be an object, found {}",
                super::type_name(arg)
            ),
        ));
    };
    let mut field = None;
    let mut partition_fields = Vec::new();
    let mut range = None;
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("field", Bson::String(s)) => field = Some(s.clone()),
            ("partitionByFields", Bson::Array(a)) => {
                for p in a {
                    match p {
                        Bson::String(s) => partition_fields.push(s.clone()),
                        other => return Err(wrong_type("partitionByFields", other, "string")),
                    }
                }
            }
            ("range", Bson::Document(d)) => range = Some(d),
            ("field", other) => return Err(wrong_type("field", other, "string")),
            ("partitionByFields", other) => {
                return Err(wrong_type("partitionByFields", other, "array"))
            }
            ("range", other) => return Err(wrong_type("range", other, "object")),
            (other, _) => {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{NAME}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let Some(field) = field else {
        return Err(missing("field"));
    };
    if field.starts_with('$') {
        return Err(Error::location(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    let Some(range) = range else {
        return Err(missing("range"));
    };
    let step = range
        .get("step")
        .cloned()
        .ok_or_else(|| missing("range.step"))?;
    let bounds = range.get("bounds").ok_or_else(|| missing("range.bounds"))?;
    let unit = match range.get("unit") {
        None => None,
        Some(Bson::String(u)) if nidus_expr::date::is_time_unit(u) => Some(u.clone()),
        Some(Bson::String(u)) => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                format!("unknown time unit value: {u}"),
            ))
        }
        Some(other) => return Err(wrong_type("range.unit", other, "string")),
    };
    for k in range.keys() {
        if !["step", "bounds", "unit"].contains(&k.as_str()) {
            return Err(Error::location(
                40415,
                format!("BSON field '{NAME}.range.{k}' is an unknown field."),
            ));
        }
    }
    if !super::is_number(&step) || nidus_expr::value::to_f64(&step) <= 0.0 {
        return Err(Error::location(
            5733401,
            "The step parameter in a range statement must be a strictly positive numeric value",
        ));
    }
    if unit.is_some() && super::exact_i64(&step).is_none() {
        return Err(Error::location(
            6586400,
            "The step parameter in a range statement must be a whole number when densifying a date range",
        ));
    }
    let range = match bounds {
        Bson::String(s) if s == "full" => Range::Full,
        Bson::String(s) if s == "partition" => Range::Partition,
        Bson::String(_) => {
            return Err(Error::location(
                5946802,
                "Bounds string must either be 'full' or 'partition'",
            ))
        }
        Bson::Array(a) => {
            if a.len() != 2 {
                return Err(Error::location(
                    5733403,
                    "A bounding array in a range statement must have exactly two elements",
                ));
            }
            if cmp_bson(&a[0], &a[1]).is_gt() {
                return Err(Error::location(
                    5733402,
                    "A bounding array must be an ascending array of either two dates or two numbers",
                ));
            }
            if super::is_number(&a[0]) {
                if unit.is_some() {
                    return Err(Error::location(5733409, "Numeric bounds may not have unit parameter"));
                }
                if !super::is_number(&a[1]) {
                    return Err(Error::location(
                        5733406,
                        "A bounding array must contain either both dates or both numeric types",
                    ));
                }
            } else if matches!(a[0], Bson::DateTime(_)) {
                if !matches!(a[1], Bson::DateTime(_)) {
                    return Err(Error::location(
                        5733405,
                        "A bounding array must contain either both dates or both numeric types",
                    ));
                }
                if unit.is_none() {
                    return Err(Error::location(5733410, "A bounding array of dates must specify a unit"));
                }
            } else {
                return Err(Error::location(5946800, "Explicit bounds must be numeric or dates"));
            }
            Range::Explicit(Box::new((a[0].clone(), a[1].clone())))
        }
        _ => {
            return Err(Error::location(
                5733404,
                "The bounds in a range statement must be the string 'full', 'partition', or an ascending array of two numbers or two dates",
            ))
        }
    };
    for p in &partition_fields {
        if p.starts_with(field.as_str()) {
            return Err(Error::location(
                8993000,
                format!("partitionByFields '{p}' cannot include field '{field}' that is being densified."),
            ));
        }
        if field.starts_with(p.as_str()) {
            return Err(Error::location(
                9554500,
                format!("field '{field}' that is being densified cannot include partitionByFields '{p}'."),
            ));
        }
    }
    if matches!(range, Range::Partition) && partition_fields.is_empty() {
        return Err(Error::location(
            5733408,
            "One cannot specify the bounds as 'partition' without specifying a non-empty array of partitionByFields. You may have meant to specify 'full' bounds.",
        ));
    }
    let mut sort = Document::new();
    if !matches!(range, Range::Full) {
        for p in &partition_fields {
            sort.insert(p.clone(), 1);
        }
    }
    sort.insert(field.clone(), 1);
    Ok(vec![
        Arc::new(Sort::new(&sort)?),
        Arc::new(Densify {
            field,
            partition_fields,
            step,
            unit,
            range,
        }),
    ])
}

fn missing(f: &str) -> Error {
    Error::location(
        40414,
        format!("BSON field '{NAME}.{f}' is missing but a required field"),
    )
}

fn wrong_type(field: &str, v: &Bson, want: &str) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '{NAME}.{field}' is the wrong type '{}', expected type '{want}'",
            super::type_name(v)
        ),
    )
}

/// A dotted path's value (no array traversal: `$densify` refuses arrays on the path).
fn get_path<'a>(d: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut cur = d;
    let mut parts = path.split('.').peekable();
    while let Some(p) = parts.next() {
        let v = cur.get(p)?;
        if parts.peek().is_none() {
            return Some(v);
        }
        match v {
            Bson::Document(sub) => cur = sub,
            _ => return None,
        }
    }
    None
}

/// The grid: value number `k` counted from `start`.
struct Grid<'a> {
    stage: &'a Densify,
    start: Bson,
}

impl Grid<'_> {
    fn at(&self, k: i64) -> Result<Bson> {
        let s = &self.stage;
        match (&self.start, &s.unit) {
            (Bson::DateTime(d), Some(unit)) => {
                let step = super::exact_i64(&s.step).unwrap_or(1);
                let ms = nidus_expr::date::add_time_unit(
                    d.timestamp_millis(),
                    unit,
                    k.saturating_mul(step),
                )
                .ok_or_else(|| Error::location(5733500, "$densify date overflow"))?;
                Ok(Bson::DateTime(DateTime::from_millis(ms)))
            }
            (start, None) if super::is_number(start) => {
                let ints = |b: &Bson| matches!(b, Bson::Int32(_) | Bson::Int64(_));
                if ints(start) && ints(&s.step) {
                    let a = super::exact_i64(start).unwrap_or(0);
                    let st = super::exact_i64(&s.step).unwrap_or(1);
                    if let Some(v) = st.checked_mul(k).and_then(|x| x.checked_add(a)) {
                        return Ok(nidus_expr::value::int_or_long(v));
                    }
                }
                let a = nidus_expr::value::to_f64(start);
                let st = nidus_expr::value::to_f64(&s.step);
                Ok(Bson::Double(a + st * k as f64))
            }
            (Bson::DateTime(_), None) => Err(Error::location(
                5733410,
                "A bounding array of dates must specify a unit",
            )),
            (_, Some(_)) => Err(Error::location(
                5733409,
                "Numeric bounds may not have unit parameter",
            )),
            (other, None) => Err(Error::location(
                5733201,
                format!(
                    "Densify field type must be numeric or a date, found {}",
                    super::type_name(other)
                ),
            )),
        }
    }

    /// The smallest grid index whose value is greater than `v`.
    fn index_after(&self, v: &Bson) -> Result<i64> {
        let past = |x: &Bson| cmp_bson(x, v).is_gt();
        // Numbers: jump close by division, then step exactly.
        let mut k = 0i64;
        if super::is_number(v) && self.stage.unit.is_none() {
            let a = nidus_expr::value::to_f64(&self.start);
            let st = nidus_expr::value::to_f64(&self.stage.step);
            k = (((nidus_expr::value::to_f64(v) - a) / st).floor() as i64 - 1).max(0);
        }
        loop {
            if past(&self.at(k)?) {
                return Ok(k);
            }
            k += 1;
        }
    }
}

struct PartitionState {
    /// The partition fields as generated documents carry them.
    include: Document,
    /// The value grid index 0 stands for.
    anchor: Bson,
    /// The next grid index to generate.
    next: i64,
}

impl Densify {
    fn check_value(&self, v: &Bson) -> Result<()> {
        match (v, &self.unit) {
            (Bson::DateTime(_), Some(_)) => Ok(()),
            (Bson::DateTime(_), None) => Err(Error::location(
                5733302,
                "Encountered date densify value in non-date densify field",
            )),
            (n, None) if super::is_number(n) => Ok(()),
            (n, Some(_)) if super::is_number(n) => Err(Error::location(
                6053600,
                "Encountered non-date value in date densify",
            )),
            (other, _) => Err(Error::location(
                5733201,
                format!(
                    "Densify field type must be numeric or a date, found {}",
                    super::type_name(other)
                ),
            )),
        }
    }

    fn include(&self, d: &Document) -> Document {
        let mut inc = Document::new();
        for p in &self.partition_fields {
            if let Some(v) = get_path(d, p) {
                nidus_doc::path::set_path(&mut inc, p, v.clone());
            }
        }
        inc
    }

    /// Generates the partition's grid values while `keep(value)` holds.
    fn generate(
        &self,
        out: &mut Vec<Document>,
        st: &mut PartitionState,
        keep: impl Fn(&Bson) -> bool,
    ) -> Result<()> {
        let grid = Grid {
            stage: self,
            start: st.anchor.clone(),
        };
        loop {
            let v = grid.at(st.next)?;
            if !keep(&v) {
                return Ok(());
            }
            let mut d = st.include.clone();
            nidus_doc::path::set_path(&mut d, &self.field, v);
            out.push(d);
            st.next += 1;
        }
    }

    /// Densifies the whole (sorted) input.
    fn run(&self, mut input: Stream, ctx: &ExpCtx) -> Result<Vec<Document>> {
        let mut out = Vec::new();
        let mut memory = ctx.memory(NAME);
        let mut states: BTreeMap<Ordered, PartitionState> = BTreeMap::new();
        let hi = match &self.range {
            Range::Explicit(b) => Some(b.1.clone()),
            _ => None,
        };
        let below_hi = |x: &Bson| hi.as_ref().is_none_or(|h| cmp_bson(x, h).is_lt());
        let mut global_min: Option<Bson> = None;
        let mut global_max: Option<Bson> = None;
        let mut current: Option<Ordered> = None;
        while let Some(d) = input.next()? {
            ctx.check_interrupt()?;
            memory.add(doc_bytes(&d))?;
            let Some(v) = get_path(&d, &self.field)
                .filter(|v| !matches!(v, Bson::Null))
                .cloned()
            else {
                out.push(d);
                continue;
            };
            self.check_value(&v)?;
            let include = self.include(&d);
            let key = Ordered(Bson::Document(include.clone()));
            if !matches!(self.range, Range::Full) && current.as_ref() != Some(&key) {
                // Sorted by partition: the previous partition is complete.
                if let Some(prev) = current.take() {
                    if let (Some(st), Some(_)) = (states.get_mut(&prev), &hi) {
                        self.generate(&mut out, st, below_hi)?;
                    }
                }
                current = Some(key.clone());
            }
            let anchor = match &self.range {
                Range::Explicit(b) => b.0.clone(),
                Range::Partition => v.clone(),
                Range::Full => global_min.get_or_insert_with(|| v.clone()).clone(),
            };
            global_max = Some(v.clone());
            let st = states.entry(key).or_insert_with(|| PartitionState {
                include,
                anchor,
                next: 0,
            });
            let value = v.clone();
            self.generate(&mut out, st, |x| cmp_bson(x, &value).is_lt() && below_hi(x))?;
            if cmp_bson(&v, &st.anchor).is_ge() {
                let grid = Grid {
                    stage: self,
                    start: st.anchor.clone(),
                };
                st.next = st.next.max(grid.index_after(&v)?);
            }
            out.push(d);
        }
        match &self.range {
            Range::Explicit(..) => {
                if let Some(st) = current.and_then(|k| states.get_mut(&k)) {
                    self.generate(&mut out, st, below_hi)?;
                }
            }
            Range::Full => {
                if let Some(max) = global_max {
                    for st in states.values_mut() {
                        self.generate(&mut out, st, |x| cmp_bson(x, &max).is_le())?;
                    }
                }
            }
            Range::Partition => {}
        }
        Ok(out)
    }
}

impl DocumentSource for Densify {
    fn name(&self) -> &'static str {
        "$_internalDensify"
    }

    fn serialize(&self) -> Bson {
        let bounds = match &self.range {
            Range::Full => Bson::String("full".into()),
            Range::Partition => Bson::String("partition".into()),
            Range::Explicit(b) => Bson::Array(vec![b.0.clone(), b.1.clone()]),
        };
        let mut range = bson::doc! {"step": self.step.clone(), "bounds": bounds};
        if let Some(u) = &self.unit {
            range.insert("unit", u.clone());
        }
        bson::bson!({
            "field": self.field.clone(),
            "partitionByFields": self.partition_fields.clone(),
            "range": range,
        })
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(super::stream::Deferred::new(
            input,
            ctx.clone(),
            Arc::new(self.clone()),
            |stage: &Densify, input, ctx| Ok(super::VecStream::boxed(stage.run(input, ctx)?)),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
