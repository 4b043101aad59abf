//! Parses a `$jsonSchema` document into a [`Schema`] with MongoDB's errors.
//!
//! Keywords are checked in MongoDB's order (names, annotations, type, then the scalar,
//! array, object and logical keywords), so a schema with several mistakes reports the same
//! one first.

use super::keywords::{
    Additional, AnyKeyword, ArrayKeyword, Dependency, Keyword, NumberKeyword, ObjectKeyword,
    Schema, StringKeyword,
};
use super::{equality::unordered_eq, multiple_of};
use crate::matcher::element::alias_code;
use crate::matcher::{RegexPred, TypeSet, Value};
use bson::{Bson, Document, RawBson};
use nidus_common::{shell, Error, Result};
use nidus_doc::compare::{bson_num, type_name};

/// The keywords MongoDB's parser knows (`encrypt` and `encryptMetadata` are known but
/// refused here, see [`check_encryption_keywords`]).
const KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "bsonType",
    "dependencies",
    "description",
    "encrypt",
    "encryptMetadata",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
];

/// JSON Schema keywords MongoDB explicitly leaves out.
const UNSUPPORTED: &[&str] = &["$ref", "$schema", "default", "definitions", "format", "id"];

/// Where a (sub)schema applies. At the root the value is always the document itself, an
/// object, so number, string and array restrictions are checked for errors but dropped
/// (MongoDB does not even compile a root `pattern`). Logical keywords and schema
/// dependencies keep their schema's level; everything reached through a property or an
/// array element is nested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Root,
    Nested,
}

fn failed(msg: impl Into<String>) -> Error {
    Error::failed_to_parse(msg)
}

fn mismatch(msg: impl Into<String>) -> Error {
    Error::type_mismatch(msg)
}

/// Parses one (sub)schema document.
pub fn parse_schema(spec: &Document, level: Level) -> Result<Schema> {
    check_keyword_names(spec)?;
    check_annotations(spec)?;
    let types = parse_type_keywords(spec)?;
    let mut keywords = Vec::new();
    let restrictions_apply = level == Level::Nested;
    for k in scalar_keywords(spec, restrictions_apply)? {
        if restrictions_apply {
            keywords.push(k);
        }
    }
    for k in array_keywords(spec)? {
        if restrictions_apply {
            keywords.push(k);
        }
    }
    check_encryption_keywords(spec)?;
    keywords.extend(object_keywords(spec, level)?);
    keywords.extend(logical_keywords(spec, level)?);
    Ok(Schema {
        types,
        keywords,
        spec: spec.clone(),
    })
}

fn check_keyword_names(spec: &Document) -> Result<()> {
    for k in spec.keys() {
        if KEYWORDS.contains(&k.as_str()) {
            continue;
        }
        return Err(if UNSUPPORTED.contains(&k.as_str()) {
            failed(format!(
                "$jsonSchema keyword '{k}' is not currently supported"
            ))
        } else {
            failed(format!("Unknown $jsonSchema keyword: {k}"))
        });
    }
    Ok(())
}

/// `description` and `title` carry no meaning but must be strings.
fn check_annotations(spec: &Document) -> Result<()> {
    for k in ["description", "title"] {
        if spec.get(k).is_some_and(|v| !matches!(v, Bson::String(_))) {
            return Err(mismatch(format!(
                "$jsonSchema keyword '{k}' must be of type string"
            )));
        }
    }
    Ok(())
}

/// Client-side field level encryption keywords need key vault metadata Nidus does not have.
fn check_encryption_keywords(spec: &Document) -> Result<()> {
    match ["encrypt", "encryptMetadata"]
        .into_iter()
        .find(|k| spec.contains_key(k))
    {
        Some(k) => Err(failed(format!(
            "$jsonSchema keyword '{k}' is not currently supported"
        ))),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// type / bsonType

/// The JSON Schema primitive types (`"number"` and the refused `"integer"` aside).
fn json_type_code(name: &str) -> Option<u8> {
    match name {
        "array" => Some(4),
        "boolean" => Some(8),
        "null" => Some(10),
        "object" => Some(3),
        "string" => Some(2),
        _ => None,
    }
}

fn parse_type_keywords(spec: &Document) -> Result<Option<TypeSet>> {
    match (spec.get("type"), spec.get("bsonType")) {
        (Some(_), Some(_)) => Err(failed(
            "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
        )),
        (Some(t), None) => parse_type_set("type", t, json_type_code).map(Some),
        (None, Some(t)) => parse_type_set("bsonType", t, alias_code).map(Some),
        (None, None) => Ok(None),
    }
}

fn refuse_integer(name: &str) -> Result<()> {
    if name == "integer" {
        return Err(failed(
            "$jsonSchema type 'integer' is not currently supported.",
        ));
    }
    Ok(())
}

/// A type name or an array of distinct names, resolved with `lookup` (`"number"` is every
/// numeric type for both keywords).
fn parse_type_set(keyword: &str, arg: &Bson, lookup: fn(&str) -> Option<u8>) -> Result<TypeSet> {
    let mut names: Vec<&str> = Vec::new();
    match arg {
        Bson::String(s) => {
            refuse_integer(s)?;
            names.push(s);
        }
        Bson::Array(items) => {
            for item in items {
                let Bson::String(s) = item else {
                    return Err(mismatch(format!(
                        "$jsonSchema keyword '{keyword}' array elements must be strings"
                    )));
                };
                refuse_integer(s)?;
                if names.contains(&s.as_str()) {
                    return Err(failed(format!(
                        "$jsonSchema keyword '{keyword}' has duplicate value: {s}"
                    )));
                }
                names.push(s);
            }
        }
        _ => {
            return Err(mismatch(format!(
                "$jsonSchema keyword '{keyword}' must be either a string or an array of strings"
            )))
        }
    }
    if names.is_empty() {
        return Err(failed(format!(
            "$jsonSchema keyword '{keyword}' must name at least one type"
        )));
    }
    // MongoDB resolves the names as a sorted set: the first unknown one in that order is
    // the one reported.
    names.sort_unstable();
    let mut set = TypeSet {
        codes: Vec::new(),
        all_numbers: false,
    };
    for name in names {
        if name == "number" {
            set.all_numbers = true;
            continue;
        }
        let code = lookup(name)
            .ok_or_else(|| Error::bad_value(format!("Unknown type name alias: {name}")))?;
        set.codes.push(code);
    }
    Ok(set)
}

// ---------------------------------------------------------------------------------------
// Numbers and strings

/// `name: value` as MongoDB prints an element in messages.
fn element(name: &str, v: &Bson) -> String {
    format!("{name}: {}", shell::format(v))
}

/// A non-negative integral count (`minLength`, `maxItems`, `minProperties`, ...), parsed
/// with MongoDB's rules: integral doubles and decimals are accepted.
fn parse_count(name: &str, v: &Bson) -> Result<u64> {
    let n = match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        Bson::Double(d) => integral_double(name, v, *d)?,
        Bson::Decimal128(d) => {
            if nidus_expr::decimal::to_i64_trunc(d).is_none() {
                return Err(failed(format!(
                    "Cannot represent as a 64-bit integer: {}",
                    element(name, v)
                )));
            }
            nidus_expr::decimal::to_i64_exact(d)
                .ok_or_else(|| failed(format!("Expected an integer: {}", element(name, v))))?
        }
        _ => {
            return Err(failed(format!(
                "Expected a number in: {}",
                element(name, v)
            )))
        }
    };
    u64::try_from(n).map_err(|_| {
        failed(format!(
            "Expected a positive number in: {}",
            element(name, v)
        ))
    })
}

fn integral_double(name: &str, v: &Bson, d: f64) -> Result<i64> {
    if d.is_nan() {
        return Err(failed(format!(
            "Expected an integer, but found NaN in: {}",
            element(name, v)
        )));
    }
    // 2^63 is the first double past i64::MAX.
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&d) {
        return Err(failed(format!(
            "Cannot represent as a 64-bit integer: {}",
            element(name, v)
        )));
    }
    if d.fract() != 0.0 {
        return Err(failed(format!("Expected an integer: {}", element(name, v))));
    }
    Ok(d as i64)
}

/// `minimum`/`maximum` with their draft 4 boolean `exclusive*` companion.
fn parse_bound(
    spec: &Document,
    bound_kw: &str,
    exclusive_kw: &str,
) -> Result<Option<(Value, bool)>> {
    let exclusive = spec.get(exclusive_kw);
    let Some(bound) = spec.get(bound_kw) else {
        return match exclusive {
            // MongoDB's message, wording included.
            Some(_) => Err(failed(format!(
                "$jsonSchema keyword '{bound_kw}' must be a present if {exclusive_kw} is present"
            ))),
            None => Ok(None),
        };
    };
    let exclusive = match exclusive {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(_) => {
            return Err(mismatch(format!(
                "$jsonSchema keyword '{exclusive_kw}' must be a boolean"
            )))
        }
    };
    if bson_num(bound).is_none() {
        return Err(mismatch(format!(
            "$jsonSchema keyword '{bound_kw}' must be a number"
        )));
    }
    Ok(Some((Value::new(bound)?, exclusive)))
}

/// `pattern`, `maxLength`, `minLength`, `multipleOf`, `maximum`, `minimum`. The regex is
/// compiled only when `compile_pattern` (MongoDB never compiles a root one).
fn scalar_keywords(spec: &Document, compile_pattern: bool) -> Result<Vec<Keyword>> {
    let mut out = Vec::new();
    if let Some(p) = spec.get("pattern") {
        let Bson::String(p) = p else {
            return Err(mismatch("$jsonSchema keyword 'pattern' must be a string"));
        };
        if compile_pattern {
            out.push(Keyword::String(StringKeyword::Pattern(RegexPred::new(
                p, "",
            )?)));
        }
    }
    if let Some(v) = spec.get("maxLength") {
        out.push(Keyword::String(StringKeyword::MaxLength(parse_count(
            "maxLength",
            v,
        )?)));
    }
    if let Some(v) = spec.get("minLength") {
        out.push(Keyword::String(StringKeyword::MinLength(parse_count(
            "minLength",
            v,
        )?)));
    }
    if let Some(v) = spec.get("multipleOf") {
        out.push(Keyword::Number(parse_multiple_of(v)?));
    }
    if let Some((bound, exclusive)) = parse_bound(spec, "maximum", "exclusiveMaximum")? {
        out.push(Keyword::Number(NumberKeyword::Maximum { bound, exclusive }));
    }
    if let Some((bound, exclusive)) = parse_bound(spec, "minimum", "exclusiveMinimum")? {
        out.push(Keyword::Number(NumberKeyword::Minimum { bound, exclusive }));
    }
    Ok(out)
}

fn parse_multiple_of(v: &Bson) -> Result<NumberKeyword> {
    let n =
        bson_num(v).ok_or_else(|| mismatch("$jsonSchema keyword 'multipleOf' must be a number"))?;
    let divisor = multiple_of::to_decimal(n);
    if !multiple_of::is_valid_divisor(&divisor) {
        return Err(failed(
            "$jsonSchema keyword 'multipleOf' must have a positive value",
        ));
    }
    Ok(NumberKeyword::MultipleOf(divisor))
}

// ---------------------------------------------------------------------------------------
// Arrays

/// `minItems`, `maxItems`, `uniqueItems`, `items`, `additionalItems`.
fn array_keywords(spec: &Document) -> Result<Vec<Keyword>> {
    let mut out = Vec::new();
    if let Some(v) = spec.get("minItems") {
        out.push(ArrayKeyword::MinItems(parse_count("minItems", v)?));
    }
    if let Some(v) = spec.get("maxItems") {
        out.push(ArrayKeyword::MaxItems(parse_count("maxItems", v)?));
    }
    if let Some(v) = spec.get("uniqueItems") {
        let Bson::Boolean(unique) = v else {
            return Err(mismatch(
                "$jsonSchema keyword 'uniqueItems' must be a boolean",
            ));
        };
        if *unique {
            out.push(ArrayKeyword::UniqueItems);
        }
    }
    let items = spec.get("items").map(parse_items).transpose()?;
    let additional = spec
        .get("additionalItems")
        .map(parse_additional_items)
        .transpose()?;
    match items {
        // `additionalItems` only means something after an array of `items`.
        Some(ArrayKeyword::TupleItems { items, .. }) => {
            out.push(ArrayKeyword::TupleItems { items, additional })
        }
        Some(other) => out.push(other),
        None => {}
    }
    Ok(out.into_iter().map(Keyword::Array).collect())
}

fn parse_items(arg: &Bson) -> Result<ArrayKeyword> {
    match arg {
        Bson::Document(d) => Ok(ArrayKeyword::Items(Box::new(parse_schema(
            d,
            Level::Nested,
        )?))),
        Bson::Array(list) => {
            let items = list
                .iter()
                .map(|s| match s {
                    Bson::Document(d) => parse_schema(d, Level::Nested),
                    other => Err(mismatch(format!(
                        "$jsonSchema keyword 'items' requires that each element of the array is an object, but found a {}",
                        type_name(other)
                    ))),
                })
                .collect::<Result<Vec<Schema>>>()?;
            Ok(ArrayKeyword::TupleItems {
                items,
                additional: None,
            })
        }
        other => Err(mismatch(format!(
            "$jsonSchema keyword 'items' must be an array or an object, not {}",
            type_name(other)
        ))),
    }
}

fn parse_additional_items(arg: &Bson) -> Result<Additional> {
    match arg {
        Bson::Boolean(b) => Ok(Additional::Allowed(*b)),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(parse_schema(
            d,
            Level::Nested,
        )?))),
        other => Err(mismatch(format!(
            "$jsonSchema keyword 'additionalItems' must be either an object or a boolean, but got a {}",
            type_name(other)
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Objects

/// `required`, `properties`, `patternProperties`, `additionalProperties`,
/// `minProperties`, `maxProperties`, `dependencies`.
fn object_keywords(spec: &Document, level: Level) -> Result<Vec<Keyword>> {
    let mut out = Vec::new();
    let required = spec.get("required").map(parse_required).transpose()?;
    if let Some(props) = spec.get("properties") {
        out.push(ObjectKeyword::Properties(parse_properties(props)?));
    }
    let patterns = spec.get("patternProperties");
    let additional = spec.get("additionalProperties");
    if patterns.is_some() || additional.is_some() {
        out.push(ObjectKeyword::AllowedProperties {
            named: match spec.get("properties") {
                Some(Bson::Document(d)) => d.keys().cloned().collect(),
                _ => Vec::new(),
            },
            patterns: patterns
                .map(parse_pattern_properties)
                .transpose()?
                .unwrap_or_default(),
            additional: additional
                .map(parse_additional_properties)
                .transpose()?
                .unwrap_or(Additional::Allowed(true)),
        });
    }
    if let Some(names) = required {
        out.push(ObjectKeyword::Required(names));
    }
    if let Some(v) = spec.get("minProperties") {
        out.push(ObjectKeyword::MinProperties(parse_count(
            "minProperties",
            v,
        )?));
    }
    if let Some(v) = spec.get("maxProperties") {
        out.push(ObjectKeyword::MaxProperties(parse_count(
            "maxProperties",
            v,
        )?));
    }
    if let Some(v) = spec.get("dependencies") {
        out.push(ObjectKeyword::Dependencies(parse_dependencies(v, level)?));
    }
    Ok(out.into_iter().map(Keyword::Object).collect())
}

/// A non-empty array of distinct property names.
fn parse_required(arg: &Bson) -> Result<Vec<String>> {
    let Bson::Array(items) = arg else {
        return Err(mismatch(format!(
            "$jsonSchema keyword 'required' must be an array, but found an element of type {}",
            type_name(arg)
        )));
    };
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(name) = item else {
            return Err(mismatch(format!(
                "$jsonSchema keyword 'required' must be an array of strings, but found an element of type: {}",
                type_name(item)
            )));
        };
        if names.contains(name) {
            return Err(failed(
                "$jsonSchema keyword 'required' array cannot contain duplicate values",
            ));
        }
        names.push(name.clone());
    }
    if names.is_empty() {
        return Err(failed(
            "$jsonSchema keyword 'required' cannot be an empty array",
        ));
    }
    Ok(names)
}

fn parse_properties(arg: &Bson) -> Result<Vec<(String, Schema)>> {
    let Bson::Document(props) = arg else {
        return Err(mismatch(
            "$jsonSchema keyword 'properties' must be an object",
        ));
    };
    props
        .iter()
        .map(|(name, sub)| match sub {
            Bson::Document(d) => Ok((name.clone(), parse_schema(d, Level::Nested)?)),
            _ => Err(mismatch(format!(
                "Nested schema for $jsonSchema property '{name}' must be an object"
            ))),
        })
        .collect()
}

fn parse_pattern_properties(arg: &Bson) -> Result<Vec<(RegexPred, Schema)>> {
    let Bson::Document(patterns) = arg else {
        return Err(mismatch(
            "$jsonSchema keyword 'patternProperties' must be an object",
        ));
    };
    patterns
        .iter()
        .map(|(pattern, sub)| {
            let Bson::Document(d) = sub else {
                return Err(mismatch(format!(
                    "$jsonSchema keyword 'patternProperties' has property '{pattern}' which is not an object"
                )));
            };
            let schema = parse_schema(d, Level::Nested)?;
            let re = RegexPred::new(pattern, "").map_err(|e| {
                Error::bad_value(format!("Invalid regular expression: {}", e.message))
            })?;
            Ok((re, schema))
        })
        .collect()
}

fn parse_additional_properties(arg: &Bson) -> Result<Additional> {
    match arg {
        Bson::Boolean(b) => Ok(Additional::Allowed(*b)),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(parse_schema(
            d,
            Level::Nested,
        )?))),
        _ => Err(mismatch(
            "$jsonSchema keyword 'additionalProperties' must be an object or a boolean",
        )),
    }
}

fn parse_dependencies(arg: &Bson, level: Level) -> Result<Vec<(String, Dependency)>> {
    let Bson::Document(deps) = arg else {
        return Err(mismatch(
            "$jsonSchema keyword 'dependencies' must be an object",
        ));
    };
    let mut out = Vec::with_capacity(deps.len());
    for (name, dep) in deps {
        let parsed = match dep {
            Bson::Document(d) => Dependency::Schema(parse_schema(d, level)?),
            Bson::Array(items) => Dependency::Properties(parse_property_dependency(name, items)?),
            // Annotations may sit among the dependencies.
            Bson::String(_) if name == "title" || name == "description" => continue,
            _ => {
                return Err(mismatch(format!(
                    "property '{name}' in $jsonSchema keyword 'dependencies' must be either an object or an array"
                )))
            }
        };
        out.push((name.clone(), parsed));
    }
    Ok(out)
}

fn parse_property_dependency(name: &str, items: &[Bson]) -> Result<Vec<String>> {
    if items.is_empty() {
        return Err(failed(format!(
            "property '{name}' in $jsonSchema keyword 'dependencies' cannot be an empty array"
        )));
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(s) = item else {
            return Err(mismatch(format!(
                "array '{name}' in $jsonSchema keyword 'dependencies' can only contain strings, but found element of type: {}",
                type_name(item)
            )));
        };
        if names.contains(s) {
            return Err(failed(format!(
                "array '{name}' in $jsonSchema keyword 'dependencies' contains duplicate element: {s}"
            )));
        }
        names.push(s.clone());
    }
    Ok(names)
}

// ---------------------------------------------------------------------------------------
// Logical keywords and enum

/// `allOf`, `anyOf`, `oneOf`, `not`, `enum`.
fn logical_keywords(spec: &Document, level: Level) -> Result<Vec<Keyword>> {
    let mut out = Vec::new();
    if let Some(v) = spec.get("allOf") {
        out.push(AnyKeyword::AllOf(parse_schema_list("allOf", v, level)?));
    }
    if let Some(v) = spec.get("anyOf") {
        out.push(AnyKeyword::AnyOf(parse_schema_list("anyOf", v, level)?));
    }
    if let Some(v) = spec.get("oneOf") {
        out.push(AnyKeyword::OneOf(parse_schema_list("oneOf", v, level)?));
    }
    if let Some(v) = spec.get("not") {
        let Bson::Document(d) = v else {
            return Err(mismatch(format!(
                "$jsonSchema keyword 'not' must be an object, but found an element of type {}",
                type_name(v)
            )));
        };
        out.push(AnyKeyword::Not(Box::new(parse_schema(d, level)?)));
    }
    if let Some(v) = spec.get("enum") {
        out.push(AnyKeyword::Enum(parse_enum(v)?));
    }
    Ok(out.into_iter().map(Keyword::Any).collect())
}

fn parse_schema_list(keyword: &str, arg: &Bson, level: Level) -> Result<Vec<Schema>> {
    let Bson::Array(items) = arg else {
        return Err(mismatch(format!(
            "$jsonSchema keyword '{keyword}' must be an array"
        )));
    };
    if items.is_empty() {
        return Err(Error::bad_value(format!(
            "$jsonSchema keyword '{keyword}' must be a non-empty array"
        )));
    }
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => parse_schema(d, level),
            other => Err(mismatch(format!(
                "$jsonSchema keyword '{keyword}' must be an array of objects, but found an element of type {}",
                type_name(other)
            ))),
        })
        .collect()
}

/// A non-empty array of distinct values (compared as `enum` compares them).
fn parse_enum(arg: &Bson) -> Result<Vec<RawBson>> {
    let Bson::Array(items) = arg else {
        return Err(mismatch(format!(
            "$jsonSchema keyword 'enum' must be an array, but found an element of type {}",
            type_name(arg)
        )));
    };
    if items.is_empty() {
        return Err(failed(
            "$jsonSchema keyword 'enum' cannot be an empty array",
        ));
    }
    let mut values: Vec<RawBson> = Vec::with_capacity(items.len());
    for item in items {
        let raw = RawBson::try_from(item.clone())
            .map_err(|e| Error::bad_value(format!("invalid BSON value: {e}")))?;
        if values
            .iter()
            .any(|v| unordered_eq(v.as_raw_bson_ref(), raw.as_raw_bson_ref()))
        {
            return Err(failed(
                "$jsonSchema keyword 'enum' array cannot contain duplicate values.",
            ));
        }
        values.push(raw);
    }
    Ok(values)
}
