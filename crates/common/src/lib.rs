//! Shared vocabulary of every layer: MongoDB's error codes and the one error type.

mod codes;
mod error;
pub mod shell;

pub use codes::ErrorCode;
pub use error::{Error, ErrorDetail, Result};
