//! The document an upsert starts from: the filter's equality predicates (`{a: v}`,
//! `{a: {$eq: v}}`, a one-element `$in`, also inside `$and`), dotted paths made nested,
//! `_id` first and the other fields in path order (MongoDB's `addEqualitiesToDoc`).

use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// The upsert seed of a filter.
pub fn upsert_seed(filter: &Document) -> Result<Document> {
    let mut eqs: Vec<(String, Bson)> = Vec::new();
    collect(filter, &mut eqs);
    eqs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    check_paths(&eqs)?;
    let mut out = Document::new();
    if let Some((_, id)) = eqs.iter().find(|(p, _)| p == "_id") {
        out.insert("_id", id.clone());
    }
    for (path, v) in eqs.iter().filter(|(p, _)| p != "_id") {
        nidus_doc::path::set_path(&mut out, path, v.clone());
    }
    Ok(out)
}

fn is_operator_doc(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$')) && !d.contains_key("$ref")
}

fn collect(filter: &Document, out: &mut Vec<(String, Bson)>) {
    for (k, v) in filter {
        // A name repeated in the filter is matched twice (`nidus_common::repeated`).
        let k = nidus_common::repeated::original_name(k);
        if k == "$and" {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect(d, out);
                    }
                }
            }
        } else if k.starts_with('$') {
            continue;
        } else {
            collect_field(k, v, out);
        }
    }
}

fn collect_field(path: &str, v: &Bson, out: &mut Vec<(String, Bson)>) {
    match v {
        Bson::RegularExpression(_) => {}
        Bson::Document(d) if is_operator_doc(d) => {
            for (op, arg) in d {
                match (nidus_common::repeated::original_name(op), arg) {
                    ("$eq", Bson::RegularExpression(_)) => {}
                    ("$eq", arg) => out.push((path.to_string(), arg.clone())),
                    ("$in", Bson::Array(items))
                        if items.len() == 1 && !matches!(items[0], Bson::RegularExpression(_)) =>
                    {
                        out.push((path.to_string(), items[0].clone()));
                    }
                    _ => {}
                }
            }
        }
        other => out.push((path.to_string(), other.clone())),
    }
}

fn check_paths(eqs: &[(String, Bson)]) -> Result<()> {
    for (i, (a, _)) in eqs.iter().enumerate() {
        for (b, _) in &eqs[i + 1..] {
            if a == b {
                return Err(Error::new(
                    ErrorCode::NotSingleValueField,
                    format!("cannot infer query fields to set, path '{a}' is matched twice"),
                ));
            }
            if super::path::on_same_path(a, b) {
                return Err(Error::new(
                    ErrorCode::NotSingleValueField,
                    format!(
                        "cannot infer query fields to set, both paths '{a}' and '{b}' are matched"
                    ),
                ));
            }
        }
    }
    Ok(())
}
