//! Explain output of stage trees with MongoDB's field names and nesting.

use crate::exec::{Executor, Stage};
use bson::{doc, Bson, Document};
use nidus_common::number;

/// Fields only meaningful after execution, left out of `queryPlanner` plans.
const RUNTIME_FIELDS: &[&str] = &[
    "keysExamined",
    "seeks",
    "dupsTested",
    "dupsDropped",
    "docsExamined",
    "alreadyHasObj",
    "totalDataSizeSorted",
    "spilledDataStorageSize",
    "usedDisk",
    "spills",
    "keyPatternSummary",
    "nMatched",
    "nWouldModify",
    "nWouldUpsert",
    "nWouldDelete",
];

/// The plan shape: `{stage, filter?, ...stage fields, inputStage(s)}`.
pub fn plan_document(s: &Stage) -> Document {
    let specific = s.specific_stats();
    let mut d = doc! { "stage": s.name() };
    if let Some(f) = specific.get("filter") {
        d.insert("filter", f.clone());
    }
    for (k, v) in specific.iter() {
        if k != "filter" && !RUNTIME_FIELDS.contains(&k.as_str()) {
            d.insert(k.clone(), v.clone());
        }
    }
    nidus_common::narrow_counters(&mut d);
    add_children(&mut d, s, plan_document);
    d
}

/// The executed shape with counters (`executionStages`).
pub fn stats_document(s: &Stage) -> Document {
    let specific = s.specific_stats();
    let c = &s.common;
    let mut d = doc! { "stage": s.name() };
    if let Some(f) = specific.get("filter") {
        d.insert("filter", f.clone());
    }
    d.insert("nReturned", number(c.advanced));
    d.insert("executionTimeMillisEstimate", 0i32);
    d.insert("works", number(c.works));
    d.insert("advanced", number(c.advanced));
    d.insert("needTime", number(c.need_time));
    d.insert("needYield", number(c.need_yield));
    d.insert("saveState", number(c.save_state));
    d.insert("restoreState", number(c.restore_state));
    d.insert("isEOF", i32::from(c.is_eof));
    for (k, v) in specific.iter() {
        if k != "filter" && k != "keyPatternSummary" {
            d.insert(k.clone(), v.clone());
        }
    }
    // Stage counters go through MongoDB's appendNumber rule (explain_stats.cpp).
    nidus_common::narrow_counters(&mut d);
    add_children(&mut d, s, stats_document);
    d
}

fn add_children(d: &mut Document, s: &Stage, render: fn(&Stage) -> Document) {
    let children = s.children();
    match children.as_slice() {
        [] => {}
        [one] => {
            d.insert("inputStage", render(one));
        }
        many => {
            let items: Vec<Bson> = many.iter().map(|c| Bson::Document(render(c))).collect();
            d.insert("inputStages", items);
        }
    }
}

/// `queryPlanner` of an executor's plan.
pub fn query_planner(ns: &str, parsed_query: Document, exec: &Executor) -> Document {
    let mut d = doc! {
        "namespace": ns,
        "parsedQuery": parsed_query,
        "indexFilterSet": exec.index_filter_set,
    };
    if let Some(key) = &exec.cache_key {
        d.insert("planCacheShapeHash", key.shape_hash.clone());
        d.insert("planCacheKey", key.key.clone());
    }
    d.extend(doc! {
        "maxIndexedOrSolutionsReached": false,
        "maxIndexedAndSolutionsReached": false,
        "maxScansToExplodeReached": exec.max_scans_to_explode_reached,
        "prunedSimilarIndexes": false,
        "winningPlan": cached_flag(plan_document(&exec.root), exec.is_cached),
        "rejectedPlans": exec.rejected.iter().map(|r| Bson::Document(plan_document(r))).collect::<Vec<_>>(),
    });
    d
}

/// MongoDB 8.0 opens the winning plan and the executed stages with `isCached` (the plan
/// came from the plan cache).
fn cached_flag(stage: Document, is_cached: bool) -> Document {
    let mut d = doc! {"isCached": is_cached};
    d.extend(stage);
    d
}

/// `executionStats` after running the plan to completion; with `all_plans`, also the trial
/// statistics of the rejected plans (`allPlansExecution`).
pub fn execution_stats(exec: &Executor, n_returned: u64, millis: u64, all_plans: bool) -> Document {
    let root = &exec.root;
    let mut d = doc! {
        "executionSuccess": true,
        "nReturned": number(n_returned),
        "executionTimeMillis": number(millis),
        "totalKeysExamined": number(root.total("keysExamined")),
        "totalDocsExamined": number(root.total("docsExamined")),
        "executionStages": cached_flag(stats_document(root), exec.is_cached),
    };
    if all_plans {
        let mut plans = vec![Bson::Document(summary(&exec.root))];
        plans.extend(exec.rejected.iter().map(|r| Bson::Document(summary(r))));
        d.insert("allPlansExecution", plans);
    }
    d
}

/// One plan's trial statistics (`allPlansExecution`, `$planCacheStats`'s `creationExecStats`).
pub fn summary(s: &Stage) -> Document {
    doc! {
        "nReturned": number(s.common.advanced),
        "executionTimeMillisEstimate": 0i32,
        "totalKeysExamined": number(s.total("keysExamined")),
        "totalDocsExamined": number(s.total("docsExamined")),
        "executionStages": stats_document(s),
    }
}
