//! Predicates on measurements turned into predicates on buckets (MongoDB's
//! `BucketSpec::createPredicatesOnBucketLevelField`): a bucket filter that every bucket
//! holding a matching measurement passes. The measurement filter still runs on every
//! unpacked measurement, so the bucket filter only has to be implied, never exact.
//!
//! - a predicate on the metaField (or a path below it) holds for the bucket's `meta`
//!   exactly as for each of its measurements;
//! - `time >= X` (or `>`) needs `control.max.time >= X` and a bucket start after
//!   `X - bucketMaxSpanSeconds`, which bounds the `_id` (whose seconds are the start);
//! - `time <= X` (or `<`) needs `control.min.time <= X` and a start no later than X;
//! - `time == X` both.
//!
//! Only dates bound the time field (measurement times are dates).

use super::bucket::object_id_at;
use bson::{doc, Bson, Document};

fn under(path: &str, field: &str) -> Option<String> {
    if path == field {
        return Some(String::new());
    }
    path.strip_prefix(field)
        .and_then(|rest| rest.strip_prefix('.'))
        .map(|rest| format!(".{rest}"))
}

fn conjuncts<'a>(filter: &'a Document, out: &mut Vec<(&'a String, &'a Bson)>) {
    for (k, v) in filter {
        match (k.as_str(), v) {
            ("$and", Bson::Array(items)) => {
                for item in items {
                    if let Bson::Document(d) = item {
                        conjuncts(d, out);
                    }
                }
            }
            _ => out.push((k, v)),
        }
    }
}

fn secs_clamped(ms: i64) -> u32 {
    ms.div_euclid(1000).clamp(0, i64::from(u32::MAX)) as u32
}

/// The bucket filter implied by measurement filter `filter` (None: nothing to push).
pub fn bucket_filter(
    filter: &Document,
    time_field: &str,
    meta_field: Option<&str>,
    span_s: i64,
) -> Option<Document> {
    let mut out: Vec<Bson> = Vec::new();
    let mut all = Vec::new();
    conjuncts(filter, &mut all);
    for (k, v) in all {
        if k.starts_with('$') {
            continue;
        }
        if let Some(rest) = meta_field.and_then(|m| under(k, m)) {
            out.push(Bson::Document(doc! { format!("meta{rest}"): v.clone() }));
            continue;
        }
        if k != time_field {
            continue;
        }
        let ops: Vec<(&str, &Bson)> = match v {
            Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => {
                d.iter().map(|(k, v)| (k.as_str(), v)).collect()
            }
            other => vec![("$eq", other)],
        };
        for (op, operand) in ops {
            let Bson::DateTime(x) = operand else {
                continue;
            };
            let ms = x.timestamp_millis();
            let max_field = format!("control.max.{time_field}");
            let min_field = format!("control.min.{time_field}");
            if matches!(op, "$gt" | "$gte" | "$eq") {
                let cmp = if op == "$gt" { "$gt" } else { "$gte" };
                out.push(Bson::Document(doc! { max_field.clone(): { cmp: *x } }));
                let start = secs_clamped(ms.saturating_sub(span_s.saturating_mul(1000)));
                out.push(Bson::Document(
                    doc! { "_id": { "$gte": object_id_at(start, false) } },
                ));
            }
            if matches!(op, "$lt" | "$lte" | "$eq") {
                let cmp = if op == "$lt" { "$lt" } else { "$lte" };
                out.push(Bson::Document(doc! { min_field.clone(): { cmp: *x } }));
                out.push(Bson::Document(
                    doc! { "_id": { "$lte": object_id_at(secs_clamped(ms), true) } },
                ));
            }
        }
    }
    match out.len() {
        0 => None,
        1 => match out.pop() {
            Some(Bson::Document(d)) => Some(d),
            _ => None,
        },
        _ => Some(doc! { "$and": out }),
    }
}
