//! `cargo +nightly fuzz run update`: see `nidus_fuzz::update` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::update(data));
