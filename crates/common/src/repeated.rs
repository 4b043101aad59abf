//! Repeated field names. A BSON document may hold a name twice (`{a: 1, a: {$gt: 5}}`), which
//! `bson::Document` cannot: it keeps one value per name. MongoDB reads documents element by
//! element, so a filter ANDs both conditions, an object expression refuses the second one
//! (16406) and an insert refuses a second `_id`. To keep that information through the
//! `Document`s the command layer works with, [`document_from_raw`] stores every repetition
//! under its name followed by [`MARK`] and a number; [`original_name`] gives the name back.

use bson::{Bson, Document, RawBsonRef, RawDocument};

/// U+FFFF, a noncharacter: valid in a BSON key but never used as text, so a key holding it
/// comes from a repetition.
pub const MARK: char = '\u{FFFF}';

/// The name a (possibly repeated) key was sent with.
pub fn original_name(key: &str) -> &str {
    match key.find(MARK) {
        Some(at) => &key[..at],
        None => key,
    }
}

/// Whether the key is the repetition of an earlier field of the same name.
pub fn is_repetition(key: &str) -> bool {
    key.contains(MARK)
}

/// Converts a raw document, keeping repeated names of every document *below* the top level
/// (see the module comment); the top level keeps the last value of a name, as before.
pub fn document_from_raw(raw: &RawDocument) -> Result<Document, bson::raw::Error> {
    let mut out = Document::new();
    for el in raw {
        let (k, v) = el?;
        out.insert(k, value_from_raw(v)?);
    }
    Ok(out)
}

fn nested_from_raw(raw: &RawDocument) -> Result<Document, bson::raw::Error> {
    let mut out = Document::new();
    for el in raw {
        let (k, v) = el?;
        let v = value_from_raw(v)?;
        if out.contains_key(k) {
            let mut n = 1;
            while out.contains_key(format!("{k}{MARK}{n}")) {
                n += 1;
            }
            out.insert(format!("{k}{MARK}{n}"), v);
        } else {
            out.insert(k, v);
        }
    }
    Ok(out)
}

fn value_from_raw(v: RawBsonRef) -> Result<Bson, bson::raw::Error> {
    Ok(match v {
        RawBsonRef::Document(d) => Bson::Document(nested_from_raw(d)?),
        RawBsonRef::Array(a) => {
            let mut items = Vec::new();
            for item in a {
                items.push(value_from_raw(item?)?);
            }
            Bson::Array(items)
        }
        other => Bson::try_from(other.to_raw_bson())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, rawdoc};

    #[test]
    fn keeps_repetitions_below_the_top_level() {
        let mut raw = rawdoc! {"filter": {"a": 1}};
        let mut inner = rawdoc! {"a": 1};
        inner.append("a", rawdoc! {"$gt": 5});
        inner.append(
            "b",
            bson::RawArrayBuf::from_iter([bson::RawBson::Document(rawdoc! {"x": 1})]),
        );
        raw.append("filter", inner);
        let d = document_from_raw(&raw).unwrap();
        let f = d.get_document("filter").unwrap();
        let keys: Vec<&str> = f.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "a\u{FFFF}1", "b"]);
        assert_eq!(original_name(keys[1]), "a");
        assert!(is_repetition(keys[1]) && !is_repetition(keys[0]));
        assert_eq!(f.get("a\u{FFFF}1"), Some(&Bson::Document(doc! {"$gt": 5})));
    }
}
