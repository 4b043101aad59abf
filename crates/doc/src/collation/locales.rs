//! MongoDB's collation locale ids and the ICU4X locales that implement them.
//!
//! MongoDB accepts exactly the ids ICU 57 recognizes without canonicalizing them; its manual
//! lists them under "Collation Locales and Default Parameters". Ids are matched exactly (case
//! included), as MongoDB does; a near miss gets MongoDB's "Did you mean" hint.

use icu_locale_core::Locale;

/// The locale ids MongoDB accepts (its manual's table, with each listed `@collation=` variant).
const SUPPORTED: &[&str] = &[
    "af",
    "am",
    "ar",
    "ar@collation=compat",
    "as",
    "az",
    "az@collation=search",
    "be",
    "bg",
    "bn",
    "bn@collation=traditional",
    "bo",
    "bs",
    "bs@collation=search",
    "bs_Cyrl",
    "ca",
    "ca@collation=search",
    "chr",
    "cs",
    "cs@collation=search",
    "cy",
    "da",
    "da@collation=search",
    "de",
    "de@collation=eor",
    "de@collation=phonebook",
    "de@collation=search",
    "de_AT",
    "de_AT@collation=phonebook",
    "dsb",
    "dz",
    "ee",
    "el",
    "en",
    "en_US",
    "en_US_POSIX",
    "eo",
    "es",
    "es@collation=search",
    "es@collation=traditional",
    "et",
    "fa",
    "fa_AF",
    "fi",
    "fi@collation=search",
    "fi@collation=traditional",
    "fil",
    "fo",
    "fr",
    "fr_CA",
    "ga",
    "gl",
    "gl@collation=search",
    "gu",
    "ha",
    "haw",
    "he",
    "he@collation=search",
    "hi",
    "hr",
    "hr@collation=search",
    "hsb",
    "hu",
    "hy",
    "id",
    "ig",
    "is",
    "is@collation=search",
    "it",
    "ja",
    "ja@collation=unihan",
    "ka",
    "kk",
    "kl",
    "kl@collation=search",
    "km",
    "kn",
    "kn@collation=traditional",
    "ko",
    "ko@collation=search",
    "ko@collation=searchjl",
    "ko@collation=unihan",
    "kok",
    "ky",
    "lb",
    "lkt",
    "ln",
    "ln@collation=phonetic",
    "lo",
    "lt",
    "lv",
    "mk",
    "ml",
    "mn",
    "mr",
    "ms",
    "mt",
    "my",
    "nb",
    "nb@collation=search",
    "ne",
    "nl",
    "nn",
    "nn@collation=search",
    "om",
    "or",
    "pa",
    "pl",
    "ps",
    "pt",
    "ro",
    "ru",
    "se",
    "se@collation=search",
    "si",
    "si@collation=dictionary",
    "sk",
    "sk@collation=search",
    "sl",
    "smn",
    "smn@collation=search",
    "sq",
    "sr",
    "sr_Latn",
    "sr_Latn@collation=search",
    "sv",
    "sv@collation=reformed",
    "sv@collation=search",
    "sw",
    "ta",
    "te",
    "th",
    "to",
    "tr",
    "tr@collation=search",
    "ug",
    "uk",
    "ur",
    "vi",
    "vi@collation=traditional",
    "wae",
    "yi",
    "yo",
    "zh",
    "zh@collation=big5han",
    "zh@collation=gb2312han",
    "zh@collation=pinyin",
    "zh@collation=stroke",
    "zh@collation=unihan",
    "zh@collation=zhuyin",
    "zh_Hant",
    "zh_Hant@collation=pinyin",
    "zh_Hant@collation=stroke",
    "zu",
];

/// Locales whose ICU 57 tailoring turns full normalization on (what MongoDB reports as the
/// `normalization` default); every `search` collation does too.
const NORMALIZATION_ON: &[&str] = &[
    "as", "bn", "el", "fa", "fa_AF", "gu", "he", "hi", "km", "kn", "kok", "mr", "my", "or", "pa",
    "si", "ta", "te", "th", "vi",
];

/// Locales whose tailoring compares accents backwards (`[backwards 2]`).
const BACKWARDS_ON: &[&str] = &["fr_CA"];

/// The canonical id if MongoDB accepts `id` exactly.
pub(super) fn supported(id: &str) -> Option<&'static str> {
    SUPPORTED.iter().copied().find(|s| *s == id)
}

/// The id ICU would have fallen back to for an unaccepted `id` (MongoDB's "Did you mean"):
/// the same id in canonical form (case, `_` separators), or the nearest accepted parent.
/// None when only the root collation would match.
pub(super) fn suggestion(id: &str) -> Option<&'static str> {
    let id = id.replace('-', "_");
    let find = |cand: &str| {
        SUPPORTED
            .iter()
            .copied()
            .find(|s| s.eq_ignore_ascii_case(cand))
    };
    if let Some(s) = find(&id) {
        return Some(s);
    }
    let mut base = id.split('@').next().unwrap_or_default();
    while !base.is_empty() {
        if let Some(s) = find(base) {
            return Some(s);
        }
        base = base.rsplit_once('_').map_or("", |(head, _)| head);
    }
    None
}

/// The ICU4X locale implementing an accepted MongoDB id: `_` separators become BCP 47 `-`,
/// and `@collation=X` becomes `-u-co-X` with ICU4X's type name. Variants ICU4X ships no
/// data for (`search`, `searchjl`, `big5han`, `gb2312han`, `phonetic`, `reformed`) use the
/// language's standard collation.
pub(super) fn icu_locale(id: &str) -> Option<Locale> {
    let (base, keywords) = match id.split_once('@') {
        Some((base, kw)) => (base, Some(kw)),
        None => (id, None),
    };
    let mut tag = base.replace('_', "-").replace("POSIX", "posix");
    if let Some(co) = keywords.and_then(|kw| kw.strip_prefix("collation=")) {
        if let Some(icu_type) = icu_collation_type(co) {
            tag.push_str("-u-co-");
            tag.push_str(icu_type);
        }
    }
    Locale::try_from_str(&tag).ok()
}

/// ICU4X's (BCP 47) name of an ICU collation type it has data for.
fn icu_collation_type(name: &str) -> Option<&'static str> {
    Some(match name {
        "compat" => "compat",
        "dictionary" => "dict",
        "eor" => "eor",
        "phonebook" => "phonebk",
        "pinyin" => "pinyin",
        "stroke" => "stroke",
        "traditional" => "trad",
        "unihan" => "unihan",
        "zhuyin" => "zhuyin",
        _ => return None,
    })
}

/// MongoDB's default `normalization` for an accepted id.
pub(super) fn default_normalization(id: &str) -> bool {
    let (base, keywords) = id.split_once('@').unwrap_or((id, ""));
    keywords == "collation=search" || NORMALIZATION_ON.contains(&base)
}

/// MongoDB's default `backwards` for an accepted id.
pub(super) fn default_backwards(id: &str) -> bool {
    BACKWARDS_ON.contains(&id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_id_maps_to_an_icu_locale() {
        for id in SUPPORTED {
            assert!(icu_locale(id).is_some(), "{id}");
        }
    }

    #[test]
    fn suggestions() {
        let cases: &[(&str, Option<&str>)] = &[
            ("EN_US", Some("en_US")),
            ("en_GB", Some("en")),
            ("en_US@collation=phonebook", Some("en_US")),
            ("zh_Blah", Some("zh")),
            ("garbage", None),
            ("xx_US", None),
            ("root", None),
        ];
        for (id, want) in cases {
            assert_eq!(suggestion(id), *want, "{id}");
        }
    }

    #[test]
    fn locale_defaults() {
        assert!(default_normalization("vi"));
        assert!(default_normalization("de@collation=search"));
        assert!(!default_normalization("en_US"));
        assert!(default_backwards("fr_CA"));
        assert!(!default_backwards("fr"));
    }
}
