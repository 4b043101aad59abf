use super::{IndexScan, Stage, StageImpl, StageState};
use crate::catalog::IndexMeta;
use crate::catalog::RecordStore;
use crate::plan::bounds::{IndexBounds, Interval, OrderedIntervalList};
use crate::txn::ReadSource;
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::Result;
use nidus_query::matcher::Matcher;
use nidus_storage::KvRead;
use std::sync::Arc;

/// The scan of a clustered collection (`clustered.rs`): its documents in cluster key (`_id`)
/// order, from `minRecord` to `maxRecord` (both inclusive; the filter decides the rest, as
/// MongoDB's bounded collection scan does). Explain names it `CLUSTERED_IXSCAN` when bounded
/// and `COLLSCAN` otherwise, as MongoDB does; it reads the cluster key entries itself, so it
/// has no child stage in explain.
pub struct ClusteredScan {
    src: ReadSource,
    records: RecordStore,
    keys: Box<Stage>,
    forward: bool,
    filter: Option<(Arc<Matcher>, Document)>,
    min: Option<Bson>,
    max: Option<Bson>,
    docs_examined: i64,
}

impl ClusteredScan {
    pub fn new(
        src: ReadSource,
        records: RecordStore,
        cluster_key: IndexMeta,
        forward: bool,
        filter: Option<(Arc<Matcher>, Document)>,
        (min, max): (Option<Bson>, Option<Bson>),
    ) -> ClusteredScan {
        let interval = Interval::new(
            min.clone().unwrap_or(Bson::MinKey),
            true,
            max.clone().unwrap_or(Bson::MaxKey),
            true,
        );
        let bounds = IndexBounds {
            fields: vec![OrderedIntervalList::from_ascending(
                "_id",
                vec![interval],
                false,
            )],
        };
        let keys = Stage::new(IndexScan::new(src.clone(), cluster_key, bounds, forward));
        ClusteredScan {
            src,
            records,
            keys: Box::new(keys),
            forward,
            filter,
            min,
            max,
            docs_examined: 0,
        }
    }

    fn bounded(&self) -> bool {
        self.min.is_some() || self.max.is_some()
    }
}

impl StageImpl for ClusteredScan {
    fn name(&self) -> &'static str {
        if self.bounded() {
            "CLUSTERED_IXSCAN"
        } else {
            "COLLSCAN"
        }
    }

    fn work(&mut self) -> Result<StageState> {
        let mut m = match self.keys.work()? {
            StageState::Advanced(m) => m,
            other => return Ok(other),
        };
        let Some(rid) = m.rid else {
            return Ok(StageState::NeedTime);
        };
        let key = self.records.key(rid);
        let bytes = match &m.snapshot {
            Some(s) => s.get(self.records.space, &key)?,
            None => self.src.view()?.get(self.records.space, &key)?,
        };
        // The document was deleted after its key was read (a later snapshot).
        let Some(bytes) = bytes else {
            return Ok(StageState::NeedTime);
        };
        self.docs_examined += 1;
        m.doc = Some(RawDocumentBuf::from_bytes(bytes)?);
        m.key = None;
        m.snapshot = None;
        if let Some((matcher, _)) = &self.filter {
            if !matcher.matches(m.doc()?)? {
                return Ok(StageState::NeedTime);
            }
        }
        Ok(StageState::Advanced(m))
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        if let Some((_, f)) = &self.filter {
            d.insert("filter", f.clone());
        }
        d.insert(
            "direction",
            if self.forward { "forward" } else { "backward" },
        );
        if let Some(v) = &self.min {
            d.insert("minRecord", v.clone());
        }
        if let Some(v) = &self.max {
            d.insert("maxRecord", v.clone());
        }
        d.insert("docsExamined", self.docs_examined);
        d
    }
}
