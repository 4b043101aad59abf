//! Conditionals: `$cond` (array and object forms), `$ifNull` (any number of inputs and a
//! replacement), `$switch`.

use crate::expression::{named_raw, parse_args, Expression, Nary, Operator, Parser};
use crate::value::{err, nullish, truthy, type_name_bson, Value};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, Document};
use nidus_common::Result;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$cond", parse_cond),
    ("$ifNull", parse_if_null),
    ("$switch", parse_switch),
];

fn parse_cond(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let args = match arg {
        Bson::Document(d) => {
            let mut slots: [Option<Expression>; 3] = [None, None, None];
            for (k, v) in d {
                let i = match k.as_str() {
                    "if" => 0,
                    "then" => 1,
                    "else" => 2,
                    _ => return Err(err(17083, format!("Unrecognized parameter to $cond: {k}"))),
                };
                slots[i] = Some(Expression::parse(v, ctx)?);
            }
            let [i, t, e] = slots;
            vec![
                i.ok_or_else(|| err(17080, "Missing 'if' parameter to $cond"))?,
                t.ok_or_else(|| err(17081, "Missing 'then' parameter to $cond"))?,
                e.ok_or_else(|| err(17082, "Missing 'else' parameter to $cond"))?,
            ]
        }
        other => {
            let args = parse_args(other, ctx)?;
            if args.len() != 3 {
                return Err(err(
                    16020,
                    format!(
                        "Expression $cond takes exactly 3 arguments. {} were passed in.",
                        args.len()
                    ),
                ));
            }
            args
        }
    };
    Ok(Expression::op(Nary {
        name,
        args,
        f: eval_cond,
    }))
}

fn eval_cond(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let c = op.arg(0, vars)?;
    op.arg(if truthy(&c) { 1 } else { 2 }, vars)
}

fn parse_if_null(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let args = parse_args(arg, ctx)?;
    if args.len() < 2 {
        return Err(err(
            1257300,
            format!("$ifNull needs at least two arguments, had: {}", args.len()),
        ));
    }
    Ok(Expression::op(Nary {
        name,
        args,
        f: eval_if_null,
    }))
}

fn eval_if_null(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let n = op.args.len();
    for (i, e) in op.args.iter().enumerate() {
        let v = e.evaluate(vars)?;
        if !nullish(&v) || i == n - 1 {
            return Ok(v);
        }
    }
    Ok(None)
}

/// `{$switch: {branches: [{case, then}, ...], default}}`.
#[derive(Debug)]
pub struct Switch {
    branches: Vec<(Expression, Expression)>,
    default: Option<Expression>,
}

fn parse_switch(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["branches", "default"],
        || {
            err(
                40060,
                format!(
                    "$switch requires an object as an argument, found: {}",
                    type_name_bson(arg)
                ),
            )
        },
        |k| err(40067, format!("$switch found an unknown argument: {k}")),
    )?;
    let mut branches = Vec::new();
    if let Some(b) = raw[0] {
        let Bson::Array(items) = b else {
            return Err(err(
                40061,
                format!(
                    "$switch expected an array for 'branches', found: {}",
                    type_name_bson(b)
                ),
            ));
        };
        for item in items {
            let Bson::Document(bd) = item else {
                return Err(err(
                    40062,
                    format!(
                        "$switch expected each branch to be an object, found: {}",
                        type_name_bson(item)
                    ),
                ));
            };
            let (mut case, mut then) = (None, None);
            for (k, v) in bd {
                match k.as_str() {
                    "case" => case = Some(Expression::parse(v, ctx)?),
                    "then" => then = Some(Expression::parse(v, ctx)?),
                    _ => {
                        return Err(err(
                            40063,
                            format!("$switch found an unknown argument to a branch: {k}"),
                        ))
                    }
                }
            }
            let case = case.ok_or_else(|| {
                err(
                    40064,
                    "$switch requires each branch have a 'case' expression",
                )
            })?;
            let then = then.ok_or_else(|| {
                err(
                    40065,
                    "$switch requires each branch have a 'then' expression.",
                )
            })?;
            branches.push((case, then));
        }
    }
    let default = match raw[1] {
        Some(d) => Some(Expression::parse(d, ctx)?),
        None => None,
    };
    if branches.is_empty() {
        return Err(err(40068, "$switch requires at least one branch."));
    }
    Ok(Expression::op(Switch { branches, default }))
}

impl Operator for Switch {
    fn name(&self) -> &str {
        "$switch"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        for (case, then) in &self.branches {
            if truthy(&case.evaluate(vars)?) {
                return then.evaluate(vars);
            }
        }
        match &self.default {
            Some(d) => d.evaluate(vars),
            None => Err(err(
                40066,
                "$switch could not find a matching branch for an input, and no default was specified.",
            )),
        }
    }

    fn serialize(&self) -> Bson {
        let branches: Vec<Bson> = self
            .branches
            .iter()
            .map(|(c, t)| {
                let mut d = Document::new();
                d.insert("case", c.serialize());
                d.insert("then", t.serialize());
                Bson::Document(d)
            })
            .collect();
        let mut args = Document::new();
        args.insert("branches", branches);
        if let Some(d) = &self.default {
            args.insert("default", d.serialize());
        }
        let mut d = Document::new();
        d.insert("$switch", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        let mut c = Vec::new();
        for (a, b) in &self.branches {
            c.push(a);
            c.push(b);
        }
        if let Some(d) = &self.default {
            c.push(d);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson};

    #[test]
    fn conditionals() {
        let d = doc! {"a": 5, "n": null};
        let cases = [
            (
                bson!({"$cond": [{"$gt": ["$a", 3]}, "big", "small"]}),
                Some(bson!("big")),
            ),
            (
                bson!({"$cond": {"if": "$n", "then": 1, "else": 2}}),
                Some(bson!(2)),
            ),
            (
                bson!({"$cond": {"else": 2, "if": true, "then": "$missing"}}),
                None,
            ),
            (
                bson!({"$ifNull": ["$n", "$missing", "dflt"]}),
                Some(bson!("dflt")),
            ),
            (bson!({"$ifNull": ["$n", "$a", "dflt"]}), Some(bson!(5))),
            (bson!({"$ifNull": ["$n", "$missing"]}), None),
            (bson!({"$ifNull": ["$n", null]}), Some(Bson::Null)),
            (
                bson!({"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}, {"case": {"$eq": ["$a", 5]}, "then": "five"}], "default": "other"}}),
                Some(bson!("five")),
            ),
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}], "default": "d"}}),
                Some(bson!("d")),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$cond": [1, 2]}), 16020),
            (bson!({"$cond": {"if": 1, "then": 2}}), 17082),
            (
                bson!({"$cond": {"if": 1, "then": 2, "else": 3, "x": 1}}),
                17083,
            ),
            (bson!({"$ifNull": ["$a"]}), 1257300),
            (
                bson!({"$switch": {"branches": [{"case": false, "then": 1}]}}),
                40066,
            ),
            (bson!({"$switch": {"branches": []}}), 40068),
            (bson!({"$switch": {"branches": [{"case": 1}]}}), 40065),
            (bson!({"$switch": 1}), 40060),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
