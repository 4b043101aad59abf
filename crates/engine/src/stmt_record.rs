//! Executed-statement records of retryable writes (MongoDB keeps them in the oplog and
//! `config.transactions`): each statement of a retryable write that changes a document
//! writes, in the same storage transaction as the change, a record keyed by (session id,
//! txnNumber, statement index). A retry that finds the record does not run the statement
//! again, also after a restart, so a write acknowledged or not is applied at most once.
//!
//! Records are deleted when the session moves on to a newer txnNumber (the session layer
//! asks for it) and, as a backstop for sessions that never do, when older than the session
//! timeout (`sweep_statements`).

use crate::write::WriteOpts;
use crate::Engine;
use bson::{Bson, Document};
use nidus_common::{Error, Result};
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
    pub images: bool,
    /// The oplog's `lsid` and `txnNumber` of the statement's entries.
    pub session: Option<crate::oplog::SessionInfo>,
    /// The oplog's `stmtId`.
    pub stmt_id: i32,
}

impl StatementId {
    pub fn new(lsid: &[u8], txn_number: i64, stmt: u32, images: bool) -> StatementId {
        let mut key = session_prefix(lsid);
        key.extend_from_slice(&(txn_number as u64).to_be_bytes());
        key.extend_from_slice(&stmt.to_be_bytes());
        StatementId {
            key,
            images,
            session: Some(crate::oplog::SessionInfo::new(lsid, txn_number)),
            stmt_id: stmt as i32,
        }
    }
}

fn session_prefix(lsid: &[u8]) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.push(lsid.len() as u8);
    key.extend_from_slice(lsid);
    key
}

/// What an executed statement did, as much as a retry's reply needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    /// A document was inserted (also an upsert's insert), with its `_id` (and the document,
    /// for findAndModify).
    Inserted {
        id: Option<Bson>,
        doc: Option<Document>,
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
    fn encode(&self) -> Result<Vec<u8>> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let mut d = Document::new();
        match self {
            Executed::Inserted { id, doc } => {
                d.insert("op", "i");
                if let Some(id) = id {
                    d.insert("_id", id.clone());
                }
                if let Some(doc) = doc {
                    d.insert("post", doc.clone());
                }
            }
            Executed::Updated {
                modified,
                pre,
                post,
            } => {
                d.insert("op", "u");
                d.insert("modified", *modified);
                if let Some(p) = pre {
                    d.insert("pre", p.clone());
                }
                if let Some(p) = post {
                    d.insert("post", p.clone());
                }
            }
            Executed::Deleted(pre) => {
                d.insert("op", "d");
                if let Some(p) = pre {
                    d.insert("pre", p.clone());
                }
            }
        }
        let mut out = now.to_be_bytes().to_vec();
        out.extend(bson::to_vec(&d).map_err(|e| Error::internal(e.to_string()))?);
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Result<Executed> {
        let corrupt = || Error::internal("corrupt statement record");
        let body = bytes.get(8..).ok_or_else(corrupt)?;
        let d = bson::from_slice::<Document>(body).map_err(|_| corrupt())?;
        let image = |k: &str| d.get_document(k).ok().cloned();
        Ok(match d.get_str("op").map_err(|_| corrupt())? {
            "i" => Executed::Inserted {
                id: d.get("_id").cloned(),
                doc: image("post"),
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
        txn.put(Space::Catalog, &stmt.key, &what.encode()?)?;
    }
    Ok(())
}

/// The images to keep in a record: only findAndModify's reply needs them.
pub(crate) fn images(opts: &WriteOpts, doc: &Document) -> Option<Document> {
    opts.statement
        .as_ref()
        .filter(|s| s.images)
        .map(|_| doc.clone())
}

impl Engine {
    /// What the statement did, if an earlier attempt ran it.
    pub fn executed_statement(&self, stmt: &StatementId) -> Result<Option<Executed>> {
        match self.kv.snapshot().get(Space::Catalog, &stmt.key)? {
            Some(bytes) => Executed::decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Deletes the session's records of transaction numbers below `below`.
    pub fn forget_statements(&self, lsid: &[u8], below: i64) -> Result<usize> {
        self.forget_statements_between(lsid, 0, below)
    }

    /// Deletes the session's records of transaction numbers in `[from, below)`. A session
    /// that deleted its records below `from` already passes it, so the scan starts past
    /// their tombstones (which an iterator would otherwise step over one by one until a
    /// compaction drops them: a cost growing with every retryable write of the session).
    pub fn forget_statements_between(&self, lsid: &[u8], from: i64, below: i64) -> Result<usize> {
        let prefix = session_prefix(lsid);
        let mut lower = prefix.clone();
        if from > 0 {
            lower.extend_from_slice(&(from as u64).to_be_bytes());
        }
        let mut upper = prefix;
        upper.extend_from_slice(&(below.max(0) as u64).to_be_bytes());
        if lower >= upper {
            return Ok(0);
        }
        self.delete_statement_range(&lower, &upper, |_| true)
    }

    /// Deletes every record older than `age` (sessions that expired keep none).
    pub fn sweep_statements(&self, age: Duration) -> Result<usize> {
        let cutoff = SystemTime::now()
            .checked_sub(age)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default()
            .as_millis() as u64;
        self.delete_statement_range(PREFIX, PREFIX_END, |value| {
            value
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .is_none_or(|written| written < cutoff)
        })
    }

    fn delete_statement_range(
        &self,
        lower: &[u8],
        upper: &[u8],
        doomed: impl Fn(&[u8]) -> bool,
    ) -> Result<usize> {
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
        drop(c);
        for chunk in keys.chunks(1000) {
            let mut txn = self.kv.begin();
            for k in chunk {
                txn.delete(Space::Catalog, k)?;
            }
            txn.commit()?;
        }
        Ok(keys.len())
    }
}
