//! MongoDB's text search languages (`textIndexVersion` 3): the canonical names, their
//! two-letter aliases, and what each brings (Snowball stemmer, stop words, the English
//! delimiter rule for `'`, Turkish case folding).

use nidus_common::{Error, ErrorCode, Result};
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::HashSet;
use std::sync::OnceLock;

/// A supported language. `None` neither stems nor drops stop words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    None,
    Danish,
    Dutch,
    English,
    Finnish,
    French,
    German,
    Hungarian,
    Italian,
    Norwegian,
    Portuguese,
    Romanian,
    Russian,
    Spanish,
    Swedish,
    Turkish,
}

/// (accepted name, language): canonical names and MongoDB's two-letter aliases.
const NAMES: &[(&str, Language)] = &[
    ("none", Language::None),
    ("danish", Language::Danish),
    ("da", Language::Danish),
    ("dutch", Language::Dutch),
    ("nl", Language::Dutch),
    ("english", Language::English),
    ("en", Language::English),
    ("finnish", Language::Finnish),
    ("fi", Language::Finnish),
    ("french", Language::French),
    ("fr", Language::French),
    ("german", Language::German),
    ("de", Language::German),
    ("hungarian", Language::Hungarian),
    ("hu", Language::Hungarian),
    ("italian", Language::Italian),
    ("it", Language::Italian),
    ("norwegian", Language::Norwegian),
    ("nb", Language::Norwegian),
    ("portuguese", Language::Portuguese),
    ("pt", Language::Portuguese),
    ("romanian", Language::Romanian),
    ("ro", Language::Romanian),
    ("russian", Language::Russian),
    ("ru", Language::Russian),
    ("spanish", Language::Spanish),
    ("es", Language::Spanish),
    ("swedish", Language::Swedish),
    ("sv", Language::Swedish),
    ("turkish", Language::Turkish),
    ("tr", Language::Turkish),
];

impl Language {
    /// The language a user string names (ASCII case-insensitive, aliases resolved), or
    /// MongoDB's BadValue `unsupported language: "<name>" for text index version 3`.
    pub fn parse(name: &str) -> Result<Language> {
        Language::lookup(name).ok_or_else(|| {
            Error::new(
                ErrorCode::BadValue,
                format!("unsupported language: \"{name}\" for text index version 3"),
            )
        })
    }

    pub fn lookup(name: &str) -> Option<Language> {
        let lower = name.to_ascii_lowercase();
        NAMES.iter().find(|(n, _)| *n == lower).map(|(_, l)| *l)
    }

    /// The canonical name (`"english"`).
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(n, l)| *l == self && n.len() > 2)
            .map(|(n, _)| *n)
            .unwrap_or("none")
    }

    fn algorithm(self) -> Option<Algorithm> {
        Some(match self {
            Language::None => return None,
            Language::Danish => Algorithm::Danish,
            Language::Dutch => Algorithm::Dutch,
            Language::English => Algorithm::English,
            Language::Finnish => Algorithm::Finnish,
            Language::French => Algorithm::French,
            Language::German => Algorithm::German,
            Language::Hungarian => Algorithm::Hungarian,
            Language::Italian => Algorithm::Italian,
            Language::Norwegian => Algorithm::Norwegian,
            Language::Portuguese => Algorithm::Portuguese,
            Language::Romanian => Algorithm::Romanian,
            Language::Russian => Algorithm::Russian,
            Language::Spanish => Algorithm::Spanish,
            Language::Swedish => Algorithm::Swedish,
            Language::Turkish => Algorithm::Turkish,
        })
    }

    /// The word's Snowball stem (the word itself for `none`).
    pub fn stem(self, word: &str) -> String {
        match self.algorithm() {
            Some(a) => stemmer(a).stem(word).into_owned(),
            None => word.to_string(),
        }
    }

    /// Whether `word` (lowercased, diacritics kept) is one of the language's stop words.
    pub fn is_stop_word(self, word: &str) -> bool {
        stop_words(self).contains(word)
    }

    /// English keeps `'` inside words ("don't" is one token).
    pub fn english_delimiters(self) -> bool {
        self == Language::English
    }

    /// Turkish folds `I` to dotless `ı` and `İ` to `i`.
    pub fn turkish_case(self) -> bool {
        self == Language::Turkish
    }
}

fn stemmer(a: Algorithm) -> &'static Stemmer {
    static ALL: OnceLock<Vec<(Algorithm, Stemmer)>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        [
            Algorithm::Danish,
            Algorithm::Dutch,
            Algorithm::English,
            Algorithm::Finnish,
            Algorithm::French,
            Algorithm::German,
            Algorithm::Hungarian,
            Algorithm::Italian,
            Algorithm::Norwegian,
            Algorithm::Portuguese,
            Algorithm::Romanian,
            Algorithm::Russian,
            Algorithm::Spanish,
            Algorithm::Swedish,
            Algorithm::Turkish,
        ]
        .into_iter()
        .map(|a| (a, Stemmer::create(a)))
        .collect()
    });
    // Every algorithm `Language::algorithm` returns is in the list above.
    &all.iter().find(|(x, _)| *x == a).unwrap_or(&all[2]).1
}

/// MongoDB's stop word lists (`stop_words_<language>.txt`, as MongoDB ships them); Romanian
/// and `none` have none.
fn stop_words(lang: Language) -> &'static HashSet<&'static str> {
    static SETS: OnceLock<Vec<(Language, HashSet<&'static str>)>> = OnceLock::new();
    static EMPTY: OnceLock<HashSet<&'static str>> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        [
            (Language::Danish, include_str!("stop_words/danish.txt")),
            (Language::Dutch, include_str!("stop_words/dutch.txt")),
            (Language::English, include_str!("stop_words/english.txt")),
            (Language::Finnish, include_str!("stop_words/finnish.txt")),
            (Language::French, include_str!("stop_words/french.txt")),
            (Language::German, include_str!("stop_words/german.txt")),
            (
                Language::Hungarian,
                include_str!("stop_words/hungarian.txt"),
            ),
            (Language::Italian, include_str!("stop_words/italian.txt")),
            (
                Language::Norwegian,
                include_str!("stop_words/norwegian.txt"),
            ),
            (
                Language::Portuguese,
                include_str!("stop_words/portuguese.txt"),
            ),
            (Language::Russian, include_str!("stop_words/russian.txt")),
            (Language::Spanish, include_str!("stop_words/spanish.txt")),
            (Language::Swedish, include_str!("stop_words/swedish.txt")),
            (Language::Turkish, include_str!("stop_words/turkish.txt")),
        ]
        .into_iter()
        .map(|(l, text)| (l, text.split_whitespace().collect()))
        .collect()
    });
    sets.iter()
        .find(|(l, _)| *l == lang)
        .map(|(_, s)| s)
        .unwrap_or_else(|| EMPTY.get_or_init(HashSet::new))
}
