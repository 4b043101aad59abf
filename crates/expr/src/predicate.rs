//! `$expr` as a document predicate: the expression's result is true unless it is false,
//! null, undefined, missing or numeric zero.
//!
//! The `query` crate's matcher takes a parser of type `fn(&Bson) -> Result<Arc<dyn
//! DocPredicate>>`; it wraps [`ExprPredicate`] in its own trait (this crate does not depend
//! on `query`).

use crate::value::truthy;
use crate::{Expression, ParseContext, Variables};
use bson::{Bson, DateTime, RawDocument};
use nidus_common::Result;

/// A parsed `$expr` argument.
#[derive(Debug, Clone)]
pub struct ExprPredicate {
    expr: Expression,
}

impl ExprPredicate {
    /// Parses the argument of `$expr`.
    pub fn parse(arg: &Bson) -> Result<ExprPredicate> {
        Self::parse_with(arg, &ParseContext::new())
    }

    /// Parses with a context holding the command's `let` variables.
    pub fn parse_with(arg: &Bson, ctx: &ParseContext) -> Result<ExprPredicate> {
        Ok(ExprPredicate {
            expr: Expression::parse(arg, ctx)?,
        })
    }

    pub fn expression(&self) -> &Expression {
        &self.expr
    }

    /// Evaluates against a document; errors (e.g. `$divide` by zero) are returned.
    pub fn evaluate(&self, doc: &RawDocument) -> Result<bool> {
        let mut vars = Variables::for_raw(doc);
        Ok(truthy(&self.expr.evaluate(&mut vars)?))
    }

    /// Evaluates with given variables (`$$NOW` fixed per command, `let` values).
    pub fn evaluate_with(&self, vars: &mut Variables) -> Result<bool> {
        Ok(truthy(&self.expr.evaluate(vars)?))
    }

    /// Evaluates with `$$NOW` fixed.
    pub fn evaluate_at(&self, doc: &RawDocument, now: DateTime) -> Result<bool> {
        let mut vars = Variables::for_raw(doc).with_now(now);
        Ok(truthy(&self.expr.evaluate(&mut vars)?))
    }

    /// Evaluates, treating an evaluation error as "no match".
    pub fn matches(&self, doc: &RawDocument) -> bool {
        self.evaluate(doc).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::ExprPredicate;
    use bson::{bson, doc, RawDocumentBuf};

    #[test]
    fn truthiness() {
        let d =
            RawDocumentBuf::from_document(&doc! {"a": 5, "b": 3, "z": 0, "s": ""}).expect("raw");
        let cases = [
            (bson!({"$gt": ["$a", "$b"]}), true),
            (bson!({"$lt": ["$a", "$b"]}), false),
            (bson!("$z"), false),
            (bson!("$missing"), false),
            (bson!("$s"), true),
            (bson!(null), false),
            (bson!({"$add": ["$a", 1]}), true),
        ];
        for (e, want) in cases {
            let p = ExprPredicate::parse(&e).expect("parse");
            assert_eq!(p.matches(&d), want, "{e}");
        }
        let p = ExprPredicate::parse(&bson!({"$divide": [1, "$z"]})).expect("parse");
        assert!(p.evaluate(&d).is_err());
    }
}
