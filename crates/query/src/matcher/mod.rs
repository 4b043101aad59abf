//! Match expressions: MongoDB's query filter language over raw documents.
//!
//! [`Matcher::parse`] turns a filter document into an [`Expr`] tree; [`Matcher::matches`]
//! evaluates it against a `&RawDocument` without deserializing it. Paths are walked with
//! [`nidus_doc::path::walk_match`] (implicit array traversal, numeric components both as
//! indexes and as field names, leaf array expansion, missing values), so a leaf predicate
//! matches when *any* value at its path matches; negations (`$ne`, `$nin`, `$not`, `$nor`)
//! negate that whole "any".
//!
//! One file per operator family: [`comparison`] (`$eq $ne $gt $gte $lt $lte $in $nin`),
//! [`element`] (`$exists $type`), [`evaluation`] (`$mod $regex`), [`array`] (`$all
//! $elemMatch $size`), [`bits`] (`$bitsAllSet` ...), [`logical`] (`$and $or $nor $not`),
//! [`json_schema`] (`$jsonSchema`); [`parse`] dispatches on operator names.

pub mod array;
pub mod bits;
pub mod collation;
pub mod comparison;
pub mod details;
pub mod element;
pub mod evaluation;
pub mod geo;
pub mod json_schema;
pub mod logical;
pub mod parse;
pub mod rewrite;
pub mod serialize;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::Result;
use nidus_doc::path::{walk_match, FieldPath};
use nidus_expr::LetScope;
use std::fmt;
use std::sync::Arc;

pub use array::ElemMatch;
pub use bits::{BitTest, BitsOp};
pub use comparison::{CmpOp, InList, Value};
pub use element::TypeSet;
pub use evaluation::{ModPred, RegexPred};
pub use json_schema::JsonSchema;

/// A document-level predicate supplied from outside this crate (the hook `$expr` uses: the
/// aggregation crate parses the expression and hands back one of these).
pub trait DocPredicate: Send + Sync + fmt::Debug {
    /// Whether the document satisfies the predicate; an evaluation error fails the query.
    fn matches(&self, doc: &RawDocument) -> Result<bool>;
}

/// Options of [`Matcher::parse_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions<'a> {
    /// The command's `let` variables and `$$NOW`, for `$expr`.
    pub scope: Option<&'a LetScope>,
    /// The query's collation (None = binary string comparison).
    pub collation: Option<&'a nidus_doc::collation::Collation>,
    /// Parsing inside `$elemMatch`, where `$expr` is refused (so nothing below it can fail
    /// at evaluation).
    pub nested: bool,
}

/// `$expr` through the aggregation expression language: the document matches when the
/// expression's value is truthy; an evaluation error (e.g. `$divide` by zero) fails the
/// query, as in MongoDB.
#[derive(Debug)]
pub struct ExprMatch(pub nidus_expr::ExprPredicate);

impl DocPredicate for ExprMatch {
    fn matches(&self, doc: &RawDocument) -> Result<bool> {
        self.0.evaluate(doc)
    }
}

/// Parses the argument of `$expr`.
fn parse_expr(arg: &Bson, opts: &ParseOptions) -> Result<Arc<dyn DocPredicate>> {
    let p = match opts.scope {
        Some(scope) => nidus_expr::ExprPredicate::parse_in(arg, scope)?,
        None => nidus_expr::ExprPredicate::parse(arg)?,
    };
    Ok(Arc::new(ExprMatch(p)))
}

/// A parsed match expression over a document.
// Parsed once per query; variant size does not matter, an extra box on the hot path would.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Nor(Vec<Expr>),
    Not(Box<Expr>),
    /// `$alwaysTrue` / `$alwaysFalse` (and the empty `$and` of an empty filter).
    Const(bool),
    /// Some value at `path` satisfies `leaf`.
    Path {
        path: FieldPath,
        leaf: Leaf,
    },
    /// `$expr` (or another external predicate).
    External(Arc<dyn DocPredicate>),
    /// `$jsonSchema`: the whole document satisfies the schema.
    Schema(Arc<JsonSchema>),
}

/// A predicate on one value (`None` = the path is missing).
#[derive(Debug, Clone)]
pub enum Leaf {
    Eq(Value),
    Cmp(CmpOp, Value),
    In(InList),
    Exists,
    Type(TypeSet),
    Mod(ModPred),
    Regex(RegexPred),
    Size(i64),
    ElemMatch(ElemMatch),
    Bits(BitTest),
    /// `$geoWithin`, `$geoIntersects`, `$near`, `$nearSphere`.
    Geo(geo::GeoLeaf),
}

/// A field-level predicate tree: what `{path: {...operators...}}` parses to before being
/// attached to its path, and what `$elemMatch` applies to each array element.
#[derive(Debug, Clone)]
pub enum Pred {
    Leaf(Leaf),
    Not(Box<Pred>),
    And(Vec<Pred>),
    Const(bool),
}

impl Pred {
    /// Attaches the predicate to a path.
    pub fn at_path(self, path: &FieldPath) -> Expr {
        match self {
            Pred::Leaf(leaf) => Expr::Path {
                path: path.clone(),
                leaf,
            },
            Pred::Not(p) => Expr::Not(Box::new(p.at_path(path))),
            Pred::And(ps) => Expr::And(ps.into_iter().map(|p| p.at_path(path)).collect()),
            Pred::Const(b) => Expr::Const(b),
        }
    }

    /// Evaluates on a single value, without array expansion (the `$elemMatch` value form).
    pub fn matches_single(&self, v: RawBsonRef) -> bool {
        match self {
            Pred::Leaf(l) => l.matches_single(Some(v)),
            Pred::Not(p) => !p.matches_single(v),
            Pred::And(ps) => ps.iter().all(|p| p.matches_single(v)),
            Pred::Const(b) => *b,
        }
    }
}

impl Leaf {
    /// Whether array values at the end of the path are also tried element by element.
    fn expands_leaf_arrays(&self) -> bool {
        !matches!(self, Leaf::Size(_) | Leaf::ElemMatch(_) | Leaf::Exists)
    }

    /// Evaluates the predicate on one candidate value.
    pub fn matches_single(&self, v: Option<RawBsonRef>) -> bool {
        match self {
            Leaf::Eq(val) => comparison::eq_matches(val, v),
            Leaf::Cmp(op, val) => comparison::cmp_matches(*op, val, v),
            Leaf::In(list) => list.matches(v),
            Leaf::Exists => v.is_some(),
            Leaf::Type(t) => v.is_some_and(|v| t.matches(v)),
            Leaf::Mod(m) => v.is_some_and(|v| m.matches(v)),
            Leaf::Regex(r) => v.is_some_and(|v| r.matches(v)),
            Leaf::Size(n) => v.is_some_and(|v| array::size_matches(*n, v)),
            Leaf::ElemMatch(e) => v.is_some_and(|v| e.matches(v).is_some()),
            Leaf::Bits(b) => v.is_some_and(|v| b.matches(v)),
            Leaf::Geo(g) => v.is_some_and(|v| g.matches(v)),
        }
    }
}

/// Result of evaluating with position tracking: `None` = no match; `Some(pos)` = match, with
/// `pos` the index in the first array traversed by the matching leaf, if any.
pub type MatchPos = Option<Option<usize>>;

impl Expr {
    /// Evaluates against a document (only `$expr` can fail).
    pub fn eval(&self, doc: &RawDocument) -> Result<MatchPos> {
        Ok(match self {
            Expr::And(es) => return logical::eval_and(es, doc),
            Expr::Or(es) => return logical::eval_or(es, doc),
            Expr::Nor(es) => return logical::eval_nor(es, doc),
            Expr::Not(e) => e.eval(doc)?.is_none().then_some(None),
            Expr::Const(b) => b.then_some(None),
            Expr::Path { path, leaf } => eval_path(doc, path, leaf),
            Expr::External(p) => p.matches(doc)?.then_some(None),
            Expr::Schema(s) => s.matches(doc).then_some(None),
        })
    }
}

fn eval_path(doc: &RawDocument, path: &FieldPath, leaf: &Leaf) -> MatchPos {
    let mut found: MatchPos = None;
    walk_match(doc, path, leaf.expands_leaf_arrays(), &mut |item| {
        let hit = match (leaf, item.value) {
            // `$elemMatch` reports the position of the matching element in its own array
            // when no outer array was traversed.
            (Leaf::ElemMatch(e), Some(v)) => e.matches(v).map(|p| item.array_pos.or(p)),
            _ => leaf.matches_single(item.value).then_some(item.array_pos),
        };
        if hit.is_some() {
            found = hit;
        }
        hit.is_some()
    });
    found
}

/// A parsed query filter.
#[derive(Debug, Clone)]
pub struct Matcher {
    expr: Expr,
    filter: Document,
}

impl Matcher {
    /// Parses a filter with MongoDB's errors (BadValue for unknown operators and malformed
    /// arguments). `$expr` is rejected; see [`Matcher::parse_with`].
    pub fn parse(filter: &Document) -> Result<Matcher> {
        Self::parse_with(filter, &ParseOptions::default())
    }

    /// Parses a filter with options (e.g. the command's `let` scope).
    pub fn parse_with(filter: &Document, opts: &ParseOptions) -> Result<Matcher> {
        let mut expr = parse::parse_filter(filter, opts)?;
        if let Some(c) = opts.collation {
            collation::apply(&mut expr, c);
        }
        Ok(Matcher {
            expr,
            filter: filter.clone(),
        })
    }

    /// A matcher over an already parsed expression (e.g. the part of a filter left after
    /// index bounds answered the rest); `filter` is its canonical document.
    pub fn from_expr(expr: Expr) -> Matcher {
        let filter = serialize::to_document(&expr);
        Matcher { expr, filter }
    }

    /// The filter in MongoDB's canonical form, as explain prints `parsedQuery`.
    pub fn canonical_document(&self) -> Document {
        serialize::to_document(&self.expr)
    }

    /// The parsed tree (for the planner).
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The filter as given.
    pub fn filter(&self) -> &Document {
        &self.filter
    }

    /// True when the document matches; `$expr` evaluation errors are returned.
    pub fn matches(&self, doc: &RawDocument) -> Result<bool> {
        Ok(self.expr.eval(doc)?.is_some())
    }

    /// `None` when the document does not match; `Some(Some(i))` when it matches and a
    /// matching leaf went through an array, `i` being the index in the first (outermost)
    /// such array (what the positional `$` update operator replaces); `Some(None)` when it
    /// matches without an array position. With several array leaves under `$and`, the last
    /// one evaluated wins (as MongoDB's elemMatchKey).
    pub fn matches_with_position(&self, doc: &RawDocument) -> Result<MatchPos> {
        self.expr.eval(doc)
    }

    /// Top-level equality predicates (`{a: v}`, `{a: {$eq: v}}`, also inside a top-level
    /// `$and`), excluding regexes: what an upsert seeds its new document with.
    pub fn equality_fields(&self) -> Vec<(String, Bson)> {
        let mut out = Vec::new();
        collect_equalities(&self.expr, &mut out);
        out
    }

    /// The `_id` value when the filter is exactly `{_id: v}` or `{_id: {$eq: v}}` with `v` a
    /// scalar that is neither a regex, a document nor an array: the `_id` point-lookup path.
    pub fn id_equality(&self) -> Option<Bson> {
        Matcher::id_equality_of(&self.filter)
    }

    /// [`Matcher::id_equality`] of an unparsed filter: every filter it names a value for
    /// parses (a planner may take the point lookup before parsing).
    pub fn id_equality_of(filter: &Document) -> Option<Bson> {
        if filter.len() != 1 {
            return None;
        }
        let v = filter.get("_id")?;
        let v = match v {
            Bson::Document(d) if d.len() == 1 => d.get("$eq")?,
            other => other,
        };
        match v {
            Bson::Document(_)
            | Bson::Array(_)
            | Bson::RegularExpression(_)
            | Bson::Undefined
            | Bson::MinKey
            | Bson::MaxKey => None,
            other => Some(other.clone()),
        }
    }
}

fn collect_equalities(e: &Expr, out: &mut Vec<(String, Bson)>) {
    match e {
        Expr::And(es) => es.iter().for_each(|e| collect_equalities(e, out)),
        Expr::Path {
            path,
            leaf: Leaf::Eq(v),
        } => out.push((path.as_str().to_string(), v.bson.clone())),
        _ => {}
    }
}
