//! A client connection to another member (the sync source) over its normal MongoDB port,
//! for what rollback and initial sync read from it: documents, catalog listings and oplog
//! entries. Reads name `primaryPreferred` so a secondary source answers too.

use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, Result};

/// Documents per batch of a cursor read from the source.
pub(crate) const BATCH: i32 = 1000;

pub(crate) struct SyncSource {
    host: String,
    conn: Option<std::net::TcpStream>,
}

impl SyncSource {
    pub(crate) fn new(host: &str) -> SyncSource {
        SyncSource {
            host: host.to_string(),
            conn: None,
        }
    }

    /// Runs one command; a failed command or a lost connection is an error (the connection
    /// is opened again by the next command).
    pub(crate) fn run(&mut self, cmd: &Document) -> Result<Document> {
        let conn = match self.conn.take() {
            Some(c) => c,
            None => crate::transport::connect(&self.host)
                .map_err(|e| Error::internal(format!("cannot reach {}: {e}", self.host)))?,
        };
        let (conn, reply) = crate::transport::round_trip(conn, cmd).map_err(|e| {
            let name = cmd.keys().next().map_or("command", String::as_str);
            Error::internal(format!("{name} on {}: {e}", self.host))
        })?;
        self.conn = Some(conn);
        Ok(reply)
    }

    /// Runs a cursor command (`find`, `listCollections`, `listIndexes`, ...) on `db` and hands
    /// each batch to `each`, following the cursor with `getMore` until it is exhausted.
    pub(crate) fn each_batch(
        &mut self,
        cmd: &Document,
        db: &str,
        mut each: impl FnMut(Vec<Document>) -> Result<()>,
    ) -> Result<()> {
        let mut reply = self.run(cmd)?;
        loop {
            let cursor = reply
                .get_document("cursor")
                .map_err(|_| Error::internal("reply without a cursor"))?;
            let batch = cursor
                .get_array("firstBatch")
                .or_else(|_| cursor.get_array("nextBatch"))
                .map_err(|_| Error::internal("cursor reply without a batch"))?;
            let docs: Vec<Document> = batch
                .iter()
                .filter_map(|d| d.as_document().cloned())
                .collect();
            let id = cursor.get_i64("id").unwrap_or(0);
            let coll = cursor
                .get_str("ns")
                .ok()
                .and_then(|ns| ns.split_once('.').map(|(_, c)| c.to_string()))
                .unwrap_or_default();
            each(docs)?;
            if id == 0 {
                return Ok(());
            }
            reply = self.run(&doc! {
                "getMore": id,
                "collection": coll,
                "batchSize": BATCH,
                "$db": db,
            })?;
        }
    }

    /// Every document a cursor command returns.
    pub(crate) fn all(&mut self, cmd: &Document, db: &str) -> Result<Vec<Document>> {
        let mut out = Vec::new();
        self.each_batch(cmd, db, |docs| {
            out.extend(docs);
            Ok(())
        })?;
        Ok(out)
    }

    /// The source's replicated databases (all but `local`), sorted.
    pub(crate) fn database_names(&mut self) -> Result<Vec<String>> {
        let listed = self.run(&doc! {
            "listDatabases": 1,
            "nameOnly": true,
            "$db": "admin",
            "$readPreference": { "mode": "primaryPreferred" },
        })?;
        let mut names: Vec<String> = listed
            .get_array("databases")
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_document()?.get_str("name").ok().map(str::to_string))
                    .filter(|n| n != "local")
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        Ok(names)
    }

    /// The `ts` of the source's newest oplog entry: every write whose effect documents read
    /// from the source before this call show is at or before it.
    pub(crate) fn last_oplog_ts(&mut self) -> Result<Option<Timestamp>> {
        self.oplog_end(-1)
    }

    /// The `ts` of the source's oldest oplog entry (its capped oplog drops the oldest).
    pub(crate) fn first_oplog_ts(&mut self) -> Result<Option<Timestamp>> {
        self.oplog_end(1)
    }

    fn oplog_end(&mut self, direction: i32) -> Result<Option<Timestamp>> {
        let reply = self.run(&doc! {
            "find": "oplog.rs",
            "sort": { "$natural": direction },
            "limit": 1,
            "projection": { "ts": 1 },
            "$db": "local",
            "$readPreference": { "mode": "primaryPreferred" },
        })?;
        Ok(reply
            .get_document("cursor")
            .and_then(|c| c.get_array("firstBatch"))
            .ok()
            .and_then(|b| b.first())
            .and_then(Bson::as_document)
            .and_then(|d| d.get_timestamp("ts").ok()))
    }

    /// The source's term and majority commit point (`replSetGetStatus`).
    pub(crate) fn term_and_commit_point(&mut self) -> Result<(i64, Timestamp)> {
        let st = self.run(&doc! { "replSetGetStatus": 1, "$db": "admin" })?;
        let term = match st.get("term") {
            Some(Bson::Int64(t)) => *t,
            Some(Bson::Int32(t)) => *t as i64,
            _ => -1,
        };
        let committed = st
            .get_document("optimes")
            .and_then(|o| o.get_document("lastCommittedOpTime"))
            .and_then(|o| o.get_timestamp("ts"))
            .unwrap_or(Timestamp {
                time: 0,
                increment: 0,
            });
        Ok((term, committed))
    }
}
