//! Point reads by `_id` at the engine's storage layer, the in-process counterpart of the storage
//! floor's `get` (`crates/storage-rocks/examples/floor.rs`) for `bench/`: the same number of
//! records of about the same size, the same block cache, random keys, no protocol. Each read is
//! the path a `find_one({_id})` takes in the server (planning, the `_id` index, the record),
//! so the ratio of the two rates is what the query layer costs over the raw key-value get.
//!
//! ```text
//! point_reads --dir DIR [--n 100000] [--value-size 160] [--gets 20000] [--cache-mb MB]
//! ```
//!
//! Prints one JSON object: `find_per_s` and `find_block_reads` (blocks read from files per
//! read: block-cache misses of data, index and filter blocks, from RocksDB's statistics).

use bson::{doc, RawDocumentBuf};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{prepare_insert, WriteOpts};
use nidus_engine::Engine;
use nidus_storage::KvEngine;
use nidus_storage_rocks::RocksEngine;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

struct Args {
    dir: PathBuf,
    n: u64,
    value_size: usize,
    gets: u64,
    cache_mb: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        dir: PathBuf::new(),
        n: 100_000,
        value_size: 160,
        gets: 20_000,
        cache_mb: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || val.parse::<u64>().map_err(|e| format!("{flag} {val}: {e}"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(&val),
            "--n" => a.n = num()?.max(1),
            "--value-size" => a.value_size = num()? as usize,
            "--gets" => a.gets = num()?.max(1),
            "--cache-mb" => a.cache_mb = Some(num()?.max(1)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.dir.as_os_str().is_empty() {
        return Err("--dir is required".into());
    }
    Ok(a)
}

/// The floor's generator (xorshift64*, same seed), so both read the same key sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn block_reads(kv: &RocksEngine) -> u64 {
    kv.statistics()
        .iter()
        .filter(|(name, _)| name.starts_with("rocksdb.block.cache.") && name.ends_with(".miss"))
        .map(|(_, n)| n)
        .sum()
}

fn run(a: &Args) -> Result<String, String> {
    let cache = a
        .cache_mb
        .map_or(nidus_storage_rocks::DEFAULT_CACHE_BYTES, |mb| {
            (mb as usize) << 20
        });
    let kv = Arc::new(RocksEngine::open_with_cache(&a.dir, cache).map_err(|e| e.to_string())?);
    let engine = Engine::open(kv.clone()).map_err(|e| e.to_string())?;
    let ns = Namespace::new("bench", "points");
    let coll = engine.ensure_collection(&ns).map_err(|e| e.to_string())?;
    // A record of `value_size` bytes: the `_id`, and a string filling the rest.
    let pad = "x".repeat(a.value_size.saturating_sub(30));
    let opts = WriteOpts::default();
    let mut id = 0i64;
    while (id as u64) < a.n {
        let end = (id + 1000).min(a.n as i64);
        let docs: Vec<RawDocumentBuf> = (id..end)
            .map(|i| {
                let d = RawDocumentBuf::from_document(&doc! {"_id": i, "p": pad.as_str()})
                    .map_err(|e| e.to_string())?;
                prepare_insert(&d).map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?;
        let batch: Vec<_> = docs.iter().map(|d| (d.as_ref(), &opts)).collect();
        engine
            .insert_batch(&coll, &batch)
            .map_err(|e| e.to_string())?;
        id = end;
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let reads0 = block_reads(&kv);
    let t0 = Instant::now();
    for _ in 0..a.gets {
        let k = (rng.next() % a.n) as i64;
        let spec = FindSpec {
            filter: doc! {"_id": k},
            limit: 1,
            ..FindSpec::default()
        };
        let mut exec = engine
            .plan_find(Some(&coll), &spec)
            .map_err(|e| e.to_string())?;
        if exec.next_doc().map_err(|e| e.to_string())?.is_none() {
            return Err(format!("_id {k} not found"));
        }
    }
    let rate = a.gets as f64 / t0.elapsed().as_secs_f64();
    let reads = (block_reads(&kv) - reads0) as f64 / a.gets as f64;
    Ok(format!(
        "{{\"find_per_s\": {rate:.1}, \"find_block_reads\": {reads:.3}}}"
    ))
}

fn main() {
    match parse_args().and_then(|a| run(&a)) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("point_reads: {e}");
            std::process::exit(2);
        }
    }
}
