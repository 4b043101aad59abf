//! Collation: locale-aware string comparison as MongoDB does it with ICU.
//!
//! A [`Collation`] is built once from a collation document (`{locale: "en", strength: 2}`)
//! and then compares strings, or turns them into sort keys whose byte order is the collation
//! order. `{locale: "simple"}` parses to `None`: the simple binary comparison every other
//! function in this crate does when given no collation.
//!
//! The comparison is ICU4X's implementation of the Unicode Collation Algorithm with CLDR
//! tailorings. It matches MongoDB's ICU 57 except where CLDR changed since, and in three
//! knowingly unsupported corners: ICU4X ships no data for the `search`, `searchjl`,
//! `big5han`, `gb2312han`, `phonetic` and `reformed` collation variants (those ids compare
//! like their language's standard collation); `backwards` cannot be switched away from the
//! locale's default (only `fr_CA` compares accents backwards); and ICU4X always normalizes,
//! which `normalization: false` in ICU only skips for text already in FCD form.

mod locales;
mod spec;

pub use spec::{Alternate, CaseFirst, CollationSpec, MaxVariable, ICU_VERSION};

use bson::{Bson, Document};
use icu_collator::options::{
    AlternateHandling, CaseLevel, CollatorOptions, MaxVariable as IcuMaxVariable, Strength,
};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::{Collator, CollatorBorrowed, CollatorPreferences};
use nidus_common::{shell, Error, ErrorCode, Result};
use spec::Requested;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A parsed, non-simple collation. Cheap to clone (shared); the ICU collator is built once,
/// when parsing.
#[derive(Clone)]
pub struct Collation(Arc<Inner>);

struct Inner {
    spec: CollationSpec,
    collator: CollatorBorrowed<'static>,
}

impl Collation {
    /// Parses and validates a collation document as MongoDB's ICU collator factory does.
    /// `Ok(None)` is the simple binary comparison (`locale: "simple"`; its other fields are
    /// type-checked and then ignored, as in MongoDB).
    pub fn parse(spec: &Document) -> Result<Option<Collation>> {
        let req = Requested::parse(spec)?;
        if req.locale.contains('\0') {
            return Err(Error::bad_value(format!(
                "Field 'locale' cannot contain null byte. Collation spec: {}",
                print(spec)
            )));
        }
        if req.locale == "simple" {
            return Ok(None);
        }
        let locale = validate_locale(spec, &req.locale)?;
        let strength = req.strength.map(checked_strength).transpose()?;
        check_version(spec, req.version.as_deref())?;
        let collator = build_collator(spec, locale, &req, strength)?;
        let resolved = resolve(locale, &req, strength, &collator);
        validate_combination(spec, &resolved)?;
        Ok(Some(Collation(Arc::new(Inner {
            spec: resolved,
            collator,
        }))))
    }

    /// The fully resolved spec (locale defaults filled in).
    pub fn spec(&self) -> &CollationSpec {
        &self.0.spec
    }

    /// The spec MongoDB prints in `listIndexes`, `explain` and collection options.
    pub fn to_document(&self) -> Document {
        self.0.spec.to_document()
    }

    /// Compares two strings under this collation.
    pub fn compare_str(&self, a: &str, b: &str) -> Ordering {
        self.0.collator.compare(a, b)
    }

    /// The collation key of `s`: for any strings, `sort_key(a).cmp(&sort_key(b))` equals
    /// `compare_str(a, b)`, so equal-under-collation strings have equal keys (usable for
    /// hashing and for index keys). Keys depend on the ICU4X data version; never persist
    /// them without a way to rebuild.
    pub fn sort_key(&self, s: &str) -> Vec<u8> {
        let mut key = Vec::new();
        let Ok(()) = self.0.collator.write_sort_key_to(s, &mut key);
        key
    }
}

impl PartialEq for Collation {
    /// Two collations are the same when their resolved specs are (MongoDB's
    /// `CollatorInterface::collatorsMatch`).
    fn eq(&self, other: &Collation) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.spec == other.0.spec
    }
}

impl Eq for Collation {}

impl fmt::Debug for Collation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Collation").field(&self.0.spec).finish()
    }
}

/// A spec as MongoDB prints it inside error messages.
fn print(spec: &Document) -> String {
    shell::format(&Bson::Document(spec.clone()))
}

/// The accepted canonical id for `id`, or MongoDB's error for an unknown one.
fn validate_locale(spec: &Document, id: &str) -> Result<&'static str> {
    if id.is_empty() {
        return Err(Error::bad_value(format!(
            "Field 'locale' cannot be the empty string in: {}",
            print(spec)
        )));
    }
    if let Some(found) = locales::supported(id) {
        return Ok(found);
    }
    let mut message = format!("Field 'locale' is invalid in: {}", print(spec));
    if let Some(hint) = locales::suggestion(id) {
        message.push_str(&format!(". Did you mean '{hint}'?"));
    }
    Err(Error::bad_value(message))
}

/// The requested strength as a strength level: 0 passes the IDL range check but is no level.
fn checked_strength(n: i32) -> Result<u8> {
    match u8::try_from(n) {
        Ok(level @ 1..=5) => Ok(level),
        _ => Err(spec::bad_enum_value("strength", &n.to_string())),
    }
}

fn check_version(spec: &Document, version: Option<&str>) -> Result<()> {
    match version {
        Some(v) if v != ICU_VERSION => Err(Error::new(
            ErrorCode::IncompatibleCollationVersion,
            format!(
                "Requested collation version {v} but the only available collator version was \
                 {ICU_VERSION}. Requested collation spec: {}",
                print(spec)
            ),
        )),
        _ => Ok(()),
    }
}

/// The ICU4X collator for an accepted locale id with the requested options; options left
/// out keep the locale's defaults.
fn build_collator(
    spec: &Document,
    locale: &str,
    req: &Requested,
    strength: Option<u8>,
) -> Result<CollatorBorrowed<'static>> {
    let icu_locale = locales::icu_locale(locale)
        .ok_or_else(|| Error::internal(format!("no ICU locale for collation locale {locale}")))?;
    let mut prefs = CollatorPreferences::from(&icu_locale);
    if let Some(case_first) = req.case_first {
        prefs.case_first = Some(match case_first {
            CaseFirst::Upper => CollationCaseFirst::Upper,
            CaseFirst::Lower => CollationCaseFirst::Lower,
            CaseFirst::Off => CollationCaseFirst::False,
        });
    }
    if let Some(numeric) = req.numeric_ordering {
        prefs.numeric_ordering = Some(if numeric {
            CollationNumericOrdering::True
        } else {
            CollationNumericOrdering::False
        });
    }
    let mut options = CollatorOptions::default();
    options.strength = strength.map(icu_strength);
    options.alternate_handling = req.alternate.map(|a| match a {
        Alternate::NonIgnorable => AlternateHandling::NonIgnorable,
        Alternate::Shifted => AlternateHandling::Shifted,
    });
    options.max_variable = req.max_variable.map(|m| match m {
        MaxVariable::Punct => IcuMaxVariable::Punctuation,
        MaxVariable::Space => IcuMaxVariable::Space,
    });
    options.case_level = req
        .case_level
        .map(|on| if on { CaseLevel::On } else { CaseLevel::Off });
    Collator::try_new(prefs, options).map_err(|e| {
        Error::new(
            ErrorCode::OperationFailed,
            format!(
                "Failed to create collator: {e}. Collation spec: {}",
                print(spec)
            ),
        )
    })
}

fn icu_strength(level: u8) -> Strength {
    match level {
        1 => Strength::Primary,
        2 => Strength::Secondary,
        3 => Strength::Tertiary,
        4 => Strength::Quaternary,
        _ => Strength::Identical,
    }
}

fn strength_level(strength: Strength) -> u8 {
    match strength {
        Strength::Primary => 1,
        Strength::Secondary => 2,
        Strength::Tertiary => 3,
        Strength::Quaternary => 4,
        _ => 5,
    }
}

/// The full spec: each requested option, else the locale's default (ICU4X's resolved value,
/// or MongoDB's table where ICU4X has no such option).
fn resolve(
    locale: &str,
    req: &Requested,
    strength: Option<u8>,
    collator: &CollatorBorrowed<'static>,
) -> CollationSpec {
    let icu = collator.resolved_options();
    CollationSpec {
        locale: locale.to_string(),
        case_level: req.case_level.unwrap_or(icu.case_level == CaseLevel::On),
        case_first: req.case_first.unwrap_or(match icu.case_first {
            CollationCaseFirst::Upper => CaseFirst::Upper,
            CollationCaseFirst::Lower => CaseFirst::Lower,
            _ => CaseFirst::Off,
        }),
        strength: strength.unwrap_or_else(|| strength_level(icu.strength)),
        numeric_ordering: req
            .numeric_ordering
            .unwrap_or(icu.numeric == CollationNumericOrdering::True),
        alternate: req.alternate.unwrap_or(match icu.alternate_handling {
            AlternateHandling::Shifted => Alternate::Shifted,
            _ => Alternate::NonIgnorable,
        }),
        max_variable: req.max_variable.unwrap_or(match icu.max_variable {
            IcuMaxVariable::Space => MaxVariable::Space,
            _ => MaxVariable::Punct,
        }),
        normalization: req
            .normalization
            .unwrap_or_else(|| locales::default_normalization(locale)),
        backwards: req
            .backwards
            .unwrap_or_else(|| locales::default_backwards(locale)),
        version: ICU_VERSION.to_string(),
    }
}

/// MongoDB's checks on option combinations that ICU would silently ignore, made on the
/// resolved spec (so a locale default counts as if requested).
fn validate_combination(spec: &Document, resolved: &CollationSpec) -> Result<()> {
    if resolved.backwards && resolved.strength == 1 {
        return Err(Error::bad_value(format!(
            "'backwards' is invalid with 'strength' of 1 in: {}",
            print(spec)
        )));
    }
    if resolved.case_first != CaseFirst::Off && !resolved.case_level && resolved.strength <= 2 {
        return Err(Error::bad_value(format!(
            "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 \
             in: {}",
            print(spec)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
