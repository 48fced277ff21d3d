//! Arbitrary bytes straight into one in-process server (`Harness::feed`):
//! the real decoder, dispatcher and every command handler on a manual clock.
//!
//! Input: one byte that chooses how many reads the bytes arrive in, then the
//! bytes. Asserts: no panic (overflow included), the connection state stays
//! consistent (a closed harness answers nothing).

#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::harness::Harness;
use turnstile::Nanos;

/// 2023-11-14T22:13:20Z, the start the tests use.
const START: Nanos = Nanos(1_700_000_000 * Nanos::PER_SEC);

fuzz_target!(|data: &[u8]| {
    let Some((&pieces, input)) = data.split_first() else {
        return;
    };
    let mut h = Harness::new(START);
    let chunk = input.len() / (pieces as usize % 4 + 1) + 1;
    for piece in input.chunks(chunk) {
        let was_closed = h.is_closed();
        let out = h.feed(piece);
        if was_closed {
            assert!(out.is_empty(), "a closed connection answered");
        }
    }
    // The server answers PING unless the input closed the connection (or
    // left a request half-sent, or set a password).
    let _ = h.feed(b"\r\nPING\r\n");
});
