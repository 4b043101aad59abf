//! The codec's error type and its mapping onto MongoDB error codes.

use nidus_common::{Error, ErrorCode};
use std::fmt;

/// Why a message could not be decoded.
///
/// Fatal errors (see [`WireError::is_fatal`]) mean the byte stream itself can no longer be
/// trusted (bad framing, corrupt compression, checksum mismatch): the server closes the
/// connection. Every other error concerns the content of a well-framed message; the server
/// answers it with an error reply and keeps the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// `messageLength` outside `HEADER_LEN..=MAX_MESSAGE_SIZE_BYTES`, or not matching the
    /// number of body bytes handed to `decode`.
    InvalidMessageLength(i64),
    /// An opcode this server does not accept.
    UnsupportedOpCode(i32),
    /// An OP_COMPRESSED message wrapping another OP_COMPRESSED message.
    NestedCompression,
    /// An OP_COMPRESSED compressorId outside 0..=3.
    UnknownCompressor(u8),
    /// A malformed OP_COMPRESSED header or payload (sizes, corrupt data).
    Compression(String),
    /// The CRC-32C at the end of an OP_MSG does not match its contents.
    ChecksumMismatch,
    /// OP_MSG flagBits with an unknown bit among the required bits 0-15.
    IllegalFlags(u32),
    /// Structure of the message body is wrong (truncated field, bad section length, ...).
    Malformed(String),
    /// A BSON document whose bytes are not valid BSON.
    InvalidBson(String),
    /// A BSON document whose length prefix exceeds the internal object size limit.
    ObjectTooLarge(usize),
    /// A BSON document nested deeper than MongoDB's default `maxBSONDepth`.
    DepthExceeded,
    /// An OP_MSG section rule MongoDB enforces with its own assertion code.
    Section { code: ErrorCode, message: String },
}

impl WireError {
    /// True when the server must close the connection instead of replying.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            WireError::InvalidMessageLength(_)
                | WireError::UnsupportedOpCode(_)
                | WireError::NestedCompression
                | WireError::UnknownCompressor(_)
                | WireError::Compression(_)
                | WireError::ChecksumMismatch
        )
    }

    /// The MongoDB error code this error is reported with.
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::InvalidMessageLength(_)
            | WireError::UnsupportedOpCode(_)
            | WireError::NestedCompression
            | WireError::Malformed(_) => ErrorCode::ProtocolError,
            WireError::UnknownCompressor(_) => ErrorCode::InternalError,
            WireError::Compression(_) => ErrorCode::BadValue,
            WireError::ChecksumMismatch => ErrorCode::ChecksumMismatch,
            WireError::IllegalFlags(_) => ErrorCode::IllegalOpMsgFlag,
            WireError::InvalidBson(_) => ErrorCode::InvalidBSON,
            WireError::ObjectTooLarge(_) => ErrorCode::BSONObjectTooLarge,
            WireError::DepthExceeded => ErrorCode::Overflow,
            WireError::Section { code, .. } => *code,
        }
    }

    pub(crate) fn section(code: i32, message: impl Into<String>) -> WireError {
        WireError::Section {
            code: ErrorCode::from_code(code),
            message: message.into(),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::InvalidMessageLength(n) => write!(
                f,
                "recv(): message msgLen {n} is invalid. Min {} Max: {}",
                crate::HEADER_LEN,
                crate::MAX_MESSAGE_SIZE_BYTES
            ),
            WireError::UnsupportedOpCode(op) => write!(f, "Unsupported opcode {op}"),
            WireError::NestedCompression => {
                f.write_str("OP_COMPRESSED message may not contain another OP_COMPRESSED message")
            }
            WireError::UnknownCompressor(id) => write!(
                f,
                "Compression algorithm specified in message is not available (compressorId {id})"
            ),
            WireError::Compression(m) | WireError::Malformed(m) | WireError::InvalidBson(m) => {
                f.write_str(m)
            }
            WireError::ChecksumMismatch => f.write_str("OP_MSG checksum does not match contents"),
            WireError::IllegalFlags(flags) => {
                write!(f, "Message contains illegal flags value: Ob{flags:032b}")
            }
            WireError::ObjectTooLarge(size) => write!(
                f,
                "BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and {}(16MB)",
                crate::reader::MAX_INTERNAL_OBJECT_SIZE
            ),
            WireError::DepthExceeded => write!(
                f,
                "BSONObj exceeded maximum nested object depth: {}",
                crate::reader::MAX_BSON_DEPTH
            ),
            WireError::Section { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for Error {
    fn from(e: WireError) -> Error {
        Error::new(e.code(), e.to_string())
    }
}
