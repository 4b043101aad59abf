//! Data-driven `$jsonSchema` tests: (schema, document, matches?) per keyword, the examples of
//! MongoDB's documentation and seed 001's validator, and (schema, code, message) for errors.

use crate::matcher::Matcher;
use bson::{doc, Bson, Decimal128, Document, RawDocumentBuf};
use nidus_common::ErrorCode;

fn raw(d: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(d).expect("valid document")
}

fn filter(schema: &Document) -> Matcher {
    let f = doc! {"$jsonSchema": schema.clone()};
    Matcher::parse(&f).unwrap_or_else(|e| panic!("parse {f}: {e}"))
}

/// (schema, document, expected).
fn check(cases: &[(Document, Document, bool)]) {
    for (schema, d, want) in cases {
        assert_eq!(
            filter(schema).matches(&raw(d)).ok(),
            Some(*want),
            "schema {schema} on {d}"
        );
    }
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse::<Decimal128>().expect("decimal"))
}

/// `{properties: {x: <sub>}}`: a schema on one field.
fn on_x(sub: Document) -> Document {
    doc! {"properties": {"x": sub}}
}

#[test]
fn bson_type_and_type() {
    check(&[
        (on_x(doc! {"bsonType": "int"}), doc! {"x": 1}, true),
        (on_x(doc! {"bsonType": "int"}), doc! {"x": 1i64}, false),
        (on_x(doc! {"bsonType": "int"}), doc! {"y": 1}, true),
        (on_x(doc! {"bsonType": "number"}), doc! {"x": 2.5}, true),
        (
            on_x(doc! {"bsonType": "number"}),
            doc! {"x": dec("1")},
            true,
        ),
        (on_x(doc! {"bsonType": "number"}), doc! {"x": "1"}, false),
        (
            on_x(doc! {"bsonType": ["string", "null"]}),
            doc! {"x": null},
            true,
        ),
        (
            on_x(doc! {"bsonType": ["string", "null"]}),
            doc! {"x": 3},
            false,
        ),
        (on_x(doc! {"bsonType": "bool"}), doc! {"x": true}, true),
        (on_x(doc! {"bsonType": "date"}), doc! {"x": "2020"}, false),
        // An array is an array: its elements are not looked at.
        (on_x(doc! {"bsonType": "int"}), doc! {"x": [1, 2]}, false),
        (on_x(doc! {"bsonType": "array"}), doc! {"x": [1, 2]}, true),
        (on_x(doc! {"bsonType": "object"}), doc! {"x": [{}]}, false),
        (on_x(doc! {"type": "boolean"}), doc! {"x": false}, true),
        (on_x(doc! {"type": "number"}), doc! {"x": 1i64}, true),
        (on_x(doc! {"type": "object"}), doc! {"x": {"a": 1}}, true),
        (
            on_x(doc! {"type": ["array", "null"]}),
            doc! {"x": "s"},
            false,
        ),
        (
            on_x(doc! {"type": "string"}),
            doc! {"x": Bson::Symbol("s".into())},
            false,
        ),
        // At the root the value is the document: only "object" can hold.
        (doc! {"bsonType": "object"}, doc! {"a": 1}, true),
        (doc! {"type": ["object", "array"]}, doc! {"a": 1}, true),
        (doc! {"bsonType": "string"}, doc! {"a": 1}, false),
        (doc! {}, doc! {"a": 1}, true),
    ]);
}

#[test]
fn numeric_keywords() {
    check(&[
        (on_x(doc! {"minimum": 5}), doc! {"x": 5}, true),
        (on_x(doc! {"minimum": 5}), doc! {"x": 4.99}, false),
        (
            on_x(doc! {"minimum": 5, "exclusiveMinimum": true}),
            doc! {"x": 5.0},
            false,
        ),
        (
            on_x(doc! {"minimum": 5, "exclusiveMinimum": false}),
            doc! {"x": 5i64},
            true,
        ),
        (on_x(doc! {"maximum": 10}), doc! {"x": dec("10.0")}, true),
        (on_x(doc! {"maximum": 10}), doc! {"x": dec("10.01")}, false),
        (
            on_x(doc! {"maximum": 10, "exclusiveMaximum": true}),
            doc! {"x": 9.999},
            true,
        ),
        (on_x(doc! {"maximum": dec("2.5")}), doc! {"x": 3}, false),
        (
            on_x(doc! {"minimum": 9_007_199_254_740_993i64}),
            doc! {"x": 9_007_199_254_740_992i64},
            false,
        ),
        (on_x(doc! {"minimum": 5}), doc! {"x": f64::NAN}, false),
        // Restrictions of numbers do not apply to other types.
        (on_x(doc! {"minimum": 5}), doc! {"x": "1"}, true),
        (on_x(doc! {"maximum": 5}), doc! {"x": [100]}, true),
        (on_x(doc! {"minimum": 5}), doc! {}, true),
        (
            on_x(doc! {"bsonType": "int", "minimum": 5}),
            doc! {"x": "9"},
            false,
        ),
        (on_x(doc! {"multipleOf": 5}), doc! {"x": 25}, true),
        (on_x(doc! {"multipleOf": 5}), doc! {"x": 26}, false),
        (on_x(doc! {"multipleOf": 0.1}), doc! {"x": 0.3}, true),
        (on_x(doc! {"multipleOf": 0.1}), doc! {"x": 0.35}, false),
        (on_x(doc! {"multipleOf": 2}), doc! {"x": dec("4.0")}, true),
        (on_x(doc! {"multipleOf": dec("0.5")}), doc! {"x": 1.5}, true),
        (on_x(doc! {"multipleOf": 2}), doc! {"x": -4}, true),
        (
            on_x(doc! {"multipleOf": 2}),
            doc! {"x": f64::INFINITY},
            false,
        ),
        (on_x(doc! {"multipleOf": 2}), doc! {"x": "4"}, true),
        // At the root a number restriction has nothing to restrict.
        (doc! {"minimum": 5, "multipleOf": 3}, doc! {"a": 1}, true),
    ]);
}

#[test]
fn string_keywords() {
    check(&[
        (on_x(doc! {"minLength": 3}), doc! {"x": "abc"}, true),
        (on_x(doc! {"minLength": 3}), doc! {"x": "ab"}, false),
        // Lengths count code points, not bytes.
        (on_x(doc! {"maxLength": 5}), doc! {"x": "héllo"}, true),
        (on_x(doc! {"maxLength": 1}), doc! {"x": "日"}, true),
        (on_x(doc! {"maxLength": 2}), doc! {"x": "abc"}, false),
        (on_x(doc! {"minLength": 2.0}), doc! {"x": "a"}, false),
        (on_x(doc! {"minLength": 3}), doc! {"x": 1}, true),
        (
            on_x(doc! {"minLength": 3}),
            doc! {"x": Bson::Symbol("a".into())},
            true,
        ),
        (on_x(doc! {"pattern": "^a.c$"}), doc! {"x": "abc"}, true),
        // Unanchored, as in JSON Schema.
        (on_x(doc! {"pattern": "b"}), doc! {"x": "abc"}, true),
        (on_x(doc! {"pattern": "^b"}), doc! {"x": "abc"}, false),
        (on_x(doc! {"pattern": "^b"}), doc! {"x": 5}, true),
        (on_x(doc! {"pattern": "^b"}), doc! {"x": ["abc"]}, true),
        // A root pattern is never compiled (it could only apply to strings).
        (doc! {"pattern": "("}, doc! {"a": 1}, true),
    ]);
}

#[test]
fn array_keywords() {
    check(&[
        (on_x(doc! {"minItems": 2}), doc! {"x": [1, 2]}, true),
        (on_x(doc! {"minItems": 2}), doc! {"x": [1]}, false),
        (on_x(doc! {"maxItems": 1}), doc! {"x": [1, 2]}, false),
        (on_x(doc! {"maxItems": 1}), doc! {"x": "ab"}, true),
        (
            on_x(doc! {"uniqueItems": true}),
            doc! {"x": [1, 2, 3]},
            true,
        ),
        (
            on_x(doc! {"uniqueItems": true}),
            doc! {"x": [1, 2, 1.0]},
            false,
        ),
        (
            on_x(doc! {"uniqueItems": true}),
            doc! {"x": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]},
            false,
        ),
        (
            on_x(doc! {"uniqueItems": true}),
            doc! {"x": [[1, 2], [2, 1]]},
            true,
        ),
        (on_x(doc! {"uniqueItems": false}), doc! {"x": [1, 1]}, true),
        (
            on_x(doc! {"items": {"bsonType": "int"}}),
            doc! {"x": [1, 2]},
            true,
        ),
        (
            on_x(doc! {"items": {"bsonType": "int"}}),
            doc! {"x": [1, "2"]},
            false,
        ),
        (
            on_x(doc! {"items": {"bsonType": "int"}}),
            doc! {"x": []},
            true,
        ),
        (
            on_x(doc! {"items": {"bsonType": "int"}}),
            doc! {"x": "s"},
            true,
        ),
        (
            on_x(doc! {"items": [{"bsonType": "string"}, {"bsonType": "int"}]}),
            doc! {"x": ["a", 1, true]},
            true,
        ),
        (
            on_x(doc! {"items": [{"bsonType": "string"}, {"bsonType": "int"}]}),
            doc! {"x": [1]},
            false,
        ),
        (
            on_x(doc! {"items": [{"bsonType": "string"}], "additionalItems": false}),
            doc! {"x": ["a", "b"]},
            false,
        ),
        (
            on_x(doc! {"items": [{"bsonType": "string"}], "additionalItems": false}),
            doc! {"x": ["a"]},
            true,
        ),
        (
            on_x(doc! {"items": [{}], "additionalItems": {"bsonType": "int"}}),
            doc! {"x": ["a", 1, 2]},
            true,
        ),
        (
            on_x(doc! {"items": [{}], "additionalItems": {"bsonType": "int"}}),
            doc! {"x": ["a", 1, "b"]},
            false,
        ),
        // additionalItems without an array of items has no effect.
        (
            on_x(doc! {"additionalItems": false}),
            doc! {"x": [1, 2]},
            true,
        ),
        (
            on_x(doc! {"items": {}, "additionalItems": false}),
            doc! {"x": [1, 2]},
            true,
        ),
        (
            on_x(doc! {"items": {"bsonType": "object", "required": ["a"]}}),
            doc! {"x": [{"a": 1}, {"b": 1}]},
            false,
        ),
    ]);
}

#[test]
fn object_keywords() {
    check(&[
        (
            doc! {"required": ["a", "b"]},
            doc! {"a": 1, "b": null},
            true,
        ),
        (doc! {"required": ["a", "b"]}, doc! {"a": 1}, false),
        (
            doc! {"properties": {"a": {"bsonType": "string"}}},
            doc! {"b": 1},
            true,
        ),
        (
            doc! {"properties": {"a": {"bsonType": "string"}}, "required": ["a"]},
            doc! {"b": 1},
            false,
        ),
        (
            doc! {"properties": {"a": {"properties": {"b": {"bsonType": "int"}}}}},
            doc! {"a": {"b": "x"}},
            false,
        ),
        // Object keywords do not look into arrays.
        (
            doc! {"properties": {"a": {"properties": {"b": {"bsonType": "int"}}}}},
            doc! {"a": [{"b": "x"}]},
            true,
        ),
        (
            doc! {"properties": {"a": {"required": ["b"]}}},
            doc! {"a": [{"c": 1}]},
            true,
        ),
        (
            doc! {"properties": {"a": {"required": ["b"]}}},
            doc! {"a": {"c": 1}},
            false,
        ),
        // A dotted name is a path into embedded documents.
        (doc! {"required": ["a.b"]}, doc! {"a": {"b": 1}}, true),
        (doc! {"required": ["a.b"]}, doc! {"a": {"c": 1}}, false),
        (
            doc! {"properties": {"a.b": {"bsonType": "int"}}},
            doc! {"a": {"b": "x"}},
            false,
        ),
        // Through an array, one reached value satisfying the subschema is enough.
        (
            doc! {"properties": {"a.b": {"bsonType": "int"}}},
            doc! {"a": [{"b": 1}, {"b": "x"}]},
            true,
        ),
        (
            doc! {"required": ["a.b"]},
            doc! {"a": [{"c": 1}, {"b": 1}]},
            true,
        ),
        (
            doc! {"properties": {"_id": {}, "a": {}}, "additionalProperties": false},
            doc! {"_id": 1, "a": 1},
            true,
        ),
        (
            doc! {"properties": {"a": {}}, "additionalProperties": false},
            doc! {"_id": 1, "a": 1},
            false,
        ),
        (
            doc! {"properties": {"_id": {}}, "additionalProperties": {"bsonType": "int"}},
            doc! {"_id": "k", "a": 1, "b": 2},
            true,
        ),
        (
            doc! {"properties": {"_id": {}}, "additionalProperties": {"bsonType": "int"}},
            doc! {"_id": "k", "a": 1, "b": "2"},
            false,
        ),
        (
            doc! {"patternProperties": {"^n_": {"bsonType": "number"}}, "additionalProperties": false},
            doc! {"n_a": 1, "n_b": 2.5},
            true,
        ),
        (
            doc! {"patternProperties": {"^n_": {"bsonType": "number"}}, "additionalProperties": false},
            doc! {"n_a": 1, "_id": 2},
            false,
        ),
        (
            doc! {"patternProperties": {"^n_": {"bsonType": "number"}}},
            doc! {"n_a": "x"},
            false,
        ),
        // A named property matched by a pattern satisfies the pattern's schema too.
        (
            doc! {"properties": {"n_a": {}}, "patternProperties": {"^n_": {"bsonType": "int"}}},
            doc! {"n_a": "x"},
            false,
        ),
        (
            doc! {"patternProperties": {"a": {"minimum": 2}, "b": {"maximum": 5}}},
            doc! {"ab": 3},
            true,
        ),
        (
            doc! {"patternProperties": {"a": {"minimum": 2}, "b": {"maximum": 5}}},
            doc! {"ab": 6},
            false,
        ),
        (doc! {"minProperties": 2}, doc! {"_id": 1, "a": 1}, true),
        (doc! {"minProperties": 3}, doc! {"_id": 1, "a": 1}, false),
        (doc! {"maxProperties": 1}, doc! {"_id": 1, "a": 1}, false),
        (on_x(doc! {"maxProperties": 1}), doc! {"x": {"a": 1}}, true),
        (on_x(doc! {"maxProperties": 0}), doc! {"x": [1]}, true),
        (
            doc! {"dependencies": {"card": ["billing"]}},
            doc! {"card": 1, "billing": 2},
            true,
        ),
        (
            doc! {"dependencies": {"card": ["billing"]}},
            doc! {"card": 1},
            false,
        ),
        (
            doc! {"dependencies": {"card": ["billing"]}},
            doc! {"billing": 1},
            true,
        ),
        (
            doc! {"dependencies": {"card": {"required": ["billing"]}}},
            doc! {"card": 1},
            false,
        ),
        (
            doc! {"dependencies": {"card": {"properties": {"billing": {"bsonType": "string"}}}}},
            doc! {"card": 1, "billing": 5},
            false,
        ),
        (
            doc! {"dependencies": {"title": "ignored", "card": ["billing"]}},
            doc! {"title": 1},
            true,
        ),
        (
            on_x(doc! {"dependencies": {"a": ["b"]}}),
            doc! {"x": {"a": 1}},
            false,
        ),
        (
            on_x(doc! {"dependencies": {"a": ["b"]}}),
            doc! {"x": 5},
            true,
        ),
    ]);
}

#[test]
fn logical_keywords_and_enum() {
    check(&[
        (
            on_x(doc! {"allOf": [{"minimum": 1}, {"maximum": 3}]}),
            doc! {"x": 2},
            true,
        ),
        (
            on_x(doc! {"allOf": [{"minimum": 1}, {"maximum": 3}]}),
            doc! {"x": 4},
            false,
        ),
        (
            on_x(doc! {"anyOf": [{"bsonType": "string"}, {"minimum": 3}]}),
            doc! {"x": 1},
            false,
        ),
        (
            on_x(doc! {"anyOf": [{"bsonType": "string"}, {"minimum": 3}]}),
            doc! {"x": "s"},
            true,
        ),
        (
            on_x(doc! {"oneOf": [{"minimum": 3}, {"maximum": 5}]}),
            doc! {"x": 4},
            false,
        ),
        (
            on_x(doc! {"oneOf": [{"minimum": 3}, {"maximum": 5}]}),
            doc! {"x": 6},
            true,
        ),
        (
            on_x(doc! {"not": {"bsonType": "string"}}),
            doc! {"x": 1},
            true,
        ),
        (
            on_x(doc! {"not": {"bsonType": "string"}}),
            doc! {"x": "s"},
            false,
        ),
        // A missing property satisfies its schema, `not` included.
        (on_x(doc! {"not": {}}), doc! {}, true),
        (on_x(doc! {"not": {}}), doc! {"x": 1}, false),
        (on_x(doc! {"enum": [1, "a", [1, 2]]}), doc! {"x": 1.0}, true),
        (
            on_x(doc! {"enum": [1, "a", [1, 2]]}),
            doc! {"x": "b"},
            false,
        ),
        (
            on_x(doc! {"enum": [1, "a", [1, 2]]}),
            doc! {"x": [1, 2]},
            true,
        ),
        (
            on_x(doc! {"enum": [1, "a", [1, 2]]}),
            doc! {"x": [2, 1]},
            false,
        ),
        (
            on_x(doc! {"enum": [{"a": 1, "b": 2}]}),
            doc! {"x": {"b": 2, "a": 1}},
            true,
        ),
        (on_x(doc! {"enum": [null]}), doc! {"x": null}, true),
        // At the root only object values can equal the document.
        (
            doc! {"enum": [{"_id": 1, "a": 2}, 5]},
            doc! {"a": 2, "_id": 1},
            true,
        ),
        (doc! {"enum": [5]}, doc! {"a": 2}, false),
        // Root-level logic sees the document.
        (
            doc! {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            doc! {"b": 1},
            true,
        ),
        (doc! {"not": {"required": ["a"]}}, doc! {"a": 1}, false),
        (doc! {"not": {"minimum": 1}}, doc! {"a": 1}, false),
        (doc! {"not": {"bsonType": "string"}}, doc! {"a": 1}, true),
        (
            doc! {"title": "t", "description": "d", "properties": {"x": {"description": "e"}}},
            doc! {"x": 1},
            true,
        ),
    ]);
}

/// MongoDB's "Query for and Modify Valid or Invalid Documents" page: the inventory
/// collection, its schema, and which items match it and which match its `$nor`.
#[test]
fn docs_inventory_example() {
    let docs = [
        doc! {"item": "journal", "qty": 25, "size": {"h": 14.0, "w": 21.0, "uom": "cm"}, "instock": true},
        doc! {"item": "notebook", "qty": 50, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": true},
        doc! {"item": "paper", "qty": 100, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": 1},
        doc! {"item": "planner", "qty": 75, "size": {"h": 22.85, "w": 30.0, "uom": "cm"}, "instock": 1},
        doc! {"item": "postcard", "qty": 45, "size": {"h": 10.0, "w": 15.25, "uom": "cm"}, "instock": true},
        doc! {"item": "apple", "qty": 45, "status": "A", "instock": true},
        doc! {"item": "pears", "qty": 50, "status": "A", "instock": true},
    ];
    let schema = doc! {
        "required": ["item", "qty", "instock"],
        "properties": {
            "item": {"bsonType": "string"},
            "qty": {"bsonType": "int"},
            "size": {
                "bsonType": "object",
                "required": ["uom"],
                "properties": {
                    "uom": {"bsonType": "string"},
                    "h": {"bsonType": "double"},
                    "w": {"bsonType": "double"},
                },
            },
            "instock": {"bsonType": "bool"},
        },
    };
    let items = |f: Document| -> Vec<String> {
        let m = Matcher::parse(&f).expect("parse");
        docs.iter()
            .filter(|d| m.matches(&raw(d)).expect("matches"))
            .map(|d| d.get_str("item").expect("item").to_string())
            .collect()
    };
    assert_eq!(
        items(doc! {"$jsonSchema": schema.clone()}),
        ["journal", "notebook", "postcard", "apple", "pears"]
    );
    assert_eq!(
        items(doc! {"$nor": [{"$jsonSchema": schema.clone()}]}),
        ["paper", "planner"]
    );
    assert_eq!(
        items(doc! {"$jsonSchema": schema, "qty": {"$gt": 45}}),
        ["notebook", "pears"]
    );
}

/// The `students` validator of MongoDB's schema validation pages: a document whose `gpa` is
/// an int fails `bsonType: "double"`.
#[test]
fn docs_students_validator() {
    let schema = doc! {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["address", "major", "name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "'name' must be a string and is required"},
            "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017},
            "gpa": {"bsonType": ["double"], "description": "'gpa' must be a double if the field exists"},
            "address": {
                "bsonType": "object",
                "required": ["city"],
                "properties": {"street": {"bsonType": "string"}, "city": {"bsonType": "string"}},
            },
            "major": {"enum": ["Math", "English", "Computer Science", "History", null]},
        },
    };
    let valid = doc! {"name": "Alice", "year": 2019, "major": "History", "gpa": 3.0,
    "address": {"city": "NYC", "street": "33rd Street"}};
    let mut int_gpa = valid.clone();
    int_gpa.insert("gpa", 3);
    let mut early = valid.clone();
    early.insert("year", 2016);
    let mut no_city = valid.clone();
    no_city.insert("address", doc! {"street": "33rd Street"});
    let mut null_major = valid.clone();
    null_major.insert("major", Bson::Null);
    let mut other_major = valid.clone();
    other_major.insert("major", "Art");
    check(&[
        (schema.clone(), valid, true),
        (schema.clone(), int_gpa, false),
        (schema.clone(), early, false),
        (schema.clone(), no_city, false),
        (schema.clone(), null_major, true),
        (schema, other_major, false),
    ]);
}

/// Seed 001's `employees` validator: `$jsonSchema` for structure and `$expr` for unique
/// names, years and skill types, combined with `$and`.
#[test]
fn seed_001_employees_validator() {
    let item = |required: &str, props: Document| {
        doc! {"bsonType": "object", "required": [required], "properties": props}
    };
    let exams = item(
        "year",
        doc! {"year": {"bsonType": "int"}, "city": {"bsonType": "string"}},
    );
    let skills = item(
        "type",
        doc! {"type": {"bsonType": "string"}, "Exams": {"bsonType": "array", "items": exams}},
    );
    let children = item(
        "name",
        doc! {"name": {"bsonType": "string"}, "dob": {"bsonType": "string"}},
    );
    let schema = doc! {
        "bsonType": "object",
        "required": ["ename"],
        "properties": {
            "ename": {"bsonType": "string"},
            "Children": {"bsonType": "array", "items": children},
            "Skills": {"bsonType": "array", "items": skills},
        },
    };
    let unique = |path: &str| {
        doc! {"$eq": [
            {"$size": {"$ifNull": [path, []]}},
            {"$size": {"$setUnion": [{"$ifNull": [path, []]}]}},
        ]}
    };
    let validator = doc! {"$and": [
        {"$jsonSchema": schema},
        {"$expr": {"$and": [
            unique("$Children.name"),
            unique("$Skills.type"),
            {"$allElementsTrue": {"$map": {
                "input": {"$ifNull": ["$Skills", []]},
                "as": "skill",
                "in": unique("$$skill.Exams.year"),
            }}},
        ]}},
    ]};
    let m = Matcher::parse(&validator).expect("parse");
    let employee = |children: Bson, skills: Bson| {
        doc! {"_id": 1, "ename": "Smith", "Children": children, "Skills": skills}
    };
    let exam = |year: Bson| doc! {"year": year, "city": "Paris"};
    let cases = [
        (
            employee(
                bson::bson!([{"name": "Sam", "dob": "2001"}, {"name": "Sue"}]),
                bson::bson!([{"type": "typing", "Exams": [exam(Bson::Int32(2020)), exam(Bson::Int32(2021))]}]),
            ),
            true,
        ),
        (doc! {"_id": 2, "ename": "Jones"}, true),
        (doc! {"_id": 3, "employee": "Smith"}, false),
        (
            employee(bson::bson!([{"child": "Sam"}]), bson::bson!([])),
            false,
        ),
        (
            employee(
                bson::bson!([]),
                bson::bson!([{"type": "typing", "Exams": [exam(Bson::Double(2020.0))]}]),
            ),
            false,
        ),
        (
            employee(
                bson::bson!([{"name": "Sam"}, {"name": "Sam"}]),
                bson::bson!([]),
            ),
            false,
        ),
        (
            employee(
                bson::bson!([]),
                bson::bson!([{"type": "typing", "Exams": [exam(Bson::Int32(2020)), exam(Bson::Int32(2020))]}]),
            ),
            false,
        ),
        (
            employee(
                bson::bson!([]),
                bson::bson!([{"type": "typing"}, {"type": "typing"}]),
            ),
            false,
        ),
    ];
    for (d, want) in cases {
        assert_eq!(m.matches(&raw(&d)).ok(), Some(want), "{d}");
    }
}

#[test]
fn combined_with_other_operators() {
    let schema = doc! {"required": ["a"]};
    let cases = [
        (
            doc! {"$jsonSchema": schema.clone(), "b": 1},
            doc! {"a": 0, "b": 1},
            true,
        ),
        (
            doc! {"$jsonSchema": schema.clone(), "b": 1},
            doc! {"a": 0},
            false,
        ),
        (
            doc! {"$or": [{"$jsonSchema": schema.clone()}, {"b": 1}]},
            doc! {"b": 1},
            true,
        ),
        (
            doc! {"$nor": [{"$jsonSchema": schema.clone()}]},
            doc! {"b": 1},
            true,
        ),
        (
            doc! {"$and": [{"$jsonSchema": schema.clone()}]},
            doc! {"b": 1},
            false,
        ),
        // In an `$elemMatch` the schema applies to each element that is a document.
        (
            doc! {"xs": {"$elemMatch": {"$jsonSchema": schema.clone()}}},
            doc! {"xs": [1, {"b": 1}, {"a": 1}]},
            true,
        ),
        (
            doc! {"xs": {"$elemMatch": {"$jsonSchema": schema}}},
            doc! {"xs": [1, {"b": 1}]},
            false,
        ),
    ];
    for (f, d, want) in cases {
        let m = Matcher::parse(&f).unwrap_or_else(|e| panic!("parse {f}: {e}"));
        assert_eq!(m.matches(&raw(&d)).ok(), Some(want), "{f} on {d}");
    }
}

#[test]
fn prints_back_as_given() {
    let schema = doc! {"required": ["a"], "properties": {"a": {"bsonType": "int"}}};
    let m = filter(&schema);
    assert_eq!(m.canonical_document(), doc! {"$jsonSchema": schema.clone()});
    let m = Matcher::parse(&doc! {"$jsonSchema": schema.clone(), "b": 1}).expect("parse");
    assert_eq!(
        m.canonical_document(),
        doc! {"$and": [{"b": {"$eq": 1}}, {"$jsonSchema": schema}]}
    );
    // The printed filter parses again to the same predicate.
    let again = Matcher::parse(&m.canonical_document()).expect("reparse");
    assert_eq!(again.matches(&raw(&doc! {"a": 1, "b": 1})).ok(), Some(true));
    assert_eq!(
        again.matches(&raw(&doc! {"a": "x", "b": 1})).ok(),
        Some(false)
    );
}

#[test]
fn parse_errors() {
    use ErrorCode::{BadValue, FailedToParse, Location, TypeMismatch};
    let cases: Vec<(Bson, ErrorCode, &str)> = vec![
        (Bson::Int32(1), TypeMismatch, "$jsonSchema must be an object"),
        (
            doc! {"foo": 1}.into(),
            FailedToParse,
            "Unknown $jsonSchema keyword: foo",
        ),
        (
            doc! {"properties": {"a": {"foo": 1}}}.into(),
            FailedToParse,
            "Unknown $jsonSchema keyword: foo",
        ),
        (
            doc! {"$ref": "#/definitions/a"}.into(),
            FailedToParse,
            "$jsonSchema keyword '$ref' is not currently supported",
        ),
        (
            doc! {"format": "email"}.into(),
            FailedToParse,
            "$jsonSchema keyword 'format' is not currently supported",
        ),
        (
            doc! {"encrypt": {}}.into(),
            FailedToParse,
            "$jsonSchema keyword 'encrypt' is not currently supported",
        ),
        (
            doc! {"title": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'title' must be of type string",
        ),
        (
            doc! {"type": "object", "bsonType": "object"}.into(),
            FailedToParse,
            "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
        ),
        (
            doc! {"type": "integer"}.into(),
            FailedToParse,
            "$jsonSchema type 'integer' is not currently supported.",
        ),
        (
            doc! {"bsonType": ["integer"]}.into(),
            FailedToParse,
            "$jsonSchema type 'integer' is not currently supported.",
        ),
        (
            doc! {"type": "int"}.into(),
            BadValue,
            "Unknown type name alias: int",
        ),
        (
            doc! {"bsonType": "boolean"}.into(),
            BadValue,
            "Unknown type name alias: boolean",
        ),
        (
            doc! {"bsonType": 2}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'bsonType' must be either a string or an array of strings",
        ),
        (
            doc! {"bsonType": [2]}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'bsonType' array elements must be strings",
        ),
        (
            doc! {"type": ["string", "string"]}.into(),
            FailedToParse,
            "$jsonSchema keyword 'type' has duplicate value: string",
        ),
        (
            doc! {"bsonType": []}.into(),
            FailedToParse,
            "$jsonSchema keyword 'bsonType' must name at least one type",
        ),
        (
            doc! {"minimum": "1"}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'minimum' must be a number",
        ),
        (
            doc! {"maximum": 1, "exclusiveMaximum": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'exclusiveMaximum' must be a boolean",
        ),
        (
            doc! {"exclusiveMinimum": true}.into(),
            FailedToParse,
            "$jsonSchema keyword 'minimum' must be a present if exclusiveMinimum is present",
        ),
        (
            doc! {"multipleOf": 0}.into(),
            FailedToParse,
            "$jsonSchema keyword 'multipleOf' must have a positive value",
        ),
        (
            doc! {"multipleOf": -2.5}.into(),
            FailedToParse,
            "$jsonSchema keyword 'multipleOf' must have a positive value",
        ),
        (
            doc! {"multipleOf": "2"}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'multipleOf' must be a number",
        ),
        (
            doc! {"minLength": -1}.into(),
            FailedToParse,
            "Expected a positive number in: minLength: -1",
        ),
        (
            doc! {"maxItems": 1.5}.into(),
            FailedToParse,
            "Expected an integer: maxItems: 1.5",
        ),
        (
            doc! {"minProperties": "1"}.into(),
            FailedToParse,
            "Expected a number in: minProperties: \"1\"",
        ),
        (
            doc! {"maxLength": f64::NAN}.into(),
            FailedToParse,
            "Expected an integer, but found NaN in: maxLength",
        ),
        (
            doc! {"pattern": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'pattern' must be a string",
        ),
        (
            on_x(doc! {"pattern": "("}).into(),
            Location(51091),
            "Regular expression is invalid",
        ),
        (
            doc! {"uniqueItems": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'uniqueItems' must be a boolean",
        ),
        (
            doc! {"items": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'items' must be an array or an object, not int",
        ),
        (
            doc! {"items": [{}, "s"]}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'items' requires that each element of the array is an object, but found a string",
        ),
        (
            doc! {"additionalItems": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'additionalItems' must be either an object or a boolean, but got a int",
        ),
        (
            doc! {"required": "a"}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'required' must be an array, but found an element of type string",
        ),
        (
            doc! {"required": [1]}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'required' must be an array of strings, but found an element of type: int",
        ),
        (
            doc! {"required": []}.into(),
            FailedToParse,
            "$jsonSchema keyword 'required' cannot be an empty array",
        ),
        (
            doc! {"required": ["a", "a"]}.into(),
            FailedToParse,
            "$jsonSchema keyword 'required' array cannot contain duplicate values",
        ),
        (
            doc! {"properties": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'properties' must be an object",
        ),
        (
            doc! {"properties": {"a": 1}}.into(),
            TypeMismatch,
            "Nested schema for $jsonSchema property 'a' must be an object",
        ),
        (
            doc! {"patternProperties": {"a": true}}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'patternProperties' has property 'a' which is not an object",
        ),
        (
            doc! {"patternProperties": {"(": {}}}.into(),
            BadValue,
            "Invalid regular expression",
        ),
        (
            doc! {"additionalProperties": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'additionalProperties' must be an object or a boolean",
        ),
        (
            doc! {"dependencies": []}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'dependencies' must be an object",
        ),
        (
            doc! {"dependencies": {"a": 1}}.into(),
            TypeMismatch,
            "property 'a' in $jsonSchema keyword 'dependencies' must be either an object or an array",
        ),
        (
            doc! {"dependencies": {"a": []}}.into(),
            FailedToParse,
            "property 'a' in $jsonSchema keyword 'dependencies' cannot be an empty array",
        ),
        (
            doc! {"dependencies": {"a": [1]}}.into(),
            TypeMismatch,
            "array 'a' in $jsonSchema keyword 'dependencies' can only contain strings, but found element of type: int",
        ),
        (
            doc! {"dependencies": {"a": ["b", "b"]}}.into(),
            FailedToParse,
            "array 'a' in $jsonSchema keyword 'dependencies' contains duplicate element: b",
        ),
        (
            doc! {"allOf": {}}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'allOf' must be an array",
        ),
        (
            doc! {"anyOf": []}.into(),
            BadValue,
            "$jsonSchema keyword 'anyOf' must be a non-empty array",
        ),
        (
            doc! {"oneOf": [1]}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'oneOf' must be an array of objects, but found an element of type int",
        ),
        (
            doc! {"not": []}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'not' must be an object, but found an element of type array",
        ),
        (
            doc! {"enum": 1}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'enum' must be an array, but found an element of type int",
        ),
        (
            doc! {"enum": []}.into(),
            FailedToParse,
            "$jsonSchema keyword 'enum' cannot be an empty array",
        ),
        (
            doc! {"enum": [1, 1.0]}.into(),
            FailedToParse,
            "$jsonSchema keyword 'enum' array cannot contain duplicate values.",
        ),
        (
            doc! {"enum": [{"a": 1, "b": 1}, {"b": 1, "a": 1}]}.into(),
            FailedToParse,
            "$jsonSchema keyword 'enum' array cannot contain duplicate values.",
        ),
        // MongoDB's keyword order decides which of several mistakes is reported.
        (
            doc! {"enum": [], "minimum": "x"}.into(),
            TypeMismatch,
            "$jsonSchema keyword 'minimum' must be a number",
        ),
    ];
    for (schema, code, msg) in cases {
        let f = doc! {"$jsonSchema": schema};
        match Matcher::parse(&f) {
            Ok(_) => panic!("{f} should fail"),
            Err(e) => {
                assert_eq!(e.code, code, "{f}: {e}");
                assert!(e.message.contains(msg), "{f}: {e}");
            }
        }
    }
}

#[test]
fn only_a_top_level_operator() {
    for f in [
        doc! {"a": {"$jsonSchema": {}}},
        doc! {"a": {"$not": {"$jsonSchema": {}}}},
    ] {
        let e = Matcher::parse(&f).expect_err("field-level $jsonSchema");
        assert_eq!(e.code, ErrorCode::BadValue, "{f}: {e}");
        assert!(
            e.message.contains("unknown operator: $jsonSchema"),
            "{f}: {e}"
        );
    }
}
