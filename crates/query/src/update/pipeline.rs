//! Pipeline-style updates (`u: [{$set: ...}, {$unset: ...}, {$replaceWith: ...}]`): the
//! document goes through the stages an update allows (`$addFields`/`$set`, `$project`/
//! `$unset`, `$replaceRoot`/`$replaceWith`) and the result replaces it, keeping `_id`.

use crate::projection::add_fields::AddFields;
use crate::projection::replace_root::ReplaceRoot;
use crate::projection::{unset_spec, Policy, Projection};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::LetScope;

/// One stage of an update pipeline.
#[derive(Debug, Clone)]
enum Stage {
    AddFields(AddFields),
    Project(Projection),
    ReplaceRoot(ReplaceRoot),
}

/// A parsed update pipeline.
#[derive(Debug, Clone)]
pub struct UpdatePipeline {
    stages: Vec<Stage>,
}

/// Aggregation stages that exist but are not allowed in an update (InvalidOptions), as
/// opposed to names no stage has (40324).
const OTHER_STAGES: &[&str] = &[
    "$match",
    "$group",
    "$sort",
    "$limit",
    "$skip",
    "$unwind",
    "$lookup",
    "$graphLookup",
    "$facet",
    "$bucket",
    "$bucketAuto",
    "$count",
    "$sortByCount",
    "$sample",
    "$redact",
    "$out",
    "$merge",
    "$unionWith",
    "$geoNear",
    "$collStats",
    "$indexStats",
    "$currentOp",
    "$listSessions",
    "$listLocalSessions",
    "$planCacheStats",
    "$documents",
    "$densify",
    "$setWindowFields",
    "$changeStream",
    "$search",
    "$searchMeta",
    "$vectorSearch",
];

impl UpdatePipeline {
    /// Parses the stages of `u` in the command's scope (`let` and the statement's `c`).
    pub fn parse(stages: &[Bson], scope: &LetScope) -> Result<UpdatePipeline> {
        let stages = stages
            .iter()
            .map(|s| parse_stage(s, scope))
            .collect::<Result<Vec<_>>>()?;
        Ok(UpdatePipeline { stages })
    }

    /// The document after every stage (before `_id` is restored and checked).
    pub fn transform(&self, doc: &Document) -> Result<Document> {
        let mut current = doc.clone();
        for stage in &self.stages {
            let raw = nidus_common::encode::document_to_raw(&current)
                .map_err(|e| Error::new(ErrorCode::BSONObjectTooLarge, e.to_string()))?;
            current = match stage {
                Stage::AddFields(a) => a.apply(&raw)?,
                Stage::Project(p) => p.apply(&raw)?,
                Stage::ReplaceRoot(r) => r.apply(&raw)?,
            };
        }
        Ok(current)
    }
}

/// The stages an update pipeline may hold.
const UPDATE_STAGES: &[&str] = &[
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

/// A stage's name and argument: one field in a document.
fn stage_entry(stage: &Bson) -> Result<(&str, &Bson)> {
    let Bson::Document(d) = stage else {
        return Err(Error::new(
            ErrorCode::TypeMismatch,
            "Each element of the 'pipeline' array must be an object",
        ));
    };
    let mut fields = d.iter();
    let (Some((name, arg)), None) = (fields.next(), fields.next()) else {
        return Err(Error::new(
            ErrorCode::Location(40323),
            "A pipeline stage specification object must contain exactly one field.",
        ));
    };
    Ok((name, arg))
}

fn unrecognized(name: &str) -> Error {
    Error::new(
        ErrorCode::Location(40324),
        format!("Unrecognized pipeline stage name: '{name}'"),
    )
}

/// What MongoDB checks of an update pipeline when it reads the command, before any
/// statement runs (its lite parse, for the privileges the stages need): each stage one
/// field, each name a stage it knows. A failure fails the whole command, not a statement.
pub fn check_stages(stages: &[Bson]) -> Result<()> {
    for stage in stages {
        let (name, _) = stage_entry(stage)?;
        if !UPDATE_STAGES.contains(&name) && !OTHER_STAGES.contains(&name) {
            return Err(unrecognized(name));
        }
    }
    Ok(())
}

fn parse_stage(stage: &Bson, scope: &LetScope) -> Result<Stage> {
    let (name, arg) = stage_entry(stage)?;
    match name {
        "$addFields" | "$set" => Ok(Stage::AddFields(AddFields::parse(
            name,
            &object_arg(name, arg)?,
            scope,
        )?)),
        "$project" => {
            let p = Projection::parse_with(&object_arg(name, arg)?, Policy::Aggregate, scope)
                .map_err(|e| {
                    Error::new(
                        e.code,
                        format!("Invalid $project :: caused by :: {}", e.message),
                    )
                })?;
            Ok(Stage::Project(p))
        }
        "$unset" => Ok(Stage::Project(parse_unset(arg, scope)?)),
        "$replaceRoot" => Ok(Stage::ReplaceRoot(ReplaceRoot::parse_replace_root(
            arg, scope,
        )?)),
        "$replaceWith" => Ok(Stage::ReplaceRoot(ReplaceRoot::parse_replace_with(
            arg, scope,
        )?)),
        other if OTHER_STAGES.contains(&other) => Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("{other} is not allowed to be used within an update"),
        )),
        other => Err(unrecognized(other)),
    }
}

fn object_arg(stage: &str, arg: &Bson) -> Result<Document> {
    match arg {
        Bson::Document(d) => Ok(d.clone()),
        _ if stage == "$project" => Err(Error::new(
            ErrorCode::Location(15969),
            "$project specification must be an object",
        )),
        _ => Err(Error::new(
            ErrorCode::Location(40272),
            format!(
                "{stage} specification stage must be an object, got {}",
                crate::update::util::type_name(arg)
            ),
        )),
    }
}

/// `$unset: "a"` / `["a", "b.c"]`: an exclusion projection.
pub fn parse_unset(arg: &Bson, scope: &LetScope) -> Result<Projection> {
    Projection::parse_with(&unset_spec(arg)?, Policy::Aggregate, scope)
}
