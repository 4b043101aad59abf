//! Change-stream wake-ups by namespace, so that a write wakes only the streams that may
//! have an event for it (a stream on another collection sleeps on), and a stream whose
//! scope had no entry since its position skips reading the oplog.
//!
//! Every entry put into the oplog is first noted with what it touches ([`Touch`]): a
//! collection for `i`/`u`/`d`, everything for commands and `applyOps`, nothing for no-ops.
//! When entries become readable by change streams (the visibility point, bounded by the
//! majority commit point, passes them), [`Announcer::announce`] moves the notes of the
//! newly readable entries to the [`Channel`] of each scope they touch: it records the
//! entry's `ts` as the channel's `last_ts` and wakes its waiters. `announced_through` is
//! stored after the channels', so a reader that loads it and then finds `last_ts` at or
//! below its own position knows no readable entry up to `announced_through` is in scope.

use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Notes kept for entries not yet readable; past this many, they collapse into one
/// [`Touch::All`] at the newest (every stream then reads, as without notes).
const MAX_PENDING: usize = 100_000;

/// What one oplog entry may hold events for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Touch {
    /// A data change to `db.coll`.
    Collection { db: String, coll: String },
    /// Anything (commands, transactions).
    All,
}

impl Touch {
    /// The touch of an entry with `op` on `ns`; `None` for a no-op.
    pub fn of(op: &str, ns: &str) -> Option<Touch> {
        match op {
            "n" => None,
            "i" | "u" | "d" => Some(match ns.split_once('.') {
                Some((db, coll)) => Touch::Collection {
                    db: db.to_string(),
                    coll: coll.to_string(),
                },
                None => Touch::All,
            }),
            _ => Some(Touch::All),
        }
    }
}

/// The key of a stream's scope: `c:<db>.<coll>`, `d:<db>` or `*`.
pub fn collection_key(db: &str, coll: &str) -> String {
    format!("c:{db}.{coll}")
}

pub fn database_key(db: &str) -> String {
    format!("d:{db}")
}

pub const CLUSTER_KEY: &str = "*";

/// The wake-up channel of one scope, shared by the streams watching it. Threads wait on its
/// condition variable; async tasks register a waker (see [`Channel::changed`]).
#[derive(Debug)]
pub struct Channel {
    generation: Mutex<Generation>,
    cv: Condvar,
    /// The newest announced entry that touches this scope.
    last_ts: AtomicU64,
}

/// The generation and the async waiters, under one lock so no wake-up is lost between a
/// waiter's check and its registration.
#[derive(Debug, Default)]
struct Generation {
    value: u64,
    wakers: Vec<Waker>,
}

impl Channel {
    pub fn generation(&self) -> u64 {
        self.generation.lock().value
    }

    /// Blocks until an entry for this scope is announced after generation `seen`, or
    /// `deadline`; true when one was.
    pub fn wait(&self, seen: u64, deadline: Instant) -> bool {
        let mut g = self.generation.lock();
        while g.value == seen {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return g.value != seen;
            }
        }
        true
    }

    /// Resolves once an entry for this scope is announced after generation `seen`: the
    /// async form of [`Channel::wait`] (the caller bounds it with its own timer).
    pub fn changed(self: &Arc<Self>, seen: u64) -> Changed {
        Changed {
            channel: self.clone(),
            seen,
        }
    }

    pub fn last_ts(&self) -> u64 {
        self.last_ts.load(Ordering::Acquire)
    }

    fn notify(&self, ts: u64) {
        self.last_ts.fetch_max(ts, Ordering::AcqRel);
        let wakers = {
            let mut g = self.generation.lock();
            g.value += 1;
            std::mem::take(&mut g.wakers)
        };
        self.cv.notify_all();
        for w in wakers {
            w.wake();
        }
    }
}

/// See [`Channel::changed`].
pub struct Changed {
    channel: Arc<Channel>,
    seen: u64,
}

impl Future for Changed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut g = self.channel.generation.lock();
        if g.value != self.seen {
            return Poll::Ready(());
        }
        if !g.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            g.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[derive(Default)]
struct Inner {
    pending: BTreeMap<u64, Touch>,
    channels: HashMap<String, Weak<Channel>>,
}

#[derive(Default)]
pub struct Announcer {
    inner: Mutex<Inner>,
    /// Every readable entry at or below this was announced.
    announced_through: AtomicU64,
}

impl Announcer {
    pub fn new(readable: u64) -> Announcer {
        Announcer {
            inner: Mutex::new(Inner::default()),
            announced_through: AtomicU64::new(readable),
        }
    }

    pub fn announced_through(&self) -> u64 {
        self.announced_through.load(Ordering::Acquire)
    }

    /// Notes what the entry at `ts` touches; must happen before the entry can become
    /// readable.
    pub fn note(&self, ts: u64, touch: Touch) {
        let mut inner = self.inner.lock();
        inner.pending.insert(ts, touch);
        if inner.pending.len() > MAX_PENDING {
            let newest = inner.pending.keys().next_back().copied().unwrap_or(ts);
            inner.pending.clear();
            inner.pending.insert(newest, Touch::All);
        }
    }

    /// The channel of a scope key. A new channel counts every entry announced so far as
    /// possibly its own (its streams read the history they start in).
    pub fn channel(&self, key: &str) -> Arc<Channel> {
        let mut inner = self.inner.lock();
        if let Some(ch) = inner.channels.get(key).and_then(Weak::upgrade) {
            return ch;
        }
        if inner.channels.len() >= 64 {
            inner.channels.retain(|_, w| w.strong_count() > 0);
        }
        let ch = Arc::new(Channel {
            generation: Mutex::new(Generation::default()),
            cv: Condvar::new(),
            last_ts: AtomicU64::new(self.announced_through()),
        });
        inner.channels.insert(key.to_string(), Arc::downgrade(&ch));
        ch
    }

    /// After the oplog lost its entries past `to` (rollback): their notes go and the
    /// announced point moves back, so the entries written there again are announced; every
    /// channel is woken. A channel's `last_ts` only grows, so streams read (not skip) past
    /// what they may have seen before.
    pub fn reset(&self, to: u64) {
        let mut inner = self.inner.lock();
        inner.pending.split_off(&to.saturating_add(1));
        if self.announced_through() > to {
            self.announced_through.store(to, Ordering::Release);
        }
        for ch in inner.channels.values().filter_map(Weak::upgrade) {
            let ts = ch.last_ts();
            ch.notify(ts);
        }
    }

    /// Announces the noted entries at or below `readable` to the channels they touch.
    pub fn announce(&self, readable: u64) {
        let mut inner = self.inner.lock();
        if readable <= self.announced_through() {
            return;
        }
        let later = inner.pending.split_off(&readable.saturating_add(1));
        let due = std::mem::replace(&mut inner.pending, later);
        // Without channels nobody waits; a channel made later starts from
        // `announced_through`, which covers these entries.
        if inner.channels.is_empty() {
            self.announced_through.store(readable, Ordering::Release);
            return;
        }
        // The newest due entry per distinct touch (a batch's entries mostly touch one
        // collection), then per channel.
        let mut newest: HashMap<&Touch, u64> = HashMap::new();
        for (ts, touch) in &due {
            newest.insert(touch, *ts);
        }
        let mut wake: HashMap<String, u64> = HashMap::new();
        let mut wake_at = |key: String, ts: u64| {
            let at = wake.entry(key).or_insert(ts);
            *at = (*at).max(ts);
        };
        for (touch, ts) in newest {
            match touch {
                Touch::Collection { db, coll } => {
                    wake_at(collection_key(db, coll), ts);
                    wake_at(database_key(db), ts);
                    wake_at(CLUSTER_KEY.to_string(), ts);
                }
                Touch::All => {
                    for key in inner.channels.keys() {
                        wake_at(key.clone(), ts);
                    }
                }
            }
        }
        for (key, ts) in wake {
            if let Some(ch) = inner.channels.get(&key).and_then(Weak::upgrade) {
                ch.notify(ts);
            }
        }
        self.announced_through.store(readable, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(db: &str, c: &str) -> Touch {
        Touch::Collection {
            db: db.into(),
            coll: c.into(),
        }
    }

    #[test]
    fn only_the_scopes_touched_are_woken() {
        let a = Announcer::new(0);
        let c1 = a.channel(&collection_key("d", "c1"));
        let c2 = a.channel(&collection_key("d", "c2"));
        let db = a.channel(&database_key("d"));
        let other_db = a.channel(&database_key("e"));
        let all = a.channel(CLUSTER_KEY);
        let gens = |chs: &[&Arc<Channel>]| chs.iter().map(|c| c.generation()).collect::<Vec<_>>();
        a.note(5, coll("d", "c1"));
        // Not readable yet: nothing announced.
        a.announce(4);
        assert_eq!(gens(&[&c1, &c2, &db, &other_db, &all]), vec![0, 0, 0, 0, 0]);
        a.announce(5);
        assert_eq!(gens(&[&c1, &c2, &db, &other_db, &all]), vec![1, 0, 1, 0, 1]);
        assert_eq!(
            (c1.last_ts(), c2.last_ts(), a.announced_through()),
            (5, 0, 5)
        );
        a.note(6, Touch::All);
        a.announce(6);
        assert_eq!(gens(&[&c1, &c2, &db, &other_db, &all]), vec![2, 1, 2, 1, 2]);
        assert_eq!(Touch::of("n", "d.c"), None);
        assert_eq!(Touch::of("c", "d.$cmd"), Some(Touch::All));
        assert_eq!(Touch::of("u", "d.c.x"), Some(coll("d", "c.x")));
    }

    #[test]
    fn each_scope_learns_the_newest_of_its_entries() {
        let a = Announcer::new(0);
        let c1 = a.channel(&collection_key("d", "c1"));
        let c2 = a.channel(&collection_key("d", "c2"));
        let db = a.channel(&database_key("d"));
        let other = a.channel(&database_key("e"));
        a.note(7, coll("d", "c1"));
        a.note(8, coll("d", "c2"));
        a.note(9, coll("d", "c1"));
        a.note(10, coll("e", "x"));
        a.announce(9);
        assert_eq!(
            (c1.last_ts(), c2.last_ts(), db.last_ts(), other.last_ts()),
            (9, 8, 9, 0)
        );
        assert_eq!(
            (c1.generation(), c2.generation(), db.generation()),
            (1, 1, 1)
        );
        a.note(11, Touch::All);
        a.announce(11);
        assert_eq!(
            (c1.last_ts(), c2.last_ts(), db.last_ts(), other.last_ts()),
            (11, 11, 11, 11)
        );
    }

    #[test]
    fn a_new_channel_counts_past_entries_as_its_own() {
        let a = Announcer::new(0);
        a.note(3, coll("d", "c"));
        a.announce(3);
        let c = a.channel(&collection_key("d", "c"));
        assert_eq!(c.last_ts(), 3);
    }

    #[test]
    fn overflowing_notes_collapse_into_all() {
        let a = Announcer::new(0);
        let c = a.channel(&collection_key("d", "other"));
        for ts in 1..=(MAX_PENDING as u64 + 1) {
            a.note(ts, coll("d", "c"));
        }
        a.announce(MAX_PENDING as u64 + 1);
        assert_eq!(c.last_ts(), MAX_PENDING as u64 + 1);
    }
}
