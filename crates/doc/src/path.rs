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
