//! `$and`, `$or`, `$nor` (evaluation; `$not` is [`super::Expr::Not`]).

use super::{Expr, MatchPos};
use bson::{Bson, Document, RawDocument};
use nidus_common::{Error, Result};

/// All children match; the position of the last child that reports one wins.
pub fn eval_and(es: &[Expr], doc: &RawDocument) -> MatchPos {
    let mut pos = None;
    for e in es {
        pos = e.eval(doc)?.or(pos);
    }
    Some(pos)
}

/// The first matching child decides the position.
pub fn eval_or(es: &[Expr], doc: &RawDocument) -> MatchPos {
    es.iter().find_map(|e| e.eval(doc))
}

pub fn eval_nor(es: &[Expr], doc: &RawDocument) -> MatchPos {
    es.iter().all(|e| e.eval(doc).is_none()).then_some(None)
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
