//! One pass of the TTL monitor (MongoDB's `TTLMonitor`): every index with
//! `expireAfterSeconds` deletes, through its own index, the documents whose indexed date (the
//! earliest, for an array of dates) is older than that many seconds. Values that are not
//! dates never expire. A partial TTL index expires only the documents it holds.

use crate::catalog::CollectionRef;
use crate::write::WriteOpts;
use crate::Engine;
use bson::{doc, Bson, DateTime, Document};
use nidus_common::Result;
use std::sync::atomic::Ordering;

/// A TTL index of one collection: its name, field, lifetime and partial filter.
struct TtlIndex {
    name: String,
    field: String,
    seconds: i64,
    partial: Option<Document>,
    /// A hidden index still expires documents but cannot be hinted: the filter alone says
    /// which documents it holds.
    hidden: bool,
}

impl Engine {
    /// Deletes what every TTL index says expired before `now`; returns how many documents.
    pub fn ttl_pass(&self, now: DateTime) -> Result<u64> {
        let colls: Vec<CollectionRef> = self.collections.read().values().cloned().collect();
        let mut deleted = 0;
        for coll in colls {
            for ttl in ttl_indexes(&coll) {
                let cutoff = now
                    .timestamp_millis()
                    .saturating_sub(ttl.seconds.saturating_mul(1000));
                let expired = doc! { ttl.field.as_str(): { "$lt": DateTime::from_millis(cutoff) } };
                let filter = match ttl.partial {
                    Some(p) => doc! { "$and": [expired, p] },
                    None => expired,
                };
                let hint = (!ttl.hidden).then_some(Bson::String(ttl.name));
                deleted += self.delete(&coll, &filter, true, hint, &WriteOpts::default())?;
            }
            deleted += self.expire_clustered(&coll, now)?;
        }
        self.metrics.ttl_passes.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .ttl_deleted_documents
            .fetch_add(deleted, Ordering::Relaxed);
        Ok(deleted)
    }
}

fn ttl_indexes(coll: &CollectionRef) -> Vec<TtlIndex> {
    let meta = coll.meta.read();
    meta.indexes
        .iter()
        // A hashed index keeps no date to compare with the expiry.
        .filter(|ix| {
            ix.pattern.len() == 1 && ix.hashed.is_none() && ix.geo.is_none() && ix.twod.is_none()
        })
        .filter_map(|ix| {
            let seconds = match ix.spec.get("expireAfterSeconds")? {
                Bson::Int32(n) => i64::from(*n),
                Bson::Int64(n) => *n,
                Bson::Double(n) if n.is_finite() => *n as i64,
                _ => return None,
            };
            Some(TtlIndex {
                name: ix.name.clone(),
                field: ix.pattern[0].0.clone(),
                seconds,
                partial: ix
                    .spec
                    .get_document("partialFilterExpression")
                    .ok()
                    .cloned(),
                hidden: ix.is_hidden(),
            })
        })
        .collect()
}
