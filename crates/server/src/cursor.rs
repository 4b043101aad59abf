//! Open cursors: their plans, positions and idle timeouts.

use bson::RawDocumentBuf;
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::catalog::CollectionRef;
use nidus_engine::exec::Executor;
use nidus_engine::namespace::Namespace;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A reply batch may hold up to 16 MiB of documents (MongoDB's `BSONObjMaxUserSize`).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// The first batch of `find`/`aggregate` holds 101 documents unless `batchSize` says otherwise.
pub const DEFAULT_FIRST_BATCH: u64 = 101;

pub struct Cursor {
    pub ns: Namespace,
    pub exec: Executor,
    /// The `limit` of the query, if any, and how many results went out so far.
    pub limit: Option<u64>,
    pub returned: u64,
    pub last_used: Instant,
    pub no_timeout: bool,
    /// A result read from the plan that did not fit in the previous batch.
    pub pending: Option<RawDocumentBuf>,
    /// A tailable cursor on a capped collection: open at the end of the data, and with
    /// `awaitData` its `getMore` waits for inserts into `tailing`.
    pub tail: Option<Tail>,
    /// What is left of the creating command's `maxTimeMS`: it binds the cursor's later
    /// `getMore`s too (MongoDB's leftover max time), except on awaitData cursors.
    pub max_time_left: Option<std::time::Duration>,
    /// Keys and documents examined by the plan as of the last batch (the profiler reports
    /// each batch's share).
    pub examined: (i64, i64),
    /// A change stream's position: its cursor stays open at the end of the events
    /// (`commands/change_stream.rs`).
    pub change_stream: Option<nidus_engine::pipeline::change_stream::SharedState>,
    /// A change stream without stages after `$changeStream`: its events go from the source
    /// into the reply as they are, around `exec` (which is then empty).
    pub change_events: Option<crate::commands::change_stream::Direct>,
    /// The Stable API parameters of the command that opened the cursor: its `getMore`s
    /// must send the same.
    pub api: crate::commands::api::ApiParameters,
}

/// What a tailable cursor follows.
pub struct Tail {
    pub coll: CollectionRef,
    pub await_data: bool,
}

impl Cursor {
    /// A cursor over `exec` with nothing returned yet and no limit, tail or time limit.
    pub fn new(ns: Namespace, exec: Executor) -> Cursor {
        Cursor {
            ns,
            exec,
            limit: None,
            returned: 0,
            last_used: Instant::now(),
            no_timeout: false,
            pending: None,
            tail: None,
            max_time_left: None,
            examined: (0, 0),
            change_stream: None,
            change_events: None,
            api: Default::default(),
        }
    }

    /// Fills a batch: at most `batch_size` documents (None = no count bound) and at most
    /// 16 MiB, but always at least one document. A document that would overflow the batch
    /// is kept for the next one. Returns the batch and whether the cursor is done.
    pub fn next_batch(&mut self, batch_size: Option<u64>) -> Result<(Vec<RawDocumentBuf>, bool)> {
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        loop {
            if self.limit.is_some_and(|limit| self.returned >= limit) {
                return Ok((batch, true));
            }
            if batch_size.is_some_and(|n| batch.len() as u64 >= n) {
                return Ok((batch, false));
            }
            let doc = match self.pending.take() {
                Some(d) => d,
                None => match self.exec.next_doc()? {
                    Some(d) => d,
                    None => {
                        return Ok((batch, self.tail.is_none() && self.change_stream.is_none()))
                    }
                },
            };
            let len = doc.as_bytes().len();
            if !batch.is_empty() && bytes + len > MAX_BATCH_BYTES {
                self.pending = Some(doc);
                return Ok((batch, false));
            }
            bytes += len;
            batch.push(doc);
            self.returned += 1;
        }
    }
}

/// An open cursor, the user who opened it (`user@db`; empty without authentication) and
/// the logical session it was opened in (the `lsid.id` bytes), if any.
struct Entry {
    owner: Vec<String>,
    session: Option<Vec<u8>>,
    cursor: Arc<Mutex<Cursor>>,
    /// When a command last took the cursor ([`CursorManager::get`]), set under the map's
    /// lock: the command locks the cursor itself only after releasing the map, and the
    /// monitor, which decides under the map's lock, counts the cursor used from here.
    claimed: Instant,
}

#[derive(Default)]
pub struct CursorManager {
    cursors: Mutex<HashMap<i64, Entry>>,
    /// `serverStatus().metrics.cursor.timedOut`: cursors closed by the idle timeout.
    timed_out: AtomicU64,
    /// `serverStatus().metrics.cursor.totalOpened`.
    total_opened: AtomicU64,
}

/// What the idle-cursor monitor closes (MongoDB's `cursorShouldTimeout`).
pub struct ReapRules<'a> {
    /// `cursorTimeoutMillis`.
    pub timeout: Duration,
    /// `enableTimeoutOfInactiveSessionCursors`: cursors opened in a session time out too.
    pub session_cursors_time_out: bool,
    /// The sessions the server knew at `sessions_at`: a cursor last used before then whose
    /// session is not among them is closed (MongoDB kills a session's cursors with the
    /// session). Cursors used since may belong to sessions begun after the snapshot.
    pub live_sessions: &'a HashSet<Vec<u8>>,
    pub sessions_at: Instant,
}

/// How many cursors one monitor pass closed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    pub timed_out: usize,
    pub session_ended: usize,
}

fn new_cursor_id() -> i64 {
    // Positive, non-zero, unpredictable: derived from a fresh ObjectId's random bytes and time.
    let oid = bson::oid::ObjectId::new().bytes();
    let mut b = [0u8; 8];
    b.copy_from_slice(&oid[4..12]);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as i64)
        .unwrap_or(0);
    let id = (i64::from_le_bytes(b) ^ (nanos << 17)) & i64::MAX;
    if id == 0 {
        1
    } else {
        id
    }
}

impl CursorManager {
    pub fn register(&self, cursor: Cursor, owner: Vec<String>, session: Option<Vec<u8>>) -> i64 {
        self.total_opened.fetch_add(1, Ordering::Relaxed);
        let mut map = self.cursors.lock();
        loop {
            let id = new_cursor_id();
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(id) {
                e.insert(Entry {
                    owner,
                    session,
                    cursor: Arc::new(Mutex::new(cursor)),
                    claimed: Instant::now(),
                });
                return id;
            }
        }
    }

    /// The logical session the cursor was opened in (`Some(None)`: none); `None` when there
    /// is no such cursor.
    pub fn session(&self, id: i64) -> Option<Option<Vec<u8>>> {
        self.cursors.lock().get(&id).map(|e| e.session.clone())
    }

    /// Who opened the cursor (None when there is no such cursor).
    pub fn owner(&self, id: i64) -> Option<Vec<String>> {
        self.cursors.lock().get(&id).map(|e| e.owner.clone())
    }

    /// The cursor `id`; CursorNotFound (43) "cursor id <id> not found" when it is not open
    /// (never opened, exhausted, killed or timed out: MongoDB's `pinCursor` message).
    pub fn get(&self, id: i64) -> Result<Arc<Mutex<Cursor>>> {
        self.cursors
            .lock()
            .get_mut(&id)
            .map(|e| {
                e.claimed = Instant::now();
                e.cursor.clone()
            })
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::CursorNotFound,
                    format!("cursor id {id} not found"),
                )
            })
    }

    pub fn remove(&self, id: i64) -> bool {
        self.cursors.lock().remove(&id).is_some()
    }

    /// Whether some open cursor was opened in a session (the monitor then needs the live
    /// session ids).
    pub fn any_in_session(&self) -> bool {
        self.cursors.lock().values().any(|e| e.session.is_some())
    }

    /// Closes idle cursors (MongoDB's `cursorShouldTimeout`): never a `noCursorTimeout`
    /// cursor or one a command is using (pinned); a cursor opened in a session only with
    /// `enableTimeoutOfInactiveSessionCursors`, but it closes once its session is gone.
    pub fn reap(&self, rules: &ReapRules) -> Reaped {
        self.reap_at(Instant::now(), rules)
    }

    /// [`CursorManager::reap`] with the monitor's clock reading `now`.
    fn reap_at(&self, now: Instant, rules: &ReapRules) -> Reaped {
        let mut reaped = Reaped::default();
        self.cursors.lock().retain(|_, e| {
            let Some(c) = e.cursor.try_lock() else {
                return true;
            };
            let last_used = c.last_used.max(e.claimed);
            if let Some(lsid) = &e.session {
                if last_used < rules.sessions_at && !rules.live_sessions.contains(lsid) {
                    reaped.session_ended += 1;
                    return false;
                }
                if !rules.session_cursors_time_out {
                    return true;
                }
            }
            let idle = !c.no_timeout && now.duration_since(last_used) >= rules.timeout;
            reaped.timed_out += usize::from(idle);
            !idle
        });
        self.timed_out
            .fetch_add(reaped.timed_out as u64, Ordering::Relaxed);
        reaped
    }

    /// `serverStatus().metrics.cursor`.
    pub fn metrics(&self) -> bson::Document {
        let (mut total, mut no_timeout, mut pinned) = (0i64, 0i64, 0i64);
        for e in self.cursors.lock().values() {
            total += 1;
            match e.cursor.try_lock() {
                Some(c) => no_timeout += i64::from(c.no_timeout),
                None => pinned += 1,
            }
        }
        bson::doc! {
            "timedOut": self.timed_out.load(Ordering::Relaxed) as i64,
            "totalOpened": self.total_opened.load(Ordering::Relaxed) as i64,
            "open": { "noTimeout": no_timeout, "pinned": pinned, "total": total },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nidus_engine::exec::{Eof, Executor, Stage};

    fn cursor() -> Cursor {
        Cursor::new(
            Namespace::new("test", "c"),
            Executor::new(Stage::new(Eof), None),
        )
    }

    /// The monitor closes a cursor idle past the timeout, but not one a command took by id
    /// and has not locked yet, nor one it holds; a session's cursor goes with its session,
    /// unless a command took it after the session list was read.
    #[test]
    fn monitor_spares_cursors_taken_by_a_command() {
        let m = CursorManager::default();
        let no_sessions = HashSet::new();
        let rules = |sessions_at: Instant| ReapRules {
            timeout: Duration::from_nanos(1),
            session_cursors_time_out: false,
            live_sessions: &no_sessions,
            sessions_at,
        };
        let idle = m.register(cursor(), Vec::new(), None);
        let taken = m.register(cursor(), Vec::new(), None);
        let held = m.register(cursor(), Vec::new(), None);
        let in_session = m.register(cursor(), Vec::new(), Some(vec![1; 16]));
        std::thread::sleep(Duration::from_millis(2));
        // The monitor reads its clock and the sessions here ...
        let before = Instant::now();
        // ... then commands take three cursors, one of them locked already.
        let held_cursor = m.get(held).expect("held");
        let lock = held_cursor.lock();
        m.get(taken).expect("taken");
        m.get(in_session).expect("in session");
        let r = m.reap_at(before, &rules(before));
        assert_eq!(
            r,
            Reaped {
                timed_out: 1,
                session_ended: 0
            }
        );
        assert!(m.get(idle).is_err(), "the idle cursor is closed");
        drop(lock);
        std::thread::sleep(Duration::from_millis(2));
        let now = Instant::now();
        let r = m.reap_at(now, &rules(now));
        assert_eq!(
            r,
            Reaped {
                timed_out: 2,
                session_ended: 1
            }
        );
    }
}
