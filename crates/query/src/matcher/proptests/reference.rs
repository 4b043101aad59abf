//! The reference evaluator: MongoDB's query semantics stated naively over owned values.
//!
//! Nothing here is shared with the matcher but the BSON value order (`cmp_bson`) and the
//! canonical type rank.

use super::{Cmp, Concrete};
use bson::{Bson, Document};
use nidus_doc::compare::{canonical_type_bson, cmp_bson};
use std::cmp::Ordering;

type Filter = super::Filter<Concrete>;
type Clause = super::Clause<Concrete>;
type Op = super::Op<Concrete>;

/// Whether `doc` satisfies `f`: every clause holds.
pub fn matches(f: &Filter, doc: &Document) -> bool {
    f.0.iter().all(|c| clause_matches(c, doc))
}

fn clause_matches(c: &Clause, doc: &Document) -> bool {
    match c {
        Clause::Implicit(path, v) => any_value(doc, path, true, |c| equal(c, v)),
        Clause::Ops(path, ops) => ops.iter().all(|op| op_at_path(op, doc, path)),
        Clause::And(fs) => fs.iter().all(|f| matches(f, doc)),
        Clause::Or(fs) => fs.iter().any(|f| matches(f, doc)),
        Clause::Nor(fs) => !fs.iter().any(|f| matches(f, doc)),
    }
}

/// An operator at a path: some value there satisfies it (`$ne`, `$nin`, `$not`: none does).
fn op_at_path(op: &Op, doc: &Document, path: &str) -> bool {
    let any = |expand: bool, pred: &dyn Fn(Option<&Bson>) -> bool| -> bool {
        any_value(doc, path, expand, pred)
    };
    match op {
        Op::Eq(x) => any(true, &|c| equal(c, x)),
        Op::Ne(x) => !any(true, &|c| equal(c, x)),
        Op::Cmp(cmp, x) => any(true, &|c| compare(*cmp, c, x)),
        Op::In(xs) => any(true, &|c| xs.iter().any(|x| equal(c, x))),
        Op::Nin(xs) => !any(true, &|c| xs.iter().any(|x| equal(c, x))),
        Op::Exists(want) => any(false, &|c| c.is_some()) == *want,
        // These see an array at the end of the path whole only.
        Op::Size(_) | Op::ElemMatchValue(_) | Op::ElemMatchObject(_) => {
            any(false, &|c| c.is_some_and(|v| op_on_value(op, v)))
        }
        Op::Type(alias) => any(true, &|c| c.is_some_and(|v| has_type(alias, v))),
        Op::All(xs) => !xs.is_empty() && xs.iter().all(|x| any(true, &|c| equal(c, x))),
        Op::AllElemMatch(ems) => ems.iter().all(|em| op_at_path(em, doc, path)),
        Op::Not(ops) => !ops.iter().all(|o| op_at_path(o, doc, path)),
    }
}

/// An operator on one value, as `$elemMatch`'s value form applies it to an element: no
/// array expansion.
fn op_on_value(op: &Op, v: &Bson) -> bool {
    let c = Some(v);
    match op {
        Op::Eq(x) => equal(c, x),
        Op::Ne(x) => !equal(c, x),
        Op::Cmp(cmp, x) => compare(*cmp, c, x),
        Op::In(xs) => xs.iter().any(|x| equal(c, x)),
        Op::Nin(xs) => !xs.iter().any(|x| equal(c, x)),
        Op::Exists(want) => *want,
        Op::Size(n) => matches!(v, Bson::Array(a) if a.len() as i64 == i64::from(*n)),
        Op::Type(alias) => has_type(alias, v),
        Op::All(xs) => !xs.is_empty() && xs.iter().all(|x| equal(c, x)),
        Op::AllElemMatch(ems) => ems.iter().all(|em| op_on_value(em, v)),
        Op::ElemMatchValue(ops) => elements(v).any(|e| ops.iter().all(|o| op_on_value(o, e))),
        Op::ElemMatchObject(f) => elements(v).filter_map(as_document).any(|d| matches(f, &d)),
        Op::Not(ops) => !ops.iter().all(|o| op_on_value(o, v)),
    }
}

/// The elements of an array (nothing for other values).
pub fn elements(v: &Bson) -> impl Iterator<Item = &Bson> {
    match v {
        Bson::Array(a) => a.iter(),
        _ => [].iter(),
    }
}

/// A document, or an array as the document `{"0": e0, "1": e1, ...}`.
pub fn as_document(v: &Bson) -> Option<Document> {
    match v {
        Bson::Document(d) => Some(d.clone()),
        Bson::Array(a) => Some(
            a.iter()
                .enumerate()
                .map(|(i, e)| (i.to_string(), e.clone()))
                .collect(),
        ),
        _ => None,
    }
}

fn is_nan(v: &Bson) -> bool {
    matches!(v, Bson::Double(d) if d.is_nan())
}

/// `$eq`: null equals missing; otherwise the same canonical type and equal in BSON order.
fn equal(c: Option<&Bson>, x: &Bson) -> bool {
    compare_with(c, x, |o| o == Ordering::Equal, true)
}

fn compare(cmp: Cmp, c: Option<&Bson>, x: &Bson) -> bool {
    compare_with(c, x, |o| cmp.holds(o), cmp.inclusive())
}

/// A comparison within one canonical type; NaN is only equal to NaN; missing compares as
/// null for the comparisons that include equality.
fn compare_with(
    c: Option<&Bson>,
    x: &Bson,
    holds: impl Fn(Ordering) -> bool,
    inclusive: bool,
) -> bool {
    let Some(v) = c else {
        return inclusive && matches!(x, Bson::Null);
    };
    if canonical_type_bson(v) != canonical_type_bson(x) {
        return false;
    }
    if is_nan(v) || is_nan(x) {
        return inclusive && is_nan(v) && is_nan(x);
    }
    holds(cmp_bson(v, x))
}

fn has_type(alias: &str, v: &Bson) -> bool {
    match alias {
        "double" => matches!(v, Bson::Double(_)),
        "string" => matches!(v, Bson::String(_)),
        "object" => matches!(v, Bson::Document(_)),
        "array" => matches!(v, Bson::Array(_)),
        "bool" => matches!(v, Bson::Boolean(_)),
        "null" => matches!(v, Bson::Null),
        "int" => matches!(v, Bson::Int32(_)),
        "long" => matches!(v, Bson::Int64(_)),
        "number" => matches!(
            v,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
        ),
        other => panic!("type alias {other} is not generated"),
    }
}

/// Whether some value at `path` (`None`: missing) satisfies `pred`.
fn any_value(
    doc: &Document,
    path: &str,
    expand_leaf_arrays: bool,
    pred: impl Fn(Option<&Bson>) -> bool,
) -> bool {
    values_at(doc, path, expand_leaf_arrays)
        .into_iter()
        .any(pred)
}

/// Every value `path` reaches in `doc` (`None`: missing there), arrays at the end of the
/// path offered element by element too when `expand_leaf_arrays`.
pub fn values_at<'a>(
    doc: &'a Document,
    path: &str,
    expand_leaf_arrays: bool,
) -> Vec<Option<&'a Bson>> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    in_document(doc, &parts, expand_leaf_arrays, &mut out);
    out
}

fn in_document<'a>(
    doc: &'a Document,
    parts: &[&str],
    expand: bool,
    out: &mut Vec<Option<&'a Bson>>,
) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    match doc.get(*first) {
        None => out.push(None),
        Some(v) if rest.is_empty() => at_end(v, expand, out),
        Some(Bson::Document(d)) => in_document(d, rest, expand, out),
        Some(Bson::Array(a)) => in_array(a, rest, expand, out),
        // A scalar in the middle of the path.
        Some(_) => out.push(None),
    }
}

/// A value found at the end of the path: an array's elements (one level), then the value.
fn at_end<'a>(v: &'a Bson, expand: bool, out: &mut Vec<Option<&'a Bson>>) {
    if let (Bson::Array(a), true) = (v, expand) {
        out.extend(a.iter().map(Some));
    }
    out.push(Some(v));
}

/// An array met with `rest` (non-empty) still to follow.
fn in_array<'a>(arr: &'a [Bson], rest: &[&str], expand: bool, out: &mut Vec<Option<&'a Bson>>) {
    let Some((next, after)) = rest.split_first() else {
        return;
    };
    for (i, e) in arr.iter().enumerate() {
        // Implicit traversal: the next component is a field name, even when it is a number.
        if let Bson::Document(d) = e {
            in_document(d, rest, expand, out);
        }
        if *next != i.to_string() {
            continue;
        }
        // The next component indexes this element.
        match e {
            _ if after.is_empty() => out.push(Some(e)),
            Bson::Document(d) => in_document(d, after, expand, out),
            Bson::Array(inner) => in_array(inner, after, expand, out),
            _ => {}
        }
    }
}
