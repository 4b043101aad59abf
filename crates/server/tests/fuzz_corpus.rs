//! The fuzz targets of `fuzz/` on stable Rust: every target runs over its checked-in seeds
//! (`fuzz/seeds/<target>/`), over crash regressions (`fuzz/regressions/<target>/`), and over
//! a few thousand inputs mutated from them or generated at random with a fixed seed, so CI
//! covers the same entry points without nightly or libFuzzer.
//!
//! `NIDUS_FUZZ_ITERS=<n>` changes the number of generated inputs per target (default 20,000),
//! `NIDUS_FUZZ_SEED=<n>` the random seed. A failing input is written to
//! `$CARGO_TARGET_TMPDIR/fuzz-failure-<target>` so `cargo fuzz run <target> <file>` replays
//! it.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Files of `fuzz/<kind>/<target>/`, sorted by name.
fn files(kind: &str, target: &str) -> Vec<Vec<u8>> {
    let dir = repo_root().join("fuzz").join(kind).join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u8] = &[
    0, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff, 0xfe, b'$', b'.', 0x10, 0x12,
];

/// One to four libFuzzer-style mutations: bit flips, interesting bytes, inserted, deleted
/// or duplicated ranges, a splice from another input, a changed 32-bit length.
fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                out.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let copy = out[i..i + n].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
            5 if !pool.is_empty() => {
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ if len >= 4 => {
                let i = rng.below(len - 3);
                let v: i32 = match rng.below(4) {
                    0 => -1,
                    1 => i32::MAX,
                    2 => (rng.next() % 64) as i32,
                    _ => len as i32,
                };
                out[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            _ => out.push(rng.next() as u8),
        }
    }
    out
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `f` on `input`; on a panic, saves the input and fails naming it.
fn run_one(name: &str, f: fn(&[u8]), input: &[u8]) {
    if std::panic::catch_unwind(|| f(input)).is_err() {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("fuzz-failure-{name}"));
        let _ = std::fs::write(&path, input);
        panic!(
            "fuzz target {name} panicked; input saved to {} ({} bytes)",
            path.display(),
            input.len()
        );
    }
}

fn run_target(name: &str) {
    let f = targets::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no target {name}"));
    let mut pool = files("seeds", name);
    pool.extend(files("regressions", name));
    for input in &pool {
        run_one(name, f, input);
    }
    let iters = env_u64("NIDUS_FUZZ_ITERS", 20_000);
    let mut rng = Rng(env_u64("NIDUS_FUZZ_SEED", 0x9E37_79B9_7F4A_7C15) | 1);
    for i in 0..iters {
        let input = if pool.is_empty() || i % 3 == 0 {
            // Random bytes; for the structured targets an odd first byte selects the
            // generator, which turns any bytes into well-formed specs.
            let n = rng.below(256);
            let mut bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            if let Some(b) = bytes.first_mut() {
                *b |= (i % 2) as u8;
            }
            bytes
        } else {
            let base = &pool[rng.below(pool.len())];
            mutate(&mut rng, base, &pool)
        };
        run_one(name, f, &input);
    }
}

#[test]
fn fuzz_wire_decode() {
    run_target("wire_decode");
}

#[test]
fn fuzz_bson_validate() {
    run_target("bson_validate");
}

#[test]
fn fuzz_filter() {
    run_target("filter");
}

#[test]
fn fuzz_update() {
    run_target("update");
}

#[test]
fn fuzz_projection() {
    run_target("projection");
}

#[test]
fn fuzz_expression() {
    run_target("expression");
}

#[test]
fn fuzz_pipeline() {
    run_target("pipeline");
}

/// Every target has seeds (a missing folder would silently leave only random inputs).
#[test]
fn seeds_exist_for_every_target() {
    for (name, _) in targets::TARGETS {
        assert!(!files("seeds", name).is_empty(), "no seeds for {name}");
    }
}

/// The server runs commands on tokio's blocking threads (2 MiB stacks) and accepts documents
/// nested up to 200 levels: every target must get through specs that deep on such a stack.
#[test]
fn deep_specs_fit_a_server_thread_stack() {
    use bson::{doc, Bson, Document};
    fn chain(depth: usize, leaf: Bson, wrap: &dyn Fn(Bson) -> Bson) -> Bson {
        (0..depth).fold(leaf, |v, _| wrap(v))
    }
    let deep_doc = |n| chain(n, Bson::Int32(1), &|v| Bson::Document(doc! { "a": v }));
    let docs: Vec<Document> = vec![
        doc! { "a": deep_doc(150) },
        doc! { "a": chain(150, Bson::Int32(1), &|v| Bson::Array(vec![v])) },
    ];
    // Specs nested ~195 BSON levels (the wire limit is 200).
    let specs: Vec<(&str, Bson)> = vec![
        ("filter", chain(97, doc! { "a": 1 }.into(), &|v| doc! { "$and": [v] }.into())),
        ("filter", doc! { "a": chain(190, doc! { "$eq": 1 }.into(), &|v| doc! { "$not": v }.into()) }.into()),
        ("filter", doc! { "a": chain(190, doc! { "$eq": 1 }.into(), &|v| doc! { "$elemMatch": v }.into()) }.into()),
        ("filter", doc! { "a": deep_doc(190) }.into()),
        ("filter", doc! { "$expr": chain(97, "$a".into(), &|v| doc! { "$add": [v, 1] }.into()) }.into()),
        ("expression", chain(97, "$a".into(), &|v| doc! { "$concatArrays": [v] }.into())),
        ("expression", chain(190, Bson::Int32(1), &|v| Bson::Array(vec![v]))),
        ("expression", chain(190, "$a".into(), &|v| doc! { "x": v }.into())),
        ("expression", chain(60, "$$x".into(), &|v| doc! { "$let": { "vars": { "x": 1 }, "in": v } }.into())),
        ("projection", deep_doc(190)),
        ("projection", doc! { "p": chain(97, "$a".into(), &|v| doc! { "$add": [v, 1] }.into()) }.into()),
        ("update", doc! { "$set": { "a": deep_doc(180) } }.into()),
        ("update", doc! { "$push": { "a": { "$each": [deep_doc(180)] } } }.into()),
        ("update", doc! { "$pull": { "a": chain(190, doc! { "$eq": 1 }.into(), &|v| doc! { "$elemMatch": v }.into()) } }.into()),
        ("update", Bson::Array(vec![doc! { "$set": { "x": chain(95, "$a".into(), &|v| doc! { "$add": [v, 1] }.into()) } }.into()])),
        ("pipeline", Bson::Array(vec![doc! { "$match": chain(95, doc! { "a": 1 }.into(), &|v| doc! { "$or": [v] }.into()) }.into()])),
        ("pipeline", chain(45, Bson::Array(vec![]), &|v| Bson::Array(vec![doc! { "$facet": { "f": v } }.into()]))),
        ("pipeline", chain(30, Bson::Array(vec![]), &|v| Bson::Array(vec![doc! { "$lookup": { "from": "c", "as": "x", "pipeline": v } }.into()]))),
    ];
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            for (name, spec) in specs {
                let f = targets::TARGETS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, f)| *f)
                    .unwrap_or_else(|| panic!("no target {name}"));
                let entry = targets::corpus_entry(spec, &docs);
                // The spec must be within the wire's depth limit, or the target would skip it.
                let len = i32::from_le_bytes([entry[1], entry[2], entry[3], entry[4]]) as usize;
                assert!(
                    nidus_wire::validate_document(&entry[1..1 + len]).is_ok(),
                    "a {name} spec is deeper than the wire accepts"
                );
                f(&entry);
            }
        })
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    assert!(handle.join().is_ok(), "a deep spec panicked");
}
