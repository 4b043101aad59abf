//! `$expr` as a document predicate: the expression's result is true unless it is false,
//! null, undefined, missing or numeric zero. The `query` crate's matcher wraps
//! [`ExprPredicate`] (this crate does not depend on `query`).

use crate::scope::{Bind, Bindings, LetScope};
use crate::value::truthy;
use crate::{Expression, Variables};
use bson::{Bson, RawDocument};
use nidus_common::Result;
use std::sync::Arc;

/// A parsed `$expr` argument, with the command's variable bindings.
#[derive(Debug, Clone)]
pub struct ExprPredicate {
    expr: Expression,
    bindings: Option<Arc<Bindings>>,
}

impl ExprPredicate {
    /// Parses the argument of `$expr` (no `let` variables).
    pub fn parse(arg: &Bson) -> Result<ExprPredicate> {
        Ok(ExprPredicate {
            expr: Expression::parse(arg, &crate::ParseContext::new())?,
            bindings: None,
        })
    }

    /// Parses in a command's scope (its `let` variables and `$$NOW`).
    pub fn parse_in(arg: &Bson, scope: &LetScope) -> Result<ExprPredicate> {
        Ok(ExprPredicate {
            expr: Expression::parse(arg, scope.parse_context())?,
            bindings: Some(scope.bindings().clone()),
        })
    }

    pub fn expression(&self) -> &Expression {
        &self.expr
    }

    /// Evaluates against a document; errors (e.g. `$divide` by zero) are returned.
    pub fn evaluate(&self, doc: &RawDocument) -> Result<bool> {
        let mut vars = Variables::for_raw(doc);
        if let Some(b) = &self.bindings {
            b.bind(&mut vars);
        }
        Ok(truthy(&self.expr.evaluate(&mut vars)?))
    }
}

#[cfg(test)]
mod tests {
    use super::ExprPredicate;
    use bson::{bson, doc};

    #[test]
    fn truthiness() {
        let d = nidus_common::encode::document_to_raw(&doc! {"a": 5, "b": 3, "z": 0, "s": ""})
            .expect("raw");
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
            assert_eq!(p.evaluate(&d).ok(), Some(want), "{e}");
        }
        let p = ExprPredicate::parse(&bson!({"$divide": [1, "$z"]})).expect("parse");
        assert!(p.evaluate(&d).is_err());
    }
}
