//! The aggregation pipeline: parsing `[{$stage: arg}, ...]`, the optimizer, and streaming
//! execution.
//!
//! Each stage is one file named after its operator (`$group` in `group.rs`) and implements
//! [`DocumentSource`]: it parses its argument with MongoDB's errors, prints itself for
//! explain, tells the optimizer which paths it reads and writes, and opens a pull-based
//! [`DocStream`] over its input. Stages that MongoDB defines as aliases or compositions
//! (`$set`, `$unset`, `$count`, `$sortByCount`, `$bucket`, `$replaceWith`) parse into the
//! stages they stand for, so explain shows what runs.
//!
//! [`run::open`] turns a parsed pipeline into a stream: [`optimize`] rewrites it (one named
//! rule per file) and moves the leading `$match`/`$sort`/`$skip`/`$limit`/`$project` into
//! the find plan of the collection (`$cursor`), whose executor then feeds the first stage.

mod context;
pub mod explain;
pub mod optimize;
mod raw_fields;
pub mod run;
mod stream;

mod add_fields;
mod bucket;
mod bucket_auto;
pub mod change_stream;
mod count;
mod densify;
mod documents;
mod facet;
mod fill;
mod geo_near;
mod granularity;
mod graph_lookup;
mod group;
#[cfg(test)]
mod group_tests;
mod limit;
mod list_local_sessions;
pub(crate) mod lookup;
mod lookup_hash_join;
#[cfg(test)]
mod lookup_tests;
mod r#match;
mod merge;
mod out;
mod plan_cache_stats;
mod project;
mod redact;
mod replace_root;
mod sample;
mod set_window_fields;
mod skip;
mod sort;
mod sort_by_count;
mod union_with;
pub(crate) mod unpack_bucket;
mod unset;
pub(crate) mod unwind;
mod window;

#[cfg(test)]
mod tests;

pub use context::{
    set_max_sub_pipeline_depth, Binding, ExpCtx, ParseCtx, PrimaryWrites, MAX_BLOCKING_STAGE_BYTES,
    MAX_DOCUMENT_BYTES,
};
pub use stream::{DocStream, Stream, VecStream};

pub use group::Group;
pub use limit::Limit;
pub use project::Project;
pub use r#match::Match;
pub use skip::Skip;
pub use sort::Sort;

use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// What the optimizer knows about the paths a stage changes.
#[derive(Debug, Clone, PartialEq)]
pub enum Modified {
    /// Every path may change (or the stage's effect is not analysed).
    All,
    /// Only these dotted paths (and what lies below them) change.
    Paths(Vec<String>),
    /// Only these paths survive unchanged; everything else is dropped or recomputed.
    Preserved(Vec<String>),
}

/// Where a stage may sit in a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Anywhere,
    /// A source stage (`$documents`).
    First,
    /// A writing stage (`$out`, `$merge`).
    Last,
}

/// One parsed pipeline stage (MongoDB's DocumentSource).
pub trait DocumentSource: Send + Sync + fmt::Debug + Any {
    /// The operator name (`$group`).
    fn name(&self) -> &'static str;
    /// The stage's argument as explain prints it.
    fn serialize(&self) -> Bson;
    /// The stream of this stage's results over `input`.
    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream>;
    /// The paths this stage changes (for moving a `$match` before it).
    fn modified(&self) -> Modified {
        Modified::All
    }
    fn position(&self) -> Position {
        Position::Anywhere
    }
    /// True for a stage that ignores its input (`$documents`); the pipeline then needs no
    /// collection.
    fn is_source(&self) -> bool {
        false
    }
    /// The top-level fields of its input documents this stage reads, when it reads no
    /// others and does not pass its input on (`$group`): the collection scan feeding it
    /// then decodes only those fields. None: the whole document.
    fn input_fields(&self) -> Option<Vec<String>> {
        None
    }
    /// A copy with the variables of `ctx` bound where the stage needs their values before
    /// running (`$match` with `$expr` on `$lookup`'s `let` variables), or None if unchanged.
    fn bind(&self, _ctx: &ExpCtx) -> Result<Option<Arc<dyn DocumentSource>>> {
        Ok(None)
    }
    fn as_any(&self) -> &dyn Any;
}

pub type StageRef = Arc<dyn DocumentSource>;

/// `{name: serialize()}`.
pub fn stage_document(s: &dyn DocumentSource) -> Document {
    let mut d = Document::new();
    d.insert(s.name(), s.serialize());
    d
}

/// Downcasts a stage to its concrete type.
pub fn downcast<T: 'static>(s: &StageRef) -> Option<&T> {
    s.as_any().downcast_ref::<T>()
}

type StageParser = fn(&Bson, &ParseCtx) -> Result<Vec<StageRef>>;

/// Stage name → parser. A parser may return several stages (`$sortByCount` is `$group`
/// then `$sort`).
const STAGES: &[(&str, StageParser)] = &[
    ("$match", r#match::parse),
    ("$project", project::parse),
    ("$addFields", add_fields::parse_add_fields),
    ("$set", add_fields::parse_set),
    ("$unset", unset::parse),
    ("$replaceRoot", replace_root::parse_replace_root),
    ("$replaceWith", replace_root::parse_replace_with),
    ("$unwind", unwind::parse),
    ("$group", group::parse),
    ("$sort", sort::parse),
    ("$limit", limit::parse),
    ("$skip", skip::parse),
    ("$count", count::parse),
    ("$sortByCount", sort_by_count::parse),
    ("$bucket", bucket::parse),
    ("$bucketAuto", bucket_auto::parse),
    ("$facet", facet::parse),
    ("$lookup", lookup::parse),
    ("$unionWith", union_with::parse),
    ("$sample", sample::parse),
    ("$redact", redact::parse),
    ("$setWindowFields", set_window_fields::parse),
    ("$densify", densify::parse),
    ("$fill", fill::parse),
    ("$graphLookup", graph_lookup::parse),
    ("$documents", documents::parse),
    ("$geoNear", geo_near::parse),
    ("$listLocalSessions", list_local_sessions::parse),
    ("$planCacheStats", plan_cache_stats::parse),
    ("$out", out::parse),
    ("$merge", merge::parse),
    ("$_internalUnpackBucket", unpack_bucket::parse),
];

/// Parses one `{$stage: arg}` document.
pub fn parse_stage(spec: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(d) = spec else {
        return Err(Error::new(
            ErrorCode::TypeMismatch,
            format!(
                "Each element of the 'pipeline' array must be an object, found {}",
                nidus_doc::compare::type_name(spec)
            ),
        ));
    };
    let mut fields = d.iter();
    let (Some((name, arg)), None) = (fields.next(), fields.next()) else {
        return Err(Error::new(
            ErrorCode::Location(40323),
            "A pipeline stage specification object must contain exactly one field.",
        ));
    };
    let Some((_, parser)) = STAGES.iter().find(|(n, _)| n == name) else {
        return Err(Error::new(
            ErrorCode::Location(40324),
            format!("Unrecognized pipeline stage name: '{name}'"),
        ));
    };
    parser(arg, pcx)
}

/// Parses a whole pipeline and checks where position-constrained stages sit.
pub fn parse_pipeline(stages: &[Bson], pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let mut out = Vec::new();
    for s in stages {
        out.extend(parse_stage(s, pcx)?);
    }
    check_positions(&out)?;
    Ok(out)
}

fn check_positions(stages: &[StageRef]) -> Result<()> {
    let last = stages.len().saturating_sub(1);
    for (i, s) in stages.iter().enumerate() {
        match s.position() {
            Position::First if i != 0 && s.name() == "$geoNear" => {
                return Err(Error::new(
                    ErrorCode::Location(40603),
                    "$geoNear was not the first stage in the pipeline.",
                ))
            }
            Position::First if i != 0 => {
                return Err(Error::new(
                    ErrorCode::Location(40602),
                    format!(
                        "{} is only valid as the first stage in a pipeline",
                        s.name()
                    ),
                ))
            }
            Position::Last if i != last => {
                return Err(Error::new(
                    ErrorCode::Location(40601),
                    format!("{} can only be the final stage in the pipeline", s.name()),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The BSON type name of a value, as error messages print it.
pub(crate) fn type_name(v: &Bson) -> &'static str {
    nidus_doc::compare::type_name(v)
}

/// An exact integer from any numeric type (`5`, `5L`, `5.0`).
pub(crate) fn exact_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(*f as i64),
        Bson::Decimal128(d) => d.to_string().parse::<i64>().ok(),
        _ => None,
    }
}

pub(crate) fn is_number(v: &Bson) -> bool {
    matches!(
        v,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}

/// A sub-pipeline (`$lookup`, `$unionWith`) may not hold a writing stage (`$out`, `$merge`);
/// `code` is the owning stage's assertion code.
pub(crate) fn reject_writing_stage(pipeline: &[StageRef], owner: &str, code: i32) -> Result<()> {
    match pipeline.iter().find(|s| s.position() == Position::Last) {
        Some(w) => Err(Error::new(
            ErrorCode::Location(code),
            format!(
                "{} is not allowed within a {owner}'s sub-pipeline",
                w.name()
            ),
        )),
        None => Ok(()),
    }
}
