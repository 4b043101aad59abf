//! Objects: `$mergeObjects`, `$getField`, `$setField`, `$unsetField`, `$objectToArray`,
//! `$arrayToObject`.

use crate::expression::{
    fixed, named_raw, parse_field_path, variadic, Expression, Named, Nary, Parser,
};
use crate::value::{display, display_bson, err, nullish, type_name, type_name_bson, Value};
use crate::variables::{ParseContext, Variables};
use bson::{Bson, Document};
use nidus_common::Result;

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$mergeObjects", |n, a, c| variadic(n, a, c, merge_objects)),
    ("$getField", parse_get_field),
    ("$setField", parse_set_field),
    ("$unsetField", parse_set_field),
    ("$objectToArray", |n, a, c| {
        fixed(n, a, c, 1, object_to_array)
    }),
    ("$arrayToObject", |n, a, c| {
        fixed(n, a, c, 1, array_to_object)
    }),
];

fn merge_objects(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let mut out = Document::new();
    for e in &op.args {
        let v = e.evaluate(vars)?;
        if nullish(&v) {
            continue;
        }
        match v {
            Some(Bson::Document(d)) => {
                for (k, v) in d {
                    out.insert(k, v);
                }
            }
            other => {
                return Err(err(
                    40400,
                    format!(
                        "$mergeObjects requires object inputs, but input {} is of type {}",
                        display(&other),
                        type_name(&other)
                    ),
                ))
            }
        }
    }
    Ok(Some(Bson::Document(out)))
}

/// Checks that `field` is a constant string (not a field path, not an expression).
fn constant_field(
    name: &str,
    e: &Expression,
    path_code: i32,
    const_code: i32,
    type_code: i32,
) -> Result<()> {
    match e {
        Expression::FieldPath(fp) => {
            let p = fp.serialize_string().unwrap_or_default();
            Err(err(
                path_code,
                format!(
                    "'{p}' is a field path reference which is not allowed in this context. Did you mean {{$literal: '{p}'}}?"
                ),
            ))
        }
        Expression::Constant(Bson::String(_)) => Ok(()),
        Expression::Constant(other) => Err(err(
            type_code,
            format!(
                "{name} requires 'field' to evaluate to type String, but got {}",
                type_name_bson(other)
            ),
        )),
        _ => Err(err(
            const_code,
            format!("{name} requires 'field' to evaluate to a constant, but got a non-constant argument"),
        )),
    }
}

fn parse_get_field(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let (field, input) = match arg {
        Bson::Document(d) if d.keys().next().is_some_and(|k| !k.starts_with('$')) => {
            let raw = named_raw(
                arg,
                &["field", "input"],
                || err(3041701, "unreachable"),
                |k| err(3041701, format!("$getField found an unknown argument: {k}")),
            )?;
            let field =
                raw[0].ok_or_else(|| err(3041702, "$getField requires 'field' to be specified"))?;
            let input =
                raw[1].ok_or_else(|| err(3041703, "$getField requires 'input' to be specified"))?;
            (
                Expression::parse(field, ctx)?,
                Expression::parse(input, ctx)?,
            )
        }
        other => (
            Expression::parse(other, ctx)?,
            parse_field_path("$$CURRENT", ctx)?,
        ),
    };
    constant_field(name, &field, 5654600, 5654601, 5654602)?;
    Ok(Expression::op(Named {
        name,
        fields: vec![("field", Some(field)), ("input", Some(input))],
        f: eval_get_field,
    }))
}

fn eval_get_field(op: &Named, vars: &mut Variables) -> Result<Value> {
    let Some(Bson::String(field)) = op.eval("field", vars)? else {
        return Ok(None);
    };
    let input = op.eval("input", vars)?;
    match input {
        None => Ok(None),
        Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Document(d)) => Ok(d.get(&field).cloned()),
        Some(_) => Ok(None),
    }
}

fn parse_set_field(name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let unset = name == "$unsetField";
    let allowed: &[&'static str] = if unset {
        &["field", "input"]
    } else {
        &["field", "input", "value"]
    };
    let raw = named_raw(
        arg,
        allowed,
        || {
            err(
                4161100,
                format!("{name} only supports an object as its argument"),
            )
        },
        |k| err(4161101, format!("{name} found an unknown argument: {k}")),
    )?;
    let field =
        raw[0].ok_or_else(|| err(4161102, format!("{name} requires 'field' to be specified")))?;
    let value = if unset {
        parse_field_path("$$REMOVE", ctx)?
    } else {
        Expression::parse(
            raw[2]
                .ok_or_else(|| err(4161103, format!("{name} requires 'value' to be specified")))?,
            ctx,
        )?
    };
    let input =
        raw[1].ok_or_else(|| err(4161109, format!("{name} requires 'input' to be specified")))?;
    let field = Expression::parse(field, ctx)?;
    constant_field(name, &field, 4161108, 4161106, 4161107)?;
    Ok(Expression::op(Named {
        name: "$setField",
        fields: vec![
            ("field", Some(field)),
            ("input", Some(Expression::parse(input, ctx)?)),
            ("value", Some(value)),
        ],
        f: eval_set_field,
    }))
}

fn eval_set_field(op: &Named, vars: &mut Variables) -> Result<Value> {
    let Some(Bson::String(field)) = op.eval("field", vars)? else {
        return Ok(Some(Bson::Null));
    };
    let input = op.eval("input", vars)?;
    if nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Document(mut d)) = input else {
        return Err(err(
            4161105,
            "$setField requires 'input' to evaluate to type Object",
        ));
    };
    match op.eval("value", vars)? {
        Some(v) => {
            d.insert(field, v);
        }
        None => {
            d.remove(&field);
        }
    }
    Ok(Some(Bson::Document(d)))
}

fn object_to_array(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let v = op.arg(0, vars)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Document(d)) = v else {
        return Err(err(
            40390,
            format!(
                "$objectToArray requires a document input, found: {}",
                type_name(&v)
            ),
        ));
    };
    let out = d
        .into_iter()
        .map(|(k, v)| {
            let mut e = Document::new();
            e.insert("k", k);
            e.insert("v", v);
            Bson::Document(e)
        })
        .collect();
    Ok(Some(Bson::Array(out)))
}

fn array_to_object(op: &Nary, vars: &mut Variables) -> Result<Value> {
    let v = op.arg(0, vars)?;
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = v else {
        return Err(err(
            40386,
            format!(
                "$arrayToObject requires an array input, found: {}",
                type_name(&v)
            ),
        ));
    };
    let mut out = Document::new();
    let Some(first) = items.first() else {
        return Ok(Some(Bson::Document(out)));
    };
    let pairs = match first {
        Bson::Array(_) => true,
        Bson::Document(_) => false,
        other => {
            return Err(err(
                40398,
                format!(
                    "Unrecognised input type format for $arrayToObject: {}",
                    type_name_bson(other)
                ),
            ))
        }
    };
    for el in &items {
        let (k, v) = if pairs {
            let Bson::Array(kv) = el else {
                return Err(err(
                    40396,
                    format!(
                        "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Array was detected, now found: {}",
                        type_name_bson(el)
                    ),
                ));
            };
            if kv.len() != 2 {
                return Err(err(
                    40397,
                    format!(
                        "$arrayToObject requires an array of size 2 arrays,found array of size: {}",
                        kv.len()
                    ),
                ));
            }
            let Bson::String(k) = &kv[0] else {
                return Err(err(
                    40395,
                    format!(
                        "$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}",
                        type_name_bson(&kv[0])
                    ),
                ));
            };
            (k.clone(), kv[1].clone())
        } else {
            let Bson::Document(kd) = el else {
                return Err(err(
                    40391,
                    format!(
                        "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Object was detected, now found: {}",
                        type_name_bson(el)
                    ),
                ));
            };
            if kd.len() != 2 {
                return Err(err(
                    40392,
                    format!(
                        "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}",
                        kd.len()
                    ),
                ));
            }
            let (Some(k), Some(v)) = (kd.get("k"), kd.get("v")) else {
                return Err(err(
                    40393,
                    format!(
                        "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys from: {}",
                        display_bson(el)
                    ),
                ));
            };
            let Bson::String(k) = k else {
                return Err(err(
                    40394,
                    format!(
                        "$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}",
                        type_name_bson(k)
                    ),
                ));
            };
            (k.clone(), v.clone())
        };
        if k.contains('\0') {
            return Err(err(
                4940400,
                "Key field cannot contain an embedded null byte",
            ));
        }
        out.insert(k, v);
    }
    Ok(Some(Bson::Document(out)))
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc, Bson};

    #[test]
    fn objects() {
        let d = doc! {"o": {"a": 1, "b": 2}, "p": {"b": 3}, "price.usd": 5, "$x": 7};
        let cases: Vec<(Bson, Option<Bson>)> = vec![
            (
                bson!({"$mergeObjects": ["$o", "$p", null, "$missing"]}),
                Some(bson!({"a": 1, "b": 3})),
            ),
            (bson!({"$mergeObjects": []}), Some(bson!({}))),
            (bson!({"$getField": "price.usd"}), Some(bson!(5))),
            (bson!({"$getField": {"$literal": "$x"}}), Some(bson!(7))),
            (
                bson!({"$getField": {"field": "a", "input": "$o"}}),
                Some(bson!(1)),
            ),
            (
                bson!({"$getField": {"field": "a", "input": "$missing"}}),
                None,
            ),
            (
                bson!({"$getField": {"field": "a", "input": null}}),
                Some(Bson::Null),
            ),
            (bson!({"$getField": {"field": "a", "input": 5}}), None),
            (
                bson!({"$setField": {"field": "c", "input": "$o", "value": 9}}),
                Some(bson!({"a": 1, "b": 2, "c": 9})),
            ),
            (
                bson!({"$setField": {"field": "a", "input": "$o", "value": "$$REMOVE"}}),
                Some(bson!({"b": 2})),
            ),
            (
                bson!({"$unsetField": {"field": "a", "input": "$o"}}),
                Some(bson!({"b": 2})),
            ),
            (
                bson!({"$objectToArray": "$o"}),
                Some(bson!([{"k": "a", "v": 1}, {"k": "b", "v": 2}])),
            ),
            (
                bson!({"$arrayToObject": [[["a", 1], ["b", 2]]]}),
                Some(bson!({"a": 1, "b": 2})),
            ),
            (
                bson!({"$arrayToObject": [[{"k": "a", "v": 1}]]}),
                Some(bson!({"a": 1})),
            ),
            (
                bson!({"$arrayToObject": {"$objectToArray": "$o"}}),
                Some(bson!({"a": 1, "b": 2})),
            ),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
        let errs = [
            (bson!({"$mergeObjects": ["$o", 1]}), 40400),
            (bson!({"$getField": "$a"}), 5654600),
            (bson!({"$getField": {"$concat": ["a"]}}), 5654601),
            (bson!({"$getField": {"field": 1, "input": "$o"}}), 5654602),
            (bson!({"$getField": {"field": "a"}}), 3041703),
            (
                bson!({"$setField": {"field": "a", "input": 1, "value": 1}}),
                4161105,
            ),
            (bson!({"$setField": {"field": "a", "input": "$o"}}), 4161103),
            (bson!({"$objectToArray": 1}), 40390),
            (bson!({"$arrayToObject": 1}), 40386),
            (bson!({"$arrayToObject": [[["a"]]]}), 40397),
            (bson!({"$arrayToObject": [[{"k": 1, "v": 1}]]}), 40394),
            (bson!({"$arrayToObject": [[1]]}), 40398),
        ];
        for (e, code) in errs {
            case_err(&d, &e, code);
        }
    }
}
