//! The parsed form of a `$jsonSchema` (sub)schema.
//!
//! Keywords are grouped by the type of value they restrict: as in JSON Schema, a restriction
//! keyword holds for every value of another type (`minimum` accepts a string), so the group
//! alone decides whether a keyword is checked at all.

use crate::matcher::{RegexPred, TypeSet, Value};
use bson::{Decimal128, Document, RawBson};

/// What one value must satisfy: its type (`bsonType` or `type`) and every keyword.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    pub types: Option<TypeSet>,
    pub keywords: Vec<Keyword>,
    /// The schema document as given (what validation errors quote).
    pub spec: Document,
}

/// One keyword, by the kind of value it applies to.
#[derive(Debug, Clone)]
pub enum Keyword {
    Number(NumberKeyword),
    String(StringKeyword),
    Array(ArrayKeyword),
    Object(ObjectKeyword),
    /// Keywords that apply to values of every type.
    Any(AnyKeyword),
}

/// Restrictions of numbers (any of the four BSON numeric types, compared by value).
#[derive(Debug, Clone)]
pub enum NumberKeyword {
    /// `minimum`, with draft 4's boolean `exclusiveMinimum`.
    Minimum { bound: Value, exclusive: bool },
    /// `maximum`, with draft 4's boolean `exclusiveMaximum`.
    Maximum { bound: Value, exclusive: bool },
    /// `multipleOf`: a positive divisor, in decimal so that `0.3` is a multiple of `0.1`.
    MultipleOf(Decimal128),
}

/// Restrictions of strings (BSON strings only; symbols are another type).
#[derive(Debug, Clone)]
pub enum StringKeyword {
    /// `minLength`, in code points.
    MinLength(u64),
    /// `maxLength`, in code points.
    MaxLength(u64),
    /// `pattern`: an unanchored regular expression without flags.
    Pattern(RegexPred),
}

/// Restrictions of arrays.
#[derive(Debug, Clone)]
pub enum ArrayKeyword {
    MinItems(u64),
    MaxItems(u64),
    /// `uniqueItems: true` (objects compare regardless of field order).
    UniqueItems,
    /// `items` given as one schema: every element satisfies it.
    Items(Box<Schema>),
    /// `items` given as an array: element `i` satisfies schema `i`; the elements past the
    /// list satisfy `additionalItems` (absent = allowed).
    TupleItems {
        items: Vec<Schema>,
        additional: Option<Additional>,
    },
}

/// Restrictions of objects (embedded documents, never arrays).
#[derive(Debug, Clone)]
pub enum ObjectKeyword {
    /// `required`: each name exists.
    Required(Vec<String>),
    /// `properties`: each named property, when present, satisfies its schema.
    Properties(Vec<(String, Schema)>),
    /// `patternProperties` and `additionalProperties` together: each field satisfies the
    /// schema of every pattern that finds a match in its name; a field matched by no pattern
    /// and not named in `properties` satisfies `additional`.
    AllowedProperties {
        named: Vec<String>,
        patterns: Vec<(RegexPred, Schema)>,
        additional: Additional,
    },
    MinProperties(u64),
    MaxProperties(u64),
    /// `dependencies`: when the named property exists, the dependency holds.
    Dependencies(Vec<(String, Dependency)>),
}

/// Keywords that apply whatever the value's type.
#[derive(Debug, Clone)]
pub enum AnyKeyword {
    AllOf(Vec<Schema>),
    AnyOf(Vec<Schema>),
    /// `oneOf`: exactly one schema holds.
    OneOf(Vec<Schema>),
    Not(Box<Schema>),
    /// `enum`: the value equals one of these (objects regardless of field order).
    Enum(Vec<RawBson>),
}

/// `additionalItems` / `additionalProperties`: a boolean or a schema.
#[derive(Debug, Clone)]
pub enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

/// One entry of `dependencies`.
#[derive(Debug, Clone)]
pub enum Dependency {
    /// The array form: these properties exist too.
    Properties(Vec<String>),
    /// The schema form: the object itself satisfies this schema.
    Schema(Schema),
}
