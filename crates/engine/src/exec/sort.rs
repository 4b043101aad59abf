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

/// The first 8 bytes of a byte key as a big-endian number, zero-padded (0 for value keys).
/// Keys whose prefixes differ compare as their prefixes do: at the first differing position
/// either both keys have a byte there, or the shorter key ended (padding 0, which sorts it
/// first, as a prefix of the other key sorts first). Equal prefixes say nothing.
fn key_prefix(key: &SortKey) -> u64 {
    match key {
        SortKey::Bytes(b) => {
            let mut p = [0u8; 8];
            let n = b.len().min(8);
            p[..n].copy_from_slice(&b[..n]);
            u64::from_be_bytes(p)
        }
        SortKey::Values(_) => 0,
    }
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

    /// The positions of `items` in sort order. Sorts (key prefix, position) pairs rather than
    /// the items themselves (large, so moving them was much of a sort's cost), comparing whole
    /// keys only where prefixes are equal; the order is total (input sequence numbers are
    /// distinct), so the unstable sort gives the stable sort's order.
    fn sorted_order(&self, items: &[Item]) -> Vec<usize> {
        let mut order: Vec<(u64, usize)> = items
            .iter()
            .enumerate()
            .map(|(i, item)| (key_prefix(&item.0), i))
            .collect();
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| self.compare(&items[a.1], &items[b.1]))
        });
        let mut order: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
        if self.limit > 0 {
            order.truncate(self.limit as usize);
        }
        order
    }

    /// `items` in sort order, only the first `limit` when there is one.
    fn in_sort_order(&self, items: Vec<Item>) -> Vec<Item> {
        let order = self.sorted_order(&items);
        let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        order.iter().filter_map(|&i| slots[i].take()).collect()
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
        let items = std::mem::take(&mut self.buffered);
        let order = self.sorted_order(&items);
        // Every buffered result has its document (`add` required it). Byte keys go with
        // their records; value keys (a collation's) are computed again when merging.
        let records = order.iter().filter_map(|&i| {
            let (key, _, m) = &items[i];
            let key: &[u8] = match key {
                SortKey::Bytes(b) => b,
                SortKey::Values(_) => &[],
            };
            m.doc.as_ref().map(|d| (m.rid, key, d))
        });
        let run = SpillRun::write(&dir, records)?;
        self.spilled_bytes += run.bytes;
        self.spills += 1;
        self.runs.push(run);
        self.memory = 0;
        Ok(())
    }

    /// Keeps the best `limit` entries so memory stays proportional to the limit.
    fn truncate_to_limit(&mut self) {
        let buffered = std::mem::take(&mut self.buffered);
        let items = self.in_sort_order(buffered);
        self.memory = items
            .iter()
            .map(|i| i.2.doc.as_ref().map_or(0, |d| d.as_bytes().len()))
            .sum();
        self.buffered = items;
    }

    /// The child is done: sort what is in memory and, if runs were spilled, merge with them.
    fn finish_input(&mut self) -> Result<()> {
        let buffered = std::mem::take(&mut self.buffered);
        let items = self.in_sort_order(buffered);
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
            let mut key = Vec::new();
            return Ok(run.next_keyed(&mut key)?.map(|(rid, doc)| {
                let key = if pattern.collation.is_some() {
                    sort_key(pattern, &doc)
                } else {
                    SortKey::Bytes(key)
                };
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

    /// The SORT stage's explain statistics in the plan under `stage`.
    fn sort_stats(stage: &crate::exec::Stage) -> Option<Document> {
        if stage.name() == "SORT" {
            return Some(stage.specific_stats());
        }
        stage.children().into_iter().find_map(sort_stats)
    }

    /// A reference sort key, computed apart from SORT's: per field, the path's values
    /// (`path_key_values`), the smallest ascending or the largest descending by
    /// `nidus_doc::compare`.
    fn reference_key<'a>(
        doc: &'a bson::RawDocument,
        fields: &[(&str, bool)],
        collation: Option<&nidus_doc::collation::Collation>,
    ) -> Vec<bson::RawBsonRef<'a>> {
        fields
            .iter()
            .map(|(path, descending)| {
                let path = nidus_doc::path::FieldPath::parse(path);
                let vals = nidus_doc::keys::path_key_values(doc, &path);
                let cmp = |a: &bson::RawBsonRef, b: &bson::RawBsonRef| {
                    nidus_doc::compare::cmp_raw_with(*a, *b, collation)
                };
                let pick = if *descending {
                    vals.into_iter().max_by(cmp)
                } else {
                    vals.into_iter().min_by(cmp)
                };
                pick.expect("a path has at least one key value")
            })
            .collect()
    }

    /// Differential: random documents (mixed types, arrays, missing fields, many equal keys)
    /// sorted by SORT in memory, with one spill and with many, with and without a limit
    /// and a collation, against a stable sort by reference keys.
    #[test]
    fn spilling_sorts_give_the_reference_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
        let e = Engine::open(kv).expect("engine");
        let ns = Namespace::new("test", "diff");
        let coll = e.ensure_collection(&ns).expect("collection");
        let mut docs = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut total_bytes = 0;
        for id in 0..700 {
            let r = next();
            let mut d = doc! {"_id": id};
            match r % 7 {
                0 => {}
                1 => {
                    let n = (r >> 3) % 4;
                    d.insert(
                        "a",
                        (0..n).map(|j| value(r >> (8 + j * 5))).collect::<Vec<_>>(),
                    );
                }
                _ => {
                    d.insert("a", value(r >> 8));
                }
            }
            // Few distinct values: many ties, which must keep input order.
            if r % 11 != 0 {
                d.insert("b", ((r >> 30) % 4) as i32);
            }
            if r % 5 != 0 {
                let s = ["x", "X", "y", "ä"][(r >> 50) as usize % 4];
                d.insert("c", doc! {"d": value(r >> 40), "s": s});
            }
            let raw = RawDocumentBuf::from_document(&d).expect("raw");
            total_bytes += raw.as_bytes().len();
            e.insert_one(
                &coll,
                &prepare_insert(&raw).expect("prepare"),
                &WriteOpts::default(),
            )
            .expect("insert");
            docs.push(raw);
        }
        let specs: Vec<(Document, Vec<(&str, bool)>)> = vec![
            (doc! {"a": 1}, vec![("a", false)]),
            (doc! {"a": -1}, vec![("a", true)]),
            (doc! {"b": 1}, vec![("b", false)]),
            (doc! {"b": -1, "a": 1}, vec![("b", true), ("a", false)]),
            (doc! {"c.d": 1, "b": -1}, vec![("c.d", false), ("b", true)]),
            (doc! {"c.s": -1, "a": -1}, vec![("c.s", true), ("a", true)]),
            (doc! {"c": 1}, vec![("c", false)]),
        ];
        let collation_spec = doc! {"locale": "en", "strength": 2};
        let collation = nidus_doc::collation::Collation::parse(&collation_spec)
            .expect("collation")
            .expect("not simple");
        for (sort, fields) in &specs {
            for with_collation in [false, true] {
                let coll_ref = with_collation.then_some(&collation);
                let mut expected: Vec<(Vec<bson::RawBsonRef>, usize)> = docs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (reference_key(d, fields, coll_ref), i))
                    .collect();
                expected.sort_by(|(ka, _), (kb, _)| {
                    for ((x, y), (_, descending)) in ka.iter().zip(kb).zip(fields) {
                        let o = nidus_doc::compare::cmp_raw_with(*x, *y, coll_ref);
                        let o = if *descending { o.reverse() } else { o };
                        if o != std::cmp::Ordering::Equal {
                            return o;
                        }
                    }
                    std::cmp::Ordering::Equal
                });
                let expected: Vec<usize> = expected.into_iter().map(|(_, i)| i).collect();
                // No spill, one spill, many spills.
                for (memory, spills) in [
                    (None, 0..=0),
                    (Some(total_bytes * 3 / 5), 1..=1),
                    (Some(300), 20..=700),
                ] {
                    for limit in [0u64, 1, 37] {
                        let spec = FindSpec {
                            sort: Some(sort.clone()),
                            sort_memory_limit: memory,
                            allow_disk_use: true,
                            limit,
                            collation: with_collation.then(|| collation_spec.clone()),
                            ..FindSpec::default()
                        };
                        let mut exec = e.plan_find(Some(&coll), &spec).expect("plan");
                        let mut got = Vec::new();
                        while let Some(d) = exec.next_doc().expect("next") {
                            let id = d.get_i32("_id").expect("_id") as usize;
                            assert_eq!(d, docs[id], "the document comes back as stored");
                            got.push(id);
                        }
                        let want = if limit > 0 {
                            &expected[..limit as usize]
                        } else {
                            &expected[..]
                        };
                        let what = format!("sort {sort}, memory {memory:?}, limit {limit}, collation {with_collation}");
                        assert_eq!(got, want, "{what}");
                        let stats = sort_stats(&exec.root).expect("a SORT stage");
                        let n = stats.get_i64("spills").expect("spills");
                        // A top-k sort keeps only `limit` results in memory.
                        if limit == 0 || memory == Some(300) {
                            assert!(spills.contains(&n), "{what}: {n} spills");
                        }
                        assert_eq!(
                            stats.get_bool("usedDisk").expect("usedDisk"),
                            n > 0,
                            "{what}"
                        );
                    }
                }
            }
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
