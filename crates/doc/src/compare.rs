//! MongoDB's BSON total order (`BSONElement::woCompare`).
//!
//! Values are first ordered by canonical type (see [`canonical_type`]), then within a type
//! bracket by value: numbers of all four types by mathematical value, strings and symbols by
//! bytes, documents field by field (type, name, value), arrays element by element, binData by
//! length then subtype then bytes, regexes by pattern then flags, and so on.
//!
//! The `_with` variants take an optional [`Collation`]; `None` is the binary order above. A
//! collation compares strings and symbols at any depth inside documents and arrays, as
//! MongoDB's string comparator does; field names, JavaScript code, regexes, DBPointer
//! namespaces and everything inside a code-with-scope's scope stay binary.

use crate::collation::Collation;
use crate::number::{cmp_num, decode_decimal, Num};
use bson::{Bson, RawBsonRef, RawDocument};
use std::cmp::Ordering;

/// Canonical type ranks, in MongoDB's order.
pub mod rank {
    pub const MIN_KEY: u8 = 0;
    pub const UNDEFINED: u8 = 1;
    pub const NULL: u8 = 2;
    pub const NUMBER: u8 = 3;
    pub const STRING: u8 = 4;
    pub const OBJECT: u8 = 5;
    pub const ARRAY: u8 = 6;
    pub const BIN_DATA: u8 = 7;
    pub const OBJECT_ID: u8 = 8;
    pub const BOOL: u8 = 9;
    pub const DATE: u8 = 10;
    pub const TIMESTAMP: u8 = 11;
    pub const REGEX: u8 = 12;
    pub const DB_POINTER: u8 = 13;
    pub const CODE: u8 = 14;
    pub const CODE_W_SCOPE: u8 = 15;
    pub const MAX_KEY: u8 = 16;
}

/// MongoDB canonical type order rank (MinKey lowest, MaxKey highest). Numbers share one
/// rank, as do string and symbol. Undefined ranks just below null (as in MongoDB, where a
/// missing field also compares as null in queries and sorts).
pub fn canonical_type(v: RawBsonRef) -> u8 {
    use rank::*;
    match v {
        RawBsonRef::MinKey => MIN_KEY,
        RawBsonRef::Undefined => UNDEFINED,
        RawBsonRef::Null => NULL,
        RawBsonRef::Double(_)
        | RawBsonRef::Int32(_)
        | RawBsonRef::Int64(_)
        | RawBsonRef::Decimal128(_) => NUMBER,
        RawBsonRef::String(_) | RawBsonRef::Symbol(_) => STRING,
        RawBsonRef::Document(_) => OBJECT,
        RawBsonRef::Array(_) => ARRAY,
        RawBsonRef::Binary(_) => BIN_DATA,
        RawBsonRef::ObjectId(_) => OBJECT_ID,
        RawBsonRef::Boolean(_) => BOOL,
        RawBsonRef::DateTime(_) => DATE,
        RawBsonRef::Timestamp(_) => TIMESTAMP,
        RawBsonRef::RegularExpression(_) => REGEX,
        RawBsonRef::DbPointer(_) => DB_POINTER,
        RawBsonRef::JavaScriptCode(_) => CODE,
        RawBsonRef::JavaScriptCodeWithScope(_) => CODE_W_SCOPE,
        RawBsonRef::MaxKey => MAX_KEY,
    }
}

/// MongoDB's name of a BSON type (`typeName()`): what `$type` returns and error messages print.
pub fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// [`canonical_type`] for an owned value.
pub fn canonical_type_bson(v: &Bson) -> u8 {
    use rank::*;
    match v {
        Bson::MinKey => MIN_KEY,
        Bson::Undefined => UNDEFINED,
        Bson::Null => NULL,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => NUMBER,
        Bson::String(_) | Bson::Symbol(_) => STRING,
        Bson::Document(_) => OBJECT,
        Bson::Array(_) => ARRAY,
        Bson::Binary(_) => BIN_DATA,
        Bson::ObjectId(_) => OBJECT_ID,
        Bson::Boolean(_) => BOOL,
        Bson::DateTime(_) => DATE,
        Bson::Timestamp(_) => TIMESTAMP,
        Bson::RegularExpression(_) => REGEX,
        Bson::DbPointer(_) => DB_POINTER,
        Bson::JavaScriptCode(_) => CODE,
        Bson::JavaScriptCodeWithScope(_) => CODE_W_SCOPE,
        Bson::MaxKey => MAX_KEY,
    }
}

/// The numeric view of a raw value, if it is a number.
pub fn raw_num(v: RawBsonRef) -> Option<Num> {
    match v {
        RawBsonRef::Int32(i) => Some(Num::Int(i64::from(i))),
        RawBsonRef::Int64(i) => Some(Num::Int(i)),
        RawBsonRef::Double(d) => Some(Num::Double(d)),
        RawBsonRef::Decimal128(d) => Some(Num::Dec(decode_decimal(d.bytes()))),
        _ => None,
    }
}

/// The numeric view of an owned value, if it is a number.
pub fn bson_num(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::Int(i64::from(*i))),
        Bson::Int64(i) => Some(Num::Int(*i)),
        Bson::Double(d) => Some(Num::Double(*d)),
        Bson::Decimal128(d) => Some(Num::Dec(decode_decimal(d.bytes()))),
        _ => None,
    }
}

/// MongoDB's BSON total order over raw values.
pub fn cmp_raw(a: RawBsonRef, b: RawBsonRef) -> Ordering {
    cmp_raw_with(a, b, None)
}

/// [`cmp_raw`] with strings compared under `collation` (`None`: binary).
pub fn cmp_raw_with(a: RawBsonRef, b: RawBsonRef, collation: Option<&Collation>) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (RawBsonRef::Document(x), RawBsonRef::Document(y)) => cmp_raw_docs_with(x, y, collation),
        (RawBsonRef::Array(x), RawBsonRef::Array(y)) => cmp_raw_seq(
            x.into_iter().map_while(|r| r.ok()),
            y.into_iter().map_while(|r| r.ok()),
            collation,
        ),
        // A scope's strings are never collated.
        (RawBsonRef::JavaScriptCodeWithScope(x), RawBsonRef::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| cmp_raw_docs(x.scope, y.scope)),
        (RawBsonRef::DbPointer(_), RawBsonRef::DbPointer(_)) => {
            cmp_db_pointer(&raw_db_pointer_bytes(a), &raw_db_pointer_bytes(b))
        }
        _ => cmp_scalar(&scalar_raw(a), &scalar_raw(b), collation),
    }
}

/// MongoDB's BSON total order over owned values (same order as [`cmp_raw`]).
pub fn cmp_bson(a: &Bson, b: &Bson) -> Ordering {
    cmp_bson_with(a, b, None)
}

/// [`cmp_bson`] with strings compared under `collation` (`None`: binary).
pub fn cmp_bson_with(a: &Bson, b: &Bson, collation: Option<&Collation>) -> Ordering {
    let (ta, tb) = (canonical_type_bson(a), canonical_type_bson(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => cmp_bson_docs_with(x, y, collation),
        (Bson::Array(x), Bson::Array(y)) => {
            for (ex, ey) in x.iter().zip(y.iter()) {
                let o = cmp_bson_with(ex, ey, collation);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        // A scope's strings are never collated.
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| cmp_bson_docs(&x.scope, &y.scope)),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => {
            cmp_db_pointer(&bson_db_pointer_bytes(a), &bson_db_pointer_bytes(b))
        }
        _ => cmp_scalar(&scalar_bson(a), &scalar_bson(b), collation),
    }
}

/// Compares two owned documents field by field: canonical type, then name, then value.
pub fn cmp_bson_docs(a: &bson::Document, b: &bson::Document) -> Ordering {
    cmp_bson_docs_with(a, b, None)
}

/// [`cmp_bson_docs`] with string values (not field names) compared under `collation`.
pub fn cmp_bson_docs_with(
    a: &bson::Document,
    b: &bson::Document,
    collation: Option<&Collation>,
) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = canonical_type_bson(va)
                    .cmp(&canonical_type_bson(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| cmp_bson_with(va, vb, collation));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// Compares two raw documents field by field: canonical type, then name, then value.
/// A malformed tail ends the document.
pub fn cmp_raw_docs(a: &RawDocument, b: &RawDocument) -> Ordering {
    cmp_raw_docs_with(a, b, None)
}

/// [`cmp_raw_docs`] with string values (not field names) compared under `collation`.
pub fn cmp_raw_docs_with(
    a: &RawDocument,
    b: &RawDocument,
    collation: Option<&Collation>,
) -> Ordering {
    let mut ia = a.into_iter().map_while(|r| r.ok());
    let mut ib = b.into_iter().map_while(|r| r.ok());
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = canonical_type(va)
                    .cmp(&canonical_type(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| cmp_raw_with(va, vb, collation));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

fn cmp_raw_seq<'a>(
    mut a: impl Iterator<Item = RawBsonRef<'a>>,
    mut b: impl Iterator<Item = RawBsonRef<'a>>,
    collation: Option<&Collation>,
) -> Ordering {
    loop {
        match (a.next(), b.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = cmp_raw_with(x, y, collation);
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// True when the two values are equal in MongoDB's order (e.g. `1 == 1.0`).
pub fn values_equal_raw(a: RawBsonRef, b: RawBsonRef) -> bool {
    cmp_raw(a, b) == Ordering::Equal
}

/// [`values_equal_raw`] under `collation`.
pub fn values_equal_raw_with(a: RawBsonRef, b: RawBsonRef, collation: Option<&Collation>) -> bool {
    cmp_raw_with(a, b, collation) == Ordering::Equal
}

/// True when the two owned values are equal in MongoDB's order.
pub fn values_equal_bson(a: &Bson, b: &Bson) -> bool {
    cmp_bson(a, b) == Ordering::Equal
}

/// [`values_equal_bson`] under `collation`.
pub fn values_equal_bson_with(a: &Bson, b: &Bson, collation: Option<&Collation>) -> bool {
    cmp_bson_with(a, b, collation) == Ordering::Equal
}

/// Compares a raw value with an owned one.
pub fn cmp_raw_bson(a: RawBsonRef, b: &Bson) -> Ordering {
    cmp_raw_bson_with(a, b, None)
}

/// [`cmp_raw_bson`] with strings compared under `collation` (`None`: binary).
pub fn cmp_raw_bson_with(a: RawBsonRef, b: &Bson, collation: Option<&Collation>) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type_bson(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (RawBsonRef::Document(_), _)
        | (RawBsonRef::Array(_), _)
        | (RawBsonRef::JavaScriptCodeWithScope(_), _)
        | (RawBsonRef::DbPointer(_), _) => match Bson::try_from(a) {
            Ok(owned) => cmp_bson_with(&owned, b, collation),
            Err(_) => Ordering::Less,
        },
        _ => cmp_scalar(&scalar_raw(a), &scalar_bson(b), collation),
    }
}

/// Scalar (non-container) values borrowed from either representation.
enum Scalar<'a> {
    Unit,
    Num(Num),
    /// A string or symbol: collated when a collation is given.
    Str(&'a str),
    /// JavaScript code: always binary.
    Code(&'a str),
    Bin(u8, &'a [u8]),
    Oid([u8; 12]),
    Bool(bool),
    Date(i64),
    Ts(u32, u32),
    Regex(&'a str, &'a str),
}

fn scalar_raw(v: RawBsonRef<'_>) -> Scalar<'_> {
    if let Some(n) = raw_num(v) {
        return Scalar::Num(n);
    }
    match v {
        RawBsonRef::String(s) | RawBsonRef::Symbol(s) => Scalar::Str(s),
        RawBsonRef::JavaScriptCode(s) => Scalar::Code(s),
        RawBsonRef::Binary(b) => Scalar::Bin(u8::from(b.subtype), b.bytes),
        RawBsonRef::ObjectId(o) => Scalar::Oid(o.bytes()),
        RawBsonRef::Boolean(b) => Scalar::Bool(b),
        RawBsonRef::DateTime(d) => Scalar::Date(d.timestamp_millis()),
        RawBsonRef::Timestamp(t) => Scalar::Ts(t.time, t.increment),
        RawBsonRef::RegularExpression(r) => Scalar::Regex(r.pattern, r.options),
        _ => Scalar::Unit,
    }
}

fn scalar_bson(v: &Bson) -> Scalar<'_> {
    if let Some(n) = bson_num(v) {
        return Scalar::Num(n);
    }
    match v {
        Bson::String(s) | Bson::Symbol(s) => Scalar::Str(s),
        Bson::JavaScriptCode(s) => Scalar::Code(s),
        Bson::Binary(b) => Scalar::Bin(u8::from(b.subtype), &b.bytes),
        Bson::ObjectId(o) => Scalar::Oid(o.bytes()),
        Bson::Boolean(b) => Scalar::Bool(*b),
        Bson::DateTime(d) => Scalar::Date(d.timestamp_millis()),
        Bson::Timestamp(t) => Scalar::Ts(t.time, t.increment),
        Bson::RegularExpression(r) => Scalar::Regex(&r.pattern, &r.options),
        _ => Scalar::Unit,
    }
}

/// Compares two scalars of the same canonical type.
fn cmp_scalar(a: &Scalar, b: &Scalar, collation: Option<&Collation>) -> Ordering {
    match (a, b) {
        (Scalar::Num(x), Scalar::Num(y)) => cmp_num(*x, *y),
        (Scalar::Str(x), Scalar::Str(y)) => match collation {
            None => x.as_bytes().cmp(y.as_bytes()),
            Some(c) => c.compare_str(x, y),
        },
        (Scalar::Code(x), Scalar::Code(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Scalar::Bin(sx, bx), Scalar::Bin(sy, by)) => bx
            .len()
            .cmp(&by.len())
            .then(sx.cmp(sy))
            .then_with(|| bx.cmp(by)),
        (Scalar::Oid(x), Scalar::Oid(y)) => x.cmp(y),
        (Scalar::Bool(x), Scalar::Bool(y)) => x.cmp(y),
        (Scalar::Date(x), Scalar::Date(y)) => x.cmp(y),
        (Scalar::Ts(tx, ix), Scalar::Ts(ty, iy)) => tx.cmp(ty).then(ix.cmp(iy)),
        (Scalar::Regex(px, fx), Scalar::Regex(py, fy)) => px
            .as_bytes()
            .cmp(py.as_bytes())
            .then_with(|| fx.as_bytes().cmp(fy.as_bytes())),
        _ => Ordering::Equal,
    }
}

/// The value bytes of a DBPointer (`int32 len, namespace, NUL, 12-byte oid`), read back from
/// a one-field document because the `bson` crate keeps its fields private.
pub fn raw_db_pointer_bytes(v: RawBsonRef) -> Vec<u8> {
    let mut d = bson::RawDocumentBuf::new();
    d.append("", v.to_raw_bson());
    let bytes = d.as_bytes();
    // 4 (doc len) + 1 (type) + 1 (empty key NUL) ... trailing NUL.
    bytes
        .get(6..bytes.len().saturating_sub(1))
        .unwrap_or_default()
        .to_vec()
}

fn bson_db_pointer_bytes(v: &Bson) -> Vec<u8> {
    match bson::RawBson::try_from(v.clone()) {
        Ok(raw) => raw_db_pointer_bytes(raw.as_raw_bson_ref()),
        Err(_) => Vec::new(),
    }
}

/// MongoDB compares DBPointers by namespace length, then namespace and oid bytes.
fn cmp_db_pointer(a: &[u8], b: &[u8]) -> Ordering {
    let len = |x: &[u8]| {
        x.get(..4)
            .map(|l| i32::from_le_bytes([l[0], l[1], l[2], l[3]]))
    };
    len(a)
        .cmp(&len(b))
        .then_with(|| a.get(4..).cmp(&b.get(4..)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Binary, DateTime, Decimal128, Regex, Timestamp};
    use proptest::prelude::*;

    fn ascending() -> Vec<Bson> {
        vec![
            Bson::MinKey,
            Bson::Undefined,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Double(f64::NEG_INFINITY),
            Bson::Int64(-5),
            Bson::Int32(0),
            Bson::Decimal128("0.5".parse::<Decimal128>().expect("lit")),
            Bson::Double(1.5),
            Bson::Int32(2),
            Bson::String(String::new()),
            Bson::String("a".into()),
            Bson::Symbol("b".into()),
            Bson::String("ba".into()),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"a": 1}),
            Bson::Document(doc! {"a": 1, "b": 1}),
            Bson::Document(doc! {"b": 0}),
            Bson::Document(doc! {"a": "x"}),
            Bson::Array(vec![]),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::Array(vec![Bson::Int32(1), Bson::Int32(0)]),
            Bson::Array(vec![Bson::Int32(2)]),
            Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::UserDefined(0x80),
                bytes: vec![9],
            }),
            Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![0, 0],
            }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(-1)),
            Bson::DateTime(DateTime::from_millis(5)),
            Bson::Timestamp(Timestamp {
                time: 1,
                increment: 9,
            }),
            Bson::Timestamp(Timestamp {
                time: 2,
                increment: 0,
            }),
            Bson::RegularExpression(Regex {
                pattern: "a".into(),
                options: "i".into(),
            }),
            Bson::RegularExpression(Regex {
                pattern: "b".into(),
                options: "".into(),
            }),
            Bson::JavaScriptCode("x".into()),
            Bson::MaxKey,
        ]
    }

    #[test]
    fn total_order_table() {
        let vals = ascending();
        for (i, a) in vals.iter().enumerate() {
            for (j, b) in vals.iter().enumerate() {
                assert_eq!(cmp_bson(a, b), i.cmp(&j), "{a:?} vs {b:?}");
                let (ra, rb) = (to_raw(a), to_raw(b));
                let (ra, rb) = (ra.as_raw_bson_ref(), rb.as_raw_bson_ref());
                assert_eq!(cmp_raw(ra, rb), i.cmp(&j), "raw {a:?} vs {b:?}");
                assert_eq!(cmp_raw_bson(ra, b), i.cmp(&j), "mixed {a:?} vs {b:?}");
            }
        }
    }

    fn to_raw(b: &Bson) -> bson::RawBson {
        bson::RawBson::try_from(b.clone()).expect("convertible")
    }

    #[test]
    fn numbers_equal_across_types() {
        assert!(values_equal_bson(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(values_equal_bson(
            &Bson::Int64(3),
            &Bson::Decimal128("3.000".parse().expect("lit"))
        ));
        assert!(values_equal_bson(
            &Bson::Document(doc! {"a": 1}),
            &Bson::Document(doc! {"a": 1.0})
        ));
        assert!(!values_equal_bson(
            &Bson::Document(doc! {"a": 1, "b": 2}),
            &Bson::Document(doc! {"b": 2, "a": 1})
        ));
        assert!(values_equal_bson(
            &Bson::String("x".into()),
            &Bson::Symbol("x".into())
        ));
    }

    fn collation(spec: bson::Document) -> Collation {
        match Collation::parse(&spec) {
            Ok(Some(c)) => c,
            other => panic!("{spec}: {other:?}"),
        }
    }

    fn code_w_scope(code: &str, scope: bson::Document) -> Bson {
        Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: code.into(),
            scope,
        })
    }

    /// Asserts `a` vs `b` gives `want` (and the reverse) through every entry point.
    fn assert_collated(c: Option<&Collation>, a: &Bson, b: &Bson, want: Ordering) {
        let (ra, rb) = (to_raw(a), to_raw(b));
        let (ra, rb) = (ra.as_raw_bson_ref(), rb.as_raw_bson_ref());
        assert_eq!(
            cmp_bson_with(a, b, c),
            want,
            "owned {a:?} vs {b:?} under {c:?}"
        );
        assert_eq!(
            cmp_bson_with(b, a, c),
            want.reverse(),
            "owned {b:?} vs {a:?}"
        );
        assert_eq!(
            cmp_raw_with(ra, rb, c),
            want,
            "raw {a:?} vs {b:?} under {c:?}"
        );
        assert_eq!(
            cmp_raw_bson_with(ra, b, c),
            want,
            "mixed {a:?} vs {b:?} under {c:?}"
        );
        assert_eq!(values_equal_bson_with(a, b, c), want == Ordering::Equal);
        assert_eq!(values_equal_raw_with(ra, rb, c), want == Ordering::Equal);
    }

    #[test]
    fn collated_order_table() {
        use Ordering::{Equal, Greater, Less};
        let s = |v: &str| Bson::String(v.into());
        let primary = collation(doc! {"locale": "en", "strength": 1});
        let secondary = collation(doc! {"locale": "en", "strength": 2});
        let numeric = collation(doc! {"locale": "en", "numericOrdering": true});
        let cases: Vec<(Option<&Collation>, Bson, Bson, Ordering)> = vec![
            (None, s("a"), s("A"), Greater),
            (Some(&secondary), s("a"), s("A"), Equal),
            (Some(&secondary), s("a"), s("á"), Less),
            (Some(&primary), s("a"), s("á"), Equal),
            (Some(&secondary), Bson::Symbol("a".into()), s("A"), Equal),
            // Strings at any depth.
            (
                Some(&secondary),
                Bson::Document(doc! {"a": "x"}),
                Bson::Document(doc! {"a": "X"}),
                Equal,
            ),
            (
                Some(&secondary),
                Bson::Array(vec![s("a"), s("B")]),
                Bson::Array(vec![s("A"), s("b")]),
                Equal,
            ),
            (
                Some(&primary),
                Bson::Document(doc! {"a": [{"b": "é"}, "Z"]}),
                Bson::Document(doc! {"a": [{"b": "E"}, "z"]}),
                Equal,
            ),
            (
                Some(&numeric),
                Bson::Array(vec![s("10")]),
                Bson::Array(vec![s("9")]),
                Greater,
            ),
            (
                None,
                Bson::Array(vec![s("10")]),
                Bson::Array(vec![s("9")]),
                Less,
            ),
            // Field names stay binary.
            (
                Some(&primary),
                Bson::Document(doc! {"a": 1}),
                Bson::Document(doc! {"A": 1}),
                Greater,
            ),
            // Other types are unaffected.
            (Some(&primary), Bson::Int32(1), Bson::Double(1.0), Equal),
            (Some(&primary), Bson::Int32(2), Bson::Int64(10), Less),
            (Some(&primary), s("A"), Bson::Int32(1), Greater),
            (
                Some(&primary),
                Bson::JavaScriptCode("a".into()),
                Bson::JavaScriptCode("A".into()),
                Greater,
            ),
            (
                Some(&primary),
                code_w_scope("f", doc! {"x": "a"}),
                code_w_scope("f", doc! {"x": "A"}),
                Greater,
            ),
            (
                Some(&primary),
                Bson::RegularExpression(Regex {
                    pattern: "a".into(),
                    options: "".into(),
                }),
                Bson::RegularExpression(Regex {
                    pattern: "A".into(),
                    options: "".into(),
                }),
                Greater,
            ),
        ];
        for (c, a, b, want) in &cases {
            assert_collated(*c, a, b, *want);
        }
    }

    fn leaf() -> impl Strategy<Value = Bson> {
        prop_oneof![
            "[aAáb 1-]{0,3}".prop_map(Bson::String),
            "[aA]{0,2}".prop_map(Bson::Symbol),
            (0..3i32).prop_map(Bson::Int32),
            Just(Bson::Null),
        ]
    }

    fn value() -> impl Strategy<Value = Bson> {
        leaf().prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                proptest::collection::vec(("[aA]", inner), 0..3)
                    .prop_map(|kvs| { Bson::Document(kvs.into_iter().collect()) }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Without a collation, strings keep their byte order.
        #[test]
        fn no_collation_is_binary(a in ".{0,4}", b in ".{0,4}") {
            let want = a.as_bytes().cmp(b.as_bytes());
            prop_assert_eq!(cmp_bson_with(&Bson::String(a), &Bson::String(b), None), want);
        }

        /// Raw, owned and mixed comparisons agree under a collation, and stay antisymmetric.
        #[test]
        fn collated_representations_agree(a in value(), b in value()) {
            let c = collation(doc! {"locale": "en", "strength": 2, "alternate": "shifted"});
            let want = cmp_bson_with(&a, &b, Some(&c));
            let (ra, rb) = (to_raw(&a), to_raw(&b));
            let (ra, rb) = (ra.as_raw_bson_ref(), rb.as_raw_bson_ref());
            prop_assert_eq!(cmp_bson_with(&b, &a, Some(&c)), want.reverse());
            prop_assert_eq!(cmp_raw_with(ra, rb, Some(&c)), want);
            prop_assert_eq!(cmp_raw_bson_with(ra, &b, Some(&c)), want);
        }
    }
}
