//! Attaching a query's collation to the parsed filter: every comparison operand (`$eq`,
//! ranges, `$in`, including inside `$elemMatch`) compares strings under it. Regexes, `$type`,
//! `$mod`, `$size`, `$exists` and bit tests do not involve string order. `$expr` and
//! `$jsonSchema` keep binary comparison (not wired to collation yet).

use super::array::ElemMatch;
use super::{Expr, Leaf, Pred};
use nidus_doc::collation::Collation;

/// Sets `collation` on every comparison below `e`.
pub fn apply(e: &mut Expr, collation: &Collation) {
    match e {
        Expr::And(es) | Expr::Or(es) | Expr::Nor(es) => {
            es.iter_mut().for_each(|e| apply(e, collation))
        }
        Expr::Not(e) => apply(e, collation),
        Expr::Path { leaf, .. } => apply_leaf(leaf, collation),
        Expr::Const(_) | Expr::External(_) | Expr::Schema(_) => {}
    }
}

fn apply_leaf(leaf: &mut Leaf, collation: &Collation) {
    match leaf {
        Leaf::Eq(v) | Leaf::Cmp(_, v) => v.collation = Some(collation.clone()),
        Leaf::In(list) => {
            for v in &mut list.values {
                v.collation = Some(collation.clone());
            }
        }
        Leaf::ElemMatch(ElemMatch::Object(e)) => apply(e, collation),
        Leaf::ElemMatch(ElemMatch::Value(preds)) => {
            preds.iter_mut().for_each(|p| apply_pred(p, collation))
        }
        Leaf::Exists
        | Leaf::Type(_)
        | Leaf::Mod(_)
        | Leaf::Regex(_)
        | Leaf::Size(_)
        | Leaf::Bits(_)
        | Leaf::Geo(_) => {}
    }
}

fn apply_pred(p: &mut Pred, collation: &Collation) {
    match p {
        Pred::Leaf(l) => apply_leaf(l, collation),
        Pred::Not(p) => apply_pred(p, collation),
        Pred::And(ps) => ps.iter_mut().for_each(|p| apply_pred(p, collation)),
        Pred::Const(_) => {}
    }
}
