//! `cargo +nightly fuzz run bson_validate`: see `nidus_fuzz::bson_validate` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nidus_fuzz::bson_validate(data));
