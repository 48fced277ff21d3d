//! One `RL.ALLOW` through the keyspace, without the network: hash, shard
//! lock, index probe, record decode, the command layer's glue and the
//! algorithm, record write-back. Keys are drawn at random from a preloaded
//! set, as `redis-benchmark -r` draws them, so the figure includes the
//! cache misses of a keyspace that does not fit the caches.
//!
//! `cargo bench --bench store`

use std::hint::black_box;
use std::num::NonZeroU64;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use turnstile::clock::Nanos;
use turnstile::limiter::{Algorithm, LimitSpec, Params};
use turnstile::store::limit as apply;
use turnstile::store::Store;

const S: u64 = 1_000_000_000;

fn spec(algo: Algorithm) -> LimitSpec {
    LimitSpec {
        algo,
        params: Params::new(
            NonZeroU64::new(1_000_000).unwrap(),
            NonZeroU64::new(60 * S).unwrap(),
        ),
        block: None,
    }
}

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"k:00000000000000";
    let mut n = i;
    for b in k[2..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// xorshift: a cheap, repeatable stream of key numbers.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn allow(c: &mut Criterion) {
    let mut g = c.benchmark_group("store_allow");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for keys in [100_000u64, 1_000_000] {
        for algo in Algorithm::ALL {
            let store = Store::default();
            let spec = spec(algo);
            let mut now = Nanos(1_700_000_000 * S);
            for i in 0..keys {
                store.update(&key(i), now, |e| {
                    apply::allow(e, &spec, now, 1, usize::MAX).unwrap()
                });
            }
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            g.bench_function(BenchmarkId::new(algo.name(), keys), |b| {
                b.iter(|| {
                    now.0 += 1_000;
                    let k = key(next(&mut x) % keys);
                    black_box(store.update(black_box(&k), now, |e| {
                        apply::allow(e, &spec, now, 1, usize::MAX).unwrap()
                    }))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, allow);
criterion_main!(benches);
