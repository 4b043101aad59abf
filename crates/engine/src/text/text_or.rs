//! `TEXT_OR`: the union of a text query's term scans with each document's score, the sum
//! of the scores its index keys hold for the query's terms; it then reads each document and
//! applies the rest of the filter.

use crate::catalog::RecordStore;
use crate::exec::{Member, Stage, StageImpl, StageState};
use crate::txn::ReadSource;
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::Result;
use nidus_query::matcher::Matcher;
use nidus_storage::{KvRead, KvSnapshot};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A document's score so far and the snapshot its first key was read in.
type Scored = (f64, Option<Arc<dyn KvSnapshot>>);

pub struct TextOr {
    src: ReadSource,
    records: RecordStore,
    children: Vec<Stage>,
    current: usize,
    filter: Option<(Arc<Matcher>, Document)>,
    scores: BTreeMap<u64, Scored>,
    /// Filled once every scan ended: the documents to return, in record id order.
    output: Option<std::collections::btree_map::IntoIter<u64, Scored>>,
    docs_examined: i64,
}

impl TextOr {
    pub fn new(
        src: ReadSource,
        records: RecordStore,
        children: Vec<Stage>,
        filter: Option<(Arc<Matcher>, Document)>,
    ) -> TextOr {
        TextOr {
            src,
            records,
            children,
            current: 0,
            filter,
            scores: BTreeMap::new(),
            output: None,
            docs_examined: 0,
        }
    }
}

impl StageImpl for TextOr {
    fn name(&self) -> &'static str {
        "TEXT_OR"
    }

    fn work(&mut self) -> Result<StageState> {
        if let Some(child) = self.children.get_mut(self.current) {
            match child.work()? {
                StageState::Advanced(m) => {
                    let score = match m.key.as_ref().and_then(|k| k.value_of("_ftsx")) {
                        Some(Bson::Double(s)) => *s,
                        _ => 0.0,
                    };
                    if let Some(rid) = m.rid {
                        let e = self.scores.entry(rid).or_insert((0.0, m.snapshot.clone()));
                        e.0 += score;
                    }
                }
                StageState::NeedTime => {}
                StageState::IsEof => self.current += 1,
            }
            return Ok(StageState::NeedTime);
        }
        let output = self
            .output
            .get_or_insert_with(|| std::mem::take(&mut self.scores).into_iter());
        let Some((rid, (score, snapshot))) = output.next() else {
            return Ok(StageState::IsEof);
        };
        let key = self.records.key(rid);
        let bytes = match &snapshot {
            Some(s) => s.get(self.records.space, &key)?,
            None => self.src.view()?.get(self.records.space, &key)?,
        };
        // The document went away since its key was read.
        let Some(bytes) = bytes else {
            return Ok(StageState::NeedTime);
        };
        self.docs_examined += 1;
        let doc = RawDocumentBuf::from_bytes(bytes)?;
        if let Some((matcher, _)) = &self.filter {
            if !matcher.matches(&doc)? {
                return Ok(StageState::NeedTime);
            }
        }
        let mut m = Member::with_doc(Some(rid), doc);
        m.text_score = Some(score);
        Ok(StageState::Advanced(m))
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        if let Some((_, f)) = &self.filter {
            d.insert("filter", f.clone());
        }
        d.insert("docsExamined", self.docs_examined);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        self.children.iter().collect()
    }
}
