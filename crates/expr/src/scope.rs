//! A command's variable scope: its `let` variables and its `$$NOW`.
//!
//! MongoDB evaluates a command's `let` once, before any document is read, and every
//! expression of the command (filters' `$expr`, projections, pipeline stages, pipeline
//! updates) sees the same values and the same `$$NOW`. [`LetScope`] holds the parse-time
//! side (a [`ParseContext`] where the names are defined) and the run-time side
//! ([`Bindings`], shared by the parsed expressions that need it).

use crate::expression::Expression;
use crate::variables::{ParseContext, VarId, Variables};
use bson::{Bson, DateTime, Document};
use nidus_common::Result;
use std::sync::Arc;

/// Something that sets variable values (and `$$NOW`) before an evaluation: a command's
/// [`Bindings`], or a pipeline's run-time context (which adds `$lookup`'s per-document
/// `let` values).
pub trait Bind {
    fn bind(&self, vars: &mut Variables);
}

/// No variables beyond the builtins.
pub struct NoBindings;

impl Bind for NoBindings {
    fn bind(&self, _vars: &mut Variables) {}
}

/// `bindings`, or none when the caller has no command scope.
pub fn binder(bindings: Option<&Bindings>) -> &dyn Bind {
    match bindings {
        Some(b) => b,
        None => &NoBindings,
    }
}

/// Values bound to variables for a whole command.
#[derive(Debug, Clone)]
pub struct Bindings {
    values: Vec<(VarId, Bson)>,
    now: DateTime,
}

impl Bindings {
    /// No variables; `$$NOW` is `now`.
    pub fn at(now: DateTime) -> Bindings {
        Bindings {
            values: Vec::new(),
            now,
        }
    }

    pub fn now(&self) -> DateTime {
        self.now
    }
}

impl Bind for Bindings {
    /// Sets these values (and `$$NOW`) in `vars`.
    fn bind(&self, vars: &mut Variables) {
        vars.set_now(self.now);
        for (id, v) in &self.values {
            vars.set(*id, Some(v.clone()));
        }
    }
}

/// The parse context and bindings of one command.
#[derive(Debug)]
pub struct LetScope {
    ctx: ParseContext,
    bindings: Arc<Bindings>,
}

impl LetScope {
    /// A scope without `let` variables, `$$NOW` read now.
    pub fn empty() -> LetScope {
        LetScope {
            ctx: ParseContext::new(),
            bindings: Arc::new(Bindings::at(DateTime::now())),
        }
    }

    /// Parses and evaluates a command's `let` document. Each value is an expression over no
    /// document (a field path evaluates to missing, which binds null); later variables may
    /// read earlier ones.
    pub fn new(spec: Option<&Document>) -> Result<LetScope> {
        LetScope::over(spec, &Document::new())
    }

    /// [`LetScope::new`] with the values evaluated over `root` (`$merge`'s `let`, evaluated
    /// over each result document it writes).
    pub fn over(spec: Option<&Document>, root: &Document) -> Result<LetScope> {
        let now = DateTime::now();
        let ctx = ParseContext::new();
        let mut bindings = Bindings::at(now);
        for (name, v) in spec.into_iter().flatten() {
            let e = Expression::parse(v, &ctx)?;
            let mut vars = Variables::for_doc(root);
            bindings.bind(&mut vars);
            let value = e.evaluate(&mut vars)?.unwrap_or(Bson::Null);
            let id = ctx.define_variable(name)?;
            bindings.values.push((id, value));
        }
        Ok(LetScope {
            ctx,
            bindings: Arc::new(bindings),
        })
    }

    /// The variables' values, in the order of the `let` document.
    pub fn values(&self) -> impl Iterator<Item = &Bson> {
        self.bindings.values.iter().map(|(_, v)| v)
    }

    /// Where the command's expressions are parsed (the `let` names are defined).
    pub fn parse_context(&self) -> &ParseContext {
        &self.ctx
    }

    /// What evaluation binds (shared by every parsed expression of the command).
    pub fn bindings(&self) -> &Arc<Bindings> {
        &self.bindings
    }
}

#[cfg(test)]
mod tests {
    use super::{Bind, LetScope};
    use crate::{Expression, Variables};
    use bson::{bson, doc};

    #[test]
    fn let_values_are_seen_by_later_expressions() {
        let scope =
            LetScope::new(Some(&doc! {"x": 2, "y": {"$add": ["$$x", 1]}, "z": "$a"})).expect("let");
        let e = Expression::parse(&bson!(["$$x", "$$y", "$$z", "$a"]), scope.parse_context())
            .expect("parse");
        let d = doc! {"a": 7};
        let mut vars = Variables::for_doc(&d);
        scope.bindings().bind(&mut vars);
        assert_eq!(
            e.evaluate(&mut vars).expect("eval"),
            Some(bson!([2, 3, null, 7]))
        );
    }

    #[test]
    fn let_errors() {
        let cases = [
            (doc! {"Bad": 1}, 16867),
            (doc! {"x": "$$undefined"}, 17276),
            (doc! {"x": {"$divide": [1, 0]}}, 2),
        ];
        for (spec, code) in cases {
            let e = LetScope::new(Some(&spec)).expect_err("bad let");
            assert_eq!(e.code.code(), code, "{spec}: {}", e.message);
        }
    }
}
