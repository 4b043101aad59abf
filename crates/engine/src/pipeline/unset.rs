//! `$unset`: an exclusion `$project` of the named fields (explain prints the `$project`).

use super::project::Project;
use super::{ParseCtx, StageRef};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::sync::Arc;

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let fields: Vec<&String> = match arg {
        Bson::String(s) => vec![s],
        Bson::Array(items) => {
            if items.is_empty() {
                return Err(Error::new(
                    ErrorCode::Location(31119),
                    "$unset specification must be a string or an array with at least one field",
                ));
            }
            items
                .iter()
                .map(|v| match v {
                    Bson::String(s) => Ok(s),
                    _ => Err(Error::new(
                        ErrorCode::Location(31120),
                        "$unset specification must be a string or an array containing only string values",
                    )),
                })
                .collect::<Result<_>>()?
        }
        _ => {
            return Err(Error::new(
                ErrorCode::Location(31002),
                "$unset specification must be a string or an array",
            ))
        }
    };
    let mut spec = Document::new();
    for f in fields {
        spec.insert(f.clone(), false);
    }
    Ok(vec![Arc::new(Project::new(&spec)?)])
}
