//! `readConcern: {level: "snapshot"}` outside transactions: reads at one point in time,
//! named by a cluster time the server returns (`atClusterTime`) so later reads of the same
//! snapshot session see the same data.

use bson::{Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::Engine;
use nidus_storage::KvSnapshot;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a snapshot stays readable (MongoDB's `minSnapshotHistoryWindowInSeconds`).
const HISTORY_WINDOW: Duration = Duration::from_secs(300);
/// Snapshots kept at most; the oldest go first.
const MAX_SNAPSHOTS: usize = 1024;

/// Commands that read at a snapshot outside a transaction.
const SNAPSHOT_COMMANDS: &[&str] = &["find", "aggregate", "distinct"];

/// A snapshot handed out and when.
type Kept = (Arc<dyn KvSnapshot>, Instant);

/// The snapshots handed out, by the cluster time (seconds, increment) that names them.
#[derive(Default)]
pub struct SnapshotHistory {
    taken: Mutex<BTreeMap<(u32, u32), Kept>>,
}

/// A command's snapshot: the cluster time naming it and the storage snapshot.
pub struct SnapshotRead {
    pub at: Timestamp,
    pub snapshot: Arc<dyn KvSnapshot>,
}

impl SnapshotHistory {
    /// The snapshot a command reads at, if its read concern is `snapshot` (and it is not
    /// a transaction statement, whose snapshot is the transaction's).
    pub fn for_command(
        &self,
        engine: &Engine,
        now: impl FnOnce() -> Timestamp,
        name: &str,
        body: &Document,
    ) -> Result<Option<SnapshotRead>> {
        if body.contains_key("autocommit") {
            return Ok(None);
        }
        let Some(Bson::Document(rc)) = body.get("readConcern") else {
            return Ok(None);
        };
        if rc.get_str("level").ok() != Some("snapshot") {
            if rc.contains_key("atClusterTime") {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "atClusterTime is only used with readConcern level 'snapshot'",
                ));
            }
            return Ok(None);
        }
        // A driver's snapshot session sends its read concern with every command, the
        // getMore and killCursors of its cursors too (pymongo does): they read (or end)
        // with the cursor's own snapshot, so it is accepted and left unused, as MongoDB's.
        if matches!(name, "getMore" | "killCursors") {
            return Ok(None);
        }
        if !SNAPSHOT_COMMANDS.contains(&name) {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!(
                    "Command {name} does not support {{ readConcern: {{ level: \"snapshot\" }} }}"
                ),
            ));
        }
        match rc.get("atClusterTime") {
            None => Ok(Some(self.take(engine, now()))),
            Some(Bson::Timestamp(t)) => self.at(*t, now()).map(Some),
            Some(_) => Err(Error::type_mismatch(
                "BSON field 'readConcern.atClusterTime' is the wrong type, expected type 'timestamp'",
            )),
        }
    }

    fn take(&self, engine: &Engine, at: Timestamp) -> SnapshotRead {
        let snapshot: Arc<dyn KvSnapshot> = Arc::from(engine.kv().snapshot());
        let mut taken = self.taken.lock();
        let now = Instant::now();
        taken.retain(|_, (_, when)| now.duration_since(*when) < HISTORY_WINDOW);
        while taken.len() >= MAX_SNAPSHOTS {
            taken.pop_first();
        }
        taken.insert((at.time, at.increment), (snapshot.clone(), now));
        SnapshotRead { at, snapshot }
    }

    fn at(&self, at: Timestamp, current: Timestamp) -> Result<SnapshotRead> {
        if (at.time, at.increment) > (current.time, current.increment) {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                format!(
                    "readConcern atClusterTime value must not be greater than the current clusterTime. Requested clusterTime: {{ ts: Timestamp({}, {}) }}; current clusterTime: {{ ts: Timestamp({}, {}) }}",
                    at.time, at.increment, current.time, current.increment
                ),
            ));
        }
        match self.taken.lock().get(&(at.time, at.increment)) {
            Some((snapshot, _)) => Ok(SnapshotRead {
                at,
                snapshot: snapshot.clone(),
            }),
            None => Err(Error::new(
                ErrorCode::SnapshotTooOld,
                format!(
                    "Read timestamp Timestamp({}, {}) is older than the oldest available timestamp.",
                    at.time, at.increment
                ),
            )),
        }
    }
}

/// Tells the client the snapshot's time: in the cursor of a find/aggregate reply, at the top
/// of a distinct reply.
pub fn annotate_reply(body: &mut Document, at: Timestamp) {
    if let Some(Bson::Document(cursor)) = body.get_mut("cursor") {
        cursor.insert("atClusterTime", at);
    } else {
        body.insert("atClusterTime", at);
    }
}
