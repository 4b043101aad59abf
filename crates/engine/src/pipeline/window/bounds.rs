//! Window bounds: `window: {documents: [lo, hi]}` or `{range: [lo, hi], unit?}` with
//! `"unbounded"`, `"current"` or a constant, as MongoDB's window_bounds.cpp parses them.

use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Unbounded,
    Current,
    /// A document offset, a numeric range offset, or a time-unit count.
    At(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Bounds {
    Documents(Bound, Bound),
    Range(Bound, Bound, Option<String>),
}

pub const UNBOUNDED: Bounds = Bounds::Documents(Bound::Unbounded, Bound::Unbounded);

fn fail(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::FailedToParse, msg)
}

impl Bounds {
    pub fn is_unbounded(&self) -> bool {
        matches!(
            self,
            Bounds::Documents(Bound::Unbounded, Bound::Unbounded)
                | Bounds::Range(Bound::Unbounded, Bound::Unbounded, _)
        )
    }

    /// Parses the `window` argument; `sort_fields` is the number of `sortBy` fields (None
    /// without `sortBy`).
    pub fn parse(arg: &Bson, sort_fields: Option<usize>) -> Result<Bounds> {
        let Bson::Document(d) = arg else {
            return Err(fail("'window' field must be an object"));
        };
        let documents = d.get("documents");
        let range = d.get("range");
        let unit = d.get("unit");
        if documents.is_some() && range.is_some() {
            return Err(fail(
                "Window bounds can specify either 'documents' or 'unit', not both.",
            ));
        }
        if range.is_none() && unit.is_some() {
            return Err(fail(
                "Window bounds can only specify 'unit' with range-based bounds.",
            ));
        }
        if let Some(docs) = documents {
            if d.len() != 1 {
                return Err(fail(
                    "'window' field that specifies documents cannot have other fields",
                ));
            }
            let (lo, hi) = unpack(docs)?;
            let int = |v: &Bson| -> Result<f64> {
                match super::super::exact_i64(v) {
                    Some(n) if n.abs() <= i32::MAX as i64 => Ok(n as f64),
                    _ => Err(fail("Numeric document-based bounds must be an integer")),
                }
            };
            let (lo, hi) = (bound(lo, int)?, bound(hi, int)?);
            check_forward(&lo, &hi)?;
            let b = Bounds::Documents(lo, hi);
            if !b.is_unbounded() && sort_fields.is_none() {
                return Err(Error::new(
                    ErrorCode::Location(5339901),
                    "Document-based bounds require a sortBy",
                ));
            }
            return Ok(b);
        }
        let Some(range) = range else {
            if !d.is_empty() {
                return Err(fail("'window' field can only contain 'documents' as the only argument or 'range' with an optional 'unit' field"));
            }
            return Ok(UNBOUNDED);
        };
        let (lo, hi) = unpack(range)?;
        let b = if let Some(unit) = unit {
            if d.len() != 2 {
                return Err(fail(
                    "'window' field that specifies unit cannot have other fields besides 'range'",
                ));
            }
            let Bson::String(unit) = unit else {
                return Err(fail("'unit' must be a string"));
            };
            let int = |v: &Bson| -> Result<f64> {
                super::super::exact_i64(v)
                    .map(|n| n as f64)
                    .ok_or_else(|| fail("With 'unit', range-based bounds must be an integer"))
            };
            let (lo, hi) = (bound(lo, int)?, bound(hi, int)?);
            check_forward(&lo, &hi)?;
            if !nidus_expr::date::is_time_unit(unit) {
                return Err(fail(format!("unknown time unit value: {unit}")));
            }
            Bounds::Range(lo, hi, Some(unit.clone()))
        } else {
            if d.len() != 1 {
                return Err(fail(
                    "'window' field that specifies range cannot have other fields besides 'unit'",
                ));
            }
            let num = |v: &Bson| -> Result<f64> {
                if super::super::is_number(v) {
                    Ok(nidus_expr::value::to_f64(v))
                } else {
                    Err(fail("Range-based bounds expression must be a number"))
                }
            };
            let (lo, hi) = (bound(lo, num)?, bound(hi, num)?);
            check_forward(&lo, &hi)?;
            Bounds::Range(lo, hi, None)
        };
        if sort_fields != Some(1) {
            return Err(Error::new(
                ErrorCode::Location(5339902),
                "Range-based bounds require sortBy a single field",
            ));
        }
        Ok(b)
    }

    pub fn serialize(&self) -> Document {
        let b = |x: &Bound, int: bool| match x {
            Bound::Unbounded => Bson::String("unbounded".into()),
            Bound::Current => Bson::String("current".into()),
            Bound::At(n) if int => Bson::Int64(*n as i64),
            Bound::At(n) => Bson::Double(*n),
        };
        match self {
            Bounds::Documents(lo, hi) => {
                bson::doc! {"documents": [b(lo, true), b(hi, true)]}
            }
            Bounds::Range(lo, hi, unit) => {
                let mut d = bson::doc! {"range": [b(lo, unit.is_some()), b(hi, unit.is_some())]};
                if let Some(u) = unit {
                    d.insert("unit", u.clone());
                }
                d
            }
        }
    }
}

fn unpack(v: &Bson) -> Result<(&Bson, &Bson)> {
    match v {
        Bson::Array(a) if a.len() == 2 => Ok((&a[0], &a[1])),
        _ => Err(fail(format!(
            "Window bounds must be a 2-element array: {}",
            nidus_expr::value::display_bson(v)
        ))),
    }
}

fn bound(v: &Bson, number: impl Fn(&Bson) -> Result<f64>) -> Result<Bound> {
    match v {
        Bson::String(s) if s == "unbounded" => Ok(Bound::Unbounded),
        Bson::String(s) if s == "current" => Ok(Bound::Current),
        Bson::String(_) => Err(fail(
            "Window bounds must be 'unbounded', 'current', or a number.",
        )),
        Bson::Document(_) | Bson::Array(_) => {
            Err(fail("Window bounds expression must be a constant."))
        }
        other => Ok(Bound::At(number(other)?)),
    }
}

fn check_forward(lo: &Bound, hi: &Bound) -> Result<()> {
    let num = |b: &Bound| match b {
        Bound::Current => Some(0.0),
        Bound::At(n) => Some(*n),
        Bound::Unbounded => None,
    };
    if let (Some(l), Some(h)) = (num(lo), num(hi)) {
        if l > h {
            return Err(Error::new(
                ErrorCode::Location(5339900),
                format!(
                    "Lower bound must not exceed upper bound: [{}, {}]",
                    nidus_expr::value::format_double(l),
                    nidus_expr::value::format_double(h)
                ),
            ));
        }
    }
    Ok(())
}
