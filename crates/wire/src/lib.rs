//! Nidus's MongoDB wire-protocol codec: OP_MSG, legacy OP_QUERY/OP_REPLY and OP_COMPRESSED.
//!
//! Pure functions over byte slices (no I/O). The server reads 16 header bytes, calls
//! [`MsgHeader::parse`] and [`check_length`], reads that many body bytes, then calls
//! [`decode`]. Every client-supplied length is bounds-checked before use: malformed input
//! yields a [`WireError`], never a panic or an allocation larger than the message limit.

mod compression;
mod error;
mod from_raw;
mod header;
mod msg;
mod query;
mod reader;
pub mod scram;

pub use compression::{compress, decompress, wrap_compressed, Compressor};
pub use error::WireError;
pub use from_raw::{document_from_raw, RawField, CLUSTER_TIME};
pub use header::{check_length, MsgHeader, OP_COMPRESSED, OP_MSG, OP_QUERY, OP_REPLY};
pub use msg::{
    encode_msg, encode_msg_request, encode_msg_with_batch, OpMsg, CHECKSUM_PRESENT,
    EXHAUST_ALLOWED, MORE_TO_COME,
};
pub use query::{encode_query_request, encode_reply, OpQuery};
pub use reader::{with_batch, MAX_BSON_DEPTH, MAX_INTERNAL_OBJECT_SIZE};

/// Largest user document (`maxBsonObjectSize` in `hello`).
pub const MAX_BSON_OBJECT_SIZE: usize = 16 * 1024 * 1024;
/// Largest message, header included (`maxMessageSizeBytes` in `hello`).
pub const MAX_MESSAGE_SIZE_BYTES: usize = 48_000_000;
/// Most operations in one write command (`maxWriteBatchSize` in `hello`); enforced by the
/// command layer, not here.
pub const MAX_WRITE_BATCH_SIZE: usize = 100_000;
/// Size of the standard message header.
pub const HEADER_LEN: usize = 16;

/// A decoded client request.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Msg(OpMsg),
    Query(OpQuery),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    pub request: Request,
    /// `Some` when the request arrived in OP_COMPRESSED; the reply uses the same compressor.
    pub compressor: Option<Compressor>,
}

/// Decodes one message. `body` is the bytes after the 16-byte header and must be exactly
/// `header.message_length - 16` bytes long.
pub fn decode(header: &MsgHeader, body: &[u8]) -> Result<Decoded, WireError> {
    let body_len = check_length(header)?;
    if body.len() != body_len {
        return Err(WireError::InvalidMessageLength(
            i64::try_from(body.len()).unwrap_or(i64::MAX) + HEADER_LEN as i64,
        ));
    }
    if header.op_code == OP_COMPRESSED {
        let (inner_header, inner_body, compressor) = compression::unwrap(header, body)?;
        let request = decode_uncompressed(&inner_header, &inner_body)?;
        return Ok(Decoded {
            request,
            compressor: Some(compressor),
        });
    }
    Ok(Decoded {
        request: decode_uncompressed(header, body)?,
        compressor: None,
    })
}

/// Decodes an OP_MSG or OP_QUERY whose framing has been checked.
fn decode_uncompressed(header: &MsgHeader, body: &[u8]) -> Result<Request, WireError> {
    match header.op_code {
        OP_MSG => msg::parse(header, body).map(Request::Msg),
        OP_QUERY => query::parse(body).map(Request::Query),
        OP_COMPRESSED => Err(WireError::NestedCompression),
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

/// Validates `bytes` as exactly one BSON document, as every incoming body and sequence
/// document is validated: lengths, type bytes, strings, and nesting up to
/// [`MAX_BSON_DEPTH`]. Converting the result into a `Document` cannot recurse deeper.
pub fn validate_document(bytes: &[u8]) -> Result<&bson::RawDocument, WireError> {
    let mut reader = reader::Reader::new(bytes);
    let doc = reader.document("document")?;
    if !reader.is_empty() {
        return Err(WireError::InvalidBson(
            "document: bytes follow the end of the document".into(),
        ));
    }
    Ok(doc)
}

/// Splits a complete message (header + body) and decodes it; convenient for tests and fuzzing.
pub fn decode_message(message: &[u8]) -> Result<Decoded, WireError> {
    let header_bytes: &[u8; HEADER_LEN] = message
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(WireError::InvalidMessageLength(message.len() as i64))?;
    let body = message.get(HEADER_LEN..).unwrap_or_default();
    decode(&MsgHeader::parse(header_bytes), body)
}
