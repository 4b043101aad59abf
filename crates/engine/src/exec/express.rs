use super::{Member, StageImpl, StageState};
use crate::catalog::IndexMeta;
use crate::index;
use bson::{Bson, Document, RawBson, RawDocumentBuf};
use nidus_common::{Error, Result};
use nidus_storage::{keys, KvEngine, Space};
use std::sync::Arc;

/// `EXPRESS_IXSCAN`: the point lookup of `{_id: <value>}` through the unique `_id` index,
/// without planning (MongoDB 8.0's express path).
pub struct ExpressIxscan {
    kv: Arc<dyn KvEngine>,
    coll_id: u64,
    index: IndexMeta,
    value: Bson,
    done: bool,
    keys_examined: i64,
    docs_examined: i64,
}

impl ExpressIxscan {
    pub fn new(
        kv: Arc<dyn KvEngine>,
        coll_id: u64,
        index: IndexMeta,
        value: Bson,
    ) -> ExpressIxscan {
        ExpressIxscan {
            kv,
            coll_id,
            index,
            value,
            done: false,
            keys_examined: 0,
            docs_examined: 0,
        }
    }

    fn lookup(&mut self) -> Result<Option<Member>> {
        let raw =
            RawBson::try_from(self.value.clone()).map_err(|e| Error::internal(e.to_string()))?;
        let (ks, _) = nidus_doc::keystring::encode_key(&[(raw.as_raw_bson_ref(), false)]);
        let snap = self.kv.snapshot();
        let Some(entry) = snap.get(Space::Indexes, &index::entry_key(&self.index, &ks, 0))? else {
            return Ok(None);
        };
        self.keys_examined += 1;
        let Some(rid) = keys::read_u64(&entry) else {
            return Ok(None);
        };
        let Some(bytes) = snap.get(Space::Records, &keys::with_id(self.coll_id, rid))? else {
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
        "EXPRESS_IXSCAN"
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

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
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
