//! Index entries: the key layout of the index space and their maintenance on writes.
//!
//! Unique index: key = `index id ++ keystring`, value = `record id ++ type bits`, so a second
//! document with the same key finds the entry with one point read.
//! Non-unique index: key = `index id ++ keystring ++ record id`, value = `type bits`.
//! Keystrings are self-delimiting, so the record id suffix never changes key order.

use crate::catalog::{Collection, IndexMeta};
use bson::{Bson, Document, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{keys, KvTxn, Space};
use std::collections::BTreeMap;

/// One index entry of one document: keystring → type bits.
pub type IndexKeySet = BTreeMap<Vec<u8>, (Vec<Bson>, Vec<u8>)>;

/// The keystrings a document contributes to an index (deduplicated), with the key values
/// (for duplicate-key messages) and the type bits stored in the entry's value.
pub fn document_keys(ix: &IndexMeta, doc: &RawDocument) -> Result<IndexKeySet> {
    Ok(generate_keys(ix, doc)?.0)
}

/// As [`document_keys`], for a document being written: also widens the index's multikey
/// paths. Returns true when they widened (the catalog entry must be rewritten).
pub fn document_keys_for_write(ix: &IndexMeta, doc: &RawDocument) -> Result<(IndexKeySet, bool)> {
    let (keys, paths) = generate_keys(ix, doc)?;
    Ok((keys, ix.widen_multikey(&paths)))
}

/// Whether a document rewritten from `old` to `new` keeps its entries in `ix` as they were,
/// known without generating them: the index's keys depend only on the top-level fields its
/// pattern names (not a text, partial or wildcard index, whose keys also depend on other
/// fields), and each of those holds the same bytes in both. `false` means "generate and
/// compare", not "changed".
pub fn keys_unchanged(ix: &IndexMeta, old: &RawDocument, new: &RawDocument) -> Result<bool> {
    if ix.text.is_some() || ix.partial.is_some() {
        return Ok(false);
    }
    for (path, _) in ix.pattern.iter() {
        if path.contains('$') {
            return Ok(false);
        }
        let top = path.split('.').next().unwrap_or(path);
        if !same_bytes(old.get(top)?, new.get(top)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Byte equality of two values (`RawBsonRef`'s equality holds between 0.0 and -0.0, and
/// not between a NaN and itself; nested documents and arrays compare as bytes).
fn same_bytes(a: Option<RawBsonRef>, b: Option<RawBsonRef>) -> bool {
    match (a, b) {
        (Some(RawBsonRef::Double(x)), Some(RawBsonRef::Double(y))) => x.to_bits() == y.to_bits(),
        (a, b) => a == b,
    }
}

fn generate_keys(ix: &IndexMeta, doc: &RawDocument) -> Result<(IndexKeySet, Vec<Vec<usize>>)> {
    // A partial index has no entry (and learns no multikey path) for documents outside its
    // filter; an update moving a document across the filter adds or removes its keys.
    if !ix.covers_document(doc)? {
        return Ok((IndexKeySet::new(), Vec::new()));
    }
    let plain = ix.text.is_none()
        && ix.hashed.is_none()
        && ix.geo.is_none()
        && ix.twod.is_none()
        && ix.collation.is_none();
    if plain {
        // Top-level scalar fields (most documents of most indexes): the one key straight
        // from the document's bytes, as `index_keys` would generate it.
        if let Some(values) = nidus_doc::keys::top_level_scalar_key(doc, &ix.pattern, ix.sparse) {
            let (ks, type_bits) = encode_key(ix, values.iter().copied());
            let values = values
                .iter()
                .map(|v| Bson::try_from(*v))
                .collect::<std::result::Result<Vec<Bson>, _>>()
                .map_err(|e| Error::internal(format!("index key conversion: {e}")))?;
            let mut out = IndexKeySet::new();
            out.insert(ks, (values, type_bits));
            return Ok((out, vec![Vec::new(); ix.pattern.len()]));
        }
    }
    // A hashed index holds one key per document and is never multikey.
    let generated = match (ix.hashed, ix.geo) {
        _ if ix.text.is_some() => crate::text::index_keys(ix, doc)?,
        (Some(_), _) => nidus_doc::keys::IndexKeys {
            keys: nidus_doc::keys::hashed_index_keys(doc, &ix.pattern, ix.sparse)?,
            multikey_paths: vec![Vec::new(); ix.pattern.len()],
            is_multikey: false,
        },
        (None, Some(g)) => crate::geo_keys::s2_index_keys(doc, &ix.pattern, g)?,
        (None, None) if ix.twod.is_some() => {
            let params = ix.twod.as_deref().ok_or_else(|| Error::internal("2d"))?;
            crate::geo_keys::twod_index_keys(doc, &ix.pattern, params)?
        }
        (None, None) => nidus_doc::keys::index_keys(doc, &ix.pattern, ix.sparse)?,
    };
    let mut out = IndexKeySet::new();
    for values in generated.keys {
        // A collated index stores each string as its collation key (kept as a string so
        // the key still decodes and compares as one); errors still show the values.
        let mut stored: Vec<Bson> = match &ix.collation {
            Some(c) => values.iter().map(|v| collate_value(v, c)).collect(),
            None => values.clone(),
        };
        if let Some(h) = ix.hashed {
            if let Some(v) = stored.get_mut(h) {
                *v = hashed_key_value(v);
            }
        }
        let raw: Vec<bson::RawBson> = stored
            .iter()
            .map(|v| bson::RawBson::try_from(v.clone()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::internal(format!("index key conversion: {e}")))?;
        let (ks, type_bits) = encode_key(ix, raw.iter().map(|v| v.as_raw_bson_ref()));
        out.insert(ks, (values, type_bits));
    }
    Ok((out, generated.multikey_paths))
}

/// The keystring and type bits of one key's values, each field in its index direction.
fn encode_key<'a>(
    ix: &IndexMeta,
    values: impl Iterator<Item = RawBsonRef<'a>>,
) -> (Vec<u8>, Vec<u8>) {
    let parts: Vec<(RawBsonRef, bool)> = values
        .zip(ix.pattern.iter())
        .map(|(v, (_, desc))| (v, *desc))
        .collect();
    nidus_doc::keystring::encode_key(&parts)
}

/// The key a hashed field stores for a value (already collated when the index has a
/// collation): MongoDB's 64-bit hash, as an int64.
pub fn hashed_key_value(v: &Bson) -> Bson {
    Bson::Int64(nidus_doc::hashed::hash64(
        v,
        nidus_doc::hashed::DEFAULT_HASH_SEED,
    ))
}

/// A value as a collated index stores it: every string (also inside documents and arrays)
/// replaced by its collation key, written as lowercase hex so that byte order, prefixes and
/// thus key order are those of the collation.
pub fn collate_value(v: &Bson, c: &nidus_doc::collation::Collation) -> Bson {
    match v {
        Bson::String(s) => {
            let key = c.sort_key(s);
            let mut out = String::with_capacity(key.len() * 2);
            for b in key {
                out.push_str(&format!("{b:02x}"));
            }
            Bson::String(out)
        }
        Bson::Document(d) => Bson::Document(
            d.iter()
                .map(|(k, v)| (k.clone(), collate_value(v, c)))
                .collect(),
        ),
        Bson::Array(a) => Bson::Array(a.iter().map(|v| collate_value(v, c)).collect()),
        other => other.clone(),
    }
}

pub fn entry_key(ix: &IndexMeta, ks: &[u8], rid: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + ks.len());
    k.extend_from_slice(&keys::u64_be(ix.id));
    k.extend_from_slice(ks);
    if !ix.unique {
        k.extend_from_slice(&keys::u64_be(rid));
    }
    k
}

fn entry_value(ix: &IndexMeta, type_bits: &[u8], rid: u64) -> Vec<u8> {
    if ix.unique {
        let mut v = keys::u64_be(rid).to_vec();
        v.extend_from_slice(type_bits);
        v
    } else {
        type_bits.to_vec()
    }
}

/// Record id an entry points at.
pub fn entry_record_id(ix: &IndexMeta, key: &[u8], value: &[u8]) -> Option<u64> {
    if ix.unique {
        keys::read_u64(value)
    } else {
        key.len()
            .checked_sub(8)
            .and_then(|at| keys::read_u64(&key[at..]))
    }
}

/// Adds entries, checking uniqueness with a locking read so concurrent inserters of the same
/// key conflict instead of both succeeding.
pub fn insert_keys(
    txn: &mut dyn KvTxn,
    coll: &Collection,
    ix: &IndexMeta,
    keys_to_add: &IndexKeySet,
    rid: u64,
) -> Result<()> {
    for (ks, (values, type_bits)) in keys_to_add {
        let key = entry_key(ix, ks, rid);
        if ix.unique {
            // The put below locks the key and fails with a write conflict when another
            // transaction wrote it after this one's snapshot, so a snapshot read is enough to
            // find a duplicate. A build's recorded collision puts nothing: it locks what it
            // read instead.
            let existing = match ix.build {
                Some(_) => txn.get_for_update(Space::Indexes, &key)?,
                None => txn.get(Space::Indexes, &key)?,
            };
            if let Some(existing) = existing {
                if keys::read_u64(&existing) != Some(rid) {
                    // An index being built takes the write and fails at its commit if
                    // the collision is still there (MongoDB's hybrid builds).
                    if let Some(build) = &ix.build {
                        build.record_violation(ks.clone(), rid);
                        continue;
                    }
                    return Err(duplicate_key_error(coll, ix, values));
                }
            }
        }
        txn.put(Space::Indexes, &key, &entry_value(ix, type_bits, rid))?;
    }
    Ok(())
}

/// Inserts the keys of a record whose id this transaction has just allocated (an insert's).
/// A non-unique index's entry key ends with the record id, which nobody else has seen, so no
/// other transaction can write that key: it goes in without a lock or a snapshot check
/// ([`KvTxn::put_new`]), as the record itself does. Unique indexes (their keys carry no
/// record id) and indexes being built (the build writes entries of its own) go through
/// [`insert_keys`].
pub fn insert_new_record_keys(
    txn: &mut dyn KvTxn,
    coll: &Collection,
    ix: &IndexMeta,
    keys_to_add: &IndexKeySet,
    rid: u64,
) -> Result<()> {
    if ix.unique || ix.build.is_some() {
        return insert_keys(txn, coll, ix, keys_to_add, rid);
    }
    for (ks, (_, type_bits)) in keys_to_add {
        txn.put_new(
            Space::Indexes,
            &entry_key(ix, ks, rid),
            &entry_value(ix, type_bits, rid),
        )?;
    }
    Ok(())
}

pub fn remove_keys(
    txn: &mut dyn KvTxn,
    ix: &IndexMeta,
    keys_to_remove: &IndexKeySet,
    rid: u64,
) -> Result<()> {
    for ks in keys_to_remove.keys() {
        let key = entry_key(ix, ks, rid);
        // A unique index being built may hold another record's entry under this key (a
        // recorded collision): only the record's own entry goes.
        if ix.unique && ix.build.is_some() {
            match txn.get_for_update(Space::Indexes, &key)? {
                Some(v) if keys::read_u64(&v) == Some(rid) => {}
                _ => continue,
            }
        }
        txn.delete(Space::Indexes, &key)?;
    }
    Ok(())
}

/// `E11000 duplicate key error collection: db.c index: a_1 dup key: { a: 1 }` with
/// `keyPattern` and `keyValue`, as MongoDB reports it.
pub fn duplicate_key_error(coll: &Collection, ix: &IndexMeta, values: &[Bson]) -> Error {
    let mut key_value = Document::new();
    for ((path, _), v) in ix.pattern.iter().zip(values) {
        key_value.insert(path.clone(), v.clone());
    }
    let shown = nidus_common::shell::format(&Bson::Document(key_value.clone()));
    Error::new(
        ErrorCode::DuplicateKey,
        format!(
            "E11000 duplicate key error collection: {} index: {} dup key: {}",
            coll.ns, ix.name, shown
        ),
    )
    .with_extra("keyPattern", ix.key_document())
    .with_extra("keyValue", key_value)
}
