//! Projections (MongoDB 4.4+ semantics), shared by `find`/`findAndModify` and the
//! aggregation `$project`/`$unset` stages: inclusion and exclusion of dotted paths (applied
//! through arrays of documents), `_id` included by default, computed fields (any aggregation
//! expression, evaluated with the whole document as `$$ROOT`/`$$CURRENT`), `$meta`, and for
//! find only (see [`Policy`]) `$slice`, `$elemMatch` and the positional `field.$`.
//!
//! [`Projection::parse`] builds a tree of [`PNode`]s with MongoDB's parse errors (path
//! collisions 31249/31250, mixed inclusion/exclusion 31253/31254, ...); [`apply`] walks a
//! `&RawDocument` against that tree.

pub mod add_fields;
pub mod apply;
pub mod replace_root;

#[cfg(test)]
mod tests;

use crate::matcher::Matcher;
use bson::{doc, Bson, Document};
use nidus_common::{shell, Error, ErrorCode, Result};
use nidus_expr::{Bind, Bindings, Expression, LetScope, ParseContext};
use std::sync::Arc;

/// Which projection language is parsed: find's (with `$slice`, `$elemMatch`, positional
/// `.$`) or aggregation's `$project` (where those names are expressions or invalid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    Find,
    Aggregate,
}

/// A node of the projection tree.
#[derive(Debug, Clone)]
pub enum PNode {
    Include,
    Exclude,
    /// A computed field (an expression; `$meta` ones do not make the projection an inclusion).
    Computed(Expression),
    /// `{a: {$slice: ...}}`: `skip` None for the single-number form.
    Slice {
        skip: Option<i32>,
        limit: i32,
    },
    /// `{a: {$elemMatch: ...}}`: the matcher is `{a: {$elemMatch: ...}}`.
    ElemMatch(Box<Matcher>),
    /// `a.$`: the element of the array at `a` that the query matched.
    Positional,
    Inner(Vec<(String, PNode)>),
}

impl PNode {
    fn has_computed(&self) -> bool {
        match self {
            PNode::Computed(_) => true,
            PNode::Inner(children) => children.iter().any(|(_, n)| n.has_computed()),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inclusion,
    Exclusion,
}

/// A parsed find projection.
#[derive(Debug, Clone)]
pub struct Projection {
    root: Vec<(String, PNode)>,
    kind: Kind,
    spec: Document,
    has_positional: bool,
    has_elem_match: bool,
    has_slice: bool,
    has_computed: bool,
    has_dotted: bool,
    /// The command's `let` values and `$$NOW` (computed fields only).
    bindings: Option<Arc<Bindings>>,
}

struct Ctx<'a> {
    policy: Policy,
    exprs: &'a ParseContext,
    kind: Option<Kind>,
    id_specified: bool,
    id_included: bool,
    id_excluded: bool,
    has_positional: bool,
    has_elem_match: bool,
    has_slice: bool,
    has_computed: bool,
    has_dotted: bool,
    /// A `$text` query provides `{$meta: "textScore"}`.
    text_score: bool,
}

fn err(code: i32, msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::from_code(code), msg)
}

impl Projection {
    /// Parses a find projection document.
    pub fn parse(spec: &Document) -> Result<Projection> {
        Self::parse_in_context(spec, Policy::Find, &ParseContext::new())
    }

    /// Parses a projection under `policy` in a command's scope (its `let` variables and
    /// `$$NOW`).
    pub fn parse_with(spec: &Document, policy: Policy, scope: &LetScope) -> Result<Projection> {
        let mut p = Self::parse_in_context(spec, policy, scope.parse_context())?;
        p.bindings = Some(scope.bindings().clone());
        Ok(p)
    }

    /// Parses in an expression scope whose values the caller binds at apply time (see
    /// [`Projection::apply_bound`]).
    pub fn parse_in_context(
        spec: &Document,
        policy: Policy,
        exprs: &ParseContext,
    ) -> Result<Projection> {
        Self::parse_in_context_with(spec, policy, exprs, false)
    }

    /// Parses in the scope of a `$text` query, where `{$meta: "textScore"}` is available.
    pub fn parse_with_text_score(
        spec: &Document,
        policy: Policy,
        scope: &LetScope,
    ) -> Result<Projection> {
        let mut p = Self::parse_in_context_with(spec, policy, scope.parse_context(), true)?;
        p.bindings = Some(scope.bindings().clone());
        Ok(p)
    }

    /// As [`Projection::parse_in_context`], letting `{$meta: "textScore"}` through: a
    /// pipeline's `$project` moved into a `$text` query's find plan reads the score there
    /// (the pipeline refuses it anywhere else).
    pub fn parse_in_context_text_score(
        spec: &Document,
        policy: Policy,
        exprs: &ParseContext,
    ) -> Result<Projection> {
        Self::parse_in_context_with(spec, policy, exprs, true)
    }

    fn parse_in_context_with(
        spec: &Document,
        policy: Policy,
        exprs: &ParseContext,
        text_score: bool,
    ) -> Result<Projection> {
        let mut ctx = Ctx {
            text_score,
            policy,
            exprs,
            kind: None,
            id_specified: false,
            id_included: false,
            id_excluded: false,
            has_positional: false,
            has_elem_match: false,
            has_slice: false,
            has_computed: false,
            has_dotted: false,
        };
        if policy == Policy::Aggregate && spec.is_empty() {
            return Err(err(
                51272,
                "projection specification must have at least one field",
            ));
        }
        let mut root: Vec<(String, PNode)> = Vec::new();
        for (k, v) in spec {
            ctx.id_specified |= k == "_id" || k.starts_with("_id.");
            parse_element(&mut ctx, &mut root, k, v, true)?;
        }
        let kind = ctx.kind.unwrap_or_else(|| default_kind(&ctx));
        if kind == Kind::Inclusion && !ctx.id_specified {
            root.insert(0, ("_id".to_string(), PNode::Include));
        }
        if kind == Kind::Exclusion && ctx.id_included {
            root.retain(|(k, _)| k != "_id");
        }
        Ok(Projection {
            root,
            kind,
            spec: spec.clone(),
            has_positional: ctx.has_positional,
            has_elem_match: ctx.has_elem_match,
            has_slice: ctx.has_slice,
            has_computed: ctx.has_computed,
            has_dotted: ctx.has_dotted,
            bindings: None,
        })
    }

    /// The projection document as given.
    pub fn spec(&self) -> &Document {
        &self.spec
    }

    /// True for inclusion projections (only the listed fields, and `_id` unless excluded).
    pub fn is_inclusion(&self) -> bool {
        self.kind == Kind::Inclusion
    }

    /// True for exclusion projections (every field but the listed ones).
    pub fn is_exclusion(&self) -> bool {
        self.kind == Kind::Exclusion
    }

    /// Only top-level inclusions/exclusions, no `$slice`, `$elemMatch`, positional or computed
    /// fields: what explain shows as `PROJECTION_SIMPLE` (otherwise `PROJECTION_DEFAULT`).
    pub fn is_simple(&self) -> bool {
        !self.has_positional
            && !self.has_elem_match
            && !self.has_slice
            && !self.has_computed
            && !self.has_dotted
    }

    /// [`Projection::is_simple`] and an inclusion.
    pub fn is_simple_inclusion(&self) -> bool {
        self.is_simple() && self.is_inclusion()
    }

    /// Whether the projection uses the positional `field.$` (needs the matched index).
    pub fn requires_match_details(&self) -> bool {
        self.has_positional
    }

    pub fn has_elem_match(&self) -> bool {
        self.has_elem_match
    }

    pub fn has_slice(&self) -> bool {
        self.has_slice
    }

    /// Whether a computed field reads a user variable (`$$x`; builtins like `$$ROOT` do not
    /// count): such a projection needs its caller's variable bindings.
    pub fn uses_user_variables(&self) -> bool {
        fn any(children: &[(String, PNode)]) -> bool {
            children.iter().any(|(_, n)| match n {
                PNode::Computed(e) => e
                    .dependencies()
                    .variables
                    .iter()
                    .any(|v| v.0 >= nidus_expr::variables::FIRST_USER),
                PNode::Inner(c) => any(c),
                _ => false,
            })
        }
        any(&self.root)
    }

    /// Whether `_id` is in the output (when the document has one).
    pub fn includes_id(&self) -> bool {
        match self.root.iter().find(|(k, _)| k == "_id") {
            Some((_, PNode::Exclude)) => false,
            Some(_) => true,
            None => self.kind == Kind::Exclusion,
        }
    }

    /// For an inclusion projection without computed fields, positional, `$elemMatch` or
    /// `$slice`: the dotted paths it reads (for covered-query analysis). `None` when the
    /// projection needs the whole document.
    pub fn required_fields(&self) -> Option<Vec<String>> {
        if self.kind != Kind::Inclusion
            || self.has_computed
            || self.has_positional
            || self.has_elem_match
            || self.has_slice
        {
            return None;
        }
        let mut out = Vec::new();
        collect_included(&self.root, "", &mut out);
        Some(out)
    }

    /// Applies the projection (a positional projection fails: see
    /// [`Projection::apply_with_position`]).
    pub fn apply(&self, doc: &bson::RawDocument) -> Result<Document> {
        self.apply_with_position(doc, None)
    }

    /// Applies the projection with the array index the query matched (for `field.$`).
    pub fn apply_with_position(
        &self,
        doc: &bson::RawDocument,
        matched_index: Option<usize>,
    ) -> Result<Document> {
        let binder = nidus_expr::binder(self.bindings.as_deref());
        self.apply_bound(doc, matched_index, binder)
    }

    /// Applies with variables set by `binder` (a pipeline's run-time context).
    pub fn apply_bound(
        &self,
        doc: &bson::RawDocument,
        matched_index: Option<usize>,
        binder: &dyn Bind,
    ) -> Result<Document> {
        self.apply_full(doc, matched_index, binder, None)
    }

    /// Applies to a `$text` query's result with its text score.
    pub fn apply_with_text_score(&self, doc: &bson::RawDocument, score: f64) -> Result<Document> {
        let binder = nidus_expr::binder(self.bindings.as_deref());
        self.apply_full(doc, None, binder, Some(score))
    }

    fn apply_full(
        &self,
        doc: &bson::RawDocument,
        matched_index: Option<usize>,
        binder: &dyn Bind,
        text_score: Option<f64>,
    ) -> Result<Document> {
        let ctx = apply::ApplyCtx {
            root: doc,
            position: matched_index,
            binder,
            text_score,
        };
        match self.kind {
            Kind::Inclusion => apply::include_doc(&self.root, doc, &ctx),
            Kind::Exclusion => apply::exclude_doc(&self.root, doc, &ctx),
        }
    }
}

fn collect_included(children: &[(String, PNode)], prefix: &str, out: &mut Vec<String>) {
    for (k, n) in children {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match n {
            PNode::Include => out.push(path),
            PNode::Inner(c) => collect_included(c, &path, out),
            _ => {}
        }
    }
}

/// MongoDB's `computeProjectionType` for projections with no plain inclusion or exclusion.
fn default_kind(ctx: &Ctx) -> Kind {
    if ctx.has_slice {
        if ctx.id_included {
            Kind::Inclusion
        } else {
            Kind::Exclusion
        }
    } else if ctx.has_elem_match || ctx.id_included {
        Kind::Inclusion
    } else {
        Kind::Exclusion
    }
}

fn set_kind(ctx: &mut Ctx, kind: Kind, field: &str) -> Result<()> {
    match (ctx.kind, kind) {
        (Some(Kind::Exclusion), Kind::Inclusion) => Err(err(
            31253,
            format!("Cannot do inclusion on field {field} in exclusion projection"),
        )),
        (Some(Kind::Inclusion), Kind::Exclusion) => Err(err(
            31254,
            format!("Cannot do exclusion on field {field} in inclusion projection"),
        )),
        _ => {
            ctx.kind = Some(kind);
            Ok(())
        }
    }
}

fn truthy(v: &Bson) -> Option<bool> {
    Some(match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !matches!(
            nidus_doc::number::decode_decimal(d.bytes()),
            nidus_doc::number::Dec::Finite { coef: 0, .. }
        ),
        _ => return None,
    })
}

/// Where the first positional `.$` is: `(begin, end)` in the field name.
fn find_positional(field: &str) -> Option<(usize, usize)> {
    if let Some(i) = field.find(".$.") {
        return Some((i, i + 3));
    }
    if field.ends_with(".$") {
        return Some((field.len() - 2, field.len()));
    }
    (field == "$").then_some((0, 1))
}

fn parse_element(
    ctx: &mut Ctx,
    parent: &mut Vec<(String, PNode)>,
    field: &str,
    v: &Bson,
    at_root: bool,
) -> Result<()> {
    let positional = match ctx.policy {
        Policy::Find => find_positional(field),
        Policy::Aggregate if find_positional(field).is_some() => {
            return Err(err(
                31324,
                "Cannot use positional projection in aggregation projection",
            ))
        }
        Policy::Aggregate => None,
    };
    let is_root_id = at_root && field == "_id";
    if field.contains('.') {
        ctx.has_dotted = true;
    }
    match v {
        Bson::Document(sub) => {
            if positional.is_some() {
                return Err(err(
                    31271,
                    "positional projection cannot be used with an expression or sub object",
                ));
            }
            parse_sub_object(ctx, parent, field, sub, at_root)
        }
        other => match truthy(other) {
            Some(true) => parse_inclusion(ctx, parent, field, positional, is_root_id),
            Some(false) => {
                check_field_path(field)?;
                add_node(parent, field, PNode::Exclude)?;
                if is_root_id {
                    ctx.id_excluded = true;
                    Ok(())
                } else {
                    set_kind(ctx, Kind::Exclusion, field)
                }
            }
            None => {
                if positional.is_some() {
                    return Err(err(
                        31308,
                        "positional projection cannot be used with a literal",
                    ));
                }
                let expr = Expression::parse(other, ctx.exprs)?;
                add_computed(ctx, parent, field, expr, other)
            }
        },
    }
}

fn check_field_path(field: &str) -> Result<()> {
    for part in field.split('.') {
        if part.is_empty() {
            return Err(err(
                15998,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') {
            return Err(err(
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ));
        }
    }
    Ok(())
}

fn add_computed(
    ctx: &mut Ctx,
    parent: &mut Vec<(String, PNode)>,
    field: &str,
    expr: Expression,
    v: &Bson,
) -> Result<()> {
    check_field_path(field)?;
    let meta = expr.dependencies().metadata;
    if meta.contains("textScore") && !ctx.text_score {
        return Err(nidus_expr::meta::text_score_unavailable());
    }
    let is_meta = !meta.is_empty() && matches!(v, Bson::Document(d) if d.contains_key("$meta"));
    add_node(parent, field, PNode::Computed(expr))?;
    ctx.has_computed = true;
    if is_meta {
        // `{$meta: ...}` adds a field to either kind of projection.
        return Ok(());
    }
    if ctx.kind == Some(Kind::Exclusion) {
        return Err(err(
            31310,
            format!(
                "Cannot use an expression {field}: {} in an exclusion projection",
                shell::format(v)
            ),
        ));
    }
    ctx.kind = Some(Kind::Inclusion);
    Ok(())
}

fn parse_inclusion(
    ctx: &mut Ctx,
    parent: &mut Vec<(String, PNode)>,
    field: &str,
    positional: Option<(usize, usize)>,
    is_root_id: bool,
) -> Result<()> {
    match positional {
        None => {
            check_field_path(field)?;
            add_node(parent, field, PNode::Include)?;
            if is_root_id {
                ctx.id_included = true;
            }
        }
        Some((begin, end)) => {
            if ctx.has_positional {
                return Err(err(
                    31276,
                    "Cannot specify more than one positional projection per query.",
                ));
            }
            if ctx.has_elem_match {
                return Err(err(
                    31256,
                    "Cannot specify positional operator and $elemMatch.",
                ));
            }
            if field.ends_with(".$.") {
                return Err(err(31270, "Path cannot end with '.$.'"));
            }
            let rest = &field[end..];
            if find_positional(rest).is_some() || rest.split('.').any(|p| p == "$") {
                return Err(err(
                    31287,
                    format!("Cannot use positional operator twice: {field}"),
                ));
            }
            let prefix = &field[..begin];
            check_field_path(prefix)?;
            add_node(parent, prefix, PNode::Positional)?;
            ctx.has_positional = true;
        }
    }
    if !is_root_id {
        set_kind(ctx, Kind::Inclusion, field)?;
    }
    Ok(())
}

fn parse_sub_object(
    ctx: &mut Ctx,
    parent: &mut Vec<(String, PNode)>,
    field: &str,
    sub: &Document,
    at_root: bool,
) -> Result<()> {
    if let Some((op, arg)) = sub.iter().next().filter(|(k, _)| k.starts_with('$')) {
        return parse_expression(ctx, parent, field, op, arg, sub, at_root);
    }
    if sub.is_empty() {
        return Err(err(
            51270,
            "An empty sub-projection is not a valid value. Found empty object at path",
        ));
    }
    check_field_path(field)?;
    let mut children = Vec::new();
    for (k, v) in sub {
        parse_element(ctx, &mut children, k, v, false)?;
    }
    add_inner(parent, field, children)
}

fn parse_expression(
    ctx: &mut Ctx,
    parent: &mut Vec<(String, PNode)>,
    field: &str,
    op: &str,
    arg: &Bson,
    sub: &Document,
    at_root: bool,
) -> Result<()> {
    check_field_path(field)?;
    match (op, ctx.policy) {
        ("$slice", Policy::Find) if sub.len() == 1 => {
            let node = parse_slice(arg)?;
            add_node(parent, field, node)?;
            ctx.has_slice = true;
            Ok(())
        }
        ("$elemMatch", Policy::Find) if sub.len() == 1 => {
            let Bson::Document(_) = arg else {
                return Err(err(
                    31274,
                    format!(
                        "elemMatch: Invalid argument, object required, but got {}",
                        crate::update::util::type_name(arg)
                    ),
                ));
            };
            if ctx.has_positional {
                return Err(err(
                    31255,
                    "Cannot specify positional operator and $elemMatch.",
                ));
            }
            if field.contains('.') || !at_root {
                return Err(err(
                    31275,
                    "Cannot use $elemMatch projection on a nested field.",
                ));
            }
            let mut filter = Document::new();
            filter.insert(field, doc! {"$elemMatch": arg.clone()});
            let m = Matcher::parse(&filter)?;
            add_node(parent, field, PNode::ElemMatch(Box::new(m)))?;
            ctx.has_elem_match = true;
            Ok(())
        }
        // One `$`-field that names no expression: MongoDB's projection parser reports it
        // as an unknown expression (a `$` name is no field path either).
        _ if sub.len() == 1 && !nidus_expr::is_expression_name(op) => {
            Err(err(31325, format!("Unknown expression {op}")))
        }
        _ => {
            let whole = Bson::Document(sub.clone());
            let expr = Expression::parse_object(sub, ctx.exprs)?;
            add_computed(ctx, parent, field, expr, &whole)
        }
    }
}

fn number_as_i32(v: &Bson) -> Option<i32> {
    let n = match v {
        Bson::Int32(i) => return Some(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(d) => *d,
        Bson::Decimal128(_) => 0.0,
        _ => return None,
    };
    if n.is_nan() {
        return Some(0);
    }
    Some(n.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
}

fn parse_slice(arg: &Bson) -> Result<PNode> {
    if let Some(n) = number_as_i32(arg) {
        return Ok(PNode::Slice {
            skip: None,
            limit: n,
        });
    }
    let Bson::Array(a) = arg else {
        return Err(err(
            31273,
            "$slice only supports numbers and [skip, limit] arrays",
        ));
    };
    if a.len() != 2 {
        return Err(err(
            31272,
            "$slice array argument should be of form [skip, limit]",
        ));
    }
    let type_name = crate::update::util::type_name;
    let skip = number_as_i32(&a[0]).ok_or_else(|| {
        err(
            31257,
            format!(
                "$slice expects the skip argument to be a number, got {}",
                type_name(&a[0])
            ),
        )
    })?;
    let limit = number_as_i32(&a[1]).ok_or_else(|| {
        err(
            31258,
            format!(
                "$slice expects the limit argument to be a number, got {}",
                type_name(&a[1])
            ),
        )
    })?;
    if limit <= 0 {
        return Err(err(
            31259,
            format!("$slice limit must be positive, got {limit}"),
        ));
    }
    Ok(PNode::Slice {
        skip: Some(skip),
        limit,
    })
}

/// Adds `node` at the dotted `path` below `parent` (MongoDB's `addNodeAtPath`).
fn add_node(parent: &mut Vec<(String, PNode)>, path: &str, node: PNode) -> Result<()> {
    add_node_at(parent, path, 0, node)
}

fn add_node_at(
    parent: &mut Vec<(String, PNode)>,
    path: &str,
    start: usize,
    node: PNode,
) -> Result<()> {
    let rest = &path[start..];
    let (head, tail) = match rest.split_once('.') {
        Some((h, t)) => (h, Some(t)),
        None => (rest, None),
    };
    let existing = parent.iter().position(|(k, _)| k == head);
    match (existing, tail) {
        (Some(_), None) => Err(err(31250, format!("Path collision at {path}"))),
        (None, None) => {
            parent.push((head.to_string(), node));
            Ok(())
        }
        (Some(i), Some(tail)) => match &mut parent[i].1 {
            PNode::Inner(children) => add_node_at(children, path, start + head.len() + 1, node),
            _ => Err(err(
                31249,
                format!("Path collision at {path} remaining portion {tail}"),
            )),
        },
        (None, Some(_)) => {
            parent.push((head.to_string(), PNode::Inner(Vec::new())));
            let i = parent.len() - 1;
            match &mut parent[i].1 {
                PNode::Inner(children) => add_node_at(children, path, start + head.len() + 1, node),
                _ => Err(Error::internal("projection tree lost a node")),
            }
        }
    }
}

/// Adds a sub-projection's children at `path` (merging with an existing inner node).
fn add_inner(
    parent: &mut Vec<(String, PNode)>,
    path: &str,
    children: Vec<(String, PNode)>,
) -> Result<()> {
    for (k, n) in children {
        add_node(parent, &format!("{path}.{k}"), n)?;
    }
    Ok(())
}

/// The exclusion projection `$unset: "a"` / `["a", "b.c"]` stands for (`{a: false, ...}`),
/// with MongoDB's errors for other arguments.
pub fn unset_spec(arg: &Bson) -> Result<Document> {
    let fields: Vec<&String> = match arg {
        Bson::String(s) => vec![s],
        Bson::Array(a) if a.is_empty() => {
            return Err(err(
                31119,
                "$unset specification must be a string or an array with at least one field",
            ))
        }
        Bson::Array(a) => a
            .iter()
            .map(|v| match v {
                Bson::String(s) => Ok(s),
                _ => Err(err(
                    31120,
                    "$unset specification must be a string or an array containing only string values",
                )),
            })
            .collect::<Result<_>>()?,
        _ => return Err(err(31002, "$unset specification must be a string or an array")),
    };
    let mut spec = Document::new();
    for f in fields {
        spec.insert(f.clone(), false);
    }
    Ok(spec)
}
