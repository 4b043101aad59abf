//! Raw BSON → `bson::Document` without the `bson` crate's element iterator: one pass that
//! validates and builds (the OP_MSG and OP_QUERY bodies), or validates only (document
//! sequences, [`crate::validate_document`]).
//!
//! This is a fast path, not a second definition of valid BSON: it accepts a subset of what
//! the validating path in `reader.rs` accepts (it is at least as strict at every check) and
//! answers `None` for anything else, including the rare types it leaves alone (DBPointer,
//! code with scope). The caller then runs the old path, which produces the value or the
//! exact error as before. So a malformed message gets the same error by construction, and a
//! document both accept converts to the same `Document` (differential tests below).
//!
//! Conversion keeps `nidus_common::repeated::document_from_raw`'s rules: the top level keeps
//! the last value of a repeated name (at the first one's position); below it, a repetition
//! is stored under `name` + `MARK` + number.

use crate::reader::{MAX_BSON_DEPTH, MAX_INTERNAL_OBJECT_SIZE};
use bson::document::Entry;
use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{
    Binary, Bson, DateTime, Decimal128, Document, RawBsonRef, RawDocumentBuf, RawRegexRef,
    Timestamp,
};
use nidus_common::repeated::MARK;
use std::borrow::Cow;
use std::sync::LazyLock;

/// The input is not something this fast path takes: use the validating path.
struct Bail;

type Fast<T> = Result<T, Bail>;

const MIN_BSON_SIZE: usize = 5;

/// A value's bytes, checked as the `bson` crate checks them when iterating.
enum Value<'a> {
    Double(f64),
    String(&'a str),
    /// A whole embedded document (length prefix to terminator).
    Document(&'a [u8]),
    Array(&'a [u8]),
    Binary(BinarySubtype, &'a [u8]),
    Undefined,
    ObjectId([u8; 12]),
    Boolean(bool),
    DateTime(i64),
    Null,
    Regex(&'a str, &'a str),
    Code(&'a str),
    Symbol(&'a str),
    Int32(i32),
    Timestamp(u32, u32),
    Int64(i64),
    Decimal128([u8; 16]),
    MinKey,
    MaxKey,
}

fn fixed<const N: usize>(bytes: &[u8], at: usize) -> Fast<[u8; N]> {
    bytes
        .get(at..at.checked_add(N).ok_or(Bail)?)
        .and_then(|b| b.try_into().ok())
        .ok_or(Bail)
}

fn i32_at(bytes: &[u8], at: usize) -> Fast<i32> {
    fixed::<4>(bytes, at).map(i32::from_le_bytes)
}

/// `b` as text when it is UTF-8.
fn utf8(b: &[u8]) -> Fast<&str> {
    nidus_common::utf8(b).ok_or(Bail)
}

/// A NUL-terminated UTF-8 string starting at `at`, and the position after its NUL.
fn cstr_at(bytes: &[u8], at: usize) -> Fast<(&str, usize)> {
    let rest = bytes.get(at..).ok_or(Bail)?;
    let nul = rest.iter().position(|&b| b == 0).ok_or(Bail)?;
    Ok((utf8(&rest[..nul])?, at + nul + 1))
}

/// An `int32 length, bytes, NUL` string starting at `at`.
fn string_at(bytes: &[u8], at: usize) -> Fast<(&str, usize)> {
    let len = usize::try_from(i32_at(bytes, at)?).map_err(|_| Bail)?;
    if len == 0 {
        return Err(Bail);
    }
    let start = at + 4;
    let end = start.checked_add(len).ok_or(Bail)?;
    let body = bytes.get(start..end).ok_or(Bail)?;
    let (nul, text) = body.split_last().ok_or(Bail)?;
    if *nul != 0 {
        return Err(Bail);
    }
    Ok((utf8(text)?, end))
}

/// The length of the document starting at `at` within `bytes`: at least 5, in bounds, NUL
/// terminated.
fn document_len(bytes: &[u8], at: usize) -> Fast<usize> {
    let len = usize::try_from(i32_at(bytes, at)?).map_err(|_| Bail)?;
    if !(MIN_BSON_SIZE..=MAX_INTERNAL_OBJECT_SIZE).contains(&len) {
        return Err(Bail);
    }
    let end = at.checked_add(len).ok_or(Bail)?;
    match bytes.get(end - 1) {
        Some(0) => Ok(len),
        _ => Err(Bail),
    }
}

/// Reads the value of type `tag` at `at`; `bytes` ends before the enclosing document's
/// terminator, so no value may overlap it. Returns the value and the position after it.
fn value_at(bytes: &[u8], tag: u8, at: usize) -> Fast<(Value<'_>, usize)> {
    Ok(match tag {
        0x01 => (Value::Double(f64::from_le_bytes(fixed(bytes, at)?)), at + 8),
        0x02 => string_at(bytes, at).map(|(s, end)| (Value::String(s), end))?,
        0x03 | 0x04 => {
            let len = document_len(bytes, at)?;
            let doc = &bytes[at..at + len];
            let value = if tag == 0x03 {
                Value::Document(doc)
            } else {
                Value::Array(doc)
            };
            (value, at + len)
        }
        0x05 => {
            let len = usize::try_from(i32_at(bytes, at)?).map_err(|_| Bail)?;
            if len + 5 >= i32::MAX as usize {
                return Err(Bail);
            }
            let subtype = *bytes.get(at + 4).ok_or(Bail)?;
            let start = at + 5;
            let data = bytes.get(start..start + len).ok_or(Bail)?;
            let subtype = BinarySubtype::from(subtype);
            let data = if subtype == BinarySubtype::BinaryOld {
                let inner = usize::try_from(i32_at(data, 0)?).map_err(|_| Bail)?;
                if inner.checked_add(4) != Some(len) {
                    return Err(Bail);
                }
                &data[4..]
            } else {
                data
            };
            (Value::Binary(subtype, data), start + len)
        }
        0x06 => (Value::Undefined, at),
        0x07 => (Value::ObjectId(fixed(bytes, at)?), at + 12),
        0x08 => match bytes.get(at) {
            Some(0) => (Value::Boolean(false), at + 1),
            Some(1) => (Value::Boolean(true), at + 1),
            _ => return Err(Bail),
        },
        0x09 => (
            Value::DateTime(i64::from_le_bytes(fixed(bytes, at)?)),
            at + 8,
        ),
        0x0A => (Value::Null, at),
        0x0B => {
            let (pattern, next) = cstr_at(bytes, at)?;
            let (options, end) = cstr_at(bytes, next)?;
            (Value::Regex(pattern, options), end)
        }
        0x0D => string_at(bytes, at).map(|(s, end)| (Value::Code(s), end))?,
        0x0E => string_at(bytes, at).map(|(s, end)| (Value::Symbol(s), end))?,
        0x10 => (Value::Int32(i32::from_le_bytes(fixed(bytes, at)?)), at + 4),
        0x11 => {
            let raw: [u8; 8] = fixed(bytes, at)?;
            let increment = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
            let time = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
            (Value::Timestamp(time, increment), at + 8)
        }
        0x12 => (Value::Int64(i64::from_le_bytes(fixed(bytes, at)?)), at + 8),
        0x13 => (Value::Decimal128(fixed(bytes, at)?), at + 16),
        0x7F => (Value::MaxKey, at),
        0xFF => (Value::MinKey, at),
        // DBPointer, code with scope, and invalid tags: the validating path.
        _ => return Err(Bail),
    })
}

/// Walks the elements of the document `doc` (length prefix to terminator, length already
/// checked), calling `f(key, value)` for each.
fn for_each_element<'a>(
    doc: &'a [u8],
    mut f: impl FnMut(&'a str, Value<'a>) -> Fast<()>,
) -> Fast<()> {
    // Everything but the terminator: no element may reach into it.
    let content = &doc[..doc.len() - 1];
    let mut pos = 4;
    while pos < content.len() {
        let tag = content[pos];
        let (key, at) = cstr_at(content, pos + 1)?;
        let (value, end) = value_at(content, tag, at)?;
        f(key, value)?;
        pos = end;
    }
    Ok(())
}

/// Checks a nested container's depth as `reader::validate_document` does.
fn check_depth(depth: usize) -> Fast<()> {
    if depth > MAX_BSON_DEPTH {
        Err(Bail)
    } else {
        Ok(())
    }
}

/// `buf` starts with a document: `Some((document, its length))` when the fast path takes it,
/// `None` to use the validating path (which then returns the same document or the error).
pub(crate) fn convert_document(buf: &[u8]) -> Option<(Document, usize)> {
    let len = document_len(buf, 0).ok()?;
    let doc = build_document(&buf[..len], 1, true).ok()?;
    Some((doc, len))
}

/// A document already validated (a kind-1 section's) converted as
/// `nidus_common::repeated::document_from_raw` converts it, through the fast path when it
/// takes the document.
pub fn document_from_raw(raw: &bson::RawDocument) -> Result<Document, bson::raw::Error> {
    let bytes = raw.as_bytes();
    match convert_document(bytes) {
        Some((doc, len)) if len == bytes.len() => Ok(doc),
        _ => nidus_common::repeated::document_from_raw(raw),
    }
}

/// `buf` starts with a document: `Some(its length)` when the fast path validates it.
pub(crate) fn validate_prefix(buf: &[u8]) -> Option<usize> {
    let len = document_len(buf, 0).ok()?;
    validate(&buf[..len], 1).ok()?;
    Some(len)
}

fn validate(doc: &[u8], depth: usize) -> Fast<()> {
    check_depth(depth)?;
    for_each_element(doc, |_, value| match value {
        Value::Document(d) | Value::Array(d) => validate(d, depth + 1),
        _ => Ok(()),
    })
}

/// Empty documents to clone. A clone copies the hasher's keys where `Document::new` seeds a
/// new hasher, and keeps the table's capacity, so most documents are built without growing.
static EMPTY: LazyLock<Document> = LazyLock::new(Document::new);
static SIZED: LazyLock<Document> = LazyLock::new(|| {
    let mut d = Document::new();
    for i in 0..8 {
        d.insert(i.to_string(), Bson::Null);
    }
    d.clear();
    d
});

/// A request body's field kept as its bytes instead of being converted: `$clusterTime`, which
/// drivers send with every command to a replica set member and the server only shows back
/// (no keys sign cluster times here, so it never advances its clock from one), as MongoDB
/// shows it in `currentOp` and the profiler.
#[derive(Debug, Clone, PartialEq)]
pub struct RawField {
    /// Its place among the body's fields.
    pub position: usize,
    pub value: RawDocumentBuf,
}

impl RawField {
    /// `body` as the client sent it: with `field` (its set-aside `$clusterTime`, if any) back
    /// in its place.
    pub fn restore<'d>(field: Option<&RawField>, body: &'d Document) -> Cow<'d, Document> {
        match field {
            Some(field) => Cow::Owned(field.put_back(body)),
            None => Cow::Borrowed(body),
        }
    }

    /// `body` with this field in its place, converted.
    pub fn put_back(&self, body: &Document) -> Document {
        // Converted as a field of the body, so repeated names in it are kept as in any
        // document below the top level.
        let mut wrapper = RawDocumentBuf::new();
        wrapper.append(CLUSTER_TIME, self.value.clone());
        let value = nidus_common::repeated::document_from_raw(&wrapper)
            .ok()
            .and_then(|mut d| d.remove(CLUSTER_TIME))
            .unwrap_or(Bson::Null);
        let mut out = Document::new();
        let mut value = Some(value);
        for (i, (k, v)) in body.iter().enumerate() {
            if i == self.position {
                if let Some(value) = value.take() {
                    out.insert(CLUSTER_TIME, value);
                }
            }
            out.insert(k.clone(), v.clone());
        }
        if let Some(value) = value {
            out.insert(CLUSTER_TIME, value);
        }
        out
    }
}

/// The body field [`RawField`] keeps.
pub const CLUSTER_TIME: &str = "$clusterTime";

/// `buf` starts with a request body: as [`convert_document`], with a `$clusterTime` document
/// (given once) set aside unconverted.
pub(crate) fn convert_body(buf: &[u8]) -> Option<(Document, Option<RawField>, usize)> {
    let len = document_len(buf, 0).ok()?;
    let mut aside = None;
    let doc = build_document_with(&buf[..len], 1, true, Some(&mut aside)).ok()?;
    Some((doc, aside, len))
}

fn build_document(doc: &[u8], depth: usize, top: bool) -> Fast<Document> {
    build_document_with(doc, depth, top, None)
}

/// `aside`, at the top level: where a `$clusterTime` document goes instead of the result. A
/// repeated `$clusterTime` bails (the validating path keeps the last value, converted).
fn build_document_with(
    doc: &[u8],
    depth: usize,
    top: bool,
    mut aside: Option<&mut Option<RawField>>,
) -> Fast<Document> {
    check_depth(depth)?;
    let mut out = if doc.len() <= MIN_BSON_SIZE {
        EMPTY.clone()
    } else {
        SIZED.clone()
    };
    for_each_element(doc, |key, value| {
        if let Some(slot) = aside.as_deref_mut().filter(|_| key == CLUSTER_TIME) {
            if slot.is_some() || out.contains_key(key) {
                return Err(Bail);
            }
            if let Value::Document(bytes) = value {
                validate(bytes, depth + 1)?;
                *slot = Some(RawField {
                    position: out.len(),
                    value: RawDocumentBuf::from_bytes(bytes.to_vec()).map_err(|_| Bail)?,
                });
                return Ok(());
            }
        }
        let value = build_value(value, depth)?;
        if top {
            out.insert(key.to_owned(), value);
            return Ok(());
        }
        match out.entry(key.to_owned()) {
            vacant @ Entry::Vacant(_) => {
                vacant.or_insert(value);
            }
            Entry::Occupied(_) => {
                let mut n = 1;
                while out.contains_key(format!("{key}{MARK}{n}")) {
                    n += 1;
                }
                out.insert(format!("{key}{MARK}{n}"), value);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

fn build_array(doc: &[u8], depth: usize) -> Fast<Vec<Bson>> {
    check_depth(depth)?;
    let mut out = Vec::new();
    for_each_element(doc, |_, value| {
        out.push(build_value(value, depth)?);
        Ok(())
    })?;
    Ok(out)
}

/// `depth` is that of the container holding `value`.
fn build_value(value: Value<'_>, depth: usize) -> Fast<Bson> {
    Ok(match value {
        Value::Double(f) => Bson::Double(f),
        Value::String(s) => Bson::String(s.to_owned()),
        Value::Document(d) => Bson::Document(build_document(d, depth + 1, false)?),
        Value::Array(d) => Bson::Array(build_array(d, depth + 1)?),
        Value::Binary(subtype, bytes) => Bson::Binary(Binary {
            subtype,
            bytes: bytes.to_vec(),
        }),
        Value::Undefined => Bson::Undefined,
        Value::ObjectId(b) => Bson::ObjectId(ObjectId::from_bytes(b)),
        Value::Boolean(b) => Bson::Boolean(b),
        Value::DateTime(ms) => Bson::DateTime(DateTime::from_millis(ms)),
        Value::Null => Bson::Null,
        // As the old path converts it (bson decides how options are stored).
        Value::Regex(pattern, options) => {
            let raw = RawBsonRef::RegularExpression(RawRegexRef { pattern, options });
            Bson::try_from(raw.to_raw_bson()).map_err(|_| Bail)?
        }
        Value::Code(s) => Bson::JavaScriptCode(s.to_owned()),
        Value::Symbol(s) => Bson::Symbol(s.to_owned()),
        Value::Int32(n) => Bson::Int32(n),
        Value::Timestamp(time, increment) => Bson::Timestamp(Timestamp { time, increment }),
        Value::Int64(n) => Bson::Int64(n),
        Value::Decimal128(b) => Bson::Decimal128(Decimal128::from_bytes(b)),
        Value::MinKey => Bson::MinKey,
        Value::MaxKey => Bson::MaxKey,
    })
}

#[cfg(test)]
mod tests {
    use crate::reader::Reader;
    use crate::WireError;
    use bson::spec::BinarySubtype;
    use bson::{doc, rawdoc, Bson, Document, RawBson, RawDocumentBuf};
    use proptest::prelude::*;

    /// The conversion as it was: `bson`'s iterator validates, `document_from_raw` converts.
    fn old_convert(bytes: &[u8]) -> Result<(Document, usize), WireError> {
        let mut r = Reader::new(bytes);
        let raw = r.checked_document("OP_MSG body")?;
        let doc = nidus_common::repeated::document_from_raw(raw)
            .map_err(|e| WireError::InvalidBson(format!("OP_MSG body: invalid BSON: {e}")))?;
        Ok((doc, bytes.len() - r.remaining()))
    }

    fn new_convert(bytes: &[u8]) -> Result<(Document, usize), WireError> {
        let mut r = Reader::new(bytes);
        let doc = r.converted_document("OP_MSG body", "OP_MSG body: ")?;
        Ok((doc, bytes.len() - r.remaining()))
    }

    /// A request body's conversion, its `$clusterTime` (if set aside) put back in its place.
    fn body_convert(bytes: &[u8]) -> Result<(Document, usize), WireError> {
        let mut r = Reader::new(bytes);
        let (doc, aside) = r.converted_body("OP_MSG body", "OP_MSG body: ")?;
        let doc = super::RawField::restore(aside.as_ref(), &doc).into_owned();
        Ok((doc, bytes.len() - r.remaining()))
    }

    /// Documents compared by their encoding (NaN payloads, -0.0, order, key spelling).
    fn same(a: &Result<(Document, usize), WireError>, b: &Result<(Document, usize), WireError>) {
        match (a, b) {
            (Ok((da, la)), Ok((db, lb))) => {
                assert_eq!(la, lb);
                assert_eq!(format!("{da:?}"), format!("{db:?}"));
                assert_eq!(bson::to_vec(da).unwrap(), bson::to_vec(db).unwrap());
            }
            _ => assert_eq!(a, b),
        }
    }

    /// Both conversions, and both validations (sequences), agree on `bytes`.
    fn check(bytes: &[u8]) {
        same(&new_convert(bytes), &old_convert(bytes));
        same(&body_convert(bytes), &old_convert(bytes));
        if let Ok(raw) = bson::RawDocument::from_bytes(bytes) {
            let old = nidus_common::repeated::document_from_raw(raw);
            let new = super::document_from_raw(raw);
            match (&old, &new) {
                (Ok(o), Ok(n)) => assert_eq!(bson::to_vec(o).unwrap(), bson::to_vec(n).unwrap()),
                _ => assert_eq!(old.is_ok(), new.is_ok()),
            }
        }
        let fast = Reader::new(bytes)
            .document("document sequence")
            .map(|d| d.as_bytes());
        let slow = Reader::new(bytes)
            .checked_document("document sequence")
            .map(|d| d.as_bytes());
        assert_eq!(fast, slow);
    }

    fn every_type() -> Document {
        doc! {
            "double": -1.5, "nan": f64::NAN, "negzero": -0.0, "inf": f64::INFINITY,
            "string": "héllo", "empty": "", "nul inside": "a\0b",
            "doc": {"a": 1, "b": {"c": null}}, "emptydoc": {}, "emptyarr": [],
            "array": (0..120).map(Bson::Int32).collect::<Vec<_>>(),
            "nested": [[1], {"x": [true, {"y": "z"}]}, [], {}],
            "bin": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "old": bson::Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![1, 2, 3] },
            "user": bson::Binary { subtype: BinarySubtype::UserDefined(0x85), bytes: vec![] },
            "uuid": bson::Uuid::new(), "oid": bson::oid::ObjectId::new(), "t": true, "f": false,
            "date": bson::DateTime::from_millis(-12345), "null": null, "undefined": Bson::Undefined,
            "re": bson::Regex { pattern: "a.b".into(), options: "xmi".into() },
            "code": Bson::JavaScriptCode("x + 1".into()), "symbol": Bson::Symbol("s".into()),
            "int": i32::MIN, "ts": Bson::Timestamp(bson::Timestamp { time: 7, increment: 9 }),
            "long": i64::MAX, "dec": Bson::Decimal128(bson::Decimal128::from_bytes([3; 16])),
            "min": Bson::MinKey, "max": Bson::MaxKey, "ключ 🔑": "ü", "": "empty key",
        }
    }

    #[test]
    fn a_cluster_time_set_aside_is_put_back_as_converted() {
        let ct = doc! { "clusterTime": bson::Timestamp { time: 5, increment: 1 },
        "signature": { "hash": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 0i64 } };
        let mut repeated_inside = RawDocumentBuf::new();
        repeated_inside.append("a", 1);
        repeated_inside.append("a", rawdoc! { "b": 2 });
        let body = |fields: Vec<(&str, RawBson)>| {
            let mut d = RawDocumentBuf::new();
            for (k, v) in fields {
                d.append(k, v);
            }
            d.into_bytes()
        };
        let ct_raw = || RawBson::Document(nidus_common::encode::document_to_raw(&ct).unwrap());
        let cases: Vec<(Vec<u8>, bool)> = vec![
            // (body, whether the fast path sets `$clusterTime` aside)
            (
                body(vec![
                    ("find", "c".into()),
                    ("$clusterTime", ct_raw()),
                    ("$db", "d".into()),
                ]),
                true,
            ),
            (
                body(vec![("$clusterTime", ct_raw()), ("ping", 1.into())]),
                true,
            ),
            (
                body(vec![("ping", 1.into()), ("$clusterTime", ct_raw())]),
                true,
            ),
            (
                body(vec![
                    ("ping", 1.into()),
                    ("a", 1.into()),
                    ("a", 2.into()),
                    ("$clusterTime", ct_raw()),
                ]),
                true,
            ),
            (
                body(vec![
                    ("ping", 1.into()),
                    ("$clusterTime", RawBson::Document(repeated_inside)),
                ]),
                true,
            ),
            (
                body(vec![
                    ("ping", 1.into()),
                    ("$clusterTime", RawBson::Document(RawDocumentBuf::new())),
                ]),
                true,
            ),
            // Not a document: converted as any field.
            (
                body(vec![("ping", 1.into()), ("$clusterTime", 5.into())]),
                false,
            ),
            // Repeated: the validating path keeps the last value.
            (
                body(vec![
                    ("ping", 1.into()),
                    ("$clusterTime", ct_raw()),
                    ("$clusterTime", ct_raw()),
                ]),
                false,
            ),
            (
                body(vec![
                    ("ping", 1.into()),
                    ("$clusterTime", 5.into()),
                    ("$clusterTime", ct_raw()),
                ]),
                false,
            ),
            (
                body(vec![
                    ("ping", 1.into()),
                    ("$clusterTime", ct_raw()),
                    ("x", 1.into()),
                    ("$clusterTime", 5.into()),
                ]),
                false,
            ),
            (body(vec![("ping", 1.into())]), false),
        ];
        for (bytes, aside) in cases {
            check(&bytes);
            let field = super::convert_body(&bytes).and_then(|(_, field, _)| field);
            assert_eq!(field.is_some(), aside, "{bytes:?}");
            if let Some(field) = field {
                let mut r = Reader::new(&bytes);
                let (without, _) = r.converted_body("OP_MSG body", "").unwrap();
                assert!(!without.contains_key("$clusterTime"));
                assert_eq!(
                    without.keys().nth(field.position),
                    old_convert(&bytes)
                        .unwrap()
                        .0
                        .keys()
                        .nth(field.position + 1)
                );
            }
        }
        // A malformed `$clusterTime` gets the validating path's error.
        let mut bad = body(vec![
            ("ping", 1.into()),
            ("$clusterTime", ct_raw()),
            ("$db", "d".into()),
        ]);
        let at = bad.windows(5).position(|w| w == b"keyId").unwrap();
        bad[at - 1] = 0x20;
        check(&bad);
        assert!(old_convert(&bad).is_err());
    }

    #[test]
    fn every_type_converts_as_bson_does_and_takes_the_fast_path() {
        let all = every_type();
        let bytes = bson::to_vec(&all).unwrap();
        assert!(super::convert_document(&bytes).is_some());
        assert!(super::validate_prefix(&bytes).is_some());
        check(&bytes);
        for (k, v) in &all {
            for d in [
                doc! { k.clone(): v.clone(), "then": 1 },
                doc! { "a": [v.clone(), v.clone()], "d": { k.clone(): v.clone() } },
            ] {
                let bytes = bson::to_vec(&d).unwrap();
                assert!(super::convert_document(&bytes).is_some(), "{k}");
                check(&bytes);
                // With bytes after it, as in a message with more sections.
                let mut longer = bytes.clone();
                longer.extend_from_slice(&[1, 0, 0, 0, 0, 9]);
                check(&longer);
            }
        }
        let mut empty = Vec::new();
        Document::new().to_writer(&mut empty).unwrap();
        check(&empty);
    }

    #[test]
    fn types_it_leaves_alone_take_the_old_path() {
        let scope = doc! {
            "scope": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "x".into(), scope: doc! {"x": 1, "y": {"z": [1]}},
            }),
        };
        // {p: DBPointer("ns", ObjectId(1 x 12))}
        let mut pointer = vec![0, 0, 0, 0, 0x0C, b'p', 0, 3, 0, 0, 0, b'n', b's', 0];
        pointer.extend_from_slice(&[1; 12]);
        pointer.push(0);
        pointer[0] = pointer.len() as u8;
        for bytes in [bson::to_vec(&scope).unwrap(), pointer] {
            assert!(super::convert_document(&bytes).is_none());
            assert!(new_convert(&bytes).is_ok());
            check(&bytes);
        }
    }

    #[test]
    fn repeated_names_are_kept_as_document_from_raw_keeps_them() {
        let mut inner = rawdoc! {"a": 1, "b": 2};
        inner.append("a", rawdoc! {"$gt": 5});
        inner.append("a", 3);
        inner.append("a\u{FFFF}1", "taken");
        inner.append("a", 4);
        let mut arr = bson::RawArrayBuf::new();
        arr.push(inner.clone());
        arr.push(inner.clone());
        let mut top = rawdoc! {"filter": inner.clone(), "x": 1};
        top.append("filter", inner);
        top.append("arr", arr);
        top.append("x", 2);
        let bytes = top.into_bytes();
        assert!(super::convert_document(&bytes).is_some());
        check(&bytes);
        let (d, _) = new_convert(&bytes).unwrap();
        let keys: Vec<_> = d.get_document("filter").unwrap().keys().cloned().collect();
        // The literal "a\u{FFFF}1" comes after a repetition took that name: it is repeated in turn.
        let a = |suffix: &str| format!("a{suffix}");
        let m = '\u{FFFF}';
        assert_eq!(
            keys,
            [
                a(""),
                "b".into(),
                a(&format!("{m}1")),
                a(&format!("{m}2")),
                a(&format!("{m}1{m}1")),
                a(&format!("{m}3"))
            ]
        );
        assert_eq!(d.get("x"), Some(&Bson::Int32(2)));
    }

    #[test]
    fn malformed_documents_give_the_old_errors() {
        let good = bson::to_vec(&every_type()).unwrap();
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![5, 0, 0],
            vec![5, 0, 0, 0],
            vec![5, 0, 0, 0, 1],
            vec![4, 0, 0, 0, 0],
            vec![0xff, 0xff, 0xff, 0xff, 0],
            vec![0, 0, 0, 0x7f, 0],
            // An element running into the terminator, a bad tag, a bad boolean, bad UTF-8.
            vec![8, 0, 0, 0, 0x0A, b'a', 0, 0],
            vec![9, 0, 0, 0, 0x0A, b'a', 0, 0, 0],
            vec![9, 0, 0, 0, 0x14, b'a', 0, 0, 0],
            vec![10, 0, 0, 0, 0x08, b'a', 0, 2, 0],
            vec![13, 0, 0, 0, 0x02, b'a', 0, 2, 0, 0, 0, 0xff, 0, 0],
            vec![8, 0, 0, 0, 0x0A, 0xc3, 0, 0],
            // A string without its NUL, of length 0, negative.
            vec![14, 0, 0, 0, 0x02, b'a', 0, 2, 0, 0, 0, b'x', b'y', 0],
            vec![13, 0, 0, 0, 0x02, b'a', 0, 0, 0, 0, 0, 0, 0],
            vec![13, 0, 0, 0, 0x02, b'a', 0, 0xff, 0xff, 0xff, 0xff, 0, 0],
            // Old binary with a wrong inner length.
            vec![18, 0, 0, 0, 0x05, b'a', 0, 5, 0, 0, 0, 2, 9, 0, 0, 0, 7, 0],
        ];
        let mut deep = Document::new();
        for _ in 0..crate::MAX_BSON_DEPTH {
            deep = doc! { "a": deep };
        }
        cases.push(bson::to_vec(&deep).unwrap());
        let mut deep_arr = Bson::Array(vec![]);
        for _ in 0..crate::MAX_BSON_DEPTH {
            deep_arr = Bson::Array(vec![deep_arr]);
        }
        cases.push(bson::to_vec(&doc! { "a": deep_arr }).unwrap());
        for cut in [1, 5, 17, good.len() / 2, good.len() - 1] {
            cases.push(good[..good.len() - cut].to_vec());
        }
        for case in &cases {
            check(case);
            if old_convert(case).is_err() {
                assert!(new_convert(case).is_err(), "{case:?}");
            }
        }
        // One level less than the limit is accepted by both.
        let mut ok = Document::new();
        for _ in 0..crate::MAX_BSON_DEPTH - 1 {
            ok = doc! { "a": ok };
        }
        let bytes = bson::to_vec(&ok).unwrap();
        assert!(super::convert_document(&bytes).is_some());
        check(&bytes);
    }

    #[test]
    fn the_deepest_accepted_document_converts_on_a_small_stack() {
        // Documents and arrays alternating, 200 levels: the limit.
        let mut v = Bson::Int32(1);
        for i in 0..crate::MAX_BSON_DEPTH - 1 {
            v = if i % 2 == 0 {
                Bson::Array(vec![v])
            } else {
                Bson::Document(doc! { "k": v })
            };
        }
        let bytes = bson::to_vec(&doc! { "a": v }).unwrap();
        let converted = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || super::convert_document(&bytes).map(|(_, len)| len))
            .unwrap()
            .join()
            .unwrap();
        assert!(converted.is_some());
    }

    /// A generated tree of values, with repeated names allowed.
    #[derive(Clone, Debug)]
    enum Tree {
        Leaf(Bson),
        Doc(Vec<(String, Tree)>),
        Arr(Vec<Tree>),
    }

    fn leaf() -> impl Strategy<Value = Bson> {
        prop_oneof![
            any::<f64>().prop_map(Bson::Double),
            ".{0,6}".prop_map(Bson::String),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            any::<i64>().prop_map(|m| Bson::DateTime(bson::DateTime::from_millis(m))),
            (any::<u32>(), any::<u32>())
                .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(bson::Decimal128::from_bytes(b))),
            (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..6)).prop_map(|(s, bytes)| {
                Bson::Binary(bson::Binary {
                    subtype: BinarySubtype::from(s),
                    bytes,
                })
            }),
            ("[a-z.*]{0,4}", "[imsx]{0,3}").prop_map(|(pattern, options)| Bson::RegularExpression(
                bson::Regex { pattern, options }
            )),
            "[a-z]{0,3}".prop_map(Bson::JavaScriptCode),
            "[a-z]{0,3}".prop_map(Bson::Symbol),
            Just(Bson::Null),
            Just(Bson::Undefined),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
        ]
    }

    fn tree() -> impl Strategy<Value = Tree> {
        let key = prop_oneof!["[ab]", "[a-zé🔑$.]{0,4}"];
        leaf()
            .prop_map(Tree::Leaf)
            .prop_recursive(4, 48, 6, move |inner| {
                prop_oneof![
                    proptest::collection::vec((key.clone(), inner.clone()), 0..6)
                        .prop_map(Tree::Doc),
                    proptest::collection::vec(inner, 0..6).prop_map(Tree::Arr),
                ]
            })
    }

    fn raw(tree: &Tree) -> RawBson {
        match tree {
            Tree::Leaf(b) => RawBson::try_from(b.clone()).unwrap(),
            Tree::Doc(fields) => {
                let mut d = RawDocumentBuf::new();
                for (k, v) in fields {
                    d.append(k, raw(v));
                }
                RawBson::Document(d)
            }
            Tree::Arr(items) => {
                let mut a = bson::RawArrayBuf::new();
                for v in items {
                    a.push(raw(v));
                }
                RawBson::Array(a)
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn generated_documents_convert_as_before(
            fields in proptest::collection::vec(("[abc]|[a-z]{0,3}", tree()), 0..6),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut d = RawDocumentBuf::new();
            for (k, v) in &fields {
                d.append(k, raw(v));
            }
            let bytes = d.into_bytes();
            // Intact: the fast path takes it and agrees.
            prop_assert!(super::convert_document(&bytes).is_some());
            check(&bytes);
            // Corrupted bytes and truncations give the same result or the same error.
            let mut bad = bytes.clone();
            for (at, v) in &flips {
                let i = at.index(bad.len());
                bad[i] = *v;
            }
            check(&bad);
            check(&bad[..cut.index(bad.len() + 1)]);
        }
    }
}
