//! Filter parsing: top-level operators, field operator documents, MongoDB's errors.

use super::array::{parse_size, ElemMatch};
use super::bits::{BitTest, BitsOp};
use super::comparison::{is_dbref, CmpOp, InList, Value};
use super::element::{true_value, TypeSet};
use super::evaluation::{parse_regex_operator, ModPred, RegexPred};
use super::logical::clauses;
use super::rewrite;
use super::{Expr, JsonSchema, Leaf, ParseOptions, Pred};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::path::FieldPath;
use std::sync::Arc;

/// How a value prints in error messages.
pub fn display(v: &Bson) -> String {
    v.to_string()
}

/// Parses a whole filter document.
pub fn parse_filter(filter: &Document, opts: &ParseOptions) -> Result<Expr> {
    let mut children = Vec::with_capacity(filter.len());
    // A name given twice is two conditions, both of which must hold (MongoDB parses a
    // filter element by element).
    for (k, v) in filter {
        let k = nidus_common::repeated::original_name(k);
        if let Some(e) = parse_top_element(k, v, opts)? {
            children.push(e);
        }
    }
    Ok(if children.len() == 1 {
        children.pop().unwrap_or(Expr::Const(true))
    } else {
        Expr::And(children)
    })
}

fn parse_top_element(k: &str, v: &Bson, opts: &ParseOptions) -> Result<Option<Expr>> {
    if !k.starts_with('$') {
        let pred = parse_field_value(v).map_err(|e| {
            if e.message == REGEX_COMPARISON {
                Error::bad_value(format!(
                    "Can't have RegEx as arg to predicate over field '{k}'."
                ))
            } else {
                e
            }
        })?;
        return Ok(Some(pred.at_path(&FieldPath::parse(k))));
    }
    let parse_all = |op: &str| -> Result<Vec<Expr>> {
        clauses(op, v)?
            .into_iter()
            .map(|d| parse_filter(d, opts))
            .collect()
    };
    let e = match k {
        "$and" => Expr::And(parse_all(k)?),
        "$or" => rewrite::or_to_in(parse_all(k)?)?,
        "$nor" => Expr::Nor(parse_all(k)?),
        "$comment" => return Ok(None),
        "$alwaysTrue" => Expr::Const(true),
        "$alwaysFalse" => Expr::Const(false),
        "$where" => return Err(Error::bad_value("no globalScriptEngine in $where parsing")),
        "$expr" if opts.nested => {
            return Err(Error::bad_value(
                "$expr can only be applied to the top-level document",
            ))
        }
        "$expr" => Expr::External(super::parse_expr(v, opts)?),
        "$jsonSchema" => Expr::Schema(Arc::new(JsonSchema::parse(v)?)),
        "$text" => {
            return Err(Error::new(
                ErrorCode::IndexNotFound,
                "text index required for $text query",
            ))
        }
        _ => {
            return Err(Error::bad_value(format!(
                "unknown top level operator: {k}. If you have a field name that starts with a '$' symbol, consider using $getField or $setField."
            )))
        }
    };
    Ok(Some(e))
}

/// True for `{$op: ...}` documents (not DBRefs).
fn is_operator_doc(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$')) && !is_dbref(d)
}

/// The predicate of `{path: v}`.
pub fn parse_field_value(v: &Bson) -> Result<Pred> {
    match v {
        Bson::RegularExpression(re) => Ok(Pred::Leaf(Leaf::Regex(RegexPred::from_bson(re)?))),
        Bson::Document(d) if is_operator_doc(d) => parse_operators(d),
        other => Ok(Pred::Leaf(Leaf::Eq(Value::new(other)?))),
    }
}

/// Parses `{$gt: 1, $lt: 5, ...}` into the conjunction of its predicates.
pub fn parse_operators(d: &Document) -> Result<Pred> {
    if d.contains_key("$near") || d.contains_key("$nearSphere") {
        return leaf(Leaf::Geo(super::geo::parse_near(d)?));
    }
    let mut preds = Vec::with_capacity(d.len());
    let (mut regex, mut options) = (None, None);
    for (op, arg) in d {
        match nidus_common::repeated::original_name(op) {
            "$regex" => regex = Some(arg),
            "$options" => options = Some(arg),
            op => preds.push(parse_operator(op, arg)?),
        }
    }
    if regex.is_some() || options.is_some() {
        preds.push(Pred::Leaf(Leaf::Regex(parse_regex_operator(
            regex, options,
        )?)));
    }
    Ok(if preds.len() == 1 {
        preds.pop().unwrap_or(Pred::Const(true))
    } else {
        Pred::And(preds)
    })
}

fn leaf(l: Leaf) -> Result<Pred> {
    Ok(Pred::Leaf(l))
}

/// The error of `$lt`/`$lte`/`$gt`/`$gte` with a regex operand, before the path is known
/// (`parse_top_element` names the field, as MongoDB's message does).
const REGEX_COMPARISON: &str = "Can't have RegEx as arg to predicate over field ''.";

fn parse_operator(op: &str, arg: &Bson) -> Result<Pred> {
    if let Some(cmp) = CmpOp::from_name(op) {
        if matches!(arg, Bson::RegularExpression(_)) {
            return Err(Error::bad_value(REGEX_COMPARISON));
        }
        return leaf(Leaf::Cmp(cmp, Value::new(arg)?));
    }
    if let Some(bits) = BitsOp::from_name(op) {
        return leaf(Leaf::Bits(BitTest::parse(op, bits, arg)?));
    }
    match op {
        "$eq" => leaf(Leaf::Eq(Value::new(arg)?)),
        "$ne" => {
            if matches!(arg, Bson::RegularExpression(_)) {
                return Err(Error::bad_value("Can't have regex as arg to $ne."));
            }
            Ok(Pred::Not(Box::new(Pred::Leaf(Leaf::Eq(Value::new(arg)?)))))
        }
        "$in" => leaf(Leaf::In(InList::parse(op, arg)?)),
        "$nin" => Ok(Pred::Not(Box::new(Pred::Leaf(Leaf::In(InList::parse(
            op, arg,
        )?))))),
        "$exists" => Ok(if true_value(arg) {
            Pred::Leaf(Leaf::Exists)
        } else {
            Pred::Not(Box::new(Pred::Leaf(Leaf::Exists)))
        }),
        "$type" => leaf(Leaf::Type(TypeSet::parse(arg)?)),
        "$mod" => leaf(Leaf::Mod(ModPred::parse(arg)?)),
        "$size" => leaf(Leaf::Size(parse_size(arg)?)),
        "$all" => parse_all(arg),
        "$elemMatch" => leaf(Leaf::ElemMatch(parse_elem_match(arg)?)),
        "$not" => parse_not(arg),
        "$geoWithin" | "$within" => leaf(Leaf::Geo(super::geo::parse_within("$geoWithin", arg)?)),
        "$geoIntersects" => leaf(Leaf::Geo(super::geo::parse_intersects(arg)?)),
        _ => Err(Error::bad_value(format!("unknown operator: {op}"))),
    }
}

fn parse_not(arg: &Bson) -> Result<Pred> {
    let inner = match arg {
        Bson::RegularExpression(re) => Pred::Leaf(Leaf::Regex(RegexPred::from_bson(re)?)),
        Bson::Document(d) if d.is_empty() => return Err(Error::bad_value("$not cannot be empty")),
        Bson::Document(d) => parse_operators(d)?,
        _ => return Err(Error::bad_value("$not needs a regex or a document")),
    };
    Ok(Pred::Not(Box::new(inner)))
}

fn parse_all(arg: &Bson) -> Result<Pred> {
    let Bson::Array(items) = arg else {
        return Err(Error::bad_value("$all needs an array"));
    };
    if items.is_empty() {
        return Ok(Pred::Const(false));
    }
    let is_elem_match = |b: &Bson| matches!(b, Bson::Document(d) if d.keys().next().is_some_and(|k| k == "$elemMatch"));
    let elem_match_form = is_elem_match(&items[0]);
    let mut preds = Vec::with_capacity(items.len());
    for item in items {
        if elem_match_form != is_elem_match(item) {
            return Err(Error::bad_value("$all/$elemMatch has to be consistent"));
        }
        let p = match item {
            Bson::Document(d) if elem_match_form => match d.get("$elemMatch") {
                Some(em) => Leaf::ElemMatch(parse_elem_match(em)?),
                None => return Err(Error::bad_value("$all/$elemMatch has to be consistent")),
            },
            Bson::RegularExpression(re) => Leaf::Regex(RegexPred::from_bson(re)?),
            Bson::Document(d) if is_operator_doc(d) => {
                return Err(Error::bad_value("no $ expressions in $all"))
            }
            other => Leaf::Eq(Value::new(other)?),
        };
        preds.push(Pred::Leaf(p));
    }
    Ok(Pred::And(preds))
}

/// Top-level operators make `$elemMatch` take its object form.
fn is_pathless(op: &str) -> bool {
    matches!(
        op,
        "$and"
            | "$or"
            | "$nor"
            | "$where"
            | "$expr"
            | "$text"
            | "$comment"
            | "$alwaysTrue"
            | "$alwaysFalse"
            | "$jsonSchema"
    )
}

fn parse_elem_match(arg: &Bson) -> Result<ElemMatch> {
    let Bson::Document(d) = arg else {
        return Err(Error::bad_value("$elemMatch needs an Object"));
    };
    let value_form = is_operator_doc(d) && d.keys().next().is_some_and(|k| !is_pathless(k));
    if value_form {
        let preds = d
            .iter()
            .map(|(op, a)| match op.as_str() {
                "$regex" | "$options" => Ok(Pred::Leaf(Leaf::Regex(parse_regex_operator(
                    d.get("$regex"),
                    d.get("$options"),
                )?))),
                _ => parse_operator(op, a),
            })
            .collect::<Result<Vec<Pred>>>()?;
        return Ok(ElemMatch::Value(preds));
    }
    if d.contains_key("$where") {
        return Err(Error::bad_value("$where can't be inside $elemMatch"));
    }
    let nested = ParseOptions {
        nested: true,
        ..ParseOptions::default()
    };
    let expr = parse_filter(d, &nested)?;
    Ok(ElemMatch::Object(Box::new(expr)))
}
