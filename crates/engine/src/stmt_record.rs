//! Executed-statement records of retryable writes (MongoDB keeps them in the oplog and
//! `config.transactions`): each statement of a retryable write that changes a document
//! writes, in the same storage transaction as the change, a record keyed by (session id,
//! statement index) holding the txnNumber. A retry that finds its txnNumber there does not
//! run the statement again, also after a restart, so a write acknowledged or not is applied
//! at most once.
//!
//! The session's next retryable write overwrites the records of its statements (a session
//! runs one write at a time, with increasing txnNumbers), so nothing is deleted per write;
//! a record whose txnNumber is older than the statement's is one of an earlier write. What
//! is left (statements past the last write's count) goes with the session when it expires
//! and, as a backstop for sessions that never do (e.g. on a secondary), when older than the
//! session timeout (`sweep_statements`).

use crate::write::WriteOpts;
use crate::Engine;
use bson::{Bson, Document, RawBson, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_storage::{KvTxn, Space};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PREFIX: &[u8] = b"stmt\0";
/// The first key past every record.
const PREFIX_END: &[u8] = b"stmt\x01";

/// One statement of a retryable write: its record's key, and whether its reply needs the
/// document images (findAndModify returns the document before or after).
#[derive(Debug, Clone)]
pub struct StatementId {
    key: Vec<u8>,
    txn_number: i64,
    pub images: bool,
    /// The oplog's `lsid` and `txnNumber` of the statement's entries.
    pub session: Option<crate::oplog::SessionInfo>,
    /// The oplog's `stmtId`.
    pub stmt_id: i32,
    /// The oplog's `needsRetryImage` of the statement's update or delete (findAndModify's
    /// `new` picks which image its reply shows).
    pub retry_image: Option<&'static str>,
    /// The `ts` of the oplog entry a member applies with this statement: an insert's record
    /// keeps it, as the entry's `o` is the document a retried upserting findAndModify returns.
    pub entry_ts: Option<bson::Timestamp>,
}

impl StatementId {
    pub fn new(lsid: &[u8], txn_number: i64, stmt: u32, images: bool) -> StatementId {
        let mut key = session_prefix(lsid);
        key.extend_from_slice(&stmt.to_be_bytes());
        StatementId {
            key,
            txn_number,
            images,
            session: Some(crate::oplog::SessionInfo::new(lsid, txn_number)),
            stmt_id: stmt as i32,
            retry_image: None,
            entry_ts: None,
        }
    }

    /// The statement's index: its key's last four bytes.
    fn index(&self) -> u32 {
        index_of(&self.key[self.key.len() - 4..])
    }

    /// The key prefix of the statement's session.
    fn session_key(&self) -> &[u8] {
        &self.key[..self.key.len() - 4]
    }
}

fn index_of(suffix: &[u8]) -> u32 {
    suffix
        .try_into()
        .map(u32::from_be_bytes)
        .unwrap_or(u32::MAX)
}

/// Statements `first..=last` of one write, when they are consecutive inserts of one session
/// and number whose records need no images (see [`record_inserted_range`]).
pub(crate) fn consecutive_inserts<'a>(
    mut stmts: impl Iterator<Item = Option<&'a StatementId>>,
) -> Option<(&'a StatementId, &'a StatementId)> {
    let first = stmts.next()??;
    let mut last = first;
    let mut n = 1;
    for s in stmts {
        let s = s?;
        if s.images
            || s.txn_number != first.txn_number
            || s.session_key() != first.session_key()
            || s.index() != last.index().checked_add(1)?
        {
            return None;
        }
        last = s;
        n += 1;
    }
    (n > 1 && !first.images).then_some((first, last))
}

/// The error for a retry of a number older than one the session's records hold.
pub fn too_old(txn_number: i64, recorded: i64) -> Error {
    Error::new(
        ErrorCode::TransactionTooOld,
        format!(
            "Retryable write with txnNumber {txn_number} is prohibited on this session because a newer retryable write with txnNumber {recorded} has already started on this session."
        ),
    )
}

fn session_prefix(lsid: &[u8]) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.push(lsid.len() as u8);
    key.extend_from_slice(lsid);
    key
}

/// The keys of every record of the session: after its prefix come at most 12 bytes (the
/// statement index, or txnNumber and index in records of earlier versions).
fn session_range(lsid: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let lower = session_prefix(lsid);
    let mut upper = lower.clone();
    upper.extend_from_slice(&[0xff; 13]);
    (lower, upper)
}

/// What an executed statement did, as much as a retry's reply needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    /// A document was inserted (also an upsert's insert), with its `_id` (and the document,
    /// for findAndModify; or, from a member that applied the insert, its oplog entry's `ts`).
    Inserted {
        id: Option<Bson>,
        doc: Option<Document>,
        entry_ts: Option<bson::Timestamp>,
    },
    /// A document was updated (`modified`: it changed); images for findAndModify.
    Updated {
        modified: bool,
        pre: Option<Document>,
        post: Option<Document>,
    },
    /// A document was deleted; its image for findAndModify.
    Deleted(Option<Document>),
}

impl Executed {
    fn encode(&self, txn_number: i64) -> Result<Vec<u8>> {
        let internal = |e: bson::raw::Error| Error::internal(e.to_string());
        let image = |d: &Document| nidus_common::encode::document_to_raw(d).map_err(internal);
        let mut d = RawDocumentBuf::new();
        match self {
            Executed::Inserted { id, doc, entry_ts } => {
                d.append("op", "i");
                if let Some(id) = id {
                    d.append("_id", RawBson::try_from(id.clone()).map_err(internal)?);
                }
                if let Some(doc) = doc {
                    d.append("post", image(doc)?);
                }
                if let Some(ts) = entry_ts {
                    d.append("ts", *ts);
                }
            }
            Executed::Updated {
                modified,
                pre,
                post,
            } => {
                d.append("op", "u");
                d.append("modified", *modified);
                if let Some(p) = pre {
                    d.append("pre", image(p)?);
                }
                if let Some(p) = post {
                    d.append("post", image(p)?);
                }
            }
            Executed::Deleted(pre) => {
                d.append("op", "d");
                if let Some(p) = pre {
                    d.append("pre", image(p)?);
                }
            }
        }
        Ok(record_value(txn_number, &d))
    }

    /// The record's txnNumber.
    fn txn_number(bytes: &[u8]) -> Result<i64> {
        bytes
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| Error::internal("corrupt statement record"))
    }

    fn decode(bytes: &[u8]) -> Result<Executed> {
        let corrupt = || Error::internal("corrupt statement record");
        let body = bytes.get(16..).ok_or_else(corrupt)?;
        let d = bson::from_slice::<Document>(body).map_err(|_| corrupt())?;
        let image = |k: &str| d.get_document(k).ok().cloned();
        Ok(match d.get_str("op").map_err(|_| corrupt())? {
            "i" => Executed::Inserted {
                id: d.get("_id").cloned(),
                doc: image("post"),
                entry_ts: d.get_timestamp("ts").ok(),
            },
            "u" => Executed::Updated {
                modified: d.get_bool("modified").unwrap_or(true),
                pre: image("pre"),
                post: image("post"),
            },
            _ => Executed::Deleted(image("pre")),
        })
    }
}

/// Writes the statement's record into the storage transaction of its change.
pub(crate) fn record(txn: &mut dyn KvTxn, opts: &WriteOpts, what: Executed) -> Result<()> {
    if let Some(stmt) = &opts.statement {
        txn.put(Space::Catalog, &stmt.key, &what.encode(stmt.txn_number)?)?;
    }
    Ok(())
}

/// [`record`] of an insert whose reply needs no image (all but findAndModify's upserts): the
/// same record, `{op: "i", _id}`, written from the stored `_id` without converting it.
pub(crate) fn record_inserted_id(
    txn: &mut dyn KvTxn,
    stmt: &StatementId,
    id: Option<bson::RawBsonRef<'_>>,
) -> Result<()> {
    let mut d = RawDocumentBuf::new();
    d.append("op", "i");
    if let Some(id) = id {
        d.append_ref("_id", id);
    }
    if let Some(ts) = stmt.entry_ts {
        d.append("ts", ts);
    }
    txn.put(
        Space::Catalog,
        &stmt.key,
        &record_value(stmt.txn_number, &d),
    )?;
    Ok(())
}

/// One record for the inserts `first..=last` of one write, which all succeeded in one storage
/// transaction: `{op: "i", through: <last index>}` under the first's key. A write stores a
/// batch of inserts with a record per storage transaction rather than per document; the
/// lookups read a record as covering the statements from its key's index to `through`.
pub(crate) fn record_inserted_range(
    txn: &mut dyn KvTxn,
    first: &StatementId,
    last: &StatementId,
) -> Result<()> {
    let mut d = RawDocumentBuf::new();
    d.append("op", "i");
    d.append("through", i64::from(last.index()));
    txn.put(
        Space::Catalog,
        &first.key,
        &record_value(first.txn_number, &d),
    )?;
    Ok(())
}

/// The last statement index a record covers: `through`, or its own (`None` when the
/// record cannot be read).
fn covered_through(key_index: u32, value: &[u8]) -> Option<u32> {
    let body = bson::RawDocument::from_bytes(value.get(16..)?).ok()?;
    match body.get("through") {
        Ok(Some(bson::RawBsonRef::Int64(n))) => u32::try_from(n).ok(),
        Ok(None) => Some(key_index),
        _ => None,
    }
}

/// A record's value: when it was written (ms since the epoch, for the sweep), the
/// txnNumber, then the BSON of what the statement did.
fn record_value(txn_number: i64, what: &RawDocumentBuf) -> Vec<u8> {
    let mut value = Vec::with_capacity(16 + what.as_bytes().len());
    value.extend_from_slice(&now_millis().to_be_bytes());
    value.extend_from_slice(&txn_number.to_be_bytes());
    value.extend_from_slice(what.as_bytes());
    value
}

/// Whether a record's value was written before `cutoff` (one that cannot be read was).
fn written_before(cutoff: SystemTime) -> impl Fn(&[u8]) -> bool {
    let cutoff = cutoff
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    move |value| {
        value
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .is_none_or(|written| written < cutoff)
    }
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// The images to keep in a record: only findAndModify's reply needs them.
pub(crate) fn images(opts: &WriteOpts, doc: &Document) -> Option<Document> {
    opts.statement
        .as_ref()
        .filter(|s| s.images)
        .map(|_| doc.clone())
}

impl Engine {
    /// What the statement did, if an earlier attempt ran it. A newer write of the session
    /// over the same statement means the retry is too old, as MongoDB answers it (the
    /// session's in-memory number catches that first unless the server restarted or this
    /// member became primary since).
    pub fn executed_statement(&self, stmt: &StatementId) -> Result<Option<Executed>> {
        // Of the records covering the statement, the newest write's.
        let mut newest: Option<(i64, Vec<u8>)> = None;
        self.covering(stmt.session_key(), stmt.index(), stmt.index(), |value| {
            let n = Executed::txn_number(value)?;
            if newest.as_ref().is_none_or(|(b, _)| n > *b) {
                newest = Some((n, value.to_vec()));
            }
            Ok(true)
        })?;
        let Some((recorded, bytes)) = newest else {
            return Ok(None);
        };
        if recorded > stmt.txn_number {
            return Err(too_old(stmt.txn_number, recorded));
        }
        if recorded < stmt.txn_number {
            return Ok(None);
        }
        Executed::decode(&bytes).map(Some)
    }

    /// Calls `f` with the value of each of the session's records that covers a statement of
    /// `first..=last` (a record covers its key's index through its `through`; one that cannot
    /// be read covers everything), until `f` answers false or fails.
    fn covering(
        &self,
        session: &[u8],
        first: u32,
        last: u32,
        mut f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut upper = session.to_vec();
        upper.extend_from_slice(&last.to_be_bytes());
        upper.push(0);
        let snapshot = self.kv.snapshot();
        let mut c = snapshot.cursor(Space::Catalog, session, &upper);
        c.seek_to_first();
        while c.valid() {
            // Keys of records of earlier versions (txnNumber and index) are never looked up.
            if c.key().len() == session.len() + 4 {
                let start = index_of(&c.key()[session.len()..]);
                let through = covered_through(start, c.value()).unwrap_or(u32::MAX);
                if start <= last && through >= first && !f(c.value())? {
                    break;
                }
            }
            c.next();
        }
        c.status()?;
        Ok(())
    }

    /// Whether any of `stmts`, consecutive statements of one retryable write, may have run
    /// before: one scan over their records instead of a lookup each. `true` (a record of the
    /// write's number or a newer one, or one this cannot read) sends the caller to
    /// [`Engine::executed_statement`] for each.
    pub fn any_statement_recorded(&self, stmts: &[StatementId]) -> Result<bool> {
        let (Some(first), Some(last)) = (stmts.first(), stmts.last()) else {
            return Ok(false);
        };
        let mut recorded = false;
        self.covering(first.session_key(), first.index(), last.index(), |value| {
            recorded = !matches!(Executed::txn_number(value), Ok(n) if n < first.txn_number);
            Ok(!recorded)
        })?;
        Ok(recorded)
    }

    /// The highest txnNumber among the session's records (`None`: it has none; `i64::MAX`
    /// for a record this cannot read, so the caller looks its statements up one by one).
    pub fn latest_statement_number(&self, lsid: &[u8]) -> Result<Option<i64>> {
        let (lower, upper) = session_range(lsid);
        let snapshot = self.kv.snapshot();
        let mut c = snapshot.cursor(Space::Catalog, &lower, &upper);
        c.seek_to_first();
        let mut latest = None;
        while c.valid() {
            let n = Executed::txn_number(c.value()).unwrap_or(i64::MAX);
            latest = Some(latest.map_or(n, |l: i64| l.max(n)));
            c.next();
        }
        c.status()?;
        Ok(latest)
    }

    /// Deletes the session's records written before `expired` (when it was found expired):
    /// a client that uses the session id again after that starts it afresh, and the records
    /// of its new writes stay.
    pub fn forget_session(&self, lsid: &[u8], expired: SystemTime) -> Result<usize> {
        let (lower, upper) = session_range(lsid);
        self.delete_statement_range(&lower, &upper, written_before(expired))
    }

    /// Deletes every record older than `age` (sessions that expired keep none).
    pub fn sweep_statements(&self, age: Duration) -> Result<usize> {
        let cutoff = SystemTime::now().checked_sub(age).unwrap_or(UNIX_EPOCH);
        self.delete_statement_range(PREFIX, PREFIX_END, written_before(cutoff))
    }

    fn delete_statement_range(
        &self,
        lower: &[u8],
        upper: &[u8],
        doomed: impl Fn(&[u8]) -> bool,
    ) -> Result<usize> {
        let keys = self.doomed_statements(lower, upper, &doomed)?;
        self.delete_statements_if(&keys, &doomed)
    }

    /// The keys in `[lower, upper)` whose records `doomed` picks, read from a snapshot.
    fn doomed_statements(
        &self,
        lower: &[u8],
        upper: &[u8],
        doomed: &impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<Vec<u8>>> {
        let snapshot = self.kv.snapshot();
        let mut keys = Vec::new();
        let mut c = snapshot.cursor(Space::Catalog, lower, upper);
        c.seek_to_first();
        while c.valid() {
            if doomed(c.value()) {
                keys.push(c.key().to_vec());
            }
            c.next();
        }
        c.status()?;
        Ok(keys)
    }

    /// Deletes the records of `keys` that `doomed` still picks when read again under their
    /// locks: a session that wrote a statement's record again since the scan (a new write
    /// reuses its keys) keeps the new record, which a retry of that write needs. A writer
    /// holding one of the locks makes the deletion fail with a write conflict, and the records
    /// stay for the next sweep. Returns how many were deleted.
    fn delete_statements_if(
        &self,
        keys: &[Vec<u8>],
        doomed: &impl Fn(&[u8]) -> bool,
    ) -> Result<usize> {
        let mut deleted = 0;
        for chunk in keys.chunks(1000) {
            let mut txn = self.kv.begin();
            for k in chunk {
                if txn
                    .get_for_update(Space::Catalog, k)?
                    .is_some_and(|value| doomed(&value))
                {
                    txn.delete(Space::Catalog, k)?;
                    deleted += 1;
                }
            }
            txn.commit()?;
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    /// A record written again between the sweep's scan and its deletion survives (a retry of
    /// the new write needs it); the records still old go, and the count says how many. An
    /// expired session's forgetting keeps records written after it expired.
    #[test]
    fn sweep_and_expiry_keep_records_written_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv: std::sync::Arc<dyn nidus_storage::KvEngine> =
            std::sync::Arc::new(nidus_storage_rocks::RocksEngine::open(dir.path()).expect("rocks"));
        let engine = Engine::open(kv.clone()).expect("engine");
        let lsid = [7u8; 16];
        let stmts: Vec<StatementId> = (0..3)
            .map(|i| StatementId::new(&lsid, 1, i, false))
            .collect();
        // Written 1 ms after the epoch, by txnNumber 1.
        let mut old_value = 1u64.to_be_bytes().to_vec();
        old_value.extend_from_slice(&1i64.to_be_bytes());
        old_value.extend_from_slice(RawDocumentBuf::new().as_bytes());
        let mut txn = kv.begin();
        for stmt in &stmts {
            txn.put(Space::Catalog, &stmt.key, &old_value).expect("put");
        }
        txn.commit().expect("commit");
        let doomed = written_before(SystemTime::now() - Duration::from_secs(60));
        let keys = engine
            .doomed_statements(PREFIX, PREFIX_END, &doomed)
            .expect("scan");
        assert_eq!(keys.len(), 3, "every record is old at the scan");
        // The session's next write reuses statement 1's key.
        let mut txn = kv.begin();
        record(
            txn.as_mut(),
            &WriteOpts {
                statement: Some(StatementId::new(&lsid, 2, 1, false)),
                ..WriteOpts::default()
            },
            Executed::Deleted(None),
        )
        .expect("record");
        txn.commit().expect("commit");
        assert_eq!(
            engine.delete_statements_if(&keys, &doomed).expect("delete"),
            2
        );
        let left: Vec<Vec<u8>> = engine
            .doomed_statements(PREFIX, PREFIX_END, &|_: &[u8]| true)
            .expect("scan");
        assert_eq!(left, vec![stmts[1].key.clone()]);
        let kept = engine
            .executed_statement(&StatementId::new(&lsid, 2, 1, false))
            .expect("read");
        assert_eq!(kept, Some(Executed::Deleted(None)));
        // The session expires; it is used again before its records are deleted.
        let expired = SystemTime::now() - Duration::from_secs(1);
        assert_eq!(engine.forget_session(&lsid, expired).expect("forget"), 0);
        assert_eq!(
            engine
                .forget_session(&lsid, SystemTime::now() + Duration::from_secs(1))
                .expect("forget"),
            1
        );
        assert!(engine
            .doomed_statements(PREFIX, PREFIX_END, &|_: &[u8]| true)
            .expect("scan")
            .is_empty());
    }

    /// Every kind of record decodes to what was encoded, with and without images, and carries
    /// its txnNumber.
    #[test]
    fn records_round_trip() {
        let image = doc! {"_id": 7, "a": {"b": [1, "x", null]}, "d": 1.5};
        let cases = [
            Executed::Inserted {
                id: Some(Bson::Int32(1)),
                doc: None,
                entry_ts: None,
            },
            Executed::Inserted {
                id: Some(Bson::Document(doc! {"k": "v", "n": 2i64})),
                doc: Some(image.clone()),
                entry_ts: None,
            },
            Executed::Inserted {
                id: Some(Bson::Int64(3)),
                doc: None,
                entry_ts: Some(bson::Timestamp {
                    time: 1_700_000_000,
                    increment: 7,
                }),
            },
            Executed::Inserted {
                id: None,
                doc: None,
                entry_ts: None,
            },
            Executed::Updated {
                modified: false,
                pre: None,
                post: None,
            },
            Executed::Updated {
                modified: true,
                pre: Some(image.clone()),
                post: Some(doc! {"_id": 7}),
            },
            Executed::Deleted(None),
            Executed::Deleted(Some(image)),
        ];
        for (n, case) in cases.into_iter().enumerate() {
            let bytes = case.encode(n as i64 + 40).expect("encode");
            assert_eq!(Executed::txn_number(&bytes).expect("number"), n as i64 + 40);
            assert_eq!(Executed::decode(&bytes).expect("decode"), case);
        }
    }
}
