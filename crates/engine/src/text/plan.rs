//! Plans a query whose filter holds `$text`: TEXT_MATCH over TEXT_OR (scores needed) or
//! FETCH over OR (no scores) over one IXSCAN per term of the collection's text index.

use super::projection::TextProjection;
use super::sort::TextSort;
use super::text_match::TextMatch;
use super::text_or::TextOr;
use crate::catalog::{CollectionRef, IndexMeta};
use crate::exec::{Executor, Fetch, IndexScan, Limit, OrStage, Skip, Stage};
use crate::find::{parse_collation, FindSpec};
use crate::plan::bounds::{IndexBounds, Interval, OrderedIntervalList};
use crate::Engine;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::text::TextQuery;
use nidus_expr::LetScope;
use nidus_query::matcher::{Matcher, ParseOptions};
use nidus_query::projection::Projection;
use std::sync::Arc;

fn text_index_required() -> Error {
    Error::new(
        ErrorCode::IndexNotFound,
        "text index required for $text query",
    )
}

/// The filter without its `$text` (collected into `found`); `$and`s left empty go.
pub(super) fn extract_text(filter: &Document, found: &mut Vec<Bson>) -> Document {
    let mut rest = Document::new();
    for (k, v) in filter {
        match (k.as_str(), v) {
            ("$text", _) => found.push(v.clone()),
            ("$and", Bson::Array(items)) => {
                let kept: Vec<Bson> = items
                    .iter()
                    .filter_map(|i| match i {
                        Bson::Document(d) => {
                            let r = extract_text(d, found);
                            (!r.is_empty()).then_some(Bson::Document(r))
                        }
                        other => Some(other.clone()),
                    })
                    .collect();
                if !kept.is_empty() {
                    rest.insert(k.clone(), kept);
                }
            }
            _ => {
                rest.insert(k.clone(), v.clone());
            }
        }
    }
    rest
}

/// The equality value the filter gives `path` (top level or in a top-level `$and`).
fn equality_on(filter: &Document, path: &str) -> Option<Bson> {
    for (k, v) in filter {
        if k == path {
            match v {
                Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                    if d.len() == 1 {
                        if let Some(eq) = d.get("$eq") {
                            if !matches!(eq, Bson::Array(_) | Bson::RegularExpression(_)) {
                                return Some(eq.clone());
                            }
                        }
                    }
                }
                Bson::Array(_) | Bson::RegularExpression(_) => {}
                other => return Some(other.clone()),
            }
        }
        if let ("$and", Bson::Array(items)) = (k.as_str(), v) {
            for i in items {
                if let Bson::Document(d) = i {
                    if let Some(found) = equality_on(d, path) {
                        return Some(found);
                    }
                }
            }
        }
    }
    None
}

/// The executor for a `$text` query over `coll`, or None when the filter has no `$text`
/// a text plan answers.
pub(crate) fn plan_text(
    engine: &Engine,
    coll: Option<&CollectionRef>,
    spec: &FindSpec,
) -> Result<Option<Executor>> {
    if !super::filter_has_text(&spec.filter) {
        return Ok(None);
    }
    let mut found = Vec::new();
    let rest = extract_text(&spec.filter, &mut found);
    if found.len() > 1 {
        return Err(Error::bad_value("Too many text expressions"));
    }
    let Some(coll) = coll else {
        return Err(text_index_required());
    };
    let ix: IndexMeta = {
        let meta = coll.meta.read();
        meta.indexes
            .iter()
            .find(|i| i.text.is_some() && !i.is_hidden())
            .cloned()
            .ok_or_else(text_index_required)?
    };
    // Text indexes are outside Stable API Version 1: under `apiStrict` MongoDB's planner
    // leaves them out, so a `$text` query has no plan.
    if crate::opctx::api_strict() {
        return Err(crate::plan::planner_error(
            ErrorCode::NoQueryExecutionPlans,
            "need exactly one text index for $text query",
        ));
    }
    let Some(text_spec) = ix.text.clone() else {
        return Err(text_index_required());
    };
    let query = TextQuery::parse(&found[0], text_spec.default_language)?;
    let scope = LetScope::new(spec.let_vars.as_ref())?;
    let collation = parse_collation(spec.collation.as_ref())?;
    let opts = ParseOptions {
        scope: Some(&scope),
        collation: collation.as_ref(),
        ..ParseOptions::default()
    };
    let matcher = Arc::new(Matcher::parse_with(&rest, &opts)?);
    let unusable = || {
        crate::plan::planner_error(
            ErrorCode::NoQueryExecutionPlans,
            "failed to use text index to satisfy $text query (if text index is compound, are equality predicates given for all prefix fields?)",
        )
    };
    // A partial text index holds only the documents its filter matches: usable when the
    // query's other predicates imply the filter.
    if let Some(f) = &ix.partial {
        if !crate::plan::partial::implies(matcher.expr(), f.expr()) {
            return Err(unusable());
        }
    }
    let mut prefix = Vec::new();
    for path in &text_spec.extra_before {
        match equality_on(&rest, path) {
            Some(v) => prefix.push(v),
            None => return Err(unusable()),
        }
    }
    let sort_doc = spec.sort.as_ref().filter(|s| !s.is_empty());
    let sort = sort_doc
        .map(|s| TextSort::parse(s, collation.clone()))
        .transpose()?;
    let projection = match &spec.projection {
        Some(p) if !p.is_empty() => Some(Arc::new(Projection::parse_with_text_score(
            p,
            spec.projection_policy,
            &scope,
        )?)),
        _ => None,
    };
    let want_score = sort_doc.is_some_and(super::uses_text_score)
        || spec.projection.as_ref().is_some_and(super::uses_text_score);
    let src = engine.read_source(spec.source.as_ref());
    let filter = (!rest.is_empty()).then(|| (matcher.clone(), matcher.canonical_document()));

    // One backward scan per term: prefix points, the term, every score, every suffix.
    let scans: Vec<Stage> = query
        .terms_for_bounds
        .iter()
        .map(|term| {
            let mut fields = Vec::new();
            let mut values = prefix.iter();
            for (path, descending) in ix.pattern.iter() {
                let interval = if path == "_fts" {
                    Interval::point(Bson::String(nidus_doc::text::term_key(term)))
                } else if path == "_ftsx" || fields.len() > prefix.len() {
                    fields.push(OrderedIntervalList::all(path, *descending));
                    continue;
                } else {
                    Interval::point(values.next().cloned().unwrap_or(Bson::Null))
                };
                fields.push(OrderedIntervalList {
                    field: path.clone(),
                    intervals: vec![interval],
                });
            }
            Stage::new(IndexScan::new(
                src.clone(),
                ix.clone(),
                IndexBounds { fields },
                false,
            ))
        })
        .collect();
    let union = if want_score {
        Stage::new(TextOr::new(src.clone(), coll.records, scans, filter))
    } else {
        let or = Stage::new(OrStage::new(scans));
        Stage::new(Fetch::new(src.clone(), coll.records, or, filter))
    };
    let mut stage = Stage::new(TextMatch::new(
        union,
        query,
        text_spec,
        ix.name.clone(),
        prefix_document(&ix, &prefix),
    ));
    if !spec.count {
        let mut sorted = false;
        if let Some(s) = sort {
            let top_k = if spec.limit > 0 {
                spec.limit.saturating_add(spec.skip)
            } else {
                0
            };
            stage = Stage::new(s.into_stage(stage, top_k));
            sorted = true;
        }
        if spec.skip > 0 {
            stage = Stage::new(Skip::new(stage, spec.skip));
        }
        if let (Some(p), Some(doc)) = (projection, &spec.projection) {
            stage = Stage::new(TextProjection::new(stage, p, doc.clone()));
        }
        if spec.limit > 0 && !sorted {
            stage = Stage::new(Limit::new(stage, spec.limit));
        }
    }
    Ok(Some(Executor::new(stage, spec.deadline)))
}

/// explain's `indexPrefix`: the prefix fields' equality values.
fn prefix_document(ix: &IndexMeta, prefix: &[Bson]) -> Document {
    ix.pattern
        .iter()
        .zip(prefix)
        .map(|((p, _), v)| (p.clone(), v.clone()))
        .collect()
}
