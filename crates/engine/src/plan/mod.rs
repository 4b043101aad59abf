//! The query planner: enumerates index scans for a filter, sort and projection, races them
//! when there are several (MongoDB's multi-planner), and builds the winning stage tree.

pub mod bounds;
pub mod builder;
pub mod cache;
pub mod explain;
pub mod explode;
pub mod geo;
pub mod min_max;
mod multi;
pub mod or;
pub mod partial;

use crate::catalog::IndexMeta;
use bounds::{intersect_ascending, IndexBounds, OrderedIntervalList};
use bson::Document;
use nidus_common::{Error, ErrorCode};
use nidus_query::matcher::serialize::canonical_conjuncts;
use nidus_query::matcher::{ElemMatch, Expr, Leaf, Matcher};
use nidus_query::projection::Projection;
use nidus_query::sort::SortPattern;

pub use multi::{choose_plan, run_cached, CachedRun, TrialOutcome};

/// What the query asks for, parsed.
pub struct Query<'a> {
    pub matcher: &'a Matcher,
    pub sort: Option<&'a SortPattern>,
    pub projection: Option<&'a Projection>,
    /// A count needs no field of the documents.
    pub count: bool,
    /// `returnKey`: the results are the index keys, so an index whose keys also answer the
    /// sort needs no FETCH.
    pub return_key: bool,
    /// The query's collation (None = simple): an index with another collation answers only
    /// predicates that compare no strings, and provides no sort.
    pub collation: Option<&'a nidus_doc::collation::Collation>,
}

/// One indexed access path: which index, its bounds and scan direction, which top-level
/// conjuncts still need a filter, and what the index gives for free.
#[derive(Clone)]
pub struct IndexSolution {
    pub index: IndexMeta,
    pub bounds: IndexBounds,
    pub forward: bool,
    /// Canonical conjuncts (by position) the bounds do not answer exactly.
    pub residual: Vec<usize>,
    pub provides_sort: bool,
    /// No FETCH is needed: the projection reads only key fields and no filter remains.
    pub covered: bool,
    /// Explode for sort: one scan per point combination of `bounds`, merged by SORT_MERGE.
    pub merge_scans: Option<Vec<IndexBounds>>,
    /// Exploding for the sort would have needed too many scans (`maxScansToExplodeReached`).
    pub max_scans_to_explode_reached: bool,
}

/// A predicate on one path found among the top-level conjuncts (or inside a top-level
/// `$elemMatch` object, whose predicates may tighten bounds but never answer it).
struct PathPred<'a> {
    path: String,
    leaf: &'a Leaf,
    negated: bool,
    conjunct: usize,
    /// The `$elemMatch` (by conjunct) this predicate came from.
    elem_match: Option<usize>,
}

fn collect_preds<'a>(conjuncts: &[&'a Expr]) -> Vec<PathPred<'a>> {
    let mut out = Vec::new();
    for (i, e) in conjuncts.iter().enumerate() {
        match e {
            Expr::Path {
                path,
                leaf: Leaf::ElemMatch(ElemMatch::Object(inner)),
            } => {
                for sub in canonical_conjuncts(inner) {
                    if let Expr::Path { path: p, leaf } = sub {
                        if !matches!(leaf, Leaf::ElemMatch(ElemMatch::Object(_))) {
                            out.push(PathPred {
                                path: format!("{}.{}", path.as_str(), p.as_str()),
                                leaf,
                                negated: false,
                                conjunct: i,
                                elem_match: Some(i),
                            });
                        }
                    }
                }
            }
            Expr::Path { path, leaf } => out.push(PathPred {
                path: path.as_str().to_string(),
                leaf,
                negated: false,
                conjunct: i,
                elem_match: None,
            }),
            Expr::Not(inner) => {
                if let Expr::Path { path, leaf } = inner.as_ref() {
                    if matches!(leaf, Leaf::Eq(_) | Leaf::In(_)) {
                        out.push(PathPred {
                            path: path.as_str().to_string(),
                            leaf,
                            negated: true,
                            conjunct: i,
                            elem_match: None,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether two key fields share a path prefix that holds arrays, so their bounds may only be
/// combined when both predicates come from one `$elemMatch`.
fn share_multikey_prefix(ix: &IndexMeta, a: usize, b: usize) -> bool {
    let pa: Vec<&str> = ix.pattern[a].0.split('.').collect();
    let pb: Vec<&str> = ix.pattern[b].0.split('.').collect();
    let mk = ix.multikey_components(a);
    mk.iter()
        .any(|&p| p < pa.len() && p < pb.len() && pa[..=p] == pb[..=p])
}

/// A planning failure as MongoDB reports it from `find`.
pub fn planner_error(code: ErrorCode, msg: &str) -> Error {
    Error::new(
        code,
        format!("error processing query: planner returned error :: caused by :: {msg}"),
    )
}

/// Candidate index solutions for the query, in index order.
pub fn enumerate(indexes: &[IndexMeta], query: &Query, hinted: Option<&str>) -> Vec<IndexSolution> {
    let conjuncts = canonical_conjuncts(query.matcher.expr());
    let preds = collect_preds(&conjuncts);
    let mut out = Vec::new();
    for ix in indexes {
        if let Some(name) = hinted {
            if ix.name != name {
                continue;
            }
        } else if ix.is_hidden() {
            continue;
        }
        // A partial index holds only the documents its filter matches: usable when every
        // document the query matches is among them (or when hinted, as MongoDB does).
        if let (None, Some(filter)) = (hinted, &ix.partial) {
            if !partial::implies(query.matcher.expr(), filter.expr()) {
                continue;
            }
        }
        // A 2dsphere index holds only documents with geometries: it serves a query only
        // through a geo predicate on its geo field (MongoDB's 2dsphere v2+ rule).
        let geo_pred = match (ix.geo, &ix.twod) {
            (Some(g), _) => Some(
                preds
                    .iter()
                    .any(|p| p.path == ix.pattern[g].0 && !p.negated && geo::answers(p.leaf)),
            ),
            // A 2d index likewise holds only documents with points.
            (None, Some(params)) => Some(preds.iter().any(|p| {
                p.path == ix.pattern[0].0
                    && !p.negated
                    && geo::twod_region(p.leaf, params).is_some()
            })),
            (None, None) => None,
        };
        if geo_pred == Some(false) && hinted.is_none() {
            continue;
        }
        let sol = plan_index(ix, &conjuncts, &preds, query);
        let relevant = geo_pred == Some(true)
            || preds.iter().any(|p| {
                p.path == ix.pattern[0].0
                    && if ix.is_hashed_field(0) {
                        !p.negated && hashable(p.leaf)
                    } else {
                        builder::is_indexable(p.leaf)
                    }
                    && collation_allows(ix, p.leaf, query)
                    && !(ix.sparse && matches_missing(p))
            });
        if hinted.is_some() || relevant || (sol.provides_sort && !ix.sparse && query.sort.is_some())
        {
            out.push(sol);
        }
    }
    out
}

/// Whether an index's collation lets its bounds answer `leaf`: with the query's own
/// collation, anything but a regex (whose prefix bounds are binary) on a collated index;
/// with another collation, only comparisons to values holding no string (MongoDB's
/// `QueryPlannerIXSelect` rule for mismatched collators).
fn collation_allows(ix: &IndexMeta, leaf: &Leaf, query: &Query) -> bool {
    let regex = match leaf {
        Leaf::Regex(_) => true,
        Leaf::In(l) => !l.regexes.is_empty(),
        _ => false,
    };
    if ix.collation.as_ref() == query.collation {
        // `$elemMatch` bounds are intersected in binary order (`builder::translate`), which
        // is not a collation's order for strings.
        let elem_match_strings = matches!(leaf, Leaf::ElemMatch(ElemMatch::Value(preds))
            if preds.iter().any(pred_has_string));
        return ix.collation.is_none() || !(regex || elem_match_strings);
    }
    let collatable = |v: &bson::Bson| has_string(v);
    match leaf {
        Leaf::Eq(v) | Leaf::Cmp(_, v) => !collatable(&v.bson),
        Leaf::In(l) => !regex && !l.values.iter().any(|v| collatable(&v.bson)),
        Leaf::Regex(_) | Leaf::ElemMatch(_) => false,
        _ => true,
    }
}

fn pred_has_string(p: &nidus_query::matcher::Pred) -> bool {
    use nidus_query::matcher::Pred;
    match p {
        Pred::Leaf(Leaf::Eq(v) | Leaf::Cmp(_, v)) => has_string(&v.bson),
        Pred::Leaf(Leaf::In(l)) => l.values.iter().any(|v| has_string(&v.bson)),
        Pred::Leaf(_) | Pred::Const(_) => false,
        Pred::Not(p) => pred_has_string(p),
        Pred::And(ps) => ps.iter().any(pred_has_string),
    }
}

fn has_string(v: &bson::Bson) -> bool {
    match v {
        bson::Bson::String(_) | bson::Bson::Symbol(_) => true,
        bson::Bson::Document(d) => d.values().any(has_string),
        bson::Bson::Array(a) => a.iter().any(has_string),
        _ => false,
    }
}

/// Predicates a hashed field answers through its index: equality and `$in` without regexes
/// (the hash keeps no order, so no range can use it).
fn hashable(leaf: &Leaf) -> bool {
    match leaf {
        Leaf::Eq(v) => !matches!(v.bson, bson::Bson::RegularExpression(_)),
        Leaf::In(l) => l.regexes.is_empty(),
        _ => false,
    }
}

/// Point bounds on a hashed field: the hash of each value (collated first on a collated
/// index). Never exact: distinct values may share a hash (a hashed index stores 2.3 and 2 as
/// one key), so the FETCH filter decides.
fn hashed_points(
    leaf: &Leaf,
    collation: Option<&nidus_doc::collation::Collation>,
) -> builder::Translated {
    let values: Vec<&bson::Bson> = match leaf {
        Leaf::Eq(v) => vec![&v.bson],
        Leaf::In(l) => l.values.iter().map(|v| &v.bson).collect(),
        _ => Vec::new(),
    };
    let mut intervals: Vec<bounds::Interval> = values
        .into_iter()
        .map(|v| {
            let stored = match collation {
                Some(c) => crate::index::collate_value(v, c),
                None => v.clone(),
            };
            bounds::Interval::point(crate::index::hashed_key_value(&stored))
        })
        .collect();
    intervals.sort_by(|a, b| nidus_doc::compare::cmp_bson(&a.start, &b.start));
    intervals.dedup_by(|a, b| nidus_doc::compare::cmp_bson(&a.start, &b.start).is_eq());
    builder::Translated {
        intervals,
        exact: false,
    }
}

/// Bounds over a collated index compare collation keys: every string endpoint becomes one.
fn collate_intervals(intervals: &mut [bounds::Interval], c: &nidus_doc::collation::Collation) {
    for iv in intervals {
        iv.start = crate::index::collate_value(&iv.start, c);
        iv.end = crate::index::collate_value(&iv.end, c);
    }
}

/// Predicates a missing field satisfies cannot use a sparse index (`{$eq: null}`, a `$in`
/// holding null, `{$lt: MaxKey}`, `{$gte: MinKey}`, negations).
fn matches_missing(p: &PathPred) -> bool {
    p.negated || p.leaf.matches_single(None)
}

fn plan_index(
    ix: &IndexMeta,
    conjuncts: &[&Expr],
    preds: &[PathPred],
    query: &Query,
) -> IndexSolution {
    let mut exact_conjuncts = vec![false; conjuncts.len()];
    let mut inexact_conjuncts = vec![false; conjuncts.len()];
    let mut fields = Vec::with_capacity(ix.pattern.len());
    // Per field, the `$elemMatch` that gave it bounds (None = a plain predicate).
    let mut sources: Vec<Option<Option<usize>>> = Vec::with_capacity(ix.pattern.len());
    for (fi, (field, desc)) in ix.pattern.iter().enumerate() {
        let field_multikey = !ix.multikey_components(fi).is_empty();
        let mut acc: Option<Vec<bounds::Interval>> = None;
        let mut source: Option<Option<usize>> = None;
        let hashed_field = ix.is_hashed_field(fi);
        let geo_field = ix.is_geo_field(fi);
        let twod = ix.twod.as_deref();
        // A 2d index's other fields hold arrays of a document's values (never exploded):
        // no bounds on them, their predicates stay in FETCH's filter.
        if twod.is_some() && fi > 0 {
            sources.push(None);
            fields.push(OrderedIntervalList::all(field, *desc));
            continue;
        }
        for p in preds.iter().filter(|p| {
            &p.path == field
                && if let Some(params) = twod {
                    !p.negated && geo::twod_region(p.leaf, params).is_some()
                } else if geo_field {
                    !p.negated && geo::answers(p.leaf)
                } else if hashed_field {
                    !p.negated && hashable(p.leaf)
                } else {
                    builder::is_indexable_or_negated(p.leaf, p.negated)
                }
                && collation_allows(ix, p.leaf, query)
        }) {
            // A plain predicate cannot combine with bounds of another field under the same array.
            let blocked = (0..fi).any(|other| {
                matches!(sources[other], Some(s) if s != p.elem_match || p.elem_match.is_none())
                    && share_multikey_prefix(ix, other, fi)
            });
            if blocked {
                continue;
            }
            let t = if let Some(params) = twod {
                geo::twod_translate(p.leaf, params)
            } else if geo_field {
                geo::translate(p.leaf)
            } else if hashed_field {
                hashed_points(p.leaf, ix.collation.as_ref())
            } else {
                let mut t = builder::translate(p.leaf, p.negated);
                // A collated index orders strings by their collation keys: endpoints become
                // keys before intervals are sorted, merged and intersected (in binary order
                // "B" < "a", under a case-insensitive collation "a" < "B").
                if let Some(c) = &ix.collation {
                    collate_intervals(&mut t.intervals, c);
                }
                t
            };
            let asc = OrderedIntervalList::from_ascending(field, t.intervals, false).intervals;
            let combined = match &acc {
                None => asc,
                // Two predicates on one multikey field may be met by different elements.
                Some(_) if field_multikey && p.elem_match.is_none() => {
                    inexact_conjuncts[p.conjunct] = true;
                    continue;
                }
                Some(prev) => intersect_ascending(prev, &asc),
            };
            acc = Some(combined);
            source = Some(p.elem_match);
            let exact = t.exact && p.elem_match.is_none() && !(p.negated && field_multikey);
            if exact {
                exact_conjuncts[p.conjunct] = true;
            } else {
                inexact_conjuncts[p.conjunct] = true;
            }
        }
        sources.push(source);
        fields.push(match acc {
            Some(ivs) => OrderedIntervalList::from_ascending(field, ivs, *desc),
            None => OrderedIntervalList::all(field, *desc),
        });
    }
    let residual: Vec<usize> = (0..conjuncts.len())
        .filter(|&i| !exact_conjuncts[i] || inexact_conjuncts[i])
        .collect();
    let bounds = IndexBounds { fields };
    let same_collation = ix.collation.as_ref() == query.collation;
    let (provides_sort, forward) = match query.sort {
        // A 2d index orders by GeoHash, then by arrays of values: no sort at all.
        Some(s) if ix.twod.is_some() && !s.fields.is_empty() => (false, true),
        Some(_) if !same_collation => (false, true),
        Some(s) if !s.fields.is_empty() => provided_sort(ix, &bounds, s),
        _ => (true, true),
    };
    // Collation keys cannot give the strings back: a collated index covers only counts.
    // Hashes cannot either, nor can they feed a sort on the hashed field.
    let sorts_on_hash = ix.hashed.is_some_and(|h| {
        query
            .sort
            .is_some_and(|s| s.fields.iter().any(|f| f.path.as_str() == ix.pattern[h].0))
    });
    let key_only = query.return_key
        && ix.collation.is_none()
        && (provides_sort
            || query.sort.is_none_or(|s| {
                s.fields
                    .iter()
                    .all(|f| plain_key_field(ix, f.path.as_str()))
            }));
    let covered = residual.is_empty()
        && !sorts_on_hash
        && ix.twod.is_none()
        && (query.count
            || key_only
            || (ix.collation.is_none() && is_covered(ix, query.projection)));
    let mut sol = IndexSolution {
        index: ix.clone(),
        bounds,
        forward,
        residual,
        provides_sort,
        covered,
        merge_scans: None,
        max_scans_to_explode_reached: false,
    };
    if let (false, Some(sort), true, None) =
        (sol.provides_sort, query.sort, same_collation, &ix.twod)
    {
        match explode::explode_for_sort(ix, &sol.bounds, sort) {
            explode::Explosion::Scans { bounds, forward } => {
                sol.merge_scans = Some(bounds);
                sol.forward = forward;
                sol.provides_sort = true;
            }
            explode::Explosion::TooManyScans => sol.max_scans_to_explode_reached = true,
            explode::Explosion::No => {}
        }
    }
    sol
}

/// The direction (true = forward) in which a scan of the whole index returns `sort`'s order.
pub fn whole_index_sort(ix: &IndexMeta, sort: &SortPattern) -> Option<bool> {
    let bounds = IndexBounds {
        fields: ix
            .pattern
            .iter()
            .map(|(f, desc)| OrderedIntervalList::all(f, *desc))
            .collect(),
    };
    match provided_sort(ix, &bounds, sort) {
        (true, forward) => Some(forward),
        (false, _) => None,
    }
}

/// Whether scanning the index (forward or backward) returns documents in sort order.
fn provided_sort(ix: &IndexMeta, bounds: &IndexBounds, sort: &SortPattern) -> (bool, bool) {
    // Keys of fields fixed to one value order the rest of the key like a shorter index.
    let equality: Vec<bool> = bounds
        .fields
        .iter()
        .map(|f| f.intervals.len() == 1 && f.intervals[0].is_point())
        .collect();
    let remaining: Vec<(usize, &(String, bool))> = ix
        .pattern
        .iter()
        .enumerate()
        .filter(|(i, _)| !equality[*i])
        .collect();
    let wanted: Vec<(&str, bool)> = sort
        .fields
        .iter()
        // A sort field fixed to one value is no sort at all, unless arrays hold it: an
        // array's sort key is its smallest (or largest) element, not the one that matched.
        .filter(|f| {
            !ix.pattern
                .iter()
                .zip(&equality)
                .enumerate()
                .any(|(i, ((p, _), eq))| {
                    // A point on a hash fixes the hash, not the value.
                    *eq && p == f.path.as_str()
                        && ix.multikey_components(i).is_empty()
                        && !ix.is_hashed_field(i)
                })
        })
        .map(|f| (f.path.as_str(), f.descending))
        .collect();
    if wanted.is_empty() {
        return (true, true);
    }
    if wanted.len() > remaining.len() {
        return (false, true);
    }
    let mut direction: Option<bool> = None;
    for ((name, desc), (i, (path, ix_desc))) in wanted.iter().zip(&remaining) {
        if name != path
            || !ix.multikey_components(*i).is_empty()
            || ix.is_hashed_field(*i)
            || ix.is_geo_field(*i)
        {
            return (false, true);
        }
        let forward = desc == ix_desc;
        if *direction.get_or_insert(forward) != forward {
            return (false, true);
        }
    }
    (true, direction.unwrap_or(true))
}

/// Whether `f` is a field of the index whose keys give its value back: not multikey,
/// hashed or geo.
fn plain_key_field(ix: &IndexMeta, f: &str) -> bool {
    ix.pattern.iter().enumerate().any(|(i, (path, _))| {
        path == f
            && ix.multikey_components(i).is_empty()
            && !ix.is_hashed_field(i)
            && !ix.is_geo_field(i)
    })
}

/// An inclusion projection whose every field is a non-multikey key field.
fn is_covered(ix: &IndexMeta, projection: Option<&Projection>) -> bool {
    let Some(p) = projection else {
        return false;
    };
    let Some(fields) = p.required_fields() else {
        return false;
    };
    let in_index = |f: &str| plain_key_field(ix, f);
    fields.iter().all(|f| in_index(f)) && (!p.includes_id() || in_index("_id"))
}

/// The filter the FETCH stage applies for a solution, with its explain document.
pub fn residual_filter(matcher: &Matcher, residual: &[usize]) -> Option<(Matcher, Document)> {
    if residual.is_empty() {
        return None;
    }
    let conjuncts = canonical_conjuncts(matcher.expr());
    let kept: Vec<Expr> = residual
        .iter()
        .filter_map(|&i| conjuncts.get(i).map(|e| (*e).clone()))
        .collect();
    let expr = if kept.len() == 1 {
        kept.into_iter().next()?
    } else {
        Expr::And(kept)
    };
    let m = Matcher::from_expr(expr);
    let doc = m.filter().clone();
    Some((m, doc))
}
