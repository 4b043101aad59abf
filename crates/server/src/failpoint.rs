//! The `failCommand`, `onPrimaryTransactionalWrite` and `failGetMoreAfterCursorCheckout` fail points, as the driver
//! specifications and tests use them (`configureFailPoint`, only with `enableTestCommands`).

use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use parking_lot::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Off,
    AlwaysOn,
    Times(i64),
    Skip(i64),
    Probability(f64),
}

#[derive(Debug, Clone)]
struct FailCommand {
    mode: Mode,
    commands: Vec<String>,
    error_code: Option<i32>,
    error_labels: Option<Vec<String>>,
    close_connection: bool,
    block_ms: Option<u64>,
    write_concern_error: Option<Document>,
    app_name: Option<String>,
}

/// What the dispatcher must do for one command.
#[derive(Debug, Default, Clone)]
pub struct Injection {
    pub block: Option<Duration>,
    pub close_connection: bool,
    pub error: Option<Error>,
    /// The fail point named the error's labels (possibly none): the server adds none.
    pub labels_given: bool,
    pub write_concern_error: Option<Document>,
}

/// `onPrimaryTransactionalWrite`: a retryable write's statements fail (the connection closes)
/// before they commit, or after they commit so the reply is lost and the driver retries.
#[derive(Debug, Clone)]
struct TransactionalWrite {
    mode: Mode,
    close_connection: bool,
    fail_before_commit: Option<i32>,
}

/// What happens to one retryable write when `onPrimaryTransactionalWrite` fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteInjection {
    /// Nothing is written; the connection closes.
    FailBeforeCommit,
    /// The write commits (its reply is stored for the retry); the connection closes.
    CloseAfterCommit,
}

#[derive(Default)]
pub struct FailPoints {
    fail_command: Mutex<Option<FailCommand>>,
    transactional_write: Mutex<Option<TransactionalWrite>>,
    /// `maxTimeAlwaysTimeOut`: every operation with a `maxTimeMS` times out at once.
    max_time_always_time_out: std::sync::atomic::AtomicBool,
    /// `failGetMoreAfterCursorCheckout`: a `getMore` fails with `errorCode` once it holds
    /// its cursor (the cursor is closed, as after any `getMore` error).
    get_more_after_checkout: Mutex<Option<(Mode, i32)>>,
}

fn parse_mode(v: &Bson) -> Result<Mode> {
    match v {
        Bson::String(s) if s == "alwaysOn" => Ok(Mode::AlwaysOn),
        Bson::String(s) if s == "off" => Ok(Mode::Off),
        Bson::Document(d) => {
            if let Some(n) = d.get("times").and_then(as_i64) {
                Ok(Mode::Times(n))
            } else if let Some(n) = d.get("skip").and_then(as_i64) {
                Ok(Mode::Skip(n))
            } else if let Some(Bson::Double(p)) = d.get("activationProbability") {
                Ok(Mode::Probability(*p))
            } else {
                Err(Error::bad_value("invalid fail point mode"))
            }
        }
        _ => Err(Error::bad_value("'mode' must be a string or JSON object")),
    }
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) => Some(*f as i64),
        _ => None,
    }
}

impl FailPoints {
    /// `configureFailPoint`; returns the reply's `count` (times the point fired before).
    pub fn configure(&self, cmd: &Document) -> Result<i64> {
        let name = cmd
            .get_str("configureFailPoint")
            .map_err(|_| Error::type_mismatch("configureFailPoint must be a string"))?;
        let mode = parse_mode(cmd.get("mode").unwrap_or(&Bson::Null))?;
        match name {
            "failCommand" => {}
            "onPrimaryTransactionalWrite" => {
                let data = cmd.get_document("data").cloned().unwrap_or_default();
                *self.transactional_write.lock() =
                    (mode != Mode::Off).then(|| TransactionalWrite {
                        mode,
                        close_connection: data.get_bool("closeConnection").unwrap_or(true),
                        fail_before_commit: data
                            .get("failBeforeCommitExceptionCode")
                            .and_then(as_i64)
                            .map(|n| n as i32),
                    });
                return Ok(0);
            }
            "failGetMoreAfterCursorCheckout" => {
                let data = cmd.get_document("data").cloned().unwrap_or_default();
                let code = data.get("errorCode").and_then(as_i64).unwrap_or(1) as i32;
                *self.get_more_after_checkout.lock() = (mode != Mode::Off).then_some((mode, code));
                return Ok(0);
            }
            "maxTimeAlwaysTimeOut" => {
                let was = self
                    .max_time_always_time_out
                    .swap(mode != Mode::Off, std::sync::atomic::Ordering::SeqCst);
                return Ok(was as i64);
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::FailPointSetFailed,
                    format!("Unknown fail point: {name}"),
                ))
            }
        }
        let data = cmd.get_document("data").cloned().unwrap_or_default();
        let mut slot = self.fail_command.lock();
        if mode == Mode::Off {
            *slot = None;
            return Ok(0);
        }
        let commands = match data.get("failCommands") {
            Some(Bson::Array(a)) => a
                .iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        *slot = Some(FailCommand {
            mode,
            commands,
            error_code: data.get("errorCode").and_then(as_i64).map(|n| n as i32),
            error_labels: match data.get("errorLabels") {
                Some(Bson::Array(a)) => Some(
                    a.iter()
                        .filter_map(|l| l.as_str().map(str::to_string))
                        .collect(),
                ),
                _ => None,
            },
            close_connection: data.get_bool("closeConnection").unwrap_or(false),
            block_ms: if data.get_bool("blockConnection").unwrap_or(false) {
                data.get("blockTimeMS")
                    .and_then(as_i64)
                    .map(|n| n.max(0) as u64)
            } else {
                None
            },
            write_concern_error: data.get_document("writeConcernError").ok().cloned(),
            app_name: data.get_str("appName").ok().map(str::to_string),
        });
        Ok(0)
    }

    /// The error `failGetMoreAfterCursorCheckout` makes this `getMore` fail with, if it fires.
    pub fn check_get_more(&self) -> Option<Error> {
        let mut slot = self.get_more_after_checkout.lock();
        let (mode, code) = slot.as_mut()?;
        let fire = match mode {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(n) => {
                *n -= 1;
                *n >= 0
            }
            Mode::Skip(n) => {
                *n -= 1;
                *n < 0
            }
            Mode::Probability(p) => rand_unit() < *p,
        };
        let error = fire.then(|| {
            Error::new(
                ErrorCode::from_code(*code),
                "Failing command via 'failGetMoreAfterCursorCheckout' failpoint",
            )
        });
        if matches!(mode, Mode::Times(n) if *n <= 0) {
            *slot = None;
        }
        error
    }

    pub fn max_time_always_times_out(&self) -> bool {
        self.max_time_always_time_out
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Decides whether a retryable write of `statements` statements (documents, updates,
    /// deletes) meets `onPrimaryTransactionalWrite`; each statement consumes one activation.
    pub fn check_transactional_write(&self, statements: usize) -> Option<WriteInjection> {
        let mut slot = self.transactional_write.lock();
        let tw = slot.as_mut()?;
        let mut fire = false;
        for _ in 0..statements.max(1) {
            fire |= match &mut tw.mode {
                Mode::Off => false,
                Mode::AlwaysOn => true,
                Mode::Times(n) => {
                    *n -= 1;
                    *n >= 0
                }
                Mode::Skip(n) => {
                    *n -= 1;
                    *n < 0
                }
                Mode::Probability(p) => rand_unit() < *p,
            };
        }
        let injection = match (fire, tw.fail_before_commit, tw.close_connection) {
            (false, _, _) => None,
            (true, Some(_), _) => Some(WriteInjection::FailBeforeCommit),
            (true, None, true) => Some(WriteInjection::CloseAfterCommit),
            (true, None, false) => None,
        };
        if matches!(tw.mode, Mode::Times(n) if n <= 0) {
            *slot = None;
        }
        injection
    }

    /// Decides whether `command` from a client named `app_name` fails, consuming one activation.
    /// Whether `failCommand` or `onPrimaryTransactionalWrite` is configured (either may
    /// block a command or close its connection).
    pub fn command_fail_point_set(&self) -> bool {
        self.fail_command.lock().is_some() || self.transactional_write.lock().is_some()
    }

    pub fn check(&self, command: &str, app_name: Option<&str>) -> Option<Injection> {
        let mut slot = self.fail_command.lock();
        let fc = slot.as_mut()?;
        // `command` is the dispatcher's (registered) name; a configured alias names it too.
        if !fc
            .commands
            .iter()
            .any(|c| crate::commands::canonical_name(c) == command)
        {
            return None;
        }
        if let Some(want) = &fc.app_name {
            if app_name != Some(want.as_str()) {
                return None;
            }
        }
        let fire = match &mut fc.mode {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(n) => {
                *n -= 1;
                *n >= 0
            }
            Mode::Skip(n) => {
                *n -= 1;
                *n < 0
            }
            Mode::Probability(p) => rand_unit() < *p,
        };
        if !fire {
            return None;
        }
        let injection = Injection {
            block: fc.block_ms.map(Duration::from_millis),
            close_connection: fc.close_connection,
            error: fc.error_code.map(|code| {
                let mut e = Error::new(
                    ErrorCode::from_code(code),
                    "Failing command via 'failCommand' failpoint",
                );
                if let Some(labels) = &fc.error_labels {
                    e.labels = labels.clone();
                }
                e
            }),
            labels_given: fc.error_labels.is_some(),
            write_concern_error: fc.write_concern_error.clone(),
        };
        if matches!(fc.mode, Mode::Times(0)) {
            *slot = None;
        }
        Some(injection)
    }
}

fn rand_unit() -> f64 {
    let b = bson::oid::ObjectId::new().bytes();
    (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as f64) / (u32::MAX as f64)
}
