//! `$out` and `$merge` run on a secondary: the pipeline reads the secondary's data and its
//! writes run as commands on the primary (MongoDB's ReplicaSetNodeProcessInterface), over one
//! connection authenticated as the internal user when the set has a key file.

use crate::transport;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::pipeline::PrimaryWrites;
use parking_lot::Mutex;
use std::net::TcpStream;

pub(crate) struct RemotePrimary {
    host: String,
    /// The aggregate's `writeConcern`, sent with every write (none: the primary's default).
    write_concern: Option<Document>,
    conn: Mutex<Option<TcpStream>>,
}

impl RemotePrimary {
    pub(crate) fn new(host: String, write_concern: Option<Document>) -> RemotePrimary {
        RemotePrimary {
            host,
            write_concern,
            conn: Mutex::new(None),
        }
    }
}

impl PrimaryWrites for RemotePrimary {
    fn run(&self, db: &str, mut cmd: Document) -> Result<Document> {
        let writes = matches!(
            cmd.keys().next().map(String::as_str),
            Some("insert" | "update" | "create" | "createIndexes" | "renameCollection" | "drop")
        );
        if let (true, Some(wc)) = (writes, &self.write_concern) {
            cmd.insert("writeConcern", wc.clone());
        }
        cmd.insert("$db", db);
        let unreachable = |e: std::io::Error| {
            Error::new(
                ErrorCode::HostUnreachable,
                format!("error connecting to the primary {}: {e}", self.host),
            )
        };
        // One command at a time on the connection; a failed exchange drops it.
        let mut conn = self.conn.lock();
        let stream = match conn.take() {
            Some(s) => s,
            None => transport::connect(&self.host).map_err(unreachable)?,
        };
        let (stream, reply) = transport::exchange(stream, &cmd).map_err(unreachable)?;
        *conn = Some(stream);
        drop(conn);
        if reply.get_f64("ok").unwrap_or(0.0) != 1.0 {
            return Err(error_of(&reply));
        }
        if let Ok(errors) = reply.get_array("writeErrors") {
            if let Some(first) = errors.first().and_then(Bson::as_document) {
                return Err(error_of(first));
            }
        }
        if let Ok(wce) = reply.get_document("writeConcernError") {
            return Err(error_of(wce));
        }
        Ok(reply)
    }
}

/// The error a reply (or one of its write errors) carries, with its code, message and the
/// extra fields drivers read (`keyPattern`/`keyValue` of a duplicate key, `errInfo`).
fn error_of(reply: &Document) -> Error {
    let code = match reply.get("code") {
        Some(Bson::Int32(c)) => *c,
        Some(Bson::Int64(c)) => *c as i32,
        Some(Bson::Double(c)) => *c as i32,
        _ => ErrorCode::UnknownError.code(),
    };
    let mut e = Error::new(
        ErrorCode::from_code(code),
        reply.get_str("errmsg").unwrap_or("error on the primary"),
    );
    for key in ["keyPattern", "keyValue", "errInfo"] {
        if let Some(v) = reply.get(key) {
            e = e.with_extra(key, v.clone());
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn errors_keep_code_message_and_duplicate_key_fields() {
        let e = error_of(&doc! {
            "index": 0, "code": 11000, "errmsg": "E11000 duplicate key error",
            "keyPattern": {"_id": 1}, "keyValue": {"_id": 3},
        });
        assert_eq!(e.code, ErrorCode::DuplicateKey);
        assert_eq!(e.message, "E11000 duplicate key error");
        assert_eq!(
            e.extra,
            doc! {"keyPattern": {"_id": 1}, "keyValue": {"_id": 3}}
        );
        let e = error_of(&doc! {"ok": 0.0, "errmsg": "x", "code": 123456});
        assert_eq!(e.code, ErrorCode::Location(123456));
    }
}
