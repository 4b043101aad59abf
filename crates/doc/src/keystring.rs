//! Keystring: an order-preserving byte encoding of BSON values.
//!
//! `memcmp` of two encodings orders as [`crate::compare::cmp_raw`] (reversed for descending
//! fields, whose bytes are complemented). Numbers of all four types that are equal by value
//! encode to the same bytes, so `{_id: 1}` and `{_id: 1.0}` collide in a unique index; what
//! is needed to rebuild the exact original values (int32/int64/double/decimal128, string or
//! symbol, a decimal's exact digits) goes to a separate *type bits* vector.
//!
//! Layout of one value: a type byte ordered by canonical type, then a body:
//! - numbers: type NaN / negative / zero / positive; the magnitude as the IEEE bits of the
//!   magnitude rounded toward zero to a double (8 bytes), then `0x00` when that double is
//!   exact, else `0x01`, the decimal exponent and the decimal digits (each + 1) ended by
//!   `0x00`; negative magnitudes are complemented;
//! - strings, symbols, code, regex parts: bytes with NUL escaped as `00 FF`, ended by `00 01`;
//! - documents: per field its canonical type rank (+1), name, value; ended by `0x00`;
//! - arrays: the elements' encodings, ended by `0x00`;
//! - binData: length (4 bytes BE), subtype, bytes; dates: sign-flipped BE i64; timestamps:
//!   time, increment BE; ObjectIds: 12 bytes; booleans: in the type byte.
//!
//! Every encoding is prefix-free, so complementing a descending field keeps the order of the
//! following fields intact.

use crate::compare::{canonical_type, raw_db_pointer_bytes, raw_num};
use crate::number::{cmp_num, Dec, Num};
use bson::{Bson, RawBsonRef, RawDocument};
use nidus_common::{Error, Result};

mod tag {
    pub const MIN_KEY: u8 = 10;
    pub const UNDEFINED: u8 = 15;
    pub const NULL: u8 = 20;
    pub const NUM_NAN: u8 = 30;
    pub const NUM_NEG: u8 = 31;
    pub const NUM_ZERO: u8 = 32;
    pub const NUM_POS: u8 = 33;
    pub const STRING: u8 = 40;
    pub const OBJECT: u8 = 50;
    pub const ARRAY: u8 = 60;
    pub const BIN_DATA: u8 = 70;
    pub const OBJECT_ID: u8 = 80;
    pub const FALSE: u8 = 90;
    pub const TRUE: u8 = 91;
    pub const DATE: u8 = 100;
    pub const TIMESTAMP: u8 = 110;
    pub const REGEX: u8 = 120;
    pub const DB_POINTER: u8 = 130;
    pub const CODE: u8 = 140;
    pub const CODE_W_SCOPE: u8 = 150;
    pub const MAX_KEY: u8 = 240;
}

/// Type bits entries.
mod tb {
    pub const INT32: u8 = 0;
    pub const INT64: u8 = 1;
    pub const DOUBLE: u8 = 2;
    pub const NEG_ZERO: u8 = 3;
    /// Followed by the 16 decimal128 bytes.
    pub const DECIMAL: u8 = 4;
    pub const STRING: u8 = 10;
    pub const SYMBOL: u8 = 11;
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    type_bits: &'a mut Vec<u8>,
    mask: u8,
}

impl Encoder<'_> {
    fn byte(&mut self, b: u8) {
        self.out.push(b ^ self.mask);
    }

    fn bytes(&mut self, bs: &[u8]) {
        let m = self.mask;
        self.out.extend(bs.iter().map(|b| b ^ m));
    }

    fn cstring(&mut self, s: &[u8]) {
        for &b in s {
            self.byte(b);
            if b == 0 {
                self.byte(0xFF);
            }
        }
        self.bytes(&[0x00, 0x01]);
    }

    fn value(&mut self, v: RawBsonRef) {
        if let Some(n) = raw_num(v) {
            self.number(v, n);
            return;
        }
        match v {
            RawBsonRef::MinKey => self.byte(tag::MIN_KEY),
            RawBsonRef::Undefined => self.byte(tag::UNDEFINED),
            RawBsonRef::Null => self.byte(tag::NULL),
            RawBsonRef::MaxKey => self.byte(tag::MAX_KEY),
            RawBsonRef::String(s) | RawBsonRef::Symbol(s) => {
                let sym = matches!(v, RawBsonRef::Symbol(_));
                self.type_bits
                    .push(if sym { tb::SYMBOL } else { tb::STRING });
                self.byte(tag::STRING);
                self.cstring(s.as_bytes());
            }
            RawBsonRef::Document(d) => {
                self.byte(tag::OBJECT);
                self.document(d);
            }
            RawBsonRef::Array(a) => {
                self.byte(tag::ARRAY);
                for e in a.into_iter().map_while(|r| r.ok()) {
                    self.value(e);
                }
                self.byte(0);
            }
            RawBsonRef::Binary(b) => {
                self.byte(tag::BIN_DATA);
                self.bytes(&(b.bytes.len() as u32).to_be_bytes());
                self.byte(u8::from(b.subtype));
                self.bytes(b.bytes);
            }
            RawBsonRef::ObjectId(o) => {
                self.byte(tag::OBJECT_ID);
                self.bytes(&o.bytes());
            }
            RawBsonRef::Boolean(b) => self.byte(if b { tag::TRUE } else { tag::FALSE }),
            RawBsonRef::DateTime(d) => {
                self.byte(tag::DATE);
                self.bytes(&((d.timestamp_millis() as u64) ^ (1 << 63)).to_be_bytes());
            }
            RawBsonRef::Timestamp(t) => {
                self.byte(tag::TIMESTAMP);
                self.bytes(&t.time.to_be_bytes());
                self.bytes(&t.increment.to_be_bytes());
            }
            RawBsonRef::RegularExpression(r) => {
                self.byte(tag::REGEX);
                self.cstring(r.pattern.as_bytes());
                self.cstring(r.options.as_bytes());
            }
            RawBsonRef::DbPointer(_) => {
                let raw = raw_db_pointer_bytes(v);
                self.byte(tag::DB_POINTER);
                let len = raw
                    .get(..4)
                    .map_or(0, |l| i32::from_le_bytes([l[0], l[1], l[2], l[3]]));
                self.bytes(&((len as u32) ^ (1 << 31)).to_be_bytes());
                self.bytes(raw.get(4..).unwrap_or_default());
            }
            RawBsonRef::JavaScriptCode(c) => {
                self.byte(tag::CODE);
                self.cstring(c.as_bytes());
            }
            RawBsonRef::JavaScriptCodeWithScope(c) => {
                self.byte(tag::CODE_W_SCOPE);
                self.cstring(c.code.as_bytes());
                self.document(c.scope);
            }
            // Numbers are handled above.
            RawBsonRef::Double(_)
            | RawBsonRef::Int32(_)
            | RawBsonRef::Int64(_)
            | RawBsonRef::Decimal128(_) => {}
        }
    }

    fn document(&mut self, d: &RawDocument) {
        for (k, v) in d.into_iter().map_while(|r| r.ok()) {
            self.byte(canonical_type(v) + 1);
            self.cstring(k.as_bytes());
            self.value(v);
        }
        self.byte(0);
    }

    fn number(&mut self, v: RawBsonRef, n: Num) {
        match v {
            RawBsonRef::Int32(_) => self.type_bits.push(tb::INT32),
            RawBsonRef::Int64(_) => self.type_bits.push(tb::INT64),
            RawBsonRef::Double(d) if d == 0.0 && d.is_sign_negative() => {
                self.type_bits.push(tb::NEG_ZERO)
            }
            RawBsonRef::Double(_) => self.type_bits.push(tb::DOUBLE),
            RawBsonRef::Decimal128(d) => {
                self.type_bits.push(tb::DECIMAL);
                self.type_bits.extend_from_slice(&d.bytes());
            }
            _ => {}
        }
        if n.is_nan() {
            self.byte(tag::NUM_NAN);
            return;
        }
        let sign = cmp_num(n, Num::Int(0));
        if sign.is_eq() {
            self.byte(tag::NUM_ZERO);
            return;
        }
        let neg = sign.is_lt();
        self.byte(if neg { tag::NUM_NEG } else { tag::NUM_POS });
        let saved = self.mask;
        if neg {
            self.mask ^= 0xFF;
        }
        self.magnitude(abs(n));
        self.mask = saved;
    }

    /// A positive magnitude (finite or infinite).
    fn magnitude(&mut self, n: Num) {
        // An integer up to 2^53 is exactly its double: the encoding the general path below
        // computes with decimal arithmetic, without it (every int key takes this path).
        if let Num::Dec(Dec::Finite { coef, exp: 0, .. }) = n {
            if coef <= 1 << 53 {
                self.bytes(&(coef as f64).to_bits().to_be_bytes());
                self.byte(0);
                return;
            }
        }
        let d = trunc_to_f64(n);
        self.bytes(&d.to_bits().to_be_bytes());
        if cmp_num(n, Num::Double(d)).is_eq() {
            self.byte(0);
            return;
        }
        let (coef, exp) = exact_decimal(n);
        let digits = coef.to_string();
        let adj = digits.len() as i32 - 1 + exp;
        self.byte(1);
        self.bytes(&((adj as u32) ^ (1 << 31)).to_be_bytes());
        for c in digits.bytes() {
            self.byte(c - b'0' + 1);
        }
        self.byte(0);
    }
}

fn abs(n: Num) -> Num {
    match n {
        Num::Int(i) => Num::Dec(Dec::Finite {
            neg: false,
            coef: u128::from(i.unsigned_abs()),
            exp: 0,
        }),
        Num::Double(d) => Num::Double(d.abs()),
        Num::Dec(Dec::Finite { coef, exp, .. }) => Num::Dec(Dec::Finite {
            neg: false,
            coef,
            exp,
        }),
        Num::Dec(Dec::Inf { .. }) => Num::Dec(Dec::Inf { neg: false }),
        other => other,
    }
}

/// The largest double not above the positive magnitude `n`.
fn trunc_to_f64(n: Num) -> f64 {
    let mut d = match n {
        Num::Double(d) => return d,
        other => other.to_f64(),
    };
    if d.is_nan() {
        return 0.0;
    }
    while d > 0.0 && cmp_num(Num::Double(d), n).is_gt() {
        d = f64::from_bits(d.to_bits() - 1);
    }
    d
}

/// `(coef, exp)` with no trailing zeros in `coef`, for a non-double magnitude (an integer
/// or a finite decimal).
fn exact_decimal(n: Num) -> (u128, i32) {
    let (mut coef, mut exp) = match n {
        Num::Int(i) => (u128::from(i.unsigned_abs()), 0),
        Num::Dec(Dec::Finite { coef, exp, .. }) => (coef, exp),
        _ => (0, 0),
    };
    while coef != 0 && coef % 10 == 0 {
        coef /= 10;
        exp += 1;
    }
    (coef, exp)
}

/// Appends the encoding of one value (type information is dropped; see [`encode_key`]).
pub fn encode_value(out: &mut Vec<u8>, v: RawBsonRef, descending: bool) {
    let mut type_bits = Vec::new();
    encode_value_with_type_bits(out, &mut type_bits, v, descending);
}

/// Appends the encoding of one value and its type bits.
pub fn encode_value_with_type_bits(
    out: &mut Vec<u8>,
    type_bits: &mut Vec<u8>,
    v: RawBsonRef,
    descending: bool,
) {
    let mut e = Encoder {
        out,
        type_bits,
        mask: if descending { 0xFF } else { 0 },
    };
    e.value(v);
}

/// Encodes a compound key: `(key bytes, type bits)`.
pub fn encode_key(values: &[(RawBsonRef, bool)]) -> (Vec<u8>, Vec<u8>) {
    let mut out = Vec::new();
    let mut type_bits = Vec::new();
    for (v, desc) in values {
        encode_value_with_type_bits(&mut out, &mut type_bits, *v, *desc);
    }
    (out, type_bits)
}

/// Encodes a compound key of owned values.
pub fn encode_key_bson(values: &[(&Bson, bool)]) -> Result<(Vec<u8>, Vec<u8>)> {
    let raws = values
        .iter()
        .map(|(v, d)| {
            bson::RawBson::try_from((*v).clone())
                .map(|r| (r, *d))
                .map_err(|e| Error::bad_value(format!("cannot encode key value: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<(RawBsonRef, bool)> = raws
        .iter()
        .map(|(r, d)| (r.as_raw_bson_ref(), *d))
        .collect();
    Ok(encode_key(&refs))
}

fn corrupt(what: &str) -> Error {
    Error::internal(format!("corrupt keystring: {what}"))
}

struct Decoder<'a> {
    key: &'a [u8],
    pos: usize,
    tb: &'a [u8],
    tb_pos: usize,
    mask: u8,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .key
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated key"))?;
        self.pos += 1;
        Ok(b ^ self.mask)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        for x in a.iter_mut() {
            *x = self.byte()?;
        }
        Ok(a)
    }

    fn type_bit(&mut self) -> Result<u8> {
        let b = *self
            .tb
            .get(self.tb_pos)
            .ok_or_else(|| corrupt("truncated type bits"))?;
        self.tb_pos += 1;
        Ok(b)
    }

    fn cstring(&mut self) -> Result<Vec<u8>> {
        let mut s = Vec::new();
        loop {
            let b = self.byte()?;
            if b != 0 {
                s.push(b);
                continue;
            }
            match self.byte()? {
                0xFF => s.push(0),
                0x01 => return Ok(s),
                _ => return Err(corrupt("bad string escape")),
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.cstring()?).map_err(|_| corrupt("invalid UTF-8"))
    }

    fn value(&mut self) -> Result<Bson> {
        let t = self.byte()?;
        Ok(match t {
            tag::MIN_KEY => Bson::MinKey,
            tag::UNDEFINED => Bson::Undefined,
            tag::NULL => Bson::Null,
            tag::MAX_KEY => Bson::MaxKey,
            tag::NUM_NAN | tag::NUM_NEG | tag::NUM_ZERO | tag::NUM_POS => self.number(t)?,
            tag::STRING => {
                let s = self.string()?;
                match self.type_bit()? {
                    tb::SYMBOL => Bson::Symbol(s),
                    _ => Bson::String(s),
                }
            }
            tag::OBJECT => Bson::Document(self.document()?),
            tag::ARRAY => {
                let mut items = Vec::new();
                while self.peek()? != 0 {
                    items.push(self.value()?);
                }
                self.byte()?;
                Bson::Array(items)
            }
            tag::BIN_DATA => {
                let len = u32::from_be_bytes(self.array()?) as usize;
                let subtype = bson::spec::BinarySubtype::from(self.byte()?);
                let mut bytes = Vec::with_capacity(len.min(self.key.len()));
                for _ in 0..len {
                    bytes.push(self.byte()?);
                }
                Bson::Binary(bson::Binary { subtype, bytes })
            }
            tag::OBJECT_ID => Bson::ObjectId(bson::oid::ObjectId::from_bytes(self.array()?)),
            tag::FALSE => Bson::Boolean(false),
            tag::TRUE => Bson::Boolean(true),
            tag::DATE => {
                let ms = (u64::from_be_bytes(self.array()?) ^ (1 << 63)) as i64;
                Bson::DateTime(bson::DateTime::from_millis(ms))
            }
            tag::TIMESTAMP => {
                let time = u32::from_be_bytes(self.array()?);
                let increment = u32::from_be_bytes(self.array()?);
                Bson::Timestamp(bson::Timestamp { time, increment })
            }
            tag::REGEX => {
                let pattern = self.string()?;
                let options = self.string()?;
                Bson::RegularExpression(bson::Regex { pattern, options })
            }
            tag::DB_POINTER => self.db_pointer()?,
            tag::CODE => Bson::JavaScriptCode(self.string()?),
            tag::CODE_W_SCOPE => {
                let code = self.string()?;
                let scope = self.document()?;
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }
            _ => return Err(corrupt("unknown type byte")),
        })
    }

    fn peek(&self) -> Result<u8> {
        self.key
            .get(self.pos)
            .map(|b| b ^ self.mask)
            .ok_or_else(|| corrupt("truncated key"))
    }

    fn document(&mut self) -> Result<bson::Document> {
        let mut d = bson::Document::new();
        while self.byte()? != 0 {
            let name = self.string()?;
            let v = self.value()?;
            d.insert(name, v);
        }
        Ok(d)
    }

    fn db_pointer(&mut self) -> Result<Bson> {
        let len = (u32::from_be_bytes(self.array()?) ^ (1 << 31)) as i32;
        let mut raw = len.to_le_bytes().to_vec();
        for _ in 0..usize::try_from(len).map_err(|_| corrupt("bad DBPointer"))? + 12 {
            raw.push(self.byte()?);
        }
        // Rebuild through a raw document: [len][type 0x0C][name ""][value][NUL].
        let total = 4 + 1 + 1 + raw.len() + 1;
        let mut doc = (total as i32).to_le_bytes().to_vec();
        doc.push(0x0C);
        doc.push(0);
        doc.extend_from_slice(&raw);
        doc.push(0);
        let rd = RawDocument::from_bytes(&doc).map_err(|_| corrupt("bad DBPointer"))?;
        let v = rd
            .get("")
            .ok()
            .flatten()
            .ok_or_else(|| corrupt("bad DBPointer"))?;
        Bson::try_from(v).map_err(|_| corrupt("bad DBPointer"))
    }

    fn number(&mut self, t: u8) -> Result<Bson> {
        let mag = match t {
            tag::NUM_NAN => None,
            tag::NUM_ZERO => Some((0.0, None)),
            tag::NUM_NEG => {
                self.mask ^= 0xFF;
                let m = self.magnitude();
                self.mask ^= 0xFF;
                Some(m?)
            }
            _ => Some(self.magnitude()?),
        };
        let neg = t == tag::NUM_NEG;
        match self.type_bit()? {
            tb::DECIMAL => {
                let bytes: [u8; 16] = self.type_bits_array()?;
                Ok(Bson::Decimal128(bson::Decimal128::from_bytes(bytes)))
            }
            tb::NEG_ZERO => Ok(Bson::Double(-0.0)),
            tb::DOUBLE => Ok(Bson::Double(match mag {
                None => f64::NAN,
                Some((d, _)) if neg => -d,
                Some((d, _)) => d,
            })),
            kind @ (tb::INT32 | tb::INT64) => {
                let (d, exact) = mag.ok_or_else(|| corrupt("NaN integer"))?;
                let abs: i128 = match exact {
                    None => d as i128,
                    Some((digits, adj)) => digits_to_int(&digits, adj)?,
                };
                let v = if neg { -abs } else { abs };
                if kind == tb::INT32 {
                    i32::try_from(v)
                        .map(Bson::Int32)
                        .map_err(|_| corrupt("int32 range"))
                } else {
                    i64::try_from(v)
                        .map(Bson::Int64)
                        .map_err(|_| corrupt("int64 range"))
                }
            }
            _ => Err(corrupt("bad number type bits")),
        }
    }

    fn type_bits_array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        for x in a.iter_mut() {
            *x = self.type_bit()?;
        }
        Ok(a)
    }

    /// `(truncated double, exact digits and adjusted exponent when inexact)`.
    #[allow(clippy::type_complexity)]
    fn magnitude(&mut self) -> Result<(f64, Option<(Vec<u8>, i32)>)> {
        let d = f64::from_bits(u64::from_be_bytes(self.array()?));
        if self.byte()? == 0 {
            return Ok((d, None));
        }
        let adj = (u32::from_be_bytes(self.array()?) ^ (1 << 31)) as i32;
        let mut digits = Vec::new();
        loop {
            match self.byte()? {
                0 => break,
                b @ 1..=10 => digits.push(b - 1),
                _ => return Err(corrupt("bad digit")),
            }
        }
        Ok((d, Some((digits, adj))))
    }
}

fn digits_to_int(digits: &[u8], adj: i32) -> Result<i128> {
    let mut v: i128 = 0;
    for &d in digits {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(d)))
            .ok_or_else(|| corrupt("integer overflow"))?;
    }
    let zeros = adj - (digits.len() as i32 - 1);
    for _ in 0..zeros.max(0) {
        v = v
            .checked_mul(10)
            .ok_or_else(|| corrupt("integer overflow"))?;
    }
    Ok(v)
}

/// Decodes a key made of `directions.len()` values (extra bytes, e.g. an appended RecordId,
/// are ignored).
pub fn decode_key(key: &[u8], type_bits: &[u8], directions: &[bool]) -> Result<Vec<Bson>> {
    let mut d = Decoder {
        key,
        pos: 0,
        tb: type_bits,
        tb_pos: 0,
        mask: 0,
    };
    let mut out = Vec::with_capacity(directions.len());
    for desc in directions {
        d.mask = if *desc { 0xFF } else { 0 };
        out.push(d.value()?);
    }
    Ok(out)
}

/// The length of the encoding of the first `fields` values of `key` (where an appended
/// suffix such as a RecordId starts).
pub fn key_prefix_len(key: &[u8], type_bits: &[u8], directions: &[bool]) -> Result<usize> {
    let mut d = Decoder {
        key,
        pos: 0,
        tb: type_bits,
        tb_pos: 0,
        mask: 0,
    };
    for desc in directions {
        d.mask = if *desc { 0xFF } else { 0 };
        d.value()?;
    }
    Ok(d.pos)
}

#[cfg(test)]
mod tests;
