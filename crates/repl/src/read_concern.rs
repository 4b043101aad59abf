//! Read concerns on a replica set member: parsing MongoDB's combinations and the waits.
//!
//! - `afterClusterTime` / `afterOpTime` (causal consistency): the read waits until this
//!   member shows every write a client could have seen at that time. A primary waits for its
//!   oplog visibility point to pass the time (bounded by the newest `ts` handed out, since a
//!   cluster time may name no entry), once it is writable (a new primary first applies its
//!   predecessors' entries). A secondary waits until it applied that far, or until it applied
//!   everything a writable primary had made visible when answering a heartbeat sent after the
//!   read began (the time may be later than any entry written; a primary that is not writable
//!   yet sends no visibility point).
//! - `majority`: a secondary applies only majority-committed entries (and reads nothing
//!   during rollback or before minValid), so its data is majority-committed. A primary
//!   applies its writes before they commit: a majority read waits until every entry visible
//!   when it began is majority-committed, so it never shows a write that could roll back.
//! - `linearizable`: primary only; waits as `majority`, then confirms with Raft's read index
//!   (a heartbeat round acknowledged by a majority) that it is still the primary, and waits
//!   until it applied up to that index.

use crate::{Coordinator, MemberState};
use bson::{Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::oplog::ts_to_u64;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Local,
    Available,
    Majority,
    Linearizable,
    Snapshot,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadConcern {
    pub level: Level,
    /// `afterClusterTime`, or `afterOpTime.ts`.
    pub after: Option<Timestamp>,
    pub after_optime: bool,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidOptions, msg.into())
}

fn wrong_type(field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{field}' is the wrong type '{}', expected type '{expected}'",
        nidus_doc::compare::type_name(v)
    ))
}

/// The command's `readConcern`, with MongoDB's refusals of bad combinations.
pub fn parse(body: &Document) -> Result<Option<ReadConcern>> {
    let rc = match body.get("readConcern") {
        None => return Ok(None),
        Some(Bson::Document(rc)) => rc,
        Some(other) => return Err(wrong_type("readConcern", other, "object")),
    };
    let level = match rc.get("level") {
        None => Level::Local,
        Some(Bson::String(l)) => match l.as_str() {
            "local" => Level::Local,
            "available" => Level::Available,
            "majority" => Level::Majority,
            "linearizable" => Level::Linearizable,
            "snapshot" => Level::Snapshot,
            // MongoDB's IDL enum refusal.
            other => {
                return Err(Error::new(
                    ErrorCode::BadValue,
                    format!(
                        "Enumeration value '{other}' for field 'readConcern.level' is not a valid value."
                    ),
                ))
            }
        },
        Some(other) => return Err(wrong_type("readConcern.level", other, "string")),
    };
    let after_ct = match rc.get("afterClusterTime") {
        Some(Bson::Timestamp(t)) => Some(*t),
        _ => None,
    };
    let after_op = match rc.get("afterOpTime") {
        Some(Bson::Document(d)) => match d.get("ts") {
            Some(Bson::Timestamp(t)) => Some(*t),
            _ => {
                return Err(Error::new(
                    ErrorCode::FailedToParse,
                    "readConcern.afterOpTime must hold a timestamp 'ts'",
                ))
            }
        },
        _ => None,
    };
    if after_ct.is_some() && after_op.is_some() {
        return Err(invalid(
            "Can not specify both afterClusterTime and afterOpTime",
        ));
    }
    if after_ct.is_some() && !matches!(level, Level::Majority | Level::Local | Level::Snapshot) {
        return Err(invalid(
            "afterClusterTime field can be set only if level is equal to majority, local, or snapshot",
        ));
    }
    if after_op.is_some() && level == Level::Snapshot {
        return Err(invalid(
            "afterOpTime field cannot be set if level is equal to snapshot",
        ));
    }
    if after_ct.is_some_and(|t| t.time == 0 && t.increment == 0) {
        return Err(invalid("afterClusterTime cannot be a null timestamp"));
    }
    if level == Level::Linearizable && after_op.is_some() {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "afterOpTime not compatible with linearizable read concern",
        ));
    }
    Ok(Some(ReadConcern {
        level,
        after: after_ct.or(after_op),
        after_optime: after_op.is_some(),
    }))
}

/// Raft read-index requests of linearizable reads and their answers.
#[derive(Default)]
pub(crate) struct ReadIndexes {
    next: std::sync::atomic::AtomicU64,
    answered: parking_lot::Mutex<std::collections::HashMap<u64, u64>>,
}

impl ReadIndexes {
    pub(crate) fn done(&self, id: u64, index: u64) {
        let mut answered = self.answered.lock();
        // Answers for reads that gave up are never taken: keep the map bounded.
        if answered.len() > 10_000 {
            answered.clear();
        }
        answered.insert(id, index);
    }
}

fn expired() -> Error {
    Error::new(ErrorCode::MaxTimeMSExpired, "operation exceeded time limit")
}

impl Coordinator {
    /// Raft's read index: a majority acknowledged this member as leader after the read
    /// began; then waits until it applied up to the index Raft returned.
    fn confirm_leadership(&self, deadline: Option<Instant>) -> Result<()> {
        let id = self
            .reads
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut asked = Instant::now();
        self.send_input(crate::Input::ReadIndex(id));
        let outcome = loop {
            let seen = *self.progress.lock();
            let v = self.view();
            if v.state != MemberState::Primary {
                break Err(Error::new(
                    ErrorCode::InterruptedDueToReplStateChange,
                    "operation was interrupted because a node stepped down",
                ));
            }
            let index = self.reads.answered.lock().get(&id).copied();
            if index.is_some_and(|i| v.applied_index >= i) {
                break Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break Err(expired());
            }
            if index.is_none() && asked.elapsed() > Duration::from_secs(1) {
                // Raft drops a read index request it cannot serve yet: ask again.
                asked = Instant::now();
                self.send_input(crate::Input::ReadIndex(id));
            }
            let mut g = self.progress.lock();
            if *g == seen {
                self.progress_changed
                    .wait_for(&mut g, Duration::from_millis(10));
            }
        };
        self.reads.answered.lock().remove(&id);
        outcome
    }

    /// Waits until this member may serve a read with `rc` (see the module documentation),
    /// until `deadline`.
    pub fn wait_for_read_concern(&self, rc: &ReadConcern, deadline: Option<Instant>) -> Result<()> {
        let Some(oplog) = self.engine().oplog().cloned() else {
            return Ok(());
        };
        if rc.level == Level::Linearizable
            && !self.implicit()
            && self.view.read().state != MemberState::Primary
        {
            return Err(Error::new(
                ErrorCode::NotWritablePrimary,
                "cannot satisfy linearizable read concern on non-primary node",
            ));
        }
        let needs_commit = matches!(rc.level, Level::Majority | Level::Linearizable);
        if rc.after.is_none() && !needs_commit {
            return Ok(());
        }
        let started = Instant::now();
        let reserved = oplog.last_reserved_u64();
        let was_primary = self.view.read().state == MemberState::Primary;
        // The primary's majority wait: everything visible when the read began, committed.
        let mut commit_target: Option<u64> = None;
        loop {
            let seen = *self.progress.lock();
            if self.implicit() {
                // One member: its visible writes are its committed ones.
                match rc.after {
                    Some(t) if oplog.visible_u64() < ts_to_u64(t).min(reserved) => {}
                    _ => return Ok(()),
                }
            } else {
                let v = self.view();
                if v.state == MemberState::Primary && !v.writable {
                    // A new primary applies its predecessors' last entries before it takes
                    // writes; until then its visibility point may be behind writes they
                    // acknowledged: wait.
                } else if v.state == MemberState::Primary {
                    let visible = oplog.visible_u64();
                    let after_ok = rc
                        .after
                        .is_none_or(|t| visible >= ts_to_u64(t).min(reserved));
                    if after_ok && !needs_commit {
                        return Ok(());
                    }
                    if after_ok && needs_commit {
                        if commit_target.is_none() && visible >= reserved {
                            commit_target = Some(
                                oplog
                                    .last_visible(self.engine().kv())
                                    .map(|op| ts_to_u64(op.ts))
                                    .unwrap_or(visible),
                            );
                        }
                        if let Some(target) = commit_target {
                            if ts_to_u64(v.committed.ts) >= target {
                                if rc.level == Level::Linearizable {
                                    return self.confirm_leadership(deadline);
                                }
                                return Ok(());
                            }
                        }
                    }
                } else if was_primary && needs_commit {
                    return Err(Error::new(
                        ErrorCode::InterruptedDueToReplStateChange,
                        "operation was interrupted because a node stepped down",
                    ));
                } else if v.state.readable() {
                    let applied = ts_to_u64(v.applied.ts);
                    let ok = match rc.after {
                        None => true,
                        Some(t) => {
                            applied >= ts_to_u64(t)
                                || self.peer_info(v.leader).is_some_and(|p| {
                                    p.visible_seen.is_some_and(|at| at > started)
                                        && applied >= p.visible
                                })
                        }
                    };
                    if ok {
                        return Ok(());
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(expired());
            }
            if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(Error::new(
                    ErrorCode::InterruptedAtShutdown,
                    "interrupted at shutdown",
                ));
            }
            let mut g = self.progress.lock();
            if *g == seen {
                let slice = Duration::from_millis(10);
                let wait = deadline.map_or(slice, |d| {
                    d.saturating_duration_since(Instant::now()).min(slice)
                });
                self.progress_changed.wait_for(&mut g, wait);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn combinations_as_mongodb() {
        let ts = Timestamp {
            time: 5,
            increment: 1,
        };
        let zero = Timestamp {
            time: 0,
            increment: 0,
        };
        let cases: Vec<(Document, Option<ErrorCode>)> = vec![
            (doc! {}, None),
            (doc! { "level": "majority", "afterClusterTime": ts }, None),
            (doc! { "afterClusterTime": ts }, None),
            (doc! { "level": "snapshot", "afterClusterTime": ts }, None),
            (
                doc! { "level": "local", "afterOpTime": { "ts": ts, "t": 1i64 } },
                None,
            ),
            (
                doc! { "afterClusterTime": ts, "afterOpTime": { "ts": ts, "t": 1i64 } },
                Some(ErrorCode::InvalidOptions),
            ),
            (
                doc! { "level": "available", "afterClusterTime": ts },
                Some(ErrorCode::InvalidOptions),
            ),
            (
                doc! { "level": "linearizable", "afterClusterTime": ts },
                Some(ErrorCode::InvalidOptions),
            ),
            (
                doc! { "level": "snapshot", "afterOpTime": { "ts": ts, "t": 1i64 } },
                Some(ErrorCode::InvalidOptions),
            ),
            (
                doc! { "afterClusterTime": zero },
                Some(ErrorCode::InvalidOptions),
            ),
            (
                doc! { "level": "linearizable", "afterOpTime": { "ts": ts, "t": 1i64 } },
                Some(ErrorCode::FailedToParse),
            ),
        ];
        for (rc, want) in cases {
            let got = parse(&doc! { "find": "c", "readConcern": rc.clone() });
            assert_eq!(got.as_ref().err().map(|e| e.code), want, "{rc}");
            if want.is_none() {
                let parsed = got.unwrap().unwrap();
                assert_eq!(
                    parsed.after.is_some(),
                    rc.contains_key("afterClusterTime") || rc.contains_key("afterOpTime")
                );
            }
        }
        assert!(parse(&doc! { "find": "c" }).unwrap().is_none());
    }
}
