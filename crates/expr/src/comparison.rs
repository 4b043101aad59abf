//! Comparison: `$cmp $eq $ne $gt $gte $lt $lte`. Unlike query operators these compare with
//! the BSON total order across types (`{$gt: ["a", 1]}` is true: strings sort after numbers),
//! and missing sorts below null.

use crate::expression::{fixed, Nary, Parser};
use crate::value::{cmp_values, Value};
use crate::variables::Variables;
use bson::Bson;
use nidus_common::Result;
use std::cmp::Ordering;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$cmp", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$eq", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$ne", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$gt", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$gte", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$lt", |n, a, c| fixed(n, a, c, 2, compare)),
    ("$lte", |n, a, c| fixed(n, a, c, 2, compare)),
];

fn compare(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    let o = cmp_values(&l, &r);
    Ok(Some(match op.name {
        "$cmp" => Bson::Int32(match o {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }),
        "$eq" => Bson::Boolean(o == Ordering::Equal),
        "$ne" => Bson::Boolean(o != Ordering::Equal),
        "$gt" => Bson::Boolean(o == Ordering::Greater),
        "$gte" => Bson::Boolean(o != Ordering::Less),
        "$lt" => Bson::Boolean(o == Ordering::Less),
        _ => Bson::Boolean(o != Ordering::Greater),
    }))
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc};

    #[test]
    fn comparisons() {
        let d = doc! {"a": 1, "s": "x", "n": null};
        let cases = [
            (bson!({"$eq": [1, 1.0]}), bson!(true)),
            (bson!({"$eq": ["$a", 1]}), bson!(true)),
            (bson!({"$gt": ["$s", 1]}), bson!(true)),
            (bson!({"$lt": ["$n", 0]}), bson!(true)),
            (bson!({"$lt": ["$missing", null]}), bson!(true)),
            (bson!({"$eq": ["$missing", null]}), bson!(false)),
            (bson!({"$eq": ["$missing", "$alsoMissing"]}), bson!(true)),
            (bson!({"$cmp": [2, 1]}), bson!(1)),
            (bson!({"$cmp": ["a", "b"]}), bson!(-1)),
            (bson!({"$cmp": [[1, 2], [1, 2]]}), bson!(0)),
            (bson!({"$ne": [{"a": 1}, {"a": 1}]}), bson!(false)),
            (bson!({"$gte": [2, 2]}), bson!(true)),
            (bson!({"$lte": [3, 2]}), bson!(false)),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, Some(want));
        }
        case_err(&d, &bson!({"$eq": [1]}), 16020);
        case_err(&d, &bson!({"$eq": [1, 2, 3]}), 16020);
    }
}
