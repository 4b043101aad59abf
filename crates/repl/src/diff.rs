//! Applying MongoDB's `$v: 2` update diffs (the `o.diff` of a `u` oplog entry): documents as
//! `{d: {f: false}, u: {f: v}, i: {f: v}, s<f>: <sub-diff>}`, arrays as
//! `{a: true, l: <new length>, u<i>: v, s<i>: <sub-diff>}`.
//!
//! Fields keep their place unless deleted or re-inserted (`i` appends), `u` replaces in place
//! (appends a field that is missing), a sub-diff applies to an existing object or array and
//! is ignored on anything else, so replaying an entry on a later version of the document (as
//! a restarted secondary may) does not fail.

use bson::{Bson, Document};
use std::collections::{HashMap, HashSet};

/// The document after `diff`.
pub fn apply_diff(doc: &Document, diff: &Document) -> Document {
    let mut deletes = HashSet::new();
    let mut updates: Vec<(String, Bson)> = Vec::new();
    let mut inserts: Vec<(String, Bson)> = Vec::new();
    let mut subs: HashMap<String, Document> = HashMap::new();
    for (k, v) in diff {
        match (k.as_str(), v) {
            ("d", Bson::Document(d)) => deletes.extend(d.keys().cloned()),
            ("u", Bson::Document(d)) => {
                updates.extend(d.iter().map(|(f, v)| (f.clone(), v.clone())))
            }
            ("i", Bson::Document(d)) => {
                inserts.extend(d.iter().map(|(f, v)| (f.clone(), v.clone())))
            }
            (s, Bson::Document(d)) if s.starts_with('s') && s.len() > 1 => {
                subs.insert(s[1..].to_string(), d.clone());
            }
            _ => {}
        }
    }
    let inserted: HashSet<&str> = inserts.iter().map(|(f, _)| f.as_str()).collect();
    let mut out = Document::new();
    for (k, v) in doc {
        if deletes.contains(k) || inserted.contains(k.as_str()) {
            continue;
        }
        if let Some(pos) = updates.iter().position(|(f, _)| f == k) {
            let (_, nv) = updates.remove(pos);
            out.insert(k.clone(), nv);
        } else if let Some(sd) = subs.get(k) {
            out.insert(k.clone(), apply_sub(v, sd));
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in updates.into_iter().chain(inserts) {
        out.insert(k, v);
    }
    out
}

fn apply_sub(value: &Bson, diff: &Document) -> Bson {
    let is_array_diff = matches!(diff.get("a"), Some(Bson::Boolean(true)));
    match (value, is_array_diff) {
        (Bson::Array(items), true) => Bson::Array(apply_array(items, diff)),
        (Bson::Document(d), false) => Bson::Document(apply_diff(d, diff)),
        _ => value.clone(),
    }
}

fn apply_array(items: &[Bson], diff: &Document) -> Vec<Bson> {
    let mut out = items.to_vec();
    for (k, v) in diff {
        let (kind, index) = k.split_at(1.min(k.len()));
        let Ok(i) = index.parse::<usize>() else {
            continue;
        };
        match kind {
            "u" => {
                if out.len() <= i {
                    out.resize(i + 1, Bson::Null);
                }
                out[i] = v.clone();
            }
            "s" => {
                if let (Some(item), Bson::Document(sd)) = (out.get(i), v) {
                    out[i] = apply_sub(item, sd);
                }
            }
            _ => {}
        }
    }
    let new_len = match diff.get("l") {
        Some(Bson::Int32(n)) => Some(*n as usize),
        Some(Bson::Int64(n)) => Some(*n as usize),
        Some(Bson::Double(n)) => Some(*n as usize),
        _ => None,
    };
    if let Some(n) = new_len {
        out.resize(n, Bson::Null);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn applies_document_and_array_diffs() {
        let cases = vec![
            (
                doc! { "_id": 1, "a": 1, "b": 2, "c": 3 },
                doc! { "d": { "b": false }, "u": { "a": 10 }, "i": { "z": 1 } },
                doc! { "_id": 1, "a": 10, "c": 3, "z": 1 },
            ),
            (
                doc! { "_id": 1, "a": { "x": 1, "y": 2 } },
                doc! { "sa": { "u": { "y": 3 }, "i": { "w": 4 } } },
                doc! { "_id": 1, "a": { "x": 1, "y": 3, "w": 4 } },
            ),
            (
                doc! { "_id": 1, "arr": [1, 2, 3] },
                doc! { "sarr": { "a": true, "l": 2, "u1": 20 } },
                doc! { "_id": 1, "arr": [1, 20] },
            ),
            (
                doc! { "_id": 1, "arr": [1, { "k": 1 }] },
                doc! { "sarr": { "a": true, "s1": { "u": { "k": 2 } }, "u3": 9 } },
                doc! { "_id": 1, "arr": [1, { "k": 2 }, Bson::Null, 9] },
            ),
            // A field re-inserted moves to the end; an update of a missing field appends it.
            (
                doc! { "_id": 1, "a": 1, "b": 2 },
                doc! { "i": { "a": 5 }, "u": { "q": 1 } },
                doc! { "_id": 1, "b": 2, "q": 1, "a": 5 },
            ),
            // A sub-diff on a value that is no longer a container is ignored (replays).
            (
                doc! { "_id": 1, "a": 5 },
                doc! { "sa": { "u": { "y": 3 } } },
                doc! { "_id": 1, "a": 5 },
            ),
        ];
        for (before, diff, after) in cases {
            assert_eq!(apply_diff(&before, &diff), after, "{before} + {diff}");
        }
    }
}
