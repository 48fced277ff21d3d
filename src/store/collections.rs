//! The collections limiter scripts use: lists, sorted sets, hashes. Plain
//! data, no I/O; the commands over them are `cmd/{list,zset,hash}.rs`.
//!
//! Turnstile is a limiter, not a general-purpose Redis: these hold what the
//! popular limiter libraries keep in them (a sliding log of timestamps, a
//! window's counters), so each is the simplest structure that gives Redis's
//! replies in Redis's order at that size:
//! - a list is a `VecDeque` (both ends O(1), as `LPUSH`/`RPOP` need);
//! - a sorted set is a member -> score map beside a `BTreeSet` ordered by
//!   (score, member), as Redis orders it: add, remove and score lookups are
//!   O(log n), a range by score O(log n + k), by rank O(rank + k);
//! - a hash is a vector of fields in insertion order, which is the order
//!   Redis's small hashes (listpack) answer `HGETALL` in; lookups are
//!   O(fields), fine for the handful a limiter keeps.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::LazyLock;

use bytes::Bytes;

/// A sorted set's score: never NaN (the commands refuse it), ordered as
/// Redis compares doubles (so -0 and 0 are equal).
#[derive(Debug, Clone, Copy)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A score bound of `ZRANGEBYSCORE`-style ranges: inclusive or exclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    pub value: f64,
    pub exclusive: bool,
}

impl ScoreBound {
    fn admits_from_below(&self, s: f64) -> bool {
        if self.exclusive {
            s > self.value
        } else {
            s >= self.value
        }
    }

    fn admits_from_above(&self, s: f64) -> bool {
        if self.exclusive {
            s < self.value
        } else {
            s <= self.value
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZSet {
    scores: HashMap<Bytes, Score, MemberHasher>,
    order: BTreeSet<(Score, Bytes)>,
}

/// The member maps' hasher: ahash, not SipHash (a sliding log hashes its
/// member on every add and remove; hash flooding is resisted either way),
/// keyed once for the process. Zero-sized, so a set carries no keys of its
/// own (56 bytes a set, against 88 with a keyed ahash state and 72 with
/// SipHash's), and making one touches no shared counter
/// (`ahash::RandomState::new` adds to a process-wide atomic each time).
#[derive(Debug, Clone, Copy, Default)]
struct MemberHasher;

static MEMBER_KEYS: LazyLock<ahash::RandomState> = LazyLock::new(ahash::RandomState::new);

impl BuildHasher for MemberHasher {
    type Hasher = ahash::AHasher;

    fn build_hasher(&self) -> ahash::AHasher {
        MEMBER_KEYS.build_hasher()
    }
}

impl ZSet {
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).map(|s| s.0)
    }

    /// Sets `member`'s score; true if it was not there. A score of -0 is
    /// kept as 0, as Redis replies it.
    pub fn insert(&mut self, member: &[u8], score: f64) -> bool {
        let score = score + 0.0;
        match self.scores.get_mut(member) {
            Some(old) => {
                if old.0 != score {
                    let key = Bytes::copy_from_slice(member);
                    self.order.remove(&(*old, key.clone()));
                    *old = Score(score);
                    self.order.insert((Score(score), key));
                }
                false
            }
            None => {
                let key = Bytes::copy_from_slice(member);
                self.scores.insert(key.clone(), Score(score));
                self.order.insert((Score(score), key));
                true
            }
        }
    }

    /// Removes `member`; true if it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove_entry(member) {
            Some((key, score)) => {
                self.order.remove(&(score, key));
                true
            }
            None => false,
        }
    }

    /// Members and scores in order, lowest score first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> + '_ {
        self.order.iter().map(|(s, m)| (m, s.0))
    }

    /// Members whose score lies within `min..max`, lowest first.
    pub fn range_by_score(
        &self,
        min: ScoreBound,
        max: ScoreBound,
    ) -> impl Iterator<Item = (&Bytes, f64)> + '_ {
        // Start at the first member of score >= min.value; the bound's
        // exclusivity and the upper end are checked per member.
        let lower: Bound<(Score, Bytes)> = Bound::Included((Score(min.value), Bytes::new()));
        let empty = min.value > max.value || min.value.is_nan() || max.value.is_nan();
        self.order
            .range((lower, Bound::Unbounded))
            .take_while(move |(s, _)| !empty && max.admits_from_above(s.0))
            .filter(move |(s, _)| min.admits_from_below(s.0))
            .map(|(s, m)| (m, s.0))
    }

    /// Removes `members`; answers how many were there.
    pub fn remove_all(&mut self, members: Vec<Bytes>) -> usize {
        members.iter().filter(|m| self.remove(m)).count()
    }
}

/// A hash: fields in insertion order (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hash {
    fields: Vec<(Bytes, Bytes)>,
}

impl Hash {
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.fields
            .iter()
            .find(|(f, _)| f.as_ref() == field)
            .map(|(_, v)| v)
    }

    /// Sets a field; true if it was new.
    pub fn set(&mut self, field: &[u8], value: &[u8]) -> bool {
        match self.fields.iter_mut().find(|(f, _)| f.as_ref() == field) {
            Some((_, v)) => {
                *v = Bytes::copy_from_slice(value);
                false
            }
            None => {
                self.fields
                    .push((Bytes::copy_from_slice(field), Bytes::copy_from_slice(value)));
                true
            }
        }
    }

    /// Removes a field; true if it was there. The others keep their order.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self.fields.iter().position(|(f, _)| f.as_ref() == field) {
            Some(i) => {
                self.fields.remove(i);
                true
            }
            None => false,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> + '_ {
        self.fields.iter().map(|(f, v)| (f, v))
    }
}

/// A list.
pub type List = VecDeque<Bytes>;

/// Heap bytes of a list's elements and slots.
pub fn list_heap_size(l: &List) -> usize {
    l.capacity() * std::mem::size_of::<Bytes>() + l.iter().map(Bytes::len).sum::<usize>()
}

impl ZSet {
    /// Heap bytes: both indexes' entries and the members' bytes (shared
    /// by the two).
    pub fn heap_size(&self) -> usize {
        let entry = std::mem::size_of::<(Bytes, Score)>() + 8;
        self.scores.capacity() * entry
            + self.order.len() * (std::mem::size_of::<(Score, Bytes)>() + 16)
            + self.scores.keys().map(Bytes::len).sum::<usize>()
    }
}

impl Hash {
    pub fn heap_size(&self) -> usize {
        self.fields.capacity() * std::mem::size_of::<(Bytes, Bytes)>()
            + self
                .fields
                .iter()
                .map(|(f, v)| f.len() + v.len())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incl(v: f64) -> ScoreBound {
        ScoreBound {
            value: v,
            exclusive: false,
        }
    }

    #[test]
    fn members_order_by_score_then_bytes() {
        let mut z = ZSet::default();
        assert!(z.insert(b"b", 1.0));
        assert!(z.insert(b"a", 1.0));
        assert!(z.insert(b"c", 0.5));
        assert!(!z.insert(b"c", 2.0));
        let order: Vec<&[u8]> = z.iter().map(|(m, _)| m.as_ref()).collect();
        assert_eq!(order, [&b"a"[..], b"b", b"c"]);
        let mid: Vec<&[u8]> = z
            .range_by_score(
                incl(1.0),
                ScoreBound {
                    value: 2.0,
                    exclusive: true,
                },
            )
            .map(|(m, _)| m.as_ref())
            .collect();
        assert_eq!(mid, [&b"a"[..], b"b"]);
        assert!(z.remove(b"a"));
        assert!(!z.remove(b"a"));
        assert_eq!(z.len(), 2);
        assert_eq!(z.score(b"c"), Some(2.0));
    }
}
