//! MongoDB's Unicode text tokenizer (`textIndexVersion` 3): words are the runs between
//! delimiters (white space, dashes, quotation marks, terminal and syntax punctuation; `'`
//! is a letter in English), lowercased, stop words dropped, stemmed, then stripped of
//! diacritics. Case- and diacritic-sensitive variants serve `$caseSensitive` and
//! `$diacriticSensitive` queries.

use super::language::Language;
use unicode_normalization::UnicodeNormalization;

/// What a tokenizer run produces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenOptions {
    pub filter_stop_words: bool,
    /// Keep the word's case (the stop word check still sees it lowercased).
    pub case_sensitive: bool,
    /// Keep diacritics.
    pub diacritic_sensitive: bool,
}

impl TokenOptions {
    pub const INDEX: TokenOptions = TokenOptions {
        filter_stop_words: true,
        case_sensitive: false,
        diacritic_sensitive: false,
    };
}

/// Whether `c` separates words (MongoDB's generated delimiter list: the White_Space, Dash,
/// Hyphen, Quotation_Mark, Terminal_Punctuation, Pattern_Syntax and STerm code points).
pub fn is_delimiter(c: char, english: bool) -> bool {
    if c == '\'' {
        return !english;
    }
    if c.is_ascii() {
        return c.is_ascii_whitespace()
            || c == '\u{0b}'
            || (c.is_ascii_punctuation() && c != '_')
            || c.is_ascii_control() && c.is_whitespace();
    }
    if c.is_whitespace() {
        return true;
    }
    matches!(c as u32,
        0x00A1..=0x00A7 | 0x00A9 | 0x00AB | 0x00AC | 0x00AE | 0x00B0 | 0x00B1 | 0x00B6
        | 0x00BB | 0x00BF | 0x00D7 | 0x00F7
        | 0x037E | 0x0387 | 0x0589 | 0x058A | 0x05BE | 0x05C3 | 0x060C | 0x061B | 0x061F
        | 0x06D4 | 0x0964 | 0x0965 | 0x1806 | 0x2010..=0x2027 | 0x2030..=0x205E
        | 0x2190..=0x245F | 0x2500..=0x2775 | 0x2794..=0x2BFF | 0x2E00..=0x2E7F
        | 0x3001..=0x3003 | 0x3008..=0x3020 | 0x3030 | 0x30A0 | 0xFD3E | 0xFD3F
        | 0xFE10..=0xFE19 | 0xFE30..=0xFE52 | 0xFE54..=0xFE63 | 0xFE68 | 0xFE6A | 0xFE6B
        | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF3D | 0xFF3F | 0xFF5B..=0xFF65)
}

/// Simple (one code point to one) lowercase mapping; Turkish maps `I` to `ı`.
pub fn lower_char(c: char, turkish: bool) -> char {
    match c {
        'I' if turkish => 'ı',
        '\u{130}' => 'i',
        c if c.is_ascii() => c.to_ascii_lowercase(),
        c => {
            let mut l = c.to_lowercase();
            match (l.next(), l.next()) {
                (Some(one), None) => one,
                _ => c,
            }
        }
    }
}

pub fn to_lower(s: &str, turkish: bool) -> String {
    s.chars().map(|c| lower_char(c, turkish)).collect()
}

fn is_diacritic_mark(c: char) -> bool {
    matches!(c as u32,
        0x0300..=0x036F | 0x0483..=0x0489 | 0x0591..=0x05BD | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// `s` without diacritics: each code point decomposed and its combining marks dropped.
pub fn strip_diacritics(s: &str) -> String {
    if s.is_ascii() {
        return s.to_string();
    }
    s.chars()
        .flat_map(|c| {
            let mut buf = [0u8; 4];
            let one: &str = c.encode_utf8(&mut buf);
            one.nfd()
                .filter(|d| !is_diacritic_mark(*d))
                .collect::<Vec<char>>()
        })
        .collect()
}

/// The words of `text` (one per occurrence) as the tokenizer of `lang` produces them.
pub fn tokens(text: &str, lang: Language, opts: TokenOptions) -> Vec<String> {
    let english = lang.english_delimiters();
    let turkish = lang.turkish_case();
    let mut out = Vec::new();
    for raw in text
        .split(|c| is_delimiter(c, english))
        .filter(|w| !w.is_empty())
    {
        let lower = to_lower(raw, turkish);
        if opts.filter_stop_words && lang.is_stop_word(&lower) {
            continue;
        }
        let word = if opts.case_sensitive {
            lang.stem(raw)
        } else {
            lang.stem(&lower)
        };
        out.push(if opts.diacritic_sensitive {
            word
        } else {
            strip_diacritics(&word)
        });
    }
    out
}

/// Whether `phrase` occurs in `text` (MongoDB's Unicode phrase matcher: both sides case
/// folded unless case-sensitive and stripped of diacritics unless diacritic-sensitive).
pub fn phrase_matches(
    phrase: &str,
    text: &str,
    lang: Language,
    case_sensitive: bool,
    diacritic_sensitive: bool,
) -> bool {
    let prepare = |s: &str| {
        let s = if case_sensitive {
            s.to_string()
        } else {
            to_lower(s, lang.turkish_case())
        };
        if diacritic_sensitive {
            s
        } else {
            strip_diacritics(&s)
        }
    };
    prepare(text).contains(&prepare(phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_words_stems_and_stop_words() {
        let t = tokens(
            "The quick brown foxes don't JUMP-over café's",
            Language::English,
            TokenOptions::INDEX,
        );
        assert_eq!(t, vec!["quick", "brown", "fox", "jump", "cafe"]);
        let none = tokens("The Running dogs", Language::None, TokenOptions::INDEX);
        assert_eq!(none, vec!["the", "running", "dogs"]);
    }

    #[test]
    fn sensitive_variants() {
        let opts = TokenOptions {
            filter_stop_words: false,
            case_sensitive: true,
            diacritic_sensitive: true,
        };
        assert_eq!(
            tokens("Café Running", Language::English, opts),
            vec!["Café", "Run"]
        );
        assert!(phrase_matches(
            "CAFE au",
            "le café au lait",
            Language::French,
            false,
            false
        ));
        assert!(!phrase_matches(
            "CAFE au",
            "le café au lait",
            Language::French,
            true,
            false
        ));
        assert!(!phrase_matches(
            "cafe au",
            "le café au lait",
            Language::French,
            false,
            true
        ));
    }
}
