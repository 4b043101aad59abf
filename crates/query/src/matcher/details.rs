//! `errInfo.details` of a document that fails a collection validator (MongoDB's
//! doc_validation_error): which operator failed, as specified, why, and the value it saw.
//! Logical operators list the clauses that were not satisfied (`$nor` the ones that were).

use super::serialize::to_document;
use super::{Expr, Leaf};
use bson::{doc, Bson, Document, RawBsonRef, RawDocument};
use nidus_doc::path::get_path_raw;

/// The details of why `doc` fails `expr` (call only for a document that does not match).
pub fn validation_details(expr: &Expr, filter: &Document, doc: &RawDocument) -> Document {
    match expr {
        Expr::And(es) if es.len() > 1 => and_details(es, filter, doc),
        Expr::And(es) if es.len() == 1 => validation_details(&es[0], filter, doc),
        other => failed(other, filter, doc),
    }
}

fn matches(e: &Expr, doc: &RawDocument) -> bool {
    e.eval(doc).ok().flatten().is_some()
}

fn to_bson(v: RawBsonRef) -> Bson {
    Bson::try_from(v.to_raw_bson()).unwrap_or(Bson::Null)
}

fn and_details(es: &[Expr], filter: &Document, doc: &RawDocument) -> Document {
    let clauses: Vec<Bson> = es
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches(e, doc))
        .map(|(i, e)| Bson::Document(doc! { "index": i as i32, "details": failed(e, filter, doc) }))
        .collect();
    doc! { "operatorName": "$and", "clausesNotSatisfied": clauses }
}

/// The details of one expression that the document does not satisfy.
fn failed(e: &Expr, filter: &Document, doc: &RawDocument) -> Document {
    match e {
        Expr::And(es) => and_details(es, filter, doc),
        Expr::Or(es) => {
            let clauses: Vec<Bson> = es
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    Bson::Document(doc! { "index": i as i32, "details": failed(c, filter, doc) })
                })
                .collect();
            doc! { "operatorName": "$or", "clausesNotSatisfied": clauses }
        }
        Expr::Nor(es) => {
            let clauses: Vec<Bson> = es
                .iter()
                .enumerate()
                .filter(|(_, c)| matches(c, doc))
                .map(|(i, c)| Bson::Document(doc! { "index": i as i32, "details": satisfied(c) }))
                .collect();
            doc! { "operatorName": "$nor", "clausesSatisfied": clauses }
        }
        Expr::Not(inner) => match inner.as_ref() {
            Expr::Path { path, leaf } => negated_leaf(path.as_str(), leaf, doc),
            other => doc! {
                "operatorName": "$not",
                "details": satisfied(other),
            },
        },
        Expr::Const(_) => doc! {
            "operatorName": "$alwaysFalse",
            "specifiedAs": { "$alwaysFalse": 1 },
            "reason": "expression always evaluates to false",
        },
        Expr::Path { path, leaf } => leaf_details(path.as_str(), leaf, doc),
        Expr::External(_) => {
            let spec = filter.get("$expr").cloned().unwrap_or(Bson::Null);
            doc! {
                "operatorName": "$expr",
                "specifiedAs": { "$expr": spec },
                "reason": "expression did not match",
                "expressionResult": false,
            }
        }
        Expr::Schema(s) => s.validation_details(doc),
    }
}

/// A clause that matched where it should not have (inside `$nor` / `$not`).
fn satisfied(e: &Expr) -> Document {
    let mut d = doc! { "operatorName": operator_name(e) };
    d.insert("specifiedAs", to_document(e));
    d.insert("reason", "expression matched");
    d
}

fn operator_name(e: &Expr) -> String {
    match e {
        Expr::And(_) => "$and".into(),
        Expr::Or(_) => "$or".into(),
        Expr::Nor(_) => "$nor".into(),
        Expr::Not(_) => "$not".into(),
        Expr::Const(b) => if *b { "$alwaysTrue" } else { "$alwaysFalse" }.into(),
        Expr::Path { leaf, .. } => leaf_name(leaf).into(),
        Expr::External(_) => "$expr".into(),
        Expr::Schema(_) => "$jsonSchema".into(),
    }
}

fn leaf_name(leaf: &Leaf) -> &'static str {
    use super::comparison::CmpOp;
    match leaf {
        Leaf::Eq(_) => "$eq",
        Leaf::Cmp(CmpOp::Lt, _) => "$lt",
        Leaf::Cmp(CmpOp::Lte, _) => "$lte",
        Leaf::Cmp(CmpOp::Gt, _) => "$gt",
        Leaf::Cmp(CmpOp::Gte, _) => "$gte",
        Leaf::In(_) => "$in",
        Leaf::Exists => "$exists",
        Leaf::Type(_) => "$type",
        Leaf::Mod(_) => "$mod",
        Leaf::Regex(_) => "$regex",
        Leaf::Size(_) => "$size",
        Leaf::ElemMatch(_) => "$elemMatch",
        Leaf::Geo(g) => g.operator,
        Leaf::Bits(b) => {
            use super::bits::BitsOp;
            match b.op {
                BitsOp::AllSet => "$bitsAllSet",
                BitsOp::AllClear => "$bitsAllClear",
                BitsOp::AnySet => "$bitsAnySet",
                BitsOp::AnyClear => "$bitsAnyClear",
            }
        }
    }
}

/// Adds `consideredValue` (or, for an array, `consideredValues`: its elements and the
/// array itself, every value the predicate was tried on).
fn considered(d: &mut Document, v: RawBsonRef) {
    match v {
        RawBsonRef::Array(a) => {
            let mut vals: Vec<Bson> = a.into_iter().flatten().map(to_bson).collect();
            vals.push(to_bson(v));
            d.insert("consideredValues", vals);
        }
        v => {
            d.insert("consideredValue", to_bson(v));
        }
    }
}

fn leaf_details(path: &str, leaf: &Leaf, doc: &RawDocument) -> Document {
    let mut d = doc! {
        "operatorName": leaf_name(leaf),
        "specifiedAs": to_document(&Expr::Path { path: nidus_doc::path::FieldPath::parse(path), leaf: leaf.clone() }),
    };
    let value = get_path_raw(doc, path);
    let Some(v) = value else {
        let reason = match leaf {
            Leaf::Exists => "path does not exist",
            _ => "field was missing",
        };
        d.insert("reason", reason);
        return d;
    };
    let reason = match leaf {
        Leaf::Eq(_) | Leaf::Cmp(..) => "comparison failed",
        Leaf::In(_) => "no matching value found in array",
        Leaf::Exists => "path does not exist",
        Leaf::Type(_) => "type did not match",
        Leaf::Mod(_) => "$mod did not evaluate to true",
        Leaf::Regex(_) => "regular expression did not match",
        Leaf::Size(_) => "array length was not equal to given size",
        Leaf::ElemMatch(_) => "array did not satisfy the child predicate",
        Leaf::Bits(_) => "bitwise operator failed to match",
        Leaf::Geo(_) => "geo predicate failed to match",
    };
    d.insert("reason", reason);
    considered(&mut d, v);
    if let Leaf::Type(_) = leaf {
        d.insert(
            "consideredType",
            nidus_doc::compare::type_name(&to_bson(v)).to_string(),
        );
    }
    d
}

/// `$ne`, `$nin`, `$exists: false` and `{$not: {...}}` on a path.
fn negated_leaf(path: &str, leaf: &Leaf, doc: &RawDocument) -> Document {
    let value = get_path_raw(doc, path);
    let (name, specified, reason) = match leaf {
        Leaf::Eq(v) => (
            "$ne",
            doc! { path: { "$ne": v.bson.clone() } },
            "comparison succeeded",
        ),
        Leaf::In(_) => {
            let inner = to_document(&Expr::Path {
                path: nidus_doc::path::FieldPath::parse(path),
                leaf: leaf.clone(),
            });
            let list = inner
                .get_document(path)
                .ok()
                .and_then(|d| d.get("$in").cloned())
                .unwrap_or(Bson::Null);
            (
                "$nin",
                doc! { path: { "$nin": list } },
                "matching value found in array",
            )
        }
        Leaf::Exists => (
            "$exists",
            doc! { path: { "$exists": false } },
            "path does exist",
        ),
        other => {
            let inner = to_document(&Expr::Path {
                path: nidus_doc::path::FieldPath::parse(path),
                leaf: other.clone(),
            });
            let spec = inner.get(path).cloned().unwrap_or(Bson::Null);
            (
                "$not",
                doc! { path: { "$not": spec } },
                "child expression matched",
            )
        }
    };
    let mut d = doc! { "operatorName": name, "specifiedAs": specified, "reason": reason };
    if let Some(v) = value {
        considered(&mut d, v);
    }
    d
}
