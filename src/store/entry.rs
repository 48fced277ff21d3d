//! What a key holds, as every command sees it.
//!
//! This is the logical form: `window`, `fixed` and `gcra` entries are
//! stored packed (`record.rs`) and decoded into an `Entry` on access; the
//! rest are stored as they are, with the expiry in the entry as one `u64`
//! of milliseconds (0 = none) and values unboxed next to an inline key, so
//! a short key with a small value needs no heap block.

use super::bytes::SmallBytes;
use super::collections;
use crate::clock::Nanos;
use crate::limiter::for_each_algorithm;
use crate::limiter::lease::Leases;
use crate::limiter::{Algorithm, Params, Storage};

/// A key's value and expiry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Absolute expiry in milliseconds since the epoch on the server clock
    /// (Redis's unit, so any `EXPIREAT` a client can send is kept exactly);
    /// 0 = persistent. Bit 63 ([`DERIVED`]) marks an expiry set from the
    /// limiter state held, so storing it need not derive it again.
    expires_at: u64,
    pub value: Value,
}

/// The flag bit of [`Entry`]'s expiry: no millisecond count reaches it
/// (Redis refuses an expiry over `i64::MAX` ms; a file's is clamped).
const DERIVED: u64 = 1 << 63;
const MS_MAX: u64 = DERIVED - 1;

/// Two entries are equal when their values and expiries are: how an
/// expiry was set is not part of the key.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.ms() == other.ms() && self.value == other.value
    }
}

impl Eq for Entry {}

macro_rules! value {
    ($([$variant:ident $module:ident])*) => {
        /// The kinds of value a key can hold. Each limiter algorithm has
        /// its own variant (one per line of the algorithms' list, named as
        /// the algorithm), so a string command on a limiter key, or
        /// another algorithm on it, is `WRONGTYPE`. The log keeps its
        /// header and ring in one heap block behind a 24-byte handle, so a
        /// decision follows one pointer.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Value {
            Str(SmallBytes),
            $($variant(Stored<crate::limiter::$module::State>),)*
            /// A concurrency limit's live leases (`RL.ACQUIRE`): 48 bytes,
            /// so unboxed, and a compact record's arena holds it as it is.
            Lease(LeaseKey),
            /// The collections limiter scripts use (`collections.rs`),
            /// boxed so every variant stays within a record's 64 bytes.
            List(Box<collections::List>),
            ZSet(Box<collections::ZSet>),
            Hash(Box<collections::Hash>),
            /// Rate-limit state under a `BLOCK` penalty, boxed (rare, and
            /// the box keeps `Value` at 64 bytes): every request is denied,
            /// uncounted, until the block ends; the state beneath goes on
            /// ageing.
            Blocked(Box<Blocked>),
        }

        impl Value {
            /// The rate-limit algorithm of this value, if it is rate-limit
            /// state (a lease key is limiter state with no algorithm: see
            /// [`Value::is_limiter`]).
            pub fn algorithm(&self) -> Option<Algorithm> {
                match self {
                    Value::Str(_)
                    | Value::List(_)
                    | Value::ZSet(_)
                    | Value::Hash(_)
                    | Value::Lease(_) => None,
                    $(Value::$variant(_) => Some(Algorithm::$variant),)*
                    Value::Blocked(b) => b.value.algorithm(),
                }
            }

            /// The name `TYPE` reports.
            pub fn type_name(&self) -> &'static str {
                match self {
                    Value::Str(_) => "string",
                    $(Value::$variant(_) => concat!("rl-", stringify!($module)),)*
                    Value::Lease(_) => "rl-lease",
                    Value::List(_) => "list",
                    Value::ZSet(_) => "zset",
                    Value::Hash(_) => "hash",
                    Value::Blocked(b) => b.value.type_name(),
                }
            }

            /// Heap bytes this value owns.
            pub fn heap_size(&self) -> usize {
                match self {
                    Value::Str(s) => s.heap_size(),
                    $(Value::$variant(s) => s.state.heap_size(),)*
                    Value::List(l) => {
                        std::mem::size_of::<collections::List>() + collections::list_heap_size(l)
                    }
                    Value::ZSet(z) => std::mem::size_of::<collections::ZSet>() + z.heap_size(),
                    Value::Hash(h) => std::mem::size_of::<collections::Hash>() + h.heap_size(),
                    Value::Lease(l) => l.leases.heap_bytes(),
                    Value::Blocked(b) => std::mem::size_of::<Blocked>() + b.value.heap_size(),
                }
            }
        }
    };
}
for_each_algorithm!(value);

/// A rate-limit key under a `BLOCK` penalty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// When the block ends (ns on the server clock).
    pub until: u64,
    /// The key's rate-limit state (never `Blocked` itself).
    pub value: Value,
}

// Every variant, the log's included, fits 64 bytes: the size of a general
// record's value (`shard.rs`).
const _: () = assert!(std::mem::size_of::<Value>() == 64);

/// The expiry, in the milliseconds an `Entry` keeps, of the moment `at`:
/// rounded up (a limiter's state may outlive its moment by under a
/// millisecond, never the reverse), and never 0, which reads as "none".
pub fn expiry_ms_at(at: Nanos) -> u64 {
    at.0.div_ceil(Nanos::PER_MS).max(1)
}

/// Whether an expiry of `at_ms` has passed at `now`.
pub fn passed(at_ms: u64, now: Nanos) -> bool {
    at_ms.saturating_mul(Nanos::PER_MS) <= now.0
}

/// A concurrency limit: its live leases and the limit they were last
/// acquired under (`RL.STATE`, `RL.LEASES`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseKey {
    pub limit: u64,
    pub leases: Leases,
}

/// Limiter state with the parameters of the request that last wrote it,
/// which `RL.REFUND` and `RL.STATE` need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored<S> {
    pub params: Params,
    pub state: S,
}

impl<S: crate::limiter::Limiter> Stored<S> {
    /// When this state stops mattering, under the parameters it was last
    /// charged with: the key's TTL.
    pub fn expires_at(&self) -> Nanos {
        self.state.expires_at(&self.params)
    }
}

impl Value {
    /// The string held, or `None` for limiter state.
    pub fn as_str(&self) -> Option<&SmallBytes> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl Value {
    /// Whether this is limiter state (rate limits and leases), which
    /// `RL.RESET` forgets and string commands refuse.
    pub fn is_limiter(&self) -> bool {
        self.algorithm().is_some() || matches!(self, Value::Lease(_))
    }
}

impl Entry {
    pub fn new(value: Value) -> Self {
        Entry {
            expires_at: 0,
            value,
        }
    }

    pub fn with_expiry(value: Value, at: Option<Nanos>) -> Self {
        let mut e = Entry::new(value);
        e.set_expiry(at);
        e
    }

    pub fn with_expiry_ms(value: Value, at_ms: Option<u64>) -> Self {
        let mut e = Entry::new(value);
        e.set_expiry_ms(at_ms);
        e
    }

    #[inline]
    fn ms(&self) -> u64 {
        self.expires_at & MS_MAX
    }

    pub fn has_expiry(&self) -> bool {
        self.ms() != 0
    }

    /// Absolute expiry in milliseconds since the epoch, if any.
    pub fn expiry_ms(&self) -> Option<u64> {
        self.has_expiry().then_some(self.ms())
    }

    /// Sets the expiry to `at`, the moment the limiter state this entry
    /// now holds stops mattering ([`crate::limiter::Limiter::expires_at`]),
    /// and says so: a compact record then stores the entry without
    /// deriving it again. Any later `set_expiry` clears the mark; a change
    /// of the state must set it again (every one does: they all end in a
    /// new expiry).
    #[inline]
    pub fn set_state_expiry(&mut self, at: Nanos) {
        self.expires_at = expiry_ms_at(at).min(MS_MAX) | DERIVED;
    }

    /// Whether the expiry was set by [`Entry::set_state_expiry`] and not
    /// changed since.
    #[inline]
    pub fn expiry_is_derived(&self) -> bool {
        self.expires_at & DERIVED != 0
    }

    /// Sets or clears the expiry, rounded up to the millisecond (a limiter's
    /// state may outlive its moment by under a millisecond, never the
    /// reverse).
    pub fn set_expiry(&mut self, at: Option<Nanos>) {
        self.set_expiry_ms(at.map(expiry_ms_at));
    }

    /// Sets or clears the expiry in milliseconds. 0 would read as "none",
    /// so it is stored as 1 ms, which is long past either way; one past
    /// `i64::MAX` ms (only a file can hold it) as `i64::MAX`, which never
    /// comes either way.
    pub fn set_expiry_ms(&mut self, at_ms: Option<u64>) {
        self.expires_at = at_ms.map_or(0, |t| t.clamp(1, MS_MAX));
    }

    pub fn is_expired(&self, now: Nanos) -> bool {
        self.has_expiry() && passed(self.ms(), now)
    }

    /// Milliseconds left, rounded up, as `PTTL` reports; `None` if
    /// persistent.
    pub fn pttl_ms(&self, now: Nanos) -> Option<i64> {
        self.expiry_ms().map(|at| {
            let left = (at as u128 * Nanos::PER_MS as u128).saturating_sub(now.0 as u128);
            left.div_ceil(Nanos::PER_MS as u128).min(i64::MAX as u128) as i64
        })
    }

    /// Heap bytes owned beyond the table slot.
    pub fn heap_size(&self) -> usize {
        self.value.heap_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No millisecond count reaches the mark's bit: a file's expiry past
    /// `i64::MAX` ms is kept as that, which never comes.
    #[test]
    fn an_expiry_past_i64_max_is_clamped_below_the_mark() {
        let mut e = Entry::new(Value::Str(Default::default()));
        e.set_expiry_ms(Some(u64::MAX));
        assert_eq!(e.expiry_ms(), Some(i64::MAX as u64));
        assert!(!e.expiry_is_derived());
        assert!(!e.is_expired(Nanos(u64::MAX - 1)));
        e.set_state_expiry(Nanos(5 * Nanos::PER_MS));
        assert_eq!((e.expiry_ms(), e.expiry_is_derived()), (Some(5), true));
        e.set_expiry(Some(Nanos(5 * Nanos::PER_MS)));
        assert_eq!((e.expiry_ms(), e.expiry_is_derived()), (Some(5), false));
    }
}
