use super::update::UpdateAction;
use super::{Member, StageImpl, StageState};
use crate::catalog::IndexMeta;
use crate::catalog::RecordStore;
use crate::index;
use crate::txn::ReadSource;
use bson::{Bson, Document, RawBson, RawDocumentBuf};
use nidus_common::{Error, Result};
use nidus_storage::{keys, KvRead, Space};

/// `EXPRESS_IXSCAN`: the point lookup of `{_id: <value>}` through the unique `_id` index,
/// without planning (MongoDB 8.0's express path).
pub struct ExpressIxscan {
    src: ReadSource,
    records: RecordStore,
    index: IndexMeta,
    value: Bson,
    done: bool,
    keys_examined: i64,
    docs_examined: i64,
    /// Named `IDHACK` (the classic `_id` lookup under a write MongoDB's express path does not
    /// take, such as an upsert).
    idhack: bool,
    /// Returns the record id without the document, which the caller (a write) reads itself;
    /// the document still counts as examined, as the write examines it.
    record_ids_only: bool,
}

impl ExpressIxscan {
    pub fn new(
        src: ReadSource,
        records: RecordStore,
        index: IndexMeta,
        value: Bson,
    ) -> ExpressIxscan {
        ExpressIxscan {
            src,
            records,
            index,
            value,
            done: false,
            keys_examined: 0,
            docs_examined: 0,
            idhack: false,
            record_ids_only: false,
        }
    }

    /// The lookup for a write that reads the document itself (see `FindSpec::record_ids_only`).
    pub fn record_ids_only(self) -> ExpressIxscan {
        ExpressIxscan {
            record_ids_only: true,
            ..self
        }
    }

    /// The same lookup named `IDHACK`, as the classic engine shows it under UPDATE/DELETE.
    pub fn idhack(
        src: ReadSource,
        records: RecordStore,
        index: IndexMeta,
        value: Bson,
    ) -> ExpressIxscan {
        ExpressIxscan {
            idhack: true,
            ..ExpressIxscan::new(src, records, index, value)
        }
    }

    fn lookup(&mut self) -> Result<Option<Member>> {
        let raw =
            RawBson::try_from(self.value.clone()).map_err(|e| Error::internal(e.to_string()))?;
        let (ks, _) = nidus_doc::keystring::encode_key(&[(raw.as_raw_bson_ref(), false)]);
        let snap = self.src.view()?;
        let Some(entry) = snap.get(Space::Indexes, &index::entry_key(&self.index, &ks, 0))? else {
            return Ok(None);
        };
        self.keys_examined += 1;
        let Some(rid) = keys::read_u64(&entry) else {
            return Ok(None);
        };
        if self.record_ids_only {
            self.docs_examined += 1;
            return Ok(Some(Member::rid_only(rid)));
        }
        let Some(bytes) = snap.get(self.records.space, &self.records.key(rid))? else {
            return Ok(None);
        };
        self.docs_examined += 1;
        Ok(Some(Member::with_doc(
            Some(rid),
            RawDocumentBuf::from_bytes(bytes)?,
        )))
    }
}

impl StageImpl for ExpressIxscan {
    fn name(&self) -> &'static str {
        if self.idhack {
            "IDHACK"
        } else {
            "EXPRESS_IXSCAN"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        if self.done {
            return Ok(StageState::IsEof);
        }
        self.done = true;
        Ok(match self.lookup()? {
            Some(m) => StageState::Advanced(m),
            None => StageState::IsEof,
        })
    }

    fn counter(&self, field: &str) -> Option<i64> {
        match field {
            "keysExamined" => Some(self.keys_examined),
            "docsExamined" => Some(self.docs_examined),
            _ => None,
        }
    }

    fn index_fields(&self) -> (Option<Bson>, Option<String>) {
        if self.idhack {
            return (None, None);
        }
        (
            Some(Bson::Document(self.index.key_document())),
            Some(self.index.name.clone()),
        )
    }

    fn index_name(&self) -> Option<String> {
        (!self.idhack).then(|| self.index.name.clone())
    }

    fn key_text(&self) -> Option<&str> {
        (!self.idhack).then(|| self.index.key_text())
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        if self.idhack {
            d.insert("keysExamined", self.keys_examined);
            d.insert("docsExamined", self.docs_examined);
            return d;
        }
        d.insert("keyPattern", self.index.key_document());
        d.insert(
            "keyPatternSummary",
            nidus_common::shell::format(&Bson::Document(self.index.key_document())),
        );
        d.insert("indexName", self.index.name.clone());
        d.insert("keysExamined", self.keys_examined);
        d.insert("docsExamined", self.docs_examined);
        d
    }
}

/// What an express write does with the document it found.
pub enum ExpressWriteKind {
    Update(Box<UpdateAction>),
    Delete { return_deleted: bool },
}

/// `EXPRESS_UPDATE` / `EXPRESS_DELETE`: MongoDB 8.0's express path for a write by `_id`, one
/// stage that looks the document up and (under explain) counts what it would change.
pub struct ExpressWrite {
    lookup: ExpressIxscan,
    kind: ExpressWriteKind,
    n_modified: i64,
    n_deleted: i64,
}

impl ExpressWrite {
    pub fn new(lookup: ExpressIxscan, kind: ExpressWriteKind) -> ExpressWrite {
        ExpressWrite {
            lookup,
            kind,
            n_modified: 0,
            n_deleted: 0,
        }
    }
}

impl StageImpl for ExpressWrite {
    fn name(&self) -> &'static str {
        match self.kind {
            ExpressWriteKind::Update(_) => "EXPRESS_UPDATE",
            ExpressWriteKind::Delete { .. } => "EXPRESS_DELETE",
        }
    }

    fn work(&mut self) -> Result<StageState> {
        let m = match self.lookup.work()? {
            StageState::Advanced(m) => m,
            other => return Ok(other),
        };
        match &self.kind {
            ExpressWriteKind::Update(action) => {
                let Some(would) = action.apply(&m)? else {
                    return Ok(StageState::IsEof);
                };
                self.n_modified += i64::from(would.modified);
                Ok(match would.returned {
                    Some(r) => StageState::Advanced(r),
                    None => StageState::IsEof,
                })
            }
            ExpressWriteKind::Delete { return_deleted } => {
                self.n_deleted += 1;
                Ok(if *return_deleted {
                    StageState::Advanced(m)
                } else {
                    StageState::IsEof
                })
            }
        }
    }

    fn counter(&self, field: &str) -> Option<i64> {
        match field {
            "nWouldModify" => Some(self.n_modified),
            "nWouldUpsert" => Some(0),
            "nWouldDelete" => Some(self.n_deleted),
            _ => self.lookup.counter(field),
        }
    }

    fn index_fields(&self) -> (Option<Bson>, Option<String>) {
        self.lookup.index_fields()
    }

    fn index_name(&self) -> Option<String> {
        self.lookup.index_name()
    }

    fn key_text(&self) -> Option<&str> {
        self.lookup.key_text()
    }

    fn specific_stats(&self) -> Document {
        let mut d = self.lookup.specific_stats();
        d.insert("nWouldModify", self.n_modified);
        d.insert("nWouldUpsert", 0i64);
        d.insert("nWouldDelete", self.n_deleted);
        d
    }
}
