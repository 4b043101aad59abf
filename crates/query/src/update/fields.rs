//! Field operators: `$set`, `$unset`, `$setOnInsert`, `$currentDate` and `$rename` (whose
//! source values are taken out of the document before the tree is applied).

use super::leaf::{Env, Op};
use super::path::{on_same_path, parse_path, Comp};
use super::util::{elem, id_desc, identical, type_name};
use bson::{Bson, Document};
use nidus_common::{Error, Result};
use nidus_doc::path::array_index;
use std::collections::HashMap;

/// Replaces `v` with `new`; false when they are identical (a no-op).
pub fn replace(v: &mut Bson, new: Bson) -> bool {
    if identical(v, &new) {
        return false;
    }
    *v = new;
    true
}

/// `$currentDate: {f: true}` / `{f: {$type: "date" | "timestamp"}}`.
pub fn parse_current_date(arg: &Bson) -> Result<Op> {
    match arg {
        Bson::Boolean(_) => Ok(Op::CurrentDate { timestamp: false }),
        Bson::Document(d) => {
            let mut timestamp = false;
            for (k, v) in d {
                if k != "$type" {
                    return Err(Error::bad_value(format!(
                        "Unrecognized $currentDate option: {k}"
                    )));
                }
                timestamp = match v {
                    Bson::String(s) if s == "date" => false,
                    Bson::String(s) if s == "timestamp" => true,
                    _ => {
                        return Err(Error::bad_value(
                            "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                        ))
                    }
                };
            }
            if d.is_empty() {
                return Err(Error::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                ));
            }
            Ok(Op::CurrentDate { timestamp })
        }
        other => Err(Error::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ))),
    }
}

pub fn current_date(timestamp: bool, env: &Env) -> Bson {
    if timestamp {
        Bson::Timestamp(env.ctx.timestamp)
    } else {
        Bson::DateTime(env.ctx.now)
    }
}

/// A parsed `$rename` pair.
#[derive(Debug, Clone)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

/// Validates `{from: "to"}` of `$rename`.
pub fn parse_rename(from: &str, arg: &Bson) -> Result<(Rename, Vec<Comp>, Vec<Comp>)> {
    let to = match arg {
        Bson::String(s) => s.clone(),
        other => {
            return Err(Error::bad_value(format!(
                "The 'to' field for $rename must be a string: {}",
                elem(from, other)
            )))
        }
    };
    let from_comps = parse_path(from)?;
    let to_comps = parse_path(&to)?;
    if from == to {
        return Err(Error::bad_value(format!(
            "The source and target field for $rename must differ: {}",
            elem(from, arg)
        )));
    }
    if on_same_path(from, &to) {
        return Err(Error::bad_value(format!(
            "The source and target field for $rename must not be on the same path: {}",
            elem(from, arg)
        )));
    }
    if from_comps.iter().any(Comp::is_dynamic) {
        return Err(Error::bad_value(format!(
            "The source field for $rename may not be dynamic: {from}"
        )));
    }
    if to_comps.iter().any(Comp::is_dynamic) {
        return Err(Error::bad_value(format!(
            "The destination field for $rename may not be dynamic: {to}"
        )));
    }
    Ok((
        Rename {
            from: from.to_string(),
            to,
        },
        from_comps,
        to_comps,
    ))
}

/// Takes the source values of the renames out of `doc`, keyed by destination path.
pub fn take_rename_sources(
    doc: &mut Document,
    renames: &[Rename],
) -> Result<HashMap<String, Bson>> {
    let mut out = HashMap::new();
    for r in renames {
        check_no_array(doc, &r.from, "source")?;
        if let Some(v) = remove_path(doc, &r.from) {
            check_no_array(doc, &r.to, "destination")?;
            out.insert(r.to.clone(), v);
        }
    }
    Ok(out)
}

/// `$rename` does not go through arrays on either path.
fn check_no_array(doc: &Document, path: &str, which: &str) -> Result<()> {
    let mut cur = doc;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        match cur.get(*part) {
            Some(Bson::Array(_)) if i + 1 < parts.len() => {
                return Err(Error::bad_value(format!(
                    "The {which} field cannot be an array element, '{path}' in doc with {} has an array field called '{part}'",
                    id_desc(doc.get("_id")).trim_start_matches('{').trim_end_matches('}')
                )));
            }
            Some(Bson::Document(d)) => cur = d,
            _ => return Ok(()),
        }
    }
    Ok(())
}

fn remove_path(doc: &mut Document, path: &str) -> Option<Bson> {
    match path.split_once('.') {
        None => doc.remove(path),
        Some((head, rest)) => match doc.get_mut(head) {
            Some(Bson::Document(d)) => remove_path(d, rest),
            _ => None,
        },
    }
}

/// Unsets `name` in `parent`: removes a field, nulls an array element.
pub fn unset_in(parent: &mut Bson, name: &str) -> bool {
    match parent {
        Bson::Document(d) => d.remove(name).is_some(),
        Bson::Array(a) => match array_index(name).and_then(|i| a.get_mut(i)) {
            Some(v) => {
                *v = Bson::Null;
                true
            }
            None => false,
        },
        _ => false,
    }
}
