//! Internal retry of single-document writes that hit a write conflict, with MongoDB's backoff.

use nidus_common::{Error, ErrorCode, Result};
use std::time::{Duration, Instant};

/// MongoDB's schedule: no sleep for the first 4 attempts, 1 ms up to attempt 9, 5 ms up to 99,
/// 10 ms up to 199, then 100 ms.
pub fn backoff(attempt: u32) -> Duration {
    match attempt {
        0..=3 => Duration::ZERO,
        4..=9 => Duration::from_millis(1),
        10..=99 => Duration::from_millis(5),
        100..=199 => Duration::from_millis(10),
        _ => Duration::from_millis(100),
    }
}

/// Runs `op` until it returns something other than WriteConflict, the deadline passes or the
/// operation is killed (`killOp`: Interrupted). `on_conflict` is called once per conflict
/// (the `writeConflicts` metric); the thread's operation (`opctx`) counts its own conflicts,
/// which the profiler reports as the operation's `writeConflicts`.
pub fn with_write_conflict_retry<T>(
    deadline: Option<Instant>,
    mut on_conflict: impl FnMut(),
    mut op: impl FnMut() -> Result<T>,
) -> Result<T> {
    let current = crate::opctx::current();
    let mut attempt = 0u32;
    loop {
        if let Some(c) = &current {
            c.check_interrupt()?;
        }
        match op() {
            Err(e) if e.code == ErrorCode::WriteConflict => {
                on_conflict();
                if let Some(c) = &current {
                    c.add_write_conflict();
                }
                let pause = backoff(attempt);
                if let Some(d) = deadline {
                    if Instant::now() + pause >= d {
                        return Err(Error::new(
                            ErrorCode::MaxTimeMSExpired,
                            "operation exceeded time limit",
                        ));
                    }
                }
                if !pause.is_zero() {
                    crate::blocking::wait(|| std::thread::sleep(pause));
                }
                attempt = attempt.saturating_add(1);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_matches_mongodb() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(3), Duration::ZERO);
        assert_eq!(backoff(4), Duration::from_millis(1));
        assert_eq!(backoff(9), Duration::from_millis(1));
        assert_eq!(backoff(10), Duration::from_millis(5));
        assert_eq!(backoff(150), Duration::from_millis(10));
        assert_eq!(backoff(500), Duration::from_millis(100));
    }

    #[test]
    fn retries_until_success_and_counts_conflicts() {
        let mut calls = 0;
        let mut conflicts = 0;
        let r = with_write_conflict_retry(
            None,
            || conflicts += 1,
            || {
                calls += 1;
                if calls < 5 {
                    Err(Error::new(ErrorCode::WriteConflict, "wc"))
                } else {
                    Ok(calls)
                }
            },
        );
        assert_eq!(r.unwrap(), 5);
        assert_eq!(conflicts, 4);
    }

    #[test]
    fn gives_up_at_deadline() {
        let deadline = Some(Instant::now() + Duration::from_millis(20));
        let r: Result<()> = with_write_conflict_retry(
            deadline,
            || {},
            || Err(Error::new(ErrorCode::WriteConflict, "wc")),
        );
        assert_eq!(r.unwrap_err().code, ErrorCode::MaxTimeMSExpired);
    }

    #[test]
    fn counts_per_operation_and_stops_when_killed() {
        let op = crate::opctx::OpCtx::new();
        let _g = crate::opctx::enter(op.clone());
        let mut calls = 0;
        let r: Result<()> = with_write_conflict_retry(
            None,
            || {},
            || {
                calls += 1;
                if calls == 3 {
                    op.kill();
                }
                Err(Error::new(ErrorCode::WriteConflict, "wc"))
            },
        );
        assert_eq!(r.unwrap_err().code, ErrorCode::Interrupted);
        assert_eq!(calls, 3);
        assert_eq!(op.take().write_conflicts, 3);
    }
}
