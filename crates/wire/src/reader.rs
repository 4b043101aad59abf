//! A bounds-checked cursor over client bytes, and BSON document validation.
//!
//! Every read checks the remaining length first; nothing here indexes or allocates from an
//! unchecked client-supplied length.

use crate::{WireError, MAX_BSON_OBJECT_SIZE};
use bson::{RawArray, RawBsonRef, RawDocument};

/// MongoDB's `BSONObjMaxInternalSize`: the user limit plus 16 KiB headroom for command
/// wrappers.
pub const MAX_INTERNAL_OBJECT_SIZE: usize = MAX_BSON_OBJECT_SIZE + 16 * 1024;

/// MongoDB's default `maxBSONDepth`; also bounds the recursion of validation and of the
/// `Document` conversion, so a deeply nested document cannot overflow the stack.
pub const MAX_BSON_DEPTH: usize = 200;

/// Smallest valid BSON document: length prefix plus terminating NUL.
const MIN_BSON_SIZE: usize = 5;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Consumes exactly `n` bytes, or fails naming the field being read.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        let (head, tail) = self
            .buf
            .split_at_checked(n)
            .ok_or_else(|| truncated(what))?;
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        let bytes = self.take(N, what)?;
        bytes.try_into().map_err(|_| truncated(what))
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn i32(&mut self, what: &str) -> Result<i32, WireError> {
        self.array::<4>(what).map(i32::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    /// A NUL-terminated UTF-8 string; the NUL is consumed and not returned.
    pub(crate) fn cstr(&mut self, what: &str) -> Result<&'a str, WireError> {
        let nul = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| WireError::Malformed(format!("{what} is not NUL-terminated")))?;
        let bytes = self.take(nul + 1, what)?;
        let text = bytes.get(..nul).ok_or_else(|| truncated(what))?;
        std::str::from_utf8(text)
            .map_err(|_| WireError::Malformed(format!("{what} is not valid UTF-8")))
    }

    /// A complete, fully validated BSON document.
    pub(crate) fn document(&mut self, what: &str) -> Result<&'a RawDocument, WireError> {
        let prefix: [u8; 4] = self
            .buf
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| WireError::InvalidBson(format!("{what}: truncated BSON length")))?;
        let declared = i32::from_le_bytes(prefix);
        let len = usize::try_from(declared)
            .ok()
            .filter(|&n| n >= MIN_BSON_SIZE)
            .ok_or_else(|| {
                WireError::InvalidBson(format!("{what}: invalid BSON length {declared}"))
            })?;
        if len > MAX_INTERNAL_OBJECT_SIZE {
            return Err(WireError::ObjectTooLarge(len));
        }
        if len > self.buf.len() {
            return Err(WireError::InvalidBson(format!(
                "{what}: BSON length {len} extends past the end of the message"
            )));
        }
        let bytes = self.take(len, what)?;
        let doc = RawDocument::from_bytes(bytes).map_err(|e| invalid_bson(what, e))?;
        validate_document(doc, 1, what)?;
        Ok(doc)
    }
}

fn truncated(what: &str) -> WireError {
    WireError::Malformed(format!("message is truncated reading {what}"))
}

fn invalid_bson(what: &str, e: impl std::fmt::Display) -> WireError {
    WireError::InvalidBson(format!("{what}: invalid BSON: {e}"))
}

/// Walks every element (recursing into documents, arrays and code-with-scope), which makes
/// the `bson` crate check every type byte, length, cstring and UTF-8 string.
fn validate_document(doc: &RawDocument, depth: usize, what: &str) -> Result<(), WireError> {
    if depth > MAX_BSON_DEPTH {
        return Err(WireError::DepthExceeded);
    }
    for element in doc.iter() {
        let (_, value) = element.map_err(|e| invalid_bson(what, e))?;
        validate_value(value, depth, what)?;
    }
    Ok(())
}

fn validate_array(array: &RawArray, depth: usize, what: &str) -> Result<(), WireError> {
    if depth > MAX_BSON_DEPTH {
        return Err(WireError::DepthExceeded);
    }
    for value in array {
        validate_value(value.map_err(|e| invalid_bson(what, e))?, depth, what)?;
    }
    Ok(())
}

/// `depth` is that of the container holding `value`.
fn validate_value(value: RawBsonRef<'_>, depth: usize, what: &str) -> Result<(), WireError> {
    match value {
        RawBsonRef::Document(d) => validate_document(d, depth + 1, what),
        RawBsonRef::Array(a) => validate_array(a, depth + 1, what),
        RawBsonRef::JavaScriptCodeWithScope(c) => validate_document(c.scope, depth + 1, what),
        _ => Ok(()),
    }
}

/// Serializes a document the server or a test built.
///
/// `Document` serialization fails only for keys or regexes containing NUL, which no parsed
/// document can hold; should it happen anyway, the peer gets an InternalError reply instead
/// of a panic or a malformed frame.
pub(crate) fn document_bytes(doc: &bson::Document) -> Vec<u8> {
    bson::to_vec(doc).unwrap_or_else(|e| {
        let fallback = bson::doc! {
            "ok": 0.0,
            "errmsg": format!("failed to serialize reply: {e}"),
            "code": 1,
            "codeName": "InternalError",
        };
        // A document of plain string/number fields always serializes.
        bson::to_vec(&fallback).unwrap_or_default()
    })
}
