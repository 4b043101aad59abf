//! `cargo +nightly fuzz run pipeline`: see `nidus_fuzz::pipeline` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::pipeline(data));
