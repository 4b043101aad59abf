use super::{Member, StageImpl, StageState};
use crate::catalog::RecordStore;
use crate::txn::ReadSource;
use bson::{Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use nidus_storage::{keys, KvRead};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Records read per storage snapshot; between batches the scan "yields" and resumes after
/// the last RecordId it returned, as MongoDB's collection scan does after a yield.
const BATCH: usize = 256;

/// The fewest RecordIds a part of a split scan covers: below that, a thread of its own costs
/// more than it saves.
const MIN_PART_RECORDS: u64 = 16_384;

/// `COLLSCAN`: the record store in RecordId order (natural order), forward or backward.
pub struct CollScan {
    src: ReadSource,
    records: RecordStore,
    forward: bool,
    filter: Option<Arc<Matcher>>,
    filter_doc: Option<Document>,
    /// RecordId to resume after (forward) or before (backward).
    resume: Option<u64>,
    buffer: VecDeque<(u64, Vec<u8>)>,
    exhausted: bool,
    docs_examined: i64,
    /// A capped collection: resuming after a record that was deleted meanwhile fails with
    /// CappedPositionLost, as MongoDB's scan does after a yield.
    capped: bool,
    /// A tailable cursor: the end of the records is not the end of the scan; the next
    /// `work` reads again after the last record returned.
    tailable: bool,
    /// The oplog: the scan reads no entry past its visibility point (a hole below it could
    /// still be filled by a writer that has not committed).
    oplog: Option<Arc<crate::oplog::Oplog>>,
    /// A part of a split scan reads RecordIds from `range.0` (inclusive) to `range.1`
    /// (exclusive); None: from the first / to the last.
    range: (Option<u64>, Option<u64>),
    /// Documents examined by the parts this scan was split into (each adds its count when
    /// dropped).
    parts_examined: Option<Arc<AtomicI64>>,
    /// A part: where it adds its count of documents examined when dropped.
    examined_sink: Option<Arc<AtomicI64>>,
}

impl CollScan {
    pub fn new(
        src: ReadSource,
        records: RecordStore,
        forward: bool,
        filter: Option<(Arc<Matcher>, Document)>,
    ) -> CollScan {
        let (filter, filter_doc) = match filter {
            Some((m, d)) => (Some(m), Some(d)),
            None => (None, None),
        };
        CollScan {
            src,
            records,
            forward,
            filter,
            filter_doc,
            resume: None,
            buffer: VecDeque::new(),
            exhausted: false,
            docs_examined: 0,
            capped: false,
            tailable: false,
            oplog: None,
            range: (None, None),
            parts_examined: None,
            examined_sink: None,
        }
    }

    pub fn capped(mut self, capped: bool) -> CollScan {
        self.capped = capped;
        self
    }

    pub fn tailable(mut self, tailable: bool) -> CollScan {
        self.tailable = tailable;
        self
    }

    pub fn visible_through(mut self, oplog: Option<Arc<crate::oplog::Oplog>>) -> CollScan {
        self.oplog = oplog;
        self
    }

    /// CappedPositionLost when the record the scan would resume after is gone.
    fn check_position(&self, snap: &dyn KvRead) -> Result<()> {
        let Some(rid) = self.resume.filter(|_| self.capped) else {
            return Ok(());
        };
        if snap
            .get(self.records.space, &self.records.key(rid))?
            .is_none()
        {
            return Err(Error::new(
                ErrorCode::CappedPositionLost,
                format!("CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId({rid})"),
            ));
        }
        Ok(())
    }

    fn refill(&mut self) -> Result<()> {
        // The visibility point is read before the snapshot is taken: every entry at or
        // below it committed before it was published.
        let upper = match (&self.oplog, self.range.1) {
            (Some(o), _) => self.records.key(o.visible_u64().saturating_add(1)).to_vec(),
            (None, Some(end)) => self.records.key(end).to_vec(),
            (None, None) => self.records.upper().to_vec(),
        };
        let src = self.src.clone();
        let snap = src.view()?;
        self.check_position(&snap)?;
        let lower = match self.range.0 {
            Some(start) => self.records.key(start).to_vec(),
            None => self.records.lower().to_vec(),
        };
        let mut c = snap.cursor(self.records.space, &lower, &upper);
        match (self.resume, self.forward) {
            (None, true) => c.seek_to_first(),
            (None, false) => c.seek_to_last(),
            (Some(rid), true) => c.seek(&self.records.key(rid.saturating_add(1))),
            (Some(0), false) => {
                self.exhausted = true;
                return Ok(());
            }
            (Some(rid), false) => c.seek_for_prev(&self.records.key(rid - 1)),
        }
        while c.valid() && self.buffer.len() < BATCH {
            let rid = keys::read_u64(&c.key()[8..]).unwrap_or(0);
            self.buffer.push_back((rid, c.value().to_vec()));
            if self.forward {
                c.next();
            } else {
                c.prev();
            }
        }
        c.status()?;
        if self.buffer.len() < BATCH {
            self.exhausted = true;
        }
        if let Some((rid, _)) = self.buffer.back() {
            self.resume = Some(*rid);
        }
        Ok(())
    }
}

impl CollScan {
    /// Splits a forward scan that has not started into at most `n` scans of consecutive
    /// RecordId ranges, which together read what this scan would, the first part's records
    /// first. Only a scan of the latest data or of a read snapshot splits (a transaction's
    /// reads go through its one storage transaction); nor do capped, tailable or oplog scans,
    /// whose positions and visibility are bound to one reader. None: it does not split, or
    /// the collection spans too few RecordIds for two parts.
    fn split_parts(&mut self, n: usize) -> Option<Vec<CollScan>> {
        let splittable = self.forward
            && !self.capped
            && !self.tailable
            && self.oplog.is_none()
            && self.resume.is_none()
            && self.buffer.is_empty()
            && !self.exhausted
            && self.range == (None, None)
            && self.parts_examined.is_none()
            && self.examined_sink.is_none()
            && !matches!(self.src, ReadSource::Txn(_));
        if !splittable || n < 2 {
            return None;
        }
        let (first, last) = {
            let snap = self.src.view().ok()?;
            let lower = self.records.lower();
            let upper = self.records.upper();
            let mut c = snap.cursor(self.records.space, &lower, &upper);
            c.seek_to_first();
            let first = c.valid().then(|| keys::read_u64(&c.key()[8..]))??;
            c.seek_to_last();
            let last = c.valid().then(|| keys::read_u64(&c.key()[8..]))??;
            (first, last)
        };
        let span = last.checked_sub(first)?.saturating_add(1);
        let n = (n as u64).min(span / MIN_PART_RECORDS);
        if n < 2 {
            return None;
        }
        let shared = Arc::new(AtomicI64::new(0));
        self.parts_examined = Some(shared.clone());
        // The first part starts at the beginning and the last has no end, so records
        // inserted outside [first, last] meanwhile are read as a single scan could.
        let bound = |i: u64| first + (u128::from(span) * u128::from(i) / u128::from(n)) as u64;
        Some(
            (0..n)
                .map(|i| {
                    let mut part = CollScan::new(self.src.clone(), self.records, true, None);
                    part.filter = self.filter.clone();
                    part.range = ((i > 0).then(|| bound(i)), (i + 1 < n).then(|| bound(i + 1)));
                    part.examined_sink = Some(shared.clone());
                    part
                })
                .collect(),
        )
    }

    fn examined(&self) -> i64 {
        let parts = self.parts_examined.as_ref();
        self.docs_examined + parts.map_or(0, |p| p.load(Ordering::Relaxed))
    }
}

impl Drop for CollScan {
    fn drop(&mut self) {
        if let Some(sink) = &self.examined_sink {
            sink.fetch_add(self.docs_examined, Ordering::Relaxed);
        }
    }
}

impl StageImpl for CollScan {
    fn name(&self) -> &'static str {
        "COLLSCAN"
    }

    fn work(&mut self) -> Result<StageState> {
        if self.buffer.is_empty() {
            if self.exhausted && !self.tailable {
                return Ok(StageState::IsEof);
            }
            self.refill()?;
            if self.buffer.is_empty() {
                return Ok(StageState::IsEof);
            }
        }
        let Some((rid, bytes)) = self.buffer.pop_front() else {
            return Ok(StageState::IsEof);
        };
        self.docs_examined += 1;
        let doc = RawDocumentBuf::from_bytes(bytes)?;
        let matched = match &self.filter {
            Some(m) => m.matches(&doc)?,
            None => true,
        };
        if matched {
            Ok(StageState::Advanced(Member::with_doc(Some(rid), doc)))
        } else {
            Ok(StageState::NeedTime)
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        if let Some(f) = &self.filter_doc {
            d.insert("filter", f.clone());
        }
        d.insert(
            "direction",
            if self.forward { "forward" } else { "backward" },
        );
        d.insert("docsExamined", self.examined());
        d
    }

    fn split(&mut self, n: usize) -> Option<Vec<Box<dyn StageImpl>>> {
        let parts = self.split_parts(n)?;
        Some(
            parts
                .into_iter()
                .map(|p| Box::new(p) as Box<dyn StageImpl>)
                .collect(),
        )
    }
}
