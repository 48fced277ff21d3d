//! One limiter decision per algorithm, on the pure functions (no store, no
//! network): what the algorithm itself costs per `RL.ALLOW`.
//!
//! `cargo bench --bench decisions`

use std::hint::black_box;
use std::num::NonZeroU64;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use turnstile::limiter::{cell, fixed, gcra, log, sliding, window, Params};

const S: u64 = 1_000_000_000;

fn params() -> Params {
    Params::new(
        NonZeroU64::new(100).unwrap(),
        NonZeroU64::new(60 * S).unwrap(),
    )
}

fn decisions(c: &mut Criterion) {
    let p = params();
    let mut g = c.benchmark_group("decide");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    // Time advances 1 ms per decision, so states roll over buckets and the
    // log's ring both grows and expires, as under steady traffic.
    g.bench_function("window", |b| {
        let (mut st, mut now) = (window::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(window::decide(&mut st, &p, black_box(now), 1))
        })
    });
    g.bench_function("sliding", |b| {
        let (mut st, mut now) = (sliding::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(sliding::decide(&mut st, &p, black_box(now), 1))
        })
    });
    g.bench_function("fixed", |b| {
        let (mut st, mut now) = (fixed::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(fixed::decide(&mut st, &p, black_box(now), 1))
        })
    });
    g.bench_function("gcra", |b| {
        let (mut st, mut now) = (gcra::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(gcra::decide(&mut st, &p, black_box(now), 1))
        })
    });
    g.bench_function("log", |b| {
        let (mut st, mut now) = (log::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(log::decide(&mut st, &p, black_box(now), 1))
        })
    });
    g.bench_function("cl.throttle", |b| {
        let q = cell::Quota::new(99, 100, 60 * S).unwrap();
        let (mut st, mut now) = (gcra::State::default(), 1_700_000_000 * S);
        b.iter(|| {
            now += 1_000_000;
            black_box(cell::throttle(&mut st, &q, black_box(now), 1))
        })
    });
    g.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
