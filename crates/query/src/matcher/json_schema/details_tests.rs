//! Data-driven tests of [`JsonSchema::validation_details`]: (schema, document, expected
//! `schemaRulesNotSatisfied`), plus the example of MongoDB's "Specify JSON Schema Validation"
//! page.

use super::JsonSchema;
use bson::{bson, doc, Bson, Document, RawDocumentBuf};

fn details(schema: &Document, d: &Document) -> Document {
    let s = JsonSchema::parse(&Bson::Document(schema.clone())).expect("schema");
    let raw = RawDocumentBuf::from_document(d).expect("raw");
    assert!(!s.matches(&raw), "{d} should fail {schema}");
    s.validation_details(&raw)
}

/// `{operatorName: "$jsonSchema", schemaRulesNotSatisfied: rules}`.
fn rules(rules: Bson) -> Document {
    doc! {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": rules}
}

/// The errors of a schema on property `x`.
fn on_x(errors: Bson) -> Bson {
    bson!([{"operatorName": "properties", "propertiesNotSatisfied": [
        {"propertyName": "x", "details": errors}
    ]}])
}

#[test]
fn docs_students_example() {
    let schema = doc! {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["address", "major", "name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "'name' must be a string and is required"},
            "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017,
                "description": "'year' must be an integer in [ 2017, 3017 ] and is required"},
            "gpa": {"bsonType": ["double"], "description": "'gpa' must be a double if the field exists"},
        },
    };
    let d = doc! {"_id": 1, "name": "Alice", "year": 2019, "major": "History", "gpa": 3,
    "address": {"city": "NYC", "street": "33rd Street"}};
    assert_eq!(
        details(&schema, &d),
        doc! {
            "operatorName": "$jsonSchema",
            "title": "Student Object Validation",
            "schemaRulesNotSatisfied": [{
                "operatorName": "properties",
                "propertiesNotSatisfied": [{
                    "propertyName": "gpa",
                    "description": "'gpa' must be a double if the field exists",
                    "details": [{
                        "operatorName": "bsonType",
                        "specifiedAs": {"bsonType": ["double"]},
                        "reason": "type did not match",
                        "consideredValue": 3,
                        "consideredType": "int",
                    }],
                }],
            }],
        }
    );
}

#[test]
fn keyword_details() {
    let cases: Vec<(Document, Document, Bson)> = vec![
        (
            doc! {"required": ["b", "a", "c"]},
            doc! {"c": 1},
            bson!([{"operatorName": "required", "specifiedAs": {"required": ["b", "a", "c"]},
                "missingProperties": ["a", "b"]}]),
        ),
        (
            doc! {"properties": {"x": {"minimum": 5, "exclusiveMinimum": true}}},
            doc! {"x": 5},
            on_x(bson!([{"operatorName": "minimum",
                "specifiedAs": {"minimum": 5, "exclusiveMinimum": true},
                "reason": "comparison failed", "consideredValue": 5}])),
        ),
        (
            doc! {"properties": {"x": {"bsonType": "int", "maximum": 3}}},
            doc! {"x": 4},
            on_x(
                bson!([{"operatorName": "maximum", "specifiedAs": {"maximum": 3},
                "reason": "comparison failed", "consideredValue": 4}]),
            ),
        ),
        // The type comes after the keywords, and only failing keywords report.
        (
            doc! {"properties": {"x": {"type": "string", "minLength": 2}}},
            doc! {"x": 1.5},
            on_x(
                bson!([{"operatorName": "type", "specifiedAs": {"type": "string"},
                "reason": "type did not match", "consideredValue": 1.5,
                "consideredType": "double"}]),
            ),
        ),
        (
            doc! {"properties": {"x": {"multipleOf": 2, "pattern": "^a"}}},
            doc! {"x": 3},
            on_x(
                bson!([{"operatorName": "multipleOf", "specifiedAs": {"multipleOf": 2},
                "reason": "considered value is not a multiple of the specified value",
                "consideredValue": 3}]),
            ),
        ),
        (
            doc! {"properties": {"x": {"pattern": "^a", "maxLength": 2}}},
            doc! {"x": "bcd"},
            on_x(bson!([
                {"operatorName": "pattern", "specifiedAs": {"pattern": "^a"},
                    "reason": "regular expression did not match", "consideredValue": "bcd"},
                {"operatorName": "maxLength", "specifiedAs": {"maxLength": 2},
                    "reason": "specified string length was not satisfied", "consideredValue": "bcd"},
            ])),
        ),
        (
            doc! {"properties": {"x": {"minItems": 3, "uniqueItems": true}}},
            doc! {"x": [1, 1]},
            on_x(bson!([
                {"operatorName": "minItems", "specifiedAs": {"minItems": 3},
                    "reason": "array did not match specified length", "consideredValue": [1, 1],
                    "numberOfItems": 2},
                {"operatorName": "uniqueItems", "specifiedAs": {"uniqueItems": true},
                    "reason": "found a duplicate item", "consideredValue": [1, 1],
                    "duplicatedValue": 1},
            ])),
        ),
        (
            doc! {"properties": {"x": {"items": {"bsonType": "int"}}}},
            doc! {"x": [1, "b"]},
            on_x(bson!([{"operatorName": "items",
                "reason": "At least one item did not match the sub-schema", "itemIndex": 1,
                "details": [{"operatorName": "bsonType", "specifiedAs": {"bsonType": "int"},
                    "reason": "type did not match", "consideredValue": "b",
                    "consideredType": "string"}]}])),
        ),
        (
            doc! {"properties": {"x": {"items": [{"bsonType": "int"}], "additionalItems": false}}},
            doc! {"x": ["a", 2, 3]},
            on_x(bson!([
                {"operatorName": "items", "details": [{"itemIndex": 0i64, "details": [
                    {"operatorName": "bsonType", "specifiedAs": {"bsonType": "int"},
                        "reason": "type did not match", "consideredValue": "a",
                        "consideredType": "string"}]}]},
                {"operatorName": "additionalItems", "specifiedAs": {"additionalItems": false},
                    "reason": "found additional items", "additionalItems": [2, 3]},
            ])),
        ),
        (
            doc! {"properties": {"_id": {}}, "patternProperties": {"^n": {"bsonType": "int"}},
            "additionalProperties": false},
            doc! {"_id": 1, "n1": "x", "z": 1},
            bson!([
                {"operatorName": "additionalProperties",
                    "specifiedAs": {"additionalProperties": false},
                    "additionalProperties": ["z"]},
                {"operatorName": "patternProperties", "details": [{"propertyName": "n1",
                    "regexMatched": "^n", "details": [{"operatorName": "bsonType",
                        "specifiedAs": {"bsonType": "int"}, "reason": "type did not match",
                        "consideredValue": "x", "consideredType": "string"}]}]},
            ]),
        ),
        (
            doc! {"additionalProperties": {"description": "ints", "bsonType": "int"}},
            doc! {"a": 1, "b": true},
            bson!([{"operatorName": "additionalProperties", "description": "ints",
                "reason": "at least one additional property did not match the subschema",
                "failingProperty": "b", "details": [{"operatorName": "bsonType",
                    "specifiedAs": {"bsonType": "int"}, "reason": "type did not match",
                    "consideredValue": true, "consideredType": "bool"}]}]),
        ),
        (
            doc! {"minProperties": 3},
            doc! {"a": 1},
            bson!([{"operatorName": "minProperties", "specifiedAs": {"minProperties": 3},
                "reason": "specified number of properties was not satisfied",
                "numberOfProperties": 1}]),
        ),
        (
            doc! {"dependencies": {"a": ["b", "c"], "d": {"required": ["e"]}}},
            doc! {"a": 1, "c": 1, "d": 1},
            bson!([{"operatorName": "dependencies", "failingDependencies": [
                {"conditionalProperty": "a", "missingProperties": ["b"]},
                {"conditionalProperty": "d", "details": [{"operatorName": "required",
                    "specifiedAs": {"required": ["e"]}, "missingProperties": ["e"]}]},
            ]}]),
        ),
        (
            doc! {"properties": {"x": {"allOf": [{"minimum": 1}, {"title": "small", "maximum": 2}]}}},
            doc! {"x": 3},
            on_x(bson!([{"operatorName": "allOf", "schemasNotSatisfied": [
                {"index": 1, "title": "small", "details": [{"operatorName": "maximum",
                    "specifiedAs": {"maximum": 2}, "reason": "comparison failed",
                    "consideredValue": 3}]}]}])),
        ),
        (
            doc! {"properties": {"x": {"anyOf": [{"bsonType": "string"}, {"minimum": 5}]}}},
            doc! {"x": 3},
            on_x(bson!([{"operatorName": "anyOf", "schemasNotSatisfied": [
                {"index": 0, "details": [{"operatorName": "bsonType",
                    "specifiedAs": {"bsonType": "string"}, "reason": "type did not match",
                    "consideredValue": 3, "consideredType": "int"}]},
                {"index": 1, "details": [{"operatorName": "minimum",
                    "specifiedAs": {"minimum": 5}, "reason": "comparison failed",
                    "consideredValue": 3}]},
            ]}])),
        ),
        (
            doc! {"properties": {"x": {"oneOf": [{"minimum": 1}, {"maximum": 5}]}}},
            doc! {"x": 3},
            on_x(
                bson!([{"operatorName": "oneOf", "reason": "more than one subschema matched",
                "matchingSchemaIndexes": [0, 1]}]),
            ),
        ),
        (
            doc! {"properties": {"x": {"not": {"bsonType": "int"}}}},
            doc! {"x": 3},
            on_x(bson!([{"operatorName": "not", "reason": "child expression matched"}])),
        ),
        (
            doc! {"properties": {"x": {"enum": [1, 2]}}},
            doc! {"x": 3},
            on_x(
                bson!([{"operatorName": "enum", "specifiedAs": {"enum": [1, 2]},
                "reason": "value was not found in enum", "consideredValue": 3}]),
            ),
        ),
        (
            doc! {"enum": [{"a": 1}]},
            doc! {"a": 2},
            bson!([{"operatorName": "enum", "specifiedAs": {"enum": [{"a": 1}]},
                "reason": "value was not found in enum", "consideredValue": {"a": 2}}]),
        ),
        (
            doc! {"enum": [1]},
            doc! {"a": 2},
            bson!([{"operatorName": "enum", "specifiedAs": {"enum": [1]},
                "reason": "expression always evaluates to false"}]),
        ),
        // Nested objects: the subschema's errors come under the property.
        (
            doc! {"properties": {"x": {"required": ["y"], "properties": {"z": {"bsonType": "int"}}}}},
            doc! {"x": {"z": "s"}},
            on_x(bson!([
                {"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "z",
                    "details": [{"operatorName": "bsonType", "specifiedAs": {"bsonType": "int"},
                        "reason": "type did not match", "consideredValue": "s",
                        "consideredType": "string"}]}]},
                {"operatorName": "required", "specifiedAs": {"required": ["y"]},
                    "missingProperties": ["y"]},
            ])),
        ),
    ];
    for (schema, d, want) in cases {
        assert_eq!(details(&schema, &d), rules(want), "{schema} on {d}");
    }
}

#[test]
fn root_type_other_than_object() {
    let schema = doc! {"bsonType": "string"};
    assert_eq!(
        details(&schema, &doc! {"a": 1}),
        doc! {
            "operatorName": "$jsonSchema",
            "specifiedAs": {"$jsonSchema": schema.clone()},
            "reason": "expression always evaluates to false",
        }
    );
}
