//! A bounds-checked cursor over client bytes, and BSON document validation.
//!
//! Every read checks the remaining length first; nothing here indexes or allocates from an
//! unchecked client-supplied length.

use crate::{WireError, MAX_BSON_OBJECT_SIZE};
use bson::{RawArray, RawBsonRef, RawDocument, RawDocumentBuf};

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
        if let Some(len) = crate::from_raw::validate_prefix(self.buf) {
            let bytes = self.take(len, what)?;
            return RawDocument::from_bytes(bytes).map_err(|e| invalid_bson(what, e));
        }
        self.checked_document(what)
    }

    /// A complete BSON document converted into a `Document` (repeated names as
    /// `nidus_common::repeated::document_from_raw` keeps them); `context` prefixes the
    /// message of a conversion error.
    pub(crate) fn converted_document(
        &mut self,
        what: &str,
        context: &str,
    ) -> Result<bson::Document, WireError> {
        if let Some((doc, len)) = crate::from_raw::convert_document(self.buf) {
            self.take(len, what)?;
            return Ok(doc);
        }
        let raw = self.checked_document(what)?;
        // Depth and validity were checked, so this conversion cannot recurse deeper than
        // MAX_BSON_DEPTH.
        nidus_common::repeated::document_from_raw(raw)
            .map_err(|e| WireError::InvalidBson(format!("{context}invalid BSON: {e}")))
    }

    /// An OP_MSG body as [`Reader::converted_document`] converts it, with its `$clusterTime`
    /// set aside unconverted when the fast path takes the body (see
    /// [`crate::from_raw::RawField`]).
    pub(crate) fn converted_body(
        &mut self,
        what: &str,
        context: &str,
    ) -> Result<(bson::Document, Option<crate::from_raw::RawField>), WireError> {
        if let Some((doc, aside, len)) = crate::from_raw::convert_body(self.buf) {
            self.take(len, what)?;
            return Ok((doc, aside));
        }
        self.converted_document(what, context)
            .map(|doc| (doc, None))
    }

    /// [`Reader::document`] through the `bson` crate's iterator: the reference the fast
    /// path in `from_raw` falls back on, and the source of every error message.
    pub(crate) fn checked_document(&mut self, what: &str) -> Result<&'a RawDocument, WireError> {
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

/// Writes `doc` as BSON, as `bson::to_vec` does but without serde (a reply's events, with
/// their timestamps, dates and ObjectIds, went through serde's struct machinery value by
/// value). Err for what it leaves to `bson::to_vec`: keys with NUL (an error there too),
/// regular expressions, code with scope and DBPointers.
fn write_document(out: &mut Vec<u8>, doc: &bson::Document) -> Result<(), ()> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (k, v) in doc {
        write_element(out, k, v)?;
    }
    finish_document(out, start)
}

fn finish_document(out: &mut Vec<u8>, start: usize) -> Result<(), ()> {
    out.push(0);
    let len = i32::try_from(out.len() - start).map_err(|_| ())?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn write_string(out: &mut Vec<u8>, s: &str) -> Result<(), ()> {
    let len = i32::try_from(s.len() + 1).map_err(|_| ())?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

fn write_element(out: &mut Vec<u8>, key: &str, v: &bson::Bson) -> Result<(), ()> {
    use bson::spec::BinarySubtype;
    use bson::Bson;
    if key.as_bytes().contains(&0) {
        return Err(());
    }
    out.push(v.element_type() as u8);
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    match v {
        Bson::Double(f) => out.extend_from_slice(&f.to_le_bytes()),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => write_string(out, s)?,
        Bson::Document(d) => write_document(out, d)?,
        Bson::Array(a) => {
            let start = out.len();
            out.extend_from_slice(&[0; 4]);
            let mut key = itoa_buf();
            for (i, v) in a.iter().enumerate() {
                write_element(out, index_key(&mut key, i), v)?;
            }
            finish_document(out, start)?;
        }
        Bson::Binary(b) => {
            let len = i32::try_from(b.bytes.len()).map_err(|_| ())?;
            if b.subtype == BinarySubtype::BinaryOld {
                out.extend_from_slice(&(len.checked_add(4).ok_or(())?).to_le_bytes());
                out.push(u8::from(b.subtype));
                out.extend_from_slice(&len.to_le_bytes());
            } else {
                out.extend_from_slice(&len.to_le_bytes());
                out.push(u8::from(b.subtype));
            }
            out.extend_from_slice(&b.bytes);
        }
        Bson::Undefined | Bson::Null | Bson::MinKey | Bson::MaxKey => {}
        Bson::ObjectId(id) => out.extend_from_slice(&id.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => out.extend_from_slice(&d.timestamp_millis().to_le_bytes()),
        Bson::Int32(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Timestamp(ts) => {
            out.extend_from_slice(&ts.increment.to_le_bytes());
            out.extend_from_slice(&ts.time.to_le_bytes());
        }
        Bson::Int64(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Decimal128(d) => out.extend_from_slice(&d.bytes()),
        Bson::RegularExpression(_) | Bson::JavaScriptCodeWithScope(_) | Bson::DbPointer(_) => {
            return Err(())
        }
    }
    Ok(())
}

/// `doc` with `batch` converted into its `cursor.firstBatch`/`cursor.nextBatch` (the
/// first one present), as `reply_bytes` writes it.
pub fn with_batch(doc: &bson::Document, batch: &[RawDocumentBuf]) -> bson::Document {
    use bson::Bson;
    let mut doc = doc.clone();
    if let Ok(cursor) = doc.get_document_mut("cursor") {
        let field = ["firstBatch", "nextBatch"]
            .into_iter()
            .find(|f| cursor.contains_key(*f));
        if let Some(field) = field {
            let docs = batch
                .iter()
                .map(|d| {
                    bson::Document::try_from(d.as_ref())
                        .map(Bson::Document)
                        .unwrap_or(Bson::Null)
                })
                .collect();
            cursor.insert(field, Bson::Array(docs));
        }
    }
    doc
}

fn itoa_buf() -> String {
    String::with_capacity(8)
}

/// The key of array element `i` ("0", "1", ...), written into `buf`.
fn index_key(buf: &mut String, i: usize) -> &str {
    use std::fmt::Write;
    buf.clear();
    let _ = write!(buf, "{i}");
    buf.as_str()
}

/// Writes a cursor reply `doc` whose `cursor.firstBatch` or `cursor.nextBatch` is an empty
/// array standing for `batch`: that array is written with `batch`'s documents as they are
/// (no conversion to `Bson` and back). Err when `doc` has no such placeholder, or holds what
/// `write_document` leaves to `bson::to_vec`.
fn write_with_batch(
    out: &mut Vec<u8>,
    doc: &bson::Document,
    batch: &[RawDocumentBuf],
) -> Result<(), ()> {
    use bson::Bson;
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut spliced = false;
    for (k, v) in doc {
        let Bson::Document(cursor) = v else {
            write_element(out, k, v)?;
            continue;
        };
        if k != "cursor" {
            write_element(out, k, v)?;
            continue;
        }
        out.push(bson::spec::ElementType::EmbeddedDocument as u8);
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        let cursor_start = out.len();
        out.extend_from_slice(&[0; 4]);
        for (ck, cv) in cursor {
            let placeholder = matches!(cv, Bson::Array(a) if a.is_empty());
            if !spliced && placeholder && (ck == "firstBatch" || ck == "nextBatch") {
                out.push(bson::spec::ElementType::Array as u8);
                out.extend_from_slice(ck.as_bytes());
                out.push(0);
                let array_start = out.len();
                out.extend_from_slice(&[0; 4]);
                let mut key = itoa_buf();
                for (i, d) in batch.iter().enumerate() {
                    out.push(bson::spec::ElementType::EmbeddedDocument as u8);
                    out.extend_from_slice(index_key(&mut key, i).as_bytes());
                    out.push(0);
                    out.extend_from_slice(d.as_bytes());
                }
                finish_document(out, array_start)?;
                spliced = true;
            } else {
                write_element(out, ck, cv)?;
            }
        }
        finish_document(out, cursor_start)?;
    }
    if !spliced {
        return Err(());
    }
    finish_document(out, start)
}

/// Serializes a document the server or a test built.
///
/// `Document` serialization fails only for keys or regexes containing NUL, which no parsed
/// document can hold; should it happen anyway, the peer gets an InternalError reply instead
/// of a panic or a malformed frame.
pub(crate) fn document_bytes(doc: &bson::Document) -> Vec<u8> {
    reply_bytes(doc, &[], &[])
}

/// `doc` (a whole serialized document) with the raw BSON elements `elements` after its own,
/// as if they had been appended to it last.
fn append_elements(mut doc: Vec<u8>, elements: &[u8]) -> Vec<u8> {
    if elements.is_empty() || doc.len() < 5 {
        return doc;
    }
    doc.pop();
    doc.extend_from_slice(elements);
    doc.push(0);
    match i32::try_from(doc.len()) {
        Ok(len) => doc[..4].copy_from_slice(&len.to_le_bytes()),
        Err(_) => {
            return bson::to_vec(&bson::doc! {
                "ok": 0.0,
                "errmsg": "reply too large",
                "code": 1,
                "codeName": "InternalError",
            })
            .unwrap_or_default()
        }
    }
    doc
}

/// Serializes a reply; a non-empty `batch` is the content of the reply's empty
/// `cursor.firstBatch` or `cursor.nextBatch` array (see `write_with_batch`), and `trailer`
/// raw BSON elements written after the body's own (see [`append_elements`]).
pub(crate) fn reply_bytes(
    doc: &bson::Document,
    batch: &[RawDocumentBuf],
    trailer: &[u8],
) -> Vec<u8> {
    append_elements(body_bytes(doc, batch), trailer)
}

fn body_bytes(doc: &bson::Document, batch: &[RawDocumentBuf]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(256 + batch.iter().map(|d| d.as_bytes().len() + 8).sum::<usize>());
    let written = if batch.is_empty() {
        write_document(&mut out, doc)
    } else {
        write_with_batch(&mut out, doc, batch)
    };
    if written.is_ok() {
        return out;
    }
    if !batch.is_empty() {
        // The slow way: the batch converted into the document, then serialized.
        return document_bytes(&with_batch(doc, batch));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;
    use bson::{doc, Bson, Document};

    fn every_type() -> Document {
        doc! {
            "double": -1.5, "nan": f64::NAN, "string": "héllo", "empty": "",
            "doc": {"a": 1, "b": {"c": null}}, "emptydoc": {}, "emptyarr": [],
            "array": (0..120).map(Bson::Int32).collect::<Vec<_>>(),
            "nested": [[1], {"x": [true, {"y": "z"}]}],
            "bin": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "old": bson::Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
            "user": bson::Binary { subtype: BinarySubtype::UserDefined(0x85), bytes: vec![] },
            "uuid": bson::Uuid::new(), "oid": bson::oid::ObjectId::new(), "t": true, "f": false,
            "date": bson::DateTime::from_millis(-12345), "null": null, "undefined": Bson::Undefined,
            "code": Bson::JavaScriptCode("x + 1".into()), "symbol": Bson::Symbol("s".into()),
            "int": i32::MIN, "ts": Bson::Timestamp(bson::Timestamp { time: 7, increment: 9 }),
            "long": i64::MAX, "dec": Bson::Decimal128(bson::Decimal128::from_bytes([3; 16])),
            "min": Bson::MinKey, "max": Bson::MaxKey,
        }
    }

    #[test]
    fn documents_are_written_as_bson_encodes_them() {
        let all = every_type();
        for (k, v) in &all {
            let one = doc! { k.clone(): v.clone(), "then": 1 };
            assert_eq!(document_bytes(&one), bson::to_vec(&one).unwrap(), "{k}");
            let in_array = doc! { "a": [v.clone(), v.clone()] };
            assert_eq!(
                document_bytes(&in_array),
                bson::to_vec(&in_array).unwrap(),
                "{k}"
            );
        }
        assert_eq!(document_bytes(&all), bson::to_vec(&all).unwrap());
        // A change stream reply's shape.
        let reply = doc! { "cursor": { "nextBatch": [all.clone(), all], "id": 5i64, "ns": "d.c" },
        "ok": 1.0 };
        assert_eq!(document_bytes(&reply), bson::to_vec(&reply).unwrap());
    }

    #[test]
    fn a_batch_passed_raw_is_written_as_the_converted_reply() {
        let all = every_type();
        let batch: Vec<RawDocumentBuf> = (0..12)
            .map(|i| {
                let mut d = all.clone();
                d.insert("i", i);
                nidus_common::encode::document_to_raw(&d).unwrap()
            })
            .collect();
        for field in ["firstBatch", "nextBatch"] {
            let reply = doc! {
                "cursor": { field: [], "id": 5i64, "ns": "d.c", "atClusterTime": bson::Timestamp { time: 1, increment: 2 } },
                "ok": 1.0, "$clusterTime": { "clusterTime": bson::Timestamp { time: 1, increment: 2 } },
            };
            let expected = bson::to_vec(&with_batch(&reply, &batch)).unwrap();
            assert_eq!(reply_bytes(&reply, &batch, &[]), expected, "{field}");
            let back: Document = bson::from_slice(&expected).unwrap();
            let docs = back
                .get_document("cursor")
                .unwrap()
                .get_array(field)
                .unwrap();
            assert_eq!(docs.len(), 12);
            assert_eq!(docs[11].as_document().unwrap().get_i32("i").unwrap(), 11);
            // An empty batch is the reply as it is.
            assert_eq!(reply_bytes(&reply, &[], &[]), bson::to_vec(&reply).unwrap());
        }
        // Without a placeholder, and with what the fast writer leaves to `bson`, the batch
        // still goes in.
        let odd = doc! { "cursor": { "nextBatch": [], "id": 0i64 },
        "re": bson::Regex { pattern: "a".into(), options: "i".into() } };
        let expected = bson::to_vec(&with_batch(&odd, &batch)).unwrap();
        assert_eq!(reply_bytes(&odd, &batch, &[]), expected);
        let none = doc! { "cursor": { "id": 0i64 }, "ok": 1.0 };
        assert_eq!(
            reply_bytes(&none, &batch, &[]),
            bson::to_vec(&none).unwrap()
        );
    }

    #[test]
    fn trailing_elements_come_out_as_fields_appended_to_the_reply() {
        let appended = doc! { "$clusterTime": { "clusterTime": bson::Timestamp { time: 7, increment: 3 } },
        "operationTime": bson::Timestamp { time: 7, increment: 3 } };
        let whole = bson::to_vec(&appended).unwrap();
        let trailer = &whole[4..whole.len() - 1];
        let batch =
            vec![nidus_common::encode::document_to_raw(&doc! { "_id": 1, "s": "x" }).unwrap()];
        let replies = [
            (doc! { "ok": 1.0 }, vec![]),
            (doc! {}, vec![]),
            (
                doc! { "cursor": { "firstBatch": [], "id": 0i64, "ns": "d.c" }, "ok": 1.0 },
                batch.clone(),
            ),
            (
                doc! { "cursor": { "nextBatch": [], "id": 0i64 }, "ok": 1.0 },
                vec![],
            ),
            // What the fast writer leaves to `bson`, with and without a batch.
            (
                doc! { "re": bson::Regex { pattern: "a".into(), options: "i".into() }, "ok": 1.0 },
                vec![],
            ),
            (
                doc! { "cursor": { "nextBatch": [], "id": 0i64 },
                "re": bson::Regex { pattern: "a".into(), options: "i".into() } },
                batch,
            ),
        ];
        for (reply, batch) in replies {
            let mut expected = with_batch(&reply, &batch);
            expected.extend(appended.clone());
            assert_eq!(
                reply_bytes(&reply, &batch, trailer),
                bson::to_vec(&expected).unwrap(),
                "{reply}"
            );
        }
    }

    #[test]
    fn what_it_leaves_to_bson_comes_out_the_same() {
        let others = doc! {
            "re": bson::Regex { pattern: "a.b".into(), options: "mi".into() },
            "scope": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "x".into(), scope: doc! {"x": 1},
            }),
        };
        assert_eq!(document_bytes(&others), bson::to_vec(&others).unwrap());
        let mut out = Vec::new();
        assert!(write_document(&mut out, &others).is_err());
        // A key with NUL fails in bson too: the InternalError reply.
        let bad = doc! { "a\0b": 1 };
        assert!(bson::to_vec(&bad).is_err());
        let reply = bson::from_slice::<Document>(&document_bytes(&bad)).unwrap();
        assert_eq!(reply.get_str("codeName"), Ok("InternalError"));
    }
}
