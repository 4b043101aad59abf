//! `cargo +nightly fuzz run wire_decode`: see `nidus_fuzz::wire_decode` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::wire_decode(data));
