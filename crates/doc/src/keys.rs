//! Index key generation (MongoDB's btree key generator) and the per-path key values sorts use.
//!
//! For one path, the key values of a document are: each element of an array met along the
//! path (one level of implicit traversal, as queries), `null` for a missing field and
//! `undefined` for an empty array at the end of the path.

use crate::collation::Collation;
use crate::compare::{cmp_raw_with, values_equal_bson};
use crate::path::{array_index, top_level_value, walk, FieldPath};
use bson::{Bson, RawBsonRef, RawDocument};
use nidus_common::{Error, ErrorCode, Result};

/// The key values of `path` in `doc` (unsorted, possibly repeated).
pub fn path_key_values<'a>(doc: &'a RawDocument, path: &FieldPath) -> Vec<RawBsonRef<'a>> {
    let mut out = Vec::new();
    walk(doc, path, false, &mut |item| {
        match item.value {
            None => out.push(RawBsonRef::Null),
            Some(RawBsonRef::Array(a)) => {
                let before = out.len();
                out.extend(a.into_iter().map_while(|r| r.ok()));
                if out.len() == before {
                    out.push(RawBsonRef::Undefined);
                }
            }
            Some(v) => out.push(v),
        }
        false
    });
    if out.is_empty() {
        out.push(RawBsonRef::Null);
    }
    out
}

/// The smallest (ascending) or largest (descending) key value of `path`: a sort's key.
pub fn sort_key_value<'a>(
    doc: &'a RawDocument,
    path: &FieldPath,
    descending: bool,
) -> RawBsonRef<'a> {
    sort_key_value_with(doc, path, descending, None)
}

/// [`sort_key_value`] with strings ordered by a collation.
pub fn sort_key_value_with<'a>(
    doc: &'a RawDocument,
    path: &FieldPath,
    descending: bool,
    collation: Option<&Collation>,
) -> RawBsonRef<'a> {
    // A top-level field holding no array: its value alone is the key (missing: null).
    if path.len() == 1 {
        if let Some(found) = path
            .parts()
            .next()
            .and_then(|name| top_level_value(doc, name))
        {
            return found.unwrap_or(RawBsonRef::Null);
        }
    }
    let vals = path_key_values(doc, path);
    let pick = if descending {
        vals.into_iter()
            .max_by(|a, b| cmp_raw_with(*a, *b, collation))
    } else {
        vals.into_iter()
            .min_by(|a, b| cmp_raw_with(*a, *b, collation))
    };
    pick.unwrap_or(RawBsonRef::Null)
}

/// The index keys of one document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IndexKeys {
    /// One key per combination of array elements, deduplicated, in generation order.
    pub keys: Vec<Vec<Bson>>,
    /// For each field of the pattern, the positions of its path components that are arrays
    /// in this document (MongoDB's `multiKeyPaths`).
    pub multikey_paths: Vec<Vec<usize>>,
    pub is_multikey: bool,
}

/// Generates the keys of `doc` for the index `pattern` (`(path, descending)` per field).
/// `sparse` indexes produce no key when every field is missing. Two fields whose paths hold
/// arrays fail with CannotIndexParallelArrays (171).
pub fn index_keys(
    doc: &RawDocument,
    pattern: &[(String, bool)],
    sparse: bool,
) -> Result<IndexKeys> {
    let mut per_field = Vec::with_capacity(pattern.len());
    let mut multikey_paths = Vec::with_capacity(pattern.len());
    let mut all_missing = true;
    let mut array_field: Option<String> = None;
    for (path, _) in pattern {
        let parts: Vec<&str> = path.split('.').collect();
        let mut gen = FieldKeys::default();
        gen.collect(RawBsonRef::Document(doc), &parts, 0);
        all_missing &= !gen.seen_value;
        if let Some(&first) = gen.array_positions.iter().next() {
            let name = parts.get(first).copied().unwrap_or_default();
            if let Some(other) = &array_field {
                return Err(Error::new(
                    ErrorCode::CannotIndexParallelArrays,
                    format!("cannot index parallel arrays [{name}] [{other}]"),
                ));
            }
            array_field = Some(name.to_string());
        }
        let mut positions: Vec<usize> = gen.array_positions.into_iter().collect();
        positions.sort_unstable();
        positions.dedup();
        multikey_paths.push(positions);
        per_field.push(dedup(gen.values));
    }
    if sparse && all_missing {
        return Ok(IndexKeys {
            keys: Vec::new(),
            multikey_paths,
            is_multikey: false,
        });
    }
    let is_multikey = multikey_paths.iter().any(|p| !p.is_empty());
    Ok(IndexKeys {
        keys: cartesian(&per_field),
        multikey_paths,
        is_multikey,
    })
}

/// The one key of `doc` in an index whose fields are all top-level names, each holding a
/// scalar or missing (null), read straight from the document's bytes: what [`index_keys`]
/// generates then (one key, no multikey path), without its per-path walk. `None` where
/// [`index_keys`] must decide: a dotted path, an array or embedded document, a type the
/// byte walk leaves to the element iterator, a sparse index with every field missing.
pub fn top_level_scalar_key<'a>(
    doc: &'a RawDocument,
    pattern: &[(String, bool)],
    sparse: bool,
) -> Option<Vec<RawBsonRef<'a>>> {
    let mut key = Vec::with_capacity(pattern.len());
    let mut all_missing = true;
    for (path, _) in pattern {
        if path.contains('.') {
            return None;
        }
        match top_level_value(doc, path)? {
            None => key.push(RawBsonRef::Null),
            Some(RawBsonRef::Document(_)) => return None,
            Some(v) => {
                all_missing = false;
                key.push(v);
            }
        }
    }
    if sparse && all_missing {
        return None;
    }
    Some(key)
}

fn dedup(values: Vec<Bson>) -> Vec<Bson> {
    let mut out: Vec<Bson> = Vec::with_capacity(values.len());
    for v in values {
        if !out
            .iter()
            .any(|o| values_equal_bson(o, &v) && same_type(o, &v))
        {
            out.push(v);
        }
    }
    out
}

fn same_type(a: &Bson, b: &Bson) -> bool {
    a.element_type() == b.element_type()
}

/// The keys: one per combination (only one field can contribute several).
fn cartesian(per_field: &[Vec<Bson>]) -> Vec<Vec<Bson>> {
    let mut keys: Vec<Vec<Bson>> = vec![Vec::with_capacity(per_field.len())];
    for vals in per_field {
        let mut next = Vec::with_capacity(keys.len() * vals.len().max(1));
        for k in &keys {
            for v in vals {
                let mut k2 = k.clone();
                k2.push(v.clone());
                next.push(k2);
            }
        }
        keys = next;
    }
    keys
}

#[derive(Default)]
struct FieldKeys {
    values: Vec<Bson>,
    array_positions: std::collections::BTreeSet<usize>,
    seen_value: bool,
}

impl FieldKeys {
    fn push(&mut self, v: RawBsonRef) {
        self.seen_value = true;
        self.values.push(Bson::try_from(v).unwrap_or(Bson::Null));
    }

    fn push_missing(&mut self) {
        self.values.push(Bson::Null);
    }

    /// `cur` is the value at component `i - 1` of `parts` (the document for `i == 0`).
    fn collect(&mut self, cur: RawBsonRef, parts: &[&str], i: usize) {
        let Some(part) = parts.get(i) else {
            self.leaf(cur, i);
            return;
        };
        match cur {
            RawBsonRef::Document(d) => match d.get(part).ok().flatten() {
                Some(v) => self.collect(v, parts, i + 1),
                None => self.push_missing(),
            },
            RawBsonRef::Array(a) if i > 0 => self.array_middle(a, parts, i),
            _ => self.push_missing(),
        }
    }

    fn leaf(&mut self, v: RawBsonRef, i: usize) {
        match v {
            RawBsonRef::Array(a) => {
                self.mark_array(i - 1);
                let mut any = false;
                for e in a.into_iter().map_while(|r| r.ok()) {
                    any = true;
                    self.push(e);
                }
                if !any {
                    self.seen_value = true;
                    self.values.push(Bson::Undefined);
                }
            }
            other => self.push(other),
        }
    }

    fn mark_array(&mut self, component: usize) {
        self.array_positions.insert(component);
    }

    /// An array at component `i - 1` with more path to follow.
    fn array_middle(&mut self, a: &bson::RawArray, parts: &[&str], i: usize) {
        if let Some(idx) = array_index(parts[i]) {
            // A positional component: follow the element, no implicit traversal. An element
            // picked by the last component is one value, even an array (as the matcher
            // compares it whole).
            match a.get(idx).ok().flatten() {
                Some(v) if i + 1 == parts.len() => self.push(v),
                Some(v) => self.collect(v, parts, i + 1),
                None => self.push_missing(),
            }
            return;
        }
        self.mark_array(i - 1);
        let mut any = false;
        for e in a.into_iter().map_while(|r| r.ok()) {
            any = true;
            match e {
                RawBsonRef::Document(_) => self.collect(e, parts, i),
                _ => self.push_missing(),
            }
        }
        if !any {
            self.push_missing();
        }
    }
}

/// The one key of `doc` in a hashed index (MongoDB's hash key generator) before hashing:
/// each field's value (null when missing; documents whole). No array may lie on any key path
/// (16766); a sparse index has no key when every field is missing. The caller replaces the
/// hashed field's value by its hash (after applying the index's collation).
pub fn hashed_index_keys(
    doc: &RawDocument,
    pattern: &[(String, bool)],
    sparse: bool,
) -> Result<Vec<Vec<Bson>>> {
    let mut key = Vec::with_capacity(pattern.len());
    let mut all_missing = true;
    for (path, _) in pattern {
        let value = hashed_path_value(doc, path)?;
        all_missing &= value.is_none();
        key.push(value.unwrap_or(Bson::Null));
    }
    if sparse && all_missing {
        return Ok(Vec::new());
    }
    Ok(vec![key])
}

/// The value at `path` without array traversal (a numeric component names a field of a
/// document, never an element): None when missing, 16766 at the first array met.
fn hashed_path_value(doc: &RawDocument, path: &str) -> Result<Option<Bson>> {
    let array_error = |at: &str| {
        Error::new(
            ErrorCode::Location(16766),
            format!(
                "Error: hashed indexes do not currently support array values. Found array at path: {at}"
            ),
        )
    };
    let parts: Vec<&str> = path.split('.').collect();
    let mut current = RawBsonRef::Document(doc);
    for (i, part) in parts.iter().enumerate() {
        let RawBsonRef::Document(d) = current else {
            return Ok(None);
        };
        match d.get(part) {
            Ok(Some(RawBsonRef::Array(_))) => return Err(array_error(&parts[..=i].join("."))),
            Ok(Some(v)) => current = v,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Error::internal(format!("corrupt document: {e}"))),
        }
    }
    Bson::try_from(current)
        .map(Some)
        .map_err(|e| Error::internal(format!("corrupt document: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, rawdoc};

    fn pat(fields: &[(&str, bool)]) -> Vec<(String, bool)> {
        fields.iter().map(|(p, d)| (p.to_string(), *d)).collect()
    }

    #[test]
    fn multikey_keys() {
        let d = rawdoc! {"a": [1, 2, 2], "b": {"c": "x"}};
        let k = index_keys(&d, &pat(&[("a", false), ("b.c", false)]), false).expect("keys");
        assert_eq!(
            k.keys,
            vec![
                vec![Bson::Int32(1), Bson::String("x".into())],
                vec![Bson::Int32(2), Bson::String("x".into())]
            ]
        );
        assert_eq!(k.multikey_paths, vec![vec![0], vec![]]);
        assert!(k.is_multikey);
    }

    #[test]
    fn missing_and_empty() {
        let k = index_keys(&rawdoc! {"b": 1}, &pat(&[("a", false)]), false).expect("keys");
        assert_eq!(k.keys, vec![vec![Bson::Null]]);
        let k = index_keys(&rawdoc! {"b": 1}, &pat(&[("a", false)]), true).expect("keys");
        assert!(k.keys.is_empty());
        let k = index_keys(&rawdoc! {"a": []}, &pat(&[("a", false)]), false).expect("keys");
        assert_eq!(k.keys, vec![vec![Bson::Undefined]]);
        assert!(k.is_multikey);
    }

    #[test]
    fn nested_paths() {
        let d = rawdoc! {"a": [{"b": 1}, {"b": [2, 1]}, {"c": 1}]};
        let k = index_keys(&d, &pat(&[("a.b", false)]), false).expect("keys");
        assert_eq!(
            k.keys,
            vec![vec![Bson::Int32(1)], vec![Bson::Int32(2)], vec![Bson::Null]]
        );
        assert_eq!(k.multikey_paths, vec![vec![0, 1]]);
    }

    #[test]
    fn parallel_arrays() {
        let d = rawdoc! {"a": [1], "b": [2]};
        let e = index_keys(&d, &pat(&[("a", false), ("b", false)]), false).expect_err("parallel");
        assert_eq!(e.code, ErrorCode::CannotIndexParallelArrays);
        assert_eq!(e.message, "cannot index parallel arrays [b] [a]");
    }

    /// The keystring and type bits of a key, as the engine stores it.
    fn encoded(values: &[RawBsonRef], pattern: &[(String, bool)]) -> (Vec<u8>, Vec<u8>) {
        let parts: Vec<(RawBsonRef, bool)> = values
            .iter()
            .zip(pattern)
            .map(|(v, (_, desc))| (*v, *desc))
            .collect();
        crate::keystring::encode_key(&parts)
    }

    /// The fast walk answers only where `index_keys` makes exactly one key, not multikey,
    /// of the same values and the same encoding (differential, over every value type, arrays,
    /// embedded documents, repeated names, missing fields, dotted paths, sparse).
    fn check_scalar_key(doc: &RawDocument, pattern: &[(String, bool)], sparse: bool) -> bool {
        let general = index_keys(doc, pattern, sparse);
        let Some(fast) = top_level_scalar_key(doc, pattern, sparse) else {
            return false;
        };
        let general = general.expect("index_keys fails where the fast walk answers");
        assert_eq!(general.keys.len(), 1, "{doc:?} {pattern:?}");
        assert!(!general.is_multikey);
        assert_eq!(
            general.multikey_paths,
            vec![Vec::<usize>::new(); pattern.len()]
        );
        let as_bson: Vec<Bson> = fast
            .iter()
            .map(|v| Bson::try_from(*v).expect("scalar"))
            .collect();
        assert_eq!(general.keys[0], as_bson, "{doc:?} {pattern:?}");
        let raw: Vec<bson::RawBson> = general.keys[0]
            .iter()
            .map(|v| bson::RawBson::try_from(v.clone()).expect("raw"))
            .collect();
        let refs: Vec<RawBsonRef> = raw.iter().map(|v| v.as_raw_bson_ref()).collect();
        assert_eq!(encoded(&fast, pattern), encoded(&refs, pattern));
        true
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Bson> {
        use proptest::prelude::*;
        let scalar = prop_oneof![
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            prop_oneof![
                Just(0.0),
                Just(-0.0),
                Just(f64::NAN),
                Just(2.5),
                Just(1e300)
            ]
            .prop_map(Bson::Double),
            "[a-cé]{0,3}".prop_map(Bson::String),
            Just(Bson::Null),
            Just(Bson::Undefined),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i64>().prop_map(|m| Bson::DateTime(bson::DateTime::from_millis(m))),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
            (any::<u32>(), any::<u32>())
                .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(bson::Decimal128::from_bytes(b))),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            Just(Bson::RegularExpression(bson::Regex {
                pattern: "a".into(),
                options: "i".into()
            })),
            Just(Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![1, 2]
            })),
            Just(Bson::JavaScriptCode("f()".into())),
            Just(Bson::Symbol("s".into())),
        ];
        scalar.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                proptest::collection::vec(("[ab]", inner), 0..3)
                    .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
            ]
        })
    }

    /// Raw documents whose fields come from a small set of names, repeats allowed (the
    /// first one is the one paths see).
    fn raw_document(fields: Vec<(usize, Bson)>) -> bson::RawDocumentBuf {
        let mut out = bson::RawDocumentBuf::new();
        for (name, v) in fields {
            let name = ["a", "b", "c", "é"][name % 4];
            out.append(name, bson::RawBson::try_from(v).expect("raw"));
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn top_level_scalar_keys_are_index_keys(
            fields in proptest::collection::vec((0usize..4, any_value()), 0..5),
            pattern in proptest::collection::vec(
                (proptest::sample::select(vec!["a", "b", "c", "é", "a.b", "b.0"]),
                 proptest::bool::ANY),
                1..4,
            ),
            sparse in proptest::bool::ANY,
        ) {
            let doc = raw_document(fields);
            let pattern: Vec<(String, bool)> =
                pattern.into_iter().map(|(p, d)| (p.to_string(), d)).collect();
            check_scalar_key(&doc, &pattern, sparse);
        }
    }

    #[test]
    fn the_fast_walk_answers_for_top_level_scalars_only() {
        let p = |f: &[(&str, bool)]| pat(f);
        let answered = [
            (rawdoc! {"_id": 1, "k": "x"}, p(&[("k", false)]), false),
            (
                rawdoc! {"_id": 1, "k": 2.5},
                p(&[("k", true), ("_id", false)]),
                true,
            ),
            (rawdoc! {"_id": 1}, p(&[("k", false)]), false),
            (rawdoc! {"k": null, "k": [1]}, p(&[("k", false)]), true),
            (rawdoc! {"b": {"x": 1}, "k": 1}, p(&[("k", false)]), false),
        ];
        for (d, pattern, sparse) in &answered {
            assert!(check_scalar_key(d, pattern, *sparse), "{d:?} {pattern:?}");
        }
        let left = [
            (rawdoc! {"k": [1, 2]}, p(&[("k", false)]), false),
            (rawdoc! {"k": {"a": 1}}, p(&[("k", false)]), false),
            (rawdoc! {"k": {"a": 1}}, p(&[("k.a", false)]), false),
            (rawdoc! {"_id": 1}, p(&[("k", false)]), true),
            (
                rawdoc! {"r": bson::Regex { pattern: "a".into(), options: String::new() }, "k": 1},
                p(&[("k", false)]),
                false,
            ),
        ];
        for (d, pattern, sparse) in &left {
            assert!(!check_scalar_key(d, pattern, *sparse), "{d:?} {pattern:?}");
        }
    }

    #[test]
    fn sort_keys() {
        let d = rawdoc! {"a": [3, 1, "x"], "e": []};
        let p = FieldPath::parse("a");
        assert_eq!(sort_key_value(&d, &p, false).as_i32(), Some(1));
        assert_eq!(sort_key_value(&d, &p, true).as_str(), Some("x"));
        let e = FieldPath::parse("e");
        assert_eq!(sort_key_value(&d, &e, false), RawBsonRef::Undefined);
        let m = FieldPath::parse("m");
        assert_eq!(sort_key_value(&d, &m, false), RawBsonRef::Null);
        let _ = doc! {};
    }
}
