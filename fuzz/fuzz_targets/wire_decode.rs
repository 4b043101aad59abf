//! Feeds arbitrary bytes to the wire decoder as a complete message.
//!
//! Run with `cargo +nightly fuzz run wire_decode`. The decoder must never panic, and a
//! message it accepts must re-encode to something it accepts again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nidus_wire::{decode_message, encode_msg_request, encode_query_request, Request};

fuzz_target!(|data: &[u8]| {
    // Also try with a corrected length field so inputs reach the body parsers.
    let mut fixed = data.to_vec();
    if let (Some(len), Ok(n)) = (fixed.get_mut(..4), i32::try_from(data.len())) {
        len.copy_from_slice(&n.to_le_bytes());
    }
    for input in [data, fixed.as_slice()] {
        if let Ok(decoded) = decode_message(input) {
            let again = match &decoded.request {
                Request::Msg(m) => encode_msg_request(1, m, false),
                Request::Query(q) => encode_query_request(1, q),
            };
            assert!(
                decode_message(&again).is_ok(),
                "re-encoded message must decode"
            );
        }
    }
});
