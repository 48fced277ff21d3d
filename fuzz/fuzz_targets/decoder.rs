//! The request decoder on arbitrary bytes.
//!
//! Input: two bytes that choose where to split, one byte that chooses a
//! read size, then the bytes a client sent. The bytes go into a fresh
//! `Decoder` three ways (whole; in two reads split at the chosen point; in
//! reads of the chosen size, as a dribbling client sends them) under three
//! sets of limits (default, unauthenticated, a tiny `proto-max-bulk-len`).
//!
//! Asserts: no panic (overflow included: built with debug assertions); every
//! decoded request has at least one argument and its views agree; however
//! the bytes were split, the same requests come out, then the same error (or
//! none), with the same bytes left buffered and the same bytes scanned.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use turnstile::protocol::decode::MAX_INLINE;
use turnstile::protocol::{Decoder, Limits, ProtocolError};

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    requests: Vec<Vec<Vec<u8>>>,
    error: Option<ProtocolError>,
    /// Bytes still buffered, and bytes the decoder counts as scanned; only
    /// compared when no error ended the input.
    rest: usize,
    scanned: u64,
}

fn run<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, limits: Limits) -> Outcome {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut error = None;
    'feed: for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf, limits) {
                Ok(Some(req)) => {
                    assert!(req.len() >= 1, "a decoded request with no arguments");
                    assert!(!req.is_empty());
                    let vecs = req.to_vecs();
                    assert_eq!(vecs.len(), req.len());
                    assert_eq!(req.args().len(), req.len());
                    for (i, (a, v)) in req.args().zip(&vecs).enumerate() {
                        assert_eq!(a, v.as_slice());
                        assert_eq!(req.arg(i), v.as_slice());
                        assert_eq!(&req.arg_bytes(i)[..], v.as_slice());
                    }
                    requests.push(vecs);
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
    }
    let (rest, scanned) = if error.is_none() {
        (buf.len(), decoder.bytes_scanned())
    } else {
        (0, 0)
    };
    Outcome {
        requests,
        error,
        rest,
        scanned,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let split = u16::from_le_bytes([data[0], data[1]]) as usize;
    let chunk = (data[2] as usize % 16) + 1;
    let input = &data[3..];
    let split = split % (input.len() + 1);

    for limits in [
        Limits::default(),
        Limits {
            unauthenticated: true,
            ..Limits::default()
        },
        Limits {
            max_bulk_len: (data[2] >> 4) as i64,
            unauthenticated: false,
        },
    ] {
        let whole = run([input], limits);
        let halves = run([&input[..split], &input[split..]], limits);
        let dribbled = run(input.chunks(chunk), limits);
        // Past 64 KiB the outcome legitimately depends on the reads, as in
        // Redis: a line with no end yet is refused once the buffer is over
        // the inline limit, while one read that brings the end is accepted.
        if input.len() <= MAX_INLINE {
            assert_eq!(whole, halves, "split at {split} changed the outcome");
            assert_eq!(whole, dribbled, "reads of {chunk} changed the outcome");
        }
        if whole.error.is_none() {
            assert_eq!(whole.scanned + whole.rest as u64, input.len() as u64);
        }
    }
});
