//! The storage floor for `bench/`: what the project's RocksDB engine does on its own, with no
//! query layer, protocol or BSON in the way. Every operation goes through the same
//! `RocksEngine` (same options, column families, snapshot transactions) that the server uses.
//!
//! ```text
//! floor --dir DIR [--n 100000] [--value-size 160] [--batch 1000] [--gets 20000]
//!       [--puts 20000] [--sync-ops 300] [--threads 16] [--cache-mb MB] [--only put_sync,get,...]
//! ```
//!
//! Prints one JSON object of rates (operations or keys per second):
//! `put_batch_per_s` (keys written `--batch` per transaction: the bulk-insert floor),
//! `put_per_s` (one key per transaction), `rmw_per_s` (locking read + write + commit: the
//! update floor), `get_per_s` (random point get on a fresh snapshot), `scan_per_s` (keys
//! iterated in order with their values), `put_sync_per_s` (commit + WAL sync, one thread) and
//! `put_sync_mt_per_s` (`--threads` writers sharing WAL syncs as the server's group commit
//! does: a writer that finds its commit unsynced syncs everything committed so far) and
//! `put_sync_mt_syncer_per_s` (the same writers, every sync done by one dedicated thread).
//! `get_block_reads` is the blocks read from files (block-cache misses of data, index and
//! filter blocks, from RocksDB's statistics) per point get; `--cache-mb` sets the block cache
//! (default the server's) so that a small one makes the gets IO-bound.
//! `--only` limits the run to the named measurements (the bulk load that `rmw`, `get` and
//! `scan` read is done, untimed, when `put_batch` is not among them).

use nidus_storage::{KvEngine, Space, StorageError};
use nidus_storage_rocks::RocksEngine;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

struct Args {
    dir: PathBuf,
    n: u64,
    value_size: usize,
    batch: u64,
    gets: u64,
    puts: u64,
    sync_ops: u64,
    threads: u64,
    cache_mb: Option<u64>,
    only: Vec<String>,
}

impl Args {
    fn wants(&self, what: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == what)
    }
}

const PHASES: [&str; 8] = [
    "put_batch",
    "put",
    "rmw",
    "get",
    "scan",
    "put_sync",
    "put_sync_mt",
    "put_sync_mt_syncer",
];

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        dir: PathBuf::new(),
        n: 100_000,
        value_size: 160,
        batch: 1000,
        gets: 20_000,
        puts: 20_000,
        sync_ops: 300,
        threads: 16,
        cache_mb: None,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || val.parse::<u64>().map_err(|e| format!("{flag} {val}: {e}"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(&val),
            "--n" => a.n = num()?.max(1),
            "--value-size" => a.value_size = num()? as usize,
            "--batch" => a.batch = num()?.max(1),
            "--gets" => a.gets = num()?.max(1),
            "--puts" => a.puts = num()?.max(1),
            "--sync-ops" => a.sync_ops = num()?.max(1),
            "--threads" => a.threads = num()?.max(1),
            "--cache-mb" => a.cache_mb = Some(num()?.max(1)),
            "--only" => {
                for p in val.split(',').filter(|p| !p.is_empty()) {
                    if !PHASES.contains(&p) {
                        return Err(format!("--only: unknown measurement {p}"));
                    }
                    a.only.push(p.to_string());
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.dir.as_os_str().is_empty() {
        return Err("--dir is required".into());
    }
    Ok(a)
}

/// Blocks read from files so far: block-cache misses of data, index and filter blocks.
fn block_reads(kv: &RocksEngine) -> u64 {
    kv.statistics()
        .iter()
        .filter(|(name, _)| name.starts_with("rocksdb.block.cache.") && name.ends_with(".miss"))
        .map(|(_, n)| n)
        .sum()
}

/// `collection id ++ record id`, the records' key layout.
fn key(prefix: u64, id: u64) -> [u8; 16] {
    nidus_storage::keys::with_id(prefix, id)
}

fn value(size: usize, id: u64) -> Vec<u8> {
    let mut v = vec![b'x'; size];
    for (i, b) in id.to_le_bytes().iter().enumerate().take(size) {
        v[i] = *b;
    }
    v
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn rate(ops: u64, t0: Instant) -> f64 {
    ops as f64 / t0.elapsed().as_secs_f64().max(1e-9)
}

/// One WAL sync covers every commit finished before it began (as the server's group commit).
#[derive(Default)]
struct Group {
    issued: AtomicU64,
    synced: Mutex<u64>,
    syncs: AtomicU64,
}

impl Group {
    fn sync(&self, kv: &RocksEngine) -> Result<(), String> {
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut synced = self
            .synced
            .lock()
            .map_err(|_| "poisoned lock".to_string())?;
        if *synced >= ticket {
            return Ok(());
        }
        let covered = self.issued.load(Ordering::SeqCst);
        kv.sync_wal().map_err(|e| e.to_string())?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        *synced = covered;
        Ok(())
    }
}

/// Group commit with one dedicated thread doing every WAL sync; writers wait for it.
#[derive(Default)]
struct Syncer {
    /// (commits issued, commits covered by a finished sync, stop)
    state: Mutex<(u64, u64, bool)>,
    cv: Condvar,
    syncs: AtomicU64,
}

impl Syncer {
    fn wait_durable(&self) -> Result<(), String> {
        let mut st = self.state.lock().map_err(|_| "poisoned lock")?;
        st.0 += 1;
        let ticket = st.0;
        self.cv.notify_all();
        while st.1 < ticket {
            st = self.cv.wait(st).map_err(|_| "poisoned lock")?;
        }
        Ok(())
    }

    fn run(&self, kv: &RocksEngine) -> Result<(), String> {
        loop {
            let target = {
                let mut st = self.state.lock().map_err(|_| "poisoned lock")?;
                while st.0 == st.1 && !st.2 {
                    st = self.cv.wait(st).map_err(|_| "poisoned lock")?;
                }
                if st.0 == st.1 {
                    return Ok(());
                }
                st.0
            };
            kv.sync_wal().map_err(|e| e.to_string())?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            let mut st = self.state.lock().map_err(|_| "poisoned lock")?;
            st.1 = target;
            self.cv.notify_all();
        }
    }

    fn stop(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.2 = true;
        }
        self.cv.notify_all();
    }
}

fn run(a: &Args) -> Result<String, String> {
    let cache = a
        .cache_mb
        .map_or(nidus_storage_rocks::DEFAULT_CACHE_BYTES, |mb| {
            (mb as usize) << 20
        });
    let kv = RocksEngine::open_with_cache(&a.dir, cache).map_err(|e| e.to_string())?;
    let err = |e: nidus_storage::StorageError| e.to_string();
    let mut out: Vec<(String, f64)> = Vec::new();

    // Bulk load of prefix 1, `batch` keys per transaction.
    let loaded = ["put_batch", "rmw", "get", "scan"]
        .iter()
        .any(|p| a.wants(p));
    let t0 = Instant::now();
    let mut id = 0;
    while loaded && id < a.n {
        let mut txn = kv.begin();
        let end = (id + a.batch).min(a.n);
        while id < end {
            txn.put(Space::Records, &key(1, id), &value(a.value_size, id))
                .map_err(err)?;
            id += 1;
        }
        txn.commit().map_err(err)?;
    }
    if a.wants("put_batch") {
        out.push(("put_batch_per_s".into(), rate(a.n, t0)));
    }

    if a.wants("put") {
        // One key per transaction, prefix 2.
        let t0 = Instant::now();
        for id in 0..a.puts {
            let mut txn = kv.begin();
            txn.put(Space::Records, &key(2, id), &value(a.value_size, id))
                .map_err(err)?;
            txn.commit().map_err(err)?;
        }
        out.push(("put_per_s".into(), rate(a.puts, t0)));
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    if a.wants("rmw") {
        // Locking read + write of random existing keys (the update floor).
        let t0 = Instant::now();
        for _ in 0..a.puts {
            let k = key(1, rng.next() % a.n);
            let mut txn = kv.begin();
            let mut v = txn
                .get_for_update(Space::Records, &k)
                .map_err(err)?
                .ok_or("missing key")?;
            v[0] = v[0].wrapping_add(1);
            txn.put(Space::Records, &k, &v).map_err(err)?;
            txn.commit().map_err(err)?;
        }
        out.push(("rmw_per_s".into(), rate(a.puts, t0)));
    }

    if a.wants("get") {
        // Random point gets, each on its own snapshot.
        let reads0 = block_reads(&kv);
        let t0 = Instant::now();
        let mut bytes = 0usize;
        for _ in 0..a.gets {
            let k = key(1, rng.next() % a.n);
            bytes += kv
                .snapshot()
                .get(Space::Records, &k)
                .map_err(err)?
                .map_or(0, |v| v.len());
        }
        if bytes == 0 {
            return Err("point gets found nothing".into());
        }
        out.push(("get_per_s".into(), rate(a.gets, t0)));
        let reads = block_reads(&kv) - reads0;
        out.push(("get_block_reads".into(), reads as f64 / a.gets as f64));
    }

    if a.wants("scan") {
        // Full ordered scan of prefix 1 with values.
        let t0 = Instant::now();
        let snap = kv.snapshot();
        let (lo, hi) = (key(1, 0), key(2, 0));
        let mut c = snap.cursor(Space::Records, &lo, &hi);
        c.seek_to_first();
        let mut seen = 0u64;
        let mut sum = 0u64;
        while c.valid() {
            sum = sum.wrapping_add(c.value().len() as u64);
            seen += 1;
            c.next();
        }
        c.status().map_err(err)?;
        if seen != a.n || sum == 0 {
            return Err(format!("scan saw {seen} keys of {}", a.n));
        }
        out.push(("scan_per_s".into(), rate(seen, t0)));
    }

    // Concurrent writers of distinct keys can still get `WriteConflict`: with a zero lock
    // timeout, RocksDB's lock manager only try-locks the (shared) lock stripe. Retried at
    // once, as the server retries single-document writes; the count is reported.
    let conflicts = AtomicU64::new(0);
    let sync_put = |prefix: u64, id: u64| -> Result<(), String> {
        loop {
            let mut txn = kv.begin();
            let r = txn
                .put(Space::Records, &key(prefix, id), &value(a.value_size, id))
                .and_then(|()| txn.commit());
            match r {
                Ok(()) => return Ok(()),
                Err(StorageError::WriteConflict) => {
                    conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    if a.wants("put_sync") || a.wants("put_sync_mt") || a.wants("put_sync_mt_syncer") {
        // Untimed warm-up: the first syncs of a new WAL also sync file metadata.
        for id in 0..10 {
            sync_put(5, id)?;
            kv.sync_wal().map_err(err)?;
        }
    }
    if a.wants("put_sync") {
        // Durable single writes: commit then WAL sync, one writer.
        let t0 = Instant::now();
        for id in 0..a.sync_ops {
            sync_put(3, id)?;
            kv.sync_wal().map_err(err)?;
        }
        out.push(("put_sync_per_s".into(), rate(a.sync_ops, t0)));
    }

    if a.wants("put_sync_mt") {
        // Durable single writes from `threads` writers sharing syncs (group commit).
        let group = Group::default();
        let per_thread = (a.sync_ops * 4 / a.threads).max(1);
        let t0 = Instant::now();
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..a.threads)
                .map(|t| {
                    let (kv, group, sync_put) = (&kv, &group, &sync_put);
                    s.spawn(move || -> Result<(), String> {
                        for i in 0..per_thread {
                            sync_put(4, t * per_thread + i)?;
                            group.sync(kv)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("writer panicked".into())))
                .collect()
        });
        for r in results {
            r?;
        }
        out.push(("put_sync_mt_per_s".into(), rate(per_thread * a.threads, t0)));
        out.push((
            "put_sync_mt_ops_per_sync".into(),
            (per_thread * a.threads) as f64 / group.syncs.load(Ordering::Relaxed).max(1) as f64,
        ));
    }

    if a.wants("put_sync_mt_syncer") {
        // The same writers, with every sync done by one dedicated thread.
        let syncer = Syncer::default();
        let per_thread = (a.sync_ops * 4 / a.threads).max(1);
        let t0 = Instant::now();
        let (results, sync_result) = std::thread::scope(|s| {
            let sy = s.spawn(|| syncer.run(&kv));
            let handles: Vec<_> = (0..a.threads)
                .map(|t| {
                    let (syncer, sync_put) = (&syncer, &sync_put);
                    s.spawn(move || -> Result<(), String> {
                        for i in 0..per_thread {
                            sync_put(6, t * per_thread + i)?;
                            syncer.wait_durable()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            let results: Vec<Result<(), String>> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("writer panicked".into())))
                .collect();
            syncer.stop();
            let sync_result = sy.join().unwrap_or_else(|_| Err("syncer panicked".into()));
            (results, sync_result)
        });
        for r in results {
            r?;
        }
        sync_result?;
        out.push((
            "put_sync_mt_syncer_per_s".into(),
            rate(per_thread * a.threads, t0),
        ));
        out.push((
            "put_sync_mt_syncer_ops_per_sync".into(),
            (per_thread * a.threads) as f64 / syncer.syncs.load(Ordering::Relaxed).max(1) as f64,
        ));
    }

    if a.wants("put_sync_mt") || a.wants("put_sync_mt_syncer") {
        out.push((
            "write_conflicts_retried".into(),
            conflicts.load(Ordering::Relaxed) as f64,
        ));
    }
    let mut fields = vec![
        format!("\"n\": {}", a.n),
        format!("\"value_size\": {}", a.value_size),
        format!("\"threads\": {}", a.threads),
    ];
    fields.extend(out.iter().map(|(k, v)| format!("\"{k}\": {v:.1}")));
    Ok(format!("{{{}}}", fields.join(", ")))
}

fn main() {
    let result = parse_args().and_then(|a| run(&a));
    match result {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("floor: {e}");
            std::process::exit(2);
        }
    }
}
