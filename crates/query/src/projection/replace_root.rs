//! `$replaceRoot`/`$replaceWith` (aggregation stage and update pipelines): the document an
//! expression evaluates to replaces the input.

use bson::{Bson, Document, RawDocument};
use nidus_common::{shell, Error, ErrorCode, Result};
use nidus_expr::{value::type_name, Bindings, Expression, LetScope, Variables};
use std::sync::Arc;

/// A parsed `$replaceRoot: {newRoot: <expr>}` or `$replaceWith: <expr>`.
#[derive(Debug, Clone)]
pub struct ReplaceRoot {
    new_root: Expression,
    /// How errors name the expression: `'newRoot'` or `'replacement document'`.
    what: &'static str,
    bindings: Arc<Bindings>,
}

impl ReplaceRoot {
    /// Parses `{newRoot: <expr>}` (the argument of `$replaceRoot`).
    pub fn parse_replace_root(arg: &Bson, scope: &LetScope) -> Result<ReplaceRoot> {
        let Bson::Document(d) = arg else {
            return Err(Error::new(
                ErrorCode::Location(40228),
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
        Self::parse(new_root, "'newRoot'", scope)
    }

    /// Parses the argument of `$replaceWith`.
    pub fn parse_replace_with(arg: &Bson, scope: &LetScope) -> Result<ReplaceRoot> {
        Self::parse(arg, "'replacement document'", scope)
    }

    fn parse(expr: &Bson, what: &'static str, scope: &LetScope) -> Result<ReplaceRoot> {
        Ok(ReplaceRoot {
            new_root: Expression::parse(expr, scope.parse_context())?,
            what,
            bindings: scope.bindings().clone(),
        })
    }

    /// The replacement document.
    pub fn apply(&self, doc: &RawDocument) -> Result<Document> {
        let mut vars = Variables::for_raw(doc);
        self.bindings.bind(&mut vars);
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
