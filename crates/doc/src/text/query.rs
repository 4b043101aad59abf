//! A `$text` query (MongoDB's FTSQueryImpl and FTSMatcher): the search string split into
//! terms, "phrases" and -negations, the stemmed terms the index is scanned for, and the
//! check of a document against phrases, negations and case/diacritic-sensitive terms.

use super::language::Language;
use super::spec::TextSpec;
use super::tokenizer::{phrase_matches, tokens, TokenOptions};
use bson::{doc, Bson, Document, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq)]
pub struct TextQuery {
    pub search: String,
    pub language: Language,
    /// The `$language` as given (None: the index's default language).
    pub language_given: Option<String>,
    pub case_sensitive: bool,
    pub diacritic_sensitive: bool,
    /// Stemmed, lowercased, diacritic-free positive terms: what the index is scanned for.
    pub terms_for_bounds: BTreeSet<String>,
    /// Terms the matcher compares (the bounds terms unless case/diacritic-sensitive).
    pub positive_terms: BTreeSet<String>,
    pub negated_terms: BTreeSet<String>,
    pub phrases: Vec<String>,
    pub negated_phrases: Vec<String>,
}

fn type_error(msg: &str) -> Error {
    Error::new(ErrorCode::TypeMismatch, msg)
}

/// Query tokens: text runs and the delimiters `-` and `"`, with whether white space
/// (space, \n, \v, \f, \r) came before.
enum Tok<'a> {
    Text(&'a str, bool),
    Delim(char, usize, bool),
}

fn query_tokens(s: &str) -> Vec<Tok<'_>> {
    let ws = |c: char| matches!(c, ' ' | '\n' | '\u{0b}' | '\u{0c}' | '\r');
    let mut out = Vec::new();
    let bytes: Vec<(usize, char)> = s.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() && ws(bytes[i].1) {
        i += 1;
    }
    let mut previous_ws = true;
    while i < bytes.len() {
        let (start, c) = bytes[i];
        i += 1;
        let tok = if c == '-' || c == '"' {
            Tok::Delim(c, start, previous_ws)
        } else {
            while i < bytes.len() && !ws(bytes[i].1) && bytes[i].1 != '-' && bytes[i].1 != '"' {
                i += 1;
            }
            let end = bytes.get(i).map(|b| b.0).unwrap_or(s.len());
            Tok::Text(&s[start..end], previous_ws)
        };
        out.push(tok);
        let before = i;
        while i < bytes.len() && ws(bytes[i].1) {
            i += 1;
        }
        previous_ws = i > before;
    }
    out
}

impl TextQuery {
    /// Parses the `$text` operand: `$search` (string, required), `$language` (string),
    /// `$caseSensitive` and `$diacriticSensitive` (bools); `default_language` applies when
    /// `$language` is absent.
    pub fn parse(arg: &Bson, default_language: Language) -> Result<TextQuery> {
        let Bson::Document(d) = arg else {
            return Err(Error::bad_value("$text expects an object"));
        };
        let mut search = None;
        let mut language_given = None;
        let mut case_sensitive = false;
        let mut diacritic_sensitive = false;
        for (k, v) in d {
            match (k.as_str(), v) {
                ("$search", Bson::String(s)) => search = Some(s.clone()),
                ("$search", _) => return Err(type_error("$search requires a string value")),
                ("$language", Bson::String(s)) => language_given = Some(s.clone()),
                ("$language", _) => return Err(type_error("$language requires a string value")),
                ("$caseSensitive", Bson::Boolean(b)) => case_sensitive = *b,
                ("$caseSensitive", _) => {
                    return Err(type_error("$caseSensitive requires a boolean value"))
                }
                ("$diacriticSensitive", Bson::Boolean(b)) => diacritic_sensitive = *b,
                ("$diacriticSensitive", _) => {
                    return Err(type_error("$diacriticSensitive requires a boolean value"))
                }
                _ => return Err(Error::bad_value("extra fields in $text")),
            }
        }
        let Some(search) = search else {
            return Err(type_error("$search requires a string value"));
        };
        let language = match &language_given {
            Some(l) => Language::parse(l)?,
            None => default_language,
        };
        let mut q = TextQuery {
            search,
            language,
            language_given,
            case_sensitive,
            diacritic_sensitive,
            terms_for_bounds: BTreeSet::new(),
            positive_terms: BTreeSet::new(),
            negated_terms: BTreeSet::new(),
            phrases: Vec::new(),
            negated_phrases: Vec::new(),
        };
        q.split();
        Ok(q)
    }

    fn split(&mut self) {
        let mut positive = String::new();
        let mut negative = String::new();
        let mut in_negation = false;
        let mut in_phrase = false;
        let mut quote_offset = 0;
        let search = self.search.clone();
        for t in query_tokens(&search) {
            match t {
                Tok::Text(s, previous_ws) => {
                    if in_phrase && in_negation {
                        continue;
                    }
                    // A negation lasts until the next white space ("-foo-bar" negates both).
                    if in_negation && previous_ws {
                        in_negation = false;
                    }
                    let target = if in_negation {
                        &mut negative
                    } else {
                        &mut positive
                    };
                    target.push_str(s);
                    target.push(' ');
                }
                Tok::Delim('-', _, previous_ws) => {
                    if !in_phrase && previous_ws {
                        in_negation = true;
                    }
                }
                Tok::Delim(_, offset, previous_ws) => {
                    if in_phrase {
                        let phrase = search[quote_offset + 1..offset].to_string();
                        if in_negation {
                            self.negated_phrases.push(phrase);
                        } else {
                            self.phrases.push(phrase);
                        }
                        in_phrase = false;
                    } else {
                        in_phrase = true;
                        if in_negation && previous_ws {
                            in_negation = false;
                        }
                        quote_offset = offset;
                    }
                }
            }
        }
        self.add_terms(&positive, false);
        self.add_terms(&negative, true);
    }

    fn add_terms(&mut self, sentence: &str, negated: bool) {
        let insensitive = !self.case_sensitive && !self.diacritic_sensitive;
        for w in tokens(sentence, self.language, TokenOptions::INDEX) {
            if !negated {
                self.terms_for_bounds.insert(w.clone());
            }
            if insensitive {
                self.active(negated).insert(w);
            }
        }
        if insensitive {
            return;
        }
        let opts = TokenOptions {
            filter_stop_words: true,
            case_sensitive: self.case_sensitive,
            diacritic_sensitive: self.diacritic_sensitive,
        };
        for w in tokens(sentence, self.language, opts) {
            self.active(negated).insert(w);
        }
    }

    fn active(&mut self, negated: bool) -> &mut BTreeSet<String> {
        if negated {
            &mut self.negated_terms
        } else {
            &mut self.positive_terms
        }
    }

    /// explain's `parsedTextQuery`.
    pub fn to_document(&self) -> Document {
        let strs = |it: &mut dyn Iterator<Item = &String>| -> Vec<Bson> {
            it.map(|s| Bson::String(s.clone())).collect()
        };
        doc! {
            "terms": strs(&mut self.positive_terms.iter()),
            "negatedTerms": strs(&mut self.negated_terms.iter()),
            "phrases": strs(&mut self.phrases.iter()),
            "negatedPhrases": strs(&mut self.negated_phrases.iter()),
        }
    }

    fn token_options(&self) -> TokenOptions {
        TokenOptions {
            filter_stop_words: false,
            case_sensitive: self.case_sensitive,
            diacritic_sensitive: self.diacritic_sensitive,
        }
    }

    /// MongoDB's FTSMatcher: some positive term (checked only when the index scan could not
    /// decide it: case- or diacritic-sensitive queries), no negated term, every phrase and
    /// no negated phrase.
    pub fn matches(&self, spec: &TextSpec, doc: &RawDocument) -> Result<bool> {
        let values = spec.values(doc)?;
        let opts = self.token_options();
        if self.case_sensitive || self.diacritic_sensitive {
            let has = values.iter().any(|v| {
                tokens(v.text, v.language, opts)
                    .iter()
                    .any(|t| self.positive_terms.contains(t))
            });
            if !has {
                return Ok(false);
            }
        }
        if !self.negated_terms.is_empty()
            && values.iter().any(|v| {
                tokens(v.text, v.language, opts)
                    .iter()
                    .any(|t| self.negated_terms.contains(t))
            })
        {
            return Ok(false);
        }
        let phrase_in = |p: &str| {
            values.iter().any(|v| {
                phrase_matches(
                    p,
                    v.text,
                    v.language,
                    self.case_sensitive,
                    self.diacritic_sensitive,
                )
            })
        };
        Ok(self.phrases.iter().all(|p| phrase_in(p))
            && !self.negated_phrases.iter().any(|p| phrase_in(p)))
    }
}
