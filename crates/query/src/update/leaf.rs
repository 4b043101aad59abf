//! A leaf of the update tree: one operator applied at one path. Parsing and application of
//! each operator family live in [`super::fields`], [`super::arithmetic`] and [`super::array`];
//! this file dispatches on the operator.

use super::arithmetic::{self, ArithOp, BitOp, CmpKind};
use super::array::{self, PopEnd, PullCond, PushSpec};
use super::fields;
use super::filters::ArrayFilters;
use super::UpdateContext;
use bson::Bson;
use nidus_common::{Error, Result};
use std::collections::HashMap;

/// What applying an update needs besides the tree: the context, how to name the document in
/// messages, values taken from `$rename` sources, and the array filters.
pub struct Env<'a> {
    pub ctx: &'a UpdateContext,
    /// The document's `_id` before the update, which error messages describe.
    pub id: Option<&'a Bson>,
    pub renamed: HashMap<String, Bson>,
    pub filters: &'a ArrayFilters,
}

impl Env<'_> {
    /// `{_id: <value>}` as error messages name the document (`{}` without an `_id`), formatted
    /// only when an error needs it.
    pub fn id_desc(&self) -> String {
        super::util::id_desc(self.id)
    }
}

/// One update operator with its parsed argument.
#[derive(Debug, Clone)]
pub enum Op {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    CurrentDate {
        timestamp: bool,
    },
    /// At the destination of a `$rename`.
    RenameTo {
        to: String,
    },
    /// At the source of a `$rename` (its value is taken before the tree is applied).
    RenameFrom,
    Arith(ArithOp, Bson),
    Compare(CmpKind, Bson),
    Bit(Vec<(BitOp, Bson)>),
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pop(PopEnd),
    Pull(PullCond),
    PullAll(Vec<Bson>),
}

/// The operator names MongoDB accepts.
pub const OPERATORS: &[&str] = &[
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$setOnInsert",
    "$currentDate",
    "$push",
    "$addToSet",
    "$pop",
    "$pull",
    "$pullAll",
    "$bit",
];

impl Op {
    /// Parses the argument of `op` for `path` (`$rename` is parsed by the caller).
    pub fn parse(op: &str, path: &str, arg: &Bson) -> Result<Op> {
        Ok(match op {
            "$set" => Op::Set(arg.clone()),
            "$setOnInsert" => Op::SetOnInsert(arg.clone()),
            "$unset" => Op::Unset,
            "$currentDate" => fields::parse_current_date(arg)?,
            "$inc" => arithmetic::parse_arith(ArithOp::Inc, path, arg)?,
            "$mul" => arithmetic::parse_arith(ArithOp::Mul, path, arg)?,
            "$min" => Op::Compare(CmpKind::Min, arg.clone()),
            "$max" => Op::Compare(CmpKind::Max, arg.clone()),
            "$bit" => arithmetic::parse_bit(arg)?,
            "$push" => Op::Push(array::parse_push(arg)?),
            "$addToSet" => array::parse_add_to_set(arg)?,
            "$pop" => array::parse_pop(path, arg)?,
            "$pull" => Op::Pull(array::parse_pull(arg)?),
            "$pullAll" => array::parse_pull_all(arg)?,
            other => return Err(Error::internal(format!("unexpected operator {other}"))),
        })
    }

    /// Whether applying to a missing path creates it (so that a non-viable path is an error).
    pub fn creates(&self, env: &Env) -> bool {
        match self {
            Op::Unset | Op::RenameFrom | Op::Pop(_) | Op::Pull(_) | Op::PullAll(_) => false,
            Op::SetOnInsert(_) => env.ctx.is_upsert_insert,
            Op::RenameTo { to } => env.renamed.contains_key(to),
            _ => true,
        }
    }

    /// The value a missing path gets, or `None` when the operator leaves it missing.
    pub fn create(&self, env: &Env) -> Result<Option<Bson>> {
        if !self.creates(env) {
            return Ok(None);
        }
        Ok(Some(match self {
            Op::Set(v) | Op::SetOnInsert(v) | Op::Compare(_, v) => v.clone(),
            Op::CurrentDate { timestamp } => fields::current_date(*timestamp, env),
            Op::RenameTo { to } => env.renamed.get(to).cloned().unwrap_or(Bson::Null),
            Op::Arith(op, v) => arithmetic::arith_new(*op, v)?,
            Op::Bit(ops) => arithmetic::bit_apply(&Bson::Int32(0), ops)?,
            Op::Push(spec) => array::push_new(spec),
            Op::AddToSet(vals) => Bson::Array(vals.clone()),
            _ => return Ok(None),
        }))
    }

    /// Applies the operator to an existing value; true when the value changed.
    /// (`$unset` is applied by the tree, which owns the parent.)
    pub fn apply_existing(&self, v: &mut Bson, name: &str, path: &str, env: &Env) -> Result<bool> {
        match self {
            Op::Set(new) => Ok(fields::replace(v, new.clone())),
            Op::SetOnInsert(new) if env.ctx.is_upsert_insert => Ok(fields::replace(v, new.clone())),
            Op::SetOnInsert(_) | Op::Unset | Op::RenameFrom => Ok(false),
            Op::CurrentDate { timestamp } => {
                Ok(fields::replace(v, fields::current_date(*timestamp, env)))
            }
            Op::RenameTo { to } => match env.renamed.get(to) {
                Some(new) => Ok(fields::replace(v, new.clone())),
                None => Ok(false),
            },
            Op::Arith(op, arg) => arithmetic::arith_existing(*op, arg, v, name, env),
            Op::Compare(kind, arg) => Ok(arithmetic::compare_existing(*kind, arg, v)),
            Op::Bit(ops) => arithmetic::bit_existing(ops, v, name, env),
            Op::Push(spec) => array::push_existing(spec, v, name, env),
            Op::AddToSet(vals) => array::add_to_set_existing(vals, v, name),
            Op::Pop(end) => array::pop_existing(*end, v, path),
            Op::Pull(cond) => array::pull_existing(cond, v),
            Op::PullAll(vals) => array::pull_all_existing(vals, v),
        }
    }
}
