//! The append-only file's loader on arbitrary bytes: what a disk (or
//! anyone who can write the file) leaves there, read by
//! `persist::aof::replay` at start.
//!
//! Input: the file's bytes. Half the inputs get a valid base (an empty
//! snapshot) in front, so the frames after it are reached.
//!
//! Asserts: no panic (overflow included: built with debug assertions); a
//! whole load reads every byte; a torn tail is cut at a frame boundary
//! that the bytes before it load from whole, to the same keyspace.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use turnstile::persist::aof::replay;
use turnstile::store::{Entry, Store};
use turnstile::Nanos;

const NOW: Nanos = Nanos(1_700_000_000 * Nanos::PER_SEC);

fn keys(store: &Store) -> BTreeMap<Vec<u8>, Entry> {
    let mut keys = BTreeMap::new();
    for i in 0..store.shard_count() {
        store.for_each_in_shard(i, NOW, |k, e| {
            keys.insert(k.to_vec(), e.clone());
        });
    }
    keys
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, input)) = data.split_first() else {
        return;
    };
    if input.len() > 256 * 1024 {
        return;
    }
    let mut file = Vec::new();
    if choice & 1 == 1 {
        turnstile::store::snapshot::write(&Store::default(), NOW, &mut file).unwrap();
    }
    file.extend_from_slice(input);
    let store = Store::default();
    match replay(&store, &file, NOW) {
        Err(_) => {}
        Ok(Ok(r)) => assert_eq!(r.size, file.len() as u64),
        Ok(Err((r, at))) => {
            assert_eq!(r.size, at);
            assert!((at as usize) < file.len());
            let again = Store::default();
            let whole = replay(&again, &file[..at as usize], NOW).expect("the part before a torn tail loads");
            assert_eq!(whole.expect("and is whole").size, at);
            assert_eq!(keys(&store), keys(&again));
        }
    }
});
