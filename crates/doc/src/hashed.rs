//! MongoDB's hash of one BSON value (`BSONElementHasher::hash64`), the key of hashed indexes
//! and hashed shard keys.
//!
//! The digest is MD5 over: the seed (int32, little-endian), then per value its canonical type
//! (int32 LE, so every numeric type hashes alike), the field name with its NUL inside
//! embedded documents and arrays, and the value: numbers as the int64 they truncate to
//! (`safeNumberLongForHash`: NaN 0, saturated at the int64 range, the double 2^63 as
//! -2^63), other scalars as their BSON value bytes, documents and arrays as their elements
//! followed by the end-of-object marker. The result is the digest's first 8 bytes read as a
//! little-endian int64.

use bson::{Bson, RawDocumentBuf};
use md5::{Digest, Md5};

/// The seed hashed indexes and `$toHashedIndexKey` use.
pub const DEFAULT_HASH_SEED: i32 = 0;

/// The hash of `v` (a top-level value: no field name takes part).
pub fn hash64(v: &Bson, seed: i32) -> i64 {
    let mut h = Md5::new();
    h.update(seed.to_le_bytes());
    // The value's BSON bytes: the single element of `{"": v}`.
    let mut wrapper = RawDocumentBuf::new();
    match bson::RawBson::try_from(v.clone()) {
        Ok(raw) => wrapper.append("", raw),
        Err(_) => wrapper.append("", bson::RawBson::Null),
    }
    let bytes = wrapper.as_bytes();
    // 4 length bytes, the type byte, the empty name's NUL, then the value up to the
    // document's terminating NUL.
    let ty = bytes[4];
    hash_value(&mut h, ty, &bytes[6..bytes.len() - 1]);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

/// MongoDB's canonical type: types that compare as one class share a number.
fn canonical_type(ty: u8) -> i32 {
    match ty {
        0xFF => -1,
        0x7F => 127,
        0x00 | 0x06 => 0,
        0x0A => 5,
        0x01 | 0x10 | 0x12 | 0x13 => 10,
        0x02 | 0x0E => 15,
        0x03 => 20,
        0x04 => 25,
        0x05 => 30,
        0x07 => 35,
        0x08 => 40,
        0x09 => 45,
        0x11 => 47,
        0x0B => 50,
        0x0C => 55,
        0x0D => 60,
        0x0F => 65,
        _ => 0,
    }
}

fn hash_value(h: &mut Md5, ty: u8, value: &[u8]) {
    h.update(canonical_type(ty).to_le_bytes());
    hash_payload(h, ty, value);
}

fn hash_payload(h: &mut Md5, ty: u8, value: &[u8]) {
    match ty {
        0x01 | 0x10 | 0x12 | 0x13 => h.update(number_for_hash(ty, value).to_le_bytes()),
        0x03 | 0x04 => hash_elements(h, value),
        0x0F => {
            // int32 total, then the code as a string (length including its NUL), then the scope.
            let code_len = read_i32(value, 4).max(0) as usize;
            let code = value.get(8..8 + code_len).unwrap_or_default();
            h.update(code);
            hash_elements(h, value.get(8 + code_len..).unwrap_or_default());
        }
        _ => h.update(value),
    }
}

/// The elements of an embedded document (its bytes, length prefix included), each with its
/// field name, then the end-of-object marker (canonical type 0, no name, no value).
fn hash_elements(h: &mut Md5, doc: &[u8]) {
    let mut at = 4;
    while at < doc.len() {
        let ty = doc[at];
        if ty == 0 {
            break;
        }
        let name_end = doc[at + 1..]
            .iter()
            .position(|&b| b == 0)
            .map_or(doc.len(), |p| at + 1 + p);
        let value_start = (name_end + 1).min(doc.len());
        let len = value_len(ty, &doc[value_start..]).min(doc.len() - value_start);
        h.update(canonical_type(ty).to_le_bytes());
        h.update(&doc[at + 1..(name_end + 1).min(doc.len())]);
        hash_payload(h, ty, &doc[value_start..value_start + len]);
        at = value_start + len;
    }
    h.update(canonical_type(0).to_le_bytes());
}

/// The size of a value of type `ty` at the start of `v`.
fn value_len(ty: u8, v: &[u8]) -> usize {
    match ty {
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        0x02 | 0x0D | 0x0E => 4 + read_i32(v, 0).max(0) as usize,
        0x03 | 0x04 | 0x0F => read_i32(v, 0).max(0) as usize,
        0x05 => 5 + read_i32(v, 0).max(0) as usize,
        0x07 => 12,
        0x08 => 1,
        0x0B => {
            let first = v.iter().position(|&b| b == 0).map_or(v.len(), |p| p + 1);
            let second = v[first.min(v.len())..]
                .iter()
                .position(|&b| b == 0)
                .map_or(0, |p| p + 1);
            first + second
        }
        0x0C => 4 + read_i32(v, 0).max(0) as usize + 12,
        0x10 => 4,
        0x13 => 16,
        _ => 0,
    }
}

fn read_i32(v: &[u8], at: usize) -> i32 {
    v.get(at..at + 4)
        .map_or(0, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A number as the int64 the hash uses (MongoDB's `safeNumberLongForHash`).
fn number_for_hash(ty: u8, v: &[u8]) -> i64 {
    match ty {
        0x10 => i64::from(read_i32(v, 0)),
        0x12 => v
            .get(..8)
            .map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        0x01 => {
            let d = v
                .get(..8)
                .map_or(0.0, |b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            double_for_hash(d)
        }
        _ => {
            let mut b = [0u8; 16];
            if let Some(src) = v.get(..16) {
                b.copy_from_slice(src);
            }
            decimal_for_hash(crate::number::decode_decimal(b))
        }
    }
}

/// The double 2^63 keeps the value older servers gave it (the undefined cast wrapped).
fn double_for_hash(d: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d.is_nan() {
        0
    } else if d == TWO_63 {
        i64::MIN
    } else if d >= TWO_63 {
        i64::MAX
    } else if d < -TWO_63 {
        i64::MIN
    } else {
        d.trunc() as i64
    }
}

/// A decimal truncated toward zero, saturated at the int64 range; NaN is 0.
fn decimal_for_hash(d: crate::number::Dec) -> i64 {
    use crate::number::Dec;
    match d {
        Dec::NaN => 0,
        Dec::Inf { neg } => {
            if neg {
                i64::MIN
            } else {
                i64::MAX
            }
        }
        Dec::Finite { neg, coef, exp } => {
            let mut mag = coef;
            if exp < 0 {
                for _ in 0..(-exp).min(40) {
                    mag /= 10;
                }
            } else {
                for _ in 0..exp {
                    match mag.checked_mul(10) {
                        Some(m) => mag = m,
                        None => {
                            mag = u128::MAX;
                            break;
                        }
                    }
                }
            }
            if neg {
                if mag > i64::MAX as u128 + 1 {
                    i64::MIN
                } else {
                    (mag as i128).wrapping_neg() as i64
                }
            } else if mag > i64::MAX as u128 {
                i64::MAX
            } else {
                mag as i64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId};

    /// Values MongoDB documents or asserts (its startup self-test, the `$toHashedIndexKey`
    /// manual page, a differential suite run against MongoDB).
    #[test]
    fn equals_mongodb() {
        assert_eq!(hash64(&Bson::Int32(42), 0), -944302157085130861);
        assert_eq!(
            hash64(&Bson::String("string to hash".into()), 0),
            763543691661428748
        );
        assert_eq!(
            hash64(&Bson::String("hello".into()), 0),
            5347277839332858538
        );
    }

    #[test]
    fn numbers_hash_by_truncated_value() {
        let one = hash64(&Bson::Int32(1), 0);
        assert_eq!(hash64(&Bson::Int64(1), 0), one);
        assert_eq!(hash64(&Bson::Double(1.0), 0), one);
        assert_eq!(hash64(&Bson::Double(1.9), 0), one);
        assert_eq!(
            hash64(&Bson::Decimal128("1.5".parse().expect("lit")), 0),
            one
        );
        assert_ne!(hash64(&Bson::Int32(2), 0), one);
        assert_eq!(
            hash64(&Bson::Double(f64::NAN), 0),
            hash64(&Bson::Int32(0), 0)
        );
        assert_eq!(
            hash64(&Bson::Double(9_223_372_036_854_775_808.0), 0),
            hash64(&Bson::Int64(i64::MIN), 0)
        );
    }

    #[test]
    fn documents_hash_names_and_values() {
        let a = hash64(&Bson::Document(doc! {"a": 1, "b": "x"}), 0);
        assert_eq!(hash64(&Bson::Document(doc! {"a": 1.0, "b": "x"}), 0), a);
        assert_ne!(hash64(&Bson::Document(doc! {"b": "x", "a": 1}), 0), a);
        assert_ne!(hash64(&Bson::Document(doc! {"c": 1, "b": "x"}), 0), a);
        assert_ne!(hash64(&Bson::Array(vec![1.into(), "x".into()]), 0), a);
        let oid = ObjectId::parse_str("5b2be413c06d924ab26ff9ca").expect("lit");
        assert_ne!(hash64(&Bson::ObjectId(oid), 0), hash64(&Bson::Null, 0));
        assert_ne!(hash64(&Bson::Null, 0), hash64(&Bson::Undefined, 0));
    }
}
