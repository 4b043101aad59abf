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

type Item = (SortKey, u64, Member);

/// A result's sort key. Without a collation it is the keystring of the key values (each
/// field's encoding inverted when descending), whose byte order is the sort order, so
/// sorting and merging compare bytes; with one, the values compared under it.
#[derive(Debug)]
enum SortKey {
    Bytes(Vec<u8>),
    Values(Vec<Bson>),
}

fn sort_key(pattern: &SortPattern, doc: &bson::RawDocument) -> SortKey {
    if pattern.collation.is_some() {
        return SortKey::Values(pattern.sort_key(doc));
    }
    let mut out = Vec::with_capacity(16);
    for f in &pattern.fields {
        let v = nidus_doc::keys::sort_key_value(doc, &f.path, f.descending);
        nidus_doc::keystring::encode_value(&mut out, v, f.descending);
    }
    SortKey::Bytes(out)
}

fn compare_keys(pattern: &SortPattern, a: &SortKey, b: &SortKey) -> Ordering {
    match (a, b) {
        (SortKey::Bytes(x), SortKey::Bytes(y)) => x.cmp(y),
        (SortKey::Values(x), SortKey::Values(y)) => pattern.compare_keys(x, y),
        // One pattern makes one kind of key.
        (SortKey::Bytes(_), SortKey::Values(_)) => Ordering::Less,
        (SortKey::Values(_), SortKey::Bytes(_)) => Ordering::Greater,
    }
}

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
    heads: Vec<Option<(SortKey, Member)>>,
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
        compare_keys(&self.pattern, &a.0, &b.0).then(a.1.cmp(&b.1))
    }

    fn add(&mut self, m: Member) -> Result<()> {
        let doc = m.doc()?;
        let key = sort_key(&self.pattern, doc);
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
    fn pull(&mut self, source: usize, pattern: &SortPattern) -> Result<Option<(SortKey, Member)>> {
        if let Some(run) = self.runs.get_mut(source) {
            return Ok(run.next()?.map(|(rid, doc)| {
                let key = sort_key(pattern, &doc);
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
                    (Some((ka, _)), Some((kb, _))) => compare_keys(pattern, ka, kb).then(a.cmp(&b)),
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

#[cfg(test)]
mod tests {
    //! SORT's byte keys against the pattern's value comparison, in memory and spilled.

    use crate::find::FindSpec;
    use crate::namespace::Namespace;
    use crate::write::{prepare_insert, WriteOpts};
    use crate::Engine;
    use bson::{doc, Bson, Decimal128, Document, RawDocumentBuf};
    use nidus_query::sort::SortPattern;
    use nidus_storage_rocks::RocksEngine;
    use std::sync::Arc;

    fn value(i: u64) -> Bson {
        match i % 13 {
            0 => Bson::Int32((i % 5) as i32 - 2),
            1 => Bson::Int64((i % 7) as i64 - 3),
            2 => Bson::Double((i % 9) as f64 / 2.0 - 2.0),
            3 => Bson::Decimal128("1.5".parse::<Decimal128>().expect("decimal")),
            4 => Bson::String(["", "a", "a\u{0}b", "ab", "B", "é"][(i % 6) as usize].into()),
            5 => Bson::Null,
            6 => Bson::Array(vec![Bson::Int32((i % 4) as i32), Bson::String("x".into())]),
            7 => Bson::Array(vec![]),
            8 => Bson::Document(doc! {"x": (i % 3) as i32}),
            9 => Bson::Boolean(i.is_multiple_of(2)),
            10 => Bson::Double(f64::NAN),
            11 => Bson::DateTime(bson::DateTime::from_millis((i % 5) as i64 * 1000 - 2000)),
            _ => Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![(i % 3) as u8; (i % 2) as usize + 1],
            }),
        }
    }

    #[test]
    fn byte_keys_sort_as_the_values_compare() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
        let e = Engine::open(kv).expect("engine");
        let ns = Namespace::new("test", "s");
        let coll = e.ensure_collection(&ns).expect("collection");
        let mut docs = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for id in 0..600 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut d = doc! {"_id": id};
            if !x.is_multiple_of(10) {
                d.insert("a", value(x >> 8));
            }
            d.insert("b", doc! {"c": value(x >> 20)});
            docs.push(d);
        }
        for d in &docs {
            let raw = RawDocumentBuf::from_document(d).expect("raw");
            e.insert_one(
                &coll,
                &prepare_insert(&raw).expect("prepare"),
                &WriteOpts::default(),
            )
            .expect("insert");
        }
        for sort in [
            doc! {"a": 1},
            doc! {"a": -1, "_id": 1},
            doc! {"b.c": 1, "a": -1},
        ] {
            // The reference: a stable sort by the pattern's value comparison.
            let pattern = SortPattern::parse(&sort).expect("pattern");
            let mut expected: Vec<(Vec<Bson>, i32)> = docs
                .iter()
                .map(|d| {
                    let raw = RawDocumentBuf::from_document(d).expect("raw");
                    (pattern.sort_key(&raw), d.get_i32("_id").expect("_id"))
                })
                .collect();
            expected.sort_by(|a, b| pattern.compare_keys(&a.0, &b.0));
            let expected: Vec<i32> = expected.into_iter().map(|(_, id)| id).collect();
            for memory in [None, Some(4096)] {
                let spec = FindSpec {
                    sort: Some(sort.clone()),
                    sort_memory_limit: memory,
                    allow_disk_use: true,
                    ..FindSpec::default()
                };
                let mut exec = e.plan_find(Some(&coll), &spec).expect("plan");
                let mut got = Vec::new();
                while let Some(d) = exec.next_doc().expect("next") {
                    let d: Document = Document::try_from(d.as_ref()).expect("document");
                    got.push(d.get_i32("_id").expect("_id"));
                }
                assert_eq!(got, expected, "sort {sort}, memory {memory:?}");
            }
        }
    }
}
