//! The 16-byte standard message header and message-length validation.

use crate::{WireError, HEADER_LEN, MAX_MESSAGE_SIZE_BYTES};

/// OP_REPLY: the legacy reply to OP_QUERY.
pub const OP_REPLY: i32 = 1;
/// OP_QUERY: only used by drivers for the initial `hello`/`isMaster` handshake.
pub const OP_QUERY: i32 = 2004;
/// OP_COMPRESSED: wraps another message compressed with a negotiated compressor.
pub const OP_COMPRESSED: i32 = 2012;
/// OP_MSG: every command since MongoDB 3.6.
pub const OP_MSG: i32 = 2013;

/// The standard header every message starts with; all fields little-endian int32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgHeader {
    /// Total message size in bytes, including these 16 header bytes.
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl MsgHeader {
    /// Reads the four fields; performs no validation (see [`check_length`]).
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> MsgHeader {
        let field =
            |i: usize| i32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        MsgHeader {
            message_length: field(0),
            request_id: field(4),
            response_to: field(8),
            op_code: field(12),
        }
    }

    /// The wire form of the header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let fields = [
            self.message_length,
            self.request_id,
            self.response_to,
            self.op_code,
        ];
        for (chunk, value) in out.chunks_exact_mut(4).zip(fields) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        out
    }
}

/// Validates `message_length` against `HEADER_LEN..=MAX_MESSAGE_SIZE_BYTES` and returns the
/// number of body bytes that follow the header. An error means the stream cannot be resynced:
/// the server closes the connection.
pub fn check_length(h: &MsgHeader) -> Result<usize, WireError> {
    let len = usize::try_from(h.message_length)
        .map_err(|_| WireError::InvalidMessageLength(h.message_length.into()))?;
    if !(HEADER_LEN..=MAX_MESSAGE_SIZE_BYTES).contains(&len) {
        return Err(WireError::InvalidMessageLength(h.message_length.into()));
    }
    Ok(len - HEADER_LEN)
}

/// Appends a header for a message whose body is `body_len` bytes long.
///
/// Invariant: callers only build messages well under `i32::MAX` bytes (replies are bounded by
/// the BSON size limit); a larger body saturates the length field rather than wrapping.
pub(crate) fn write_header(
    out: &mut Vec<u8>,
    body_len: usize,
    request_id: i32,
    response_to: i32,
    op_code: i32,
) {
    let message_length = i32::try_from(HEADER_LEN + body_len).unwrap_or(i32::MAX);
    let header = MsgHeader {
        message_length,
        request_id,
        response_to,
        op_code,
    };
    out.extend_from_slice(&header.to_bytes());
}
