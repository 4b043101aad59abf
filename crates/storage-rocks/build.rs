//! Compiles `src/unindexed.cc` and `src/cache_priority.cc` against the headers of the
//! RocksDB that librocksdb-sys builds: the version Cargo.lock pins, from cargo's registry
//! sources (`NIDUS_ROCKSDB_INCLUDE` names the directory instead, e.g. for vendored sources).
//! Without them the crate builds without both (`put_new` then keeps every key in the
//! transaction's read index, and the indexes' blocks are cached at the records' priority) and
//! says so.

use std::path::{Path, PathBuf};

/// librocksdb-sys's version as Cargo.lock pins it.
fn locked_rocksdb_sys(lock: &Path) -> Option<String> {
    let text = std::fs::read_to_string(lock).ok()?;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"librocksdb-sys\"" {
            let version = lines.next()?.trim();
            return Some(
                version
                    .strip_prefix("version = \"")?
                    .strip_suffix('"')?
                    .to_string(),
            );
        }
    }
    None
}

fn rocksdb_include(manifest_dir: &Path) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("NIDUS_ROCKSDB_INCLUDE") {
        return Some(PathBuf::from(dir));
    }
    let version = locked_rocksdb_sys(&manifest_dir.join("../../Cargo.lock"))?;
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registry = home.join("registry").join("src");
    std::fs::read_dir(registry)
        .ok()?
        .flatten()
        .map(|index| {
            index
                .path()
                .join(format!("librocksdb-sys-{version}"))
                .join("rocksdb")
                .join("include")
        })
        .find(|dir| dir.join("rocksdb/utilities/transaction.h").is_file())
}

fn main() {
    println!("cargo:rerun-if-changed=src/unindexed.cc");
    println!("cargo:rerun-if-changed=src/cache_priority.cc");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-env-changed=NIDUS_ROCKSDB_INCLUDE");
    println!("cargo::rustc-check-cfg=cfg(nidus_rocks_shim)");
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let Some(include) = rocksdb_include(&manifest_dir) else {
        println!(
            "cargo::warning=RocksDB's headers not found (set NIDUS_ROCKSDB_INCLUDE): \
             building without unindexed puts or the indexes' cache priority"
        );
        return;
    };
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .include(&include)
        .define("NDEBUG", "1")
        .define("ROCKSDB_PLATFORM_POSIX", None)
        .define("ROCKSDB_LIB_IO_POSIX", None)
        .warnings(false)
        .file("src/unindexed.cc")
        .file("src/cache_priority.cc")
        .compile("nidus_rocks_shim");
    println!("cargo:rustc-cfg=nidus_rocks_shim");
}
