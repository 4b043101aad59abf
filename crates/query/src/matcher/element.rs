//! `$exists` and `$type`.

use bson::spec::ElementType;
use bson::{Bson, RawBsonRef};
use nidus_common::{Error, Result};

/// MongoDB's truthiness of a BSON value (`$exists: 0` is false, `$exists: "x"` is true).
pub fn true_value(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(_) => nidus_doc::compare::bson_num(v)
            .is_some_and(|n| nidus_doc::number::cmp_num(n, nidus_doc::number::Num::Int(0)).is_ne()),
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// The set of BSON type codes of a `$type` (with `"number"` expanded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSet {
    /// BSON type bytes (MinKey 0xFF, MaxKey 0x7F).
    pub codes: Vec<u8>,
    pub all_numbers: bool,
}

const ALIASES: &[(&str, u8)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", 0xFF),
    ("maxKey", 0x7F),
];

/// The BSON type code of a `$type` alias (`"number"` excluded: it names several types).
pub fn alias_code(name: &str) -> Option<u8> {
    ALIASES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

fn valid_code(n: i64) -> Option<u8> {
    match n {
        1..=19 => Some(n as u8),
        -1 => Some(0xFF),
        127 => Some(0x7F),
        _ => None,
    }
}

impl TypeSet {
    pub fn parse(arg: &Bson) -> Result<TypeSet> {
        let mut set = TypeSet {
            codes: Vec::new(),
            all_numbers: false,
        };
        match arg {
            Bson::Array(items) => {
                if items.is_empty() {
                    return Err(Error::bad_value("$type must match at least one type"));
                }
                for item in items {
                    set.add(item)?;
                }
            }
            other => set.add(other)?,
        }
        Ok(set)
    }

    fn add(&mut self, v: &Bson) -> Result<()> {
        match v {
            Bson::String(s) => {
                if s == "number" {
                    self.all_numbers = true;
                    return Ok(());
                }
                let code = alias_code(s)
                    .ok_or_else(|| Error::bad_value(format!("Unknown type name alias: {s}")))?;
                self.codes.push(code);
            }
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let n = nidus_doc::compare::bson_num(v).map(|n| n.to_f64());
                let code = n
                    .filter(|f| f.fract() == 0.0)
                    .and_then(|f| valid_code(f as i64))
                    .ok_or_else(|| {
                        Error::bad_value(format!(
                            "Invalid numerical type code: {}",
                            crate::matcher::parse::display(v)
                        ))
                    })?;
                self.codes.push(code);
            }
            _ => {
                return Err(Error::type_mismatch(
                    "type must be represented as a number or a string",
                ))
            }
        }
        Ok(())
    }

    pub fn matches(&self, v: RawBsonRef) -> bool {
        let t = v.element_type();
        if self.all_numbers
            && matches!(
                t,
                ElementType::Double
                    | ElementType::Int32
                    | ElementType::Int64
                    | ElementType::Decimal128
            )
        {
            return true;
        }
        self.codes.contains(&(t as u8))
    }
}
