//! `$count: "<field>"`: the number of input documents as `{<field>: n}` (nothing for an
//! empty input). Parsed as the `$group` and `$project` MongoDB rewrites it to.

use super::{group::Group, project::Project, ParseCtx, StageRef};
use bson::{doc, Bson};
use nidus_common::{Error, ErrorCode, Result};
use std::sync::Arc;

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::String(field) = arg else {
        return Err(Error::new(
            ErrorCode::Location(40156),
            "the count field must be a non-empty string",
        ));
    };
    if field.is_empty() {
        return Err(Error::new(
            ErrorCode::Location(40157),
            "the count field must be a non-empty string",
        ));
    }
    if field.starts_with('$') {
        return Err(Error::new(
            ErrorCode::Location(40158),
            "the count field cannot be a $-prefixed path",
        ));
    }
    if field.contains('.') {
        return Err(Error::new(
            ErrorCode::Location(40160),
            "the count field cannot contain '.'",
        ));
    }
    let group = Group::parse(
        &Bson::Document(doc! {"_id": null, field.clone(): {"$sum": 1}}),
        pcx,
    )?;
    let project = Project::new(&doc! {field.clone(): true, "_id": false})?;
    Ok(vec![Arc::new(group), Arc::new(project)])
}
