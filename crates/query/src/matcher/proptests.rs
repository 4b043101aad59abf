//! Property tests: the matcher against a deliberately naive reference evaluator
//! ([`reference`]) on generated documents with nested arrays ([`generate`]).
//!
//! The reference states MongoDB's (8.0, classic engine) query semantics directly:
//!
//! * A path is followed through documents; an array met before the end of the path is
//!   traversed implicitly: each element that is a document is searched for the rest of the
//!   path (the next component as a field name, even when it is a number), and when the next
//!   component is the element's index, the element itself is followed with the path after
//!   that component (a nested array only through such an index).
//! * A document without the next field (at the top or inside a traversed array) and a scalar
//!   in the middle of the path yield *missing*; scalars and arrays inside a traversed array
//!   that no index selects yield nothing, as does a scalar selected by an index with path
//!   left to follow.
//! * At the end of the path an array is offered element by element (one level) and as a
//!   whole, except to `$exists`, `$size` and `$elemMatch`, which see it whole only, and
//!   except when an index selected it, which offers it as is.
//! * A leaf predicate holds when any offered value satisfies it; `$ne`, `$nin`, `$not` and
//!   `$nor` negate that whole "any". Equality to null also holds for missing, as do
//!   `$gte`/`$lte` null; comparisons hold only within one canonical type; NaN only equals
//!   NaN.
//! * `$elemMatch` needs an array: its value form applies every operator to one element
//!   itself (no further expansion); its object form applies a filter to an element that is a
//!   document, or an array seen as a document with keys "0", "1", ...
//!
//! Filters are generated as templates whose operands and paths are resolved against the
//! document under test (values found at the path, bounds next to them, the types and lengths
//! found there), so that predicates hold often enough to be tested both ways.

mod generate;
mod reference;

use super::Matcher;
use bson::{Bson, Document, RawDocumentBuf};
use generate::{array_op_filter, document, filter, leaf_filter, resolve, Template};
use proptest::prelude::*;
use std::cmp::Ordering;
use std::fmt::Debug;

/// What a filter's operands and paths are: concrete values, or templates to resolve.
pub trait Form: Debug + Clone {
    type Value: Debug + Clone;
    type Size: Debug + Clone;
    type Type: Debug + Clone;
    type Path: Debug + Clone;
}

/// A filter ready to be rendered and evaluated.
#[derive(Debug, Clone)]
pub struct Concrete;

impl Form for Concrete {
    type Value = Bson;
    type Size = i32;
    type Type = &'static str;
    type Path = String;
}

/// A filter document: its clauses (keys distinct once concrete).
#[derive(Debug, Clone)]
pub struct Filter<F: Form>(pub Vec<Clause<F>>);

#[derive(Debug, Clone)]
pub enum Clause<F: Form> {
    /// `{path: value}`: implicit equality.
    Implicit(F::Path, F::Value),
    /// `{path: {op: arg, ...}}` (operator names distinct once concrete).
    Ops(F::Path, Vec<Op<F>>),
    And(Vec<Filter<F>>),
    Or(Vec<Filter<F>>),
    Nor(Vec<Filter<F>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone)]
pub enum Op<F: Form> {
    Eq(F::Value),
    Ne(F::Value),
    Cmp(Cmp, F::Value),
    In(Vec<F::Value>),
    Nin(Vec<F::Value>),
    Exists(bool),
    Size(F::Size),
    Type(F::Type),
    All(Vec<F::Value>),
    /// `$all` of `{$elemMatch: ...}` documents (each an `ElemMatch*`).
    AllElemMatch(Vec<Op<F>>),
    ElemMatchValue(Vec<Op<F>>),
    ElemMatchObject(Filter<F>),
    Not(Vec<Op<F>>),
}

impl Cmp {
    fn name(self) -> &'static str {
        match self {
            Cmp::Gt => "$gt",
            Cmp::Gte => "$gte",
            Cmp::Lt => "$lt",
            Cmp::Lte => "$lte",
        }
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            Cmp::Gt => o == Ordering::Greater,
            Cmp::Gte => o != Ordering::Less,
            Cmp::Lt => o == Ordering::Less,
            Cmp::Lte => o != Ordering::Greater,
        }
    }

    fn inclusive(self) -> bool {
        matches!(self, Cmp::Gte | Cmp::Lte)
    }
}

impl<F: Form> Op<F> {
    fn name(&self) -> &'static str {
        match self {
            Op::Eq(_) => "$eq",
            Op::Ne(_) => "$ne",
            Op::Cmp(c, _) => c.name(),
            Op::In(_) => "$in",
            Op::Nin(_) => "$nin",
            Op::Exists(_) => "$exists",
            Op::Size(_) => "$size",
            Op::Type(_) => "$type",
            Op::All(_) | Op::AllElemMatch(_) => "$all",
            Op::ElemMatchValue(_) | Op::ElemMatchObject(_) => "$elemMatch",
            Op::Not(_) => "$not",
        }
    }
}

// Rendering as the document the matcher parses.

impl Filter<Concrete> {
    fn to_document(&self) -> Document {
        self.0.iter().map(Clause::render).collect()
    }
}

impl Clause<Concrete> {
    fn key(&self) -> &str {
        match self {
            Clause::Implicit(p, _) | Clause::Ops(p, _) => p,
            Clause::And(_) => "$and",
            Clause::Or(_) => "$or",
            Clause::Nor(_) => "$nor",
        }
    }

    fn render(&self) -> (String, Bson) {
        let list = |fs: &[Filter<Concrete>]| {
            Bson::Array(fs.iter().map(|f| f.to_document().into()).collect())
        };
        let v = match self {
            Clause::Implicit(_, v) => v.clone(),
            Clause::Ops(_, ops) => render_ops(ops).into(),
            Clause::And(fs) | Clause::Or(fs) | Clause::Nor(fs) => list(fs),
        };
        (self.key().to_string(), v)
    }
}

fn render_ops(ops: &[Op<Concrete>]) -> Document {
    ops.iter()
        .map(|op| (op.name().to_string(), op.arg()))
        .collect()
}

impl Op<Concrete> {
    fn arg(&self) -> Bson {
        match self {
            Op::Eq(v) | Op::Ne(v) | Op::Cmp(_, v) => v.clone(),
            Op::In(vs) | Op::Nin(vs) | Op::All(vs) => Bson::Array(vs.clone()),
            Op::Exists(b) => Bson::Boolean(*b),
            Op::Size(n) => Bson::Int32(*n),
            Op::Type(alias) => Bson::String(alias.to_string()),
            Op::AllElemMatch(ems) => Bson::Array(
                ems.iter()
                    .map(|em| bson::doc! { "$elemMatch": em.arg() }.into())
                    .collect(),
            ),
            Op::ElemMatchValue(ops) | Op::Not(ops) => render_ops(ops).into(),
            Op::ElemMatchObject(f) => f.to_document().into(),
        }
    }
}

fn matcher_says(filter: &Document, doc: &Document) -> Result<bool, String> {
    let m = Matcher::parse(filter).map_err(|e| format!("parse {filter}: {e}"))?;
    let raw = RawDocumentBuf::from_document(doc).map_err(|e| e.to_string())?;
    m.matches(&raw).map_err(|e| format!("match {filter}: {e}"))
}

/// The matcher and the reference agree on `template` resolved against `doc`.
fn check(doc: &Document, template: &Filter<Template>) -> Result<(), TestCaseError> {
    let filter = resolve(template, doc);
    let want = reference::matches(&filter, doc);
    let rendered = filter.to_document();
    let got = matcher_says(&rendered, doc).map_err(TestCaseError::fail)?;
    prop_assert_eq!(got, want, "filter {} on {}", rendered, doc);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        // Shrinking a filter regenerates little; a minute is plenty to reach a small case.
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    })]

    /// One predicate of any kind (`$not`, `$elemMatch` nesting one level), on any path shape.
    #[test]
    fn leaf_predicates_agree_with_reference(doc in document(), template in leaf_filter()) {
        check(&doc, &template)?;
    }

    /// `$elemMatch` (both forms), `$all` (of values, of `$elemMatch`) and `$size`, mostly on
    /// paths that hold an array.
    #[test]
    fn array_operators_agree_with_reference(doc in document(), template in array_op_filter()) {
        check(&doc, &template)?;
    }

    /// Several predicates per path, several paths, `$and/$or/$nor`, nested two levels.
    #[test]
    fn filters_agree_with_reference(doc in document(), template in filter(2, 3)) {
        check(&doc, &template)?;
    }
}
