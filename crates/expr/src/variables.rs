//! Variables: the parse-time scope ([`ParseContext`]), the evaluation-time values
//! ([`Variables`]: `$$ROOT`, `$$CURRENT`, `$$NOW`, user variables), name validation, and the
//! `$let` and `$literal` operators.

use crate::expression::{named_raw, Expression, Operator, Parser};
use crate::value::{err, Value};
use bson::{Bson, DateTime, Document, RawDocument};
use nidus_common::Result;
use std::cell::RefCell;

/// A variable slot, assigned at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VarId(pub u32);

pub const ROOT: VarId = VarId(0);
pub const CURRENT: VarId = VarId(1);
pub const REMOVE: VarId = VarId(2);
pub const NOW: VarId = VarId(3);
pub const CLUSTER_TIME: VarId = VarId(4);
pub const USER_ROLES: VarId = VarId(5);
/// The first slot of user variables (below it: the builtins).
pub const FIRST_USER: u32 = 8;

const BUILTINS: &[(&str, VarId)] = &[
    ("ROOT", ROOT),
    ("CURRENT", CURRENT),
    ("REMOVE", REMOVE),
    ("NOW", NOW),
    ("CLUSTER_TIME", CLUSTER_TIME),
    ("USER_ROLES", USER_ROLES),
];

/// The variables in scope while parsing. Interior mutability lets nested operators
/// (`$let`, `$map`, `$filter`, `$reduce`) open scopes through a shared reference.
#[derive(Debug)]
pub struct ParseContext {
    scope: RefCell<Scope>,
}

#[derive(Debug)]
struct Scope {
    names: Vec<(String, VarId)>,
    next: u32,
}

impl Default for ParseContext {
    fn default() -> Self {
        ParseContext::new()
    }
}

impl ParseContext {
    pub fn new() -> ParseContext {
        ParseContext {
            scope: RefCell::new(Scope {
                names: Vec::new(),
                next: FIRST_USER,
            }),
        }
    }

    /// Defines a variable visible to everything parsed afterwards (a command's `let`, or a
    /// `$lookup` pipeline's `let`). The name must be a valid user variable name.
    pub fn define_variable(&self, name: &str) -> Result<VarId> {
        validate_name_for_write(name)?;
        Ok(self.define(name))
    }

    pub(crate) fn define(&self, name: &str) -> VarId {
        let mut s = self.scope.borrow_mut();
        let id = VarId(s.next);
        s.next += 1;
        s.names.push((name.to_string(), id));
        id
    }

    /// The variable a name refers to (innermost definition first, then the builtins).
    pub fn lookup(&self, name: &str) -> Result<VarId> {
        let s = self.scope.borrow();
        if let Some((_, id)) = s.names.iter().rev().find(|(n, _)| n == name) {
            return Ok(*id);
        }
        if let Some((_, id)) = BUILTINS.iter().find(|(n, _)| *n == name) {
            return Ok(*id);
        }
        Err(err(17276, format!("Use of undefined variable: {name}")))
    }

    /// The current scope depth, to [`ParseContext::restore`] when a scope that defined
    /// variables (`$let`, a `$lookup`'s `let`) ends.
    pub fn mark(&self) -> usize {
        self.scope.borrow().names.len()
    }

    /// Forgets the names defined since `mark` (their slots stay allocated, so ids remain
    /// unique).
    pub fn restore(&self, mark: usize) {
        self.scope.borrow_mut().names.truncate(mark);
    }

    /// One more than the largest variable id handed out.
    pub fn slot_count(&self) -> usize {
        self.scope.borrow().next as usize
    }
}

/// `validateNameForUserWrite`: a lowercase ASCII letter or non-ASCII byte first, then
/// letters, digits, `_` or non-ASCII. `CURRENT` may be rebound.
pub fn validate_name_for_write(name: &str) -> Result<()> {
    if name == "CURRENT" {
        return Ok(());
    }
    validate_name(name, |c| c.is_ascii_lowercase() || c >= 0x80)
}

/// `validateNameForUserRead`: like write, but an uppercase first letter is allowed.
pub fn validate_name_for_read(name: &str) -> Result<()> {
    validate_name(name, |c| c.is_ascii_alphabetic() || c >= 0x80)
}

fn validate_name(name: &str, first: impl Fn(u8) -> bool) -> Result<()> {
    let bytes = name.as_bytes();
    let Some(&c0) = bytes.first() else {
        return Err(err(16866, "empty variable names are not allowed"));
    };
    if !first(c0) {
        return Err(err(
            16867,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    for &c in &bytes[1..] {
        if !(c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80) {
            return Err(err(
                16868,
                format!(
                    "'{name}' contains an invalid character for a variable name: '{}'",
                    c as char
                ),
            ));
        }
    }
    Ok(())
}

/// The document an evaluation runs against.
#[derive(Debug, Clone)]
enum Root<'a> {
    Raw(&'a RawDocument),
    Doc(&'a Document),
}

/// Variable values during evaluation.
#[derive(Debug, Clone)]
pub struct Variables<'a> {
    root: Root<'a>,
    current: Option<Value>,
    slots: Vec<Value>,
    /// `$$NOW`; read from the clock on first use when no command fixed it.
    now: Option<DateTime>,
    /// The document's `{$meta: "textScore"}` (set by a `$text` query's plan).
    text_score: Option<f64>,
}

impl<'a> Variables<'a> {
    /// `doc` as `$$ROOT` and `$$CURRENT`; `$$NOW` is the current time.
    pub fn for_doc(doc: &'a Document) -> Variables<'a> {
        Variables {
            root: Root::Doc(doc),
            current: None,
            slots: Vec::new(),
            now: None,
            text_score: None,
        }
    }

    /// A raw document as `$$ROOT`/`$$CURRENT` (only the fields a path reaches are
    /// materialized).
    pub fn for_raw(doc: &'a RawDocument) -> Variables<'a> {
        Variables {
            root: Root::Raw(doc),
            current: None,
            slots: Vec::new(),
            now: None,
            text_score: None,
        }
    }

    /// Sets `$$NOW` (one value per command, as MongoDB does).
    pub fn with_now(mut self, now: DateTime) -> Variables<'a> {
        self.now = Some(now);
        self
    }

    /// Sets the text score `{$meta: "textScore"}` reads.
    pub fn set_text_score(&mut self, score: Option<f64>) {
        self.text_score = score;
    }

    pub fn text_score(&self) -> Option<f64> {
        self.text_score
    }

    /// Sets `$$NOW` in place.
    pub fn set_now(&mut self, now: DateTime) {
        self.now = Some(now);
    }

    /// Sets a user variable (a command's `let`, or an operator binding).
    pub fn set(&mut self, id: VarId, v: Value) {
        if id == CURRENT {
            self.current = Some(v);
            return;
        }
        let i = id.0 as usize;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = v;
    }

    /// Rebinds `$$CURRENT` (as `$redact` does when descending).
    pub fn set_current(&mut self, v: Value) {
        self.current = Some(v);
    }

    pub(crate) fn current_is_set(&self) -> bool {
        self.current.is_some()
    }

    /// The root document as an owned value.
    pub fn root(&self) -> Bson {
        match self.root {
            Root::Doc(d) => Bson::Document(d.clone()),
            Root::Raw(r) => Bson::Document(Document::try_from(r).unwrap_or_default()),
        }
    }

    /// `$$ROOT.<path>` with expression path semantics.
    pub(crate) fn root_path(&self, path: &[String]) -> Value {
        match self.root {
            Root::Doc(d) => crate::expression::path_in_doc(d, path),
            Root::Raw(r) => crate::expression::path_in_raw(r, path),
        }
    }

    /// The value of a variable.
    pub fn get(&self, id: VarId) -> Result<Value> {
        match id {
            ROOT => Ok(Some(self.root())),
            CURRENT => match &self.current {
                Some(v) => Ok(v.clone()),
                None => Ok(Some(self.root())),
            },
            REMOVE => Ok(None),
            NOW => Ok(Some(Bson::DateTime(self.now.unwrap_or_else(DateTime::now)))),
            CLUSTER_TIME => Err(err(
                51144,
                "Builtin variable '$$CLUSTER_TIME' is not available",
            )),
            USER_ROLES => Ok(Some(Bson::Array(Vec::new()))),
            VarId(i) => Ok(self.slots.get(i as usize).cloned().flatten()),
        }
    }
}

// ---- operators -----------------------------------------------------------------------------

pub(crate) const OPS: &[(&str, Parser)] = &[
    ("$let", parse_let),
    ("$literal", parse_literal),
    ("$const", parse_literal),
];

fn parse_literal(_name: &'static str, arg: &Bson, _ctx: &ParseContext) -> Result<Expression> {
    Ok(Expression::Constant(arg.clone()))
}

/// `{$let: {vars: {...}, in: <expr>}}`.
#[derive(Debug)]
pub struct Let {
    vars: Vec<(String, VarId, Expression)>,
    body: Expression,
}

fn parse_let(_name: &'static str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    let raw = named_raw(
        arg,
        &["vars", "in"],
        || err(16874, "$let only supports an object as its argument"),
        |k| err(16875, format!("Unrecognized parameter to $let: {k}")),
    )?;
    let vars_raw = raw[0].ok_or_else(|| err(16876, "Missing 'vars' parameter to $let"))?;
    let in_raw = raw[1].ok_or_else(|| err(16877, "Missing 'in' parameter to $let"))?;
    let Bson::Document(vars_doc) = vars_raw else {
        return Err(err(10065, "invalid parameter: expected an object (vars)"));
    };
    // The definitions see only the outer scope.
    let mut parsed = Vec::with_capacity(vars_doc.len());
    for (k, v) in vars_doc {
        parsed.push((k.clone(), Expression::parse(v, ctx)?));
    }
    let mark = ctx.mark();
    let mut vars = Vec::with_capacity(parsed.len());
    for (k, e) in parsed {
        if let Err(e) = validate_name_for_write(&k) {
            ctx.restore(mark);
            return Err(e);
        }
        let id = if k == "CURRENT" {
            CURRENT
        } else {
            ctx.define(&k)
        };
        vars.push((k, id, e));
    }
    let body = Expression::parse(in_raw, ctx);
    ctx.restore(mark);
    Ok(Expression::op(Let { vars, body: body? }))
}

impl Operator for Let {
    fn name(&self) -> &str {
        "$let"
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        let mut values = Vec::with_capacity(self.vars.len());
        for (_, id, e) in &self.vars {
            values.push((*id, e.evaluate(vars)?));
        }
        let saved_current = vars.current.clone();
        for (id, v) in values {
            vars.set(id, v);
        }
        let out = self.body.evaluate(vars);
        vars.current = saved_current;
        out
    }

    fn serialize(&self) -> Bson {
        let mut vs = Document::new();
        for (k, _, e) in &self.vars {
            vs.insert(k.clone(), e.serialize());
        }
        let mut args = Document::new();
        args.insert("vars", vs);
        args.insert("in", self.body.serialize());
        let mut d = Document::new();
        d.insert("$let", args);
        Bson::Document(d)
    }

    fn children(&self) -> Vec<&Expression> {
        let mut c: Vec<&Expression> = self.vars.iter().map(|(_, _, e)| e).collect();
        c.push(&self.body);
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{case_err, case_ok};
    use bson::{bson, doc};

    #[test]
    fn field_paths_and_variables() {
        let d = doc! {"a": {"b": 1}, "arr": [{"x": 1}, {"y": 2}, {"x": [3, 4]}, 5, [ {"x": 9} ]], "n": null};
        let cases = [
            (bson!("$a.b"), Some(bson!(1))),
            (bson!("$a"), Some(bson!({"b": 1}))),
            (bson!("$nope"), None),
            (bson!("$a.b.c"), None),
            (bson!("$arr.x"), Some(bson!([1, [3, 4]]))),
            (bson!("$n.x"), None),
            (bson!("$$ROOT.a.b"), Some(bson!(1))),
            (bson!("$$CURRENT.a"), Some(bson!({"b": 1}))),
            (bson!("$$REMOVE"), None),
            (
                bson!({"$let": {"vars": {"x": 2, "y": "$a.b"}, "in": {"$add": ["$$x", "$$y"]}}}),
                Some(bson!(3)),
            ),
            (
                bson!({"$let": {"vars": {"x": {"p": [1, 2]}}, "in": "$$x.p"}}),
                Some(bson!([1, 2])),
            ),
            (
                bson!({"$let": {"vars": {"CURRENT": "$a"}, "in": "$b"}}),
                Some(bson!(1)),
            ),
            (bson!({"$literal": "$a"}), Some(bson!("$a"))),
            (bson!({"$literal": [1, "$a"]}), Some(bson!([1, "$a"]))),
            (
                bson!({"x": "$a.b", "y": "$missing", "z": [1, "$missing"]}),
                Some(bson!({"x": 1, "z": [1, null]})),
            ),
            (bson!({}), Some(bson!({}))),
        ];
        for (e, want) in cases {
            case_ok(&d, &e, want);
        }
    }

    #[test]
    fn variable_errors() {
        let d = doc! {};
        let cases = [
            (bson!("$$nope"), 17276),
            (bson!("$$"), 16866),
            (bson!("$$1x"), 16867),
            (bson!("$$a-b"), 16868),
            (bson!("$"), 16872),
            (bson!("$a..b"), 15998),
            (bson!("$a."), 40353),
            (bson!("$a.$b"), 16410),
            (bson!({"$let": {"vars": {"X": 1}, "in": 1}}), 16867),
            (bson!({"$let": {"vars": {"x": 1}}}), 16877),
            (bson!({"$let": {"in": 1}}), 16876),
            (bson!({"$let": {"vars": {}, "in": 1, "z": 1}}), 16875),
            (bson!({"$let": 1}), 16874),
            (bson!({"$let": {"vars": {"x": "$$x"}, "in": 1}}), 17276),
            (bson!({"a": 1, "$b": 2}), 16410),
            (bson!({"$add": [1], "b": 2}), 15983),
            (bson!({"$foo": 1}), 168),
            (bson!({"a.b": 1}), 16412),
        ];
        for (e, code) in cases {
            case_err(&d, &e, code);
        }
    }
}
