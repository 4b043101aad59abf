// Shared helpers for the integration tests (included with `mod common;`).
#![allow(dead_code)]

use bson::{doc, Document, RawDocumentBuf};
use nidus_wire::{decode_message, Decoded, OpMsg, Request, WireError, HEADER_LEN};

/// A message with a correct header around an arbitrary body.
pub fn frame(op_code: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((HEADER_LEN + body.len()) as i32).to_le_bytes());
    out.extend_from_slice(&7i32.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&op_code.to_le_bytes());
    out.extend_from_slice(body);
    out
}

pub fn bytes(d: &Document) -> Vec<u8> {
    bson::to_vec(d).unwrap()
}

pub fn raw(d: Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(&d).unwrap()
}

/// OP_MSG body bytes from flags and pre-encoded sections.
pub fn msg_body(flags: u32, sections: &[Vec<u8>]) -> Vec<u8> {
    let mut out = flags.to_le_bytes().to_vec();
    for s in sections {
        out.extend_from_slice(s);
    }
    out
}

pub fn body_section(d: &Document) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&bytes(d));
    out
}

pub fn body_section_raw(doc_bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(doc_bytes);
    out
}

pub fn seq_section(name: &str, docs: &[Document]) -> Vec<u8> {
    let mut content = name.as_bytes().to_vec();
    content.push(0);
    for d in docs {
        content.extend_from_slice(&bytes(d));
    }
    let mut out = vec![1u8];
    out.extend_from_slice(&((content.len() + 4) as i32).to_le_bytes());
    out.extend_from_slice(&content);
    out
}

pub fn decode_msg(message: &[u8]) -> Result<OpMsg, WireError> {
    match decode_message(message)? {
        Decoded {
            request: Request::Msg(m),
            ..
        } => Ok(m),
        other => panic!("expected OP_MSG, got {other:?}"),
    }
}

pub fn hello() -> Document {
    doc! { "hello": 1, "$db": "admin" }
}

/// Asserts the error's MongoDB code, fatality and (a fragment of) its message.
pub fn assert_err(
    result: Result<impl std::fmt::Debug, WireError>,
    code: i32,
    fatal: bool,
    msg: &str,
) {
    let err = result.expect_err("expected an error");
    let e: nidus_common::Error = err.clone().into();
    assert_eq!(e.code.code(), code, "code of {err:?}");
    assert_eq!(err.is_fatal(), fatal, "fatality of {err:?}");
    assert!(
        e.message.contains(msg),
        "message {:?} lacks {msg:?}",
        e.message
    );
}
