//! Values printed as MongoDB prints them inside error messages (`{ _id: 1, a: "x" }`).

use bson::Bson;
use std::fmt::Write;

pub fn format(v: &Bson) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Bson) {
    match v {
        Bson::Document(d) => {
            if d.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push_str("{ ");
            for (i, (k, v)) in d.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{k}: ");
                write_value(out, v);
            }
            out.push_str(" }");
        }
        Bson::Array(a) => {
            out.push('[');
            if !a.is_empty() {
                out.push(' ');
            }
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, v);
            }
            if !a.is_empty() {
                out.push(' ');
            }
            out.push(']');
        }
        Bson::String(s) => {
            let _ = write!(out, "\"{s}\"");
        }
        Bson::Int32(n) => {
            let _ = write!(out, "{n}");
        }
        Bson::Int64(n) => {
            let _ = write!(out, "{n}");
        }
        Bson::Double(f) => write_double(out, *f),
        Bson::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        Bson::Null => out.push_str("null"),
        Bson::Undefined => out.push_str("undefined"),
        Bson::MinKey => out.push_str("MinKey"),
        Bson::MaxKey => out.push_str("MaxKey"),
        Bson::ObjectId(o) => {
            let _ = write!(out, "ObjectId('{o}')");
        }
        Bson::DateTime(d) => {
            let _ = write!(out, "new Date({})", d.timestamp_millis());
        }
        Bson::Timestamp(t) => {
            let _ = write!(out, "Timestamp({}, {})", t.time, t.increment);
        }
        Bson::RegularExpression(r) => {
            let _ = write!(out, "/{}/{}", r.pattern, r.options);
        }
        Bson::Decimal128(d) => {
            let _ = write!(out, "NumberDecimal(\"{d}\")");
        }
        Bson::Binary(b) => {
            if b.subtype == bson::spec::BinarySubtype::Uuid && b.bytes.len() == 16 {
                let h: String = b.bytes.iter().map(|x| format!("{x:02x}")).collect();
                let _ = write!(
                    out,
                    "UUID(\"{}-{}-{}-{}-{}\")",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                );
            } else {
                let h: String = b.bytes.iter().map(|x| format!("{x:02X}")).collect();
                let _ = write!(out, "BinData({}, {h})", u8::from(b.subtype));
            }
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn write_double(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan.0");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf.0" } else { "-inf.0" });
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        let _ = write!(out, "{}.0", f as i64);
    } else {
        let _ = write!(out, "{f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn formats_like_mongodb() {
        assert_eq!(format(&Bson::Document(doc! {"_id": 1})), "{ _id: 1 }");
        assert_eq!(
            format(&Bson::Document(doc! {"a": "x", "b": null, "c": [1, 2.5]})),
            "{ a: \"x\", b: null, c: [ 1, 2.5 ] }"
        );
        assert_eq!(format(&Bson::Double(28.0)), "28.0");
        let uuid = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: (0u8..16).collect(),
        };
        assert_eq!(
            format(&Bson::Binary(uuid)),
            "UUID(\"00010203-0405-0607-0809-0a0b0c0d0e0f\")"
        );
        let generic = bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: b"Hi".to_vec(),
        };
        assert_eq!(format(&Bson::Binary(generic)), "BinData(0, 4869)");
    }
}
