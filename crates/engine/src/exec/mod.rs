//! Pull-based execution stages named as MongoDB's explain names them.
//!
//! Every stage sits in a [`Stage`] wrapper that counts `works`, `advanced`, `needTime` and
//! `isEOF`; explain and (later) the multi-planner read the same counters, so they cannot
//! disagree with what ran.

mod collscan;
mod eof;
mod express;
mod limit;
mod projection;
mod queued_data;
mod skip;
mod sort;

pub use collscan::CollScan;
pub use eof::Eof;
pub use express::ExpressIxscan;
pub use limit::Limit;
pub use projection::ProjectionStage;
pub use queued_data::QueuedData;
pub use skip::Skip;
pub use sort::Sort;

use bson::{Document, RawDocumentBuf};
use nidus_common::{Error, ErrorCode, Result};
use std::time::Instant;

/// A document flowing between stages; `rid` is set while it is still tied to a record.
#[derive(Debug, Clone)]
pub struct Member {
    pub rid: Option<u64>,
    pub doc: RawDocumentBuf,
}

pub enum StageState {
    Advanced(Member),
    NeedTime,
    IsEof,
}

/// The counters every stage reports in explain (`plan_stage.h`'s CommonStats).
#[derive(Debug, Default, Clone)]
pub struct CommonStats {
    pub works: u64,
    pub advanced: u64,
    pub need_time: u64,
    pub need_yield: u64,
    pub save_state: u64,
    pub restore_state: u64,
    pub is_eof: bool,
}

/// What a concrete stage implements; the wrapper does the counting.
pub trait StageImpl: Send {
    /// The explain name (`COLLSCAN`, `SORT`, ...).
    fn name(&self) -> &'static str;
    fn work(&mut self) -> Result<StageState>;
    /// Stage-specific explain fields (`docsExamined`, `keysExamined`, `filter`, ...).
    fn specific_stats(&self) -> Document {
        Document::new()
    }
    fn children(&self) -> Vec<&Stage> {
        Vec::new()
    }
}

pub struct Stage {
    imp: Box<dyn StageImpl>,
    pub common: CommonStats,
}

impl Stage {
    pub fn new(imp: impl StageImpl + 'static) -> Stage {
        Stage {
            imp: Box::new(imp),
            common: CommonStats::default(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.imp.name()
    }

    pub fn work(&mut self) -> Result<StageState> {
        self.common.works += 1;
        let state = self.imp.work()?;
        match &state {
            StageState::Advanced(_) => self.common.advanced += 1,
            StageState::NeedTime => self.common.need_time += 1,
            StageState::IsEof => self.common.is_eof = true,
        }
        Ok(state)
    }

    pub fn specific_stats(&self) -> Document {
        self.imp.specific_stats()
    }

    pub fn children(&self) -> Vec<&Stage> {
        self.imp.children()
    }

    /// Sum of a specific counter over this subtree (for `totalDocsExamined` and friends).
    pub fn total(&self, field: &str) -> i64 {
        let own = match self.specific_stats().get(field) {
            Some(bson::Bson::Int64(n)) => *n,
            Some(bson::Bson::Int32(n)) => *n as i64,
            _ => 0,
        };
        own + self.children().iter().map(|c| c.total(field)).sum::<i64>()
    }

    /// One-line plan summary for logs and the profiler (`COLLSCAN`, `IXSCAN { _id: 1 }`).
    pub fn plan_summary(&self) -> String {
        match self.children().first() {
            Some(child) if self.specific_stats().get("keyPattern").is_none() => {
                child.plan_summary()
            }
            _ => match self.specific_stats().get_str("keyPatternSummary") {
                Ok(k) => format!("{} {}", self.name(), k),
                Err(_) => self.name().to_string(),
            },
        }
    }
}

/// Drives a plan to produce documents, enforcing `maxTimeMS`.
pub struct Executor {
    pub root: Stage,
    deadline: Option<Instant>,
}

impl Executor {
    pub fn new(root: Stage, deadline: Option<Instant>) -> Executor {
        Executor { root, deadline }
    }

    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// The next result, or None at end of stream.
    pub fn get_next(&mut self) -> Result<Option<Member>> {
        let mut spins = 0u32;
        loop {
            match self.root.work()? {
                StageState::Advanced(m) => return Ok(Some(m)),
                StageState::IsEof => return Ok(None),
                StageState::NeedTime => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(128) {
                        self.check_deadline()?;
                    }
                }
            }
        }
    }

    pub fn check_deadline(&self) -> Result<()> {
        match self.deadline {
            Some(d) if Instant::now() >= d => Err(Error::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            )),
            _ => Ok(()),
        }
    }

    pub fn is_eof(&self) -> bool {
        self.root.common.is_eof
    }
}
