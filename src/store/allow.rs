//! `RL.ALLOW`'s one verb on the keyspace: the in-place decision where a
//! compact record holds the key (`shard/in_place.rs`), else the general
//! path, under one lock.

use super::limit::{self, LimitError};
use super::{Keyspace, Store, Touch};
use crate::clock::Nanos;
use crate::limiter::{Decision, LimitSpec};

impl Store {
    /// `RL.ALLOW` on one key ([`limit::allow`]): decided where its
    /// compact record lies when it has one (`shard/in_place.rs`), else
    /// through [`Store::update`]; the same answer and the same key either
    /// way.
    pub fn allow(
        &self,
        key: &[u8],
        spec: &LimitSpec,
        now: Nanos,
        cost: u64,
        room: usize,
    ) -> Result<Decision, LimitError> {
        let hash = self.hash(key);
        let mut shard = self.write_shard(self.shard_index(hash));
        if let Some(d) = shard.allow_here(self, hash, key, spec, now, cost) {
            return Ok(d);
        }
        shard.update(self, hash, key, now, Touch::IfChanged, |slot| {
            limit::allow(slot, spec, now, cost, room)
        })
    }
}

impl Keyspace<'_> {
    /// See [`Store::allow`].
    pub fn allow(
        self,
        key: &[u8],
        spec: &LimitSpec,
        now: Nanos,
        cost: u64,
        room: usize,
    ) -> Result<Decision, LimitError> {
        match self {
            Keyspace::Store(s) => s.allow(key, spec, now, cost, room),
            Keyspace::Held(h) => h.update(key, now, Touch::IfChanged, |slot| {
                limit::allow(slot, spec, now, cost, room)
            }),
        }
    }
}
