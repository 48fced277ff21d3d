//! A replica's reader of its primary's stream on arbitrary bytes: what a
//! primary (or anyone a replica is pointed at) sends after `+FULLRESYNC` or
//! `+CONTINUE`, parsed and applied by `replication::apply_frames`.
//!
//! Input: one byte that chooses a read size, then the bytes the primary
//! sent. They go to a fresh replica's store twice: whole, and in reads of
//! the chosen size, as a trickling primary sends them.
//!
//! Asserts: no panic (overflow included: built with debug assertions); how
//! the bytes were split changes nothing: the same outcome (or the same
//! error, at the same frame), the same keyspace, the same stream logged
//! for the replica's own replicas (offset and bytes), the same bytes left
//! waiting for the rest of a frame; and the stream logged is exactly the
//! frames applied that are not the copy's.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use turnstile::replication::{self, Applied};
use turnstile::store::{Entry, Store};
use turnstile::Nanos;

/// The replica's clock: the harness's round start.
const NOW: Nanos = Nanos(1_700_000_000 * Nanos::PER_SEC);

#[derive(Debug, PartialEq)]
struct Outcome {
    applied: Applied,
    error: Option<String>,
    keys: BTreeMap<Vec<u8>, Entry>,
    offset: u64,
    logged: Vec<u8>,
    rest: Vec<u8>,
}

fn run<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let store = Store::default();
    store.effects.activate(1 << 20);
    let mut buf = BytesMut::new();
    let mut applied = Applied::default();
    let mut error = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        match replication::apply_frames(&store, &mut buf, NOW) {
            Ok(a) => {
                applied.getack |= a.getack;
                applied.synced |= a.synced;
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let mut keys = BTreeMap::new();
    for i in 0..store.shard_count() {
        store.for_each_in_shard(i, NOW, |k, e| {
            keys.insert(k.to_vec(), e.clone());
        });
    }
    let mut logged = Vec::new();
    let offset = store.effects.offset();
    store
        .effects
        .read(1, usize::MAX, &mut logged)
        .expect("a 1 MiB backlog holds what a fuzz input logs");
    Outcome {
        applied,
        error,
        keys,
        offset,
        logged,
        rest: buf.to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&size, input)) = data.split_first() else {
        return;
    };
    if input.len() > 256 * 1024 {
        return;
    }
    let whole = run([input]);
    let trickled = run(input.chunks(usize::from(size % 32) + 1));
    assert_eq!(whole.offset, whole.logged.len() as u64);
    if whole.error.is_some() {
        // An error ends the link: the frames before it stand, however
        // they arrived; what was buffered, and what the failed read
        // asked for, go with the link.
        assert_eq!(whole.error, trickled.error);
        assert_eq!(whole.keys, trickled.keys);
        assert_eq!(whole.logged, trickled.logged);
        return;
    }
    assert_eq!(whole, trickled);
    // What is logged is the input's frames less the copy's, in order.
    let mut expected = Vec::new();
    let mut at = 0;
    while let Some((kind, _, n)) = turnstile::store::effects::next_frame(&input[at..]) {
        if kind != replication::SNAP && kind != replication::SYNCED {
            expected.extend_from_slice(&input[at..at + n]);
        }
        at += n;
    }
    assert_eq!(whole.logged, expected);
    assert_eq!(whole.rest, &input[at..]);
});
