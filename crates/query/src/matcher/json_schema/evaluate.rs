//! Evaluates a parsed schema against one value, reading raw BSON in place.
//!
//! A schema applies to a value as a whole: `properties` looks one level into an object and
//! an array is a value of its own (no implicit traversal of its elements). A property name
//! with a dot is a path into embedded documents (as MongoDB reads `required: ["a.b"]`); when
//! such a path reaches several values (through arrays) the property holds if one of them
//! satisfies the whole subschema.

use super::equality::unordered_eq;
use super::keywords::{
    Additional, AnyKeyword, ArrayKeyword, Dependency, Keyword, NumberKeyword, ObjectKeyword,
    Schema, StringKeyword,
};
use crate::matcher::comparison::cmp_matches;
use crate::matcher::CmpOp;
use bson::{RawArray, RawBsonRef, RawDocument};
use nidus_doc::compare::raw_num;
use nidus_doc::path::{walk, FieldPath};

impl Schema {
    /// True when `v` has one of the schema's types (if any) and satisfies every keyword.
    pub fn matches(&self, v: RawBsonRef) -> bool {
        self.types.as_ref().is_none_or(|t| t.matches(v))
            && self.keywords.iter().all(|k| k.matches(v))
    }
}

impl Keyword {
    /// True when `v` satisfies the keyword; always true for a value of a type the keyword
    /// does not restrict.
    pub fn matches(&self, v: RawBsonRef) -> bool {
        match (self, v) {
            (Keyword::Number(k), _) if raw_num(v).is_some() => k.matches(v),
            (Keyword::String(k), RawBsonRef::String(s)) => k.matches(s),
            (Keyword::Array(k), RawBsonRef::Array(a)) => k.matches(a),
            (Keyword::Object(k), RawBsonRef::Document(d)) => k.matches(d),
            (Keyword::Any(k), _) => k.matches(v),
            _ => true,
        }
    }
}

impl NumberKeyword {
    fn matches(&self, v: RawBsonRef) -> bool {
        match self {
            NumberKeyword::Minimum { bound, exclusive } => {
                let op = if *exclusive { CmpOp::Gt } else { CmpOp::Gte };
                cmp_matches(op, bound, Some(v))
            }
            NumberKeyword::Maximum { bound, exclusive } => {
                let op = if *exclusive { CmpOp::Lt } else { CmpOp::Lte };
                cmp_matches(op, bound, Some(v))
            }
            NumberKeyword::MultipleOf(divisor) => super::multiple_of::is_multiple(v, divisor),
        }
    }
}

impl StringKeyword {
    fn matches(&self, s: &str) -> bool {
        match self {
            StringKeyword::MinLength(n) => s.chars().count() as u64 >= *n,
            StringKeyword::MaxLength(n) => s.chars().count() as u64 <= *n,
            StringKeyword::Pattern(re) => re.is_match(s),
        }
    }
}

/// The elements of an array, stopping at the first malformed one.
pub(super) fn elements(a: &RawArray) -> impl Iterator<Item = RawBsonRef<'_>> {
    a.into_iter().map_while(|r| r.ok())
}

impl ArrayKeyword {
    fn matches(&self, a: &RawArray) -> bool {
        match self {
            ArrayKeyword::MinItems(n) => elements(a).count() as u64 >= *n,
            ArrayKeyword::MaxItems(n) => elements(a).count() as u64 <= *n,
            ArrayKeyword::UniqueItems => first_duplicate(a).is_none(),
            ArrayKeyword::Items(s) => elements(a).all(|e| s.matches(e)),
            ArrayKeyword::TupleItems { items, additional } => {
                elements(a).enumerate().all(|(i, e)| match items.get(i) {
                    Some(s) => s.matches(e),
                    None => additional.as_ref().is_none_or(|x| x.matches(e)),
                })
            }
        }
    }
}

/// The first element equal to an earlier one. Pairwise comparison: arrays under
/// `uniqueItems` are small, and the unordered equality has no total order to sort by.
pub(super) fn first_duplicate(a: &RawArray) -> Option<RawBsonRef<'_>> {
    let items: Vec<RawBsonRef> = elements(a).collect();
    items
        .iter()
        .enumerate()
        .find(|(i, x)| items[..*i].iter().any(|y| unordered_eq(**x, *y)))
        .map(|(_, x)| *x)
}

impl Additional {
    fn matches(&self, v: RawBsonRef) -> bool {
        match self {
            Additional::Allowed(b) => *b,
            Additional::Schema(s) => s.matches(v),
        }
    }
}

/// The values of property `name` in `obj`: the field itself, or for a dotted name the values
/// its path reaches (through embedded documents and arrays, arrays at the end kept whole).
/// A plain name, the usual case, allocates nothing.
pub(super) fn property_values<'a>(
    obj: &'a RawDocument,
    name: &str,
) -> impl Iterator<Item = RawBsonRef<'a>> {
    let (field, reached) = if name.contains('.') {
        let mut reached = Vec::new();
        walk(obj, &FieldPath::parse(name), false, &mut |item| {
            reached.extend(item.value);
            false
        });
        (None, reached)
    } else {
        (obj.get(name).ok().flatten(), Vec::new())
    };
    field.into_iter().chain(reached)
}

pub(super) fn has_property(obj: &RawDocument, name: &str) -> bool {
    property_values(obj, name).next().is_some()
}

/// The fields of an object, stopping at the first malformed one.
pub(super) fn fields(d: &RawDocument) -> impl Iterator<Item = (&str, RawBsonRef<'_>)> {
    d.into_iter().map_while(|r| r.ok())
}

impl ObjectKeyword {
    fn matches(&self, d: &RawDocument) -> bool {
        match self {
            ObjectKeyword::Required(names) => names.iter().all(|n| has_property(d, n)),
            ObjectKeyword::Properties(props) => props.iter().all(|(name, s)| {
                let mut values = property_values(d, name).peekable();
                values.peek().is_none() || values.any(|v| s.matches(v))
            }),
            ObjectKeyword::AllowedProperties {
                named,
                patterns,
                additional,
            } => fields(d).all(|(k, v)| field_allowed(named, patterns, additional, k, v)),
            ObjectKeyword::MinProperties(n) => fields(d).count() as u64 >= *n,
            ObjectKeyword::MaxProperties(n) => fields(d).count() as u64 <= *n,
            ObjectKeyword::Dependencies(deps) => deps
                .iter()
                .all(|(name, dep)| !has_property(d, name) || dep.holds(d)),
        }
    }
}

/// One field under `patternProperties`/`additionalProperties`: it satisfies every pattern
/// schema whose regex finds its name, and `additional` when no pattern does and
/// `properties` does not name it.
fn field_allowed(
    named: &[String],
    patterns: &[(crate::matcher::RegexPred, Schema)],
    additional: &Additional,
    name: &str,
    v: RawBsonRef,
) -> bool {
    let mut matched_pattern = false;
    for (re, s) in patterns {
        if re.is_match(name) {
            matched_pattern = true;
            if !s.matches(v) {
                return false;
            }
        }
    }
    matched_pattern || named.iter().any(|n| n == name) || additional.matches(v)
}

impl Dependency {
    pub(super) fn holds(&self, d: &RawDocument) -> bool {
        match self {
            Dependency::Properties(names) => names.iter().all(|n| has_property(d, n)),
            Dependency::Schema(s) => s.matches(RawBsonRef::Document(d)),
        }
    }
}

impl AnyKeyword {
    fn matches(&self, v: RawBsonRef) -> bool {
        match self {
            AnyKeyword::AllOf(ss) => ss.iter().all(|s| s.matches(v)),
            AnyKeyword::AnyOf(ss) => ss.iter().any(|s| s.matches(v)),
            AnyKeyword::OneOf(ss) => ss.iter().filter(|s| s.matches(v)).take(2).count() == 1,
            AnyKeyword::Not(s) => !s.matches(v),
            AnyKeyword::Enum(values) => values.iter().any(|e| unordered_eq(v, e.as_raw_bson_ref())),
        }
    }
}
