//! `cargo +nightly fuzz run projection`: see `nidus_fuzz::projection` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::projection(data));
