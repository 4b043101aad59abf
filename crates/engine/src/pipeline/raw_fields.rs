//! The top-level fields a pipeline reads (all, or those its stages name), taken from a stored
//! document without the `bson` crate's element iterator: the walk reads each element's type
//! and name, steps over the values nobody reads by their length, and converts the wanted ones.
//!
//! A fast path, not a second BSON reader: it takes documents whose framing is what it
//! expects (stored documents were validated when they were written) and answers `None` for
//! anything else, and the caller then converts through `bson` as before (the same document or
//! the same error). Scalars are converted here; embedded documents, arrays and the rarer
//! types through `bson`'s own conversion, so a nested value is exactly what the iterator
//! gives.
//! A name repeated at the top level keeps the last value at the first one's position, as
//! `Document::insert` does on the iterator's path.

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document, RawDocument, Timestamp};

/// The elements of `raw` named in `fields` (all of them for `None`), in document order;
/// `None` = use the iterator.
pub(super) fn select(raw: &RawDocument, fields: Option<&[String]>) -> Option<Document> {
    let bytes = raw.as_bytes();
    let end = bytes.len().checked_sub(1)?;
    if bytes.len() < 5 || usize::try_from(i32_at(bytes, 0)?).ok()? != bytes.len() || bytes[end] != 0
    {
        return None;
    }
    let mut out = Document::new();
    let mut at = 4;
    while at < end {
        let tag = bytes[at];
        let name_start = at + 1;
        let name_len = bytes.get(name_start..end)?.iter().position(|&b| b == 0)?;
        let name = std::str::from_utf8(&bytes[name_start..name_start + name_len]).ok()?;
        let value_start = name_start + name_len + 1;
        let value_len = value_len(bytes, tag, value_start, end)?;
        let value_end = value_start.checked_add(value_len).filter(|&e| e <= end)?;
        if fields.is_none_or(|fields| fields.iter().any(|f| f == name)) {
            out.insert(name, value(tag, &bytes[value_start..value_end])?);
        }
        at = value_end;
    }
    (at == end).then_some(out)
}

fn i32_at(bytes: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// A length-prefixed value's length: `extra` bytes after the prefix besides the counted ones.
fn prefixed(bytes: &[u8], at: usize, extra: usize, min: usize) -> Option<usize> {
    let n = usize::try_from(i32_at(bytes, at)?).ok()?;
    (n >= min).then_some(4 + extra + n)
}

fn cstring_len(bytes: &[u8], at: usize, end: usize) -> Option<usize> {
    Some(bytes.get(at..end)?.iter().position(|&b| b == 0)? + 1)
}

/// How many bytes the value of type `tag` at `at` takes (`end`: the document's terminator).
fn value_len(bytes: &[u8], tag: u8, at: usize, end: usize) -> Option<usize> {
    Some(match tag {
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        0x02 | 0x0D | 0x0E => prefixed(bytes, at, 0, 1)?,
        // An embedded document or array counts its own prefix.
        0x03 | 0x04 => prefixed(bytes, at, 0, 5)? - 4,
        0x05 => prefixed(bytes, at, 1, 0)?,
        0x06 | 0x0A | 0xFF | 0x7F => 0,
        0x07 => 12,
        0x08 => 1,
        0x0B => {
            let pattern = cstring_len(bytes, at, end)?;
            pattern + cstring_len(bytes, at + pattern, end)?
        }
        0x0C => prefixed(bytes, at, 0, 1)? + 12,
        0x0F => prefixed(bytes, at, 0, 14)? - 4,
        0x10 => 4,
        0x13 => 16,
        _ => return None,
    })
}

/// A value from its bytes: the common scalars and embedded documents here, the rest through
/// `bson`.
fn value(tag: u8, v: &[u8]) -> Option<Bson> {
    let fixed8 = || -> Option<[u8; 8]> { v.try_into().ok() };
    Some(match tag {
        0x01 => Bson::Double(f64::from_le_bytes(fixed8()?)),
        0x02 => {
            // Length prefix, the bytes, a terminator the length counts.
            let body = v.get(4..v.len().checked_sub(1)?)?;
            if v.last() != Some(&0) {
                return None;
            }
            Bson::String(std::str::from_utf8(body).ok()?.to_owned())
        }
        // As `bson` converts an embedded document, without copying it first.
        0x03 => Bson::Document(Document::try_from(RawDocument::from_bytes(v).ok()?).ok()?),
        0x07 => Bson::ObjectId(ObjectId::from_bytes(v.try_into().ok()?)),
        0x08 => match v {
            [0] => Bson::Boolean(false),
            [1] => Bson::Boolean(true),
            _ => return None,
        },
        0x09 => Bson::DateTime(DateTime::from_millis(i64::from_le_bytes(fixed8()?))),
        0x0A => Bson::Null,
        0x10 => Bson::Int32(i32::from_le_bytes(v.try_into().ok()?)),
        0x11 => {
            let b = fixed8()?;
            Bson::Timestamp(Timestamp {
                increment: u32::from_le_bytes(b[..4].try_into().ok()?),
                time: u32::from_le_bytes(b[4..].try_into().ok()?),
            })
        }
        0x12 => Bson::Int64(i64::from_le_bytes(fixed8()?)),
        _ => through_bson(tag, v)?,
    })
}

/// The value as `bson` converts it: a one-element document `{"": value}` read by its iterator.
fn through_bson(tag: u8, v: &[u8]) -> Option<Bson> {
    let len = i32::try_from(4 + 1 + 1 + v.len() + 1).ok()?;
    let mut doc = Vec::with_capacity(len as usize);
    doc.extend_from_slice(&len.to_le_bytes());
    doc.push(tag);
    doc.push(0);
    doc.extend_from_slice(v);
    doc.push(0);
    let (_, value) = RawDocument::from_bytes(&doc).ok()?.iter().next()?.ok()?;
    Bson::try_from(value.to_raw_bson()).ok()
}

#[cfg(test)]
mod tests {
    use super::select;
    use bson::spec::BinarySubtype;
    use bson::{doc, Binary, Bson, Document, JavaScriptCodeWithScope, RawDocument, Regex};

    /// The iterator's path (`CursorStream` without this fast path).
    fn by_iterator(raw: &RawDocument, fields: Option<&[String]>) -> Option<Document> {
        let Some(fields) = fields else {
            return Document::try_from(raw).ok();
        };
        let mut d = Document::new();
        for element in raw.iter() {
            let (k, v) = element.ok()?;
            if fields.iter().any(|f| f == k) {
                d.insert(k, Bson::try_from(v.to_raw_bson()).ok()?);
            }
        }
        Some(d)
    }

    fn every_type() -> Document {
        doc! {
            "_id": 1, "double": -0.0, "nan": f64::NAN, "string": "héllo", "empty": "",
            "doc": {"a": 1, "b": {"c": [1, {"d": null}]}}, "emptydoc": {}, "array": [1, "x", [2]],
            "emptyarray": [],
            "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "uuid": Binary { subtype: BinarySubtype::Uuid, bytes: vec![7; 16] },
            "undefined": Bson::Undefined, "oid": bson::oid::ObjectId::from_bytes([9; 12]),
            "true": true, "false": false, "date": bson::DateTime::from_millis(-5),
            "null": null, "regex": Regex { pattern: "a.*b".into(), options: "i".into() },
            "dbpointer": bson::Bson::DbPointer(bson::from_slice::<Document>(&[
                // {"p": DBPointer("ns", ObjectId)}: built from bytes, bson has no constructor.
                27, 0, 0, 0, 0x0C, b'p', 0, 3, 0, 0, 0, b'n', b's', 0, 1, 2, 3, 4, 5, 6, 7,
                8, 9, 10, 11, 12, 0,
            ]).expect("dbpointer").get("p").and_then(|p| match p {
                Bson::DbPointer(p) => Some(p.clone()),
                _ => None,
            }).expect("dbpointer")),
            "code": Bson::JavaScriptCode("f()".into()),
            "symbol": Bson::Symbol("s".into()),
            "scope": Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "g()".into(), scope: doc! {"x": 1},
            }),
            "int32": i32::MIN, "ts": bson::Timestamp { time: 7, increment: 9 },
            "int64": i64::MAX, "dec": bson::Decimal128::from_bytes([3; 16]),
            "min": Bson::MinKey, "max": Bson::MaxKey,
        }
    }

    fn assert_same(bytes: &[u8], fields: Option<&[String]>) {
        let raw = RawDocument::from_bytes(bytes).expect("raw");
        let fast = select(raw, fields).expect("the fast path takes a valid document");
        let slow = by_iterator(raw, fields).expect("iterator");
        // Compared as bytes: NaN and -0.0 compare by value otherwise.
        assert_eq!(
            bson::to_vec(&fast).expect("fast"),
            bson::to_vec(&slow).expect("slow")
        );
    }

    #[test]
    fn every_type_converts_as_the_iterator_converts_it() {
        let d = every_type();
        let bytes = bson::to_vec(&d).expect("bytes");
        let names: Vec<String> = d.keys().cloned().collect();
        // Each field alone, all of them, none, and names the document does not have.
        for n in &names {
            assert_same(&bytes, Some(std::slice::from_ref(n)));
        }
        assert_same(&bytes, Some(&names));
        assert_same(&bytes, Some(&[]));
        assert_same(&bytes, Some(&["missing".to_string(), "doc.a".to_string()]));
        assert_same(&bytes, None);
    }

    #[test]
    fn a_repeated_name_keeps_the_last_value_at_the_first_position() {
        // {a: 1, b: 2, a: "x"} has no bson::Document form: written by hand.
        let mut bytes = vec![0, 0, 0, 0];
        bytes.extend_from_slice(&[0x10, b'a', 0, 1, 0, 0, 0]);
        bytes.extend_from_slice(&[0x10, b'b', 0, 2, 0, 0, 0]);
        bytes.extend_from_slice(&[0x02, b'a', 0, 2, 0, 0, 0, b'x', 0]);
        bytes.push(0);
        let len = bytes.len() as i32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        for fields in [
            vec!["a".to_string()],
            vec!["a".to_string(), "b".to_string()],
        ] {
            assert_same(&bytes, Some(&fields));
        }
        assert_same(&bytes, None);
    }

    #[test]
    fn malformed_documents_take_the_iterators_path_without_panicking() {
        let good = bson::to_vec(&every_type()).expect("bytes");
        let all: Vec<String> = every_type().keys().cloned().collect();
        // Every truncation and every single-byte change: the fast path either answers what
        // the iterator answers or bails; it never panics or reads out of bounds.
        for cut in 0..good.len() {
            let mut b = good[..cut].to_vec();
            if b.len() >= 4 {
                let len = b.len() as i32;
                b[..4].copy_from_slice(&len.to_le_bytes());
            }
            check_agrees_or_bails(&b, Some(&all));
            check_agrees_or_bails(&b, None);
        }
        for i in 4..good.len() {
            for delta in [1u8, 0x7F, 0xFF] {
                let mut b = good.clone();
                b[i] = b[i].wrapping_add(delta);
                check_agrees_or_bails(&b, Some(&all));
                check_agrees_or_bails(&b, None);
            }
        }
    }

    fn check_agrees_or_bails(bytes: &[u8], fields: Option<&[String]>) {
        let Ok(raw) = RawDocument::from_bytes(bytes) else {
            return;
        };
        if let Some(fast) = select(raw, fields) {
            let slow = by_iterator(raw, fields).expect("the iterator reads what the walk read");
            assert_eq!(bson::to_vec(&fast).ok(), bson::to_vec(&slow).ok());
        }
    }
}
