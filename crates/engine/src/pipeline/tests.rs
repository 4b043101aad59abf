//! Stage and optimizer tests over in-memory input (no collection is read except where a
//! case says so). Each table row: input documents, a pipeline, the expected output or the
//! expected error code.

use super::optimize;
use super::{parse_pipeline, run, ExpCtx, ParseCtx, VecStream};
use crate::Engine;
use bson::{bson, doc, Bson, Document};
use nidus_storage_rocks::RocksEngine;
use std::sync::Arc;

fn engine() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
    (dir, Engine::open(kv).expect("engine"))
}

fn docs(v: Bson) -> Vec<Document> {
    match v {
        Bson::Array(a) => a
            .into_iter()
            .map(|d| match d {
                Bson::Document(d) => d,
                other => panic!("not a document: {other}"),
            })
            .collect(),
        other => panic!("not an array: {other}"),
    }
}

/// Runs `pipeline` over `input`; Ok(output) or Err(code).
fn run_over(e: &Arc<Engine>, input: Bson, pipeline: Bson) -> Result<Vec<Document>, i32> {
    let pcx = ParseCtx::new("test");
    let Bson::Array(items) = pipeline else {
        panic!("pipeline must be an array")
    };
    let stages = parse_pipeline(&items, &pcx).map_err(|e| e.code.code())?;
    let ctx = ExpCtx::new(e.clone(), "test").with_bindings(&pcx);
    run::collect(&ctx, None, &stages, Some(VecStream::boxed(docs(input))))
        .map_err(|e| e.code.code())
}

#[test]
fn stages_produce_mongodb_results() {
    let (_dir, e) = engine();
    let smiths = bson!([
        {"_id": 1, "employee": "Smith", "Children": [{"child": "Sam"}, {"child": "Sue"}], "Skills": [{"skill": "typing"}]},
        {"_id": 2, "employee": "Smith", "Children": [{"child": "Tom"}], "Skills": [{"skill": "filing"}, {"skill": "sorting"}]},
        {"_id": 3, "employee": "Jones", "Children": [{"child": "Joe"}], "Skills": [{"skill": "typing"}]},
    ]);
    let cases: Vec<(Bson, Bson, Bson)> = vec![
        // Seed 001: grouping by a non-key collapses the two Smiths.
        (
            smiths.clone(),
            bson!([
                {"$unwind": "$Children"},
                {"$group": {"_id": "$employee", "Children": {"$push": "$Children"}, "Skills": {"$first": "$Skills"}}},
                {"$project": {"_id": 0, "employee": "$_id", "Children": 1, "Skills": 1}},
                {"$sort": {"employee": 1}},
            ]),
            bson!([
                {"Children": [{"child": "Joe"}], "Skills": [{"skill": "typing"}], "employee": "Jones"},
                {"Children": [{"child": "Sam"}, {"child": "Sue"}, {"child": "Tom"}], "Skills": [{"skill": "typing"}], "employee": "Smith"},
            ]),
        ),
        (
            bson!([{"a": [1, 2]}, {"a": []}, {"a": null}, {"b": 1}, {"a": 5}]),
            bson!([{"$unwind": {"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}}]),
            bson!([
                {"a": 1, "i": 0i64}, {"a": 2, "i": 1i64}, {"i": null}, {"a": null, "i": null},
                {"b": 1, "i": null}, {"a": 5, "i": null},
            ]),
        ),
        (
            bson!([{"a": [1, 2]}, {"a": []}, {"a": null}, {"b": 1}]),
            bson!([{"$unwind": "$a"}]),
            bson!([{"a": 1}, {"a": 2}]),
        ),
        (
            bson!([{"x": 1}, {"x": 2}, {"x": 3}]),
            bson!([{"$count": "n"}]),
            bson!([{"n": 3}]),
        ),
        (bson!([]), bson!([{"$count": "n"}]), bson!([])),
        (
            bson!([{"x": "a"}, {"x": "b"}, {"x": "a"}]),
            bson!([{"$sortByCount": "$x"}]),
            bson!([{"_id": "a", "count": 2}, {"_id": "b", "count": 1}]),
        ),
        (
            bson!([{"p": 5}, {"p": 15}, {"p": 25}, {"p": "x"}]),
            bson!([{"$bucket": {"groupBy": "$p", "boundaries": [0, 10, 20], "default": "other"}}]),
            bson!([{"_id": 0, "count": 1}, {"_id": 10, "count": 1}, {"_id": "other", "count": 2}]),
        ),
        (
            bson!([{"v": 1}, {"v": 2}, {"v": 2}, {"v": 3}, {"v": 4}]),
            bson!([{"$bucketAuto": {"groupBy": "$v", "buckets": 2}}]),
            bson!([{"_id": {"min": 1, "max": 3}, "count": 3}, {"_id": {"min": 3, "max": 4}, "count": 2}]),
        ),
        (
            bson!([{"a": {"b": 1}, "c": [{"d": 1}, 5]}]),
            bson!([{"$addFields": {"a.e": 2, "c.f": "$a.b", "g": {"h": {"$add": [1, 1]}}}}]),
            bson!([{"a": {"b": 1, "e": 2}, "c": [{"d": 1, "f": 1}, {"f": 1}], "g": {"h": 2}}]),
        ),
        (
            bson!([{"_id": 1, "a": 1, "b": 2}]),
            bson!([{"$set": {"a": "$$REMOVE"}}, {"$unset": "b"}]),
            bson!([{"_id": 1}]),
        ),
        (
            bson!([{"a": {"b": 1}}]),
            bson!([{"$replaceRoot": {"newRoot": "$a"}}]),
            bson!([{"b": 1}]),
        ),
        (
            bson!([{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}]),
            bson!([{"$sort": {"x": -1}}, {"$skip": 1}, {"$limit": 2}]),
            bson!([{"x": 3}, {"x": 2}]),
        ),
        (
            bson!([{"x": 1}, {"x": 2}, {"x": 3}]),
            bson!([{"$facet": {"n": [{"$count": "c"}], "big": [{"$match": {"x": {"$gt": 1}}}, {"$project": {"_id": 0, "x": 1}}]}}]),
            bson!([{"n": [{"c": 3}], "big": [{"x": 2}, {"x": 3}]}]),
        ),
        (
            bson!([{"level": 1, "sub": {"level": 5, "v": 1}, "arr": [{"level": 5}, {"level": 1, "w": 2}]}]),
            bson!([{"$redact": {"$cond": [{"$gt": ["$level", 3]}, "$$PRUNE", "$$DESCEND"]}}]),
            bson!([{"level": 1, "arr": [{"level": 1, "w": 2}]}]),
        ),
        (
            bson!([{"g": 1, "v": 2}, {"g": 1.0, "v": 3}, {"g": 2, "v": 1}]),
            bson!([{"$group": {"_id": "$g", "s": {"$sum": "$v"}, "m": {"$max": "$v"}, "c": {"$count": {}}}}]),
            bson!([{"_id": 1, "s": 5, "m": 3, "c": 2}, {"_id": 2, "s": 1, "m": 1, "c": 1}]),
        ),
        (
            bson!([{}]),
            bson!([{"$documents": [{"a": 1}, {"a": 2}]}, {"$match": {"a": 2}}]),
            bson!([{"a": 2}]),
        ),
    ];
    for (input, pipeline, want) in cases {
        let got = run_over(&e, input, pipeline.clone());
        assert_eq!(got, Ok(docs(want)), "pipeline {pipeline}");
    }
}

#[test]
fn stage_errors_carry_mongodb_codes() {
    let (_dir, e) = engine();
    let cases: Vec<(Bson, Bson, i32)> = vec![
        (bson!([]), bson!([{"$foo": 1}]), 40324),
        (
            bson!([]),
            bson!([{"$lookup": {"from": "f", "pipeline": [{"$out": "x"}], "as": "r"}}]),
            51047,
        ),
        (
            bson!([]),
            bson!([{"$unionWith": {"coll": "f", "pipeline": [{"$out": "x"}]}}]),
            31441,
        ),
        (bson!([]), bson!([{"$match": {}, "$sort": {"a": 1}}]), 40323),
        (bson!([]), bson!([{"$match": 1}]), 15959),
        (bson!([]), bson!([{"$project": 1}]), 15969),
        (bson!([]), bson!([{"$unwind": 1}]), 15981),
        (bson!([]), bson!([{"$unwind": "a"}]), 28818),
        (
            bson!([]),
            bson!([{"$unwind": {"path": "$a", "x": 1}}]),
            28811,
        ),
        (bson!([]), bson!([{"$unwind": {}}]), 28812),
        (
            bson!([]),
            bson!([{"$unwind": {"path": "$a", "preserveNullAndEmptyArrays": 1}}]),
            28809,
        ),
        (bson!([]), bson!([{"$group": {"a": {"$sum": 1}}}]), 15955),
        (bson!([]), bson!([{"$group": 1}]), 15947),
        (
            bson!([]),
            bson!([{"$group": {"_id": 1, "a": {"$bogus": 1}}}]),
            15952,
        ),
        (
            bson!([]),
            bson!([{"$group": {"_id": 1, "a.b": {"$sum": 1}}}]),
            40235,
        ),
        (bson!([]), bson!([{"$sort": {}}]), 15976),
        (bson!([]), bson!([{"$sort": {"a": 2}}]), 15975),
        (bson!([]), bson!([{"$limit": 0}]), 15958),
        (bson!([]), bson!([{"$limit": "a"}]), 15957),
        (bson!([]), bson!([{"$skip": -1}]), 15956),
        (bson!([]), bson!([{"$count": ""}]), 40157),
        (bson!([]), bson!([{"$count": "$a"}]), 40158),
        (bson!([]), bson!([{"$count": "a.b"}]), 40160),
        (
            bson!([]),
            bson!([{"$bucket": {"groupBy": "$a", "boundaries": [1]}}]),
            40192,
        ),
        (
            bson!([]),
            bson!([{"$bucket": {"groupBy": "$a", "boundaries": [2, 1]}}]),
            40194,
        ),
        (
            bson!([]),
            bson!([{"$bucket": {"groupBy": "$a", "boundaries": [1, "a"]}}]),
            40193,
        ),
        (bson!([]), bson!([{"$facet": {}}]), 40169),
        (bson!([]), bson!([{"$facet": {"a": 1}}]), 40170),
        (bson!([]), bson!([{"$sample": {"size": -1}}]), 28747),
        (bson!([]), bson!([{"$lookup": {"from": "x"}}]), 9),
        (
            bson!([]),
            bson!([{"$match": {}}, {"$documents": []}]),
            40602,
        ),
        (bson!([{"a": 1}]), bson!([{"$replaceWith": "$a"}]), 40228),
        (bson!([{"a": 1}]), bson!([{"$redact": "keep"}]), 17053),
        (
            bson!([{"p": 50}]),
            bson!([{"$bucket": {"groupBy": "$p", "boundaries": [0, 10]}}]),
            40066,
        ),
    ];
    for (input, pipeline, code) in cases {
        let got = run_over(&e, input, pipeline.clone());
        assert_eq!(got, Err(code), "pipeline {pipeline}");
    }
}

/// Stage names after the optimizer rules (the `$cursor` pushdown is not applied here).
fn optimized(pipeline: Bson) -> Vec<Document> {
    let pcx = ParseCtx::new("test");
    let Bson::Array(items) = pipeline else {
        panic!("pipeline must be an array")
    };
    let mut stages = parse_pipeline(&items, &pcx).expect("parse");
    optimize::optimize(&mut stages).expect("optimize");
    stages
        .iter()
        .map(|s| super::stage_document(s.as_ref()))
        .collect()
}

#[test]
fn optimizer_moves_independent_matches_only() {
    let cases: Vec<(Bson, Vec<&str>)> = vec![
        // Seed 000: a filter on a renamed path stays after the $project.
        (
            bson!([{"$project": {"customer_id": 1, "email": "$contact.email"}}, {"$match": {"email": "x"}}]),
            vec!["$project", "$match"],
        ),
        // A filter on a kept field moves first.
        (
            bson!([{"$project": {"customer_id": 1, "email": "$contact.email"}}, {"$match": {"customer_id": "C1"}}]),
            vec!["$match", "$project"],
        ),
        (
            bson!([{"$addFields": {"b": 1}}, {"$match": {"a": 1}}]),
            vec!["$match", "$addFields"],
        ),
        (
            bson!([{"$addFields": {"a.b": 1}}, {"$match": {"a": 1}}]),
            vec!["$addFields", "$match"],
        ),
        (
            bson!([{"$unwind": "$a"}, {"$match": {"a.b": 1}}]),
            vec!["$unwind", "$match"],
        ),
        (
            bson!([{"$unwind": "$a"}, {"$match": {"c": 1}}]),
            vec!["$match", "$unwind"],
        ),
        (
            bson!([{"$sort": {"a": 1}}, {"$match": {"a": 1}}]),
            vec!["$match", "$sort"],
        ),
        (
            bson!([{"$limit": 5}, {"$match": {"a": 1}}]),
            vec!["$limit", "$match"],
        ),
        (
            bson!([{"$sort": {"a": 1}}, {"$limit": 5}, {"$match": {"a": 1}}]),
            vec!["$sort", "$match"],
        ),
        (
            bson!([{"$group": {"_id": "$a"}}, {"$match": {"_id": 1}}]),
            vec!["$group", "$match"],
        ),
        (
            bson!([{"$match": {"a": 1}}, {"$match": {"b": 1}}]),
            vec!["$match"],
        ),
        (
            bson!([{"$sort": {"a": 1}}, {"$limit": 3}, {"$limit": 2}]),
            vec!["$sort"],
        ),
        (bson!([{"$skip": 1}, {"$skip": 2}]), vec!["$skip"]),
    ];
    for (pipeline, want) in cases {
        let got = optimized(pipeline.clone());
        let names: Vec<&str> = got
            .iter()
            .map(|d| d.keys().next().map(String::as_str).unwrap_or(""))
            .collect();
        assert_eq!(names, want, "pipeline {pipeline}");
    }
    let merged = optimized(bson!([{"$sort": {"a": 1}}, {"$limit": 3}, {"$limit": 2}]));
    assert_eq!(
        merged[0],
        doc! {"$sort": {"sortKey": {"a": 1}, "limit": 2i64}}
    );
}

#[test]
fn blocking_stage_memory_limit_needs_allow_disk_use() {
    let (_dir, e) = engine();
    let mut ctx = ExpCtx::new(e, "test");
    let over = super::MAX_BLOCKING_STAGE_BYTES + 1;
    let err = ctx.memory("$group").add(over).expect_err("over the limit");
    assert_eq!(err.code.code(), 292);
    assert_eq!(
        err.message,
        "Exceeded memory limit for $group, but didn't allow external spilling. Pass allowDiskUse:true to opt in."
    );
    let err = ctx.memory("$sort").add(over).expect_err("over the limit");
    assert_eq!(err.code.code(), 292);
    ctx.allow_disk_use = true;
    assert!(ctx.memory("$group").add(over).is_ok());
}

#[test]
fn output_documents_over_16_mib_fail() {
    let (_dir, e) = engine();
    let big = "x".repeat(1024 * 1024);
    let input: Vec<Bson> = (0..17)
        .map(|i| Bson::Document(doc! {"i": i, "s": big.clone()}))
        .collect();
    let got = run_over(
        &e,
        Bson::Array(input),
        bson!([{"$group": {"_id": null, "all": {"$push": "$s"}}}]),
    );
    assert_eq!(got, Err(10334));
}
