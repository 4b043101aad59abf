//! `cargo +nightly fuzz run filter`: see `nidus_fuzz::filter` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::filter(data));
