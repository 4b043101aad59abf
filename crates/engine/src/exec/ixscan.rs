use super::{KeyData, Member, RecordIdDedup, StageImpl, StageState};
use crate::catalog::IndexMeta;
use crate::index;
use crate::plan::bounds::{BoundsChecker, CheckResult, IndexBounds, KeyRange, SeekTarget};
use crate::txn::ReadSource;
use bson::{Bson, Document};
use nidus_common::Result;
use nidus_storage::{keys, KvCursor, KvRead, KvSnapshot, Space};
use std::collections::VecDeque;
use std::sync::Arc;

/// Keys read per storage snapshot at most; the first batch is small so `limit` queries read
/// little ahead, later batches grow.
const FIRST_BATCH: usize = 16;
const MAX_BATCH: usize = 512;

/// What decides whether a key is in the scan: per-field interval bounds, or a whole-key range
/// (`min`/`max`).
enum Checker {
    Bounds(BoundsChecker),
    Range(KeyRange),
}

/// What the scan did with one key (or with the end of the index).
struct Event {
    /// The entry, when the key is inside the bounds.
    entry: Option<(u64, Vec<Bson>)>,
    /// A key was read (false only when the index ran out).
    examined: bool,
    /// A seek positioned the cursor before this key was read.
    seeked: bool,
    /// No later key can match.
    end: bool,
}

/// Where the next batch starts.
enum Resume {
    Start,
    Seek(SeekTarget),
    After(Vec<u8>),
}

/// `IXSCAN`: index keys inside the bounds, in index order (or reversed), each work examining
/// one key as MongoDB's IndexScan does: keys outside the bounds make the scan seek to the next
/// interval (`seeks`) and return NEED_TIME. Multikey indexes drop repeated record ids.
pub struct IndexScan {
    src: ReadSource,
    index: IndexMeta,
    forward: bool,
    checker: Checker,
    /// Per field: descending in the index.
    directions: Vec<bool>,
    /// The key pattern's paths, shared by every key the scan returns.
    paths: Arc<[String]>,
    /// DISTINCT_SCAN: after a key, skip every key sharing its values up to this field.
    distinct_field: Option<usize>,
    events: VecDeque<Event>,
    resume: Option<Resume>,
    batch: usize,
    snapshot: Option<Arc<dyn KvSnapshot>>,
    /// Multikey indexes hold several keys per document: each is returned once.
    dedup: Option<RecordIdDedup>,
    /// The key past the end of a single-interval scan is not examined (MongoDB stops at the
    /// end key in the storage cursor).
    single_interval: bool,
    done: bool,
    keys_examined: i64,
    seeks: i64,
}

impl IndexScan {
    /// `bounds` are in index order; a backward scan reverses them.
    pub fn new(src: ReadSource, index: IndexMeta, bounds: IndexBounds, forward: bool) -> Self {
        let directions: Vec<bool> = index.pattern.iter().map(|(_, d)| *d).collect();
        let paths = index.pattern.iter().map(|(p, _)| p.clone()).collect();
        // A field runs descending in scan order when it is descending XOR the scan is backward.
        let scan_desc = directions.iter().map(|d| *d == forward).collect();
        let bounds = if forward { bounds } else { bounds.reversed() };
        let empty = bounds.is_empty();
        let single_interval = bounds.is_single_interval();
        let multikey = index.is_multikey();
        IndexScan {
            src,
            index,
            forward,
            checker: Checker::Bounds(BoundsChecker::new(bounds, scan_desc)),
            directions,
            paths,
            distinct_field: None,
            events: VecDeque::new(),
            resume: (!empty).then_some(Resume::Start),
            batch: FIRST_BATCH,
            snapshot: None,
            dedup: multikey.then(RecordIdDedup::default),
            single_interval,
            done: empty,
            keys_examined: 0,
            seeks: 0,
        }
    }

    /// A forward scan of the keys in `range` (a `min`/`max` query).
    pub fn new_range(src: ReadSource, index: IndexMeta, range: KeyRange) -> Self {
        // No per-field bounds: a single interval, from the range's start key to its end key.
        let mut scan = IndexScan::new(src, index, IndexBounds { fields: Vec::new() }, true);
        scan.checker = Checker::Range(range);
        scan
    }

    /// Returns one key per distinct value of the fields up to `field` (DISTINCT_SCAN).
    pub fn distinct_on(mut self, field: usize) -> Self {
        self.distinct_field = Some(field);
        self
    }

    pub fn index(&self) -> &IndexMeta {
        &self.index
    }

    /// Byte key of a seek target, and whether the cursor lands at the target's first key
    /// (`seek`) or must pass all keys sharing it.
    fn seek_bytes(&self, t: &SeekTarget) -> Result<Vec<u8>> {
        let parts: Vec<(&Bson, bool)> = t
            .values
            .iter()
            .zip(self.directions.iter().copied())
            .collect();
        let (ks, _) = nidus_doc::keystring::encode_key_bson(&parts)?;
        let mut k = keys::u64_be(self.index.id).to_vec();
        k.extend_from_slice(&ks);
        Ok(k)
    }

    fn position(&mut self, c: &mut dyn KvCursor, t: &SeekTarget) -> Result<()> {
        let p = self.seek_bytes(t)?;
        // In scan order, "inclusive" means the first key with prefix `p`.
        match (self.forward, t.inclusive) {
            (true, true) => c.seek(&p),
            (true, false) => seek_past(c, &p),
            (false, true) => {
                seek_past_backward(c, &p);
            }
            (false, false) => seek_before_backward(c, &p),
        }
        Ok(())
    }

    fn refill(&mut self) -> Result<()> {
        let Some(resume) = self.resume.take() else {
            return Ok(());
        };
        let src = self.src.clone();
        let snap = src.view()?;
        let lower = keys::u64_be(self.index.id);
        let upper = keys::prefix_end(self.index.id);
        let mut c = snap.cursor(Space::Indexes, &lower, &upper);
        let mut seeked = true;
        match resume {
            Resume::Start => {
                let t = match &self.checker {
                    Checker::Bounds(b) => b.start(),
                    Checker::Range(r) => r.start(),
                };
                self.position(c.as_mut(), &t)?;
            }
            Resume::Seek(t) => self.position(c.as_mut(), &t)?,
            Resume::After(last) => {
                seeked = false;
                if self.forward {
                    c.seek(&last);
                    if c.valid() && c.key() == last.as_slice() {
                        c.next();
                    }
                } else {
                    c.seek_for_prev(&last);
                    if c.valid() && c.key() == last.as_slice() {
                        c.prev();
                    }
                }
            }
        }
        let mut produced = 0;
        loop {
            if !c.valid() {
                c.status()?;
                self.events.push_back(Event {
                    entry: None,
                    examined: false,
                    seeked,
                    end: true,
                });
                break;
            }
            let key = c.key();
            let ks = &key[8..];
            let (rid, type_bits) = if self.index.unique {
                (keys::read_u64(c.value()), c.value().get(8..).unwrap_or(&[]))
            } else {
                (
                    index::entry_record_id(&self.index, key, c.value()),
                    c.value(),
                )
            };
            let values = nidus_doc::keystring::decode_key(ks, type_bits, &self.directions)?;
            let rid = rid.unwrap_or(0);
            let checked = match &mut self.checker {
                Checker::Bounds(b) => b.check(&values),
                Checker::Range(r) => r.check(&values, &self.directions),
            };
            match checked {
                CheckResult::Valid => {
                    let skip_to =
                        self.distinct_field
                            .and_then(|f| values.get(..=f))
                            .map(|prefix| SeekTarget {
                                values: prefix.to_vec(),
                                inclusive: false,
                            });
                    self.events.push_back(Event {
                        entry: Some((rid, values)),
                        examined: true,
                        seeked,
                        end: false,
                    });
                    produced += 1;
                    if let Some(t) = skip_to {
                        if produced >= self.batch {
                            self.resume = Some(Resume::Seek(t));
                            break;
                        }
                        self.position(c.as_mut(), &t)?;
                        seeked = true;
                        continue;
                    }
                    if produced >= self.batch {
                        self.resume = Some(Resume::After(key.to_vec()));
                        break;
                    }
                    if self.forward {
                        c.next();
                    } else {
                        c.prev();
                    }
                    seeked = false;
                }
                CheckResult::Seek(t) if !self.single_interval => {
                    self.events.push_back(Event {
                        entry: None,
                        examined: true,
                        seeked,
                        end: false,
                    });
                    produced += 1;
                    if produced >= self.batch {
                        self.resume = Some(Resume::Seek(t));
                        break;
                    }
                    self.position(c.as_mut(), &t)?;
                    seeked = true;
                }
                // A single-interval scan runs from its start key to its end key, so any key
                // outside the bounds is past the end, which MongoDB's cursor never shows it.
                CheckResult::Seek(_) | CheckResult::Done => {
                    self.events.push_back(Event {
                        entry: None,
                        examined: !self.single_interval,
                        seeked,
                        end: true,
                    });
                    break;
                }
            }
        }
        drop(c);
        self.snapshot = snap.shared_snapshot();
        self.batch = (self.batch * 2).min(MAX_BATCH);
        Ok(())
    }
}

/// Positions at the first key after every key starting with `p`.
fn seek_past(c: &mut dyn KvCursor, p: &[u8]) {
    match prefix_successor(p) {
        Some(s) => c.seek(&s),
        None => {
            c.seek_to_last();
            c.next();
        }
    }
}

/// Positions (backward) at the last key starting with `p`, or the last key before them.
fn seek_past_backward(c: &mut dyn KvCursor, p: &[u8]) {
    match prefix_successor(p) {
        Some(s) => {
            c.seek_for_prev(&s);
            if c.valid() && c.key() >= s.as_slice() {
                c.prev();
            }
        }
        None => c.seek_to_last(),
    }
}

/// Positions (backward) at the last key before every key starting with `p`. A key equal to
/// `p` itself is one of them: a unique index's entry has no record id after its keystring,
/// so a seek target holding every field of the key is the whole entry key.
fn seek_before_backward(c: &mut dyn KvCursor, p: &[u8]) {
    c.seek_for_prev(p);
    if c.valid() && c.key().starts_with(p) {
        c.prev();
    }
}

/// The smallest byte string greater than every string starting with `p`.
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

impl StageImpl for IndexScan {
    fn name(&self) -> &'static str {
        "IXSCAN"
    }

    fn work(&mut self) -> Result<StageState> {
        if self.done {
            return Ok(StageState::IsEof);
        }
        if self.events.is_empty() {
            self.refill()?;
        }
        let Some(ev) = self.events.pop_front() else {
            self.done = true;
            return Ok(StageState::IsEof);
        };
        self.keys_examined += i64::from(ev.examined);
        self.seeks += i64::from(ev.seeked);
        if ev.end {
            self.done = true;
            return Ok(StageState::IsEof);
        }
        let Some((rid, values)) = ev.entry else {
            return Ok(StageState::NeedTime);
        };
        if let Some(dedup) = &mut self.dedup {
            if !dedup.first_time(rid) {
                return Ok(StageState::NeedTime);
            }
        }
        Ok(StageState::Advanced(Member {
            rid: Some(rid),
            doc: None,
            key: Some(KeyData {
                paths: self.paths.clone(),
                values,
            }),
            snapshot: self.snapshot.clone(),
            text_score: None,
        }))
    }

    fn specific_stats(&self) -> Document {
        let mut d = self.index.explain_fields();
        d.insert(
            "direction",
            if self.forward { "forward" } else { "backward" },
        );
        let bounds = match &self.checker {
            Checker::Bounds(b) => b.bounds().to_document(),
            Checker::Range(_) => Document::new(),
        };
        d.insert("indexBounds", bounds);
        d.insert("keysExamined", self.keys_examined);
        d.insert("seeks", self.seeks);
        self.dedup
            .as_ref()
            .unwrap_or(&RecordIdDedup::default())
            .add_stats(&mut d);
        d
    }
}
