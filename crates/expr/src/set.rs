//! Sets: `$setUnion $setIntersection $setDifference $setEquals $setIsSubset $allElementsTrue
//! $anyElementTrue`. Arrays are sets of distinct values under MongoDB's comparison; union and
//! intersection come out in BSON order, difference keeps the first array's order.

use crate::accumulators::Ordered;
use crate::expression::{fixed, parse_args, variadic, Expression, Nary, Parser};
use crate::value::{err, nullish, truthy_bson, type_name, Value};
use crate::variables::{ParseContext, Variables};
use bson::Bson;
use nidus_common::Result;
use std::collections::BTreeSet;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$setUnion", |n, a, c| variadic(n, a, c, set_union)),
    ("$setIntersection", |n, a, c| {
        variadic(n, a, c, set_intersection)
    }),
    ("$setDifference", |n, a, c| {
        fixed(n, a, c, 2, set_difference)
    }),
    ("$setEquals", parse_set_equals),
    ("$setIsSubset", |n, a, c| fixed(n, a, c, 2, set_is_subset)),
    ("$allElementsTrue", |n, a, c| {
        fixed(n, a, c, 1, all_elements_true)
    }),
    ("$anyElementTrue", |n, a, c| {
        fixed(n, a, c, 1, any_element_true)
    }),
];

fn to_set(a: Vec<Bson>) -> BTreeSet<Ordered> {
    a.into_iter().map(Ordered).collect()
}

fn from_set(s: BTreeSet<Ordered>) -> Value {
    Some(Bson::Array(s.into_iter().map(|o| o.0).collect()))
}

fn set_union(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut out = BTreeSet::new();
    for e in &op.args {
        let v = e.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        match v {
            Some(Bson::Array(a)) => out.extend(a.into_iter().map(Ordered)),
            other => {
                return Err(err(
                    17043,
                    format!(
                        "All operands of $setUnion must be arrays. One argument is of type: {}",
                        type_name(&other)
                    ),
                ))
            }
        }
    }
    Ok(from_set(out))
}

fn set_intersection(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut cur: Option<BTreeSet<Ordered>> = None;
    for e in &op.args {
        let v = e.evaluate(vars)?;
        if nullish(&v) {
            return Ok(Some(Bson::Null));
        }
        match v {
            Some(Bson::Array(a)) => {
                let s = to_set(a);
                cur = Some(match cur {
                    None => s,
                    Some(c) => c.intersection(&s).cloned().collect(),
                });
            }
            other => {
                return Err(err(
                    17047,
                    format!(
                    "All operands of $setIntersection must be arrays. One argument is of type: {}",
                    type_name(&other)
                ),
                ))
            }
        }
    }
    Ok(from_set(cur.unwrap_or_default()))
}

fn set_difference(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    if nullish(&l) || nullish(&r) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(la)) = l else {
        return Err(err(
            17048,
            format!(
                "both operands of $setDifference must be arrays. First argument is of type: {}",
                type_name(&l)
            ),
        ));
    };
    let Some(Bson::Array(ra)) = r else {
        return Err(err(
            17049,
            format!(
                "both operands of $setDifference must be arrays. Second argument is of type: {}",
                type_name(&r)
            ),
        ));
    };
    let mut seen = to_set(ra);
    let mut out = Vec::new();
    for v in la {
        if seen.insert(Ordered(v.clone())) {
            out.push(v);
        }
    }
    Ok(Some(Bson::Array(out)))
}

fn parse_set_equals(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let args = parse_args(arg, ctx)?;
    if args.len() < 2 {
        return Err(err(
            17045,
            format!(
                "$setEquals needs at least two arguments had: {}",
                args.len()
            ),
        ));
    }
    Ok(Expression::op(Nary {
        name,
        args,
        f: set_equals,
    }))
}

fn set_equals(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut first: Option<BTreeSet<Ordered>> = None;
    let mut equal = true;
    for (i, e) in op.args.iter().enumerate() {
        let v = e.evaluate(vars)?;
        let Some(Bson::Array(a)) = v else {
            return Err(err(
                17044,
                format!(
                    "All operands of $setEquals must be arrays. {}-th argument is of type: {}",
                    i + 1,
                    type_name(&v)
                ),
            ));
        };
        let s = to_set(a);
        match &first {
            None => first = Some(s),
            Some(f) => equal &= *f == s,
        }
    }
    Ok(Some(Bson::Boolean(equal)))
}

fn set_is_subset(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let l = op.arg(0, vars)?;
    let r = op.arg(1, vars)?;
    let Some(Bson::Array(la)) = l else {
        return Err(err(
            17046,
            format!(
                "both operands of $setIsSubset must be arrays. First argument is of type: {}",
                type_name(&l)
            ),
        ));
    };
    let Some(Bson::Array(ra)) = r else {
        return Err(err(
            17042,
            format!(
                "both operands of $setIsSubset must be arrays. Second argument is of type: {}",
                type_name(&r)
            ),
        ));
    };
    let rs = to_set(ra);
    Ok(Some(Bson::Boolean(
        la.into_iter().all(|v| rs.contains(&Ordered(v))),
    )))
}

fn elements(op: &Nary, vars: &mut Variables, code: i32) -> Result<Vec<Bson>> {
    match op.arg(0, vars)? {
        Some(Bson::Array(a)) => Ok(a),
        other => Err(err(
            code,
            format!(
                "{}'s argument must be an array, but is {}",
                op.name,
                type_name(&other)
            ),
        )),
    }
}

fn all_elements_true(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = elements(op, vars, 17040)?;
    Ok(Some(Bson::Boolean(a.iter().all(truthy_bson))))
}

fn any_element_true(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let a = elements(op, vars, 17041)?;
    Ok(Some(Bson::Boolean(a.iter().any(truthy_bson))))
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson};

    #[test]
    fn sets() {
        let d = doc! {"a": ["x", "y"], "b": ["y", "z", "y"]};
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (
                bson!({"$setUnion": ["$a", "$b"]}),
                Some(bson!(["x", "y", "z"])),
            ),
            (
                bson!({"$setUnion": [[3, 1], [1.0, 2]]}),
                Some(bson!([1, 2, 3])),
            ),
            (bson!({"$setUnion": ["$a", null]}), Some(Bson::Null)),
            (
                bson!({"$setIntersection": ["$a", "$b"]}),
                Some(bson!(["y"])),
            ),
            (bson!({"$setIntersection": []}), Some(bson!([]))),
            (bson!({"$setDifference": ["$b", "$a"]}), Some(bson!(["z"]))),
            (
                bson!({"$setEquals": [["a", "b", "a"], ["b", "a"]]}),
                Some(bson!(true)),
            ),
            (bson!({"$setEquals": ["$a", "$b"]}), Some(bson!(false))),
            (bson!({"$setIsSubset": [["y"], "$b"]}), Some(bson!(true))),
            (bson!({"$setIsSubset": ["$a", "$b"]}), Some(bson!(false))),
            (
                bson!({"$allElementsTrue": [[1, true, "a"]]}),
                Some(bson!(true)),
            ),
            (bson!({"$allElementsTrue": [[]]}), Some(bson!(true))),
            (bson!({"$allElementsTrue": [[1, 0]]}), Some(bson!(false))),
            (
                bson!({"$anyElementTrue": [[0, null, false]]}),
                Some(bson!(false)),
            ),
            (bson!({"$anyElementTrue": [[0, [0]]]}), Some(bson!(true))),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$setUnion": ["$a", 1]}), 17043),
            (bson!({"$setIntersection": ["$a", 1]}), 17047),
            (bson!({"$setDifference": [1, "$a"]}), 17048),
            (bson!({"$setDifference": ["$a", 1]}), 17049),
            (bson!({"$setEquals": ["$a"]}), 17045),
            (bson!({"$setEquals": ["$a", null]}), 17044),
            (bson!({"$setIsSubset": [null, "$a"]}), 17046),
            (bson!({"$allElementsTrue": [1]}), 17040),
            (bson!({"$anyElementTrue": "$missing"}), 17041),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
