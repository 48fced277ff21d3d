//! Server time. Commands read `now` once, from a [`Clock`]; algorithms and
//! the store take it as an argument, so tests drive time with a
//! [`ManualClock`] instead of sleeping.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch on the server's clock. A `u64` lasts
/// until the year 2554.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const PER_MS: u64 = 1_000_000;
    pub const PER_SEC: u64 = 1_000_000_000;

    pub fn from_millis(ms: u64) -> Option<Nanos> {
        ms.checked_mul(Self::PER_MS).map(Nanos)
    }

    pub fn as_millis(self) -> u64 {
        self.0 / Self::PER_MS
    }

    pub fn as_secs(self) -> u64 {
        self.0 / Self::PER_SEC
    }

    pub fn checked_add(self, d: u64) -> Option<Nanos> {
        self.0.checked_add(d).map(Nanos)
    }

    pub fn saturating_sub(self, other: Nanos) -> u64 {
        self.0.saturating_sub(other.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

/// A source of server time. Never goes backwards.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Nanos;

    /// Steps backwards seen in the wall clock (or, for a manual clock, in
    /// the time it was set to), for operators: server time never follows
    /// them, but a clock that keeps stepping back is worth an alert.
    fn backward_steps(&self) -> u64 {
        0
    }

    /// Forward steps of the wall clock larger than [`MAX_SLEW`]: those
    /// believed (they lasted [`STEP_CONFIRM`]) and those ignored (they
    /// reverted before).
    fn forward_steps(&self) -> ForwardSteps {
        ForwardSteps::default()
    }

    /// Moves server time up to `t` if it is behind: a loaded snapshot was
    /// written at `t`, and limiter state must never see time run backwards
    /// across a restart (a fixed window would re-open).
    fn not_before(&self, t: Nanos);
}

/// Counts of the wall clock's forward steps, for `INFO` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardSteps {
    pub adopted: u64,
    pub ignored: u64,
}

/// A wall clock ahead of server time by up to this is followed at once:
/// NTP's slewing and small corrections, which keep fixed windows aligned
/// to UTC.
pub const MAX_SLEW: u64 = Nanos::PER_SEC;

/// A larger forward step is believed only once the wall clock has stayed
/// that far ahead for this long, measured on the monotonic clock. A step
/// that reverts sooner (a fake clock for a moment, a bad NTP answer) never
/// reaches server time, so it can never be carried into a snapshot and
/// made permanent by the restart's floor. A real correction (a host that
/// booted with a wrong clock, a resume from suspend) is adopted 10 s late.
pub const STEP_CONFIRM: u64 = 10 * Nanos::PER_SEC;

fn wall_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Monotonic time plus an offset that only grows.
///
/// It follows the wall clock forward (NTP slewing, a step forward), so fixed
/// windows stay aligned to UTC; it ignores steps backwards, so server time
/// keeps flowing at the real rate and no window re-opens or freezes.
#[derive(Debug)]
pub struct SystemClock {
    start: Instant,
    /// Wall time at `start` plus every forward correction since.
    offset: AtomicU64,
    /// Steps backwards seen: the wall clock fell further behind server
    /// time by more than a second since the last reading.
    backward_steps: AtomicU64,
    /// How far the wall clock was behind server time at the last reading.
    lag: AtomicU64,
    /// Monotonic time of the last wall-clock reading: the wall clock is
    /// read at most once per [`WALL_CHECK`], so most calls cost one clock
    /// read instead of two.
    last_wall: AtomicU64,
    /// Monotonic time (plus one; 0 = none) since which the wall clock has
    /// been more than [`MAX_SLEW`] ahead: a forward step not yet believed.
    step_since: AtomicU64,
    steps_adopted: AtomicU64,
    steps_ignored: AtomicU64,
}

/// How often `now` compares with the wall clock: a forward step is
/// followed within this long.
const WALL_CHECK: u64 = 1_000_000;

impl SystemClock {
    pub fn new() -> Self {
        SystemClock {
            start: Instant::now(),
            offset: AtomicU64::new(wall_now()),
            backward_steps: AtomicU64::new(0),
            lag: AtomicU64::new(0),
            last_wall: AtomicU64::new(0),
            step_since: AtomicU64::new(0),
            steps_adopted: AtomicU64::new(0),
            steps_ignored: AtomicU64::new(0),
        }
    }

    /// Server time given a monotonic reading and a wall-clock reading:
    /// split out so the step logic is testable without changing the system
    /// clock.
    fn observe(&self, mono: u64, wall: u64) -> Nanos {
        let offset = self.offset.load(Ordering::Relaxed);
        let now = mono.saturating_add(offset);
        if wall > now {
            if wall - now > MAX_SLEW {
                // A step: believed only once it has lasted STEP_CONFIRM.
                let since = self.step_since.load(Ordering::Relaxed);
                if since == 0 {
                    self.step_since.store(mono + 1, Ordering::Relaxed);
                    return Nanos(now);
                }
                if mono.saturating_sub(since - 1) < STEP_CONFIRM {
                    return Nanos(now);
                }
                self.steps_adopted.fetch_add(1, Ordering::Relaxed);
            }
            self.step_since.store(0, Ordering::Relaxed);
            let wanted = wall - mono;
            let prev = self.offset.fetch_max(wanted, Ordering::Relaxed);
            self.lag.store(0, Ordering::Relaxed);
            return Nanos(mono.saturating_add(prev.max(wanted)));
        }
        if self.step_since.swap(0, Ordering::Relaxed) != 0 {
            // The step reverted before it was believed.
            self.steps_ignored.fetch_add(1, Ordering::Relaxed);
        }
        let lag = now - wall;
        let before = self.lag.swap(lag, Ordering::Relaxed);
        if lag > before.saturating_add(Nanos::PER_SEC) {
            self.backward_steps.fetch_add(1, Ordering::Relaxed);
        }
        Nanos(now)
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        let mono = self.start.elapsed().as_nanos() as u64;
        let last = self.last_wall.load(Ordering::Relaxed);
        if mono.saturating_sub(last) < WALL_CHECK && last != 0 {
            return Nanos(mono.saturating_add(self.offset.load(Ordering::Relaxed)));
        }
        self.last_wall.store(mono.max(1), Ordering::Relaxed);
        self.observe(mono, wall_now())
    }

    fn backward_steps(&self) -> u64 {
        self.backward_steps.load(Ordering::Relaxed)
    }

    fn forward_steps(&self) -> ForwardSteps {
        ForwardSteps {
            adopted: self.steps_adopted.load(Ordering::Relaxed),
            ignored: self.steps_ignored.load(Ordering::Relaxed),
        }
    }

    fn not_before(&self, t: Nanos) {
        let mono = self.start.elapsed().as_nanos() as u64;
        self.offset
            .fetch_max(t.0.saturating_sub(mono), Ordering::Relaxed);
    }
}

/// A clock that moves only when told to; clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<ManualInner>);

#[derive(Debug)]
struct ManualInner {
    now: AtomicU64,
    backward_steps: AtomicU64,
}

impl ManualClock {
    /// Starts at `start`; tests usually pick a round Unix time so bucket
    /// boundaries are easy to reason about.
    pub fn new(start: Nanos) -> Self {
        ManualClock(Arc::new(ManualInner {
            now: AtomicU64::new(start.0),
            backward_steps: AtomicU64::new(0),
        }))
    }

    pub fn advance(&self, d: Duration) {
        self.0.now.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Sets the time; unlike the system clock, a manual clock may be set
    /// backwards, to test how the server copes with a clock that does.
    pub fn set(&self, t: Nanos) {
        let before = self.0.now.swap(t.0, Ordering::SeqCst);
        if t.0 < before {
            self.0.backward_steps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.0.now.load(Ordering::SeqCst))
    }

    fn backward_steps(&self) -> u64 {
        self.0.backward_steps.load(Ordering::Relaxed)
    }

    fn not_before(&self, t: Nanos) {
        self.0.now.fetch_max(t.0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = Nanos::PER_SEC;

    fn clock_at(offset: u64) -> SystemClock {
        SystemClock {
            offset: AtomicU64::new(offset),
            ..SystemClock::new()
        }
    }

    #[test]
    fn follows_wall_forward_and_ignores_backwards() {
        let c = clock_at(1000 * S);
        assert_eq!(c.observe(0, 1000 * S), Nanos(1000 * S));
        assert_eq!(c.observe(S, 1001 * S), Nanos(1001 * S));
        // Small corrections (NTP) are followed at once.
        assert_eq!(
            c.observe(2 * S, 1002 * S + MAX_SLEW),
            Nanos(1002 * S + MAX_SLEW)
        );
        // Wall clock jumps a day ahead: believed once it has lasted.
        let day = 86_400 * S;
        assert_eq!(c.observe(3 * S, 1004 * S + day), Nanos(1004 * S));
        assert_eq!(
            c.observe(3 * S + STEP_CONFIRM - 1, 1004 * S + day + STEP_CONFIRM - 1),
            Nanos(1004 * S + STEP_CONFIRM - 1)
        );
        let t = 3 * S + STEP_CONFIRM;
        assert_eq!(
            c.observe(t, 1004 * S + day + STEP_CONFIRM),
            Nanos(1004 * S + day + STEP_CONFIRM)
        );
        assert_eq!(
            c.forward_steps(),
            ForwardSteps {
                adopted: 1,
                ignored: 0
            }
        );
        // Wall clock steps back an hour: server time keeps flowing, and the
        // step is counted once, not at every reading after it.
        let now = 1004 * S + day + STEP_CONFIRM;
        assert_eq!(c.observe(t + S, now + S - 3_600 * S), Nanos(now + S));
        assert_eq!(
            c.observe(t + 2 * S, now + 2 * S - 3_600 * S),
            Nanos(now + 2 * S)
        );
        assert_eq!(c.backward_steps(), 1);
        // A second step back is a second count.
        assert_eq!(c.observe(t + 3 * S, now - 7_200 * S), Nanos(now + 3 * S));
        assert_eq!(c.backward_steps(), 2);
    }

    /// A fake clock 50 years ahead for two seconds (libfaketime) used to
    /// move server time 50 years ahead for good; it is now ignored.
    #[test]
    fn a_step_that_reverts_is_never_believed() {
        let c = clock_at(1000 * S);
        let years = 50 * 365 * 86_400 * S;
        assert_eq!(c.observe(0, 1000 * S), Nanos(1000 * S));
        assert_eq!(c.observe(S, 1001 * S + years), Nanos(1001 * S));
        assert_eq!(c.observe(3 * S, 1003 * S + years), Nanos(1003 * S));
        assert_eq!(c.observe(4 * S, 1004 * S), Nanos(1004 * S));
        assert_eq!(
            c.observe(4 * S + STEP_CONFIRM, 1004 * S + STEP_CONFIRM),
            Nanos(1004 * S + STEP_CONFIRM)
        );
        assert_eq!(
            c.forward_steps(),
            ForwardSteps {
                adopted: 0,
                ignored: 1
            }
        );
        assert_eq!(c.backward_steps(), 0, "the revert is not a step back");
    }

    #[test]
    fn not_before_only_moves_forward() {
        let c = SystemClock::new();
        let ahead = Nanos(c.now().0 + 3600 * S);
        c.not_before(ahead);
        assert!(c.now() >= ahead);
        c.not_before(Nanos(5));
        assert!(c.now() >= ahead);
        let m = ManualClock::new(Nanos(100));
        m.not_before(Nanos(50));
        assert_eq!(m.now(), Nanos(100));
        m.not_before(Nanos(150));
        assert_eq!(m.now(), Nanos(150));
    }

    #[test]
    fn system_clock_tracks_the_wall_clock_between_wall_readings() {
        let c = SystemClock::new();
        for _ in 0..10_000 {
            let (now, wall) = (c.now().0, wall_now());
            // Same rate, same origin: apart only by the moments between
            // the two reads (a generous bound, not a timing assertion).
            assert!(now.abs_diff(wall) < 100_000_000, "{now} vs {wall}");
        }
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn manual_clock_moves_when_told() {
        let c = ManualClock::new(Nanos(5));
        let shared = c.clone();
        c.advance(Duration::from_nanos(10));
        assert_eq!(shared.now(), Nanos(15));
    }
}
