//! A text index's spec (MongoDB's FTSSpec, `textIndexVersion` 3): validating and
//! normalizing `createIndexes` specs (`fix_spec`), walking a document's indexed strings with
//! their weight and language, scoring its terms, and the index keys.

use super::language::Language;
use super::tokenizer::{tokens, TokenOptions};
use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use std::collections::BTreeMap;

pub const WILDCARD: &str = "$**";
const MAX_WORD_WEIGHT: f64 = 100_000.0;
/// Terms longer than this many bytes are keyed by this prefix and their MD5 (hex).
const TERM_KEY_PREFIX_LEN: usize = 224;

/// A parsed text index spec.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSpec {
    /// Field weights, ordered by path (the wildcard's weight is not among them).
    pub weights: BTreeMap<String, f64>,
    pub wildcard: bool,
    pub default_language: Language,
    pub language_override: String,
    /// Key fields before `_fts` (equality-only prefix) and after `_ftsx`.
    pub extra_before: Vec<String>,
    pub extra_after: Vec<String>,
}

fn cannot(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::CannotCreateIndex, msg)
}

/// Whether an index key pattern is a text index's (a `"text"` field or `_fts`).
pub fn is_text_key(key: &Document) -> bool {
    key.iter()
        .any(|(k, v)| k == "_fts" || matches!(v, Bson::String(s) if s == "text"))
}

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) => Some(*f),
        Bson::Decimal128(d) => d.to_string().parse().ok(),
        _ => None,
    }
}

/// `numberInt()`: doubles truncate toward zero (NaN is 0), saturating.
fn number_int(v: &Bson) -> i64 {
    match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => i64::from(*n as i32),
        other => number(other).map(|f| f as i32 as i64).unwrap_or(0),
    }
}

/// MongoDB's `FTSSpec::fixSpec`: the key pattern with the text fields replaced by
/// `_fts: "text", _ftsx: 1`, `weights` with every text field (weight 1 unless given),
/// `default_language` (english), `language_override` (language) and `textIndexVersion` (3);
/// options the spec gave keep their place, the others are appended in that order.
pub fn fix_spec(spec: &Document) -> Result<Document> {
    let key = spec.get_document("key").map_err(|_| cannot("bad key"))?;
    let mut weights: BTreeMap<String, i64> = BTreeMap::new();
    let mut pattern = Document::new();
    let mut added = false;
    for (k, v) in key {
        if k == "_fts" {
            if !matches!(v, Bson::String(s) if s == "text") {
                return Err(cannot("expecting _fts:\"text\""));
            }
            added = true;
            pattern.insert(k.clone(), v.clone());
        } else if k == "_ftsx" {
            if number_int(v) != 1 {
                return Err(cannot("expecting _ftsx:1"));
            }
            pattern.insert(k.clone(), v.clone());
        } else if matches!(v, Bson::String(s) if s == "text") {
            if !added {
                pattern.insert("_fts", "text");
                pattern.insert("_ftsx", 1);
                added = true;
            }
            weights.insert(k.clone(), 1);
        } else {
            if !matches!(v, Bson::String(_)) && number_int(v) != 1 && number_int(v) != -1 {
                return Err(cannot(
                    "expected value 1 or -1 for non-text key in compound index",
                ));
            }
            pattern.insert(k.clone(), v.clone());
        }
    }
    check_key_layout(key)?;
    match spec.get("weights") {
        Some(Bson::Document(w)) => {
            for (k, v) in w {
                if number(v).is_none() {
                    return Err(cannot("weight for text index needs numeric type"));
                }
                weights.insert(k.clone(), number_int(v));
            }
        }
        Some(Bson::String(s)) if s == WILDCARD => {
            weights.insert(WILDCARD.into(), 1);
        }
        None => {}
        Some(_) => return Err(cannot("text index option 'weights' must be an object")),
    }
    if weights.is_empty() {
        return Err(cannot(
            "text index option 'weights' must specify fields or the wildcard",
        ));
    }
    let mut weights_doc = Document::new();
    for (path, w) in &weights {
        if *w <= 0 || *w as f64 >= MAX_WORD_WEIGHT {
            return Err(cannot(format!(
                "text index weight must be in the exclusive interval (0,100000) but found: {w}"
            )));
        }
        if path != WILDCARD {
            if path.is_empty() {
                return Err(cannot("weight cannot be on an empty field"));
            }
            for part in path.split('.') {
                if part.is_empty() {
                    return Err(cannot("weight cannot have empty path component"));
                }
                if part.starts_with('$') {
                    return Err(cannot("weight cannot have path component with $ prefix"));
                }
            }
        }
        weights_doc.insert(path.clone(), *w as i32);
    }
    let default_language = match spec.get("default_language") {
        None => "english".to_string(),
        Some(Bson::String(s)) => s.clone(),
        Some(_) => return Err(cannot("default_language needs a string type")),
    };
    if Language::lookup(&default_language).is_none() {
        return Err(cannot("default_language is not valid"));
    }
    let language_override = match spec.get("language_override") {
        None => "language".to_string(),
        Some(Bson::String(s)) if !s.is_empty() && !s.starts_with('$') && !s.contains('.') => {
            s.clone()
        }
        Some(Bson::String(_)) => return Err(cannot("language_override is not valid")),
        Some(_) => return Err(cannot("language_override must be a string")),
    };
    let mut version = 3;
    let mut out = Document::new();
    let (mut w_done, mut dl_done, mut lo_done) = (false, false, false);
    for (k, v) in spec {
        match k.as_str() {
            "key" => {
                out.insert("key", pattern.clone());
            }
            "weights" => {
                out.insert("weights", weights_doc.clone());
                w_done = true;
            }
            "default_language" => {
                out.insert("default_language", default_language.clone());
                dl_done = true;
            }
            "language_override" => {
                out.insert("language_override", language_override.clone());
                lo_done = true;
            }
            "textIndexVersion" => {
                let Some(n) = number(v) else {
                    return Err(cannot(
                        "text index option 'textIndexVersion' must be a number",
                    ));
                };
                version = n as i32;
                if version != 2 && version != 3 {
                    return Err(cannot(format!("bad textIndexVersion: {version}")));
                }
                if version != 3 {
                    // Version 2 keys hash long terms with MurmurHash3 and tokenize
                    // differently; only version 3 is built here.
                    return Err(cannot(format!(
                        "textIndexVersion {version} is not supported by this server; use 3"
                    )));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if !w_done {
        out.insert("weights", weights_doc);
    }
    if !dl_done {
        out.insert("default_language", default_language);
    }
    if !lo_done {
        out.insert("language_override", language_override);
    }
    out.insert("textIndexVersion", version);
    Ok(out)
}

/// Prefix fields, then the adjacent text fields (or `_fts`, `_ftsx`), then suffix fields;
/// `_fts`/`_ftsx` are reserved elsewhere.
fn check_key_layout(key: &Document) -> Result<()> {
    let reserved = |k: &str| -> Result<()> {
        if k == "_fts" || k == "_ftsx" {
            return Err(cannot(
                "text index with reserved fields _fts/_ftsx not allowed",
            ));
        }
        Ok(())
    };
    let entries: Vec<(&String, &Bson)> = key.iter().collect();
    let mut i = 0;
    while i < entries.len() && !matches!(entries[i].1, Bson::String(_)) {
        reserved(entries[i].0)?;
        i += 1;
    }
    if i == entries.len() {
        return Err(cannot(
            "expected additional fields in text index key pattern",
        ));
    }
    if entries[i].0 == "_fts" {
        if entries.get(i + 1).map(|e| e.0.as_str()) != Some("_ftsx") {
            return Err(cannot("expected _ftsx after _fts"));
        }
        i += 2;
    } else {
        while i < entries.len() && matches!(entries[i].1, Bson::String(_)) {
            reserved(entries[i].0)?;
            i += 1;
        }
    }
    for (k, v) in &entries[i..] {
        if matches!(v, Bson::String(_)) {
            return Err(cannot("'text' fields in index must all be adjacent"));
        }
        reserved(k)?;
    }
    Ok(())
}

/// One indexed string with the weight and language that apply to it.
pub struct TextValue<'a> {
    pub text: &'a str,
    pub weight: f64,
    pub language: Language,
}

impl TextSpec {
    /// Reads a normalized spec (the output of [`fix_spec`]).
    pub fn from_spec(spec: &Document) -> Result<TextSpec> {
        let corrupt = || Error::internal("found invalid spec for text index");
        let mut weights = BTreeMap::new();
        let mut wildcard = false;
        for (k, v) in spec.get_document("weights").map_err(|_| corrupt())? {
            if k == WILDCARD {
                wildcard = true;
            } else {
                weights.insert(k.clone(), number(v).ok_or_else(corrupt)?);
            }
        }
        let default_language = Language::lookup(
            spec.get_str("default_language").unwrap_or("english"),
        )
        .ok_or_else(|| {
            Error::new(
                ErrorCode::Location(28682),
                "Unrecognized language found for text index",
            )
        })?;
        let mut extra_before = Vec::new();
        let mut extra_after = Vec::new();
        let mut passed = false;
        for (k, _) in spec.get_document("key").map_err(|_| corrupt())? {
            if k == "_fts" || k == "_ftsx" {
                passed = true;
            } else if passed {
                extra_after.push(k.clone());
            } else {
                extra_before.push(k.clone());
            }
        }
        Ok(TextSpec {
            weights,
            wildcard,
            default_language,
            language_override: spec
                .get_str("language_override")
                .unwrap_or("language")
                .to_string(),
            extra_before,
            extra_after,
        })
    }

    /// The language a (sub)document sets through the override field, or `current`.
    fn language_of(&self, doc: &RawDocument, current: Language) -> Result<Language> {
        match doc.get(&self.language_override) {
            Ok(None) => Ok(current),
            Ok(Some(RawBsonRef::String(s))) => Language::lookup(s).ok_or_else(|| {
                Error::new(
                    ErrorCode::Location(17262),
                    format!("language override unsupported: {s}"),
                )
            }),
            Ok(Some(_)) => Err(Error::new(
                ErrorCode::Location(17261),
                "found language override field in document with non-string type",
            )),
            Err(e) => Err(Error::internal(format!("corrupt document: {e}"))),
        }
    }

    /// The indexed strings of `doc` in document order (MongoDB's FTSElementIterator): strings
    /// at a weighted path (any string under the wildcard), descending into subdocuments on a
    /// path prefix and into arrays from non-array parents; a subdocument's override field
    /// sets the language below it.
    pub fn values<'a>(&self, doc: &'a RawDocument) -> Result<Vec<TextValue<'a>>> {
        let mut out = Vec::new();
        let lang = self.language_of(doc, self.default_language)?;
        self.walk(fields(doc)?, lang, "", false, &mut out)?;
        Ok(out)
    }

    fn walk<'a>(
        &self,
        items: Vec<(String, RawBsonRef<'a>)>,
        lang: Language,
        parent: &str,
        is_array: bool,
        out: &mut Vec<TextValue<'a>>,
    ) -> Result<()> {
        for (name, value) in items {
            if self.wildcard && name == self.language_override {
                continue;
            }
            let dotted = if parent.is_empty() {
                name.to_string()
            } else if is_array {
                parent.to_string()
            } else {
                format!("{parent}.{name}")
            };
            let probe = match value {
                RawBsonRef::Document(_) => format!("{dotted}."),
                _ => dotted.clone(),
            };
            let found = self.weights.range(probe..).next();
            if !self.wildcard {
                match found {
                    Some((w, _)) if w == &dotted || w.starts_with(&format!("{dotted}.")) => {}
                    _ => continue,
                }
            }
            let exact = found.is_some_and(|(w, _)| w == &dotted);
            let weight = found.map(|(_, w)| *w).unwrap_or(1.0);
            match value {
                RawBsonRef::String(s) if exact || self.wildcard => {
                    out.push(TextValue {
                        text: s,
                        weight,
                        language: lang,
                    });
                }
                RawBsonRef::Document(sub) if !exact || self.wildcard => {
                    let sub_lang = self.language_of(sub, lang)?;
                    self.walk(fields(sub)?, sub_lang, &dotted, false, out)?;
                }
                // An array's elements are named by position: no override applies.
                RawBsonRef::Array(arr) if !is_array || self.wildcard => {
                    let items = arr
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| v.map(|v| (i.to_string(), v)))
                        .collect::<std::result::Result<Vec<_>, _>>()
                        .map_err(|e| Error::internal(format!("corrupt document: {e}")))?;
                    self.walk(items, lang, &dotted, true, out)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Each term of `doc` with its score (MongoDB's `_scoreStringV2` summed over the indexed
    /// strings): per string, a term seen n times adds weight × (1 + 1/2 + ... + 1/2^(n-1)) ×
    /// (0.5 × n / tokens + 0.5), × 1.1 when the term is the whole string.
    pub fn score_document(&self, doc: &RawDocument) -> Result<BTreeMap<String, f64>> {
        let mut scores: BTreeMap<String, f64> = BTreeMap::new();
        for v in self.values(doc)? {
            score_string(v.text, v.language, v.weight, &mut scores);
        }
        Ok(scores)
    }
}

fn fields(doc: &RawDocument) -> Result<Vec<(String, RawBsonRef<'_>)>> {
    doc.into_iter()
        .map(|r| r.map(|(k, v)| (k.to_string(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::internal(format!("corrupt document: {e}")))
}

fn score_string(raw: &str, lang: Language, weight: f64, scores: &mut BTreeMap<String, f64>) {
    // term -> (exp, count, freq)
    let mut terms: BTreeMap<String, (f64, u32, f64)> = BTreeMap::new();
    let words = tokens(raw, lang, TokenOptions::INDEX);
    let num_tokens = words.len() as f64;
    for w in words {
        let e = terms.entry(w).or_insert((0.0, 0, 0.0));
        e.0 = if e.0 == 0.0 { 1.0 } else { e.0 * 2.0 };
        e.1 += 1;
        e.2 += 1.0 / e.0;
    }
    for (term, (_, count, freq)) in terms {
        let coeff = (0.5 * f64::from(count) / num_tokens) + 0.5;
        let adjustment = if raw.len() == term.len() && raw.eq_ignore_ascii_case(&term) {
            1.1
        } else {
            1.0
        };
        *scores.entry(term).or_insert(0.0) += weight * freq * coeff * adjustment;
    }
}

/// The key a term is stored under: itself, or for a term longer than 224 bytes its first
/// 224 bytes (cut back to a character boundary) and the hex MD5 of the whole term.
pub fn term_key(term: &str) -> String {
    if term.len() <= TERM_KEY_PREFIX_LEN {
        return term.to_string();
    }
    use md5::{Digest, Md5};
    let mut cut = TERM_KEY_PREFIX_LEN;
    while !term.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = Md5::digest(term.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}{hex}", &term[..cut])
}
