//! MongoDB's aggregation expression language and `$group` accumulators, as pure functions of
//! BSON (no storage).
//!
//! [`Expression::parse`] turns an expression (`{$add: ["$a", 1]}`, `"$a.b"`, `{x: "$y"}`, a
//! literal) into a tree; [`Expression::evaluate`] computes it against [`Variables`] (the
//! `$$ROOT` document, `$$CURRENT`, `$$NOW` and the user variables). A result is a [`Value`]:
//! `None` is MongoDB's *missing* (a field path that found nothing, `$$REMOVE`), which object
//! expressions and `$project` drop and which `$type` reports as `"missing"`.
//!
//! Operators live in one file per family ([`arithmetic`], [`comparison`], [`boolean`],
//! [`conditional`], [`string`], [`array`], [`set`], [`types`], [`date`], [`object`],
//! [`variables`]); [`accumulators`] holds the `$group` accumulators. Errors carry MongoDB's
//! codes and messages (e.g. `Location16020` for a wrong number of arguments).

pub mod accumulators;
pub mod arithmetic;
pub mod array;
pub mod boolean;
pub mod comparison;
pub mod conditional;
pub mod date;
pub mod decimal;
mod expression;
pub mod meta;
pub mod object;
pub mod predicate;
pub mod random;
pub mod scope;
pub mod set;
pub mod string;
pub mod types;
pub mod value;
pub mod variables;

#[cfg(test)]
mod tests;

pub use expression::{
    is_expression_name, Dependencies, Expression, FieldPathExpr, Named, Nary, Operator,
};
pub use predicate::ExprPredicate;
pub use scope::{binder, Bind, Bindings, LetScope, NoBindings};
pub use value::Value;
pub use variables::{ParseContext, VarId, Variables};
