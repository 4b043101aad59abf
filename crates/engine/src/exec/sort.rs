use super::spill::SpillRun;
use super::{Member, Stage, StageImpl, StageState};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::sort::SortPattern;
use std::cmp::Ordering;
use std::path::PathBuf;

/// MongoDB's `internalQueryMaxBlockingSortMemoryUsageBytes` default.
pub const MAX_SORT_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// How much memory a SORT may hold, and where it spills beyond that (`allowDiskUse`; None:
/// going over the limit fails the query).
#[derive(Debug, Clone)]
pub struct SortLimits {
    pub max_memory: usize,
    pub spill_dir: Option<PathBuf>,
}

impl Default for SortLimits {
    fn default() -> Self {
        SortLimits {
            max_memory: MAX_SORT_MEMORY_BYTES,
            spill_dir: None,
        }
    }
}

type Item = (Vec<Bson>, u64, Member);

/// `SORT`: consumes its child, then returns results in sort order. With a limit it keeps only
/// the best `limit` results (top-k), as MongoDB's SORT with `limitAmount` does. Over its
/// memory limit it writes sorted runs to disk when allowed and merges them at the end.
pub struct Sort {
    child: Box<Stage>,
    pattern: SortPattern,
    pattern_doc: Document,
    limit: u64,
    limits: SortLimits,
    buffered: Vec<Item>,
    output: Option<Output>,
    returned: u64,
    memory: usize,
    data_size_sorted: usize,
    seq: u64,
    runs: Vec<SpillRun>,
    spills: i64,
    spilled_bytes: u64,
}

/// The sorted results: from memory, or merged from the runs on disk and what stayed in memory.
enum Output {
    Memory(std::vec::IntoIter<Item>),
    Merge(Merge),
}

/// One waiting result per source (each run, then the memory remainder); the smallest goes
/// first, ties to the earlier source, which holds the earlier input.
struct Merge {
    runs: Vec<SpillRun>,
    memory: std::vec::IntoIter<Item>,
    heads: Vec<Option<(Vec<Bson>, Member)>>,
}

impl Sort {
    pub fn new(
        child: Stage,
        pattern: SortPattern,
        pattern_doc: Document,
        limit: u64,
        limits: SortLimits,
    ) -> Sort {
        Sort {
            child: Box::new(child),
            pattern,
            pattern_doc,
            limit,
            limits,
            buffered: Vec::new(),
            output: None,
            returned: 0,
            memory: 0,
            data_size_sorted: 0,
            seq: 0,
            runs: Vec::new(),
            spills: 0,
            spilled_bytes: 0,
        }
    }

    fn compare(&self, a: &Item, b: &Item) -> Ordering {
        // Ties keep input order, as MongoDB's stable sort does.
        self.pattern.compare_keys(&a.0, &b.0).then(a.1.cmp(&b.1))
    }

    fn add(&mut self, m: Member) -> Result<()> {
        let doc = m.doc()?;
        let key = self.pattern.sort_key(doc);
        let size = doc.as_bytes().len();
        self.memory += size;
        self.data_size_sorted += size;
        self.buffered.push((key, self.seq, m));
        self.seq += 1;
        if self.limit > 0 && self.buffered.len() as u64 >= self.limit.saturating_mul(2).max(64) {
            self.truncate_to_limit();
        }
        if self.memory > self.limits.max_memory {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes what is buffered to disk as one sorted run, or fails without `allowDiskUse`.
    fn spill(&mut self) -> Result<()> {
        let Some(dir) = self.limits.spill_dir.clone() else {
            return Err(Error::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!(
                    "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                    self.limits.max_memory
                ),
            ));
        };
        let mut items = std::mem::take(&mut self.buffered);
        items.sort_by(|a, b| self.compare(a, b));
        if self.limit > 0 {
            items.truncate(self.limit as usize);
        }
        // Every buffered result has its document (`add` required it).
        let records = items
            .iter()
            .filter_map(|(_, _, m)| m.doc.as_ref().map(|d| (m.rid, d)));
        let run = SpillRun::write(&dir, records)?;
        self.spilled_bytes += run.bytes;
        self.spills += 1;
        self.runs.push(run);
        self.memory = 0;
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

    /// The child is done: sort what is in memory and, if runs were spilled, merge with them.
    fn finish_input(&mut self) -> Result<()> {
        let mut items = std::mem::take(&mut self.buffered);
        items.sort_by(|a, b| self.compare(a, b));
        if self.limit > 0 {
            items.truncate(self.limit as usize);
        }
        self.output = Some(if self.runs.is_empty() {
            Output::Memory(items.into_iter())
        } else {
            let mut merge = Merge {
                runs: std::mem::take(&mut self.runs),
                memory: items.into_iter(),
                heads: Vec::new(),
            };
            for source in 0..=merge.runs.len() {
                let head = merge.pull(source, &self.pattern)?;
                merge.heads.push(head);
            }
            Output::Merge(merge)
        });
        Ok(())
    }
}

impl Merge {
    /// The next result of `source` (a run, or the memory remainder after the runs).
    fn pull(
        &mut self,
        source: usize,
        pattern: &SortPattern,
    ) -> Result<Option<(Vec<Bson>, Member)>> {
        if let Some(run) = self.runs.get_mut(source) {
            return Ok(run.next()?.map(|(rid, doc)| {
                let key = pattern.sort_key(&doc);
                (key, Member::with_doc(rid, doc))
            }));
        }
        Ok(self.memory.next().map(|(key, _, m)| (key, m)))
    }

    fn next(&mut self, pattern: &SortPattern) -> Result<Option<Member>> {
        let best = (0..self.heads.len())
            .filter(|&i| self.heads[i].is_some())
            .min_by(|&a, &b| {
                let (ka, kb) = (&self.heads[a], &self.heads[b]);
                match (ka, kb) {
                    (Some((ka, _)), Some((kb, _))) => pattern.compare_keys(ka, kb).then(a.cmp(&b)),
                    _ => Ordering::Equal,
                }
            });
        let Some(best) = best else {
            return Ok(None);
        };
        let taken = self.heads[best].take().map(|(_, m)| m);
        self.heads[best] = self.pull(best, pattern)?;
        Ok(taken)
    }
}

impl StageImpl for Sort {
    fn name(&self) -> &'static str {
        "SORT"
    }

    fn work(&mut self) -> Result<StageState> {
        if let Some(out) = &mut self.output {
            if self.limit > 0 && self.returned >= self.limit {
                return Ok(StageState::IsEof);
            }
            let next = match out {
                Output::Memory(it) => it.next().map(|(_, _, m)| m),
                Output::Merge(merge) => merge.next(&self.pattern)?,
            };
            return Ok(match next {
                Some(m) => {
                    self.returned += 1;
                    StageState::Advanced(m)
                }
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
                self.finish_input()?;
                Ok(StageState::NeedTime)
            }
        }
    }

    fn specific_stats(&self) -> Document {
        let mut d = Document::new();
        d.insert("sortPattern", self.pattern_doc.clone());
        d.insert("memLimit", self.limits.max_memory as i64);
        if self.limit > 0 {
            d.insert("limitAmount", self.limit as i64);
        }
        d.insert("type", "simple");
        d.insert("totalDataSizeSorted", self.data_size_sorted as i64);
        d.insert("usedDisk", self.spills > 0);
        d.insert("spills", self.spills);
        d.insert("spilledDataStorageSize", self.spilled_bytes as i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}
