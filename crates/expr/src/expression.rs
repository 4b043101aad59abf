//! The expression tree, its parser (MongoDB's `parseOperand`/`parseObject`/argument lists)
//! and field-path evaluation.

use crate::value::{err, Value};
use crate::variables::{self, ParseContext, VarId, Variables};
use crate::{
    arithmetic, array, boolean, comparison, conditional, date, meta, object, random, set, string,
    types,
};
use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub enum Expression {
    /// A literal (also `$literal`/`$const`).
    Constant(Bson),
    /// `"$a.b"`, `"$$var.x"`.
    FieldPath(FieldPathExpr),
    /// `{a: <expr>, b: <expr>}`.
    Object(Vec<(String, Expression)>),
    /// `[<expr>, ...]`.
    Array(Vec<Expression>),
    /// An operator (`{$add: [...]}`).
    Op(Arc<dyn Operator>),
}

/// An operator node. Families implement it through [`Nary`] and [`Named`], or directly for
/// operators that bind variables or precompute state.
pub trait Operator: fmt::Debug + Send + Sync {
    /// `$add`, `$map`, ...
    fn name(&self) -> &str;
    fn evaluate(&self, vars: &mut Variables) -> Result<Value>;
    /// The expression as MongoDB serializes it (explain, views).
    fn serialize(&self) -> Bson;
    /// Direct sub-expressions (for dependency analysis).
    fn children(&self) -> Vec<&Expression>;
    /// The metadata this operator reads (`$meta`'s argument).
    fn metadata(&self) -> Option<&'static str> {
        None
    }
}

/// Evaluation function of an operator with positional arguments.
pub type NaryFn = fn(&Nary, &mut Variables) -> Result<Value>;

/// An operator with positional arguments (`{$op: [a, b]}` or `{$op: a}`). The evaluation
/// function evaluates the arguments it needs (so `$and`, `$cond` can short-circuit).
pub struct Nary {
    pub name: &'static str,
    pub args: Vec<Expression>,
    pub f: NaryFn,
}

impl fmt::Debug for Nary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nary")
            .field("name", &self.name)
            .field("args", &self.args)
            .finish()
    }
}

impl Nary {
    /// Evaluates argument `i` (missing when there is no such argument).
    pub fn arg(&self, i: usize, vars: &mut Variables) -> Result<Value> {
        match self.args.get(i) {
            Some(e) => e.evaluate(vars),
            None => Ok(None),
        }
    }

    /// Evaluates every argument in order.
    pub fn all(&self, vars: &mut Variables) -> Result<Vec<Value>> {
        self.args.iter().map(|e| e.evaluate(vars)).collect()
    }
}

impl Operator for Nary {
    fn name(&self) -> &str {
        self.name
    }
    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        (self.f)(self, vars)
    }
    fn serialize(&self) -> Bson {
        let mut d = Document::new();
        d.insert(
            self.name,
            Bson::Array(self.args.iter().map(Expression::serialize).collect()),
        );
        Bson::Document(d)
    }
    fn children(&self) -> Vec<&Expression> {
        self.args.iter().collect()
    }
}

/// Evaluation function of an operator with named arguments.
pub type NamedFn = fn(&Named, &mut Variables) -> Result<Value>;

/// An operator with named arguments (`{$op: {input: ..., regex: ...}}`), in a fixed order of
/// slots; absent optional arguments are `None`.
pub struct Named {
    pub name: &'static str,
    pub fields: Vec<(&'static str, Option<Expression>)>,
    pub f: NamedFn,
}

impl fmt::Debug for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Named")
            .field("name", &self.name)
            .field("fields", &self.fields)
            .finish()
    }
}

impl Named {
    pub fn get(&self, key: &str) -> Option<&Expression> {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, e)| e.as_ref())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Evaluates the argument (missing when absent).
    pub fn eval(&self, key: &str, vars: &mut Variables) -> Result<Value> {
        match self.get(key) {
            Some(e) => e.evaluate(vars),
            None => Ok(None),
        }
    }
}

impl Operator for Named {
    fn name(&self) -> &str {
        self.name
    }
    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        (self.f)(self, vars)
    }
    fn serialize(&self) -> Bson {
        let mut args = Document::new();
        for (k, e) in &self.fields {
            if let Some(e) = e {
                args.insert(*k, e.serialize());
            }
        }
        let mut d = Document::new();
        d.insert(self.name, args);
        Bson::Document(d)
    }
    fn children(&self) -> Vec<&Expression> {
        self.fields.iter().filter_map(|(_, e)| e.as_ref()).collect()
    }
}

/// A field path or variable reference: `$$<var>.<path...>` (`$a.b` is `$$CURRENT.a.b`).
#[derive(Debug, Clone)]
pub struct FieldPathExpr {
    pub var: VarId,
    pub var_name: String,
    pub path: Vec<String>,
}

impl FieldPathExpr {
    /// The dotted path below the variable (`a.b` for `$a.b`).
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// The path as written (`$a.b`, `$$var.x`).
    pub fn serialize_string(&self) -> Option<String> {
        match self.serialize() {
            Bson::String(s) => Some(s),
            _ => None,
        }
    }

    fn serialize(&self) -> Bson {
        if self.var == variables::CURRENT && !self.path.is_empty() {
            Bson::String(format!("${}", self.dotted()))
        } else if self.path.is_empty() {
            Bson::String(format!("$${}", self.var_name))
        } else {
            Bson::String(format!("$${}.{}", self.var_name, self.dotted()))
        }
    }

    fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        if self.path.is_empty() {
            return vars.get(self.var);
        }
        if (self.var == variables::CURRENT && !vars.current_is_set()) || self.var == variables::ROOT
        {
            return Ok(vars.root_path(&self.path));
        }
        let v = vars.get(self.var)?;
        Ok(match v {
            Some(Bson::Document(d)) => path_in_doc(&d, &self.path),
            Some(Bson::Array(a)) => Some(path_in_array(&a, &self.path)),
            _ => None,
        })
    }
}

/// `evaluatePath` over an owned document.
pub(crate) fn path_in_doc(doc: &Document, path: &[String]) -> Value {
    let Some((first, rest)) = path.split_first() else {
        return Some(Bson::Document(doc.clone()));
    };
    let v = doc.get(first)?;
    if rest.is_empty() {
        return Some(v.clone());
    }
    match v {
        Bson::Document(d) => path_in_doc(d, rest),
        Bson::Array(a) => Some(path_in_array(a, rest)),
        _ => None,
    }
}

/// `evaluatePathArray`: the path in every document element; missing results are skipped,
/// non-documents ignored.
pub(crate) fn path_in_array(arr: &[Bson], path: &[String]) -> Bson {
    let mut out = Vec::new();
    for el in arr {
        if let Bson::Document(d) = el {
            if let Some(v) = path_in_doc(d, path) {
                out.push(v);
            }
        }
    }
    Bson::Array(out)
}

/// `evaluatePath` over a raw document, materializing only what the path reaches.
pub(crate) fn path_in_raw(doc: &RawDocument, path: &[String]) -> Value {
    let (first, rest) = path.split_first()?;
    let v = doc.get(first).ok().flatten()?;
    if rest.is_empty() {
        return raw_to_bson(v);
    }
    match v {
        RawBsonRef::Document(d) => path_in_raw(d, rest),
        RawBsonRef::Array(a) => {
            let mut out = Vec::new();
            for el in a.into_iter().map_while(|r| r.ok()) {
                if let RawBsonRef::Document(d) = el {
                    if let Some(v) = path_in_raw(d, rest) {
                        out.push(v);
                    }
                }
            }
            Some(Bson::Array(out))
        }
        _ => None,
    }
}

pub(crate) fn raw_to_bson(v: RawBsonRef) -> Value {
    Bson::try_from(v.to_raw_bson()).ok()
}

/// What an expression reads: fields of the current document, the whole document, variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dependencies {
    /// Dotted paths of `$$CURRENT`/`$$ROOT` that are read.
    pub fields: BTreeSet<String>,
    /// `$$ROOT` or `$$CURRENT` is read as a whole.
    pub need_whole_document: bool,
    /// Variables read (other than ROOT/CURRENT).
    pub variables: BTreeSet<VarId>,
    /// Metadata read through `$meta` (`"textScore"`, `"indexKey"`, ...).
    pub metadata: BTreeSet<&'static str>,
}

impl Expression {
    /// Parses an expression operand (MongoDB's `parseOperand`): a `$`-string is a field path
    /// or variable, an object is an operator or an object expression, an array is an array
    /// expression, anything else a constant.
    pub fn parse(v: &Bson, ctx: &ParseContext) -> Result<Expression> {
        match v {
            Bson::String(s) if s.starts_with('$') => parse_field_path(s, ctx),
            Bson::Document(d) => Expression::parse_object(d, ctx),
            Bson::Array(a) => Ok(Expression::Array(
                a.iter()
                    .map(|e| Expression::parse(e, ctx))
                    .collect::<Result<_>>()?,
            )),
            other => Ok(Expression::Constant(other.clone())),
        }
    }

    /// Parses an object: `{$op: args}` (exactly one field) or an object expression.
    pub fn parse_object(d: &Document, ctx: &ParseContext) -> Result<Expression> {
        let Some((first, arg)) = d.iter().next() else {
            return Ok(Expression::Object(Vec::new()));
        };
        if first.starts_with('$') {
            if d.len() != 1 {
                return Err(err(
                    15983,
                    format!(
                        "An object representing an expression must have exactly one field: {}",
                        crate::value::display_bson(&Bson::Document(d.clone()))
                    ),
                ));
            }
            return parse_operator(first, arg, ctx);
        }
        let mut fields: Vec<(String, Expression)> = Vec::with_capacity(d.len());
        for (k, v) in d {
            // A name sent twice arrives as a repetition (`nidus_common::repeated`).
            let k = nidus_common::repeated::original_name(k);
            validate_field_name(k)?;
            if fields.iter().any(|(f, _)| f == k) {
                return Err(err(
                    16406,
                    format!(
                        "duplicate field name specified in object literal: {}",
                        strip_repetition_marks(&crate::value::display_bson(&Bson::Document(
                            d.clone()
                        )))
                    ),
                ));
            }
            fields.push((k.to_string(), Expression::parse(v, ctx)?));
        }
        Ok(Expression::Object(fields))
    }

    /// Evaluates against the variables (the current document is `$$CURRENT`).
    pub fn evaluate(&self, vars: &mut Variables) -> Result<Value> {
        match self {
            Expression::Constant(b) => Ok(Some(b.clone())),
            Expression::FieldPath(fp) => fp.evaluate(vars),
            Expression::Object(fields) => {
                let mut d = Document::new();
                for (k, e) in fields {
                    if let Some(v) = e.evaluate(vars)? {
                        d.insert(k.clone(), v);
                    }
                }
                Ok(Some(Bson::Document(d)))
            }
            Expression::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    out.push(e.evaluate(vars)?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Expression::Op(op) => op.evaluate(vars),
        }
    }

    /// Evaluates with `doc` as `$$ROOT`/`$$CURRENT` and no user variables.
    pub fn evaluate_doc(&self, doc: &Document) -> Result<Value> {
        self.evaluate(&mut Variables::for_doc(doc))
    }

    /// Evaluates with a raw document as `$$ROOT`/`$$CURRENT`.
    pub fn evaluate_raw(&self, doc: &RawDocument) -> Result<Value> {
        self.evaluate(&mut Variables::for_raw(doc))
    }

    /// The expression in MongoDB's serialized form (constants as `{$const: ...}`).
    pub fn serialize(&self) -> Bson {
        match self {
            Expression::Constant(b) => {
                let mut d = Document::new();
                d.insert("$const", b.clone());
                Bson::Document(d)
            }
            Expression::FieldPath(fp) => fp.serialize(),
            Expression::Object(fields) => {
                let mut d = Document::new();
                for (k, e) in fields {
                    d.insert(k.clone(), e.serialize());
                }
                Bson::Document(d)
            }
            Expression::Array(items) => {
                Bson::Array(items.iter().map(Expression::serialize).collect())
            }
            Expression::Op(op) => op.serialize(),
        }
    }

    /// True for a constant (after parsing; no folding is done yet).
    pub fn is_constant(&self) -> bool {
        matches!(self, Expression::Constant(_))
    }

    /// The constant value, if this is a constant.
    pub fn as_constant(&self) -> Option<&Bson> {
        match self {
            Expression::Constant(b) => Some(b),
            _ => None,
        }
    }

    /// Adds what this expression reads to `deps`.
    pub fn add_dependencies(&self, deps: &mut Dependencies) {
        match self {
            Expression::Constant(_) => {}
            Expression::FieldPath(fp) => {
                if fp.var == variables::ROOT || fp.var == variables::CURRENT {
                    if fp.path.is_empty() {
                        deps.need_whole_document = true;
                    } else {
                        deps.fields.insert(fp.dotted());
                    }
                } else {
                    deps.variables.insert(fp.var);
                }
            }
            Expression::Object(fields) => {
                for (_, e) in fields {
                    e.add_dependencies(deps);
                }
            }
            Expression::Array(items) => {
                for e in items {
                    e.add_dependencies(deps);
                }
            }
            Expression::Op(op) => {
                deps.metadata.extend(op.metadata());
                for c in op.children() {
                    c.add_dependencies(deps);
                }
            }
        }
    }

    /// The dependencies of this expression.
    pub fn dependencies(&self) -> Dependencies {
        let mut d = Dependencies::default();
        self.add_dependencies(&mut d);
        d
    }

    pub(crate) fn op(o: impl Operator + 'static) -> Expression {
        Expression::Op(Arc::new(o))
    }
}

/// Checks a field name of an object expression (`FieldPath::uassertValidFieldName`).
pub(crate) fn validate_field_name(k: &str) -> Result<()> {
    if k.is_empty() {
        return Err(err(
            15998,
            "FieldPath field names may not be empty strings.",
        ));
    }
    if k.starts_with('$') {
        return Err(err(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    if k.contains('\0') {
        return Err(err(16411, "FieldPath field names may not contain '\\0'."));
    }
    if k.contains('.') {
        return Err(err(16412, "FieldPath field names may not contain '.'."));
    }
    Ok(())
}

/// Splits and validates a dotted path (`FieldPath`'s constructor).
pub(crate) fn split_path(p: &str) -> Result<Vec<String>> {
    if p.is_empty() {
        return Err(err(
            40352,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if p.ends_with('.') {
        return Err(err(40353, "FieldPath must not end with a '.'."));
    }
    let mut out = Vec::new();
    for part in p.split('.') {
        validate_field_name(part)?;
        out.push(part.to_string());
    }
    Ok(out)
}

/// Parses `$a.b` / `$$var.a`.
pub(crate) fn parse_field_path(s: &str, ctx: &ParseContext) -> Result<Expression> {
    if s.len() < 2 {
        return Err(err(16872, "'$' by itself is not a valid FieldPath"));
    }
    if s.contains('\0') {
        return Err(err(
            16419,
            "field path must not contain embedded null characters",
        ));
    }
    if let Some(rest) = s.strip_prefix("$$") {
        let (name, path) = match rest.split_once('.') {
            Some((n, p)) => (n, Some(p)),
            None => (rest, None),
        };
        variables::validate_name_for_read(name)?;
        let var = ctx.lookup(name)?;
        let path = match path {
            Some(p) => split_path(p)?,
            None => {
                if rest.ends_with('.') {
                    return Err(err(40353, "FieldPath must not end with a '.'."));
                }
                Vec::new()
            }
        };
        return Ok(Expression::FieldPath(FieldPathExpr {
            var,
            var_name: name.to_string(),
            path,
        }));
    }
    let path = split_path(&s[1..])?;
    let var = ctx.lookup("CURRENT")?;
    Ok(Expression::FieldPath(FieldPathExpr {
        var,
        var_name: "CURRENT".to_string(),
        path,
    }))
}

/// A parser of one operator: (name, argument, context).
pub(crate) type Parser = fn(&'static str, &Bson, &ParseContext) -> Result<Expression>;

/// Every family's operator table.
const FAMILIES: [&[(&str, Parser)]; 13] = [
    arithmetic::OPS,
    comparison::OPS,
    boolean::OPS,
    conditional::OPS,
    string::OPS,
    array::OPS,
    set::OPS,
    types::OPS,
    date::OPS,
    object::OPS,
    variables::OPS,
    meta::OPS,
    random::OPS,
];

/// Looks an operator up in every family's table.
fn parse_operator(name: &str, arg: &Bson, ctx: &ParseContext) -> Result<Expression> {
    for table in FAMILIES {
        if let Some((n, p)) = table.iter().find(|(n, _)| *n == name) {
            return p(n, arg, ctx);
        }
    }
    Err(Error::new(
        ErrorCode::InvalidPipelineOperator,
        format!("Unrecognized expression '{name}'"),
    ))
}

/// All operator names this crate knows (for `$project` to tell operators from fields).
pub fn is_expression_name(name: &str) -> bool {
    FAMILIES.iter().any(|t| t.iter().any(|(n, _)| *n == name))
}

// ---- argument-list helpers ----------------------------------------------------------------

/// `parseArguments`: an array is the argument list, anything else one argument.
pub(crate) fn parse_args(arg: &Bson, ctx: &ParseContext) -> Result<Vec<Expression>> {
    match arg {
        Bson::Array(a) => a.iter().map(|e| Expression::parse(e, ctx)).collect(),
        other => Ok(vec![Expression::parse(other, ctx)?]),
    }
}

/// An operator taking exactly `n` arguments (error Location16020 otherwise).
pub(crate) fn fixed(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
    n: usize,
    f: NaryFn,
) -> Result<Expression> {
    let args = parse_args(arg, ctx)?;
    if args.len() != n {
        return Err(err(
            16020,
            format!(
                "Expression {name} takes exactly {n} arguments. {} were passed in.",
                args.len()
            ),
        ));
    }
    Ok(Expression::op(Nary { name, args, f }))
}

/// An operator taking between `min` and `max` arguments (Location28667 otherwise).
pub(crate) fn ranged(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
    min: usize,
    max: usize,
    f: NaryFn,
) -> Result<Expression> {
    let args = parse_args(arg, ctx)?;
    if args.len() < min || args.len() > max {
        return Err(err(
            28667,
            format!(
                "Expression {name} takes at least {min} arguments, and at most {max}, but {} were passed in.",
                args.len()
            ),
        ));
    }
    Ok(Expression::op(Nary { name, args, f }))
}

/// An operator taking any number of arguments.
pub(crate) fn variadic(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
    f: NaryFn,
) -> Result<Expression> {
    let args = parse_args(arg, ctx)?;
    Ok(Expression::op(Nary { name, args, f }))
}

/// Reads the named arguments of an object-form operator: `allowed` lists the accepted names
/// in slot order; returns the raw values per slot.
pub(crate) fn named_raw<'a>(
    arg: &'a Bson,
    allowed: &[&'static str],
    not_object: impl FnOnce() -> Error,
    unknown: impl Fn(&str) -> Error,
) -> Result<Vec<Option<&'a Bson>>> {
    let Bson::Document(d) = arg else {
        return Err(not_object());
    };
    let mut out = vec![None; allowed.len()];
    for (k, v) in d {
        match allowed.iter().position(|a| a == k) {
            Some(i) => out[i] = Some(v),
            None => return Err(unknown(k)),
        }
    }
    Ok(out)
}

/// Builds a [`Named`] operator from raw slots, parsing each present one.
pub(crate) fn named_from(
    name: &'static str,
    allowed: &[&'static str],
    raw: &[Option<&Bson>],
    ctx: &ParseContext,
    f: NamedFn,
) -> Result<Expression> {
    let mut fields = Vec::with_capacity(allowed.len());
    for (k, v) in allowed.iter().zip(raw) {
        let e = match v {
            Some(v) => Some(Expression::parse(v, ctx)?),
            None => None,
        };
        fields.push((*k, e));
    }
    Ok(Expression::op(Named { name, fields, f }))
}

/// A printed document with repeated names shown as sent (`a` instead of `a<MARK>1`).
fn strip_repetition_marks(shown: &str) -> String {
    let mut out = String::with_capacity(shown.len());
    let mut chars = shown.chars().peekable();
    while let Some(c) = chars.next() {
        if c == nidus_common::repeated::MARK {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}
