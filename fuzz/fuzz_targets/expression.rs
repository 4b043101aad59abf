//! `cargo +nightly fuzz run expression`: see `nidus_fuzz::expression` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::expression(data));
