//! `$unset`: an exclusion `$project` of the named fields (explain prints the `$project`).

use super::project::Project;
use super::{ParseCtx, StageRef};
use bson::Bson;
use nidus_common::Result;
use nidus_query::projection::unset_spec;
use std::sync::Arc;

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let spec = unset_spec(arg)?;
    Ok(vec![Arc::new(Project::new_as(
        &spec,
        &nidus_expr::ParseContext::new(),
        "$unset",
    )?)])
}
