//! The newest readable oplog entries, decoded once and shared by every change stream.
//!
//! A write on a collection that 1,000 streams watch wakes the 1,000 of them at once, and
//! each would otherwise read the same entries from storage and decode them itself. The
//! cache holds a contiguous run of entries (`from < ts <= through`: every entry in that
//! range, none missing), each decoded once with the data events built from it on first use
//! (`change_stream::CachedEntry`): a stream whose position is inside the run
//! takes its entries from it; one at its end (the usual case: the streams are caught up)
//! reads the new entries from storage under a fill lock, so the first stream to wake reads
//! and decodes them and the others find them in the cache. A stream far behind (resuming
//! from old history) reads storage without disturbing the run. The run only covers entries
//! at or below the majority-readable point the filling stream saw, which never move (the
//! oplog loses entries only past the majority point, in a rollback: [`Recent::reset`]).

use crate::pipeline::change_stream::CachedEntry;
use bson::Document;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Entries kept at most, and their stored bytes at most (older ones leave first). Decoded,
/// with their events built, an entry takes a few times its stored size; the entry a reader
/// is given stays alive with it after it leaves the run.
const MAX_ENTRIES: usize = 4096;
const MAX_BYTES: usize = 8 * 1024 * 1024;

/// One decoded entry: its `ts`, document and the change events built from it.
pub type Decoded = (u64, Arc<CachedEntry>);

#[derive(Default)]
struct Run {
    /// Every entry with `from < ts <= through` is in `entries`, in `ts` order.
    from: u64,
    through: u64,
    entries: VecDeque<(u64, Arc<CachedEntry>, usize)>,
    bytes: usize,
}

impl Run {
    /// Up to `limit` entries after `after` (which must be in `from..through`), at most
    /// `readable`; and the `ts` through which they are every entry there is.
    fn take(&self, after: u64, limit: usize, readable: u64) -> (Vec<Decoded>, u64) {
        let first = self.entries.partition_point(|(ts, _, _)| *ts <= after);
        let end = self.through.min(readable);
        let out: Vec<Decoded> = self
            .entries
            .range(first..)
            .take_while(|(ts, _, _)| *ts <= end)
            .take(limit)
            .map(|(ts, d, _)| (*ts, d.clone()))
            .collect();
        let through = match out.last() {
            Some((ts, _)) if out.len() == limit => *ts,
            _ => end,
        };
        (out, through)
    }

    fn push(&mut self, ts: u64, doc: Arc<CachedEntry>, size: usize) {
        self.entries.push_back((ts, doc, size));
        self.bytes += size;
        while self.entries.len() > MAX_ENTRIES || self.bytes > MAX_BYTES {
            let Some((ts, _, size)) = self.entries.pop_front() else {
                break;
            };
            self.from = ts;
            self.bytes -= size;
        }
    }
}

#[derive(Default)]
pub struct Recent {
    run: Mutex<Run>,
    /// Held while a stream at the end of the run reads the entries that extend it.
    fill: Mutex<()>,
}

/// Reads up to `limit` stored entries after a `ts` (as [`crate::oplog::Oplog::read_after`]):
/// their `ts`, document and stored size, oldest first.
pub type ReadFn<'a> =
    dyn FnMut(u64, usize) -> nidus_common::Result<Vec<(u64, Document, usize)>> + 'a;

impl Recent {
    pub fn new(last: u64) -> Recent {
        Recent {
            run: Mutex::new(Run {
                from: last,
                through: last,
                ..Run::default()
            }),
            fill: Mutex::new(()),
        }
    }

    /// Up to `limit` entries with `after < ts <= readable`, oldest first, and the `ts`
    /// through which they are every entry there is (the caller's next read starts after
    /// it). `read` reads storage when the run does not hold them.
    pub fn read_after(
        &self,
        after: u64,
        limit: usize,
        readable: u64,
        read: &mut ReadFn,
    ) -> nidus_common::Result<(Vec<Decoded>, u64)> {
        if after >= readable || limit == 0 {
            return Ok((Vec::new(), after));
        }
        {
            let run = self.run.lock();
            if run.from <= after && after < run.through {
                return Ok(run.take(after, limit, readable));
            }
            if after < run.from {
                drop(run);
                let (entries, through) = fresh(read(after, limit)?, after, limit, readable);
                return Ok((
                    entries.into_iter().map(|(ts, d, _)| (ts, d)).collect(),
                    through,
                ));
            }
        }
        // At (or past) the end of the run: one stream reads, the others wait for its
        // entries.
        let _fill = self.fill.lock();
        {
            let run = self.run.lock();
            if run.from <= after && after < run.through {
                return Ok(run.take(after, limit, readable));
            }
        }
        let (entries, through) = fresh(read(after, limit)?, after, limit, readable);
        let mut run = self.run.lock();
        if after > run.through {
            // A gap (the run was reset, or this reader is ahead of it): start over here.
            *run = Run {
                from: after,
                through: after,
                ..Run::default()
            };
        }
        if after == run.through {
            for (ts, doc, size) in &entries {
                run.push(*ts, doc.clone(), *size);
            }
            run.through = through;
        }
        Ok((
            entries.into_iter().map(|(ts, d, _)| (ts, d)).collect(),
            through,
        ))
    }

    /// Forgets every entry after `to` (a rollback truncated them; they are written again).
    pub fn reset(&self, to: u64) {
        let _fill = self.fill.lock();
        let mut run = self.run.lock();
        if run.through > to {
            *run = Run {
                from: to,
                through: to,
                ..Run::default()
            };
        }
    }
}

/// Entries read from storage, up to `readable`, and the `ts` through which they are every
/// entry there is: the last one's when `limit` cut the read short, else `readable` (the
/// read went up to the visibility point, which is at or past it).
fn fresh(
    read: Vec<(u64, Document, usize)>,
    after: u64,
    limit: usize,
    readable: u64,
) -> (Vec<(u64, Arc<CachedEntry>, usize)>, u64) {
    let full = read.len() >= limit;
    let out: Vec<(u64, Arc<CachedEntry>, usize)> = read
        .into_iter()
        .take_while(|(ts, _, _)| *ts <= readable)
        .map(|(ts, d, size)| (ts, Arc::new(CachedEntry::new(d)), size))
        .collect();
    let through = match out.last() {
        Some((ts, _, _)) if full && out.len() == limit => *ts,
        _ => readable.max(after),
    };
    (out, through)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use std::collections::BTreeMap;

    /// An oplog of `ts` -> entry; `read` returns what `Oplog::read_after` would, counting
    /// the storage reads.
    struct Fake {
        entries: BTreeMap<u64, Document>,
        reads: usize,
    }

    impl Fake {
        fn read(&mut self, after: u64, limit: usize) -> Vec<(u64, Document, usize)> {
            self.reads += 1;
            self.entries
                .range(after + 1..)
                .take(limit)
                .map(|(ts, d)| (*ts, d.clone(), 100))
                .collect()
        }

        /// What a reader must get: entries after `after` up to `readable`, at most `limit`.
        fn expected(&self, after: u64, limit: usize, readable: u64) -> Vec<u64> {
            if readable <= after {
                return Vec::new();
            }
            self.entries
                .range(after + 1..=readable)
                .take(limit)
                .map(|(ts, _)| *ts)
                .collect()
        }
    }

    fn read(
        cache: &Recent,
        fake: &mut Fake,
        after: u64,
        limit: usize,
        readable: u64,
    ) -> (Vec<u64>, u64) {
        let (got, through) = cache
            .read_after(after, limit, readable, &mut |a, l| Ok(fake.read(a, l)))
            .unwrap();
        for (ts, e) in &got {
            assert_eq!(e.doc.get_i64("ts").unwrap() as u64, *ts);
        }
        (got.into_iter().map(|(ts, _)| ts).collect(), through)
    }

    #[test]
    fn readers_get_exactly_the_entries_after_their_position() {
        // Entries at every third ts; readers at many positions, limits and readable points
        // (including before the run and inside it) get what storage holds, and `through`
        // never claims an entry they did not get.
        let mut fake = Fake {
            entries: (1..=300u64)
                .map(|i| (i * 3, doc! { "ts": (i * 3) as i64 }))
                .collect(),
            reads: 0,
        };
        let cache = Recent::new(0);
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut readable = 30;
        for _ in 0..2000 {
            readable = (readable + next(5)).min(900);
            let after = next(readable);
            let limit = 1 + next(20) as usize;
            let (got, through) = read(&cache, &mut fake, after, limit, readable);
            // Exactly the entries up to `through`, which moves forward (a reader never
            // stalls) and stays within what is readable.
            assert!(
                through > after && through <= readable,
                "after {after} readable {readable} through {through}"
            );
            assert_eq!(
                got,
                fake.expected(after, limit, through),
                "after {after} limit {limit} readable {readable} through {through}"
            );
            assert!(
                got.len() == limit || got.len() == fake.expected(after, usize::MAX, through).len()
            );
            // Read on from `through`, as a stream does, until caught up: everything readable.
            let mut all = got;
            let mut at = through;
            while at < readable {
                let (more, t) = read(&cache, &mut fake, at, limit, readable);
                assert!(t > at);
                all.extend(more);
                at = t;
            }
            assert_eq!(all, fake.expected(after, usize::MAX, readable));
        }
    }

    #[test]
    fn streams_at_the_end_share_one_storage_read() {
        let mut fake = Fake {
            entries: (1..=10u64)
                .map(|ts| (ts, doc! { "ts": ts as i64 }))
                .collect(),
            reads: 0,
        };
        let cache = Recent::new(0);
        for _ in 0..100 {
            assert_eq!(
                read(&cache, &mut fake, 0, 256, 10),
                ((1..=10).collect(), 10)
            );
        }
        assert_eq!(fake.reads, 1);
        // New entries: the first reader at the end reads them, the others share them.
        for ts in 11..=12u64 {
            fake.entries.insert(ts, doc! { "ts": ts as i64 });
        }
        for _ in 0..100 {
            assert_eq!(read(&cache, &mut fake, 10, 256, 12), (vec![11, 12], 12));
        }
        assert_eq!(fake.reads, 2);
        // A reader at the end with nothing new readable reads nothing.
        assert_eq!(read(&cache, &mut fake, 12, 256, 12), (vec![], 12));
        assert_eq!(fake.reads, 2);
    }

    #[test]
    fn a_reset_forgets_the_entries_after_it() {
        let mut fake = Fake {
            entries: (1..=10u64)
                .map(|ts| (ts, doc! { "ts": ts as i64, "v": 1 }))
                .collect(),
            reads: 0,
        };
        let cache = Recent::new(0);
        read(&cache, &mut fake, 0, 256, 10);
        // A rollback truncates after 5 and the entries are written again differently.
        cache.reset(5);
        for ts in 6..=10u64 {
            fake.entries.insert(ts, doc! { "ts": ts as i64, "v": 2 });
        }
        let (got, _) = cache
            .read_after(5, 256, 10, &mut |a, l| Ok(fake.read(a, l)))
            .unwrap();
        assert!(got.iter().all(|(_, e)| e.doc.get_i32("v") == Ok(2)));
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn the_run_keeps_at_most_its_bound() {
        let mut fake = Fake {
            entries: (1..=(MAX_ENTRIES as u64 + 100))
                .map(|ts| (ts, doc! { "ts": ts as i64 }))
                .collect(),
            reads: 0,
        };
        let cache = Recent::new(0);
        let mut after = 0;
        loop {
            let (got, through) = read(&cache, &mut fake, after, 256, MAX_ENTRIES as u64 + 100);
            if got.is_empty() {
                break;
            }
            after = through;
        }
        let run = cache.run.lock();
        assert_eq!(run.entries.len(), MAX_ENTRIES);
        assert_eq!(run.from, 100);
        drop(run);
        // Older entries come from storage again, and correctly.
        let reads = fake.reads;
        assert_eq!(read(&cache, &mut fake, 10, 3, 50).0, vec![11, 12, 13]);
        assert_eq!(fake.reads, reads + 1);
    }
}
