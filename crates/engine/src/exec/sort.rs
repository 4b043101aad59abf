use super::spill::SpillRun;
use super::{check_deadline, Member, Stage, StageImpl, StageState};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::sort::SortPattern;
use std::cmp::Ordering;
use std::path::PathBuf;
use std::time::Instant;

/// MongoDB's `internalQueryMaxBlockingSortMemoryUsageBytes` default.
pub const MAX_SORT_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// How much memory a SORT may hold, and where it spills beyond that (`allowDiskUse`; None:
/// going over the limit fails the query).
#[derive(Debug, Clone)]
pub struct SortLimits {
    pub max_memory: usize,
    pub spill_dir: Option<PathBuf>,
    /// How many threads may read a SORT's input when it may spill (a collection scan splits
    /// into RecordId ranges); 0 or 1: the command's thread alone, as explain runs.
    pub parallelism: usize,
    /// The plan's deadline, which the threads of a parallel SORT check (the executor checks
    /// it between works; a root SORT hears each `getMore`'s through `set_deadline`).
    pub deadline: Option<Instant>,
}

impl Default for SortLimits {
    fn default() -> Self {
        SortLimits {
            max_memory: MAX_SORT_MEMORY_BYTES,
            spill_dir: None,
            parallelism: 1,
            deadline: None,
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

/// What orders a SORT's results and bounds what it holds.
struct Order {
    pattern: SortPattern,
    limit: u64,
    limits: SortLimits,
}

impl Order {
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
}

/// What a SORT, or one part of a parallel SORT, took in: the results it holds, the runs it
/// spilled (in input order), and explain's counters.
#[derive(Default)]
struct Intake {
    buffered: Vec<Item>,
    memory: usize,
    data_size_sorted: usize,
    seq: u64,
    runs: Vec<SpillRun>,
    spills: i64,
    spilled_bytes: u64,
}

impl Intake {
    /// Takes `m` in, spilling what it holds once that passes `budget` bytes.
    fn add(&mut self, order: &Order, m: Member, budget: usize) -> Result<()> {
        let doc = m.doc()?;
        let key = sort_key(&order.pattern, doc);
        let size = doc.as_bytes().len();
        self.memory += size;
        self.data_size_sorted += size;
        self.buffered.push((key, self.seq, m));
        self.seq += 1;
        if order.limit > 0 && self.buffered.len() as u64 >= order.limit.saturating_mul(2).max(64) {
            self.truncate_to_limit(order);
        }
        if self.memory > budget {
            self.spill(order)?;
        }
        Ok(())
    }

    /// Writes what is buffered to disk as one sorted run, or fails without `allowDiskUse`.
    fn spill(&mut self, order: &Order) -> Result<()> {
        let Some(dir) = &order.limits.spill_dir else {
            return Err(Error::new(
                ErrorCode::QueryExceededMemoryLimitNoDiskUseAllowed,
                format!(
                    "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                    order.limits.max_memory
                ),
            ));
        };
        let items = std::mem::take(&mut self.buffered);
        let sorted = order.sorted_order(&items);
        // Every buffered result has its document (`add` required it). Byte keys go with
        // their records; value keys (a collation's) are computed again when merging.
        let records = sorted.iter().filter_map(|&i| {
            let (key, _, m) = &items[i];
            let key: &[u8] = match key {
                SortKey::Bytes(b) => b,
                SortKey::Values(_) => &[],
            };
            m.doc.as_ref().map(|d| (m.rid, key, d))
        });
        let run = SpillRun::write(dir, records)?;
        self.spilled_bytes += run.bytes;
        self.spills += 1;
        self.runs.push(run);
        self.memory = 0;
        Ok(())
    }

    /// Keeps the best `limit` entries so memory stays proportional to the limit.
    fn truncate_to_limit(&mut self, order: &Order) {
        let buffered = std::mem::take(&mut self.buffered);
        let items = order.in_sort_order(buffered);
        self.memory = items
            .iter()
            .map(|i| i.2.doc.as_ref().map_or(0, |d| d.as_bytes().len()))
            .sum();
        self.buffered = items;
    }

    /// What was taken in as sorted sources in input order: the runs, then what stayed in
    /// memory, sorted. The counters stay.
    fn take_sources(&mut self, order: &Order) -> Vec<Source> {
        let items = order.in_sort_order(std::mem::take(&mut self.buffered));
        let mut sources: Vec<Source> = self.runs.drain(..).map(Source::Run).collect();
        sources.push(Source::Memory(items.into_iter()));
        sources
    }

    /// Reads `input` to its end (a part of a parallel SORT, on a thread of its own), each
    /// part within its share of the memory limit, and sorts what stayed in memory: the
    /// part's counters and sources.
    fn consume(
        order: &Order,
        input: &mut Stage,
        budget: usize,
        deadline: Option<Instant>,
    ) -> Result<(Intake, Vec<Source>)> {
        let mut intake = Intake::default();
        loop {
            if input.common.works.is_multiple_of(128) {
                check_deadline(deadline)?;
            }
            match input.work()? {
                StageState::Advanced(m) => intake.add(order, m, budget)?,
                StageState::NeedTime => {}
                StageState::IsEof => break,
            }
        }
        let sources = intake.take_sources(order);
        Ok((intake, sources))
    }

    /// Adds a later part's counters.
    fn count(&mut self, part: &Intake) {
        self.data_size_sorted += part.data_size_sorted;
        self.spills += part.spills;
        self.spilled_bytes += part.spilled_bytes;
    }
}

/// `SORT`: consumes its child, then returns results in sort order. With a limit it keeps only
/// the best `limit` results (top-k), as MongoDB's SORT with `limitAmount` does. Over its
/// memory limit it writes sorted runs to disk when allowed and merges them at the end. When
/// it may spill and its child is a scan that splits, the parts are read and sorted by
/// threads of their own (see [`Sort::consume_parts`]).
pub struct Sort {
    child: Box<Stage>,
    order: Order,
    pattern_doc: Document,
    intake: Intake,
    started: bool,
    output: Option<Output>,
    returned: u64,
}

/// The sorted results: from memory, or merged from sorted sources (runs on disk and what
/// stayed in memory), here or ahead on a thread of its own.
enum Output {
    Memory(std::vec::IntoIter<Item>),
    Merge(Merge),
    Ahead(MergeAhead),
}

/// Results per chunk a [`MergeAhead`] hands over, and the most bytes of documents per chunk.
const AHEAD_CHUNK: usize = 1024;
const AHEAD_CHUNK_BYTES: usize = 1024 * 1024;
/// Chunks that may wait: the merge runs at most this far ahead of the reader (16 MiB).
const AHEAD_CHUNKS: usize = 16;

/// A merge that runs on a thread of its own while the cursor's reader is busy elsewhere (the
/// client reading the previous batch), handing over chunks of results in order through a
/// bounded channel, then its error if it fails. Its results are the merge's: the sources
/// are files and memory the SORT owns, read by no one else. Dropping it (the cursor closed)
/// disconnects the channel, which stops the thread, and joins it.
struct MergeAhead {
    rx: Option<std::sync::mpsc::Receiver<Result<Vec<Member>>>>,
    chunk: std::vec::IntoIter<Member>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MergeAhead {
    fn start(mut merge: Merge, pattern: SortPattern) -> Result<MergeAhead> {
        let (tx, rx) = std::sync::mpsc::sync_channel(AHEAD_CHUNKS);
        let thread = std::thread::Builder::new()
            .name("sort-merge".into())
            .spawn(move || loop {
                let mut chunk = Vec::with_capacity(AHEAD_CHUNK);
                let mut bytes = 0;
                let end = loop {
                    match merge.next(&pattern) {
                        Ok(Some(m)) => {
                            bytes += m.doc.as_ref().map_or(0, |d| d.as_bytes().len());
                            chunk.push(m);
                            if chunk.len() == AHEAD_CHUNK || bytes >= AHEAD_CHUNK_BYTES {
                                break None;
                            }
                        }
                        Ok(None) => break Some(Ok(())),
                        Err(e) => break Some(Err(e)),
                    }
                };
                if !chunk.is_empty() && tx.send(Ok(chunk)).is_err() {
                    return;
                }
                match end {
                    None => {}
                    Some(Ok(())) => return,
                    Some(Err(e)) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            })
            .map_err(|e| Error::internal(format!("starting a SORT thread: {e}")))?;
        Ok(MergeAhead {
            rx: Some(rx),
            chunk: Vec::new().into_iter(),
            thread: Some(thread),
        })
    }

    fn next(&mut self) -> Result<Option<Member>> {
        loop {
            if let Some(m) = self.chunk.next() {
                return Ok(Some(m));
            }
            let Some(rx) = &self.rx else {
                return Ok(None);
            };
            match rx.recv() {
                Ok(Ok(chunk)) => self.chunk = chunk.into_iter(),
                Ok(Err(e)) => {
                    self.rx = None;
                    return Err(e);
                }
                // The thread finished and dropped its end.
                Err(_) => self.rx = None,
            }
        }
    }
}

impl Drop for MergeAhead {
    fn drop(&mut self) {
        self.rx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A sorted source of a merge.
enum Source {
    Run(SpillRun),
    Memory(std::vec::IntoIter<Item>),
}

/// One waiting result per source; the smallest goes first, ties to the earlier source. The
/// sources are in input order (a part's runs, then what it held in memory, then the next
/// part's), so ties keep input order.
struct Merge {
    sources: Vec<Source>,
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
            order: Order {
                pattern,
                limit,
                limits,
            },
            pattern_doc,
            intake: Intake::default(),
            started: false,
            output: None,
            returned: 0,
        }
    }

    /// The child split for a parallel sort, if it may spill (so no part's share of the
    /// memory limit fails what one thread would finish) and the child splits.
    fn parallel_parts(&mut self) -> Option<Vec<Stage>> {
        let limits = &self.order.limits;
        if limits.parallelism < 2 || limits.spill_dir.is_none() {
            return None;
        }
        self.child.split(limits.parallelism)
    }

    /// Reads and sorts each part on a thread of its own (the first on this one), each within
    /// an equal share of the memory limit, then merges the parts' runs and remainders in
    /// part order, which is input order, so the result is the one thread's. The first
    /// part's error in input order is the error.
    fn consume_parts(&mut self, parts: Vec<Stage>) -> Result<()> {
        let order = &self.order;
        let budget = order.limits.max_memory / parts.len();
        let deadline = order.limits.deadline;
        let results = crate::opctx::run_parts("sort-part", parts, |mut part| {
            Intake::consume(order, &mut part, budget, deadline).map(|taken| (taken, part))
        });
        let mut sources = Vec::new();
        for result in results {
            let ((part, part_sources), stage) = result?;
            self.child.common.absorb_part(&stage.common);
            self.intake.count(&part);
            sources.extend(part_sources);
        }
        self.output = Some(self.merged(sources)?);
        Ok(())
    }

    /// The output merging `sources`: ahead on a thread of its own where the SORT may use
    /// more threads and returns every result (not a top-k's few), else here.
    fn merged(&self, sources: Vec<Source>) -> Result<Output> {
        let merge = Merge::new(sources, &self.order.pattern)?;
        Ok(
            if self.order.limits.parallelism > 1 && self.order.limit == 0 {
                Output::Ahead(MergeAhead::start(merge, self.order.pattern.clone())?)
            } else {
                Output::Merge(merge)
            },
        )
    }

    /// The child is done: sort what is in memory and, if runs were spilled, merge with them.
    fn finish_input(&mut self) -> Result<()> {
        self.output = Some(if self.intake.runs.is_empty() {
            let buffered = std::mem::take(&mut self.intake.buffered);
            Output::Memory(self.order.in_sort_order(buffered).into_iter())
        } else {
            let sources = self.intake.take_sources(&self.order);
            self.merged(sources)?
        });
        Ok(())
    }
}

impl Merge {
    fn new(sources: Vec<Source>, pattern: &SortPattern) -> Result<Merge> {
        let mut merge = Merge {
            heads: Vec::with_capacity(sources.len()),
            sources,
        };
        for source in 0..merge.sources.len() {
            let head = merge.pull(source, pattern)?;
            merge.heads.push(head);
        }
        Ok(merge)
    }

    /// The next result of `source`.
    fn pull(&mut self, source: usize, pattern: &SortPattern) -> Result<Option<(SortKey, Member)>> {
        match &mut self.sources[source] {
            Source::Run(run) => {
                let mut key = Vec::new();
                Ok(run.next_keyed(&mut key)?.map(|(rid, doc)| {
                    let key = if pattern.collation.is_some() {
                        sort_key(pattern, &doc)
                    } else {
                        SortKey::Bytes(key)
                    };
                    (key, Member::with_doc(rid, doc))
                }))
            }
            Source::Memory(items) => Ok(items.next().map(|(key, _, m)| (key, m))),
        }
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
            if self.order.limit > 0 && self.returned >= self.order.limit {
                return Ok(StageState::IsEof);
            }
            let next = match out {
                Output::Memory(it) => it.next().map(|(_, _, m)| m),
                Output::Merge(merge) => merge.next(&self.order.pattern)?,
                Output::Ahead(ahead) => ahead.next()?,
            };
            return Ok(match next {
                Some(m) => {
                    self.returned += 1;
                    StageState::Advanced(m)
                }
                None => StageState::IsEof,
            });
        }
        if !self.started {
            self.started = true;
            if let Some(parts) = self.parallel_parts() {
                self.consume_parts(parts)?;
                return Ok(StageState::NeedTime);
            }
        }
        match self.child.work()? {
            StageState::Advanced(m) => {
                let budget = self.order.limits.max_memory;
                self.intake.add(&self.order, m, budget)?;
                Ok(StageState::NeedTime)
            }
            StageState::NeedTime => Ok(StageState::NeedTime),
            StageState::IsEof => {
                self.finish_input()?;
                Ok(StageState::NeedTime)
            }
        }
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.order.limits.deadline = deadline;
    }

    fn specific_stats(&self) -> Document {
        let limits = &self.order.limits;
        let intake = &self.intake;
        let mut d = Document::new();
        d.insert("sortPattern", self.pattern_doc.clone());
        d.insert("memLimit", limits.max_memory as i64);
        if self.order.limit > 0 {
            d.insert("limitAmount", self.order.limit as i64);
        }
        d.insert("type", "simple");
        d.insert("totalDataSizeSorted", intake.data_size_sorted as i64);
        d.insert("usedDisk", intake.spills > 0);
        d.insert("spills", intake.spills);
        d.insert("spilledDataStorageSize", intake.spilled_bytes as i64);
        d
    }

    fn children(&self) -> Vec<&Stage> {
        vec![&self.child]
    }
}

#[cfg(test)]
mod tests {
    //! SORT's byte keys against the pattern's value comparison, in memory and spilled.

    use crate::catalog::CollectionRef;
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

    /// An engine in a temporary directory with an empty collection `test.<name>`.
    fn collection(name: &str) -> (tempfile::TempDir, Arc<Engine>, CollectionRef) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Arc::new(RocksEngine::open(dir.path()).expect("rocks"));
        let e = Engine::open(kv).expect("engine");
        let coll = e
            .ensure_collection(&Namespace::new("test", name))
            .expect("collection");
        (dir, e, coll)
    }

    /// Inserts `docs`, a thousand per storage batch.
    fn insert_all(e: &Engine, coll: &CollectionRef, docs: impl Iterator<Item = Document>) {
        let opts = WriteOpts::default();
        let prepared: Vec<RawDocumentBuf> = docs
            .map(|d| {
                prepare_insert(&nidus_common::encode::document_to_raw(&d).expect("raw"))
                    .expect("prepare")
            })
            .collect();
        for chunk in prepared.chunks(1000) {
            let batch: Vec<_> = chunk.iter().map(|r| (r.as_ref(), &opts)).collect();
            e.insert_batch(coll, &batch).expect("insert");
        }
    }

    /// The first stage named `name` in the plan under `stage`.
    fn find_stage<'a>(stage: &'a crate::exec::Stage, name: &str) -> Option<&'a crate::exec::Stage> {
        if stage.name() == name {
            return Some(stage);
        }
        stage
            .children()
            .into_iter()
            .find_map(|c| find_stage(c, name))
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
        let (_dir, e, coll) = collection("diff");
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
            let raw = nidus_common::encode::document_to_raw(&d).expect("raw");
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
                        let stats = find_stage(&exec.root, "SORT")
                            .expect("a SORT stage")
                            .specific_stats();
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
        let (_dir, e, coll) = collection("s");
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
            let raw = nidus_common::encode::document_to_raw(d).expect("raw");
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
                    let raw = nidus_common::encode::document_to_raw(d).expect("raw");
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

    /// Differential: a SORT whose collection scan splits into parts sorted by threads of
    /// their own returns what one thread returns (ties in input order, spilled or not, top-k,
    /// with a collation, over a filtered scan), and counts the same documents examined.
    #[test]
    fn parallel_sorts_return_what_one_thread_returns() {
        let (_dir, e, coll) = collection("par");
        const N: u64 = 50_000;
        let mut x = 0x1234_5678_9ABC_DEF1u64;
        let docs = (0..N).map(|id| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut d = doc! {"_id": id as i64, "b": (x % 5) as i32};
            if !x.is_multiple_of(17) {
                d.insert("a", value(x >> 8));
            }
            d.insert("s", ["x", "X", "y", "ä"][(x >> 40) as usize % 4]);
            d
        });
        insert_all(&e, &coll, docs);
        let collation = doc! {"locale": "en", "strength": 2};
        let cases: Vec<(Document, Document, bool)> = vec![
            (doc! {"a": 1}, doc! {}, false),
            (doc! {"a": -1}, doc! {}, false),
            (doc! {"b": 1}, doc! {}, false),
            (doc! {"b": -1, "a": 1}, doc! {"b": {"$gte": 1}}, false),
            (doc! {"s": 1}, doc! {}, true),
            (doc! {"s": -1, "b": 1}, doc! {"a": {"$exists": true}}, true),
        ];
        for (sort, filter, with_collation) in &cases {
            for memory in [None, Some(512 * 1024)] {
                for limit in [0u64, 37] {
                    let run = |parallelism: usize| {
                        let spec = FindSpec {
                            filter: filter.clone(),
                            sort: Some(sort.clone()),
                            sort_memory_limit: memory,
                            allow_disk_use: true,
                            limit,
                            parallelism,
                            collation: with_collation.then(|| collation.clone()),
                            ..FindSpec::default()
                        };
                        let mut exec = e.plan_find(Some(&coll), &spec).expect("plan");
                        let mut got = Vec::new();
                        while let Some(d) = exec.next_doc().expect("next") {
                            got.push(d.get_i64("_id").expect("_id"));
                        }
                        let sort_works = find_stage(&exec.root, "SORT").expect("SORT").common.works;
                        (got, exec.root.total("docsExamined"), sort_works)
                    };
                    let what =
                        format!("sort {sort}, filter {filter}, memory {memory:?}, limit {limit}");
                    let (want, examined, serial_works) = run(1);
                    let (got, par_examined, par_works) = run(4);
                    assert_eq!(got.len(), want.len(), "{what}");
                    assert!(
                        got == want,
                        "{what}: the parallel order is the one thread's"
                    );
                    assert_eq!(par_examined, N as i64, "{what}");
                    assert_eq!(examined, N as i64, "{what}");
                    // One thread's SORT works once per input result (and once per output
                    // result); the parallel SORT takes all of its input in one work.
                    assert!(
                        par_works + N / 2 < serial_works,
                        "{what}: the SORT ran in parallel ({par_works} works, one thread {serial_works})"
                    );
                }
            }
        }
    }

    /// A parallel SORT's merge runs ahead on a thread of its own: a cursor closed after a few
    /// results (the thread blocked on its full channel) stops and joins it.
    #[test]
    fn a_sort_closed_early_stops_its_merge() {
        let (_dir, e, coll) = collection("early");
        insert_all(
            &e,
            &coll,
            (0..60_000i64).map(|i| doc! {"_id": i, "k": (i * 7919) % 60_000}),
        );
        for memory in [None, Some(256 * 1024)] {
            let spec = FindSpec {
                sort: Some(doc! {"k": -1}),
                sort_memory_limit: memory,
                allow_disk_use: true,
                parallelism: 2,
                ..FindSpec::default()
            };
            let mut exec = e.plan_find(Some(&coll), &spec).expect("plan");
            for want in (60_000 - 5..60_000).rev() {
                let d = exec.next_doc().expect("next").expect("a result");
                assert_eq!(d.get_i64("k").expect("k"), want, "memory {memory:?}");
            }
            // Let the merge fill its channel, then close the cursor.
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(exec);
        }
    }
}
