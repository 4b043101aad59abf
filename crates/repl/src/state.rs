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
    /// One pass over the elements: the three fields come after the entry's `o`, which a
    /// lookup per field would walk past three times.
    pub fn of_raw(d: &bson::RawDocument) -> Option<OpTime> {
        let (mut ts, mut term, mut wall) = (None, None, None);
        for el in d.iter_elements() {
            let Ok(el) = el else {
                break;
            };
            let slot = match el.key() {
                "ts" => &mut ts,
                "t" => &mut term,
                "wall" => &mut wall,
                _ => continue,
            };
            *slot = el.value().ok();
            if ts.is_some() && term.is_some() && wall.is_some() {
                break;
            }
        }
        let ts = ts?.as_timestamp()?;
        let term = term?.as_i64()?;
        let wall = wall
            .and_then(|w| w.as_datetime())
            .unwrap_or_else(|| bson::DateTime::from_millis(ts.time as i64 * 1000));
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    /// `ts`, `t` and `wall` wherever they sit in the entry; `wall` defaults to the `ts`
    /// seconds; an entry without a `ts` or a `t` (or with another type there) has none.
    #[test]
    fn optime_of_an_entrys_bytes() {
        let ts = Timestamp {
            time: 1_700_000_000,
            increment: 7,
        };
        let wall = bson::DateTime::from_millis(1_700_000_000_123);
        let from_ts = bson::DateTime::from_millis(1_700_000_000_000);
        let cases = vec![
            (
                doc! { "op": "i", "ns": "d.c", "o": { "_id": 1, "ts": 5, "t": "x" }, "ts": ts, "t": 3i64, "v": 2i64, "wall": wall },
                Some((3, wall)),
            ),
            (
                doc! { "wall": wall, "t": 4i64, "ts": ts, "o": {} },
                Some((4, wall)),
            ),
            (doc! { "ts": ts, "t": 5i64 }, Some((5, from_ts))),
            (doc! { "ts": ts, "t": 5i64, "wall": 1 }, Some((5, from_ts))),
            (doc! { "ts": ts }, None),
            (doc! { "t": 5i64, "wall": wall }, None),
            (doc! { "ts": 1, "t": 5i64 }, None),
            (doc! { "ts": ts, "t": 5 }, None),
        ];
        for (entry, want) in cases {
            let raw = nidus_common::encode::document_to_raw(&entry).expect("raw");
            let got = OpTime::of_raw(&raw).map(|o| {
                assert_eq!(o.ts, ts, "{entry}");
                (o.term, o.wall)
            });
            assert_eq!(got, want, "{entry}");
        }
    }
}
