//! `$and`, `$or`, `$nor` (evaluation; `$not` is [`super::Expr::Not`]).

use super::{Expr, MatchPos};
use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, Result};

/// All children match; the position of the last child that reports one wins.
pub fn eval_and(es: &[Expr], doc: &RawDocument) -> Result<MatchPos> {
    let mut pos = None;
    for e in es {
        match e.eval(doc)? {
            Some(p) => pos = p.or(pos),
            None => return Ok(None),
        }
    }
    Ok(Some(pos))
}

/// The first matching child decides the position.
pub fn eval_or(es: &[Expr], doc: &RawDocument) -> Result<MatchPos> {
    for e in es {
        if let Some(p) = e.eval(doc)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

pub fn eval_nor(es: &[Expr], doc: &RawDocument) -> Result<MatchPos> {
    for e in es {
        if e.eval(doc)?.is_some() {
            return Ok(None);
        }
    }
    Ok(Some(None))
}

/// The documents of a `$and/$or/$nor` argument, with MongoDB's errors.
pub fn clauses<'a>(op: &str, arg: &'a Bson) -> Result<Vec<&'a Document>> {
    let Bson::Array(items) = arg else {
        return Err(Error::bad_value(format!("{op} must be an array")));
    };
    if items.is_empty() {
        return Err(Error::bad_value("$and/$or/$nor must be a nonempty array"));
    }
    items
        .iter()
        .map(|it| match it {
            Bson::Document(d) => Ok(d),
            _ => Err(Error::bad_value(
                "$or/$and/$nor entries need to be full objects",
            )),
        })
        .collect()
}
