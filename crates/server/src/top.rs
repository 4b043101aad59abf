//! Per-collection usage: `top` (time and count per operation kind), `$collStats`
//! `latencyStats` (reads, writes, commands, transactions) and `$indexStats` `accesses`.

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::Duration;

/// `{time, count}` of one `top` category (time in microseconds).
#[derive(Default, Clone, Copy)]
struct Usage {
    micros: u64,
    count: u64,
}

impl Usage {
    fn add(&mut self, micros: u64) {
        self.micros += micros;
        self.count += 1;
    }

    fn document(&self) -> Document {
        doc! { "time": nidus_common::number(self.micros), "count": nidus_common::number(self.count) }
    }
}

#[derive(Default)]
struct NsUsage {
    total: Usage,
    read_lock: Usage,
    write_lock: Usage,
    queries: Usage,
    getmore: Usage,
    insert: Usage,
    update: Usage,
    remove: Usage,
    commands: Usage,
    /// `latencyStats` classes.
    reads: Usage,
    writes: Usage,
    other: Usage,
    transactions: Usage,
}

/// How MongoDB's `Top` and latency histograms classify a command.
enum Kind {
    Query,
    GetMore,
    Insert,
    Update,
    Remove,
    ReadCommand,
    WriteCommand,
}

fn kind(command: &str) -> Kind {
    match command {
        "find" | "aggregate" => Kind::Query,
        "getMore" => Kind::GetMore,
        "insert" => Kind::Insert,
        "update" | "findAndModify" => Kind::Update,
        "delete" => Kind::Remove,
        "count" | "distinct" | "listIndexes" | "collStats" | "validate" | "dataSize" | "dbHash" => {
            Kind::ReadCommand
        }
        _ => Kind::WriteCommand,
    }
}

/// Queries that used an index, and since when they are counted.
type IndexAccesses = (u64, bson::DateTime);

#[derive(Default)]
pub struct Top {
    namespaces: Mutex<BTreeMap<String, NsUsage>>,
    /// Namespace → index name → (queries that used the index, since when counted); nested so
    /// that counting a use of a known index allocates nothing.
    index_accesses: Mutex<BTreeMap<String, BTreeMap<String, IndexAccesses>>>,
}

/// Whether `ns` names a collection (`db.coll`), not a database's `$cmd`.
fn is_collection(ns: &str) -> bool {
    matches!(ns.split_once('.'), Some((db, coll)) if !db.is_empty() && !coll.is_empty() && !coll.starts_with("$cmd"))
}

impl Top {
    /// Records one command on `ns` that took `elapsed` (inside a transaction: `in_txn`).
    pub fn record(&self, ns: &str, command: &str, elapsed: Duration, in_txn: bool) {
        // A dropped collection (database) starts from zero if created again, as in MongoDB.
        match command {
            "drop" => return self.forget(|n| n == ns),
            "dropDatabase" => {
                let prefix = format!("{}.", ns.split('.').next().unwrap_or(ns));
                return self.forget(|n| n.starts_with(&prefix));
            }
            _ => {}
        }
        if !is_collection(ns) {
            return;
        }
        let micros = elapsed.as_micros().min(u64::MAX as u128) as u64;
        let mut map = self.namespaces.lock();
        // Every command on a collection passes here: allocate the key only for a new one.
        if !map.contains_key(ns) {
            map.insert(ns.to_string(), NsUsage::default());
        }
        let Some(u) = map.get_mut(ns) else { return };
        u.total.add(micros);
        let k = kind(command);
        let read = matches!(k, Kind::Query | Kind::GetMore | Kind::ReadCommand);
        if read {
            u.read_lock.add(micros);
        } else {
            u.write_lock.add(micros);
        }
        match k {
            Kind::Query => u.queries.add(micros),
            Kind::GetMore => u.getmore.add(micros),
            Kind::Insert => u.insert.add(micros),
            Kind::Update => u.update.add(micros),
            Kind::Remove => u.remove.add(micros),
            Kind::ReadCommand | Kind::WriteCommand => u.commands.add(micros),
        }
        match k {
            Kind::Query | Kind::GetMore => u.reads.add(micros),
            Kind::Insert | Kind::Update | Kind::Remove => u.writes.add(micros),
            _ => u.other.add(micros),
        }
        if in_txn {
            u.transactions.add(micros);
        }
    }

    /// Forgets the usage of the collections `gone` says were dropped.
    fn forget(&self, gone: impl Fn(&str) -> bool) {
        self.namespaces.lock().retain(|ns, _| !gone(ns));
        self.index_accesses.lock().retain(|ns, _| !gone(ns));
    }

    /// The `top` command's `totals`.
    pub fn totals(&self) -> Document {
        let mut out = doc! { "note": "all times in microseconds" };
        for (ns, u) in self.namespaces.lock().iter() {
            out.insert(
                ns.clone(),
                doc! {
                    "total": u.total.document(),
                    "readLock": u.read_lock.document(),
                    "writeLock": u.write_lock.document(),
                    "queries": u.queries.document(),
                    "getmore": u.getmore.document(),
                    "insert": u.insert.document(),
                    "update": u.update.document(),
                    "remove": u.remove.document(),
                    "commands": u.commands.document(),
                },
            );
        }
        out
    }

    /// `$collStats` `latencyStats` of `ns` (latencies in microseconds, as 64-bit integers).
    pub fn latency_stats(&self, ns: &str) -> Document {
        let map = self.namespaces.lock();
        let u = map.get(ns);
        let class = |f: fn(&NsUsage) -> Usage| {
            let x = u.map(f).unwrap_or_default();
            doc! { "latency": x.micros as i64, "ops": x.count as i64 }
        };
        doc! {
            "reads": class(|u| u.reads),
            "writes": class(|u| u.writes),
            "commands": class(|u| u.other),
            "transactions": class(|u| u.transactions),
        }
    }

    /// Counts one query that used index `index` of `ns`.
    pub fn index_used(&self, ns: &str, index: &str) {
        let mut map = self.index_accesses.lock();
        if let Some(e) = map.get_mut(ns).and_then(|ixs| ixs.get_mut(index)) {
            e.0 += 1;
            return;
        }
        map.entry(ns.to_string())
            .or_default()
            .insert(index.to_string(), (1, bson::DateTime::now()));
    }

    /// `$indexStats` `accesses` of an index: `{ops, since}`.
    pub fn index_accesses(&self, ns: &str, index: &str, since_default: bson::DateTime) -> Document {
        let map = self.index_accesses.lock();
        let (ops, since) = map
            .get(ns)
            .and_then(|ixs| ixs.get(index))
            .copied()
            .unwrap_or((0, since_default));
        doc! { "ops": ops as i64, "since": Bson::DateTime(since) }
    }
}
