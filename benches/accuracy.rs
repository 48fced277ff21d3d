//! Accuracy replay: drives every algorithm's pure decision function with
//! generated traces on a simulated clock and compares each decision with the
//! exact answer: a request is rightly admitted iff the units this algorithm
//! admitted in the `period` before it, plus its cost, fit the limit.
//!
//! Each algorithm's memory is beside its error: the bytes of its packed
//! record (`store/record.rs`), and for `log` the ring's heap block on top,
//! at its largest over the trace (the mean over keys for many keys).
//!
//! Run: `cargo bench --bench accuracy` (prints a markdown table; the table
//! in docs/algorithms.md comes from it). Deterministic: a fixed seed.

use std::collections::VecDeque;
use std::num::NonZeroU64;

use turnstile::clock::Nanos;
use turnstile::limiter::{Algorithm, Decision, Limiter, Params};
use turnstile::store::limit::{visit, Held, Visit};
use turnstile::store::record;

const S: u64 = 1_000_000_000;
const LIMIT: u64 = 100;
const PERIOD: u64 = 60 * S;
/// A multiple of `PERIOD`, so bucket boundaries fall where the traces expect.
const START: u64 = 28_333_333 * PERIOD;

/// splitmix64: a tiny deterministic generator, enough for traces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Exponential gap with the given mean (ns): Poisson arrivals.
    fn exp(&mut self, mean: f64) -> u64 {
        (-self.unit().ln() * mean) as u64
    }
}

/// One request of a trace: (key, time, cost).
type Req = (usize, u64, u64);

/// Poisson traffic on one key at `load` times the limit's rate.
fn poisson(load: f64, n: usize, seed: u64) -> Vec<Req> {
    let mut rng = Rng(seed);
    let mean = PERIOD as f64 / (LIMIT as f64 * load);
    let mut t = START;
    (0..n)
        .map(|_| {
            t += rng.exp(mean);
            (0, t, 1)
        })
        .collect()
}

/// On/off bursts: Poisson at `load` times the limit's rate for the first
/// `on` of every period, then quiet for the rest of it.
fn on_off(load: f64, on: f64, n: usize, seed: u64) -> Vec<Req> {
    let mut rng = Rng(seed);
    let mean = PERIOD as f64 / (LIMIT as f64 * load);
    let on_ns = (PERIOD as f64 * on) as u64;
    let mut t = START;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        t += rng.exp(mean);
        if (t - START) % PERIOD < on_ns {
            out.push((0, t, 1));
        }
    }
    out
}

/// Bursts of `LIMIT` requests just before and just after bucket
/// boundaries (the classic boundary-burst experiment), repeated, with quiet in between.
fn boundary_bursts(rounds: usize) -> Vec<Req> {
    let mut out = Vec::new();
    for r in 0..rounds as u64 {
        let boundary = START + (3 * r + 1) * PERIOD;
        for i in 0..LIMIT {
            out.push((0, boundary - S + i * 1_000_000, 1));
        }
        for i in 0..LIMIT {
            out.push((0, boundary + S + i * 1_000_000, 1));
        }
    }
    out
}

/// Many keys with heavy-tailed (Pareto) rates: most well under the limit,
/// a few far over, interleaved in time.
fn heavy_tailed(keys: usize, n: usize, seed: u64) -> Vec<Req> {
    let mut rng = Rng(seed);
    // Load of each key: Pareto with shape 1.2 and scale 0.1x the limit.
    let loads: Vec<f64> = (0..keys)
        .map(|_| 0.1 / rng.unit().powf(1.0 / 1.2))
        .collect();
    let total: f64 = loads.iter().sum();
    let mean = PERIOD as f64 / (LIMIT as f64 * total);
    let mut t = START;
    (0..n)
        .map(|_| {
            t += rng.exp(mean);
            // Pick a key in proportion to its load.
            let mut x = rng.unit() * total;
            let mut k = 0;
            while k + 1 < keys && x > loads[k] {
                x -= loads[k];
                k += 1;
            }
            (k, t, 1)
        })
        .collect()
}

/// Weighted requests (costs 1-10) at the limit's rate in units.
fn weighted(n: usize, seed: u64) -> Vec<Req> {
    let mut rng = Rng(seed);
    let mean = PERIOD as f64 * 5.5 / LIMIT as f64;
    let mut t = START;
    (0..n)
        .map(|_| {
            t += rng.exp(mean);
            (0, t, 1 + rng.next() % 10)
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    decisions: u64,
    allowed: u64,
    wrongly_allowed: u64,
    wrongly_denied: u64,
    /// Most units admitted in any period-long interval, over the limit.
    worst: u64,
    /// Bytes of state per key: the record, plus the log's heap block at
    /// its largest (the mean over keys).
    bytes: f64,
}

/// One key's state, whatever its algorithm.
trait AnyState {
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision;
    /// The packed record's bytes (with a 16-byte key; a log's with its
    /// arena slot), and the heap block the state holds.
    fn bytes(&self) -> (usize, usize);
}

impl<S: Held> AnyState for S {
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        Limiter::decide(self, p, Nanos(now), cost)
    }

    fn bytes(&self) -> (usize, usize) {
        let kind = record::Kind::of(S::ALGORITHM);
        let rec = record::Layout::of(kind, &[b'k'; 16])
            .expect("a 16-byte key packs")
            .rec_len();
        // An owned state's record holds its slot; the slot is the state.
        let slot = if kind.owned() {
            std::mem::size_of::<S>()
        } else {
            0
        };
        (rec + slot, self.heap_size())
    }
}

/// A fresh state of the algorithm visited.
struct Fresh;

impl Visit for Fresh {
    type Output = Box<dyn AnyState>;
    fn visit<S: Held>(self) -> Box<dyn AnyState> {
        Box::new(S::default())
    }
}

/// Replays `trace` through `algo`; `steps` > 0 runs the log with
/// `PRECISION period / steps` (timestamps rounded up to it).
fn replay(algo: Algorithm, steps: u64, trace: &[Req], keys: usize) -> Tally {
    let mut p = Params::new(
        NonZeroU64::new(LIMIT).unwrap(),
        NonZeroU64::new(PERIOD).unwrap(),
    );
    if let Some(d) = PERIOD.checked_div(steps).and_then(NonZeroU64::new) {
        p.precision = d;
    }
    let mut states: Vec<Box<dyn AnyState>> = (0..keys).map(|_| visit(algo, Fresh)).collect();
    // Per key: admitted (time, cost) in the last period, and their sum.
    let mut history: Vec<(VecDeque<(u64, u64)>, u64)> = vec![(VecDeque::new(), 0); keys];
    let mut t = Tally::default();
    let mut heap_peak = vec![0usize; keys];
    for &(key, now, cost) in trace {
        let (recent, sum) = &mut history[key];
        while let Some(&(at, c)) = recent.front() {
            if at + PERIOD > now {
                break;
            }
            *sum -= c;
            recent.pop_front();
        }
        let exact = *sum + cost <= LIMIT;
        let d = states[key].decide(&p, now, cost);
        heap_peak[key] = heap_peak[key].max(states[key].bytes().1);
        t.decisions += 1;
        match (d.allowed, exact) {
            (true, false) => t.wrongly_allowed += 1,
            (false, true) => t.wrongly_denied += 1,
            _ => {}
        }
        if d.allowed {
            t.allowed += 1;
            recent.push_back((now, cost));
            *sum += cost;
            t.worst = t.worst.max(*sum);
        }
    }
    let record = states.first().map_or(0, |s| s.bytes().0);
    t.bytes = record as f64 + heap_peak.iter().sum::<usize>() as f64 / keys as f64;
    t
}

/// A model, not a shipped algorithm: `k` sub-bucket counts over the
/// period, the oldest partial one prorated as if its units were spread
/// evenly (`window` is k = 1 with the previous bucket; `sliding` k = 5 with
/// each bucket's last admission). How its error falls as `k` grows says
/// what constant memory can buy: at saturation an exact window admits one
/// request as each old admission leaves, so it must know when each of the
/// last `limit` admissions happened; a summary of fewer numbers misplaces
/// each departure by about one gap between admissions.
struct SubBuckets {
    k: u64,
    /// Counts by bucket number (`now / (PERIOD / k)`), the newest `k + 1`.
    counts: VecDeque<(u64, u64)>,
}

impl SubBuckets {
    fn decide(&mut self, now: u64, cost: u64) -> bool {
        let width = PERIOD / self.k;
        let current = now / width;
        while self
            .counts
            .front()
            .is_some_and(|&(b, _)| b + self.k < current)
        {
            self.counts.pop_front();
        }
        // The window is (now - PERIOD, now]: bucket current - k is the
        // partial one, its share still inside prorated.
        let inside = |&(b, c): &(u64, u64)| -> u128 {
            if b + self.k > current {
                u128::from(c) * u128::from(width)
            } else {
                let left = (b + 1) * width - (now - PERIOD).min((b + 1) * width);
                u128::from(c) * u128::from(left)
            }
        };
        let used: u128 = self.counts.iter().map(inside).sum();
        let allowed =
            used + u128::from(cost) * u128::from(width) <= u128::from(LIMIT) * u128::from(width);
        if allowed {
            match self.counts.back_mut() {
                Some((b, c)) if *b == current => *c += cost,
                _ => self.counts.push_back((current, cost)),
            }
        }
        allowed
    }
}

/// [`replay`] for the [`SubBuckets`] model.
fn replay_model(k: u64, trace: &[Req]) -> Tally {
    let mut m = SubBuckets {
        k,
        counts: VecDeque::new(),
    };
    let mut recent: VecDeque<(u64, u64)> = VecDeque::new();
    let mut sum = 0;
    let mut t = Tally::default();
    for &(_, now, cost) in trace {
        while let Some(&(at, c)) = recent.front() {
            if at + PERIOD > now {
                break;
            }
            sum -= c;
            recent.pop_front();
        }
        let exact = sum + cost <= LIMIT;
        let allowed = m.decide(now, cost);
        t.decisions += 1;
        match (allowed, exact) {
            (true, false) => t.wrongly_allowed += 1,
            (false, true) => t.wrongly_denied += 1,
            _ => {}
        }
        if allowed {
            t.allowed += 1;
            recent.push_back((now, cost));
            sum += cost;
            t.worst = t.worst.max(sum);
        }
    }
    // A 2-byte count a bucket, and the newest bucket's number.
    t.bytes = (2 * k + 8) as f64;
    t
}

fn pct(n: u64, d: u64) -> String {
    format!("{:.3}%", 100.0 * n as f64 / d.max(1) as f64)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let traces: Vec<(&str, Vec<Req>, usize)> = vec![
        ("Poisson at 0.5x the limit", poisson(0.5, 200_000, 1), 1),
        ("Poisson at 1x the limit", poisson(1.0, 200_000, 2), 1),
        ("Poisson at 2x the limit", poisson(2.0, 200_000, 3), 1),
        (
            "on/off: 0.3 of each period at 4x, then quiet",
            on_off(4.0, 0.3, 200_000, 6),
            1,
        ),
        ("bursts at bucket boundaries", boundary_bursts(500), 1),
        (
            "1000 keys, heavy-tailed rates",
            heavy_tailed(1000, 500_000, 4),
            1000,
        ),
        ("weighted costs 1-10 at 1x", weighted(200_000, 5), 1),
    ];
    println!(
        "Limit {LIMIT} per {} s; every decision compared with the exact sliding-window answer.\n",
        PERIOD / S
    );
    println!("| algorithm | trace | decisions | admitted | wrongly allowed | wrongly denied | worst units in any period (limit {LIMIT}) | bytes per key |");
    println!("|---|---|---|---|---|---|---|---|");
    // Each algorithm, then the log with its timestamps rounded to a
    // 256th and a 1024th of the period: how exact a window can be that
    // knows each admission's time only that well.
    let runs = Algorithm::ALL
        .into_iter()
        .map(|a| (a, 0, a.name().to_string()))
        .chain([256, 1024].map(|n| (Algorithm::Log, n, format!("log PRECISION period/{n}"))));
    for (algo, steps, label) in runs {
        for (name, trace, keys) in &traces {
            let t = replay(algo, steps, trace, *keys);
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.0} |",
                label,
                name,
                t.decisions,
                pct(t.allowed, t.decisions),
                pct(t.wrongly_allowed, t.decisions),
                pct(t.wrongly_denied, t.decisions),
                t.worst,
                t.bytes,
            );
        }
    }
    println!(
        "\nThe sub-bucket model (k counts a period, the oldest prorated; see `SubBuckets`): \
         what more counts buy on the single-key traces.\n"
    );
    println!("| k | trace | wrongly allowed | wrongly denied | worst units in any period | bytes per key |");
    println!("|---|---|---|---|---|---|");
    for k in [5, 10, 25, 50, 100, 400, 1600] {
        for (name, trace, keys) in &traces {
            if *keys != 1 || name.starts_with("bursts") {
                continue;
            }
            let t = replay_model(k, trace);
            println!(
                "| {k} | {name} | {} | {} | {} | {:.0} |",
                pct(t.wrongly_allowed, t.decisions),
                pct(t.wrongly_denied, t.decisions),
                t.worst,
                t.bytes,
            );
        }
    }
}
