//! MongoDB's `$v: 2` update diffs (`doc_diff` in MongoDB): the change from one version of a
//! document to the next as `{d: {f: false}, u: {f: v}, i: {f: v}, s<f>: <sub-diff>}` for
//! documents and `{a: true, l: <new length>, u<i>: v, s<i>: <sub-diff>}` for arrays.
//!
//! The diff is computed from the two versions, as MongoDB does for pipeline updates, for
//! every kind of modifier update: fields are compared in order; a field that is not at the
//! same place in both is deleted and inserted (`i`), a changed object or array field gets a
//! sub-diff, anything else is an update (`u`). With `limit`, a (sub-)diff larger than the new
//! value it describes is replaced by that value, and [`diff`] returns None when the whole
//! diff is larger than the new document (the entry then logs the replacement).

use bson::{doc, Bson, Document};
use std::collections::{BTreeMap, BTreeSet};

enum Node {
    Doc(DocDiff),
    Arr(ArrDiff),
}

#[derive(Default)]
struct DocDiff {
    deletes: Vec<String>,
    updates: Vec<(String, Bson)>,
    inserts: Vec<(String, Bson)>,
    subs: Vec<(String, Node)>,
}

#[derive(Default)]
struct ArrDiff {
    resize: Option<usize>,
    children: BTreeMap<usize, ArrChild>,
}

enum ArrChild {
    Update(Bson),
    Sub(Node),
}

fn bson_size(v: &Bson) -> usize {
    match v {
        Bson::Document(d) => bson::to_vec(d).map(|b| b.len()).unwrap_or(usize::MAX),
        Bson::Array(a) => {
            let d: Document = a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect();
            bson::to_vec(&d).map(|b| b.len()).unwrap_or(usize::MAX)
        }
        other => bson::to_vec(&doc! { "": other.clone() })
            .map(|b| b.len().saturating_sub(7))
            .unwrap_or(usize::MAX),
    }
}

fn doc_size(d: &Document) -> usize {
    bson::to_vec(d).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// A sub-diff of two values of the same container type, or None when it is not smaller
/// than `post` under `limit`.
fn sub_diff(pre: &Bson, post: &Bson, limit: bool) -> Option<Node> {
    let node = match (pre, post) {
        (Bson::Document(a), Bson::Document(b)) => Node::Doc(doc_diff(a, b, limit)),
        (Bson::Array(a), Bson::Array(b)) => Node::Arr(array_diff(a, b, limit)),
        _ => return None,
    };
    if limit && doc_size(&serialize(&node)) >= bson_size(post) {
        return None;
    }
    Some(node)
}

fn same_container(a: &Bson, b: &Bson) -> bool {
    matches!(
        (a, b),
        (Bson::Document(_), Bson::Document(_)) | (Bson::Array(_), Bson::Array(_))
    )
}

fn doc_diff(pre: &Document, post: &Document, limit: bool) -> DocDiff {
    let mut out = DocDiff::default();
    let pre: Vec<(&String, &Bson)> = pre.iter().collect();
    let post: Vec<(&String, &Bson)> = post.iter().collect();
    let (mut i, mut j) = (0, 0);
    let mut moved: BTreeSet<String> = BTreeSet::new();
    while i < pre.len() && j < post.len() {
        let (pk, pv) = pre[i];
        let (qk, qv) = post[j];
        if pk == qk && pv == qv {
            i += 1;
            j += 1;
        } else if pk == qk {
            match same_container(pv, qv)
                .then(|| sub_diff(pv, qv, limit))
                .flatten()
            {
                Some(node) => out.subs.push((pk.clone(), node)),
                None => out.updates.push((pk.clone(), qv.clone())),
            }
            i += 1;
            j += 1;
        } else {
            moved.insert(pk.clone());
            i += 1;
        }
    }
    for (k, _) in &pre[i..] {
        out.deletes.push((*k).clone());
    }
    for (k, v) in &post[j..] {
        out.inserts.push(((*k).clone(), (*v).clone()));
        moved.remove(*k);
    }
    out.deletes.extend(moved);
    out
}

fn array_diff(pre: &[Bson], post: &[Bson], limit: bool) -> ArrDiff {
    let mut out = ArrDiff::default();
    for (idx, (a, b)) in pre.iter().zip(post).enumerate() {
        if a == b {
            continue;
        }
        let child = match same_container(a, b)
            .then(|| sub_diff(a, b, limit))
            .flatten()
        {
            Some(node) => ArrChild::Sub(node),
            None => ArrChild::Update(b.clone()),
        };
        out.children.insert(idx, child);
    }
    for (idx, b) in post.iter().enumerate().skip(pre.len()) {
        out.children.insert(idx, ArrChild::Update(b.clone()));
    }
    if pre.len() > post.len() {
        out.resize = Some(post.len());
    }
    out
}

fn serialize(node: &Node) -> Document {
    match node {
        Node::Doc(d) => {
            let mut out = Document::new();
            if !d.deletes.is_empty() {
                out.insert(
                    "d",
                    d.deletes
                        .iter()
                        .map(|k| (k.clone(), Bson::Boolean(false)))
                        .collect::<Document>(),
                );
            }
            if !d.updates.is_empty() {
                out.insert("u", d.updates.iter().cloned().collect::<Document>());
            }
            if !d.inserts.is_empty() {
                out.insert("i", d.inserts.iter().cloned().collect::<Document>());
            }
            for (k, sub) in &d.subs {
                out.insert(format!("s{k}"), serialize(sub));
            }
            out
        }
        Node::Arr(a) => {
            let mut out = doc! { "a": true };
            if let Some(n) = a.resize {
                out.insert("l", n as i32);
            }
            for (idx, child) in &a.children {
                match child {
                    ArrChild::Update(v) => {
                        out.insert(format!("u{idx}"), v.clone());
                    }
                    ArrChild::Sub(n) => {
                        out.insert(format!("s{idx}"), serialize(n));
                    }
                }
            }
            out
        }
    }
}

/// The `$v: 2` diff from `pre` to `post`; None under `limit` when it is not smaller than
/// `post` (log the replacement instead).
pub fn diff_with_limit(pre: &Document, post: &Document, limit: bool) -> Option<Document> {
    let out = serialize(&Node::Doc(doc_diff(pre, post, limit)));
    if limit && doc_size(&out) >= doc_size(post) {
        return None;
    }
    Some(out)
}

/// The diff a modifier update logs (never replaced by the document).
pub fn diff(pre: &Document, post: &Document) -> Option<Document> {
    diff_with_limit(pre, post, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pre: Document, post: Document, expected: Document) {
        assert_eq!(diff(&pre, &post), Some(expected));
    }

    #[test]
    fn top_level_fields() {
        check(
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"_id": 1, "a": 5, "b": 2},
            doc! {"u": {"a": 5}},
        );
        check(
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"_id": 1, "a": 1},
            doc! {"d": {"b": false}},
        );
        check(
            doc! {"_id": 1, "a": 1},
            doc! {"_id": 1, "a": 1, "c": "x"},
            doc! {"i": {"c": "x"}},
        );
        // A type change is an update, not a sub-diff.
        check(
            doc! {"_id": 1, "a": {"x": 1}},
            doc! {"_id": 1, "a": [1]},
            doc! {"u": {"a": [1]}},
        );
    }

    #[test]
    fn moved_field_is_deleted_then_inserted() {
        // `b` leaves its place: MongoDB logs it as an insert only; `a` is gone.
        check(
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"_id": 1, "c": 3, "b": 2},
            doc! {"d": {"a": false}, "i": {"c": 3, "b": 2}},
        );
    }

    #[test]
    fn nested_documents_and_arrays() {
        check(
            doc! {"_id": 1, "a": {"x": 1, "y": 2}},
            doc! {"_id": 1, "a": {"x": 1, "y": 3, "z": 4}},
            doc! {"sa": {"u": {"y": 3}, "i": {"z": 4}}},
        );
        check(
            doc! {"_id": 1, "arr": [1, 2, 3]},
            doc! {"_id": 1, "arr": [1, 2, 3, 4]},
            doc! {"sarr": {"a": true, "u3": 4}},
        );
        check(
            doc! {"_id": 1, "arr": [1, 2, 3]},
            doc! {"_id": 1, "arr": [1, 9]},
            doc! {"sarr": {"a": true, "l": 2, "u1": 9}},
        );
        check(
            doc! {"_id": 1, "arr": [{"q": 1}, {"q": 2}]},
            doc! {"_id": 1, "arr": [{"q": 1}, {"q": 2, "r": 1}]},
            doc! {"sarr": {"a": true, "s1": {"i": {"r": 1}}}},
        );
    }

    #[test]
    fn limit_falls_back_to_replacement() {
        let pre = doc! {"_id": 1, "a": 1};
        let post = doc! {"b": 2};
        assert_eq!(diff_with_limit(&pre, &post, true), None);
        assert!(diff_with_limit(&pre, &post, false).is_some());
    }
}
