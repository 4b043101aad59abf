//! Data-driven tests: (document, update, expected document or error code).

use super::*;
use bson::{doc, Bson, Document};

fn ctx() -> UpdateContext {
    UpdateContext {
        now: DateTime::from_millis(1_700_000_000_000),
        timestamp: Timestamp {
            time: 7,
            increment: 1,
        },
        ..UpdateContext::default()
    }
}

fn run(
    doc: &Document,
    update: Document,
    filters: Option<&[Document]>,
    ctx: &UpdateContext,
) -> Result<(Document, bool)> {
    let u = Update::parse(&Bson::Document(update), filters)?;
    let mut d = doc.clone();
    let modified = u.apply(&mut d, ctx)?;
    Ok((d, modified))
}

/// (document, update, expected document)
fn ok_cases() -> Vec<(Document, Document, Document)> {
    vec![
        // $set: in place, appended in name order, nested creation.
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$set": {"a": 2}},
            doc! {"_id": 1, "a": 2},
        ),
        (
            doc! {"_id": 1},
            doc! {"$set": {"b": 1, "a": 1}},
            doc! {"_id": 1, "a": 1, "b": 1},
        ),
        (
            doc! {"_id": 1},
            doc! {"$set": {"a.b.c": 1}},
            doc! {"_id": 1, "a": {"b": {"c": 1}}},
        ),
        (
            doc! {"_id": 1, "a": {"x": 1}},
            doc! {"$set": {"a.b": 1}},
            doc! {"_id": 1, "a": {"x": 1, "b": 1}},
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$set": {"a.1": 5}},
            doc! {"_id": 1, "a": [1, 5]},
        ),
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$set": {"a.3": 5}},
            doc! {"_id": 1, "a": [1, null, null, 5]},
        ),
        (
            doc! {"_id": 1},
            doc! {"$set": {"a.0.b": 1}},
            doc! {"_id": 1, "a": {"0": {"b": 1}}},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}]},
            doc! {"$set": {"a.0.c": 1}},
            doc! {"_id": 1, "a": [{"b": 1, "c": 1}]},
        ),
        (
            doc! {"_id": 1, "a": [0, 0]},
            doc! {"$set": {"a.10": 1, "a.9": 2}},
            doc! {"_id": 1, "a": [0, 0, null, null, null, null, null, null, null, 2, 1]},
        ),
        // $unset
        (
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"$unset": {"a": ""}},
            doc! {"_id": 1, "b": 2},
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$unset": {"a.0": 1}},
            doc! {"_id": 1, "a": [null, 2]},
        ),
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$unset": {"a.b": 1, "c": 1}},
            doc! {"_id": 1, "a": 1},
        ),
        // $inc / $mul with promotion
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$inc": {"a": 2}},
            doc! {"_id": 1, "a": 3},
        ),
        (
            doc! {"_id": 1, "a": i32::MAX},
            doc! {"$inc": {"a": 1}},
            doc! {"_id": 1, "a": i64::from(i32::MAX) + 1},
        ),
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$inc": {"a": 0.5}},
            doc! {"_id": 1, "a": 1.5},
        ),
        (
            doc! {"_id": 1, "a": 1_i64},
            doc! {"$inc": {"a": 1}},
            doc! {"_id": 1, "a": 2_i64},
        ),
        (
            doc! {"_id": 1},
            doc! {"$inc": {"a.b": 5}},
            doc! {"_id": 1, "a": {"b": 5}},
        ),
        (
            doc! {"_id": 1, "a": 3},
            doc! {"$mul": {"a": 2}},
            doc! {"_id": 1, "a": 6},
        ),
        (
            doc! {"_id": 1},
            doc! {"$mul": {"a": 2_i64}},
            doc! {"_id": 1, "a": 0_i64},
        ),
        (
            doc! {"_id": 1},
            doc! {"$mul": {"a": 2.5}},
            doc! {"_id": 1, "a": 0.0},
        ),
        // $min / $max
        (
            doc! {"_id": 1, "a": 5},
            doc! {"$min": {"a": 3}},
            doc! {"_id": 1, "a": 3},
        ),
        (
            doc! {"_id": 1, "a": 5},
            doc! {"$min": {"a": 7}},
            doc! {"_id": 1, "a": 5},
        ),
        (
            doc! {"_id": 1, "a": 5},
            doc! {"$max": {"a": 7}},
            doc! {"_id": 1, "a": 7},
        ),
        (
            doc! {"_id": 1, "a": 5},
            doc! {"$max": {"a": "x"}},
            doc! {"_id": 1, "a": "x"},
        ),
        (
            doc! {"_id": 1},
            doc! {"$min": {"a": 1}},
            doc! {"_id": 1, "a": 1},
        ),
        // $rename
        (
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"$rename": {"a": "z"}},
            doc! {"_id": 1, "b": 2, "z": 1},
        ),
        (
            doc! {"_id": 1, "a": {"b": 1, "x": 2}},
            doc! {"$rename": {"a.b": "a.c"}},
            doc! {"_id": 1, "a": {"x": 2, "c": 1}},
        ),
        (
            doc! {"_id": 1, "a": 1, "b": 2},
            doc! {"$rename": {"a": "b"}},
            doc! {"_id": 1, "b": 1},
        ),
        (
            doc! {"_id": 1, "b": 2},
            doc! {"$rename": {"a": "c"}},
            doc! {"_id": 1, "b": 2},
        ),
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$rename": {"a": "x.y"}},
            doc! {"_id": 1, "x": {"y": 1}},
        ),
        // $setOnInsert outside an insert is a no-op
        (
            doc! {"_id": 1},
            doc! {"$setOnInsert": {"a": 1}},
            doc! {"_id": 1},
        ),
        // $currentDate
        (
            doc! {"_id": 1},
            doc! {"$currentDate": {"a": true, "b": {"$type": "timestamp"}}},
            doc! {"_id": 1, "a": DateTime::from_millis(1_700_000_000_000), "b": Timestamp { time: 7, increment: 1 }},
        ),
        // $push
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$push": {"a": 2}},
            doc! {"_id": 1, "a": [1, 2]},
        ),
        (
            doc! {"_id": 1},
            doc! {"$push": {"a": 2}},
            doc! {"_id": 1, "a": [2]},
        ),
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$push": {"a": [2, 3]}},
            doc! {"_id": 1, "a": [1, [2, 3]]},
        ),
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$push": {"a": {"$each": [2, 3]}}},
            doc! {"_id": 1, "a": [1, 2, 3]},
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$push": {"a": {"$each": [9], "$position": 1}}},
            doc! {"_id": 1, "a": [1, 9, 2]},
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            doc! {"$push": {"a": {"$each": [9], "$position": -1}}},
            doc! {"_id": 1, "a": [1, 2, 9, 3]},
        ),
        (
            doc! {"_id": 1, "a": [3, 1]},
            doc! {"$push": {"a": {"$each": [2], "$sort": 1}}},
            doc! {"_id": 1, "a": [1, 2, 3]},
        ),
        (
            doc! {"_id": 1, "a": [3, 1]},
            doc! {"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}},
            doc! {"_id": 1, "a": [3, 2]},
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            doc! {"$push": {"a": {"$each": [4], "$slice": -2}}},
            doc! {"_id": 1, "a": [3, 4]},
        ),
        (
            doc! {"_id": 1, "a": [{"s": 2}, {"s": 1}]},
            doc! {"$push": {"a": {"$each": [{"s": 3}], "$sort": {"s": -1}}}},
            doc! {"_id": 1, "a": [{"s": 3}, {"s": 2}, {"s": 1}]},
        ),
        (
            doc! {"_id": 1},
            doc! {"$push": {"a": {"$each": []}}},
            doc! {"_id": 1, "a": []},
        ),
        // $addToSet
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$addToSet": {"a": 2}},
            doc! {"_id": 1, "a": [1, 2]},
        ),
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$addToSet": {"a": 3}},
            doc! {"_id": 1, "a": [1, 2, 3]},
        ),
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$addToSet": {"a": {"$each": [1, 4, 4, 5]}}},
            doc! {"_id": 1, "a": [1, 4, 5]},
        ),
        (
            doc! {"_id": 1},
            doc! {"$addToSet": {"a": 1}},
            doc! {"_id": 1, "a": [1]},
        ),
        // $pop
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            doc! {"$pop": {"a": 1}},
            doc! {"_id": 1, "a": [1, 2]},
        ),
        (
            doc! {"_id": 1, "a": [1, 2, 3]},
            doc! {"$pop": {"a": -1}},
            doc! {"_id": 1, "a": [2, 3]},
        ),
        (doc! {"_id": 1}, doc! {"$pop": {"a": 1}}, doc! {"_id": 1}),
        // $pull
        (
            doc! {"_id": 1, "a": [1, 2, 1, 3]},
            doc! {"$pull": {"a": 1}},
            doc! {"_id": 1, "a": [2, 3]},
        ),
        (
            doc! {"_id": 1, "a": [3, 6, 9]},
            doc! {"$pull": {"a": {"$gte": 6}}},
            doc! {"_id": 1, "a": [3]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1, "c": 1}, {"b": 2}]},
            doc! {"$pull": {"a": {"b": 1}}},
            doc! {"_id": 1, "a": [{"b": 2}]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 5}]},
            doc! {"$pull": {"a": {"b": {"$gt": 2}}}},
            doc! {"_id": 1, "a": [{"b": 1}]},
        ),
        (
            doc! {"_id": 1, "a": ["apple", "kiwi"]},
            doc! {"$pull": {"a": {"$in": ["kiwi"]}}},
            doc! {"_id": 1, "a": ["apple"]},
        ),
        (
            doc! {"_id": 1, "a": [[1, 2], [3]]},
            doc! {"$pull": {"a": [3]}},
            doc! {"_id": 1, "a": [[1, 2]]},
        ),
        // $pullAll
        (
            doc! {"_id": 1, "a": [0, 2, 5, 5, 1, 0]},
            doc! {"$pullAll": {"a": [0, 5]}},
            doc! {"_id": 1, "a": [2, 1]},
        ),
        // $bit
        (
            doc! {"_id": 1, "a": 13},
            doc! {"$bit": {"a": {"and": 10}}},
            doc! {"_id": 1, "a": 8},
        ),
        (
            doc! {"_id": 1, "a": 3},
            doc! {"$bit": {"a": {"or": 5_i64}}},
            doc! {"_id": 1, "a": 7_i64},
        ),
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$bit": {"a": {"xor": 5}}},
            doc! {"_id": 1, "a": 4},
        ),
        (
            doc! {"_id": 1},
            doc! {"$bit": {"a": {"or": 5}}},
            doc! {"_id": 1, "a": 5},
        ),
        // $[] and several operators
        (
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"$inc": {"a.$[]": 10}},
            doc! {"_id": 1, "a": [11, 12]},
        ),
        (
            doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
            doc! {"$set": {"a.$[].c": 0}},
            doc! {"_id": 1, "a": [{"b": 1, "c": 0}, {"b": 2, "c": 0}]},
        ),
        (
            doc! {"_id": 1, "a": 1, "b": 1},
            doc! {"$set": {"a": 2}, "$inc": {"b": 1}},
            doc! {"_id": 1, "a": 2, "b": 2},
        ),
        // Replacement keeps _id first.
        (
            doc! {"_id": 1, "a": 1},
            doc! {"b": 2},
            doc! {"_id": 1, "b": 2},
        ),
        (
            doc! {"_id": 1, "a": 1},
            doc! {"b": 2, "_id": 1},
            doc! {"b": 2, "_id": 1},
        ),
        (doc! {"_id": 1, "a": 1}, doc! {}, doc! {"_id": 1}),
        // _id set to the same value is allowed.
        (
            doc! {"_id": 1, "a": 1},
            doc! {"$set": {"_id": 1}},
            doc! {"_id": 1, "a": 1},
        ),
    ]
}

#[test]
fn update_cases() {
    for (doc, update, expected) in ok_cases() {
        match run(&doc, update.clone(), None, &ctx()) {
            Ok((got, _)) => assert_eq!(got, expected, "{doc} with {update}"),
            Err(e) => panic!("{doc} with {update}: unexpected error {e:?}"),
        }
    }
}

/// (document, update, modified)
#[test]
fn modified_flags() {
    let cases = vec![
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1}}, false),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"a": 1.0}}, true),
        (doc! {"_id": 1, "a": 1}, doc! {"$inc": {"a": 0}}, false),
        (doc! {"_id": 1, "a": 1}, doc! {"$unset": {"b": 1}}, false),
        (
            doc! {"_id": 1, "a": [1]},
            doc! {"$addToSet": {"a": 1}},
            false,
        ),
        (doc! {"_id": 1, "a": [1]}, doc! {"$pull": {"a": 2}}, false),
        (doc! {"_id": 1, "a": 1}, doc! {"$rename": {"a": "b"}}, true),
        (doc! {"_id": 1, "a": 1}, doc! {"a": 1}, false),
        (doc! {"_id": 1, "a": 1}, doc! {"a": 2}, true),
        (doc! {"_id": 1, "a": 5}, doc! {"$max": {"a": 5.0}}, false),
    ];
    for (doc, update, expected) in cases {
        let (_, modified) = run(&doc, update.clone(), None, &ctx()).expect("update applies");
        assert_eq!(modified, expected, "{doc} with {update}");
    }
}

/// (document, update, error code, message substring)
fn err_cases() -> Vec<(Document, Document, i32, &'static str)> {
    vec![
        (doc! {"_id": 1}, doc! {"$set": {}}, 9, "'$set' is empty. You must specify a field like so: {$set: {<field>: ...}}"),
        (doc! {"_id": 1}, doc! {"$foo": {"a": 1}}, 9, "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}, "b": 1}, 9, "Unknown modifier: b"),
        (doc! {"_id": 1}, doc! {"a": 1, "$set": {"b": 1}}, 52, "The dollar ($) prefixed field '$set' in '$set'"),
        (doc! {"_id": 1}, doc! {"$set": 1}, 9, "Modifiers operate on fields but we found type int instead. For example: {$mod: {<field>: ...}} not {$set: 1}"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}, "$inc": {"a": 1}}, 40, "Updating the path 'a' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$set": {"a.b": 1}, "$inc": {"a": 1}}, 40, "Updating the path 'a' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$set": {"a": 1}, "$inc": {"a.b": 1}}, 40, "Updating the path 'a.b' would create a conflict at 'a'"),
        (doc! {"_id": 1}, doc! {"$set": {"b": 1}, "$rename": {"a": "b"}}, 40, "conflict at 'b'"),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"_id": 2}}, 66, "Performing an update on the path '_id' would modify the immutable field '_id'"),
        (doc! {"_id": 1, "a": 1}, doc! {"$unset": {"_id": 1}}, 66, "Performing an update on the path '_id' would modify the immutable field '_id'"),
        (doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 1}, 66, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2"),
        (doc! {"_id": 1, "a": "x"}, doc! {"$inc": {"a": 1}}, 14, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string"),
        (doc! {"_id": 1}, doc! {"$inc": {"a": "x"}}, 14, "Cannot increment with non-numeric argument: {a: \"x\"}"),
        (doc! {"_id": 1, "a": i64::MAX}, doc! {"$inc": {"a": 1}}, 2, "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}"),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"a.b": 1}}, 28, "Cannot create field 'b' in element {a: 1}"),
        (doc! {"_id": 1, "a": [1, 2]}, doc! {"$set": {"a.b": 1}}, 28, "Cannot create field 'b' in element {a: [ 1, 2 ]}"),
        (doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 1}}, 2, "The field 'a' must be an array but is of type int in document {_id: 1}"),
        (doc! {"_id": 1, "a": 1}, doc! {"$addToSet": {"a": 1}}, 2, "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int"),
        (doc! {"_id": 1, "a": 1}, doc! {"$pull": {"a": 1}}, 2, "Cannot apply $pull to a non-array value"),
        (doc! {"_id": 1}, doc! {"$pop": {"a": 2}}, 9, "$pop expects 1 or -1, found: 2"),
        (doc! {"_id": 1}, doc! {"$pullAll": {"a": 1}}, 2, "$pullAll requires an array argument but was given a int"),
        (doc! {"_id": 1}, doc! {"$push": {"a": {"$each": 1}}}, 2, "The argument to $each in $push must be an array but it was of type: int"),
        (doc! {"_id": 1}, doc! {"$push": {"a": {"$each": [1], "$foo": 1}}}, 2, "Unrecognized clause in $push: $foo"),
        (doc! {"_id": 1}, doc! {"$bit": {"a": {"nand": 1}}}, 2, "The $bit modifier only supports 'and', 'or', and 'xor'"),
        (doc! {"_id": 1, "a": 1.5}, doc! {"$bit": {"a": {"and": 1}}}, 2, "Cannot apply $bit to a value of non-integral type."),
        (doc! {"_id": 1}, doc! {"$rename": {"a": "a"}}, 2, "The source and target field for $rename must differ"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": "a.b"}}, 2, "must not be on the same path"),
        (doc! {"_id": 1}, doc! {"$rename": {"a": 1}}, 2, "The 'to' field for $rename must be a string: a: 1"),
        (doc! {"_id": 1, "a": [{"b": 1}]}, doc! {"$rename": {"a.b": "c"}}, 2, "The source field cannot be an array element"),
        (doc! {"_id": 1}, doc! {"$set": {"": 1}}, 56, "An empty update path is not valid."),
        (doc! {"_id": 1}, doc! {"$set": {"a..b": 1}}, 56, "contains an empty field name"),
        (doc! {"_id": 1, "a": [1]}, doc! {"$set": {"a.$": 1}}, 2, "The positional operator did not find the match needed from the query."),
        (doc! {"_id": 1}, doc! {"$set": {"$.a": 1}}, 2, "Cannot have positional (i.e. '$') element in the first position in path '$.a'"),
        (doc! {"_id": 1}, doc! {"$set": {"a.$[x]": 1}}, 2, "No array filter found for identifier 'x' in path 'a.$[x]'"),
        (doc! {"_id": 1}, doc! {"$set": {"a.$[]": 1}}, 2, "The path 'a' must exist in the document in order to apply array updates."),
        (doc! {"_id": 1, "a": 1}, doc! {"$set": {"a.$[]": 1}}, 2, "Cannot apply array updates to non-array element a: 1"),
        (doc! {"_id": 1}, doc! {"$currentDate": {"a": 1}}, 2, "is not valid type for $currentDate"),
    ]
}

#[test]
fn update_errors() {
    for (doc, update, code, msg) in err_cases() {
        match run(&doc, update.clone(), None, &ctx()) {
            Ok((got, _)) => panic!("{doc} with {update}: expected error {code}, got {got}"),
            Err(e) => {
                assert_eq!(e.code.code(), code, "{doc} with {update}: {}", e.message);
                assert!(
                    e.message.contains(msg),
                    "{doc} with {update}: {}",
                    e.message
                );
            }
        }
    }
}

#[test]
fn array_filters() {
    let filters = [doc! {"x": {"$gte": 2}}];
    let (got, _) = run(
        &doc! {"_id": 1, "a": [1, 2, 3]},
        doc! {"$set": {"a.$[x]": 0}},
        Some(&filters),
        &ctx(),
    )
    .expect("applies");
    assert_eq!(got, doc! {"_id": 1, "a": [1, 0, 0]});

    let filters = [doc! {"e.grade": {"$gte": 85}}];
    let (got, _) = run(
        &doc! {"_id": 1, "grades": [{"grade": 80, "mean": 75}, {"grade": 85, "mean": 90}]},
        doc! {"$set": {"grades.$[e].mean": 100}},
        Some(&filters),
        &ctx(),
    )
    .expect("applies");
    assert_eq!(
        got,
        doc! {"_id": 1, "grades": [{"grade": 80, "mean": 75}, {"grade": 85, "mean": 100}]}
    );

    let filters = [doc! {"y": 1}];
    let e = run(
        &doc! {"_id": 1},
        doc! {"$set": {"a": 1}},
        Some(&filters),
        &ctx(),
    )
    .expect_err("unused");
    assert_eq!(e.code.code(), 9);
    assert!(
        e.message
            .starts_with("The array filter for identifier 'y' was not used in the update"),
        "{}",
        e.message
    );

    let filters = [doc! {"X": 1}];
    let e = Update::parse(
        &Bson::Document(doc! {"$set": {"a.$[X]": 1}}),
        Some(&filters),
    )
    .expect_err("bad id");
    assert_eq!(e.code.code(), 2);
}

#[test]
fn positional_and_upsert_insert() {
    let c = UpdateContext {
        matched_array_index: Some(1),
        ..ctx()
    };
    let (got, _) = run(
        &doc! {"_id": 1, "a": [1, 2, 3]},
        doc! {"$set": {"a.$": 9}},
        None,
        &c,
    )
    .expect("applies");
    assert_eq!(got, doc! {"_id": 1, "a": [1, 9, 3]});

    let ins = UpdateContext {
        is_upsert_insert: true,
        ..ctx()
    };
    let u = Update::parse(
        &Bson::Document(doc! {"$set": {"b": 1}, "$setOnInsert": {"c": 2}}),
        None,
    )
    .expect("parses");
    let d = u
        .upsert_document(&doc! {"a.x": 5, "_id": 7, "q": {"$gt": 1}}, &ins)
        .expect("upserts");
    assert_eq!(d, doc! {"_id": 7, "a": {"x": 5}, "b": 1, "c": 2});
    let u = Update::parse(&Bson::Document(doc! {"z": 1}), None).expect("parses");
    let d = u
        .upsert_document(&doc! {"_id": 7, "q": 1}, &ins)
        .expect("upserts");
    assert_eq!(d, doc! {"_id": 7, "z": 1});
}

#[test]
fn upsert_seeds() {
    let cases = vec![
        (doc! {"a": 1}, Ok(doc! {"a": 1})),
        (
            doc! {"b": 1, "a": {"$eq": 2}, "_id": 3},
            Ok(doc! {"_id": 3, "a": 2, "b": 1}),
        ),
        (
            doc! {"$and": [{"a.b": 1}, {"c": {"$in": [4]}}], "d": {"$gt": 1}, "$or": [{"e": 1}]},
            Ok(doc! {"a": {"b": 1}, "c": 4}),
        ),
        (doc! {"a": 1, "a.b": 2}, Err(54)),
        (doc! {"$and": [{"a": 1}, {"a": 2}]}, Err(54)),
    ];
    for (filter, expected) in cases {
        match (upsert_seed(&filter), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{filter}"),
            (Err(e), Err(code)) => assert_eq!(e.code.code(), code, "{filter}"),
            (got, want) => panic!("{filter}: got {got:?}, want {want:?}"),
        }
    }
}

/// Pipeline updates: stages in order, `_id` kept, no-op not modified.
#[test]
fn pipeline_updates() {
    let ctx = UpdateContext::default();
    let cases = [
        (
            bson::bson!([{"$set": {"c": {"$add": ["$a", "$b"]}}}, {"$unset": "b"}]),
            doc! {"_id": 1, "a": 1, "c": 3},
            true,
        ),
        (
            bson::bson!([{"$replaceWith": {"x": "$a"}}]),
            doc! {"_id": 1, "x": 1},
            true,
        ),
        (
            bson::bson!([{"$project": {"a": 1, "b": 1}}]),
            doc! {"_id": 1, "a": 1, "b": 2},
            false,
        ),
        (bson::bson!([]), doc! {"_id": 1, "a": 1, "b": 2}, false),
    ];
    for (u, want, modified) in cases {
        let mut d = doc! {"_id": 1, "a": 1, "b": 2};
        let update = Update::parse(&u, None).expect("parses");
        assert_eq!(update.apply(&mut d, &ctx).ok(), Some(modified), "{u}");
        assert_eq!(d, want, "{u}");
    }
    let e = Update::parse(&bson::bson!([{"$group": {"_id": 1}}]), None).expect_err("stage");
    assert_eq!(e.code.code(), 72);
}

/// Seed 001: `$push` a child, positional `$set`, `$addToSet` with `$each`.
#[test]
fn seed_001_examples() {
    let jones = doc! {"_id": 2, "employee": "Jones", "Children": [{"child": "Joe"}, {"child": "Mike"}], "Skills": [{"skill": "typing"}, {"skill": "dictation"}, {"skill": "data entry"}]};
    let (got, m) = run(
        &jones,
        doc! {"$push": {"Children": {"child": "Sara"}}},
        None,
        &ctx(),
    )
    .expect("push");
    assert!(m);
    assert_eq!(got.get_array("Children").map(|a| a.len()).ok(), Some(3));
    assert_eq!(
        got.get_array("Children").ok().and_then(|a| a.last()),
        Some(&Bson::Document(doc! {"child": "Sara"}))
    );

    // The query {"Skills.skill": "typing"} matches Smith's Skills at index 0.
    let smith = doc! {"_id": 1, "employee": "Smith", "Children": [{"child": "Sam"}, {"child": "Sue"}], "Skills": [{"skill": "typing"}, {"skill": "filing"}]};
    let filter =
        crate::matcher::Matcher::parse(&doc! {"employee": "Smith", "Skills.skill": "typing"})
            .expect("filter");
    let raw = bson::RawDocumentBuf::from_document(&smith).expect("raw");
    let pos = filter
        .matches_with_position(&raw)
        .expect("matches")
        .flatten();
    let c = UpdateContext {
        matched_array_index: pos,
        ..ctx()
    };
    let (got, _) = run(
        &smith,
        doc! {"$set": {"Skills.$.skill": "word processing"}},
        None,
        &c,
    )
    .expect("positional");
    assert_eq!(
        got.get_array("Skills").ok().cloned(),
        Some(vec![
            Bson::Document(doc! {"skill": "word processing"}),
            Bson::Document(doc! {"skill": "filing"})
        ])
    );

    let jones = doc! {"_id": 1, "sname": "Jones", "Courses": [{"cname": "Math", "grade": "A"}, {"cname": "Science", "grade": "B"}]};
    let (got, _) = run(
        &jones,
        doc! {"$addToSet": {"Courses": {"cname": "Physics", "grade": "B"}}},
        None,
        &ctx(),
    )
    .expect("addToSet");
    assert_eq!(
        got,
        doc! {"_id": 1, "sname": "Jones", "Courses": [{"cname": "Math", "grade": "A"}, {"cname": "Science", "grade": "B"}, {"cname": "Physics", "grade": "B"}]}
    );
    let smith = doc! {"_id": 2, "sname": "Smith", "Courses": [{"cname": "Math", "grade": "A"}, {"cname": "Physics", "grade": "C"}, {"cname": "Science", "grade": "A"}]};
    let (got, _) = run(&smith, doc! {"$addToSet": {"Courses": {"$each": [{"cname": "Chemistry", "grade": "A"}, {"cname": "English", "grade": "B"}]}}}, None, &ctx()).expect("each");
    assert_eq!(
        got,
        doc! {"_id": 2, "sname": "Smith", "Courses": [{"cname": "Math", "grade": "A"}, {"cname": "Physics", "grade": "C"}, {"cname": "Science", "grade": "A"}, {"cname": "Chemistry", "grade": "A"}, {"cname": "English", "grade": "B"}]}
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn scalar() -> impl Strategy<Value = Bson> {
        prop_oneof![
            (-3i32..3).prop_map(Bson::Int32),
            (-3i64..3).prop_map(Bson::Int64),
            Just(Bson::Double(1.5)),
            Just(Bson::String("x".into())),
            Just(Bson::Null),
            Just(Bson::Boolean(true)),
        ]
    }

    fn value() -> impl Strategy<Value = Bson> {
        scalar().prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                prop::collection::vec((prop::sample::select(vec!["a", "b", "0"]), inner), 0..3)
                    .prop_map(|kv| Bson::Document(
                        kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                    )),
            ]
        })
    }

    fn path() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "a", "b", "a.b", "a.0", "a.1.b", "a.$[]", "b.a.0", "a.b.c", "_id",
        ])
    }

    /// Operators for which applying the same update twice changes nothing the second time.
    fn idempotent_op() -> impl Strategy<Value = (&'static str, Bson)> {
        prop_oneof![
            value().prop_map(|v| ("$set", v)),
            Just(("$unset", Bson::Int32(1))),
            value().prop_map(|v| ("$min", v)),
            value().prop_map(|v| ("$max", v)),
            value().prop_map(|v| ("$addToSet", v)),
            value().prop_map(|v| ("$pull", v)),
            prop::collection::vec(scalar(), 0..3).prop_map(|v| ("$pullAll", Bson::Array(v))),
            Just(("$bit", Bson::Document(doc! {"or": 5}))),
            Just(("$currentDate", Bson::Boolean(true))),
        ]
    }

    proptest! {
        #[test]
        fn idempotent_updates_never_panic(
            fields in prop::collection::vec((prop::sample::select(vec!["a", "b"]), value()), 0..3),
            ops in prop::collection::vec((idempotent_op(), path()), 1..3),
        ) {
            let mut d = doc! {"_id": 1};
            for (k, v) in fields {
                d.insert(k, v);
            }
            let mut update = Document::new();
            for ((op, arg), p) in ops {
                let mut inner = update.get_document(op).cloned().unwrap_or_default();
                inner.insert(p, arg);
                update.insert(op, inner);
            }
            let c = ctx();
            let Ok(u) = Update::parse(&Bson::Document(update.clone()), None) else {
                return Ok(());
            };
            let mut once = d.clone();
            if u.apply(&mut once, &c).is_ok() {
                let mut twice = once.clone();
                let modified = u.apply(&mut twice, &c);
                // Padding an array can make a path the first application skipped non-viable.
                prop_assume!(modified.is_ok());
                // Unsetting an array element sets it to null, which MongoDB counts as a
                // modification even when it already was null.
                let may_modify = update.contains_key("$unset");
                prop_assert!(
                    matches!(modified, Ok(false)) || (may_modify && matches!(modified, Ok(true))),
                    "{} {} -> {} then {:?}", d, update, once, modified
                );
                prop_assert_eq!(&twice, &once);
            }
        }

        #[test]
        fn any_update_never_panics(
            fields in prop::collection::vec((prop::sample::select(vec!["a", "b"]), value()), 0..3),
            ops in prop::collection::vec((prop::sample::select(vec!["$inc", "$mul", "$push", "$pop", "$rename", "$setOnInsert", "$bit", "$foo", "$set"]), value(), path()), 1..3),
            index in prop::option::of(0usize..3),
        ) {
            let mut d = doc! {"_id": 1};
            for (k, v) in fields {
                d.insert(k, v);
            }
            let mut update = Document::new();
            for (op, arg, p) in ops {
                let mut inner = update.get_document(op).cloned().unwrap_or_default();
                inner.insert(p, arg);
                update.insert(op, inner);
            }
            let c = UpdateContext { matched_array_index: index, ..ctx() };
            if let Ok(u) = Update::parse(&Bson::Document(update), None) {
                let mut x = d.clone();
                let _ = u.apply(&mut x, &c);
            }
        }
    }
}
