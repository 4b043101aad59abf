//! Legacy OP_QUERY (opcode 2004) requests and OP_REPLY (opcode 1) replies, which drivers
//! still use for the first `hello`/`isMaster` of a connection.
//!
//! OP_QUERY body: `flags: i32, fullCollectionName: cstring, numberToSkip: i32,
//! numberToReturn: i32, query: document[, returnFieldsSelector: document]`.
//! OP_REPLY body: `responseFlags: i32, cursorID: i64, startingFrom: i32,
//! numberReturned: i32, documents...`.

use crate::header::{write_header, OP_QUERY, OP_REPLY};
use crate::reader::{document_bytes, Reader};
use crate::WireError;
use crate::HEADER_LEN;
use bson::Document;

/// OP_REPLY responseFlags bit 3: the server supports the AwaitData query option.
const AWAIT_CAPABLE: i32 = 8;

#[derive(Clone, Debug, PartialEq)]
pub struct OpQuery {
    pub flags: u32,
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: Document,
    pub return_fields: Option<Document>,
}

/// Parses an OP_QUERY body (the bytes after the header); no bytes may follow the documents.
pub(crate) fn parse(body: &[u8]) -> Result<OpQuery, WireError> {
    let mut reader = Reader::new(body);
    let flags = reader.u32("OP_QUERY flags")?;
    let full_collection_name = reader.cstr("fullCollectionName")?.to_owned();
    let number_to_skip = reader.i32("numberToSkip")?;
    let number_to_return = reader.i32("numberToReturn")?;
    let query = reader.converted_document("OP_QUERY query", "")?;
    let return_fields = if reader.is_empty() {
        None
    } else {
        Some(reader.converted_document("returnFieldsSelector", "")?)
    };
    if !reader.is_empty() {
        return Err(WireError::Malformed(
            "unexpected bytes after the OP_QUERY documents".into(),
        ));
    }
    Ok(OpQuery {
        flags,
        full_collection_name,
        number_to_skip,
        number_to_return,
        query,
        return_fields,
    })
}

/// Encodes the OP_REPLY to an OP_QUERY command: AwaitCapable, cursor 0, one document.
pub fn encode_reply(request_id: i32, response_to: i32, doc: &Document) -> Vec<u8> {
    let doc = document_bytes(doc);
    let mut payload = Vec::with_capacity(20 + doc.len());
    payload.extend_from_slice(&AWAIT_CAPABLE.to_le_bytes());
    payload.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    payload.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    payload.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    payload.extend_from_slice(&doc);
    with_header(request_id, response_to, OP_REPLY, payload)
}

/// Encodes an OP_QUERY request as a driver's handshake does.
pub fn encode_query_request(request_id: i32, q: &OpQuery) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&q.flags.to_le_bytes());
    payload.extend_from_slice(q.full_collection_name.as_bytes());
    payload.push(0);
    payload.extend_from_slice(&q.number_to_skip.to_le_bytes());
    payload.extend_from_slice(&q.number_to_return.to_le_bytes());
    payload.extend_from_slice(&document_bytes(&q.query));
    if let Some(fields) = &q.return_fields {
        payload.extend_from_slice(&document_bytes(fields));
    }
    with_header(request_id, 0, OP_QUERY, payload)
}

fn with_header(request_id: i32, response_to: i32, op_code: i32, payload: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    write_header(&mut out, payload.len(), request_id, response_to, op_code);
    out.extend_from_slice(&payload);
    out
}
