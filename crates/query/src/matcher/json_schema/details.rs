//! MongoDB 5.0+'s `errInfo.details` for a document that fails a `$jsonSchema` validator:
//! `{operatorName: "$jsonSchema", schemaRulesNotSatisfied: [...]}` with one entry per failing
//! keyword, nested through subschemas, in MongoDB's keyword order and with its field names
//! (`specifiedAs`, `reason`, `consideredValue`, `missingProperties`, `propertiesNotSatisfied`,
//! `schemasNotSatisfied`, ...) and reason strings.
//!
//! Only failing keywords report, so a keyword never reports on a value of a type it does not
//! restrict. As in MongoDB, `not` says only that its subschema matched, without details.

use super::evaluate::{elements, fields, first_duplicate, has_property, property_values};
use super::keywords::{
    Additional, AnyKeyword, ArrayKeyword, Dependency, Keyword, NumberKeyword, ObjectKeyword,
    Schema, StringKeyword,
};
use super::parse::Level;
use super::JsonSchema;
use crate::matcher::RegexPred;
use bson::{doc, Bson, Document, RawArray, RawBsonRef, RawDocument};

impl JsonSchema {
    /// The `details` MongoDB attaches to a "Document failed validation" error (its
    /// `errInfo.details`) for a document that does not satisfy this schema. For a document
    /// that does, the list of unsatisfied rules is empty.
    pub fn validation_details(&self, doc: &RawDocument) -> Document {
        let root = &self.root;
        let v = RawBsonRef::Document(doc);
        if root_type_fails(root, v) {
            return always_false(root);
        }
        let mut out = doc! {"operatorName": "$jsonSchema"};
        out.extend(annotations(&root.spec));
        out.insert(
            "schemaRulesNotSatisfied",
            schema_errors(root, v, Level::Root),
        );
        out
    }
}

/// A root schema whose type excludes objects can match no document.
fn root_type_fails(s: &Schema, v: RawBsonRef) -> bool {
    s.types.as_ref().is_some_and(|t| !t.matches(v))
}

fn always_false(s: &Schema) -> Document {
    doc! {
        "operatorName": "$jsonSchema",
        "specifiedAs": {"$jsonSchema": s.spec.clone()},
        "reason": "expression always evaluates to false",
    }
}

/// A schema's `title` and `description`, in the schema's order.
fn annotations(spec: &Document) -> Document {
    spec.iter()
        .filter(|(k, _)| *k == "title" || *k == "description")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn to_bson(v: RawBsonRef) -> Bson {
    Bson::try_from(v).unwrap_or(Bson::Null)
}

fn count(n: usize) -> Bson {
    Bson::Int32(i32::try_from(n).unwrap_or(i32::MAX))
}

/// `{<keyword>: <its argument>}`.
fn specified(s: &Schema, keyword: &str) -> Document {
    doc! { keyword: s.spec.get(keyword).cloned().unwrap_or(Bson::Null) }
}

/// A keyword that failed on one value: name, argument, reason and the value.
fn leaf(s: &Schema, keyword: &str, reason: &str, v: RawBsonRef) -> Bson {
    leaf_specified(keyword, specified(s, keyword), reason, v)
}

fn leaf_specified(keyword: &str, specified_as: Document, reason: &str, v: RawBsonRef) -> Bson {
    Bson::Document(doc! {
        "operatorName": keyword,
        "specifiedAs": specified_as,
        "reason": reason,
        "consideredValue": to_bson(v),
    })
}

/// The errors of every keyword of `s` that `v` fails (a subschema's errors are a flat list;
/// its parent names them). The type comes last, as in MongoDB's translation.
fn schema_errors(s: &Schema, v: RawBsonRef, level: Level) -> Vec<Bson> {
    if level == Level::Root && root_type_fails(s, v) {
        return vec![Bson::Document(always_false(s))];
    }
    let mut out = Vec::new();
    for k in s.keywords.iter().filter(|k| !k.matches(v)) {
        keyword_errors(s, k, v, level, &mut out);
    }
    if let (Level::Nested, Some(t)) = (level, &s.types) {
        if !t.matches(v) {
            out.push(type_error(s, v));
        }
    }
    out
}

fn type_error(s: &Schema, v: RawBsonRef) -> Bson {
    let keyword = if s.spec.contains_key("type") {
        "type"
    } else {
        "bsonType"
    };
    let Bson::Document(mut d) = leaf(s, keyword, "type did not match", v) else {
        return Bson::Null;
    };
    d.insert("consideredType", nidus_doc::compare::type_name(&to_bson(v)));
    Bson::Document(d)
}

/// The errors of one failing keyword (most report one entry; `items` with
/// `additionalItems`, and `additionalProperties` with `patternProperties`, up to two).
fn keyword_errors(s: &Schema, k: &Keyword, v: RawBsonRef, level: Level, out: &mut Vec<Bson>) {
    match (k, v) {
        (Keyword::Number(n), _) => out.push(number_error(s, n, v)),
        (Keyword::String(k), _) => out.push(string_error(s, k, v)),
        (Keyword::Array(k), RawBsonRef::Array(a)) => array_errors(s, k, a, out),
        (Keyword::Object(k), RawBsonRef::Document(d)) => object_errors(s, k, d, level, out),
        (Keyword::Any(k), _) => out.push(any_error(s, k, v, level)),
        _ => {}
    }
}

fn number_error(s: &Schema, k: &NumberKeyword, v: RawBsonRef) -> Bson {
    match k {
        NumberKeyword::Minimum { exclusive, .. } => {
            bound_error(s, "minimum", "exclusiveMinimum", *exclusive, v)
        }
        NumberKeyword::Maximum { exclusive, .. } => {
            bound_error(s, "maximum", "exclusiveMaximum", *exclusive, v)
        }
        NumberKeyword::MultipleOf(_) => leaf(
            s,
            "multipleOf",
            "considered value is not a multiple of the specified value",
            v,
        ),
    }
}

/// `specifiedAs` shows the exclusive flag only when it is set.
fn bound_error(s: &Schema, keyword: &str, flag: &str, exclusive: bool, v: RawBsonRef) -> Bson {
    let mut specified_as = specified(s, keyword);
    if exclusive {
        specified_as.insert(flag, true);
    }
    leaf_specified(keyword, specified_as, "comparison failed", v)
}

fn string_error(s: &Schema, k: &StringKeyword, v: RawBsonRef) -> Bson {
    let (keyword, reason) = match k {
        StringKeyword::MinLength(_) => ("minLength", "specified string length was not satisfied"),
        StringKeyword::MaxLength(_) => ("maxLength", "specified string length was not satisfied"),
        StringKeyword::Pattern(_) => ("pattern", "regular expression did not match"),
    };
    leaf(s, keyword, reason, v)
}

// ---------------------------------------------------------------------------------------
// Arrays

fn array_errors(s: &Schema, k: &ArrayKeyword, a: &RawArray, out: &mut Vec<Bson>) {
    let v = RawBsonRef::Array(a);
    match k {
        ArrayKeyword::MinItems(_) | ArrayKeyword::MaxItems(_) => {
            let keyword = if matches!(k, ArrayKeyword::MinItems(_)) {
                "minItems"
            } else {
                "maxItems"
            };
            if let Bson::Document(mut d) =
                leaf(s, keyword, "array did not match specified length", v)
            {
                d.insert("numberOfItems", count(elements(a).count()));
                out.push(Bson::Document(d));
            }
        }
        ArrayKeyword::UniqueItems => {
            if let Bson::Document(mut d) = leaf(s, "uniqueItems", "found a duplicate item", v) {
                d.insert(
                    "duplicatedValue",
                    first_duplicate(a).map_or(Bson::Null, to_bson),
                );
                out.push(Bson::Document(d));
            }
        }
        ArrayKeyword::Items(sub) => {
            if let Some((i, e)) = elements(a).enumerate().find(|(_, e)| !sub.matches(*e)) {
                out.push(item_schema_error(
                    "items",
                    "At least one item did not match the sub-schema",
                    sub,
                    i,
                    e,
                ));
            }
        }
        ArrayKeyword::TupleItems { items, additional } => {
            tuple_errors(s, items, additional.as_ref(), a, out)
        }
    }
}

/// `items`/`additionalItems` given as one schema: the first failing element.
fn item_schema_error(keyword: &str, reason: &str, sub: &Schema, i: usize, e: RawBsonRef) -> Bson {
    let mut d = doc! {"operatorName": keyword};
    d.extend(annotations(&sub.spec));
    d.insert("reason", reason);
    d.insert("itemIndex", count(i));
    d.insert("details", schema_errors(sub, e, Level::Nested));
    Bson::Document(d)
}

/// `items` as an array of schemas (every failing position, its index an int64 as MongoDB
/// prints it), then `additionalItems`.
fn tuple_errors(
    s: &Schema,
    items: &[Schema],
    additional: Option<&Additional>,
    a: &RawArray,
    out: &mut Vec<Bson>,
) {
    let failing: Vec<Bson> = elements(a)
        .zip(items)
        .enumerate()
        .filter(|(_, (e, sub))| !sub.matches(*e))
        .map(|(i, (e, sub))| {
            Bson::Document(doc! {
                "itemIndex": i64::try_from(i).unwrap_or(i64::MAX),
                "details": schema_errors(sub, e, Level::Nested),
            })
        })
        .collect();
    if !failing.is_empty() {
        out.push(Bson::Document(
            doc! {"operatorName": "items", "details": failing},
        ));
    }
    let extra = || elements(a).enumerate().skip(items.len());
    match additional {
        Some(Additional::Allowed(false)) if extra().next().is_some() => {
            out.push(Bson::Document(doc! {
                "operatorName": "additionalItems",
                "specifiedAs": specified(s, "additionalItems"),
                "reason": "found additional items",
                "additionalItems": extra().map(|(_, e)| to_bson(e)).collect::<Vec<_>>(),
            }))
        }
        Some(Additional::Schema(sub)) => {
            if let Some((i, e)) = extra().find(|(_, e)| !sub.matches(*e)) {
                out.push(item_schema_error(
                    "additionalItems",
                    "At least one additional item did not match the sub-schema",
                    sub,
                    i,
                    e,
                ));
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// Objects

fn object_errors(
    s: &Schema,
    k: &ObjectKeyword,
    d: &RawDocument,
    level: Level,
    out: &mut Vec<Bson>,
) {
    match k {
        ObjectKeyword::Required(names) => {
            let mut missing: Vec<&String> = names.iter().filter(|n| !has_property(d, n)).collect();
            missing.sort();
            out.push(Bson::Document(doc! {
                "operatorName": "required",
                "specifiedAs": specified(s, "required"),
                "missingProperties": missing.into_iter().cloned().collect::<Vec<_>>(),
            }));
        }
        ObjectKeyword::Properties(props) => {
            let failing: Vec<Bson> = props
                .iter()
                .filter_map(|(name, sub)| property_error(name, sub, d))
                .collect();
            if !failing.is_empty() {
                out.push(Bson::Document(doc! {
                    "operatorName": "properties",
                    "propertiesNotSatisfied": failing,
                }));
            }
        }
        ObjectKeyword::AllowedProperties {
            named,
            patterns,
            additional,
        } => allowed_properties_errors(s, named, patterns, additional, d, out),
        ObjectKeyword::MinProperties(_) | ObjectKeyword::MaxProperties(_) => {
            let keyword = if matches!(k, ObjectKeyword::MinProperties(_)) {
                "minProperties"
            } else {
                "maxProperties"
            };
            out.push(Bson::Document(doc! {
                "operatorName": keyword,
                "specifiedAs": specified(s, keyword),
                "reason": "specified number of properties was not satisfied",
                "numberOfProperties": count(fields(d).count()),
            }));
        }
        ObjectKeyword::Dependencies(deps) => {
            let mut e = doc! {"operatorName": "dependencies"};
            if let Some(Bson::Document(spec)) = s.spec.get("dependencies") {
                e.extend(annotations(spec));
            }
            let failing: Vec<Bson> = deps
                .iter()
                .filter(|(name, dep)| has_property(d, name) && !dep.holds(d))
                .map(|(name, dep)| dependency_error(name, dep, d, level))
                .collect();
            e.insert("failingDependencies", failing);
            out.push(Bson::Document(e));
        }
    }
}

/// A present property whose value fails its schema (for a dotted name reaching several
/// values, when none satisfies it; the first one is explained).
fn property_error(name: &str, sub: &Schema, d: &RawDocument) -> Option<Bson> {
    let values: Vec<RawBsonRef> = property_values(d, name).collect();
    if values.iter().any(|v| sub.matches(*v)) {
        return None;
    }
    let v = *values.first()?;
    let details = schema_errors(sub, v, Level::Nested);
    if details.is_empty() {
        return None;
    }
    let mut e = doc! {"propertyName": name};
    e.extend(annotations(&sub.spec));
    e.insert("details", details);
    Some(Bson::Document(e))
}

fn allowed_properties_errors(
    s: &Schema,
    named: &[String],
    patterns: &[(RegexPred, Schema)],
    additional: &Additional,
    d: &RawDocument,
    out: &mut Vec<Bson>,
) {
    // Fields neither named by `properties` nor matched by a pattern.
    let extra: Vec<(&str, RawBsonRef)> = fields(d)
        .filter(|(k, _)| {
            !named.iter().any(|n| n == k) && !patterns.iter().any(|(re, _)| re.is_match(k))
        })
        .collect();
    match additional {
        Additional::Allowed(false) if !extra.is_empty() => out.push(Bson::Document(doc! {
            "operatorName": "additionalProperties",
            "specifiedAs": specified(s, "additionalProperties"),
            "additionalProperties": extra.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        })),
        Additional::Schema(sub) => {
            if let Some((k, v)) = extra.iter().find(|(_, v)| !sub.matches(*v)) {
                let mut e = doc! {"operatorName": "additionalProperties"};
                e.extend(annotations(&sub.spec));
                e.insert(
                    "reason",
                    "at least one additional property did not match the subschema",
                );
                e.insert("failingProperty", *k);
                e.insert("details", schema_errors(sub, *v, Level::Nested));
                out.push(Bson::Document(e));
            }
        }
        _ => {}
    }
    let failing: Vec<Bson> = patterns
        .iter()
        .filter_map(|(re, sub)| {
            let (k, v) = fields(d).find(|(k, v)| re.is_match(k) && !sub.matches(*v))?;
            let mut e = doc! {"propertyName": k};
            e.extend(annotations(&sub.spec));
            e.insert("regexMatched", re.pattern.clone());
            e.insert("details", schema_errors(sub, v, Level::Nested));
            Some(Bson::Document(e))
        })
        .collect();
    if !failing.is_empty() {
        out.push(Bson::Document(
            doc! {"operatorName": "patternProperties", "details": failing},
        ));
    }
}

fn dependency_error(name: &str, dep: &Dependency, d: &RawDocument, level: Level) -> Bson {
    let mut e = doc! {"conditionalProperty": name};
    match dep {
        Dependency::Properties(names) => {
            let missing: Vec<&String> = names.iter().filter(|n| !has_property(d, n)).collect();
            e.insert(
                "missingProperties",
                missing.into_iter().cloned().collect::<Vec<_>>(),
            );
        }
        Dependency::Schema(sub) => {
            e.insert(
                "details",
                schema_errors(sub, RawBsonRef::Document(d), level),
            );
        }
    }
    Bson::Document(e)
}

// ---------------------------------------------------------------------------------------
// Logical keywords and enum

fn any_error(s: &Schema, k: &AnyKeyword, v: RawBsonRef, level: Level) -> Bson {
    match k {
        AnyKeyword::AllOf(subs) => schema_list_error("allOf", subs, v, level, true),
        AnyKeyword::AnyOf(subs) => schema_list_error("anyOf", subs, v, level, false),
        AnyKeyword::OneOf(subs) => {
            let matching: Vec<i32> = subs
                .iter()
                .enumerate()
                .filter(|(_, sub)| sub.matches(v))
                .map(|(i, _)| i32::try_from(i).unwrap_or(i32::MAX))
                .collect();
            if matching.is_empty() {
                schema_list_error("oneOf", subs, v, level, false)
            } else {
                Bson::Document(doc! {
                    "operatorName": "oneOf",
                    "reason": "more than one subschema matched",
                    "matchingSchemaIndexes": matching,
                })
            }
        }
        AnyKeyword::Not(_) => Bson::Document(doc! {
            "operatorName": "not",
            "reason": "child expression matched",
        }),
        AnyKeyword::Enum(values) => {
            // At the root only objects can equal the document; with none, the keyword is
            // false whatever the document.
            let has_object = values
                .iter()
                .any(|e| matches!(e.as_raw_bson_ref(), RawBsonRef::Document(_)));
            if level == Level::Root && !has_object {
                Bson::Document(doc! {
                    "operatorName": "enum",
                    "specifiedAs": specified(s, "enum"),
                    "reason": "expression always evaluates to false",
                })
            } else {
                leaf(s, "enum", "value was not found in enum", v)
            }
        }
    }
}

/// `allOf` reports its failing subschemas, `anyOf`/`oneOf` (which failed because none
/// matched) all of them, each with its index.
fn schema_list_error(
    keyword: &str,
    subs: &[Schema],
    v: RawBsonRef,
    level: Level,
    only_failing: bool,
) -> Bson {
    let entries: Vec<Bson> = subs
        .iter()
        .enumerate()
        .filter(|(_, sub)| !only_failing || !sub.matches(v))
        .map(|(i, sub)| {
            let mut e = doc! {"index": count(i)};
            e.extend(annotations(&sub.spec));
            e.insert("details", schema_errors(sub, v, level));
            Bson::Document(e)
        })
        .collect();
    Bson::Document(doc! {"operatorName": keyword, "schemasNotSatisfied": entries})
}
