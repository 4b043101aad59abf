//! Member states and optimes as MongoDB reports them.

use bson::{doc, Document, Timestamp};

/// `replSetGetStatus().members[].state` / `stateStr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Startup,
    Primary,
    Secondary,
    Recovering,
    Startup2,
    Unknown,
    Down,
    Rollback,
    Removed,
}

impl MemberState {
    pub fn code(self) -> i32 {
        match self {
            MemberState::Startup => 0,
            MemberState::Primary => 1,
            MemberState::Secondary => 2,
            MemberState::Recovering => 3,
            MemberState::Startup2 => 5,
            MemberState::Unknown => 6,
            MemberState::Down => 8,
            MemberState::Rollback => 9,
            MemberState::Removed => 10,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemberState::Startup => "STARTUP",
            MemberState::Primary => "PRIMARY",
            MemberState::Secondary => "SECONDARY",
            MemberState::Recovering => "RECOVERING",
            MemberState::Startup2 => "STARTUP2",
            MemberState::Unknown => "UNKNOWN",
            MemberState::Down => "(not reachable/healthy)",
            MemberState::Rollback => "ROLLBACK",
            MemberState::Removed => "REMOVED",
        }
    }

    pub fn from_code(code: i32) -> MemberState {
        match code {
            0 => MemberState::Startup,
            1 => MemberState::Primary,
            2 => MemberState::Secondary,
            3 => MemberState::Recovering,
            5 => MemberState::Startup2,
            8 => MemberState::Down,
            9 => MemberState::Rollback,
            10 => MemberState::Removed,
            _ => MemberState::Unknown,
        }
    }

    /// Primaries and secondaries serve reads.
    pub fn readable(self) -> bool {
        matches!(self, MemberState::Primary | MemberState::Secondary)
    }
}

/// MongoDB's optime: the oplog entry's timestamp and the term it was written in, with the
/// wall clock time of that write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTime {
    pub ts: Timestamp,
    pub term: i64,
    pub wall: bson::DateTime,
}

impl Default for OpTime {
    fn default() -> OpTime {
        OpTime {
            ts: Timestamp {
                time: 0,
                increment: 0,
            },
            term: -1,
            wall: bson::DateTime::from_millis(0),
        }
    }
}

impl OpTime {
    pub fn to_document(self) -> Document {
        doc! { "ts": self.ts, "t": self.term }
    }

    /// The optime of an oplog entry (`ts`, `t`, `wall`), read from its bytes.
    pub fn of_raw(d: &bson::RawDocument) -> Option<OpTime> {
        let ts = d.get_timestamp("ts").ok()?;
        let term = d.get_i64("t").ok()?;
        let wall = d
            .get_datetime("wall")
            .unwrap_or_else(|_| bson::DateTime::from_millis(ts.time as i64 * 1000));
        Some(OpTime { ts, term, wall })
    }

    pub fn from_document(d: &Document, wall: Option<bson::DateTime>) -> OpTime {
        let ts = d.get_timestamp("ts").unwrap_or(Timestamp {
            time: 0,
            increment: 0,
        });
        OpTime {
            ts,
            term: d.get_i64("t").unwrap_or(-1),
            wall: wall.unwrap_or_else(|| bson::DateTime::from_millis(ts.time as i64 * 1000)),
        }
    }

    /// `optimeDate`: the timestamp's seconds as a date.
    pub fn date(self) -> bson::DateTime {
        bson::DateTime::from_millis(self.ts.time as i64 * 1000)
    }
}
