//! `WATCH`'s write counters: the keys of a shard that some connection
//! watches, each with a counter every write of the key moves.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// How a write counts for `WATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// If it changed the key: a refused `SET NX`, a failed `INCR` or a
    /// `PERSIST` of a key with no TTL leaves it as it was, and does not
    /// abort its watchers (Redis signals only writes that happen).
    IfChanged,
    /// Always: the command stored a value (`SET`, `MSET`, `SETEX`), an
    /// equal one included, as Redis counts it.
    Always,
}

/// The keys of a shard that some connection `WATCH`es, by hash, each with
/// a write counter: a write, delete or expiry of a watched key moves its
/// counter, and `EXEC` compares. Only watched keys are tracked, so a write
/// to a key no one watches costs one check of an empty map. Two keys whose
/// 64-bit hashes are equal share a counter: a false conflict (which Redis
/// allows) once in 2^64 pairs; a missed conflict cannot happen.
#[derive(Debug, Default)]
pub(super) struct Watches(HashMap<u64, Watched, BuildHasherDefault<PassThrough>>);

#[derive(Debug, Clone, Copy)]
pub(super) struct Watched {
    pub version: u64,
    /// WATCH marks on this key, over all connections.
    refs: u32,
}

/// The keys are already hashes: the map uses them as they are.
#[derive(Debug, Default)]
pub(super) struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys are hashed")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl Watches {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counter of a watched key's hash.
    pub fn get(&self, hash: u64) -> Option<&Watched> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&hash)
    }

    /// One more WATCH on `hash`; its counter now.
    pub fn add(&mut self, hash: u64) -> u64 {
        let w = self.0.entry(hash).or_insert(Watched {
            version: 0,
            refs: 0,
        });
        w.refs += 1;
        w.version
    }

    /// One WATCH on `hash` fewer; the map's memory goes with the last.
    pub fn remove(&mut self, hash: u64) {
        if let Some(w) = self.0.get_mut(&hash) {
            w.refs -= 1;
            if w.refs == 0 {
                self.0.remove(&hash);
            }
        }
        if self.0.is_empty() {
            self.0 = HashMap::default();
        }
    }

    /// A watched key's value changed (or it went away).
    pub fn touch(&mut self, hash: u64) {
        if self.0.is_empty() {
            return;
        }
        if let Some(w) = self.0.get_mut(&hash) {
            w.version = w.version.wrapping_add(1);
        }
    }
}
