//! The nesting limit of stored documents, checked on every insert and update.
//!
//! [`check_storage_depth`] first walks the document's bytes by hand ([`fast_walk`]): the
//! checks `bson`'s element iterator makes (lengths in bounds, terminators, UTF-8 names and
//! strings, booleans 0 or 1) without its per-element overhead. Anything it does not accept
//! as valid and within the limit (a malformed document, one too deep, the rare types it leaves
//! alone) goes to the iterator's walk, which returns the same `Ok` or error as before; so the
//! fast walk can only answer `Ok` where the iterator's does (differential tests below).

use bson::{RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};

/// MongoDB's nesting limit for stored documents: `maxBSONDepth` (200) less the 20 levels
/// the server keeps for wrapping documents in replies and oplog entries.
pub const MAX_STORAGE_DEPTH: usize = 180;

/// Fails with Overflow when `doc` nests deeper than [`MAX_STORAGE_DEPTH`], the top level
/// counting 1 and empty documents or arrays not counting (as MongoDB's `validateDepth`).
/// Iterative, so it cannot overflow the stack whatever the input.
pub fn check_storage_depth(doc: &RawDocument, on_insert: bool) -> Result<()> {
    if fast_walk(doc.as_bytes()).is_some() {
        return Ok(());
    }
    iterated_walk(doc, on_insert)
}

/// The reference walk, through `bson`'s iterator: every error comes from here.
fn iterated_walk(doc: &RawDocument, on_insert: bool) -> Result<()> {
    let mut stack: Vec<(&RawDocument, usize)> = vec![(doc, 1)];
    while let Some((d, depth)) = stack.pop() {
        for el in d.iter() {
            let (_, v) = el?;
            let child = match v {
                RawBsonRef::Document(c) => c,
                RawBsonRef::Array(a) => RawDocument::from_bytes(a.as_bytes())?,
                _ => continue,
            };
            if child.is_empty() {
                continue;
            }
            if depth >= MAX_STORAGE_DEPTH {
                let msg = if on_insert {
                    format!("cannot insert document because it exceeds {MAX_STORAGE_DEPTH} levels of nesting")
                } else {
                    format!("Document exceeds maximum nesting depth of {MAX_STORAGE_DEPTH}")
                };
                return Err(Error::new(ErrorCode::Overflow, msg));
            }
            stack.push((child, depth + 1));
        }
    }
    Ok(())
}

fn i32_at(b: &[u8], at: usize) -> Option<usize> {
    let raw: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(i32::from_le_bytes(raw)).ok()
}

/// The position after the NUL ending the UTF-8 name or cstring at `at`, below `end`.
fn cstring_end(b: &[u8], at: usize, end: usize) -> Option<usize> {
    let rest = b.get(at..end)?;
    let nul = rest.iter().position(|&c| c == 0)?;
    nidus_common::utf8(&rest[..nul])?;
    Some(at + nul + 1)
}

/// `Some(())` when `doc` is a well-formed document (as `bson`'s iterator checks it) nesting
/// no deeper than [`MAX_STORAGE_DEPTH`]; `None` for anything else, including what it does not
/// look into (DBPointer, code with scope, old binary), for the iterator's walk to decide.
fn fast_walk(doc: &[u8]) -> Option<()> {
    let mut stack: Vec<(&[u8], usize)> = vec![(doc, 1)];
    while let Some((d, depth)) = stack.pop() {
        if d.len() < 5 || i32_at(d, 0)? != d.len() || d[d.len() - 1] != 0 {
            return None;
        }
        let end = d.len() - 1;
        let mut pos = 4;
        while pos < end {
            let tag = d[pos];
            pos = cstring_end(d, pos + 1, end)?;
            let size = match tag {
                0x01 | 0x09 | 0x11 | 0x12 => 8,
                0x10 => 4,
                0x07 => 12,
                0x13 => 16,
                0x06 | 0x0A | 0x7F | 0xFF => 0,
                0x08 => match d.get(pos)? {
                    0 | 1 => 1,
                    _ => return None,
                },
                0x02 | 0x0D | 0x0E => {
                    let len = i32_at(d, pos)?;
                    let text = d.get(pos + 4..(pos + 4).checked_add(len)?)?;
                    let (nul, text) = text.split_last()?;
                    if *nul != 0 {
                        return None;
                    }
                    nidus_common::utf8(text)?;
                    4 + len
                }
                0x03 | 0x04 => {
                    let len = i32_at(d, pos)?;
                    if len < 5 {
                        return None;
                    }
                    let child = d.get(pos..pos.checked_add(len)?)?;
                    if len > 5 {
                        if depth >= MAX_STORAGE_DEPTH {
                            return None;
                        }
                        stack.push((child, depth + 1));
                    } else if len != 5 || child[4] != 0 {
                        return None;
                    }
                    len
                }
                0x05 => {
                    let len = i32_at(d, pos)?;
                    // The old binary subtype has a length of its own: the iterator's walk.
                    if *d.get(pos + 4)? == 0x02 {
                        return None;
                    }
                    5 + len
                }
                0x0B => {
                    let pattern_end = cstring_end(d, pos, end)?;
                    cstring_end(d, pattern_end, end)? - pos
                }
                _ => return None,
            };
            pos = pos.checked_add(size)?;
            if pos > end {
                return None;
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson, Document};
    use proptest::prelude::*;

    fn nested(levels: usize, empty_inside: bool) -> Document {
        let mut d = if empty_inside {
            doc! {"e": {}}
        } else {
            doc! {"x": 1}
        };
        for i in 0..levels {
            d = if i % 2 == 0 {
                doc! {"d": d}
            } else {
                doc! {"a": [Bson::Document(d)]}
            };
        }
        d
    }

    /// Documents at the limit and one past it, with empty containers (which do not count)
    /// at the bottom: the fast walk accepts exactly what the iterator's walk accepts.
    #[test]
    fn depth_limit_as_the_iterator_walk() {
        for levels in [0, 1, 2, 177, 178, 179, 180, 181, 200] {
            for empty_inside in [false, true] {
                let raw =
                    nidus_common::encode::document_to_raw(&nested(levels, empty_inside)).unwrap();
                let slow = iterated_walk(&raw, true).is_ok();
                assert_eq!(
                    fast_walk(raw.as_bytes()).is_some(),
                    slow,
                    "{levels} {empty_inside}"
                );
                assert_eq!(check_storage_depth(&raw, true).is_ok(), slow);
            }
        }
    }

    /// Hand-made corruptions of `{k: "ab", b: true, d: {x: 1}}`: each one the iterator's walk
    /// refuses is refused by the fast walk too.
    #[test]
    fn corruptions_the_iterator_refuses_are_refused() {
        let base =
            nidus_common::encode::document_to_raw(&doc! {"k": "ab", "b": true, "d": {"x": 1}})
                .unwrap()
                .into_bytes();
        let find = |needle: &[u8]| {
            base.windows(needle.len())
                .position(|w| w == needle)
                .unwrap()
        };
        let cases: Vec<(&str, usize, u8)> = vec![
            ("name not UTF-8", find(b"k\0"), 0xFF),
            ("string not UTF-8", find(b"ab"), 0xC3),
            ("string not NUL-terminated", find(b"ab") + 2, b'c'),
            ("string length too long", find(b"ab") - 4, 0x7F),
            ("string length zero", find(b"ab") - 4, 0),
            ("boolean 2", find(b"b\0") + 2, 2),
            ("embedded length too long", find(b"d\0") + 2, 0x7F),
            ("embedded length 3", find(b"d\0") + 2, 3),
            ("unknown type", find(b"k\0") - 1, 0x20),
            ("embedded name not UTF-8", find(b"x\0"), 0xFE),
        ];
        let mut refused = 0;
        for (what, at, byte) in cases {
            let mut bytes = base.clone();
            bytes[at] = byte;
            let Ok(raw) = RawDocument::from_bytes(&bytes) else {
                continue;
            };
            if iterated_walk(raw, true).is_err() {
                refused += 1;
                assert!(fast_walk(raw.as_bytes()).is_none(), "{what}");
            }
        }
        assert!(
            refused >= 8,
            "only {refused} corruptions refused by the iterator's walk"
        );
    }

    fn value() -> impl Strategy<Value = Bson> {
        let leaf = prop_oneof![
            any::<f64>().prop_map(Bson::Double),
            ".{0,6}".prop_map(Bson::String),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            Just(Bson::Null),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            Just(Bson::Undefined),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
            any::<i64>().prop_map(|n| Bson::DateTime(bson::DateTime::from_millis(n))),
            (any::<u32>(), any::<u32>())
                .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
            proptest::collection::vec(any::<u8>(), 0..6).prop_map(|bytes| Bson::Binary(
                bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes
                }
            )),
            ("[a-z]{0,3}", "[imsx]{0,2}").prop_map(|(p, o)| Bson::RegularExpression(bson::Regex {
                pattern: p,
                options: o
            })),
            "[a-z]{0,4}".prop_map(Bson::JavaScriptCode),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(bson::Decimal128::from_bytes(b))),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                proptest::collection::vec(("[a-zé]{0,3}", inner), 0..4)
                    .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Valid documents: the same answer as the iterator's walk.
        #[test]
        fn valid_documents_as_the_iterator_walk(
            kv in proptest::collection::vec(("[a-z]{1,3}", value()), 0..6)
        ) {
            let d: Document = kv.into_iter().collect();
            let raw = nidus_common::encode::document_to_raw(&d).unwrap();
            prop_assert_eq!(fast_walk(raw.as_bytes()).is_some(), iterated_walk(&raw, true).is_ok());
        }

        /// Corrupted bytes: the fast walk never accepts what the iterator's walk refuses.
        #[test]
        fn corrupted_documents_never_accepted_wrongly(
            kv in proptest::collection::vec(("[a-z]{1,3}", value()), 1..6),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)
        ) {
            let d: Document = kv.into_iter().collect();
            let mut bytes = nidus_common::encode::document_to_raw(&d).unwrap().into_bytes();
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            if let Ok(raw) = RawDocument::from_bytes(&bytes) {
                if fast_walk(raw.as_bytes()).is_some() {
                    prop_assert!(iterated_walk(raw, true).is_ok());
                }
            }
        }
    }
}
