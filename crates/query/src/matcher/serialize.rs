//! Serializes a parsed filter back to a document in MongoDB's canonical form, as explain
//! prints `parsedQuery` and stage `filter`s: every leaf with its operator (`{a: {$eq: 1}}`),
//! `$and` flattened and its children sorted by MongoDB's match-type order, then path.

use super::{BitsOp, CmpOp, ElemMatch, Expr, Leaf, Pred};
use bson::{doc, Bson, Document};

/// MongoDB's `MatchExpression::MatchType` order, which canonical sorting follows.
fn rank(e: &Expr) -> u8 {
    match e {
        Expr::And(_) => 0,
        Expr::Or(_) => 1,
        Expr::Path { leaf, .. } => match leaf {
            Leaf::ElemMatch(ElemMatch::Object(_)) => 2,
            Leaf::ElemMatch(ElemMatch::Value(_)) => 3,
            Leaf::Size(_) => 4,
            Leaf::Eq(_) => 5,
            Leaf::Cmp(CmpOp::Lte, _) => 6,
            Leaf::Cmp(CmpOp::Lt, _) => 7,
            Leaf::Cmp(CmpOp::Gt, _) => 8,
            Leaf::Cmp(CmpOp::Gte, _) => 9,
            Leaf::Regex(_) => 10,
            Leaf::Mod(_) => 11,
            Leaf::Exists => 12,
            Leaf::In(_) => 13,
            Leaf::Bits(_) => 14,
            Leaf::Type(_) => 20,
            Leaf::Geo(g) if g.near().is_some() => 22,
            Leaf::Geo(_) => 21,
        },
        Expr::Not(_) => 18,
        Expr::Nor(_) => 19,
        Expr::External(_) => 23,
        Expr::Const(false) => 24,
        Expr::Const(true) => 25,
        // MongoDB's internal schema expressions come after every other match type.
        Expr::Schema(_) => 26,
    }
}

fn path_of(e: &Expr) -> &str {
    match e {
        Expr::Path { path, .. } => path.as_str(),
        Expr::Not(inner) => path_of(inner),
        _ => "",
    }
}

/// Flattens nested `$and`s and sorts the conjuncts canonically.
pub fn canonical_conjuncts(e: &Expr) -> Vec<&Expr> {
    let mut out = Vec::new();
    flatten_and(e, &mut out);
    out.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| path_of(a).cmp(path_of(b)))
    });
    out
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::And(es) => es.iter().for_each(|c| flatten_and(c, out)),
        other => out.push(other),
    }
}

/// The filter document of a list of conjuncts (`{}` when empty, the child when one).
pub fn conjunction_document(es: &[&Expr]) -> Document {
    match es {
        [] => Document::new(),
        [one] => to_document(one),
        many => {
            doc! { "$and": many.iter().map(|e| Bson::Document(to_document(e))).collect::<Vec<_>>() }
        }
    }
}

/// The canonical document of an expression.
pub fn to_document(e: &Expr) -> Document {
    match e {
        Expr::And(_) => conjunction_document(&canonical_conjuncts(e)),
        Expr::Or(es) => doc! { "$or": list(es) },
        Expr::Nor(es) => doc! { "$nor": list(es) },
        Expr::Not(inner) => match inner.as_ref() {
            Expr::Path { path, leaf } => doc! { path.as_str(): { "$not": leaf_document(leaf) } },
            other => doc! { "$nor": [to_document(other)] },
        },
        Expr::Const(true) => doc! { "$alwaysTrue": 1 },
        Expr::Const(false) => doc! { "$alwaysFalse": 1 },
        Expr::Path { path, leaf } => doc! { path.as_str(): leaf_document(leaf) },
        Expr::External(p) => doc! { "$expr": format!("{p:?}") },
        Expr::Schema(s) => doc! { "$jsonSchema": s.spec().clone() },
    }
}

fn list(es: &[Expr]) -> Vec<Bson> {
    let mut refs: Vec<&Expr> = es.iter().collect();
    refs.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| path_of(a).cmp(path_of(b)))
    });
    refs.into_iter()
        .map(|e| Bson::Document(to_document(e)))
        .collect()
}

fn leaf_document(leaf: &Leaf) -> Document {
    match leaf {
        Leaf::Eq(v) => doc! { "$eq": v.bson.clone() },
        Leaf::Cmp(op, v) => {
            let name = match op {
                CmpOp::Lt => "$lt",
                CmpOp::Lte => "$lte",
                CmpOp::Gt => "$gt",
                CmpOp::Gte => "$gte",
            };
            doc! { name: v.bson.clone() }
        }
        Leaf::In(list) => {
            let mut items: Vec<Bson> = list.values.iter().map(|v| v.bson.clone()).collect();
            items.sort_by(nidus_doc::compare::cmp_bson);
            items.extend(list.regexes.iter().map(|r| r.to_bson()));
            doc! { "$in": items }
        }
        Leaf::Exists => doc! { "$exists": true },
        Leaf::Type(t) => {
            let codes: Vec<Bson> = t
                .codes
                .iter()
                .map(|c| {
                    Bson::Int32(match c {
                        0xFF => -1,
                        0x7F => 127,
                        n => i32::from(*n),
                    })
                })
                .collect();
            let mut items = codes;
            if t.all_numbers {
                items.insert(0, Bson::String("number".into()));
            }
            doc! { "$type": items }
        }
        Leaf::Mod(m) => doc! { "$mod": [m.divisor, m.remainder] },
        Leaf::Regex(r) => {
            let mut d = doc! { "$regex": r.pattern.clone() };
            if !r.options.is_empty() {
                d.insert("$options", r.options.clone());
            }
            d
        }
        Leaf::Size(n) => doc! { "$size": *n },
        Leaf::ElemMatch(ElemMatch::Object(e)) => doc! { "$elemMatch": to_document(e) },
        Leaf::ElemMatch(ElemMatch::Value(preds)) => {
            let mut d = Document::new();
            preds.iter().for_each(|p| pred_into(p, &mut d));
            doc! { "$elemMatch": d }
        }
        Leaf::Geo(g) if g.near().is_some() => g.arg.clone(),
        Leaf::Geo(g) => doc! { g.operator: g.arg.clone() },
        Leaf::Bits(b) => {
            let name = match b.op {
                BitsOp::AllSet => "$bitsAllSet",
                BitsOp::AllClear => "$bitsAllClear",
                BitsOp::AnySet => "$bitsAnySet",
                BitsOp::AnyClear => "$bitsAnyClear",
            };
            let positions: Vec<Bson> = b.positions.iter().map(|p| Bson::Int32(*p as i32)).collect();
            doc! { name: positions }
        }
    }
}

fn pred_into(p: &Pred, d: &mut Document) {
    match p {
        Pred::Leaf(l) => d.extend(leaf_document(l)),
        Pred::Not(inner) => {
            let mut n = Document::new();
            pred_into(inner, &mut n);
            d.insert("$not", n);
        }
        Pred::And(ps) => ps.iter().for_each(|p| pred_into(p, d)),
        Pred::Const(b) => {
            d.insert(if *b { "$alwaysTrue" } else { "$alwaysFalse" }, 1);
        }
    }
}
