//! Generators: documents with nested arrays, and filter templates resolved against the
//! document under test.
//!
//! A template's operands and paths are indexes into what the document offers ([`Pool`],
//! [`Scope`]), so documents and templates are generated (and shrunk) independently while
//! the resolved predicates still often hold.

use super::reference::{as_document, elements, values_at};
use super::{Clause, Cmp, Concrete, Filter, Form, Op};
use bson::{Bson, Document};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// Top-level paths: plain, dotted, and with numeric components.
const PATHS: &[&str] = &["a", "a.b", "a.b.c", "a.0", "a.0.b", "a.1.b", "b", "c.b"];
/// Paths in `$elemMatch`'s object form, relative to an array element.
const ELEMENT_PATHS: &[&str] = &["b", "c", "0", "1", "b.c", "0.b"];
/// Field names inside embedded documents: the ones the paths use, numeric ones included.
const NESTED_FIELDS: &[&str] = &["b", "c", "0", "1"];
const TYPE_ALIASES: &[&str] = &[
    "double", "string", "object", "array", "bool", "null", "int", "long", "number",
];

/// A filter whose operands and paths are picked from the document under test.
#[derive(Debug, Clone)]
pub struct Template;

impl Form for Template {
    type Value = Arg;
    type Size = SizeArg;
    type Type = TypeArg;
    type Path = PathArg;
}

#[derive(Debug, Clone)]
pub enum Arg {
    Lit(Bson),
    /// The n-th value of the pool.
    Pick(usize),
    /// Next to the n-th number, string or boolean of the pool: above it, or below it.
    Near(usize, bool),
}

#[derive(Debug, Clone)]
pub enum SizeArg {
    Lit(i32),
    /// The length of the n-th array of the pool.
    LengthOf(usize),
}

#[derive(Debug, Clone)]
pub enum TypeArg {
    Alias(&'static str),
    /// The type of the n-th value of the pool ("number" for a number, if asked).
    TypeOf(usize, bool),
}

#[derive(Debug, Clone)]
pub enum PathArg {
    Any(usize),
    /// The n-th of the paths that reach some value.
    Reaching(usize),
    /// The n-th of the paths that reach an array.
    HoldingArray(usize),
}

// ---------------------------------------------------------------------------------------
// Resolution.

/// The documents a filter's paths start from (the document under test, or the elements an
/// `$elemMatch` object filter sees) and the paths it may use.
struct Scope {
    docs: Vec<Document>,
    paths: &'static [&'static str],
}

impl Scope {
    fn path(&self, arg: &PathArg) -> String {
        let reaching = |n: usize, wanted: &dyn Fn(&Bson) -> bool| {
            let ok: Vec<&str> = self
                .paths
                .iter()
                .copied()
                .filter(|p| {
                    self.docs
                        .iter()
                        .any(|d| values_at(d, p, false).into_iter().flatten().any(wanted))
                })
                .collect();
            match ok.len() {
                0 => self.paths[n % self.paths.len()],
                len => ok[n % len],
            }
        };
        let path = match arg {
            PathArg::Any(n) => self.paths[n % self.paths.len()],
            PathArg::Reaching(n) => reaching(*n, &|_| true),
            PathArg::HoldingArray(n) => reaching(*n, &|v| matches!(v, Bson::Array(_))),
        };
        path.to_string()
    }
}

/// The operands for the predicates at one path: the values the path reaches (twice, to
/// weigh more) and everything inside them; just null when it reaches nothing.
struct Pool(Vec<Bson>);

impl Pool {
    fn at(scope: &Scope, path: &str) -> Pool {
        fn with_descendants(v: &Bson, out: &mut Vec<Bson>) {
            out.push(v.clone());
            match v {
                Bson::Document(d) => d.values().for_each(|v| with_descendants(v, out)),
                Bson::Array(a) => a.iter().for_each(|v| with_descendants(v, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for doc in &scope.docs {
            let found: Vec<&Bson> = values_at(doc, path, true).into_iter().flatten().collect();
            out.extend(found.iter().map(|v| (*v).clone()));
            found
                .into_iter()
                .for_each(|v| with_descendants(v, &mut out));
        }
        if out.is_empty() {
            out.push(Bson::Null);
        }
        Pool(out)
    }

    fn pick(&self, n: usize) -> &Bson {
        &self.0[n % self.0.len()]
    }

    fn value(&self, arg: &Arg) -> Bson {
        match arg {
            Arg::Lit(v) => v.clone(),
            Arg::Pick(n) => self.pick(*n).clone(),
            Arg::Near(n, up) => {
                let ordered: Vec<&Bson> = self
                    .0
                    .iter()
                    .filter(|v| {
                        matches!(
                            v,
                            Bson::Int32(_)
                                | Bson::Int64(_)
                                | Bson::Double(_)
                                | Bson::String(_)
                                | Bson::Boolean(_)
                        )
                    })
                    .collect();
                match ordered.len() {
                    0 => self.pick(*n).clone(),
                    len => neighbour(ordered[n % len], *up),
                }
            }
        }
    }

    fn size(&self, arg: &SizeArg) -> i32 {
        match arg {
            SizeArg::Lit(n) => *n,
            SizeArg::LengthOf(n) => {
                let lengths: Vec<usize> = self
                    .0
                    .iter()
                    .filter_map(|v| match v {
                        Bson::Array(a) => Some(a.len()),
                        _ => None,
                    })
                    .collect();
                let len = match lengths.len() {
                    0 => n % 4,
                    count => lengths[n % count],
                };
                i32::try_from(len).unwrap_or(i32::MAX)
            }
        }
    }

    fn type_alias(&self, arg: &TypeArg) -> &'static str {
        match arg {
            TypeArg::Alias(a) => a,
            TypeArg::TypeOf(n, number) => match self.pick(*n) {
                Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) if *number => "number",
                Bson::Int32(_) => "int",
                Bson::Int64(_) => "long",
                Bson::Double(_) => "double",
                Bson::String(_) => "string",
                Bson::Document(_) => "object",
                Bson::Array(_) => "array",
                Bson::Boolean(_) => "bool",
                _ => "null",
            },
        }
    }

    /// What an `$elemMatch` object filter sees: the documents and arrays inside the arrays
    /// of the pool.
    fn element_scope(&self) -> Scope {
        Scope {
            docs: self
                .0
                .iter()
                .flat_map(elements)
                .filter_map(as_document)
                .collect(),
            paths: ELEMENT_PATHS,
        }
    }
}

/// A value just above or below `v` in its type bracket.
fn neighbour(v: &Bson, up: bool) -> Bson {
    let step = if up { 1 } else { -1 };
    match v {
        Bson::Int32(n) => Bson::Int32(n + step),
        Bson::Int64(n) => Bson::Int64(n + i64::from(step)),
        Bson::Double(d) => Bson::Double(d + f64::from(step) / 2.0),
        Bson::String(s) if s.is_empty() => Bson::String("x".into()),
        Bson::String(_) => Bson::String(if up { "y" } else { "" }.into()),
        Bson::Boolean(_) => Bson::Boolean(up),
        other => other.clone(),
    }
}

/// The filter a template stands for on `doc`.
pub fn resolve(template: &Filter<Template>, doc: &Document) -> Filter<Concrete> {
    let scope = Scope {
        docs: vec![doc.clone()],
        paths: PATHS,
    };
    resolve_filter(template, &scope)
}

fn resolve_filter(t: &Filter<Template>, scope: &Scope) -> Filter<Concrete> {
    let mut out: Vec<Clause<Concrete>> = Vec::new();
    for c in &t.0 {
        let c = resolve_clause(c, scope);
        if out.iter().all(|o| o.key() != c.key()) {
            out.push(c);
        }
    }
    Filter(out)
}

fn resolve_clause(c: &Clause<Template>, scope: &Scope) -> Clause<Concrete> {
    let filters = |fs: &[Filter<Template>]| fs.iter().map(|f| resolve_filter(f, scope)).collect();
    match c {
        Clause::Implicit(p, v) => {
            let path = scope.path(p);
            let pool = Pool::at(scope, &path);
            Clause::Implicit(path, pool.value(v))
        }
        Clause::Ops(p, ops) => {
            let path = scope.path(p);
            let pool = Pool::at(scope, &path);
            Clause::Ops(path, resolve_ops(ops, &pool))
        }
        Clause::And(fs) => Clause::And(filters(fs)),
        Clause::Or(fs) => Clause::Or(filters(fs)),
        Clause::Nor(fs) => Clause::Nor(filters(fs)),
    }
}

/// The operators of one operator document, names made distinct (the first one kept).
fn resolve_ops(ops: &[Op<Template>], pool: &Pool) -> Vec<Op<Concrete>> {
    let mut out: Vec<Op<Concrete>> = Vec::new();
    for op in ops {
        if out.iter().all(|o| o.name() != op.name()) {
            out.push(resolve_op(op, pool));
        }
    }
    out
}

fn resolve_op(op: &Op<Template>, pool: &Pool) -> Op<Concrete> {
    let values = |vs: &[Arg]| vs.iter().map(|v| pool.value(v)).collect();
    match op {
        Op::Eq(v) => Op::Eq(pool.value(v)),
        Op::Ne(v) => Op::Ne(pool.value(v)),
        Op::Cmp(c, v) => Op::Cmp(*c, pool.value(v)),
        Op::In(vs) => Op::In(values(vs)),
        Op::Nin(vs) => Op::Nin(values(vs)),
        Op::Exists(b) => Op::Exists(*b),
        Op::Size(s) => Op::Size(pool.size(s)),
        Op::Type(t) => Op::Type(pool.type_alias(t)),
        Op::All(vs) => Op::All(values(vs)),
        Op::AllElemMatch(ems) => {
            Op::AllElemMatch(ems.iter().map(|e| resolve_op(e, pool)).collect())
        }
        Op::ElemMatchValue(ops) => Op::ElemMatchValue(resolve_ops(ops, pool)),
        Op::ElemMatchObject(f) => Op::ElemMatchObject(resolve_filter(f, &pool.element_scope())),
        Op::Not(ops) => Op::Not(resolve_ops(ops, pool)),
    }
}

// ---------------------------------------------------------------------------------------
// Documents.

/// Small numbers of the three numeric types (equal values across types), a non-integral
/// double, NaN, short strings, null and booleans.
fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        6 => (-1i32..=2, 0u8..3).prop_map(|(n, t)| match t {
            0 => Bson::Int32(n),
            1 => Bson::Int64(n.into()),
            _ => Bson::Double(n.into()),
        }),
        1 => Just(Bson::Double(0.5)),
        1 => Just(Bson::Double(f64::NAN)),
        3 => select(vec!["", "x", "y"]).prop_map(|s| Bson::String(s.to_string())),
        3 => Just(Bson::Null),
        2 => any::<bool>().prop_map(Bson::Boolean),
    ]
}

/// Scalars, documents and arrays (of arrays, of documents, empty) nested up to `depth`.
fn value(depth: u32) -> BoxedStrategy<Bson> {
    if depth == 0 {
        return scalar().boxed();
    }
    prop_oneof![1 => scalar().boxed(), 1 => container(depth)].boxed()
}

/// An array or a document of values nested up to `depth - 1`, rarely empty.
fn container(depth: u32) -> BoxedStrategy<Bson> {
    let elements = prop_oneof![1 => Just(Vec::new()), 4 => vec(value(depth - 1), 1..=3)];
    let fields = prop_oneof![
        1 => Just(Vec::new()),
        4 => vec((select(NESTED_FIELDS), value(depth - 1)), 1..=3),
    ];
    prop_oneof![
        elements.prop_map(Bson::Array),
        fields.prop_map(|kvs| {
            let mut d = Document::new();
            for (k, v) in kvs {
                d.entry(k.to_string()).or_insert(v);
            }
            Bson::Document(d)
        }),
    ]
    .boxed()
}

/// A document with fields a, b, c, each possibly missing; "a", which most paths start with,
/// is usually present and usually an array or a document (nesting three levels).
pub fn document() -> impl Strategy<Value = Document> {
    let a = prop_oneof![1 => scalar().boxed(), 4 => container(3)];
    (
        proptest::option::weighted(0.9, a),
        proptest::option::of(value(2)),
        proptest::option::of(value(2)),
    )
        .prop_map(|(a, b, c)| {
            [("a", a), ("b", b), ("c", c)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect()
        })
}

// ---------------------------------------------------------------------------------------
// Filter templates.

fn index() -> impl Strategy<Value = usize> {
    0..64usize
}

fn arg() -> BoxedStrategy<Arg> {
    prop_oneof![
        2 => scalar().prop_map(Arg::Lit),
        1 => value(1).prop_map(Arg::Lit),
        5 => index().prop_map(Arg::Pick),
    ]
    .boxed()
}

/// A comparison bound: usually next to a value found.
fn bound() -> BoxedStrategy<Arg> {
    prop_oneof![
        1 => arg(),
        2 => (index(), any::<bool>()).prop_map(|(n, up)| Arg::Near(n, up)),
    ]
    .boxed()
}

fn cmp() -> impl Strategy<Value = Cmp> {
    select(vec![Cmp::Gt, Cmp::Gte, Cmp::Lt, Cmp::Lte])
}

fn size_arg() -> impl Strategy<Value = SizeArg> {
    prop_oneof![
        (0..=3i32).prop_map(SizeArg::Lit),
        index().prop_map(SizeArg::LengthOf),
    ]
}

fn type_arg() -> impl Strategy<Value = TypeArg> {
    prop_oneof![
        select(TYPE_ALIASES).prop_map(TypeArg::Alias),
        (index(), any::<bool>()).prop_map(|(n, number)| TypeArg::TypeOf(n, number)),
    ]
}

fn path_arg() -> impl Strategy<Value = PathArg> {
    prop_oneof![
        3 => index().prop_map(PathArg::Reaching),
        1 => index().prop_map(PathArg::Any),
    ]
}

/// Operators without sub-operators.
fn simple_op() -> BoxedStrategy<Op<Template>> {
    let list = || vec(arg(), 0..=3);
    prop_oneof![
        3 => arg().prop_map(Op::Eq),
        2 => arg().prop_map(Op::Ne),
        4 => (cmp(), bound()).prop_map(|(c, x)| Op::Cmp(c, x)),
        2 => list().prop_map(Op::In),
        2 => list().prop_map(Op::Nin),
        2 => any::<bool>().prop_map(Op::Exists),
        2 => size_arg().prop_map(Op::Size),
        2 => type_arg().prop_map(Op::Type),
        2 => list().prop_map(Op::All),
    ]
    .boxed()
}

/// The operators of an operator document: 1 to `max`.
fn op_list(
    op: BoxedStrategy<Op<Template>>,
    max: usize,
) -> impl Strategy<Value = Vec<Op<Template>>> {
    vec(op, 1..=max)
}

/// `$elemMatch` in either form, its operators or filter nesting `depth` levels.
fn elem_match(depth: u32) -> BoxedStrategy<Op<Template>> {
    prop_oneof![
        op_list(op(depth), 2).prop_map(Op::ElemMatchValue),
        filter(depth, 2).prop_map(Op::ElemMatchObject),
    ]
    .boxed()
}

/// Operators, `$elemMatch`, `$all` of `$elemMatch` and `$not` nesting `depth` levels.
fn op(depth: u32) -> BoxedStrategy<Op<Template>> {
    if depth == 0 {
        return simple_op();
    }
    prop_oneof![
        8 => simple_op(),
        2 => elem_match(depth - 1),
        1 => vec(elem_match(depth - 1), 1..=2).prop_map(Op::AllElemMatch),
        2 => op_list(op(depth - 1), 2).prop_map(Op::Not),
    ]
    .boxed()
}

/// A filter of up to `max_clauses` clauses whose `$and/$or/$nor` and operators nest `depth`
/// levels (its paths come from the scope it is resolved in).
pub fn filter(depth: u32, max_clauses: usize) -> BoxedStrategy<Filter<Template>> {
    let field_clause = prop_oneof![
        1 => (path_arg(), arg()).prop_map(|(p, v)| Clause::Implicit(p, v)),
        3 => (path_arg(), op_list(op(depth), 3)).prop_map(|(p, ops)| Clause::Ops(p, ops)),
    ];
    let clause = if depth == 0 {
        field_clause.boxed()
    } else {
        let subs = || vec(filter(depth - 1, max_clauses), 1..=3);
        prop_oneof![
            4 => field_clause,
            1 => subs().prop_map(Clause::And),
            1 => subs().prop_map(Clause::Or),
            1 => subs().prop_map(Clause::Nor),
        ]
        .boxed()
    };
    vec(clause, 0..=max_clauses).prop_map(Filter).boxed()
}

/// One field predicate `{path: {op}}` or `{path: value}`, the operator nesting one level.
pub fn leaf_filter() -> impl Strategy<Value = Filter<Template>> {
    let clause = prop_oneof![
        1 => (path_arg(), arg()).prop_map(|(p, v)| Clause::Implicit(p, v)),
        4 => (path_arg(), op(1)).prop_map(|(p, op)| Clause::Ops(p, vec![op])),
    ];
    clause.prop_map(|c| Filter(vec![c]))
}

/// One array operator (`$elemMatch` in both forms, `$all`, `$size`), usually on a path that
/// holds an array.
pub fn array_op_filter() -> impl Strategy<Value = Filter<Template>> {
    let path = prop_oneof![
        4 => index().prop_map(PathArg::HoldingArray),
        1 => index().prop_map(PathArg::Any),
    ];
    let op = prop_oneof![
        3 => elem_match(0),
        1 => vec(elem_match(0), 1..=2).prop_map(Op::AllElemMatch),
        1 => vec(arg(), 0..=3).prop_map(Op::All),
        1 => size_arg().prop_map(Op::Size),
    ];
    (path, op).prop_map(|(p, op)| Filter(vec![Clause::Ops(p, vec![op])]))
}
