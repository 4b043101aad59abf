//! Images of changes to collections with `changeStreamPreAndPostImages: {enabled: true}`,
//! which change streams return as `fullDocumentBeforeChange` and (`whenAvailable`/
//! `required`) `fullDocument`.
//!
//! Pre-images go where MongoDB keeps them, the collection `config.system.preimages`:
//! `{_id: {nsUUID, ts, applyOpsIndex}, operationTime, preImage}`, written in the storage
//! transaction of their oplog entry (record and `_id` index entry put directly, not logged).
//! MongoDB derives post-images from the pre-image and the entry; here the post-image of an
//! update is kept beside, in the catalog space under `postimage\0 ts uuid index`. Both are
//! deleted with the oplog entries they belong to when the oplog is truncated.

use crate::catalog::CollectionRef;
use crate::index;
use crate::namespace::Namespace;
use crate::oplog::{ts_to_u64, OplogEntry};
use crate::Engine;
use bson::{doc, Document, Timestamp};
use nidus_common::{Error, Result};
use nidus_storage::{KvTxn, Space};

const POST_PREFIX: &[u8] = b"postimage\0";

pub const PREIMAGES_DB: &str = "config";
pub const PREIMAGES_COLL: &str = "system.preimages";

/// `changeStreamPreAndPostImages: {enabled: true}` in a collection's options.
pub fn enabled(options: &Document) -> bool {
    options
        .get_document("changeStreamPreAndPostImages")
        .ok()
        .and_then(|d| d.get_bool("enabled").ok())
        .unwrap_or(false)
}

pub fn is_preimages(ns: &Namespace) -> bool {
    ns.db == PREIMAGES_DB && ns.coll == PREIMAGES_COLL
}

fn post_key(ts: Timestamp, ui: bson::Uuid, index: u32) -> Vec<u8> {
    let mut k = POST_PREFIX.to_vec();
    k.extend_from_slice(&ts_to_u64(ts).to_be_bytes());
    k.extend_from_slice(&ui.bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

fn pre_image_id(ui: bson::Uuid, ts: Timestamp, index: u32) -> Document {
    doc! { "nsUUID": ui, "ts": ts, "applyOpsIndex": index as i64 }
}

/// Documents and bytes added to `config.system.preimages`, counted once committed.
#[derive(Default)]
pub(crate) struct Added(pub Option<CollectionRef>, pub i64, pub i64);

impl Added {
    pub(crate) fn committed(self) {
        if let Some(c) = self.0 {
            c.adjust_stats(self.1, self.2);
        }
    }
}

impl Engine {
    fn preimages_collection(&self) -> Option<CollectionRef> {
        self.collection(&Namespace::new(PREIMAGES_DB, PREIMAGES_COLL))
    }

    /// Creates `config.system.preimages` if needed (a replica set member has it).
    pub(crate) fn ensure_preimages_collection(&self) -> Result<()> {
        self.ensure_collection(&Namespace::new(PREIMAGES_DB, PREIMAGES_COLL))
            .map(|_| ())
    }

    /// Keeps the images `entry` carries for the change at (`ts`, `index`) to collection `ui`.
    pub(crate) fn put_images(
        &self,
        txn: &mut dyn KvTxn,
        (ui, ts, index): (bson::Uuid, Timestamp, u32),
        entry: &OplogEntry,
        wall: bson::DateTime,
        added: &mut Added,
    ) -> Result<()> {
        if let (Some(pre), Some(coll)) = (&entry.pre_image, self.preimages_collection()) {
            let doc = doc! {
                "_id": pre_image_id(ui, ts, index),
                "operationTime": wall,
                "preImage": pre.clone(),
            };
            let raw = nidus_common::encode::document_to_raw(&doc)
                .map_err(|e| Error::internal(e.to_string()))?;
            let meta = coll.meta.read();
            let rid = coll.allocate_record_id();
            for ix in meta.write_indexes() {
                let (keys, _) = index::document_keys_for_write(ix, &raw)?;
                index::insert_keys(txn, &coll, ix, &keys, rid)?;
            }
            txn.put_new(coll.records.space, &coll.records.key(rid), raw.as_bytes())?;
            added.1 += 1;
            added.2 += raw.as_bytes().len() as i64;
            added.0 = Some(coll.clone());
        }
        if let Some(post) = &entry.post_image {
            let bytes = bson::to_vec(post).map_err(|e| Error::internal(e.to_string()))?;
            txn.put(Space::Catalog, &post_key(ts, ui, index), &bytes)?;
        }
        Ok(())
    }

    /// The pre-image of the change at (`ts`, `index`) to collection `ui`, if kept.
    pub fn pre_image(&self, ui: bson::Uuid, ts: Timestamp, index: u32) -> Result<Option<Document>> {
        let Some(coll) = self.preimages_collection() else {
            return Ok(None);
        };
        let spec = crate::find::FindSpec {
            filter: doc! { "_id": pre_image_id(ui, ts, index) },
            limit: 1,
            ..Default::default()
        };
        let mut exec = self.plan_find(Some(&coll), &spec)?;
        match exec.next_doc()? {
            Some(raw) => Ok(raw
                .get_document("preImage")
                .ok()
                .and_then(|d| d.to_raw_document_buf().to_document().ok())),
            None => Ok(None),
        }
    }

    /// The post-image of the update at (`ts`, `index`) to collection `ui`, if kept.
    pub fn post_image(
        &self,
        ui: bson::Uuid,
        ts: Timestamp,
        index: u32,
    ) -> Result<Option<Document>> {
        let snap = self.kv.snapshot();
        match snap.get(Space::Catalog, &post_key(ts, ui, index))? {
            Some(b) => Ok(Some(
                Document::from_reader(b.as_slice()).map_err(|e| Error::internal(e.to_string()))?,
            )),
            None => Ok(None),
        }
    }

    /// Deletes the images of every change older than `cutoff` (`changeStreamOptions`'
    /// `preAndPostImages.expireAfterSeconds`): the changes whose timestamp's seconds fall
    /// before it. Each member does so itself; image deletions are not replicated.
    pub fn expire_images_before(&self, cutoff: bson::DateTime) -> Result<()> {
        let secs = cutoff.timestamp_millis().div_euclid(1000);
        let Some(before) = u32::try_from(secs).ok().and_then(|s| s.checked_sub(1)) else {
            return Ok(());
        };
        self.delete_images_through(Timestamp {
            time: before,
            increment: u32::MAX,
        })
    }

    /// Deletes the images of every change at or before `ts` (after the oplog lost them).
    pub(crate) fn delete_images_through(&self, ts: Timestamp) -> Result<()> {
        let mut upper = POST_PREFIX.to_vec();
        upper.extend_from_slice(&ts_to_u64(ts).saturating_add(1).to_be_bytes());
        let mut txn = self.kv.begin();
        let victims: Vec<Vec<u8>> = {
            let mut c = txn.cursor(Space::Catalog, POST_PREFIX, &upper);
            c.seek_to_first();
            let mut out = Vec::new();
            while c.valid() {
                out.push(c.key().to_vec());
                c.next();
            }
            c.status()?;
            out
        };
        for k in victims {
            txn.delete(Space::Catalog, &k)?;
        }
        txn.commit()?;
        if let Some(coll) = self.preimages_collection() {
            let filter = doc! { "_id.ts": { "$lte": ts } };
            self.delete(
                &coll,
                &filter,
                true,
                None,
                &crate::write::WriteOpts::default(),
            )?;
        }
        Ok(())
    }
}
