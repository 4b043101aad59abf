//! Dotted-path traversal over raw documents with MongoDB's query semantics.
//!
//! For `a.b.c` the walker looks `a` up in the document; whenever an intermediate value is an
//! array, each element that is a document is searched for the rest of the path (implicit
//! array traversal), and when the next component is a number `n` the element at index `n`
//! is also followed with the path after `n`. Arrays nested directly in arrays are not
//! traversed implicitly (only through an explicit index). At the end of the path, a value
//! that is an array is offered both element by element and as a whole, when asked to
//! (`expand_leaf`). A path that ends on nothing is offered as *missing* when the dead end is
//! a document without the field (including a document inside a traversed array), which is
//! what `{a: null}` and `$exists` need.
//!
//! Match expressions walk with [`walk_match`], which differs from [`walk`] (index keys, sort
//! keys, `distinct`) only where a component is a number, as MongoDB's `ElementPath` does:
//! a document inside a traversed array that lacks the numeric field yields *missing* (the
//! number is also tried as a field name); an element selected by its index at the end of the
//! path is offered as is, not element by element; and a scalar selected by its index with
//! path left to follow yields nothing (not missing).

use bson::{RawArray, RawBsonRef, RawDocument};

/// A parsed dotted path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    parts: Vec<Part>,
    dotted: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    name: String,
    /// The component as an array index, when it is a plain decimal number.
    index: Option<usize>,
}

impl FieldPath {
    /// Splits a dotted path. Empty components are kept (they match the empty field name).
    pub fn parse(path: &str) -> FieldPath {
        let parts = path
            .split('.')
            .map(|p| Part {
                name: p.to_string(),
                index: array_index(p),
            })
            .collect();
        FieldPath {
            parts,
            dotted: path.to_string(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.dotted
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The component names.
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|p| p.name.as_str())
    }
}

/// `"12"` → 12; leading zeros, signs and other text are not indexes (as in MongoDB).
pub fn array_index(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// What the walk offers at the end of a path.
#[derive(Debug, Clone, Copy)]
pub struct PathItem<'a> {
    /// `None` when the path is missing at this branch.
    pub value: Option<RawBsonRef<'a>>,
    /// The index in the first (outermost) array traversed to reach this value, if any: what
    /// the positional `$` update operator uses.
    pub array_pos: Option<usize>,
    /// True when this value is an element of the array found at the end of the path (leaf
    /// expansion), false for values found at the path itself.
    pub from_leaf_array: bool,
}

/// Walks `path` in `doc`, calling `f` for every candidate value; `f` returns `true` to stop.
/// Returns `true` when `f` stopped the walk.
pub fn walk<'a>(
    doc: &'a RawDocument,
    path: &FieldPath,
    expand_leaf: bool,
    f: &mut dyn FnMut(PathItem<'a>) -> bool,
) -> bool {
    walk_with(doc, path, expand_leaf, false, f)
}

/// [`walk`] with the match expression's treatment of numeric components (see the module
/// documentation).
pub fn walk_match<'a>(
    doc: &'a RawDocument,
    path: &FieldPath,
    expand_leaf: bool,
    f: &mut dyn FnMut(PathItem<'a>) -> bool,
) -> bool {
    walk_with(doc, path, expand_leaf, true, f)
}

fn walk_with<'a>(
    doc: &'a RawDocument,
    path: &FieldPath,
    expand_leaf: bool,
    matching: bool,
    f: &mut dyn FnMut(PathItem<'a>) -> bool,
) -> bool {
    let mut w = Walker {
        expand_leaf,
        f,
        emit_missing: true,
        matching,
    };
    w.in_doc(doc, &path.parts, None)
}

/// Collects every candidate value of [`walk`] (a convenience for tests and callers that
/// need all of them).
pub fn collect<'a>(doc: &'a RawDocument, path: &FieldPath, expand_leaf: bool) -> Vec<PathItem<'a>> {
    let mut out = Vec::new();
    walk(doc, path, expand_leaf, &mut |it| {
        out.push(it);
        false
    });
    out
}

struct Walker<'f, 'a> {
    expand_leaf: bool,
    f: &'f mut dyn FnMut(PathItem<'a>) -> bool,
    emit_missing: bool,
    /// Match expression semantics ([`walk_match`]).
    matching: bool,
}

impl<'a> Walker<'_, 'a> {
    fn emit(&mut self, value: Option<RawBsonRef<'a>>, pos: Option<usize>, leaf: bool) -> bool {
        if value.is_none() && !self.emit_missing {
            return false;
        }
        (self.f)(PathItem {
            value,
            array_pos: pos,
            from_leaf_array: leaf,
        })
    }

    fn in_doc(&mut self, doc: &'a RawDocument, parts: &[Part], pos: Option<usize>) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return false;
        };
        match doc.get(&first.name).ok().flatten() {
            None => self.emit(None, pos, false),
            Some(v) => self.at_value(v, rest, pos),
        }
    }

    /// `v` was found; `rest` is the path still to follow.
    fn at_value(&mut self, v: RawBsonRef<'a>, rest: &[Part], pos: Option<usize>) -> bool {
        if rest.is_empty() {
            return self.at_leaf(v, pos);
        }
        match v {
            RawBsonRef::Document(d) => self.in_doc(d, rest, pos),
            RawBsonRef::Array(a) => self.in_array(a, rest, pos),
            // A scalar in the middle of the path: the rest is missing.
            _ => self.emit(None, pos, false),
        }
    }

    fn at_leaf(&mut self, v: RawBsonRef<'a>, pos: Option<usize>) -> bool {
        if let (RawBsonRef::Array(a), true) = (v, self.expand_leaf) {
            for (i, e) in a.into_iter().map_while(|r| r.ok()).enumerate() {
                if self.emit(Some(e), pos.or(Some(i)), true) {
                    return true;
                }
            }
        }
        self.emit(Some(v), pos, false)
    }

    /// An array element selected by its index, `rest` following the index.
    fn at_index(&mut self, e: RawBsonRef<'a>, rest: &[Part], pos: Option<usize>) -> bool {
        if !self.matching {
            return self.at_value(e, rest, pos);
        }
        match e {
            // The selected element itself, never expanded.
            _ if rest.is_empty() => self.emit(Some(e), pos, false),
            RawBsonRef::Document(d) => self.in_doc(d, rest, pos),
            RawBsonRef::Array(a) => self.in_array(a, rest, pos),
            // A scalar cannot hold the rest of the path, and is not a miss either.
            _ => false,
        }
    }

    /// An array in the middle of the path.
    fn in_array(&mut self, arr: &'a RawArray, rest: &[Part], pos: Option<usize>) -> bool {
        let next = &rest[0];
        for (i, e) in arr.into_iter().map_while(|r| r.ok()).enumerate() {
            let p = pos.or(Some(i));
            if next.index == Some(i) && self.at_index(e, &rest[1..], p) {
                return true;
            }
            // A document element is searched for the next component as a field name; when
            // that component is a number, a miss there is a "missing" value only to match
            // expressions (elsewhere the path addresses array positions).
            if let RawBsonRef::Document(d) = e {
                let saved = self.emit_missing;
                self.emit_missing = saved && (self.matching || next.index.is_none());
                let stop = self.in_doc(d, rest, p);
                self.emit_missing = saved;
                if stop {
                    return true;
                }
            }
        }
        false
    }
}

/// The first top-level element named `name`, as `RawDocument::get` finds it, read straight
/// from the document's bytes (the element iterator's per-element checks and conversions were
/// most of a sort key's cost). `Some(None)`: no such field; `None`: this walk does not answer
/// (the value is an array or a rarer type, or the framing is not what it expects, even if
/// `get` would read past it), and the caller takes the general way. Keys before the match
/// are checked to be UTF-8, as the iterator checks them; the matched value is converted as
/// `get` converts it.
pub fn top_level_value<'a>(doc: &'a RawDocument, name: &str) -> Option<Option<RawBsonRef<'a>>> {
    let bytes = doc.as_bytes();
    let mut found = None;
    let framed = walk_top_level(doc, |_, key, tag, value| {
        if key == name.as_bytes() {
            found = Some((tag, value));
            return true;
        }
        false
    })?;
    match found {
        Some((tag, at)) => scalar(tag, bytes.get(at)?).map(Some),
        None => framed.then_some(None),
    }
}

/// Visits the top-level elements of `doc` in order by the byte walk of [`top_level_value`]:
/// `visit(position, name, type, value's byte range)`, until it returns true. `Some(true)`
/// when the walk reached the document's end (or the visitor stopped it); `None` where the
/// walk does not answer (a type it leaves to the element iterator, a name that is not UTF-8,
/// a framing it does not expect). Names are checked to be UTF-8 up to where it stops.
pub fn walk_top_level<'a>(
    doc: &'a RawDocument,
    mut visit: impl FnMut(usize, &'a [u8], u8, std::ops::Range<usize>) -> bool,
) -> Option<bool> {
    let bytes = doc.as_bytes();
    // A RawDocument's length prefix equals its byte length and it ends with NUL.
    let end = bytes.len().checked_sub(1)?;
    let mut at = 4usize;
    let mut position = 0;
    loop {
        let tag = *bytes.get(at)?;
        if tag == 0 {
            return Some(at == end);
        }
        let key_start = at + 1;
        let key_len = bytes.get(key_start..end)?.iter().position(|&b| b == 0)?;
        let key = &bytes[key_start..key_start + key_len];
        nidus_common::utf8(key)?;
        let v = key_start + key_len + 1;
        let len = value_len(bytes, tag, v, end)?;
        if visit(position, key, tag, v..v + len) {
            return Some(true);
        }
        position += 1;
        at = v + len;
    }
}

fn i32_at(bytes: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// How many bytes the value of type `tag` at `at` takes; None for types this walk leaves to
/// the element iterator, or a value running past `end`.
fn value_len(bytes: &[u8], tag: u8, at: usize, end: usize) -> Option<usize> {
    let len = match tag {
        0x06 | 0x0A | 0x7F | 0xFF => 0,
        0x08 => 1,
        0x10 => 4,
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        0x07 => 12,
        0x13 => 16,
        // A string: its length (terminator included, at least 1), then its bytes.
        0x02 => {
            4 + usize::try_from(i32_at(bytes, at)?)
                .ok()
                .filter(|&n| n >= 1)?
        }
        // A document or array: its length (at least the 5 of an empty one) counts itself.
        0x03 | 0x04 => usize::try_from(i32_at(bytes, at)?)
            .ok()
            .filter(|&n| n >= 5)?,
        // Binary: length, subtype, bytes.
        0x05 => 5 + usize::try_from(i32_at(bytes, at)?).ok()?,
        _ => return None,
    };
    (at.checked_add(len)? <= end).then_some(len)
}

/// A scalar or document value from its bytes, as the element iterator converts it; None for
/// what is left to it (arrays, binary data).
fn scalar(tag: u8, v: &[u8]) -> Option<RawBsonRef<'_>> {
    let u64_at = |i: usize| -> Option<[u8; 8]> { v.get(i..i + 8)?.try_into().ok() };
    Some(match tag {
        0x01 => RawBsonRef::Double(f64::from_le_bytes(u64_at(0)?)),
        0x02 => {
            let (last, s) = v.get(4..)?.split_last()?;
            if *last != 0 {
                return None;
            }
            RawBsonRef::String(std::str::from_utf8(s).ok()?)
        }
        0x03 => RawBsonRef::Document(RawDocument::from_bytes(v).ok()?),
        0x06 => RawBsonRef::Undefined,
        0x07 => RawBsonRef::ObjectId(bson::oid::ObjectId::from_bytes(v.try_into().ok()?)),
        0x08 => match v.first()? {
            0 => RawBsonRef::Boolean(false),
            1 => RawBsonRef::Boolean(true),
            _ => return None,
        },
        0x09 => RawBsonRef::DateTime(bson::DateTime::from_millis(i64::from_le_bytes(u64_at(0)?))),
        0x0A => RawBsonRef::Null,
        0x10 => RawBsonRef::Int32(i32_at(v, 0)?),
        0x11 => {
            let increment = u32::from_le_bytes(v.get(0..4)?.try_into().ok()?);
            let time = u32::from_le_bytes(v.get(4..8)?.try_into().ok()?);
            RawBsonRef::Timestamp(bson::Timestamp { time, increment })
        }
        0x12 => RawBsonRef::Int64(i64::from_le_bytes(u64_at(0)?)),
        0x13 => RawBsonRef::Decimal128(bson::Decimal128::from_bytes(v.try_into().ok()?)),
        0x7F => RawBsonRef::MaxKey,
        0xFF => RawBsonRef::MinKey,
        _ => return None,
    })
}

/// The value at a dotted path without implicit array traversal: numeric components index
/// arrays, other components only look into documents.
pub fn get_path_raw<'a>(doc: &'a RawDocument, path: &str) -> Option<RawBsonRef<'a>> {
    let mut parts = path.split('.');
    let first = parts.next()?;
    let mut cur = doc.get(first).ok().flatten()?;
    for p in parts {
        cur = match cur {
            RawBsonRef::Document(d) => d.get(p).ok().flatten()?,
            RawBsonRef::Array(a) => a.get(array_index(p)?).ok().flatten()?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Sets a dotted path in a document being built, creating objects on the way and replacing a
/// non-object value found on the way by an object (the path is never through an array).
pub fn set_path(doc: &mut bson::Document, path: &str, value: bson::Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(doc.get(head), Some(bson::Bson::Document(_))) {
                doc.insert(head, bson::Document::new());
            }
            if let Some(bson::Bson::Document(sub)) = doc.get_mut(head) {
                set_path(sub, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{rawdoc, Bson, RawDocumentBuf};

    #[test]
    fn top_level_values_are_what_get_finds() {
        let d = bson::doc! {
            "d": 1.5, "s": "é\u{0}x", "e": "", "o": {"x": [1]}, "a": [1, 2], "b": true,
            "f": false, "u": Bson::Undefined, "n": null, "i": -3, "l": 1i64 << 40,
            "oid": bson::oid::ObjectId::new(), "t": bson::DateTime::from_millis(-5),
            "ts": bson::Timestamp { time: 3, increment: 4 },
            "dec": bson::Decimal128::from_bytes([7; 16]), "min": Bson::MinKey, "max": Bson::MaxKey,
            "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1] },
            "re": bson::Regex { pattern: "x".into(), options: "".into() },
            "last": "z",
        };
        let raw = nidus_common::encode::document_to_raw(&d).unwrap();
        let mut answered = 0;
        for k in d.keys().map(String::as_str).chain(["missing", "", "x"]) {
            let expected = raw.get(k).unwrap();
            match top_level_value(&raw, k) {
                Some(got) => {
                    answered += 1;
                    assert_eq!(got, expected, "{k}");
                }
                // What the walk leaves to the iterator: arrays, binary data, and anything at
                // or past the regular expression it does not step over.
                None => assert!(
                    ["a", "bin", "re", "last", "missing", "", "x"].contains(&k),
                    "{k}"
                ),
            }
        }
        assert_eq!(answered, 16);
        // The first of a repeated name, as `get`; a missing field.
        let mut twice = RawDocumentBuf::new();
        twice.append("i", 1);
        twice.append("j", "x");
        twice.append("i", 2);
        assert_eq!(
            top_level_value(&twice, "i"),
            Some(Some(RawBsonRef::Int32(1)))
        );
        assert_eq!(top_level_value(&twice, "k"), Some(None));
        assert_eq!(top_level_value(&RawDocumentBuf::new(), "k"), Some(None));
        // Truncated or inconsistent framing: no answer, never a panic.
        let bytes = raw.as_bytes();
        for cut in 5..bytes.len() {
            let mut b = bytes[..cut].to_vec();
            b[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            if let Ok(doc) = RawDocument::from_bytes(&b) {
                let _ = top_level_value(doc, "last");
            }
        }
    }

    fn values(
        doc: &RawDocumentBuf,
        path: &str,
        expand: bool,
    ) -> Vec<(Option<Bson>, Option<usize>)> {
        collect(doc, &FieldPath::parse(path), expand)
            .into_iter()
            .map(|it| (it.value.and_then(|v| Bson::try_from(v).ok()), it.array_pos))
            .collect()
    }

    fn match_values(doc: &RawDocumentBuf, path: &str) -> Vec<(Option<Bson>, Option<usize>)> {
        let mut out = Vec::new();
        walk_match(doc, &FieldPath::parse(path), true, &mut |it| {
            out.push((it.value.and_then(|v| Bson::try_from(v).ok()), it.array_pos));
            false
        });
        out
    }

    fn b(v: impl Into<Bson>) -> Option<Bson> {
        Some(v.into())
    }

    #[test]
    fn implicit_traversal() {
        let d = rawdoc! {"a": [{"b": 1}, {"b": [2, 3]}, 4, {"c": 1}]};
        assert_eq!(
            values(&d, "a.b", true),
            vec![
                (b(1), Some(0)),
                (b(2), Some(1)),
                (b(3), Some(1)),
                (b(vec![Bson::Int32(2), Bson::Int32(3)]), Some(1)),
                (None, Some(3)),
            ]
        );
        assert_eq!(values(&d, "a.b", false).len(), 3);
    }

    #[test]
    fn numeric_components() {
        let d = rawdoc! {"a": [{"0": "f"}, "x"]};
        assert_eq!(
            values(&d, "a.0", true),
            vec![(b(bson::doc! {"0": "f"}), Some(0)), (b("f"), Some(0))]
        );
        assert_eq!(values(&d, "a.1", true), vec![(b("x"), Some(1))]);
        let d = rawdoc! {"a": [{"b": 1}]};
        assert_eq!(values(&d, "a.0.b", true), vec![(b(1), Some(0))]);
        let d = rawdoc! {"a": {"0": 5}};
        assert_eq!(values(&d, "a.0", true), vec![(b(5), None)]);
    }

    /// Where match expressions and keys part: a document lacking the numeric field is
    /// missing, an indexed element ends the path as is, an indexed scalar yields nothing.
    #[test]
    fn numeric_components_when_matching() {
        let d = rawdoc! {"x": [7, {"y": 8}, 9]};
        assert_eq!(values(&d, "x.1.y", true), vec![(b(8), Some(1))]);
        assert_eq!(
            match_values(&d, "x.1.y"),
            vec![(b(8), Some(1)), (None, Some(1))]
        );
        let d = rawdoc! {"a": [[6, 7], [8, 9]]};
        assert_eq!(values(&d, "a.1", true).len(), 3);
        assert_eq!(
            match_values(&d, "a.1"),
            vec![(b(vec![Bson::Int32(8), Bson::Int32(9)]), Some(1))]
        );
        let d = rawdoc! {"a": [5]};
        assert_eq!(values(&d, "a.0.b", true), vec![(None, Some(0))]);
        assert!(match_values(&d, "a.0.b").is_empty());
        let d = rawdoc! {"a": [1, [{"b": 2}], 3]};
        assert_eq!(match_values(&d, "a.1.b"), vec![(b(2), Some(1))]);
    }

    #[test]
    fn nested_arrays_one_level() {
        let d = rawdoc! {"a": [[{"b": 1}]]};
        assert!(values(&d, "a.b", true).is_empty());
        assert_eq!(values(&d, "a.0.0.b", true), vec![(b(1), Some(0))]);
        assert_eq!(values(&d, "a.0.b", true), vec![(b(1), Some(0))]);
    }

    #[test]
    fn missing() {
        let d = rawdoc! {"a": 5, "c": {"d": 1}};
        assert_eq!(values(&d, "x", true), vec![(None, None)]);
        assert_eq!(values(&d, "a.b", true), vec![(None, None)]);
        assert_eq!(values(&d, "c.e", true), vec![(None, None)]);
    }

    #[test]
    fn get_path() {
        let d = rawdoc! {"a": [{"b": 1}, {"b": 2}], "c": {"d": "x"}};
        assert_eq!(get_path_raw(&d, "c.d").and_then(|v| v.as_str()), Some("x"));
        assert_eq!(get_path_raw(&d, "a.1.b").and_then(|v| v.as_i32()), Some(2));
        assert!(get_path_raw(&d, "a.b").is_none());
        assert!(get_path_raw(&d, "a.01").is_none());
    }
}
