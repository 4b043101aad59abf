//! Array operators: `$push` (with `$each`, `$position`, `$sort`, `$slice`), `$addToSet`,
//! `$pop`, `$pull` (conditions through the matcher) and `$pullAll`.

use super::leaf::{Env, Op};
use super::util::{as_integer, elem, identical, is_number, type_name};
use crate::matcher::Matcher;
use bson::{doc, Bson, Document};
use nidus_common::{Error, Result};
use nidus_doc::compare::{cmp_bson, values_equal_bson};
use std::cmp::Ordering;

/// `$sort` of `$push`.
#[derive(Debug, Clone)]
pub enum PushSort {
    /// Sort whole elements; true = ascending.
    Whole(bool),
    /// Sort documents by fields.
    Pattern(Vec<(String, bool)>),
}

#[derive(Debug, Clone)]
pub struct PushSpec {
    pub each: Vec<Bson>,
    pub slice: Option<i64>,
    pub sort: Option<PushSort>,
    pub position: Option<i64>,
}

pub fn parse_push(arg: &Bson) -> Result<PushSpec> {
    let mut spec = PushSpec {
        each: vec![arg.clone()],
        slice: None,
        sort: None,
        position: None,
    };
    let Bson::Document(d) = arg else {
        return Ok(spec);
    };
    if !d.contains_key("$each") {
        return Ok(spec);
    }
    for (k, v) in d {
        match k.as_str() {
            "$each" => match v {
                Bson::Array(a) => spec.each = a.clone(),
                other => {
                    return Err(Error::bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_name(other)
                    )))
                }
            },
            "$slice" => spec.slice = Some(integer_arg("$slice", v)?),
            "$position" => spec.position = Some(integer_arg("$position", v)?),
            "$sort" => spec.sort = Some(parse_push_sort(v)?),
            other => {
                return Err(Error::bad_value(format!(
                    "Unrecognized clause in $push: {other}"
                )))
            }
        }
    }
    Ok(spec)
}

fn integer_arg(name: &str, v: &Bson) -> Result<i64> {
    if !is_number(v) {
        return Err(Error::bad_value(format!(
            "The value for {name} must be an integer value but was given type: {}",
            type_name(v)
        )));
    }
    as_integer(v).ok_or_else(|| {
        Error::bad_value(format!(
            "The {name} value in $push must be an integer value but was given {}",
            nidus_common::shell::format(v)
        ))
    })
}

const SORT_INVALID: &str =
    "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields";

fn sort_direction(v: &Bson) -> Option<bool> {
    match as_integer(v) {
        Some(1) if is_number(v) => Some(true),
        Some(-1) if is_number(v) => Some(false),
        _ => None,
    }
}

fn parse_push_sort(v: &Bson) -> Result<PushSort> {
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                return Err(Error::bad_value(
                    "The $sort pattern is empty when it should be a set of fields.",
                ));
            }
            let mut fields = Vec::with_capacity(d.len());
            for (k, dir) in d {
                if k.split('.').any(str::is_empty) {
                    return Err(Error::bad_value(format!(
                        "The $sort field is a dotted field but has an empty part: {k}"
                    )));
                }
                let asc = sort_direction(dir).ok_or_else(|| {
                    Error::bad_value("The $sort element value must be either 1 or -1")
                })?;
                fields.push((k.clone(), asc));
            }
            Ok(PushSort::Pattern(fields))
        }
        other => sort_direction(other)
            .map(PushSort::Whole)
            .ok_or_else(|| Error::bad_value(SORT_INVALID)),
    }
}

fn field_at<'a>(v: &'a Bson, path: &str) -> Option<&'a Bson> {
    let mut cur = v;
    for part in path.split('.') {
        match cur {
            Bson::Document(d) => cur = d.get(part)?,
            _ => return None,
        }
    }
    Some(cur)
}

fn cmp_by_pattern(a: &Bson, b: &Bson, fields: &[(String, bool)]) -> Ordering {
    for (f, asc) in fields {
        let x = field_at(a, f).unwrap_or(&Bson::Null);
        let y = field_at(b, f).unwrap_or(&Bson::Null);
        let o = cmp_bson(x, y);
        let o = if *asc { o } else { o.reverse() };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

fn push_into(arr: &mut Vec<Bson>, spec: &PushSpec) {
    let len = arr.len();
    let pos = match spec.position {
        None => len,
        Some(p) if p >= 0 => usize::try_from(p).unwrap_or(usize::MAX).min(len),
        Some(p) => len.saturating_sub(usize::try_from(p.unsigned_abs()).unwrap_or(usize::MAX)),
    };
    arr.splice(pos..pos, spec.each.iter().cloned());
    match &spec.sort {
        Some(PushSort::Whole(asc)) => arr.sort_by(|a, b| {
            let o = cmp_bson(a, b);
            if *asc {
                o
            } else {
                o.reverse()
            }
        }),
        Some(PushSort::Pattern(fields)) => arr.sort_by(|a, b| cmp_by_pattern(a, b, fields)),
        None => {}
    }
    if let Some(n) = spec.slice {
        let keep = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
        if n >= 0 {
            arr.truncate(keep);
        } else if arr.len() > keep {
            arr.drain(..arr.len() - keep);
        }
    }
}

pub fn push_new(spec: &PushSpec) -> Bson {
    let mut arr = Vec::new();
    push_into(&mut arr, spec);
    Bson::Array(arr)
}

pub fn push_existing(spec: &PushSpec, v: &mut Bson, name: &str, env: &Env) -> Result<bool> {
    let Bson::Array(arr) = v else {
        return Err(Error::bad_value(format!(
            "The field '{name}' must be an array but is of type {} in document {}",
            type_name(v),
            env.id_desc()
        )));
    };
    if spec.sort.is_none() && spec.slice.is_none() {
        push_into(arr, spec);
        return Ok(!spec.each.is_empty());
    }
    let before = arr.clone();
    push_into(arr, spec);
    Ok(before.len() != arr.len() || !before.iter().zip(arr.iter()).all(|(a, b)| identical(a, b)))
}

pub fn parse_add_to_set(arg: &Bson) -> Result<Op> {
    let vals = match arg {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k == "$each") => {
            match d.get("$each") {
                Some(Bson::Array(a)) => a.clone(),
                other => {
                    return Err(Error::bad_value(format!(
                        "The argument to $each in $addToSet must be an array but it was of type {}",
                        other.map(type_name).unwrap_or("missing")
                    )))
                }
            }
        }
        other => vec![other.clone()],
    };
    let mut unique: Vec<Bson> = Vec::with_capacity(vals.len());
    for v in vals {
        if !unique.iter().any(|u| values_equal_bson(u, &v)) {
            unique.push(v);
        }
    }
    Ok(Op::AddToSet(unique))
}

pub fn add_to_set_existing(vals: &[Bson], v: &mut Bson, name: &str) -> Result<bool> {
    let Bson::Array(arr) = v else {
        return Err(Error::bad_value(format!(
            "Cannot apply $addToSet to non-array field. Field named '{name}' has non-array type {}",
            type_name(v)
        )));
    };
    let mut modified = false;
    for val in vals {
        if !arr.iter().any(|e| values_equal_bson(e, val)) {
            arr.push(val.clone());
            modified = true;
        }
    }
    Ok(modified)
}

/// Which end `$pop` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopEnd {
    First,
    Last,
}

pub fn parse_pop(path: &str, arg: &Bson) -> Result<Op> {
    if !is_number(arg) {
        return Err(Error::failed_to_parse(format!(
            "Expected a number in: {}",
            elem(path, arg)
        )));
    }
    match as_integer(arg) {
        Some(1) => Ok(Op::Pop(PopEnd::Last)),
        Some(-1) => Ok(Op::Pop(PopEnd::First)),
        _ => Err(Error::failed_to_parse(format!(
            "$pop expects 1 or -1, found: {}",
            nidus_common::shell::format(arg)
        ))),
    }
}

pub fn pop_existing(end: PopEnd, v: &mut Bson, path: &str) -> Result<bool> {
    let Bson::Array(arr) = v else {
        return Err(Error::bad_value(format!(
            "Path '{path}' contains an element of non-array type '{}'",
            type_name(v)
        )));
    };
    if arr.is_empty() {
        return Ok(false);
    }
    match end {
        PopEnd::First => {
            arr.remove(0);
        }
        PopEnd::Last => {
            arr.pop();
        }
    }
    Ok(true)
}

/// The condition of `$pull`.
#[derive(Debug, Clone)]
pub enum PullCond {
    /// A plain value: elements equal to it.
    Eq(Bson),
    /// A query on document elements (`{$pull: {a: {b: 1, c: {$gt: 2}}}}`).
    Object(Box<Matcher>),
    /// Operators on the element itself (`{$gte: 6}`, a regex), matched as `{"": element}`.
    Wrapped(Box<Matcher>),
}

/// Query operators that apply to a path (MongoDB's `parsePathAcceptingKeyword`).
const PATH_ACCEPTING: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$mod",
    "$regex",
    "$options",
    "$all",
    "$elemMatch",
    "$size",
    "$not",
    "$bitsAllSet",
    "$bitsAllClear",
    "$bitsAnySet",
    "$bitsAnyClear",
    "$geoWithin",
    "$geoIntersects",
    "$near",
    "$nearSphere",
    "$within",
];

pub fn parse_pull(arg: &Bson) -> Result<PullCond> {
    match arg {
        Bson::Document(d)
            if d.keys()
                .next()
                .is_some_and(|k| PATH_ACCEPTING.contains(&k.as_str())) =>
        {
            Ok(PullCond::Wrapped(Box::new(Matcher::parse(
                &doc! {"": arg.clone()},
            )?)))
        }
        Bson::Document(d) => Ok(PullCond::Object(Box::new(Matcher::parse(d)?))),
        Bson::RegularExpression(_) => Ok(PullCond::Wrapped(Box::new(Matcher::parse(
            &doc! {"": arg.clone()},
        )?))),
        other => Ok(PullCond::Eq(other.clone())),
    }
}

fn raw_matches(m: &Matcher, d: &Document) -> Result<bool> {
    match nidus_common::encode::document_to_raw(d) {
        Ok(raw) => m.matches(&raw),
        Err(_) => Ok(false),
    }
}

impl PullCond {
    pub fn matches(&self, v: &Bson) -> Result<bool> {
        match self {
            PullCond::Eq(x) => Ok(values_equal_bson(x, v)),
            PullCond::Object(m) => match v {
                Bson::Document(d) => raw_matches(m, d),
                _ => Ok(false),
            },
            PullCond::Wrapped(m) => raw_matches(m, &doc! {"": v.clone()}),
        }
    }
}

fn cull(v: &mut Bson, op: &str, remove: impl Fn(&Bson) -> Result<bool>) -> Result<bool> {
    let Bson::Array(arr) = v else {
        return Err(Error::bad_value(format!(
            "Cannot apply {op} to a non-array value"
        )));
    };
    let before = arr.len();
    let mut kept = Vec::with_capacity(before);
    for e in arr.drain(..) {
        if !remove(&e)? {
            kept.push(e);
        }
    }
    *arr = kept;
    Ok(arr.len() != before)
}

pub fn pull_existing(cond: &PullCond, v: &mut Bson) -> Result<bool> {
    cull(v, "$pull", |e| cond.matches(e))
}

pub fn parse_pull_all(arg: &Bson) -> Result<Op> {
    match arg {
        Bson::Array(a) => Ok(Op::PullAll(a.clone())),
        other => Err(Error::bad_value(format!(
            "$pullAll requires an array argument but was given a {}",
            type_name(other)
        ))),
    }
}

pub fn pull_all_existing(vals: &[Bson], v: &mut Bson) -> Result<bool> {
    cull(v, "$pullAll", |e| {
        Ok(vals.iter().any(|x| values_equal_bson(x, e)))
    })
}
