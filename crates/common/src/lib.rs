//! Shared vocabulary of every layer: MongoDB's error codes and the one error type.

mod codes;
pub mod encode;
mod error;
pub mod repeated;
pub mod shell;

pub use codes::ErrorCode;
pub use error::{Error, ErrorDetail, Result};

/// `b` as text when it is UTF-8. BSON names and short strings are mostly ASCII, which a byte
/// check answers for a fraction of the general validation's cost (the byte walks of the wire
/// decoder, the nesting check and top-level field lookups all check each name).
pub fn utf8(b: &[u8]) -> Option<&str> {
    if b.is_ascii() {
        // SAFETY: ASCII bytes are UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b).ok()
}

/// This machine's host name, as `hostInfo`, `serverStatus`, explain's `serverInfo` and
/// `$planCacheStats` report it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// MongoDB's `BSONObjBuilder::appendNumber` rule for counters and sizes in replies: an
/// Int32 when the value fits, an Int64 otherwise (so shells print `3`, not `Long('3')`).
pub fn number<T: TryInto<i64>>(n: T) -> bson::Bson {
    let n: i64 = n.try_into().unwrap_or(i64::MAX);
    match i32::try_from(n) {
        Ok(small) => bson::Bson::Int32(small),
        Err(_) => bson::Bson::Int64(n),
    }
}

/// A document's top-level 64-bit integers after [`number`] (nested documents and arrays are
/// left as they are): for stat documents whose every number is a counter.
pub fn narrow_counters(doc: &mut bson::Document) {
    for (_, v) in doc.iter_mut() {
        if let bson::Bson::Int64(n) = *v {
            *v = number(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_is_int32_when_it_fits() {
        assert_eq!(number(3u64), bson::Bson::Int32(3));
        assert_eq!(number(-5i64), bson::Bson::Int32(-5));
        assert_eq!(number(i32::MAX as i64), bson::Bson::Int32(i32::MAX));
        assert_eq!(
            number(i32::MAX as i64 + 1),
            bson::Bson::Int64(i32::MAX as i64 + 1)
        );
        assert_eq!(number(u64::MAX), bson::Bson::Int64(i64::MAX));
    }
}
