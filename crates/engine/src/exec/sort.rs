use super::{Member, Stage, StageImpl, StageState};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::sort::SortPattern;
use std::cmp::Ordering;

/// MongoDB's `internalQueryMaxBlockingSortMemoryUsageBytes` default.
pub const MAX_SORT_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// `SORT`: consumes its child, then returns results in sort order. With a limit it keeps only
/// the best `limit` results (top-k), as MongoDB's SORT with `limitAmount` does.
pub struct Sort {
    child: Box<Stage>,
    pattern: SortPattern,
    pattern_doc: Document,
    limit: u64,
    buffered: Vec<(Vec<Bson>, u64, Member)>,
    sorted: Option<std::vec::IntoIter<(Vec<Bson>, u64, Member)>>,
    memory: usize,
    max_memory: usize,
    seq: u64,
}

impl Sort {
    pub fn new(child: Stage, pattern: SortPattern, pattern_doc: Document, limit: u64) -> Sort {
        Sort {
            child: Box::new(child),
            pattern,
            pattern_doc,
            limit,
            buffered: Vec::new(),
            sorted: None,
            memory: 0,
            max_memory: 0,
            seq: 0,
        }
    }

    fn compare(&self, a: &(Vec<Bson>, u64, Member), b: &(Vec<Bson>, u64, Member)) -> Ordering {
        // Ties keep input order, as MongoDB's stable sort does.
        self.pattern.compare_keys(&a.0, &b.0).then(a.1.cmp(&b.1))
    }

    fn add(&mut self, m: Member) -> Result<()> {
        let doc = m.doc()?;
        let key = self.pattern.sort_key(doc);
        self.memory += doc.as_bytes().len();
        self.max_memory = self.max_memory.max(self.memory);
        if self.memory > MAX_SORT_MEMORY_BYTES {
            return Err(Error::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!("Sort exceeded memory limit of {MAX_SORT_MEMORY_BYTES} bytes, but did not opt in to external sorting."),
            ));
        }
        self.buffered.push((key, self.seq, m));
        self.seq += 1;
        if self.limit > 0 && self.buffered.len() as u64 >= self.limit.saturating_mul(2).max(64) {
            self.truncate_to_limit();
        }
        Ok(())
    }

    /// Keeps the best `limit` entries so memory stays proportional to the limit.
    fn truncate_to_limit(&mut self) {
        let mut items = std::mem::take(&mut self.buffered);
        items.sort_by(|a, b| self.compare(a, b));
        items.truncate(self.limit as usize);
        self.memory = items
            .iter()
            .map(|i| i.2.doc.as_ref().map_or(0, |d| d.as_bytes().len()))
            .sum();
        self.buffered = items;
    }
}

impl StageImpl for Sort {
    fn name(&self) -> &'static str {
        "SORT"
    }

    fn work(&mut self) -> Result<StageState> {
        if let Some(it) = &mut self.sorted {
            return Ok(match it.next() {
                Some((_, _, m)) => StageState::Advanced(m),
                None => StageState::IsEof,
            });
        }
        match self.child.work()? {
            StageState::Advanced(m) => {
                self.add(m)?;
                Ok(StageState::NeedTime)
            }
            StageState::NeedTime => Ok(StageState::NeedTime),
            StageState::IsEof => {
                let mut items = std::mem::take(&mut self.buffered);
                items.sort_by(|a, b| self.compare(a, b));
                if self.limit > 0 {
                    items.truncate(self.limit as usize);
                }
                self.sorted = Some(items.into_iter());
                Ok(StageState::NeedTime)
            }
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("sortPattern", self.pattern_doc.clone());
        d.insert("memLimit", MAX_SORT_MEMORY_BYTES as i64);
        if self.limit > 0 {
            d.insert("limitAmount", self.limit as i64);
        }
        d.insert("type", "simple");
        d.insert("totalDataSizeSorted", self.max_memory as i64);
        d.insert("usedDisk", false);
        d.insert("spills", 0i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
