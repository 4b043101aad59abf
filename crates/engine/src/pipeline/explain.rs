//! Aggregate explain in MongoDB's shape: when every stage went into the find plan, the
//! find's `queryPlanner` (and `executionStats`) at the top; otherwise `stages`, whose first
//! entry is `{$cursor: {queryPlanner, executionStats?}}` and then one `{$stage: spec}` per
//! remaining stage (with `nReturned` and `executionTimeMillisEstimate` after execution).

use super::run::Opened;
use super::stage_document;
use crate::plan::explain;
use bson::{doc, Bson, Document};
use nidus_query::matcher::Matcher;
use std::sync::atomic::Ordering;

/// What explain reports beyond the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

/// The explain reply body (without `command`/`serverInfo`). With execution verbosities the
/// pipeline must have been drained already; `n_returned` is what it produced.
pub fn explain(opened: &Opened, verbosity: Verbosity, n_returned: u64, millis: u64) -> Document {
    let mut out = doc! {"explainVersion": "1"};
    let executed = verbosity != Verbosity::QueryPlanner;
    let all_plans = verbosity == Verbosity::AllPlansExecution;
    let cursor = opened.cursor.as_ref().map(|c| {
        let exec = c.exec.lock();
        let parsed = Matcher::parse(&c.spec.filter)
            .map(|m| m.canonical_document())
            .unwrap_or_else(|_| c.spec.filter.clone());
        let mut d = doc! {"queryPlanner": explain::query_planner(&c.ns.full(), parsed, &exec)};
        if executed {
            let n = c.returned.load(Ordering::Relaxed);
            d.insert(
                "executionStats",
                explain::execution_stats(&exec, n, millis, all_plans),
            );
        }
        (d, c.returned.load(Ordering::Relaxed))
    });
    match cursor {
        Some((d, _)) if opened.stages.is_empty() => {
            out.extend(d);
            if executed {
                if let Ok(stats) = out.get_document_mut("executionStats") {
                    stats.insert("nReturned", nidus_common::number(n_returned));
                }
            }
        }
        cursor => {
            let mut stages: Vec<Bson> = Vec::new();
            if let Some((d, n)) = cursor {
                let mut entry = doc! {"$cursor": d};
                if executed {
                    entry.insert("nReturned", n as i64);
                    entry.insert("executionTimeMillisEstimate", 0i64);
                }
                stages.push(Bson::Document(entry));
            }
            for (i, (s, count)) in opened.stages.iter().enumerate() {
                let mut entry = stage_document(s.as_ref());
                // What a stage decided when it was opened (`$lookup`'s `strategy`) shows at
                // every verbosity; run-time statistics exist only after execution.
                if let Some(stats) = opened.stats.get(i) {
                    entry.extend(stats.lock().clone());
                }
                if executed {
                    entry.insert("nReturned", count.load(Ordering::Relaxed) as i64);
                    entry.insert("executionTimeMillisEstimate", 0i64);
                }
                stages.push(Bson::Document(entry));
            }
            out.insert("stages", stages);
        }
    }
    if !opened.rewrites.is_empty() {
        out.insert("optimizerRewrites", opened.rewrites.clone());
    }
    out
}
