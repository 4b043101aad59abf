//! `$text` through text indexes against a brute-force evaluation (issue 22). For random
//! documents (strings of stemmable, stop, accented and mixed-case words, arrays of strings,
//! subdocuments, per-document and per-subdocument language overrides, prefix and suffix
//! values) and four text indexes (single field; two fields with weights and language
//! "none"; compound with an equality prefix, a subdocument field and a descending suffix;
//! wildcard with a weight), every random `$text` query (terms, negations, phrases, negated
//! phrases, `$language`, `$caseSensitive`, `$diacriticSensitive`, with another predicate)
//! returns exactly the documents, and the scores, that evaluating MongoDB's rules over every
//! document gives: the OR plan, the TEXT_OR plan (score projection), the score sort's order,
//! and counts.
//!
//! The CI form runs `NIDUS_PLAN_PROPS_CASES` cases (default 24); set it higher for more.

use bson::{doc, Bson, Document, RawDocumentBuf};
use nidus_doc::text::tokenizer::{phrase_matches, tokens, TokenOptions};
use nidus_doc::text::{Language, TextQuery};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_storage_rocks::RocksEngine;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

mod common;
use common::cases;

const WORDS: &[&str] = &[
    "coffee", "Coffee", "cafés", "café", "Cafe", "running", "runs", "the", "and", "leche",
    "Leches", "shop", "shopping", "don't", "naïve", "NAIVE", "x-ray", "dogs", "Dog", "über",
];

fn sentence() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(WORDS), 1..5).prop_map(|w| w.join(" "))
}

fn language() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some("english")),
        1 => Just(Some("es")),
        1 => Just(Some("none")),
        1 => Just(Some("german")),
    ]
}

fn documents() -> impl Strategy<Value = Vec<Document>> {
    let a = prop_oneof![
        Just(None),
        sentence().prop_map(|s| Some(Bson::String(s))),
        (sentence(), sentence()).prop_map(|(x, y)| Some(Bson::Array(vec![x.into(), y.into()]))),
    ];
    let sub = proptest::option::of((sentence(), language()));
    let one = (
        a,
        proptest::option::of(sentence()),
        sub,
        language(),
        0..2i32,
        0..3i32,
    );
    proptest::collection::vec(one, 0..14).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (a, b, sub, lang, p, s))| {
                let mut d = doc! {"_id": i as i32, "p": p, "s": s};
                if let Some(a) = a {
                    d.insert("a", a);
                }
                if let Some(b) = b {
                    d.insert("b", b);
                }
                if let Some((c, l)) = sub {
                    let mut sd = doc! {"c": c};
                    if let Some(l) = l {
                        sd.insert("language", l);
                    }
                    d.insert("sub", sd);
                }
                if let Some(l) = lang {
                    d.insert("language", l);
                }
                d
            })
            .collect()
    })
}

/// The index of each collection.
fn index_spec(coll: usize) -> Document {
    match coll {
        0 => doc! {"key": {"a": "text"}, "name": "t"},
        1 => doc! {"key": {"a": "text", "b": "text"}, "name": "t", "weights": {"a": 3},
        "default_language": "none"},
        2 => doc! {"key": {"p": 1, "a": "text", "sub.c": "text", "s": -1}, "name": "t"},
        _ => doc! {"key": {"$**": "text"}, "name": "t", "weights": {"b": 2}},
    }
}

fn lang_of(v: Option<&Bson>, default: Language) -> Language {
    match v {
        Some(Bson::String(s)) => Language::lookup(s).expect("language"),
        _ => default,
    }
}

/// The strings a collection's index reads from `d`, with weight and language, written out
/// per index from MongoDB's rules (a wildcard weighs a path by the first weighted path not
/// below it in name order: "a" and "b" by b's 2, "sub.c" by the default 1).
fn strings(coll: usize, d: &Document) -> Vec<(String, f64, Language)> {
    let default = if coll == 1 {
        Language::None
    } else {
        Language::English
    };
    let lang = lang_of(d.get("language"), default);
    let mut out = Vec::new();
    let push_a = |w: f64, out: &mut Vec<(String, f64, Language)>| match d.get("a") {
        Some(Bson::String(s)) => out.push((s.clone(), w, lang)),
        Some(Bson::Array(items)) => {
            for i in items {
                if let Bson::String(s) = i {
                    out.push((s.clone(), w, lang));
                }
            }
        }
        _ => {}
    };
    let sub = |out: &mut Vec<(String, f64, Language)>| {
        if let Some(Bson::Document(sd)) = d.get("sub") {
            if let Some(Bson::String(c)) = sd.get("c") {
                out.push((c.clone(), 1.0, lang_of(sd.get("language"), lang)));
            }
        }
    };
    let b = |w: f64, out: &mut Vec<(String, f64, Language)>| {
        if let Some(Bson::String(s)) = d.get("b") {
            out.push((s.clone(), w, lang));
        }
    };
    match coll {
        0 => push_a(1.0, &mut out),
        1 => {
            push_a(3.0, &mut out);
            b(1.0, &mut out);
        }
        2 => {
            push_a(1.0, &mut out);
            sub(&mut out);
        }
        _ => {
            push_a(2.0, &mut out);
            b(2.0, &mut out);
            sub(&mut out);
        }
    }
    out
}

/// Term scores by MongoDB's formula, computed directly.
fn term_scores(strings: &[(String, f64, Language)]) -> BTreeMap<String, f64> {
    let mut scores = BTreeMap::new();
    for (text, weight, lang) in strings {
        let words = tokens(text, *lang, TokenOptions::INDEX);
        let n = words.len() as f64;
        let mut counts: BTreeMap<&String, u32> = BTreeMap::new();
        for w in &words {
            *counts.entry(w).or_default() += 1;
        }
        for (term, count) in counts {
            let freq: f64 = (0..count).map(|i| 1.0 / 2f64.powi(i as i32)).sum();
            let coeff = 0.5 * f64::from(count) / n + 0.5;
            let boost = if text.len() == term.len() && text.eq_ignore_ascii_case(term) {
                1.1
            } else {
                1.0
            };
            *scores.entry(term.clone()).or_insert(0.0) += weight * freq * coeff * boost;
        }
    }
    scores
}

/// The brute-force answer: the score of each matching document.
fn expected(
    coll: usize,
    docs: &[Document],
    q: &TextQuery,
    p: i32,
    s_min: Option<i32>,
) -> BTreeMap<i32, f64> {
    let mut out = BTreeMap::new();
    let sensitive = TokenOptions {
        filter_stop_words: false,
        case_sensitive: q.case_sensitive,
        diacritic_sensitive: q.diacritic_sensitive,
    };
    for d in docs {
        if coll == 2 && d.get_i32("p").ok() != Some(p) {
            continue;
        }
        if let Some(m) = s_min {
            if d.get_i32("s").unwrap_or(0) < m {
                continue;
            }
        }
        let strs = strings(coll, d);
        let scores = term_scores(&strs);
        if !q.terms_for_bounds.iter().any(|t| scores.contains_key(t)) {
            continue;
        }
        let doc_tokens: Vec<String> = strs
            .iter()
            .flat_map(|(t, _, l)| tokens(t, *l, sensitive))
            .collect();
        if (q.case_sensitive || q.diacritic_sensitive)
            && !doc_tokens.iter().any(|t| q.positive_terms.contains(t))
        {
            continue;
        }
        if doc_tokens.iter().any(|t| q.negated_terms.contains(t)) {
            continue;
        }
        let has_phrase = |ph: &String| {
            strs.iter()
                .any(|(t, _, l)| phrase_matches(ph, t, *l, q.case_sensitive, q.diacritic_sensitive))
        };
        if !q.phrases.iter().all(has_phrase) || q.negated_phrases.iter().any(has_phrase) {
            continue;
        }
        let score: f64 = q
            .terms_for_bounds
            .iter()
            .filter_map(|t| scores.get(t))
            .sum();
        out.insert(d.get_i32("_id").expect("_id"), score);
    }
    out
}

#[derive(Debug, Clone)]
struct Query {
    text: Document,
    p: i32,
    s_min: Option<i32>,
}

fn query() -> impl Strategy<Value = Query> {
    let word = proptest::sample::select(WORDS);
    let item = prop_oneof![
        4 => word.clone().prop_map(|w| w.to_string()),
        1 => word.clone().prop_map(|w| format!("-{w}")),
        1 => (word.clone(), word.clone()).prop_map(|(a, b)| format!("\"{a} {b}\"")),
        1 => word.prop_map(|w| format!("-\"{w}\"")),
    ];
    (
        proptest::collection::vec(item, 1..4),
        prop_oneof![3 => Just(None), 1 => Just(Some("es")), 1 => Just(Some("none"))],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        0..2i32,
        proptest::option::of(0..3i32),
    )
        .prop_map(|(items, lang, case, diacritic, p, s_min)| {
            let mut text = doc! {"$search": items.join(" ")};
            if let Some(l) = lang {
                text.insert("$language", l);
            }
            if case {
                text.insert("$caseSensitive", true);
            }
            if diacritic {
                text.insert("$diacriticSensitive", true);
            }
            Query { text, p, s_min }
        })
}

fn run(e: &Engine, ns: &Namespace, spec: FindSpec) -> Result<Vec<Document>, String> {
    let c = e.collection(ns);
    let mut exec = e
        .plan_find(c.as_ref(), &spec)
        .map_err(|err| err.message.clone())?;
    let mut got = Vec::new();
    while let Some(d) = exec.next_doc().map_err(|err| err.message.clone())? {
        got.push(d.to_document().expect("document"));
    }
    Ok(got)
}

fn check(e: &Engine, docs: &[Document], coll: usize, q: &Query) -> Result<(), TestCaseError> {
    let ns = Namespace::new("db", &format!("c{coll}"));
    let default = if coll == 1 {
        Language::None
    } else {
        Language::English
    };
    let parsed = TextQuery::parse(&Bson::Document(q.text.clone()), default).expect("query");
    let want = expected(coll, docs, &parsed, q.p, q.s_min);
    let mut filter = doc! {"$text": q.text.clone()};
    if coll == 2 {
        filter.insert("p", q.p);
    }
    if let Some(m) = q.s_min {
        filter.insert("s", doc! {"$gte": m});
    }
    let what = format!("collection {coll} filter {filter}");
    // The OR plan (no score needed).
    let plain = run(
        e,
        &ns,
        FindSpec {
            filter: filter.clone(),
            ..FindSpec::default()
        },
    )
    .map_err(|m| TestCaseError::fail(format!("{what}: {m}")))?;
    let mut ids: Vec<i32> = plain
        .iter()
        .map(|d| d.get_i32("_id").expect("_id"))
        .collect();
    ids.sort_unstable();
    prop_assert_eq!(&ids, &want.keys().copied().collect::<Vec<_>>(), "{}", &what);
    // The TEXT_OR plan with scores, sorted by score.
    let scored = run(
        e,
        &ns,
        FindSpec {
            filter: filter.clone(),
            projection: Some(doc! {"_id": 1, "score": {"$meta": "textScore"}}),
            sort: Some(doc! {"score": {"$meta": "textScore"}}),
            ..FindSpec::default()
        },
    )
    .map_err(|m| TestCaseError::fail(format!("{what}: {m}")))?;
    prop_assert_eq!(scored.len(), want.len(), "{}", &what);
    for w in scored.windows(2) {
        prop_assert!(
            w[0].get_f64("score").expect("score") >= w[1].get_f64("score").expect("score"),
            "{what}: not in score order: {scored:?}"
        );
    }
    for d in &scored {
        let id = d.get_i32("_id").expect("_id");
        let got = d.get_f64("score").expect("score");
        let Some(w) = want.get(&id) else {
            return Err(TestCaseError::fail(format!("{what}: unexpected {id}")));
        };
        prop_assert!(
            (got - w).abs() <= 1e-9 * w.abs().max(1.0),
            "{what}: {id}: {got} != {w}"
        );
    }
    let mut exec = e
        .plan_find(
            e.collection(&ns).as_ref(),
            &FindSpec {
                filter,
                count: true,
                ..FindSpec::default()
            },
        )
        .map_err(|err| TestCaseError::fail(format!("{what}: count: {}", err.message)))?;
    while exec.get_next().expect("count").is_some() {}
    prop_assert_eq!(exec.counted() as usize, want.len(), "count: {}", &what);
    Ok(())
}

fn run_case(docs: Vec<Document>, queries: Vec<Query>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Engine::open(Arc::new(RocksEngine::open(dir.path()).expect("rocks"))).expect("engine");
    for coll in 0..4 {
        let ns = Namespace::new("db", &format!("c{coll}"));
        // Half the collections index their documents as they are inserted, half build the
        // index over existing documents.
        if coll % 2 == 0 {
            e.create_indexes(&ns, &[index_spec(coll)]).expect("index");
        }
        let c = e.ensure_collection(&ns).expect("collection");
        for d in &docs {
            let raw = RawDocumentBuf::from_document(d).expect("raw");
            e.insert_one(
                &c,
                &prepare_insert(&raw).expect("prepare"),
                &WriteOpts::default(),
            )
            .expect("insert");
        }
        if coll % 2 == 1 {
            e.create_indexes(&ns, &[index_spec(coll)]).expect("index");
        }
    }
    for q in &queries {
        for coll in 0..4 {
            check(&e, &docs, coll, q)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn text_queries_match_brute_force(
        docs in documents(),
        queries in proptest::collection::vec(query(), 1..6),
    ) {
        run_case(docs, queries)?;
    }
}
