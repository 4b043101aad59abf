//! `$bucket`: groups documents into ranges `[boundaries[i], boundaries[i+1])` of a
//! `groupBy` expression. Parsed as MongoDB rewrites it: a `$group` whose `_id` is a
//! `$switch` over the ranges (with `default` as the switch default), then `$sort` by `_id`.

use super::{group::Group, sort::Sort, ParseCtx, StageRef};
use bson::{doc, Bson, Document};
use nidus_common::{Error, Result};
use nidus_doc::compare::{canonical_type_bson, cmp_bson};
use std::sync::Arc;

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            40201,
            format!(
                "Argument to $bucket stage must be an object, but found type: {}.",
                super::type_name(arg)
            ),
        ));
    };
    let mut group_by = None;
    let mut boundaries = None;
    let mut default = None;
    let mut output = None;
    for (k, v) in spec {
        match k.as_str() {
            "groupBy" => group_by = Some(v.clone()),
            "boundaries" => boundaries = Some(v.clone()),
            "default" => default = Some(v.clone()),
            "output" => output = Some(v.clone()),
            other => {
                return Err(Error::location(
                    40197,
                    format!("Unrecognized option to $bucket: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(boundaries)) = (group_by, boundaries) else {
        return Err(Error::location(
            40198,
            "$bucket requires 'groupBy' and 'boundaries' to be specified.",
        ));
    };
    check_group_by(&group_by)?;
    let bounds = check_boundaries(&boundaries)?;
    if let Some(d) = &default {
        check_default(d, &bounds)?;
    }
    let output = match output {
        None => doc! {"count": {"$sum": 1}},
        Some(Bson::Document(o)) => o,
        Some(other) => {
            return Err(Error::location(
                40196,
                format!(
                    "The $bucket 'output' field must be an object, but found type: {}.",
                    super::type_name(&other)
                ),
            ))
        }
    };
    let mut group = doc! {"_id": switch(&group_by, &bounds, default)};
    group.extend(output);
    let group = Group::parse(&Bson::Document(group), pcx)?;
    let sort = Sort::new(&doc! {"_id": 1})?;
    Ok(vec![Arc::new(group), Arc::new(sort)])
}

fn check_group_by(v: &Bson) -> Result<()> {
    match v {
        Bson::String(s) if s.starts_with('$') => Ok(()),
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => Ok(()),
        other => Err(Error::location(
            40202,
            format!(
                "The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression, but found: {}.",
                nidus_common::shell::format(other)
            ),
        )),
    }
}

fn check_boundaries(v: &Bson) -> Result<Vec<Bson>> {
    let Bson::Array(items) = v else {
        return Err(Error::location(
            40200,
            format!(
                "The $bucket 'boundaries' field must be an array, but found type: {}.",
                super::type_name(v)
            ),
        ));
    };
    if items.len() < 2 {
        return Err(Error::location(
            40192,
            format!(
                "The $bucket 'boundaries' field must have at least 2 values, but found {} value(s).",
                items.len()
            ),
        ));
    }
    for pair in items.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if canonical_type_bson(a) != canonical_type_bson(b) {
            return Err(Error::location(
                40193,
                format!(
                    "All values in the the 'boundaries' option to $bucket must have the same type. Found conflicting types {} and {}.",
                    super::type_name(a),
                    super::type_name(b)
                ),
            ));
        }
        if cmp_bson(a, b).is_ge() {
            return Err(Error::location(
                40194,
                format!(
                    "The 'boundaries' option to $bucket must be sorted, but elements {} and {} are not in ascending order ({} is not less than {}).",
                    items.iter().position(|x| std::ptr::eq(x, a)).unwrap_or(0),
                    items.iter().position(|x| std::ptr::eq(x, b)).unwrap_or(0),
                    nidus_common::shell::format(a),
                    nidus_common::shell::format(b)
                ),
            ));
        }
    }
    Ok(items.clone())
}

fn check_default(d: &Bson, bounds: &[Bson]) -> Result<()> {
    let (Some(lo), Some(hi)) = (bounds.first(), bounds.last()) else {
        return Ok(());
    };
    let same_type = canonical_type_bson(d) == canonical_type_bson(lo);
    if same_type && cmp_bson(d, lo).is_ge() && cmp_bson(d, hi).is_lt() {
        return Err(Error::location(
            40199,
            "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary.",
        ));
    }
    Ok(())
}

/// `{$switch: {branches: [{case: {$and: [{$gte: [g, lo]}, {$lt: [g, hi]}]}, then: lo}, ...],
/// default}}`.
fn switch(group_by: &Bson, bounds: &[Bson], default: Option<Bson>) -> Bson {
    let branches: Vec<Bson> = bounds
        .windows(2)
        .map(|w| {
            bson::bson!({
                "case": {"$and": [
                    {"$gte": [group_by.clone(), {"$literal": w[0].clone()}]},
                    {"$lt": [group_by.clone(), {"$literal": w[1].clone()}]}
                ]},
                "then": {"$literal": w[0].clone()}
            })
        })
        .collect();
    let mut sw = Document::new();
    sw.insert("branches", branches);
    if let Some(d) = default {
        sw.insert("default", bson::bson!({"$literal": d}));
    }
    bson::bson!({"$switch": sw})
}
