use crate::ErrorCode;
use bson::Document;
use std::fmt;

/// The error every layer's narrow error type converts into.
///
/// It carries what a MongoDB reply shows: the code (with its codeName), the message, the
/// error labels, and extra fields some codes add to the reply (`keyPattern`/`keyValue` for
/// DuplicateKey, `errInfo` for DocumentValidationFailure). Boxed, so `Result<T>` stays one
/// pointer wide on the success path.
#[derive(Debug, Clone, PartialEq)]
pub struct Error(Box<ErrorDetail>);

#[derive(Debug, Clone, PartialEq)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    pub labels: Vec<String>,
    pub extra: Document,
}

impl std::ops::Deref for Error {
    type Target = ErrorDetail;
    fn deref(&self) -> &ErrorDetail {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut ErrorDetail {
        &mut self.0
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error(Box::new(ErrorDetail {
            code,
            message: message.into(),
            labels: Vec::new(),
            extra: Document::new(),
        }))
    }

    pub fn with_label(mut self, label: &str) -> Error {
        if !self.labels.iter().any(|l| l == label) {
            self.labels.push(label.to_string());
        }
        self
    }

    /// The same error with `context :: caused by :: ` before its message (MongoDB's
    /// `Status::withContext`).
    pub fn with_context(mut self, context: impl std::fmt::Display) -> Error {
        self.message = format!("{context} :: caused by :: {}", self.message);
        self
    }

    pub fn with_extra(mut self, key: &str, value: impl Into<bson::Bson>) -> Error {
        self.extra.insert(key, value);
        self
    }

    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }

    /// An assertion-site error (`Location<code>`), for codes MongoDB's registry lacks.
    pub fn location(code: i32, message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Location(code), message)
    }

    pub fn bad_value(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::BadValue, message)
    }

    pub fn failed_to_parse(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::FailedToParse, message)
    }

    pub fn type_mismatch(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::TypeMismatch, message)
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::InternalError, message)
    }

    /// `{ok: 0, errmsg, code, codeName, errorLabels?, ...extra}`: the one place an error
    /// becomes a command reply body.
    pub fn to_reply(&self) -> Document {
        let mut doc = Document::new();
        doc.insert("ok", 0.0);
        doc.insert("errmsg", self.message.clone());
        doc.insert("code", self.code.code());
        doc.insert("codeName", self.code.name().into_owned());
        for (k, v) in &self.extra {
            doc.insert(k.clone(), v.clone());
        }
        if !self.labels.is_empty() {
            doc.insert("errorLabels", self.labels.clone());
        }
        doc
    }

    /// The `{index, code, errmsg, ...}` entry of a write command's `writeErrors`.
    pub fn to_write_error(&self, index: usize) -> Document {
        let mut doc = Document::new();
        doc.insert("index", index as i32);
        doc.insert("code", self.code.code());
        doc.insert("errmsg", self.message.clone());
        for (k, v) in &self.extra {
            doc.insert(k.clone(), v.clone());
        }
        doc
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.name(),
            self.code.code(),
            self.message
        )
    }
}

impl std::error::Error for Error {}

impl From<bson::raw::Error> for Error {
    fn from(e: bson::raw::Error) -> Error {
        Error::new(ErrorCode::InvalidBSON, format!("invalid BSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_has_mongodb_shape() {
        let e = Error::new(
            ErrorCode::WriteConflict,
            "Write conflict during plan execution",
        )
        .with_label("TransientTransactionError");
        let r = e.to_reply();
        assert_eq!(r.get_f64("ok").unwrap(), 0.0);
        assert_eq!(r.get_i32("code").unwrap(), 112);
        assert_eq!(r.get_str("codeName").unwrap(), "WriteConflict");
        assert_eq!(r.get_array("errorLabels").unwrap().len(), 1);
    }
}
