//! Shared vocabulary of every layer: MongoDB's error codes and the one error type.

mod codes;
mod error;
pub mod repeated;
pub mod shell;

pub use codes::ErrorCode;
pub use error::{Error, ErrorDetail, Result};

/// This machine's host name, as `hostInfo`, `serverStatus`, explain's `serverInfo` and
/// `$planCacheStats` report it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}
