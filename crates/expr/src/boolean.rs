//! Boolean: `$and $or $not` (truthiness: false, null, undefined, missing and numeric zero are
//! false; everything else, including `""` and `[]`, is true).

use crate::expression::{fixed, variadic, Nary, Parser};
use crate::value::{truthy, Value};
use crate::variables::Variables;
use bson::Bson;
use nidus_common::Result;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$and", |n, a, c| variadic(n, a, c, and)),
    ("$or", |n, a, c| variadic(n, a, c, or)),
    ("$not", |n, a, c| fixed(n, a, c, 1, not)),
];

fn and(op: &Nary, vars: &mut Variables) -> Result<Value> {
    for e in &op.args {
        if !truthy(&e.evaluate(vars)?) {
            return Ok(Some(Bson::Boolean(false)));
        }
    }
    Ok(Some(Bson::Boolean(true)))
}

fn or(op: &Nary, vars: &mut Variables) -> Result<Value> {
    for e in &op.args {
        if truthy(&e.evaluate(vars)?) {
            return Ok(Some(Bson::Boolean(true)));
        }
    }
    Ok(Some(Bson::Boolean(false)))
}

fn not(op: &Nary, vars: &mut Variables) -> Result<Value> {
    Ok(Some(Bson::Boolean(!truthy(&op.arg(0, vars)?))))
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc};

    #[test]
    fn booleans() {
        let d = doc! {"t": true, "z": 0, "e": "", "arr": []};
        let cases = [
            (bson!({"$and": [1, "$t", "$e", "$arr"]}), true),
            (bson!({"$and": [1, "$z"]}), false),
            (bson!({"$and": []}), true),
            (bson!({"$or": []}), false),
            (bson!({"$or": ["$missing", null, 0, 0.0]}), false),
            (bson!({"$not": [0]}), true),
            (bson!({"$not": "$t"}), false),
            (bson!({"$not": [[]]}), false),
            (bson!({"$and": [1, 0, {"$divide": [1, 0]}]}), false),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, Some(bson!(want)));
        }
        case_err(&d, &bson!({"$or": ["$missing", {"$divide": [1, 0]}, 1]}), 2);
        case_err(&d, &bson!({"$not": [1, 2]}), 16020);
    }
}
