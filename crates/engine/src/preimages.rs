//! Pre-images (and post-images) of changes to collections with `changeStreamPreAndPostImages: {enabled:
//! true}`, which change streams return as `fullDocumentBeforeChange` (MongoDB keeps them in
//! `config.system.preimages`). Each is written in the storage transaction of its oplog entry,
//! keyed by the entry's `ts`, the collection UUID and the entry's index inside `applyOps`,
//! and deleted with the oplog entries it belongs to when the oplog is truncated.

use bson::{Document, RawDocumentBuf, Timestamp};
use nidus_common::{Error, Result};
use nidus_storage::{KvRead, KvTxn, Space};

const PREFIX: &[u8] = b"preimage\0";

/// `changeStreamPreAndPostImages: {enabled: true}` in a collection's options.
pub fn enabled(options: &Document) -> bool {
    options
        .get_document("changeStreamPreAndPostImages")
        .ok()
        .and_then(|d| d.get_bool("enabled").ok())
        .unwrap_or(false)
}

fn key(ts: Timestamp, ui: bson::Uuid, index: u32) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&crate::oplog::ts_to_u64(ts).to_be_bytes());
    k.extend_from_slice(&ui.bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Keeps `doc` as the pre-image of the change at (`ts`, `index`) to collection `ui`.
pub fn put(
    txn: &mut dyn KvTxn,
    ui: bson::Uuid,
    ts: Timestamp,
    index: u32,
    doc: &Document,
) -> Result<()> {
    let bytes = bson::to_vec(doc).map_err(|e| Error::internal(e.to_string()))?;
    txn.put(Space::Catalog, &key(ts, ui, index), &bytes)?;
    Ok(())
}

/// Bit of the index under which the post-image of an update is kept.
pub const POST_IMAGE: u32 = 1 << 31;

/// Keeps the images an entry carries (see [`crate::oplog::OplogEntry::pre_image`]).
pub fn put_images(
    txn: &mut dyn KvTxn,
    ui: bson::Uuid,
    ts: Timestamp,
    index: u32,
    entry: &crate::oplog::OplogEntry,
) -> Result<()> {
    if let Some(pre) = &entry.pre_image {
        put(txn, ui, ts, index, pre)?;
    }
    if let Some(post) = &entry.post_image {
        put(txn, ui, ts, index | POST_IMAGE, post)?;
    }
    Ok(())
}

/// The pre-image of the change at (`ts`, `index`) to collection `ui`, if kept.
pub fn get(
    kv: &dyn KvRead,
    ui: bson::Uuid,
    ts: Timestamp,
    index: u32,
) -> Result<Option<RawDocumentBuf>> {
    match kv.get(Space::Catalog, &key(ts, ui, index))? {
        Some(b) => Ok(Some(RawDocumentBuf::from_bytes(b)?)),
        None => Ok(None),
    }
}

/// Deletes every pre-image of a change at or before `ts`.
pub fn delete_through(txn: &mut dyn KvTxn, ts: Timestamp) -> Result<()> {
    let mut upper = PREFIX.to_vec();
    upper.extend_from_slice(&crate::oplog::ts_to_u64(ts).saturating_add(1).to_be_bytes());
    let victims: Vec<Vec<u8>> = {
        let mut c = txn.cursor(Space::Catalog, PREFIX, &upper);
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
    Ok(())
}
