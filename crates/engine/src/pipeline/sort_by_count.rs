//! `$sortByCount: <expr>`: `$group` by the expression with a `count`, then `$sort` by count
//! descending (the stages MongoDB rewrites it to).

use super::{group::Group, sort::Sort, ParseCtx, StageRef};
use bson::{doc, Bson};
use nidus_common::{Error, ErrorCode, Result};
use std::sync::Arc;

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    match arg {
        Bson::String(s) if s.starts_with('$') => {}
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {}
        Bson::Document(_) => {
            return Err(Error::new(
                ErrorCode::Location(40147),
                "the sortByCount field must be specified as a $-prefixed path or an expression",
            ))
        }
        _ => {
            return Err(Error::new(
                ErrorCode::Location(40148),
                "the sortByCount field must be defined as a $-prefixed path or an expression",
            ))
        }
    }
    let group = Group::parse(
        &Bson::Document(doc! {"_id": arg.clone(), "count": {"$sum": 1}}),
        pcx,
    )?;
    let sort = Sort::new(&doc! {"count": -1})?;
    Ok(vec![Arc::new(group), Arc::new(sort)])
}
