//! `$replaceRoot`/`$replaceWith` (aggregation stage and update pipelines): the document an
//! expression evaluates to replaces the input.

use bson::{Bson, Document, RawDocument};
use nidus_common::{shell, Error, ErrorCode, Result};
use nidus_expr::{value::type_name, Bind, Bindings, Expression, LetScope, ParseContext, Variables};
use std::sync::Arc;

/// A parsed `$replaceRoot: {newRoot: <expr>}` or `$replaceWith: <expr>`.
#[derive(Debug, Clone)]
pub struct ReplaceRoot {
    new_root: Expression,
    /// How errors name the expression: `'newRoot'` or `'replacement document'`.
    what: &'static str,
    bindings: Option<Arc<Bindings>>,
}

impl ReplaceRoot {
    /// Parses `{newRoot: <expr>}` (the argument of `$replaceRoot`).
    pub fn parse_replace_root(arg: &Bson, scope: &LetScope) -> Result<ReplaceRoot> {
        Self::bound(Self::replace_root_in(arg, scope.parse_context()), scope)
    }

    /// Parses the argument of `$replaceWith`.
    pub fn parse_replace_with(arg: &Bson, scope: &LetScope) -> Result<ReplaceRoot> {
        Self::bound(Self::replace_with_in(arg, scope.parse_context()), scope)
    }

    fn bound(parsed: Result<ReplaceRoot>, scope: &LetScope) -> Result<ReplaceRoot> {
        let mut r = parsed?;
        r.bindings = Some(scope.bindings().clone());
        Ok(r)
    }

    /// `$replaceRoot`'s argument in an expression scope the caller binds at apply time.
    pub fn replace_root_in(arg: &Bson, exprs: &ParseContext) -> Result<ReplaceRoot> {
        let Bson::Document(d) = arg else {
            return Err(Error::new(
                ErrorCode::Location(40229),
                format!(
                    "expected an object as specification for $replaceRoot stage, got {}",
                    type_name(&Some(arg.clone()))
                ),
            ));
        };
        if let Some(k) = d.keys().find(|k| *k != "newRoot") {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field '$replaceRoot.{k}' is an unknown field."),
            ));
        }
        let Some(new_root) = d.get("newRoot") else {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field '$replaceRoot.newRoot' is missing but a required field",
            ));
        };
        Self::parse(new_root, "'newRoot'", exprs)
    }

    /// `$replaceWith`'s argument in an expression scope the caller binds at apply time.
    pub fn replace_with_in(arg: &Bson, exprs: &ParseContext) -> Result<ReplaceRoot> {
        Self::parse(arg, "'replacement document'", exprs)
    }

    fn parse(expr: &Bson, what: &'static str, exprs: &ParseContext) -> Result<ReplaceRoot> {
        Ok(ReplaceRoot {
            new_root: Expression::parse(expr, exprs)?,
            what,
            bindings: None,
        })
    }

    /// The expression, as explain prints it.
    pub fn new_root(&self) -> &Expression {
        &self.new_root
    }

    /// The replacement document.
    pub fn apply(&self, doc: &RawDocument) -> Result<Document> {
        self.apply_bound(doc, nidus_expr::binder(self.bindings.as_deref()))
    }

    /// [`ReplaceRoot::apply`] with variables set by `binder`.
    pub fn apply_bound(&self, doc: &RawDocument, binder: &dyn Bind) -> Result<Document> {
        let mut vars = Variables::for_raw(doc);
        binder.bind(&mut vars);
        match self.new_root.evaluate(&mut vars)? {
            Some(Bson::Document(d)) => Ok(d),
            other => {
                let shown = other.as_ref().map_or("MISSING".to_string(), shell::format);
                let input = Document::try_from(doc)
                    .map(Bson::Document)
                    .unwrap_or(Bson::Null);
                Err(Error::new(
                    ErrorCode::Location(40228),
                    format!(
                        "{} must evaluate to an object, but resulting value was: {shown}. Type of resulting value: '{}'. Input document: {}",
                        self.what,
                        type_name(&other),
                        shell::format(&input)
                    ),
                ))
            }
        }
    }
}
