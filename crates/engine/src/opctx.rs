//! The operation a thread is running (MongoDB's `OperationContext` + `OpDebug`, reduced to
//! what the engine reports): an interrupt flag `killOp` sets, checked where the deadline is
//! checked (executors, pipelines, the write-conflict retry loop), and per-operation counters
//! the profiler and the slow-operation log read (`writeConflicts`, `keysInserted`, ...).
//!
//! Every command runs on one blocking-pool thread from start to end, so the server installs
//! the operation for the thread ([`enter`]) and the engine finds it with [`current`] without
//! threading a parameter through every read and write signature. A `getMore` is an operation
//! of its own: the cursor's plan checks whichever operation drives it.

use bson::Document;
use nidus_common::{Error, ErrorCode, Result};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The winning plan of what the operation ran (`planSummary`, `execStats`).
#[derive(Debug, Clone, Default)]
pub struct PlanInfo {
    pub summary: String,
    pub exec_stats: Document,
}

/// One operation's interrupt flag and counters.
#[derive(Debug, Default)]
pub struct OpCtx {
    killed: AtomicBool,
    write_conflicts: AtomicU64,
    keys_examined: AtomicU64,
    docs_examined: AtomicU64,
    keys_inserted: AtomicU64,
    keys_deleted: AtomicU64,
    plan: Mutex<Option<PlanInfo>>,
    /// Whether anything will read the plan's `execStats` (a profiled database): built only
    /// then, not for every read and write.
    wants_exec_stats: AtomicBool,
    /// The command declared `apiStrict: true` (Stable API Version 1): the planner leaves
    /// out the indexes outside that version (text and sparse ones), as MongoDB's does.
    api_strict: AtomicBool,
}

/// What one statement (or the whole operation) did, taken out of an [`OpCtx`].
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    pub write_conflicts: u64,
    pub keys_examined: u64,
    pub docs_examined: u64,
    pub keys_inserted: u64,
    pub keys_deleted: u64,
    pub plan: Option<PlanInfo>,
}

impl OpStats {
    /// Adds another statement's counters (a command's totals over its statements).
    pub fn add(&mut self, other: &OpStats) {
        self.write_conflicts += other.write_conflicts;
        self.keys_examined += other.keys_examined;
        self.docs_examined += other.docs_examined;
        self.keys_inserted += other.keys_inserted;
        self.keys_deleted += other.keys_deleted;
        if other.plan.is_some() {
            self.plan = other.plan.clone();
        }
    }
}

/// Whether the thread's operation declared `apiStrict: true` (see [`OpCtx::api_strict`]).
pub fn api_strict() -> bool {
    current().is_some_and(|op| op.api_strict())
}

pub fn interrupted() -> Error {
    Error::new(ErrorCode::Interrupted, "operation was interrupted")
}

impl OpCtx {
    pub fn new() -> Arc<OpCtx> {
        Arc::new(OpCtx::default())
    }

    /// `killOp`: the operation fails with Interrupted at its next check.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    pub fn check_interrupt(&self) -> Result<()> {
        if self.is_killed() {
            return Err(interrupted());
        }
        Ok(())
    }

    pub fn add_write_conflict(&self) {
        self.write_conflicts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_examined(&self, keys: u64, docs: u64) {
        self.keys_examined.fetch_add(keys, Ordering::Relaxed);
        self.docs_examined.fetch_add(docs, Ordering::Relaxed);
    }

    pub fn add_index_changes(&self, inserted: u64, deleted: u64) {
        self.keys_inserted.fetch_add(inserted, Ordering::Relaxed);
        self.keys_deleted.fetch_add(deleted, Ordering::Relaxed);
    }

    pub fn set_api_strict(&self, strict: bool) {
        self.api_strict.store(strict, Ordering::Relaxed);
    }

    pub fn api_strict(&self) -> bool {
        self.api_strict.load(Ordering::Relaxed)
    }

    pub fn set_wants_exec_stats(&self, wanted: bool) {
        self.wants_exec_stats.store(wanted, Ordering::Relaxed);
    }

    /// Whether [`PlanInfo::exec_stats`] is read (else it may be left empty).
    pub fn wants_exec_stats(&self) -> bool {
        self.wants_exec_stats.load(Ordering::Relaxed)
    }

    pub fn set_plan(&self, plan: PlanInfo) {
        *self.plan.lock() = Some(plan);
    }

    pub fn write_conflicts(&self) -> u64 {
        self.write_conflicts.load(Ordering::Relaxed)
    }

    /// The counters so far, reset to zero (one statement's share).
    pub fn take(&self) -> OpStats {
        OpStats {
            write_conflicts: self.write_conflicts.swap(0, Ordering::Relaxed),
            keys_examined: self.keys_examined.swap(0, Ordering::Relaxed),
            docs_examined: self.docs_examined.swap(0, Ordering::Relaxed),
            keys_inserted: self.keys_inserted.swap(0, Ordering::Relaxed),
            keys_deleted: self.keys_deleted.swap(0, Ordering::Relaxed),
            plan: self.plan.lock().take(),
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<OpCtx>>> = const { RefCell::new(None) };
}

/// Makes `op` the thread's operation until the guard drops (the previous one comes back).
pub fn enter(op: Arc<OpCtx>) -> Entered {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(op));
    Entered { previous }
}

pub struct Entered {
    previous: Option<Arc<OpCtx>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// The thread's operation, if a command is running on it.
pub fn current() -> Option<Arc<OpCtx>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Runs `f` on the thread's operation, if any.
pub fn with(f: impl FnOnce(&OpCtx)) {
    CURRENT.with(|c| {
        if let Some(op) = c.borrow().as_ref() {
            f(op);
        }
    });
}

/// MongoDB's `checkForInterrupt` for a killed operation.
pub fn check_interrupt() -> Result<()> {
    CURRENT.with(|c| match c.borrow().as_ref() {
        Some(op) => op.check_interrupt(),
        None => Ok(()),
    })
}

/// Runs `work` on each part of a split input (a parallel `$group` or SORT): the first on
/// this thread, the later ones on threads of their own named `name`, all as this thread's
/// operation, so killOp stops every part. The results come back in part order; a thread the
/// system cannot start fails its part, as a connection's would.
pub fn run_parts<P: Send, T: Send>(
    name: &str,
    parts: Vec<P>,
    work: impl Fn(P) -> Result<T> + Sync,
) -> Vec<Result<T>> {
    let op = current();
    let work = &work;
    std::thread::scope(|scope| {
        let mut parts = parts.into_iter();
        let first = parts.next();
        let later: Vec<_> = parts
            .map(|part| {
                let op = op.clone();
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(scope, move || {
                        let _op = op.map(enter);
                        work(part)
                    })
            })
            .collect();
        let mut results = Vec::with_capacity(later.len() + 1);
        results.extend(first.map(work));
        for handle in later {
            results.push(match handle {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(Error::internal(format!("a {name} thread panicked")))),
                Err(e) => Err(Error::internal(format!("starting a {name} thread: {e}"))),
            });
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_scopes_and_kill_interrupts() {
        assert!(current().is_none());
        let op = OpCtx::new();
        {
            let _g = enter(op.clone());
            assert!(check_interrupt().is_ok());
            with(|o| o.add_write_conflict());
            op.kill();
            let e = check_interrupt().unwrap_err();
            assert_eq!(e.code, ErrorCode::Interrupted);
        }
        assert!(current().is_none());
        assert!(check_interrupt().is_ok());
        let s = op.take();
        assert_eq!(s.write_conflicts, 1);
        assert_eq!(op.take().write_conflicts, 0);
    }

    /// Every part runs as the caller's operation and the results keep part order; a kill
    /// reaches the parts on other threads.
    #[test]
    fn parts_run_as_the_operation_in_order() {
        let op = OpCtx::new();
        let _g = enter(op.clone());
        let got = run_parts("test-part", (0..4).collect(), |i: usize| {
            let same = current().is_some_and(|o| Arc::ptr_eq(&o, &op));
            let named = std::thread::current().name().map(str::to_string);
            Ok((i, same, i == 0 || named.as_deref() == Some("test-part")))
        });
        let got: Vec<_> = got.into_iter().map(|r| r.expect("part")).collect();
        assert_eq!(got, (0..4).map(|i| (i, true, true)).collect::<Vec<_>>());
        op.kill();
        let got = run_parts("test-part", (0..3).collect(), |_: usize| check_interrupt());
        assert!(got
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.code == ErrorCode::Interrupted)));
    }
}
