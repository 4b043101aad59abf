//! Partial indexes: which filters an index may hold (MongoDB's `checkValidFilterExpressions`)
//! and when a query may use one (MongoDB's `expression::isSubsetOf`: every document the query
//! matches must be in the index, i.e. match its `partialFilterExpression`).

use bson::Bson;
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::{canonical_type, cmp_bson_with};
use nidus_query::matcher::{BitsOp, CmpOp, Expr, InList, Leaf, Value};
use std::cmp::Ordering;

/// MongoDB's `internalPartialFilterExpressionMaxDepth` default.
const MAX_DEPTH: usize = 4;

/// Refuses what a partial filter may not hold: anything but `$and`, `$or`, equality,
/// `$lt`/`$lte`/`$gt`/`$gte`, `$in`, `$exists` (true) and `$type`, nested at most 4 deep.
pub fn check_filter(expr: &Expr) -> Result<()> {
    check_at(expr, 0)
}

fn check_at(expr: &Expr, level: usize) -> Result<()> {
    if level + 1 > MAX_DEPTH {
        return Err(Error::new(
            ErrorCode::CannotCreateIndex,
            format!("partialFilterExpression depth may not exceed {MAX_DEPTH}"),
        ));
    }
    match expr {
        Expr::And(children) | Expr::Or(children) => {
            children.iter().try_for_each(|c| check_at(c, level + 1))
        }
        Expr::Path {
            leaf: Leaf::Eq(_) | Leaf::Cmp(..) | Leaf::In(_) | Leaf::Exists | Leaf::Type(_),
            ..
        } => Ok(()),
        other => Err(Error::new(
            ErrorCode::CannotCreateIndex,
            format!(
                "Expression not supported in partial index: {}",
                debug_string(other, 0)
            ),
        )),
    }
}

/// MongoDB's `MatchExpression::debugString` for the shapes a partial filter refuses: one line
/// per node, children indented by four spaces.
fn debug_string(expr: &Expr, level: usize) -> String {
    let pad = "    ".repeat(level);
    let children = |name: &str, es: &[Expr]| {
        let mut s = format!("{pad}{name}\n");
        for c in es {
            s.push_str(&debug_string(c, level + 1));
        }
        s
    };
    match expr {
        Expr::Not(inner) => format!("{pad}$not\n{}", debug_string(inner, level + 1)),
        Expr::Nor(es) => children("$nor", es),
        Expr::And(es) => children("$and", es),
        Expr::Or(es) => children("$or", es),
        Expr::Path { path, leaf } => {
            let path = path.as_str();
            let body = match leaf {
                Leaf::Eq(v) => format!("{path} $eq {}", shown(&v.bson)),
                Leaf::Cmp(op, v) => {
                    let op = match op {
                        CmpOp::Lt => "$lt",
                        CmpOp::Lte => "$lte",
                        CmpOp::Gt => "$gt",
                        CmpOp::Gte => "$gte",
                    };
                    format!("{path} {op} {}", shown(&v.bson))
                }
                Leaf::In(list) => {
                    let items: Vec<String> = list.values.iter().map(|v| shown(&v.bson)).collect();
                    format!("{path} $in [ {}]", items.join(", "))
                }
                Leaf::Exists => format!("{path} exists"),
                Leaf::Type(_) => format!("{path} type"),
                Leaf::Regex(r) => format!("{path} regex /{}/{}", r.pattern, r.options),
                Leaf::Mod(m) => format!("{path} mod {} % x == {}", m.divisor, m.remainder),
                Leaf::Size(n) => format!("{path} $size : {n}"),
                Leaf::ElemMatch(_) => format!("{path} $elemMatch"),
                Leaf::Geo(g) => format!("{path} {}", g.operator),
                Leaf::Bits(b) => {
                    let op = match b.op {
                        BitsOp::AllSet => "$bitsAllSet",
                        BitsOp::AllClear => "$bitsAllClear",
                        BitsOp::AnySet => "$bitsAnySet",
                        BitsOp::AnyClear => "$bitsAnyClear",
                    };
                    let bits: Vec<String> = b.positions.iter().map(u32::to_string).collect();
                    format!("{path} {op}: [{}]", bits.join(", "))
                }
            };
            format!("{pad}{body}\n")
        }
        Expr::Const(true) => format!("{pad}$alwaysTrue\n"),
        Expr::Const(false) => format!("{pad}$alwaysFalse\n"),
        Expr::External(_) => format!("{pad}$expr\n"),
        Expr::Schema(_) => format!("{pad}$jsonSchema\n"),
    }
}

fn shown(v: &Bson) -> String {
    nidus_common::shell::format(v)
}

/// True when every document `query` matches also matches `filter` (the query may use a partial
/// index with that filter). Conservative: false when unsure.
pub fn implies(query: &Expr, filter: &Expr) -> bool {
    if equivalent(query, filter) {
        return true;
    }
    // The filter's logical nodes first (MongoDB recurses into the right side before the left,
    // so {a: 5, b: 5} implies {$or: [{a: 3}, {a: 5, b: 5}]}).
    match filter {
        Expr::Or(children) => return children.iter().any(|f| implies(query, f)),
        Expr::And(children) => return children.iter().all(|f| implies(query, f)),
        Expr::Const(true) => return true,
        _ => {}
    }
    match query {
        Expr::And(children) => return children.iter().any(|q| implies(q, filter)),
        Expr::Or(children) => return children.iter().all(|q| implies(q, filter)),
        Expr::Const(false) => return true,
        _ => {}
    }
    let Expr::Path {
        path: fpath,
        leaf: fleaf,
    } = filter
    else {
        return false;
    };
    match fleaf {
        Leaf::Eq(v) => leaf_implies_cmp(query, fpath.as_str(), Op::Eq, v),
        Leaf::Cmp(op, v) => leaf_implies_cmp(query, fpath.as_str(), Op::from(*op), v),
        Leaf::Exists => implies_exists(query, fpath.as_str()),
        Leaf::In(list) => implies_in(query, fpath.as_str(), list),
        _ => false,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Lt,
    Lte,
    Gt,
    Gte,
}

impl From<CmpOp> for Op {
    fn from(op: CmpOp) -> Op {
        match op {
            CmpOp::Lt => Op::Lt,
            CmpOp::Lte => Op::Lte,
            CmpOp::Gt => Op::Gt,
            CmpOp::Gte => Op::Gte,
        }
    }
}

/// The comparison a query leaf makes on `path`, when it is one.
fn as_cmp<'a>(expr: &'a Expr, path: &str) -> Option<(Op, &'a Value)> {
    match expr {
        Expr::Path { path: p, leaf } if p.as_str() == path => match leaf {
            Leaf::Eq(v) => Some((Op::Eq, v)),
            Leaf::Cmp(op, v) => Some((Op::from(*op), v)),
            _ => None,
        },
        _ => None,
    }
}

/// A query leaf implies `path <op> rhs`: a comparison of the same canonical type whose values
/// all satisfy it, or a `$in` whose every value does.
fn leaf_implies_cmp(query: &Expr, path: &str, rop: Op, rhs: &Value) -> bool {
    if let Some((lop, lhs)) = as_cmp(query, path) {
        return cmp_subset(lop, lhs, rop, rhs);
    }
    match query {
        Expr::Path {
            path: p,
            leaf: Leaf::In(list),
        } if p.as_str() == path => {
            list.regexes.is_empty()
                && !list.values.is_empty()
                && list.values.iter().all(|v| cmp_subset(Op::Eq, v, rop, rhs))
        }
        _ => false,
    }
}

/// MongoDB's `_isSubsetOf(ComparisonMatchExpression, ComparisonMatchExpression)`.
fn cmp_subset(lop: Op, lhs: &Value, rop: Op, rhs: &Value) -> bool {
    if canonical_type(lhs.as_ref()) != canonical_type(rhs.as_ref()) {
        return false;
    }
    let nan = |v: &Value| match v.bson {
        Bson::Double(d) => d.is_nan(),
        Bson::Decimal128(d) => d.to_string().contains("NaN"),
        _ => false,
    };
    let equality = |op: Op| matches!(op, Op::Eq | Op::Lte | Op::Gte);
    if nan(lhs) || nan(rhs) {
        return equality(lop) && equality(rop) && nan(lhs) && nan(rhs);
    }
    if lhs.collation != rhs.collation && collatable(&lhs.bson) {
        return false;
    }
    let cmp = cmp_bson_with(&lhs.bson, &rhs.bson, rhs.collation.as_ref());
    if lop == rop && cmp == Ordering::Equal {
        return true;
    }
    match rop {
        Op::Lt | Op::Lte if matches!(lop, Op::Lt | Op::Lte | Op::Eq) => {
            if rop == Op::Lte {
                cmp.is_le()
            } else {
                cmp.is_lt()
            }
        }
        Op::Gt | Op::Gte if matches!(lop, Op::Gt | Op::Gte | Op::Eq) => {
            if rop == Op::Gte {
                cmp.is_ge()
            } else {
                cmp.is_gt()
            }
        }
        _ => false,
    }
}

fn collatable(v: &Bson) -> bool {
    matches!(
        v,
        Bson::String(_) | Bson::Symbol(_) | Bson::Document(_) | Bson::Array(_)
    )
}

/// MongoDB's `_isSubsetOf(MatchExpression, InMatchExpression)`: the query implies one of the
/// list's equalities.
fn implies_in(query: &Expr, path: &str, list: &InList) -> bool {
    list.regexes.is_empty()
        && list
            .values
            .iter()
            .any(|v| leaf_implies_cmp(query, path, Op::Eq, v))
}

/// MongoDB's `_isSubsetOf(MatchExpression, ExistsMatchExpression)`: the query leaf on `path`
/// cannot match a missing field.
fn implies_exists(query: &Expr, path: &str) -> bool {
    match query {
        // MongoDB lists the leaves (comparisons to anything but null, `$in` without null,
        // `$exists`, `$type`, `$regex`, ...); asking the leaf itself also covers
        // `{$gt: MinKey}`, which a missing field satisfies.
        Expr::Path { path: p, leaf } if p.as_str() == path => !leaf.matches_single(None),
        // {$ne: null} and {$nin: [null, ...]} exclude missing fields.
        Expr::Not(inner) => match inner.as_ref() {
            Expr::Path { path: p, leaf } if p.as_str() == path => match leaf {
                Leaf::Eq(v) => matches!(v.bson, Bson::Null),
                Leaf::In(list) => list.matches(None),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    }
}

/// The same predicate written twice (MongoDB's `MatchExpression::equivalent`, for the leaves
/// a partial filter may hold).
fn equivalent(a: &Expr, b: &Expr) -> bool {
    match (a, b) {
        (Expr::Path { path: pa, leaf: la }, Expr::Path { path: pb, leaf: lb })
            if pa.as_str() == pb.as_str() =>
        {
            match (la, lb) {
                (Leaf::Exists, Leaf::Exists) => true,
                (Leaf::Type(x), Leaf::Type(y)) => {
                    let mut xs = x.codes.clone();
                    let mut ys = y.codes.clone();
                    xs.sort_unstable();
                    ys.sort_unstable();
                    xs == ys && x.all_numbers == y.all_numbers
                }
                _ => false,
            }
        }
        (Expr::Not(x), Expr::Not(y)) => equivalent(x, y),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use nidus_query::matcher::Matcher;

    fn m(d: bson::Document) -> Matcher {
        Matcher::parse(&d).unwrap()
    }

    #[test]
    fn implication_follows_mongodb() {
        let cases = [
            // (query, partial filter, query implies filter)
            (doc! {"a": 5}, doc! {"a": {"$gt": 1}}, true),
            (doc! {"a": 1}, doc! {"a": {"$gt": 1}}, false),
            (doc! {"a": 1}, doc! {"a": {"$gte": 1}}, true),
            (doc! {"a": {"$gt": 5}}, doc! {"a": {"$gt": 1}}, true),
            (doc! {"a": {"$gte": 1}}, doc! {"a": {"$gt": 1}}, false),
            (doc! {"a": {"$gt": 1}}, doc! {"a": {"$gte": 1}}, true),
            (doc! {"a": {"$lt": 5}}, doc! {"a": {"$lt": 5}}, true),
            (doc! {"a": {"$lt": 5}}, doc! {"a": {"$lte": 4}}, false),
            (doc! {"a": {"$lt": 5}}, doc! {"a": {"$gt": 1}}, false),
            (doc! {"a": "x"}, doc! {"a": {"$gt": 1}}, false),
            (doc! {"a": 5, "b": 1}, doc! {"a": {"$gt": 1}}, true),
            (doc! {"b": 1}, doc! {"a": {"$gt": 1}}, false),
            (doc! {"a": 5}, doc! {"a": {"$gt": 1}, "b": 1}, false),
            (doc! {"a": 5, "b": 1}, doc! {"a": {"$gt": 1}, "b": 1}, true),
            (doc! {"a": 1}, doc! {"a": {"$exists": true}}, true),
            (doc! {"a": null}, doc! {"a": {"$exists": true}}, false),
            (
                doc! {"a": {"$ne": null}},
                doc! {"a": {"$exists": true}},
                true,
            ),
            (
                doc! {"a": {"$type": "string"}},
                doc! {"a": {"$exists": true}},
                true,
            ),
            (
                doc! {"a": {"$type": "string"}},
                doc! {"a": {"$type": "string"}},
                true,
            ),
            (doc! {"a": "s"}, doc! {"a": {"$type": "string"}}, false),
            (doc! {"a": {"$in": [1, 2]}}, doc! {"a": {"$lte": 2}}, true),
            (doc! {"a": {"$in": [1, 3]}}, doc! {"a": {"$lte": 2}}, false),
            (doc! {"a": 2}, doc! {"a": {"$in": [1, 2]}}, true),
            (doc! {"a": 3}, doc! {"a": {"$in": [1, 2]}}, false),
            (
                doc! {"a": 5, "b": 5},
                doc! {"$or": [{"a": 3}, {"a": 5, "b": 5}]},
                true,
            ),
            (
                doc! {"$or": [{"a": 3}, {"a": 4}]},
                doc! {"a": {"$gt": 2}},
                true,
            ),
            (
                doc! {"$or": [{"a": 3}, {"b": 4}]},
                doc! {"a": {"$gt": 2}},
                false,
            ),
            (
                doc! {"status": "active", "age": {"$gt": 3}},
                doc! {"status": "active"},
                true,
            ),
            (doc! {"age": {"$gt": 3}}, doc! {"status": "active"}, false),
            (doc! {}, doc! {"a": {"$exists": true}}, false),
            (
                doc! {"a": {"$gt": bson::Bson::MinKey}},
                doc! {"a": {"$exists": true}},
                false,
            ),
        ];
        for (q, f, want) in cases {
            let got = implies(m(q.clone()).expr(), m(f.clone()).expr());
            assert_eq!(got, want, "{q} implies {f}");
        }
    }

    #[test]
    fn refuses_filters_mongodb_refuses() {
        for f in [
            doc! {"a": {"$exists": false}},
            doc! {"a": {"$ne": 1}},
            doc! {"a": {"$regex": "x"}},
            doc! {"$nor": [{"a": 1}]},
            doc! {"$and": [{"$and": [{"$and": [{"$and": [{"a": 1}]}]}]}]},
        ] {
            let e = check_filter(m(f.clone()).expr()).unwrap_err();
            assert_eq!(e.code, ErrorCode::CannotCreateIndex, "{f}");
        }
        for (f, tree) in [
            (doc! {"a": {"$ne": 1}}, "$not\n    a $eq 1\n"),
            (doc! {"a": {"$exists": false}}, "$not\n    a exists\n"),
            (doc! {"$nor": [{"a": 1}]}, "$nor\n    a $eq 1\n"),
            (doc! {"a": {"$regex": "x"}}, "a regex /x/\n"),
            (doc! {"a": {"$mod": [2, 0]}}, "a mod 2 % x == 0\n"),
            (doc! {"a": {"$size": 2}}, "a $size : 2\n"),
            (doc! {"a": {"$bitsAllSet": 1}}, "a $bitsAllSet: [0]\n"),
        ] {
            let e = check_filter(m(f.clone()).expr()).unwrap_err();
            assert_eq!(
                e.message,
                format!("Expression not supported in partial index: {tree}"),
                "{f}"
            );
        }
        for f in [
            doc! {"a": {"$exists": true}},
            doc! {"a": {"$gt": 1}, "b": {"$type": "string"}},
            doc! {"$or": [{"a": 1}, {"b": {"$in": [1, 2]}}]},
        ] {
            check_filter(m(f.clone()).expr()).unwrap();
        }
    }
}
