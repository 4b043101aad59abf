//! Text indexes and `$text` queries.
//!
//! A text index's entries are `(prefix values.., term, score, suffix values..)` under the
//! key pattern `{..prefix, _fts: "text", _ftsx: 1, ..suffix}`, one per distinct term of the
//! document (`nidus_doc::text`). A `$text` query scans the index once per stemmed term
//! (IXSCAN, with equality bounds on the prefix) and unions the scans: TEXT_OR sums each
//! document's term scores when the query needs `{$meta: "textScore"}`, OR otherwise;
//! TEXT_MATCH then checks phrases, negations and case/diacritic-sensitive terms. Only
//! `$text` reads a text index (documents without terms have no entry).

mod plan;
mod projection;
mod sort;
mod text_match;
mod text_or;

pub(crate) use plan::plan_text;

use crate::catalog::IndexMeta;
use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::keys::IndexKeys;
use nidus_doc::text::{term_key, TextSpec};
use std::sync::Arc;

/// The parsed text spec of a normalized index spec (None for other indexes).
pub fn index_text_spec(spec: &Document) -> Result<Option<Arc<TextSpec>>> {
    match spec.get_document("key") {
        Ok(key) if nidus_doc::text::is_text_key(key) => {
            Ok(Some(Arc::new(TextSpec::from_spec(spec)?)))
        }
        _ => Ok(None),
    }
}

/// `createIndexes` normalization of a text index spec (MongoDB's `fixSpec`; text indexes
/// take no collation). Other specs pass unchanged.
pub fn fix_index_spec(spec: Document) -> Result<Document> {
    match spec.get_document("key") {
        Ok(key) if nidus_doc::text::is_text_key(key) => {
            if spec.contains_key("collation") {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    format!(
                        "Index type 'text' does not support collation: {}",
                        nidus_common::shell::format(
                            &spec.get("collation").cloned().unwrap_or(Bson::Null)
                        )
                    ),
                ));
            }
            nidus_doc::text::fix_spec(&spec)
        }
        _ => Ok(spec),
    }
}

/// The value at a prefix or suffix path of a text index: null when missing; an array on
/// the path cannot be indexed (CannotBuildIndexKeys).
fn extra_value(doc: &RawDocument, path: &str) -> Result<Bson> {
    let array_error = || {
        Error::new(
            ErrorCode::CannotBuildIndexKeys,
            format!(
                "Field '{path}' of text index contains an array in document: {}",
                nidus_common::shell::format(
                    &bson::Document::try_from(doc)
                        .map(Bson::Document)
                        .unwrap_or(Bson::Null)
                )
            ),
        )
    };
    let mut current = RawBsonRef::Document(doc);
    for part in path.split('.') {
        let RawBsonRef::Document(d) = current else {
            return Ok(Bson::Null);
        };
        match d.get(part) {
            Ok(Some(RawBsonRef::Array(_))) => return Err(array_error()),
            Ok(Some(v)) => current = v,
            Ok(None) => return Ok(Bson::Null),
            Err(e) => return Err(Error::internal(format!("corrupt document: {e}"))),
        }
    }
    Bson::try_from(current).map_err(|e| Error::internal(format!("corrupt document: {e}")))
}

/// The keys of `doc` in text index `ix`: one per term, with its score.
pub fn index_keys(ix: &IndexMeta, doc: &RawDocument) -> Result<IndexKeys> {
    let Some(spec) = &ix.text else {
        return Err(Error::internal("text keys asked of a non-text index"));
    };
    let before = spec
        .extra_before
        .iter()
        .map(|p| extra_value(doc, p))
        .collect::<Result<Vec<_>>>()?;
    let after = spec
        .extra_after
        .iter()
        .map(|p| extra_value(doc, p))
        .collect::<Result<Vec<_>>>()?;
    let scores = spec.score_document(doc)?;
    let mut keys = Vec::with_capacity(scores.len());
    for (term, score) in &scores {
        let mut key = before.clone();
        key.push(Bson::String(term_key(term)));
        key.push(Bson::Double(*score));
        key.extend(after.iter().cloned());
        keys.push(key);
    }
    // Several terms make the document multikey on `_fts` (as MongoDB reports the index).
    let mut multikey_paths = vec![Vec::new(); ix.pattern.len()];
    if keys.len() > 1 {
        if let Some(i) = ix.pattern.iter().position(|(p, _)| p == "_fts") {
            multikey_paths[i].push(0);
        }
    }
    Ok(IndexKeys {
        is_multikey: keys.len() > 1,
        keys,
        multikey_paths,
    })
}

/// The filter without `$text` (`$and`s left empty go).
pub fn filter_without_text(filter: &Document) -> Document {
    plan::extract_text(filter, &mut Vec::new())
}

/// explain's `parsedQuery` of a filter holding `$text`: the other predicates (canonical) and
/// the `$text` with its options spelled out.
pub fn parsed_query(filter: &Document) -> Result<Document> {
    let mut found = Vec::new();
    let rest = plan::extract_text(filter, &mut found);
    let mut text = Document::new();
    if let Some(Bson::Document(t)) = found.first() {
        text.insert("$search", t.get("$search").cloned().unwrap_or(Bson::Null));
        text.insert(
            "$language",
            t.get("$language")
                .cloned()
                .unwrap_or_else(|| "english".into()),
        );
        for k in ["$caseSensitive", "$diacriticSensitive"] {
            text.insert(k, t.get(k).cloned().unwrap_or(Bson::Boolean(false)));
        }
    }
    let text = bson::doc! {"$text": text};
    if rest.is_empty() {
        return Ok(text);
    }
    let rest = nidus_query::matcher::Matcher::parse(&rest)?.canonical_document();
    Ok(bson::doc! {"$and": [rest, text]})
}

/// Whether a document (a sort, projection or expression) reads `{$meta: "textScore"}`.
pub fn uses_text_score(d: &Document) -> bool {
    fn in_value(v: &Bson) -> bool {
        match v {
            Bson::Document(d) => uses_text_score(d),
            Bson::Array(a) => a.iter().any(in_value),
            _ => false,
        }
    }
    matches!(d.get("$meta"), Some(Bson::String(s)) if s == "textScore") || d.values().any(in_value)
}

/// A sort document without its `{$meta: "textScore"}` fields.
pub fn without_text_score(sort: &Document) -> Document {
    sort.iter()
        .filter(|(_, v)| !matches!(v, Bson::Document(d) if uses_text_score(d)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// After the leading `$match`, `$sort`, `$skip`, `$limit` and `$project` moved into the find
/// plan, the stages left may not hold `$text` (MongoDB's 17313) nor read the text score,
/// which only the find plan has (40218).
pub fn check_pipeline_rest(stages: &[crate::pipeline::StageRef]) -> Result<()> {
    use crate::pipeline::{downcast, Match, Project, Sort};
    for s in stages {
        if downcast::<Match>(s).is_some_and(|m| filter_has_text(&m.filter)) {
            return Err(Error::new(
                ErrorCode::Location(17313),
                "$match with $text is only allowed as the first pipeline stage",
            ));
        }
        // Any stage's expressions, as it serializes them (`$addFields`, `$group`, ...).
        let score = downcast::<Sort>(s).is_some_and(|x| uses_text_score(&x.spec))
            || downcast::<Project>(s).is_some_and(|p| uses_text_score(&p.spec))
            || uses_text_score(&bson::doc! {"stage": s.serialize()});
        if score {
            return Err(nidus_expr::meta::text_score_unavailable());
        }
    }
    Ok(())
}

/// Whether a filter holds `$text` where a text plan answers it: at the top level or in a
/// top-level `$and` (nested `$and`s included).
pub fn filter_has_text(filter: &Document) -> bool {
    filter.iter().any(|(k, v)| match (k.as_str(), v) {
        ("$text", _) => true,
        ("$and", Bson::Array(items)) => items
            .iter()
            .any(|i| matches!(i, Bson::Document(d) if filter_has_text(d))),
        _ => false,
    })
}
