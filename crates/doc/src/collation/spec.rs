//! The collation document: its fields as MongoDB's IDL parser reads them (`Collation` in
//! `basic_types.idl`, context `collation`), and the fully resolved spec MongoDB prints.

use crate::compare::{bson_num, type_name};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// The ICU version MongoDB reports in every resolved spec; a spec naming another one fails.
pub const ICU_VERSION: &str = "57.1";

/// Where IDL errors say the field lives (`BSON field 'collation.strength' ...`).
const CONTEXT: &str = "collation";

/// Sort order of case differences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaseFirst {
    Upper,
    Lower,
    Off,
}

/// Whether whitespace and punctuation are base characters (`non-ignorable`) or ignored
/// below quaternary strength (`shifted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alternate {
    NonIgnorable,
    Shifted,
}

/// Up to which characters `alternate: "shifted"` ignores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaxVariable {
    Punct,
    Space,
}

/// A fully resolved collation: every option set, the locale's defaults filled in. This is
/// what MongoDB prints in `listIndexes`, `explain` and collection options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollationSpec {
    pub locale: String,
    pub case_level: bool,
    pub case_first: CaseFirst,
    /// 1 (primary) through 5 (identical).
    pub strength: u8,
    pub numeric_ordering: bool,
    pub alternate: Alternate,
    pub max_variable: MaxVariable,
    pub normalization: bool,
    pub backwards: bool,
    pub version: String,
}

impl CollationSpec {
    /// The spec as MongoDB serializes it, fields in MongoDB's order.
    pub fn to_document(&self) -> Document {
        doc! {
            "locale": self.locale.as_str(),
            "caseLevel": self.case_level,
            "caseFirst": self.case_first.name(),
            "strength": i32::from(self.strength),
            "numericOrdering": self.numeric_ordering,
            "alternate": self.alternate.name(),
            "maxVariable": self.max_variable.name(),
            "normalization": self.normalization,
            "backwards": self.backwards,
            "version": self.version.as_str(),
        }
    }
}

impl CaseFirst {
    pub fn name(self) -> &'static str {
        match self {
            CaseFirst::Upper => "upper",
            CaseFirst::Lower => "lower",
            CaseFirst::Off => "off",
        }
    }

    fn parse(s: &str) -> Option<CaseFirst> {
        [CaseFirst::Upper, CaseFirst::Lower, CaseFirst::Off]
            .into_iter()
            .find(|v| v.name() == s)
    }
}

impl Alternate {
    pub fn name(self) -> &'static str {
        match self {
            Alternate::NonIgnorable => "non-ignorable",
            Alternate::Shifted => "shifted",
        }
    }

    fn parse(s: &str) -> Option<Alternate> {
        [Alternate::NonIgnorable, Alternate::Shifted]
            .into_iter()
            .find(|v| v.name() == s)
    }
}

impl MaxVariable {
    pub fn name(self) -> &'static str {
        match self {
            MaxVariable::Punct => "punct",
            MaxVariable::Space => "space",
        }
    }

    fn parse(s: &str) -> Option<MaxVariable> {
        [MaxVariable::Punct, MaxVariable::Space]
            .into_iter()
            .find(|v| v.name() == s)
    }
}

/// The fields a collation document sets, after MongoDB's IDL checks. `Some` means the field
/// is present and overrides the locale's default; a null or undefined value is present with
/// the IDL default (as MongoDB's `spec.hasField` sees it), except for `locale` and `version`,
/// where null counts as absent.
#[derive(Debug, Default)]
pub(super) struct Requested {
    pub locale: String,
    pub case_level: Option<bool>,
    pub case_first: Option<CaseFirst>,
    /// Range-checked (0..=5) but not yet checked against the strength enum: MongoDB does that
    /// after validating the locale.
    pub strength: Option<i32>,
    pub numeric_ordering: Option<bool>,
    pub alternate: Option<Alternate>,
    pub max_variable: Option<MaxVariable>,
    pub normalization: Option<bool>,
    pub backwards: Option<bool>,
    pub version: Option<String>,
}

impl Requested {
    /// Reads the fields in document order; the first bad field is the error, then a missing
    /// `locale`.
    pub fn parse(spec: &Document) -> Result<Requested> {
        let mut req = Requested::default();
        let mut locale = None;
        for (key, value) in spec {
            match key.as_str() {
                "locale" => locale = string_field(key, value)?,
                "caseLevel" => req.case_level = Some(bool_field(key, value)?.unwrap_or(false)),
                "caseFirst" => {
                    let v = enum_field(key, value, CaseFirst::parse)?;
                    req.case_first = Some(v.unwrap_or(CaseFirst::Off));
                }
                "strength" => req.strength = Some(strength_field(value)?.unwrap_or(3)),
                "numericOrdering" => {
                    req.numeric_ordering = Some(bool_field(key, value)?.unwrap_or(false))
                }
                "alternate" => {
                    let v = enum_field(key, value, Alternate::parse)?;
                    req.alternate = Some(v.unwrap_or(Alternate::NonIgnorable));
                }
                "maxVariable" => {
                    let v = enum_field(key, value, MaxVariable::parse)?;
                    req.max_variable = Some(v.unwrap_or(MaxVariable::Punct));
                }
                "normalization" => {
                    req.normalization = Some(bool_field(key, value)?.unwrap_or(false))
                }
                "backwards" => req.backwards = Some(optional_bool_field(key, value)?),
                "version" => req.version = string_field(key, value)?,
                _ => return Err(unknown_field(key)),
            }
        }
        req.locale = locale.ok_or_else(|| missing_field("locale"))?;
        Ok(req)
    }
}

/// A string field; null and undefined read as absent (IDL skips them).
fn string_field(key: &str, value: &Bson) -> Result<Option<String>> {
    match value {
        Bson::String(s) => Ok(Some(s.clone())),
        Bson::Null | Bson::Undefined => Ok(None),
        other => Err(wrong_type(key, other, "string")),
    }
}

/// A bool field; null and undefined read as absent (IDL skips them).
fn bool_field(key: &str, value: &Bson) -> Result<Option<bool>> {
    match value {
        Bson::Boolean(b) => Ok(Some(*b)),
        Bson::Null | Bson::Undefined => Ok(None),
        other => Err(wrong_type(key, other, "bool")),
    }
}

/// A string enum field: a string naming one of the values.
fn enum_field<T>(key: &str, value: &Bson, parse: fn(&str) -> Option<T>) -> Result<Option<T>> {
    let Some(s) = string_field(key, value)? else {
        return Ok(None);
    };
    parse(&s).map(Some).ok_or_else(|| bad_enum_value(key, &s))
}

/// `backwards` is an IDL `optionalBool`: any present value must be a bool, null included.
fn optional_bool_field(key: &str, value: &Bson) -> Result<bool> {
    match value {
        Bson::Boolean(b) => Ok(*b),
        other => Err(Error::type_mismatch(format!(
            "Field '{key}' should be a boolean value, but found: {}",
            type_name(other)
        ))),
    }
}

/// `strength` is an IDL `safeInt` (any number, truncated and clamped to int32) validated to
/// lie in 0..=5.
fn strength_field(value: &Bson) -> Result<Option<i32>> {
    let n = match value {
        Bson::Null | Bson::Undefined => return Ok(None),
        Bson::Int32(i) => *i,
        Bson::Int64(i) => clamp_to_i32(*i),
        // `as` truncates toward zero, saturates, and maps NaN to 0: BSONElement::safeNumberLong.
        other => match bson_num(other) {
            Some(num) => clamp_to_i32(num.to_f64() as i64),
            None => {
                return Err(Error::type_mismatch(format!(
                    "BSON field '{CONTEXT}.strength' is the wrong type '{}', expected types \
                     '[long, int, decimal, double]'",
                    type_name(other)
                )))
            }
        },
    };
    if n < 0 {
        return Err(comparison_error("strength", ">=", 0, n));
    }
    if n > 5 {
        return Err(comparison_error("strength", "<=", 5, n));
    }
    Ok(Some(n))
}

fn clamp_to_i32(n: i64) -> i32 {
    n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

fn wrong_type(key: &str, value: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{CONTEXT}.{key}' is the wrong type '{}', expected type '{expected}'",
        type_name(value)
    ))
}

fn unknown_field(key: &str) -> Error {
    Error::new(
        ErrorCode::Location(40415),
        format!("BSON field '{CONTEXT}.{key}' is an unknown field."),
    )
}

fn missing_field(key: &str) -> Error {
    Error::new(
        ErrorCode::Location(40414),
        format!("BSON field '{CONTEXT}.{key}' is missing but a required field"),
    )
}

/// IDL's error for a value outside an enum (`Enumeration value 'x' for field ...`).
pub(super) fn bad_enum_value(key: &str, value: &str) -> Error {
    Error::bad_value(format!(
        "Enumeration value '{value}' for field '{CONTEXT}.{key}' is not a valid value."
    ))
}

fn comparison_error(key: &str, op: &str, bound: i32, actual: i32) -> Error {
    Error::new(
        ErrorCode::Location(51024),
        format!("BSON field '{CONTEXT}.{key}' value must be {op} {bound}, actual value '{actual}'"),
    )
}
