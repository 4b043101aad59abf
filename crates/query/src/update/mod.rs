//! Update operators: MongoDB's update language applied to a document.
//!
//! [`Update::parse`] classifies an update (replacement document, operator document, or
//! pipeline) and parses operator paths into one tree ([`tree`]) that rejects conflicting
//! paths; [`Update::apply`] applies it to a `Document` with MongoDB's rules: fields are
//! visited in name order (array indexes numerically), new fields are appended, missing
//! intermediate documents are created, arrays are padded with nulls, scalars in the way are
//! `PathNotViable`, `_id` is immutable, and a no-op reports `modified = false`.
//!
//! One file per operator family: [`fields`] (`$set $unset $setOnInsert $currentDate
//! $rename`), [`arithmetic`] (`$inc $mul $min $max $bit`), [`array`] (`$push $addToSet $pop
//! $pull $pullAll`); [`filters`] holds `arrayFilters`, [`upsert`] the upsert seed.

pub mod arithmetic;
pub mod array;
pub mod fields;
pub mod filters;
pub mod leaf;
pub mod path;
pub mod pipeline;
pub mod tree;
pub mod upsert;
pub mod util;

#[cfg(test)]
mod tests;

use bson::{Bson, DateTime, Document, Timestamp};
use fields::{parse_rename, take_rename_sources, Rename};
use filters::ArrayFilters;
use leaf::{Env, Op, OPERATORS};
use nidus_common::{Error, ErrorCode, Result};
use nidus_expr::LetScope;
use path::{parse_path, Comp};
use pipeline::UpdatePipeline;
use std::collections::HashSet;
use tree::{apply_object, Leaf, Node, ObjectNode};
pub use upsert::upsert_seed;
use util::{doc_str, elem, identical, type_name};

/// What applying an update needs to know about the operation.
#[derive(Debug, Clone)]
pub struct UpdateContext {
    /// The array index the query matched (for the positional `$`).
    pub matched_array_index: Option<usize>,
    /// True when the document is being inserted by an upsert (`$setOnInsert` applies).
    pub is_upsert_insert: bool,
    /// The time `$currentDate` sets as a date.
    pub now: DateTime,
    /// The time `$currentDate` sets as a timestamp.
    pub timestamp: Timestamp,
}

impl Default for UpdateContext {
    fn default() -> Self {
        UpdateContext {
            matched_array_index: None,
            is_upsert_insert: false,
            now: DateTime::now(),
            timestamp: Timestamp {
                time: 0,
                increment: 0,
            },
        }
    }
}

/// A parsed operator update (`{$set: ..., $inc: ...}`).
#[derive(Debug, Clone)]
pub struct OperatorUpdate {
    root: Node,
    renames: Vec<Rename>,
    filters: ArrayFilters,
    paths: Vec<String>,
}

impl OperatorUpdate {
    /// Every path the update writes or removes, as written (with `$`, `$[]`, `$[id]`).
    pub fn paths(&self) -> &[String] {
        &self.paths
    }
}

/// A parsed update.
#[derive(Debug, Clone)]
pub enum Update {
    /// A replacement document (keeps the original `_id`).
    Replacement(Document),
    /// Update operators.
    Operators(OperatorUpdate),
    /// An aggregation-pipeline update.
    Pipeline(UpdatePipeline),
}

impl Update {
    /// Parses the `u` of an update statement (no `let` variables).
    pub fn parse(update: &Bson, array_filters: Option<&[Document]>) -> Result<Update> {
        Self::parse_in(update, array_filters, &LetScope::empty())
    }

    /// Parses the `u` of an update statement; a pipeline's expressions see `scope` (the
    /// command's `let` and the statement's constants `c`).
    pub fn parse_in(
        update: &Bson,
        array_filters: Option<&[Document]>,
        scope: &LetScope,
    ) -> Result<Update> {
        match update {
            Bson::Array(_) if array_filters.is_some() => Err(Error::failed_to_parse(
                "arrayFilters may not be specified for pipeline-style updates",
            )),
            Bson::Array(stages) => Ok(Update::Pipeline(UpdatePipeline::parse(stages, scope)?)),
            Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                parse_operators(d, array_filters).map(Update::Operators)
            }
            Bson::Document(d) => {
                Update::replacement_validate(d)?;
                Ok(Update::Replacement(d.clone()))
            }
            other => Err(Error::failed_to_parse(format!(
                "Update argument must be either an object or an array, found {}",
                type_name(other)
            ))),
        }
    }

    /// Checks a replacement document: no top-level `$`-prefixed field, a storable `_id`.
    pub fn replacement_validate(doc: &Document) -> Result<()> {
        if let Some(k) = doc.keys().find(|k| k.starts_with('$')) {
            return Err(Error::new(
                ErrorCode::DollarPrefixedFieldName,
                format!(
                    "The dollar ($) prefixed field '{k}' in '{k}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
                ),
            ));
        }
        validate_id(doc)
    }

    pub fn is_replacement(&self) -> bool {
        matches!(self, Update::Replacement(_))
    }

    /// Applies the update to `doc`; returns whether it changed. On error the document may
    /// be partly updated: apply to a copy when the original must survive.
    pub fn apply(&self, doc: &mut Document, ctx: &UpdateContext) -> Result<bool> {
        match self {
            Update::Replacement(r) => apply_replacement(r, doc),
            Update::Operators(u) => apply_operators(u, doc, ctx),
            Update::Pipeline(p) => {
                let new = p.transform(doc)?;
                apply_replacement(&new, doc)
            }
        }
    }

    /// The document an upsert inserts: the filter's equality fields (only `_id` of them for a
    /// replacement) with the update applied as an insert. The caller adds a generated `_id`
    /// when the result has none.
    pub fn upsert_document(&self, filter: &Document, ctx: &UpdateContext) -> Result<Document> {
        let seed = upsert_seed(filter)?;
        let ctx = UpdateContext {
            is_upsert_insert: true,
            ..ctx.clone()
        };
        let mut doc = match self {
            Update::Replacement(_) => {
                let mut d = Document::new();
                if let Some(id) = seed.get("_id") {
                    d.insert("_id", id.clone());
                }
                d
            }
            _ => seed,
        };
        self.apply(&mut doc, &ctx)?;
        Ok(doc)
    }
}

fn unknown_modifier(name: &str) -> Error {
    Error::failed_to_parse(format!(
        "Unknown modifier: {name}. Expected a valid update modifier or pipeline-style update specified as an array"
    ))
}

fn parse_operators(d: &Document, array_filters: Option<&[Document]>) -> Result<OperatorUpdate> {
    let filters = ArrayFilters::parse(array_filters)?;
    let mut u = OperatorUpdate {
        root: Node::Object(ObjectNode::default()),
        renames: Vec::new(),
        filters,
        paths: Vec::new(),
    };
    let mut used = HashSet::new();
    // A modifier or path sent twice is two updates of it (a second `$set` of one path is a
    // conflict, as in MongoDB), not a field named with a repetition mark.
    for (op, arg) in d {
        let op = nidus_common::repeated::original_name(op);
        if !OPERATORS.contains(&op) {
            return Err(unknown_modifier(op));
        }
        let Bson::Document(fields) = arg else {
            return Err(Error::failed_to_parse(format!(
                "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                type_name(arg),
                elem(op, arg)
            )));
        };
        if fields.is_empty() {
            return Err(Error::failed_to_parse(format!(
                "'{op}' is empty. You must specify a field like so: {{{op}: {{<field>: ...}}}}"
            )));
        }
        for (path, value) in fields {
            let path = nidus_common::repeated::original_name(path);
            add_field(&mut u, op, path, value, &mut used)?;
        }
    }
    let mut unused: Vec<&String> = u
        .filters
        .identifiers()
        .filter(|id| !used.contains(*id))
        .collect();
    unused.sort();
    if let Some(id) = unused.first() {
        return Err(Error::failed_to_parse(format!(
            "The array filter for identifier '{id}' was not used in the update {}",
            doc_str(d)
        )));
    }
    Ok(u)
}

fn add_field(
    u: &mut OperatorUpdate,
    op: &str,
    path: &str,
    value: &Bson,
    used: &mut HashSet<String>,
) -> Result<()> {
    if op == "$rename" {
        let (r, from_comps, to_comps) = parse_rename(path, value)?;
        let to = r.to.clone();
        insert_leaf(u, &to, &to_comps, Op::RenameTo { to: to.clone() })?;
        insert_leaf(u, path, &from_comps, Op::RenameFrom)?;
        u.renames.push(r);
        return Ok(());
    }
    let op = Op::parse(op, path, value)?;
    let comps = parse_path(path)?;
    for c in &comps {
        if let Comp::Filter(id) = c {
            if !u.filters.contains(id) {
                return Err(Error::bad_value(format!(
                    "No array filter found for identifier '{id}' in path '{path}'"
                )));
            }
            used.insert(id.clone());
        }
    }
    insert_leaf(u, path, &comps, op)
}

fn insert_leaf(u: &mut OperatorUpdate, path: &str, comps: &[Comp], op: Op) -> Result<()> {
    let leaf = Leaf {
        op,
        path: path.to_string(),
    };
    u.root.insert(path, comps, 0, leaf)?;
    u.paths.push(path.to_string());
    Ok(())
}

fn apply_operators(u: &OperatorUpdate, doc: &mut Document, ctx: &UpdateContext) -> Result<bool> {
    let Node::Object(root) = &u.root else {
        return Err(Error::internal("update tree root is not an object node"));
    };
    let original_id = doc.get("_id").cloned();
    let renamed = take_rename_sources(doc, &u.renames)?;
    let renamed_any = !renamed.is_empty();
    let env = Env {
        ctx,
        id: original_id.as_ref(),
        renamed,
        filters: &u.filters,
    };
    let mut whole = Bson::Document(std::mem::take(doc));
    let result = apply_object(root, &mut whole, "", "", &env);
    if let Bson::Document(d) = whole {
        *doc = d;
    }
    let modified = result? || renamed_any;
    check_id(original_id.as_ref(), doc, &u.paths)?;
    Ok(modified)
}

/// `_id` may not change, and must be storable. An upsert's seed holds `_id` only when the
/// query fixed it, and then the update may not change it either (MongoDB's immutable-path
/// check on the document to insert).
fn check_id(original: Option<&Bson>, doc: &Document, paths: &[String]) -> Result<()> {
    if let Some(orig) = original {
        let same = doc.get("_id").is_some_and(|now| identical(orig, now));
        if !same {
            let path = paths
                .iter()
                .find(|p| *p == "_id" || p.starts_with("_id."))
                .map(String::as_str)
                .unwrap_or("_id");
            return Err(Error::new(
                ErrorCode::ImmutableField,
                format!(
                    "Performing an update on the path '{path}' would modify the immutable field '_id'"
                ),
            ));
        }
    }
    validate_id(doc)
}

fn validate_id(doc: &Document) -> Result<()> {
    let bad = match doc.get("_id") {
        Some(Bson::Array(_)) => "array",
        Some(Bson::RegularExpression(_)) => "regex",
        Some(Bson::Undefined) => "undefined",
        _ => return Ok(()),
    };
    Err(Error::new(
        ErrorCode::InvalidIdField,
        format!("The '_id' value cannot be of type {bad}"),
    ))
}

fn apply_replacement(r: &Document, doc: &mut Document) -> Result<bool> {
    let original_id = doc.get("_id").cloned();
    let new = match (r.get("_id"), &original_id) {
        (Some(new_id), Some(orig)) if !identical(new_id, orig) => {
            return Err(Error::new(
                ErrorCode::ImmutableField,
                format!(
                    "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                    elem("_id", new_id)
                ),
            ));
        }
        (Some(_), _) | (None, None) => r.clone(),
        (None, Some(orig)) => {
            let mut d = Document::new();
            d.insert("_id", orig.clone());
            d.extend(r.clone());
            d
        }
    };
    validate_id(&new)?;
    let modified = !identical(&Bson::Document(doc.clone()), &Bson::Document(new.clone()));
    *doc = new;
    Ok(modified)
}
