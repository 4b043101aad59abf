//! The hash table of `$lookup`'s `HashJoin` strategy (MongoDB's hash lookup for a foreign
//! collection without a usable index): the foreign collection is read once per execution
//! and each document is filed under every value its `foreignField` offers to an equality
//! match; each input document then reads the buckets of its `localField` values.
//!
//! Bucket keys are the values' index key encoding (`keystring`: `1`, `1L`, `1.0` and
//! `NumberDecimal("1")` share a key), after the collation when one is set, and a missing
//! path files the document under `null` (which `{foreignField: null}` matches). Every
//! candidate a bucket gives is then checked with the same equality filter the nested loop
//! join runs, so both strategies return the same documents in the same (natural) order; the
//! buckets only need to hold every document that filter can match.
//!
//! Documents beyond the memory limit
//! (`internalQuerySlotBasedExecutionHashLookupApproxMemoryUseInBytesBeforeSpill`) go to a
//! temporary file under `<dbpath>/_tmp` when `allowDiskUse` is on (the bucket table stays
//! in memory: it holds keys and positions only), and fail the query without it.

use super::context::exceeded;
use super::ExpCtx;
use crate::catalog::CollectionRef;
use crate::find::FindSpec;
use bson::{Bson, Document, RawBsonRef, RawDocument, RawDocumentBuf};
use nidus_common::{Error, Result};
use nidus_doc::collation::Collation;
use nidus_doc::path::{walk_match, FieldPath};
use nidus_query::matcher::{Matcher, ParseOptions};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// Where one foreign document is kept.
enum Stored {
    Memory(RawDocumentBuf),
    /// Offset and length in the spill file.
    Disk(u64, u32),
}

/// The spill file, removed when the table is dropped.
struct SpillFile {
    path: std::path::PathBuf,
    file: File,
    len: u64,
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The foreign collection filed by `foreignField` value.
pub(super) struct HashTable {
    docs: Vec<Stored>,
    /// Bucket key → positions in `docs`, ascending (scan order).
    buckets: HashMap<Vec<u8>, Bucket>,
    collation: Option<Collation>,
    spill: Option<SpillFile>,
    /// Approximate bytes held in memory (documents, keys, positions).
    memory: usize,
    pub spilled_records: u64,
}

/// The documents filed under one key: most keys (a unique `foreignField`) have one, kept
/// without a vector of its own.
enum Bucket {
    One(u32),
    Many(Vec<u32>),
}

impl Bucket {
    /// Adds a position (ascending); false when it is already the last one.
    fn push(&mut self, pos: u32) -> bool {
        match self {
            Bucket::One(p) if *p == pos => false,
            Bucket::One(p) => {
                *self = Bucket::Many(vec![*p, pos]);
                true
            }
            Bucket::Many(v) if v.last() == Some(&pos) => false,
            Bucket::Many(v) => {
                v.push(pos);
                true
            }
        }
    }

    fn positions(&self) -> &[u32] {
        match self {
            Bucket::One(p) => std::slice::from_ref(p),
            Bucket::Many(v) => v,
        }
    }
}

/// The bucket key of one value.
fn key_of(v: RawBsonRef, collation: Option<&Collation>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    match (collation, v) {
        (Some(c), v) if needs_collation(v) => {
            let owned = Bson::try_from(v.to_raw_bson()).unwrap_or(Bson::Null);
            let collated = crate::index::collate_value(&owned, c);
            match bson::RawBson::try_from(collated) {
                Ok(raw) => {
                    nidus_doc::keystring::encode_value(&mut out, raw.as_raw_bson_ref(), false)
                }
                Err(_) => nidus_doc::keystring::encode_value(&mut out, v, false),
            }
        }
        _ => nidus_doc::keystring::encode_value(&mut out, v, false),
    }
    out
}

/// True when a value holds a string somewhere (only those change under a collation).
fn needs_collation(v: RawBsonRef) -> bool {
    matches!(
        v,
        RawBsonRef::String(_) | RawBsonRef::Document(_) | RawBsonRef::Array(_)
    )
}

fn bson_key(v: &Bson, collation: Option<&Collation>) -> Result<Vec<u8>> {
    let raw = bson::RawBson::try_from(v.clone())
        .map_err(|e| Error::internal(format!("$lookup key conversion: {e}")))?;
    Ok(key_of(raw.as_raw_bson_ref(), collation))
}

impl HashTable {
    /// Reads `coll` (as `ctx` sees it) and files each document under its `foreign` values.
    pub fn build(
        ctx: &ExpCtx,
        coll: Option<&CollectionRef>,
        foreign: &str,
        collation: Option<Collation>,
        max_memory: usize,
    ) -> Result<HashTable> {
        let expected = coll.map_or(0, |c| {
            c.count
                .load(std::sync::atomic::Ordering::Relaxed)
                .clamp(0, 1 << 20) as usize
        });
        let mut table = HashTable {
            docs: Vec::with_capacity(expected),
            buckets: HashMap::with_capacity(expected),
            collation,
            spill: None,
            memory: 0,
            spilled_records: 0,
        };
        let spec = FindSpec {
            source: ctx.source.clone(),
            deadline: ctx.deadline(),
            ..FindSpec::default()
        };
        let mut exec = ctx.engine.plan_find(coll, &spec)?;
        let path = FieldPath::parse(foreign);
        let null_key = key_of(RawBsonRef::Null, None);
        let mut keys: Vec<Vec<u8>> = Vec::new();
        while let Some(raw) = exec.next_doc()? {
            ctx.check_interrupt()?;
            let pos = u32::try_from(table.docs.len())
                .map_err(|_| Error::internal("$lookup hash table: too many documents"))?;
            keys.clear();
            walk_match(&raw, &path, true, &mut |item| {
                keys.push(match item.value {
                    None | Some(RawBsonRef::Null | RawBsonRef::Undefined) => null_key.clone(),
                    Some(v) => key_of(v, table.collation.as_ref()),
                });
                false
            });
            if keys.is_empty() {
                // Nothing along the path (e.g. scalars where the path continues): the
                // document can still match `null` through the matcher's own walk.
                keys.push(null_key.clone());
            }
            for k in keys.drain(..) {
                match table.buckets.get_mut(&k) {
                    Some(b) => {
                        if b.push(pos) {
                            table.memory += 4;
                        }
                    }
                    None => {
                        table.memory += k.len() + 48;
                        table.buckets.insert(k, Bucket::One(pos));
                    }
                }
            }
            table.memory += raw.as_bytes().len() + 16;
            table.docs.push(Stored::Memory(raw));
            if table.memory > max_memory {
                table.spill_documents(ctx)?;
            }
        }
        Ok(table)
    }

    /// Moves every in-memory document to the spill file.
    fn spill_documents(&mut self, ctx: &ExpCtx) -> Result<()> {
        if self.spill.is_none() {
            let Some(dir) = ctx.spill_dir() else {
                return Err(exceeded("$lookup"));
            };
            std::fs::create_dir_all(&dir).map_err(io_err)?;
            let path = dir.join(format!(
                "lookup-{}-{}",
                std::process::id(),
                SPILL_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(io_err)?;
            self.spill = Some(SpillFile { path, file, len: 0 });
        }
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let mut writer = std::io::BufWriter::new(&spill.file);
        for d in &mut self.docs {
            if let Stored::Memory(raw) = d {
                let bytes = raw.as_bytes();
                writer.write_all(bytes).map_err(io_err)?;
                let len = bytes.len() as u32;
                self.memory = self.memory.saturating_sub(bytes.len());
                *d = Stored::Disk(spill.len, len);
                spill.len += u64::from(len);
                self.spilled_records += 1;
            }
        }
        writer.flush().map_err(io_err)?;
        Ok(())
    }

    pub fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.len)
    }

    /// The foreign documents `filter` (the equality filter of one input document, whose
    /// `localField` values are `values`) matches, in the foreign collection's order.
    pub fn probe(&self, values: &[Bson], filter: &Document) -> Result<Vec<Document>> {
        // Parsed first: a filter the nested loop join would refuse fails here too.
        let opts = ParseOptions {
            collation: self.collation.as_ref(),
            ..ParseOptions::default()
        };
        let matcher = Matcher::parse_with(filter, &opts)?;
        let mut candidates: Vec<u32> = Vec::new();
        for v in values {
            let key = match v {
                Bson::Null => key_of(RawBsonRef::Null, None),
                v => bson_key(v, self.collation.as_ref())?,
            };
            if let Some(b) = self.buckets.get(&key) {
                candidates.extend_from_slice(b.positions());
            }
        }
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        if values.len() > 1 {
            candidates.sort_unstable();
            candidates.dedup();
        }
        let mut out = Vec::with_capacity(candidates.len());
        let mut buf = Vec::new();
        for pos in candidates {
            let raw: &RawDocument = match &self.docs[pos as usize] {
                Stored::Memory(d) => d,
                Stored::Disk(offset, len) => {
                    let spill = self
                        .spill
                        .as_ref()
                        .ok_or_else(|| Error::internal("$lookup spill file missing"))?;
                    buf.resize(*len as usize, 0);
                    spill
                        .file
                        .read_exact_at(&mut buf, *offset)
                        .map_err(io_err)?;
                    RawDocument::from_bytes(&buf).map_err(|e| Error::internal(e.to_string()))?
                }
            };
            if matcher.matches(raw)? {
                out.push(Document::try_from(raw).map_err(|e| Error::internal(e.to_string()))?);
            }
        }
        Ok(out)
    }
}

static SPILL_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn io_err(e: std::io::Error) -> Error {
    Error::internal(format!("$lookup spill file: {e}"))
}
