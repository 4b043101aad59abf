//! `Document` → BSON bytes without serde. The `bson` crate's `RawDocumentBuf::from_document`
//! goes through its serde serializer, which writes every key through a state machine and an
//! ObjectId through its hex string (parsed back); the write path converts a document per
//! statement (an oplog entry's `o`/`o2`, an updated document), where that is a tenth of an
//! insert's instructions.
//!
//! This writes the same bytes directly for the value kinds documents hold. It is a fast path,
//! not a second definition of BSON: for the rare kinds it leaves alone (code with scope,
//! DBPointer, the old binary subtype) and for a key or regex with a NUL byte (which the crate
//! refuses) it answers through the crate's path, so the result or the error is the crate's
//! (differential test below).

use bson::spec::BinarySubtype;
use bson::{Bson, Document, RawDocumentBuf};

/// Not written here: use the `bson` crate's serializer.
struct Fallback;

/// `doc` as BSON bytes, byte for byte what `RawDocumentBuf::from_document` writes.
pub fn document_to_raw(doc: &Document) -> bson::raw::Result<RawDocumentBuf> {
    let mut out = Vec::with_capacity(128);
    match write_document(&mut out, doc.iter()) {
        Ok(()) => RawDocumentBuf::from_bytes(out),
        Err(Fallback) => RawDocumentBuf::from_document(doc),
    }
}

fn write_document<'a>(
    out: &mut Vec<u8>,
    elements: impl Iterator<Item = (&'a String, &'a Bson)>,
) -> Result<(), Fallback> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (key, value) in elements {
        write_element(out, key, value)?;
    }
    finish(out, start)
}

fn write_array(out: &mut Vec<u8>, values: &[Bson]) -> Result<(), Fallback> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut key = String::new();
    for (i, value) in values.iter().enumerate() {
        key.clear();
        // Array keys are the indexes in decimal, as the serializer writes them.
        use std::fmt::Write;
        let _ = write!(key, "{i}");
        write_element(out, &key, value)?;
    }
    finish(out, start)
}

/// Closes the document opened at `start`: its terminator and length.
fn finish(out: &mut Vec<u8>, start: usize) -> Result<(), Fallback> {
    out.push(0);
    let len = i32::try_from(out.len() - start).map_err(|_| Fallback)?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn cstring(out: &mut Vec<u8>, s: &str) -> Result<(), Fallback> {
    if s.as_bytes().contains(&0) {
        return Err(Fallback);
    }
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

fn string(out: &mut Vec<u8>, s: &str) -> Result<(), Fallback> {
    let len = i32::try_from(s.len() + 1).map_err(|_| Fallback)?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

fn write_element(out: &mut Vec<u8>, key: &str, value: &Bson) -> Result<(), Fallback> {
    let tag = match value {
        Bson::Double(_) => 0x01,
        Bson::String(_) => 0x02,
        Bson::Document(_) => 0x03,
        Bson::Array(_) => 0x04,
        Bson::Binary(b) if b.subtype != BinarySubtype::BinaryOld => 0x05,
        Bson::Undefined => 0x06,
        Bson::ObjectId(_) => 0x07,
        Bson::Boolean(_) => 0x08,
        Bson::DateTime(_) => 0x09,
        Bson::Null => 0x0A,
        Bson::RegularExpression(_) => 0x0B,
        Bson::JavaScriptCode(_) => 0x0D,
        Bson::Symbol(_) => 0x0E,
        Bson::Int32(_) => 0x10,
        Bson::Timestamp(_) => 0x11,
        Bson::Int64(_) => 0x12,
        Bson::Decimal128(_) => 0x13,
        Bson::MaxKey => 0x7F,
        Bson::MinKey => 0xFF,
        Bson::Binary(_) | Bson::JavaScriptCodeWithScope(_) | Bson::DbPointer(_) => {
            return Err(Fallback)
        }
    };
    out.push(tag);
    cstring(out, key)?;
    match value {
        Bson::Double(f) => out.extend_from_slice(&f.to_le_bytes()),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => string(out, s)?,
        Bson::Document(d) => write_document(out, d.iter())?,
        Bson::Array(a) => write_array(out, a)?,
        Bson::Binary(b) => {
            let len = i32::try_from(b.bytes.len()).map_err(|_| Fallback)?;
            out.extend_from_slice(&len.to_le_bytes());
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&b.bytes);
        }
        Bson::ObjectId(id) => out.extend_from_slice(&id.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => out.extend_from_slice(&d.timestamp_millis().to_le_bytes()),
        Bson::RegularExpression(re) => {
            cstring(out, &re.pattern)?;
            // The serializer writes the options sorted.
            let mut options: Vec<char> = re.options.chars().collect();
            options.sort_unstable();
            cstring(out, &options.into_iter().collect::<String>())?;
        }
        Bson::Int32(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Timestamp(ts) => {
            out.extend_from_slice(&ts.increment.to_le_bytes());
            out.extend_from_slice(&ts.time.to_le_bytes());
        }
        Bson::Int64(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Decimal128(d) => out.extend_from_slice(&d.bytes()),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::document_to_raw;
    use bson::oid::ObjectId;
    use bson::spec::BinarySubtype;
    use bson::{
        doc, Binary, Bson, DateTime, Decimal128, Document, JavaScriptCodeWithScope, RawDocumentBuf,
        Regex, Timestamp,
    };
    use proptest::prelude::*;

    fn scalar() -> impl Strategy<Value = Bson> {
        prop_oneof![
            any::<f64>().prop_map(Bson::Double),
            ".{0,8}".prop_map(Bson::String),
            "[a-z\u{0}]{0,3}".prop_map(Bson::String),
            (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..6)).prop_map(|(s, bytes)| {
                Bson::Binary(Binary {
                    subtype: BinarySubtype::from(s),
                    bytes,
                })
            }),
            Just(Bson::Undefined),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i64>().prop_map(|n| Bson::DateTime(DateTime::from_millis(n))),
            Just(Bson::Null),
            ("[a-c\u{0}]{0,3}", "[imsx\u{0}]{0,4}").prop_map(|(pattern, options)| {
                Bson::RegularExpression(Regex { pattern, options })
            }),
            ".{0,4}".prop_map(Bson::JavaScriptCode),
            ".{0,4}".prop_map(Bson::Symbol),
            ".{0,4}".prop_map(
                |code| Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                    code,
                    scope: doc! {"x": 1},
                })
            ),
            any::<i32>().prop_map(Bson::Int32),
            (any::<u32>(), any::<u32>())
                .prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
            any::<i64>().prop_map(Bson::Int64),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(Decimal128::from_bytes(b))),
            Just(Bson::MaxKey),
            Just(Bson::MinKey),
        ]
    }

    fn value() -> impl Strategy<Value = Bson> {
        scalar().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                proptest::collection::vec(("[a-z_$.\u{0}]{0,3}", inner), 0..4)
                    .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
            ]
        })
    }

    fn document() -> impl Strategy<Value = Document> {
        proptest::collection::vec(("[a-z_$.]{0,4}", value()), 0..6)
            .prop_map(|kv| kv.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// The same bytes as the crate's serializer, or the same error.
        #[test]
        fn writes_what_the_serializer_writes(d in document()) {
            let ours = document_to_raw(&d).map(|r| r.into_bytes()).map_err(|e| e.to_string());
            let theirs = RawDocumentBuf::from_document(&d).map(|r| r.into_bytes()).map_err(|e| e.to_string());
            prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn the_kinds_it_leaves_to_the_crate() {
        let old = Bson::Binary(Binary {
            subtype: BinarySubtype::BinaryOld,
            bytes: vec![1, 2, 3],
        });
        // {p: DBPointer("db.c", ObjectId(01..01))}, which only a reader can make.
        let mut bytes = vec![0x0C, b'p', 0];
        bytes.extend_from_slice(&5i32.to_le_bytes());
        bytes.extend_from_slice(b"db.c\0");
        bytes.extend_from_slice(&[1; 12]);
        bytes.push(0);
        let mut framed = ((bytes.len() + 4) as i32).to_le_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        let pointer = Document::from_reader(framed.as_slice()).expect("DBPointer document");
        let mut cases = vec![
            doc! {"a": old},
            doc! {"a\u{0}b": 1},
            doc! {"r": Regex { pattern: "a\u{0}".into(), options: "i".into() }},
            doc! {"r": Regex { pattern: "a".into(), options: "xsim".into() }},
        ];
        assert!(matches!(pointer.get("p"), Some(Bson::DbPointer(_))));
        cases.push(pointer);
        for d in cases {
            assert_eq!(
                document_to_raw(&d)
                    .map(|r| r.into_bytes())
                    .map_err(|e| e.to_string()),
                RawDocumentBuf::from_document(&d)
                    .map(|r| r.into_bytes())
                    .map_err(|e| e.to_string()),
                "{d:?}"
            );
        }
    }
}
