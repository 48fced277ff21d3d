//! Number parsing shared by the decoder and the commands,
//! [`long_double`], the x87 extended precision `INCRBYFLOAT` computes in,
//! [`sockets`], the connections `MIGRATE` keeps to its targets, and how a
//! command waits for a lock ([`lock_or_wait_off`]).

pub mod long_double;
pub mod sockets;

use std::time::Duration;

/// A wait for a lock shorter than this stays on its thread: a command
/// holds a shard, a Lua state or the migration gate for well under it.
pub const SHORT_WAIT: Duration = Duration::from_micros(50);

/// Takes a lock as every lock a command waits for is taken: within
/// [`SHORT_WAIT`] on this thread (`try_for`), else by `lock` run through
/// `off`, which moves the wait off the async worker (so that one long
/// holder cannot take every worker with it). Moving every wait would cost
/// two thread wake-ups where the lock is nearly always free.
pub fn lock_or_wait_off<G>(
    try_for: impl FnOnce(Duration) -> Option<G>,
    mut lock: impl FnMut() -> G,
    off: impl FnOnce(&mut dyn FnMut()),
) -> G {
    if let Some(g) = try_for(SHORT_WAIT) {
        return g;
    }
    let mut got = None;
    off(&mut || got = Some(lock()));
    got.unwrap_or_else(lock)
}

/// [`prefetch`] of every cache line `r` spans (its first and last byte):
/// a packed record that is not a divisor of 64 bytes long straddles two
/// lines at many of its positions in an arena.
#[inline(always)]
pub fn prefetch_all<T>(r: &T) {
    prefetch(r);
    let size = std::mem::size_of::<T>();
    if size > 1 {
        // SAFETY: the last byte of `*r`, inside the same allocation.
        prefetch(unsafe { &*(r as *const T).cast::<u8>().add(size - 1) });
    }
}

/// Asks the CPU to start loading the cache line holding `r`, so that a
/// later read finds it there. Only a hint: it reads nothing the program
/// sees and cannot fault, so it is safe whatever `r` is. No stable
/// `core` function does this for every target (`_mm_prefetch` is
/// x86-only), hence the two arms; elsewhere it does nothing.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    let p = (r as *const T).cast::<i8>();
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` has no architectural effect and never faults;
    // `p` comes from a live reference in any case.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above, `prfm` is a hint that never faults.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Bytes as Redis's `bytesToHuman` prints them.
pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    const K: f64 = 1024.0;
    if n < K {
        format!("{n}B")
    } else if n < K * K {
        format!("{:.2}K", n / K)
    } else if n < K * K * K {
        format!("{:.2}M", n / (K * K))
    } else {
        format!("{:.2}G", n / (K * K * K))
    }
}

/// Parses an integer exactly as Redis's `string2ll` does: an optional `-`,
/// then digits with no leading zero (but "0" itself), no `+`, no spaces,
/// within `i64`. Anything else is `None`, never a panic or a wrap.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!neg).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    if digits.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if neg {
        if v == 1 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(v).ok().map(|v| -v)
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses a float as Redis's `string2ld` does for `INCRBYFLOAT`-style
/// arguments: no spaces, finite or `inf`.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if text.is_empty() || text.trim() != text {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// `%.17g`, as Redis 7.0 writes a double in a reply (`inf`/`-inf` for
/// the infinities).
pub fn format_g17(d: f64) -> String {
    let mut buf = [0u8; 32];
    String::from_utf8_lossy(format_g(d, 17, &mut buf)).into_owned()
}

/// C's `%.{precision}g` of `x` (precision 1 to 17) into `buf`, the bytes
/// written: the one formatter every `%g` goes through (Redis's `%.17g`
/// replies and script arguments, Lua 5.1's `%.14g`, cjson's configured
/// precision). An integer that `%g` writes in full (below
/// `10^precision`) skips `snprintf`: the common case in scripts.
pub fn format_g(x: f64, precision: u8, buf: &mut [u8; 32]) -> &[u8] {
    let precision = precision.clamp(1, 17);
    let exact = 10f64.powi(i32::from(precision));
    if x.fract() == 0.0 && x.abs() < exact && !(x == 0.0 && x.is_sign_negative()) {
        let mut b = itoa::Buffer::new();
        let s = b.format(x as i64).as_bytes();
        buf[..s.len()].copy_from_slice(s);
        return &buf[..s.len()];
    }
    // SAFETY: the buffer's size is passed; `%.*g` of a double with at most
    // 17 digits writes at most 24 bytes and a NUL (sign, digits, point,
    // exponent), and `nan`/`inf` fewer.
    let n = unsafe {
        libc::snprintf(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%.*g".as_ptr(),
            libc::c_int::from(precision),
            x,
        )
    };
    let n = (n.max(0) as usize).min(buf.len() - 1);
    &buf[..n]
}

/// C's `strtod` over `s`: the value and whether it used every byte (a NUL
/// inside `s` ends it early, as it ends a C string). Redis parses scores
/// with it, so hex floats, `inf` and over- and underflow read as they do
/// there.
pub fn strtod(s: &[u8]) -> (f64, bool, bool) {
    let Ok(c) = std::ffi::CString::new(s) else {
        return (0.0, false, false);
    };
    let mut end: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: `c` is NUL-terminated and outlives the call; `end` points
    // into it afterwards. errno is this thread's.
    let (v, range) = unsafe {
        *libc::__errno_location() = 0;
        let v = libc::strtod(c.as_ptr(), &mut end);
        (v, *libc::__errno_location() == libc::ERANGE)
    };
    let used = end as usize - c.as_ptr() as usize;
    (v, used == s.len(), range)
}

/// One step of a 64-bit LCG (Knuth's MMIX constants), the samplers' cheap
/// randomness (one command in 16 timed, one admission in N counted): its
/// top bits are uniform enough to pick one in a power of two or in N.
/// Returns the new state.
#[inline]
pub fn lcg_step(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *state
}

/// An I/O error as C's `strerror` words it, without Rust's ` (os error
/// N)`: how Redis words the errors it echoes (`-MISCONF Errors writing to
/// the AOF file: %s`, `Rewriting config file: %s`).
/// Why [`lock_beside`] could not take a lock.
#[derive(Debug)]
pub enum LockError {
    /// A symbolic link sits where the lock goes (not followed).
    Symlink,
    /// Another process holds it.
    Held,
    Io(std::io::Error),
}

/// How long [`lock_beside`] waits for a lock another process holds before
/// it answers [`LockError::Held`].
pub const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes an exclusive `flock` on `lock` (created if missing, never through
/// a symbolic link) for as long as the returned file lives, and writes this
/// process's id in it, for whoever finds a second server refused. The one
/// lock that keeps two servers off one file: the append-only file's and
/// the cluster config file's.
///
/// A lock held by someone else is tried again for up to [`LOCK_PATIENCE`]
/// before it is refused: a `flock` belongs to the open file, so a copy of
/// its descriptor holds it too, and copies outlive their owner for a
/// moment (a child process between `fork` and `exec`, which closes them;
/// a server restarted while the old one is still exiting). Refused at
/// once, a restart in such a moment failed with "another server has it
/// open" though none had.
pub fn lock_beside(lock: &std::path::Path) -> Result<std::fs::File, LockError> {
    lock_beside_within(lock, LOCK_PATIENCE)
}

fn lock_beside_within(
    lock: &std::path::Path,
    patience: std::time::Duration,
) -> Result<std::fs::File, LockError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => LockError::Symlink,
            _ => LockError::Io(e),
        })?;
    let give_up = std::time::Instant::now() + patience;
    // SAFETY: flock on a descriptor this function owns.
    while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(LockError::Io(e));
        }
        if std::time::Instant::now() >= give_up {
            return Err(LockError::Held);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = file
        .set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

/// Marks the calling thread as background work (a file's writer, the
/// sweeper): Linux's `SCHED_BATCH`, under which its wake-ups do not
/// preempt a running worker, so a write or a sweep waits for the worker's
/// next pause instead of landing in the middle of a request. It keeps its
/// fair share of the CPU, so it is never starved. `false` puts it back in
/// the normal class (the append-only file's writer under `appendfsync
/// always`, which replies wait for). Best effort: on failure, or off
/// Linux, the thread stays as it was.
pub fn set_background(background: bool) {
    #[cfg(target_os = "linux")]
    {
        let policy = if background {
            libc::SCHED_BATCH
        } else {
            libc::SCHED_OTHER
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` outlives the call.
        let _ = unsafe { libc::sched_setscheduler(0, policy, &param) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = background;
}

pub fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Whether a peer is on this machine's loopback interface (IPv4-mapped
/// IPv6 too): protected mode's test, on the Redis port and the metrics
/// port's guarded pages.
pub fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `HOST:PORT` (an IPv6 host in brackets, or bare before the last colon).
pub fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}' is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("'{port}' is not a port number"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("'{s}' has no host"));
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {

    /// A background thread is in `SCHED_BATCH`, and comes back to the
    /// normal class when asked (the append-only file's writer does, for
    /// `appendfsync always`), without privileges.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_background_thread_is_batch_until_it_comes_back() {
        // The scheduling policy, the 41st field of the thread's stat.
        fn policy() -> i32 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            let after_name = &stat[stat.rfind(')').unwrap() + 2..];
            after_name.split(' ').nth(41 - 3).unwrap().parse().unwrap()
        }
        std::thread::spawn(|| {
            assert_eq!(policy(), libc::SCHED_OTHER);
            super::set_background(true);
            assert_eq!(policy(), libc::SCHED_BATCH);
            super::set_background(false);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    /// A lock another open file holds is waited for, within the patience:
    /// a child process's copy of the descriptor lets it go at its `exec`,
    /// and refusing at once failed a restart that met one. Held past the
    /// patience, it is refused.
    #[test]
    fn a_lock_held_for_a_moment_is_waited_for_and_one_held_on_is_refused() {
        use std::os::unix::io::AsRawFd;
        let dir = std::env::temp_dir().join(format!("turnstile-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let other = std::fs::File::create(&path).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert!(matches!(
            lock_beside_within(&path, std::time::Duration::from_millis(30)),
            Err(LockError::Held)
        ));
        let holder = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(other);
        });
        // Ten seconds of patience: the holder lets go long before.
        let held = lock_beside_within(&path, std::time::Duration::from_secs(10));
        assert!(held.is_ok(), "{held:?}");
        holder.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn format_g_is_c_percent_g() {
        let g = |x: f64, p: u8| {
            let mut b = [0u8; 32];
            String::from_utf8(super::format_g(x, p, &mut b).to_vec()).unwrap()
        };
        assert_eq!(g(0.1, 17), "0.10000000000000001");
        assert_eq!(g(0.1, 14), "0.1");
        assert_eq!(g(3.0, 17), "3");
        assert_eq!(g(-42.0, 14), "-42");
        assert_eq!(g(-0.0, 17), "-0");
        assert_eq!(g(1e17, 17), "1e+17");
        assert_eq!(g(99_999_999_999_999_999.0, 17), "1e+17");
        assert_eq!(g(1e14, 14), "1e+14");
        assert_eq!(g(1_700_000_000_123_456.0, 17), "1700000000123456");
        assert_eq!(g(1_700_000_000_123_456.0, 14), "1.7000000001235e+15");
        assert_eq!(
            g(-1.234_567_890_123_456_7e-308, 17),
            "-1.2345678901234567e-308"
        );
        assert_eq!(g(f64::INFINITY, 17), "inf");
        assert_eq!(g(f64::NEG_INFINITY, 14), "-inf");
        assert_eq!(g(f64::NAN, 14), "nan");
        assert_eq!(g(2.5, 1), "2");
        assert_eq!(super::format_g17(1e100), "1e+100");
    }

    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"123"), Some(123));
        assert_eq!(parse_i64(b"-123"), Some(-123));
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"+7"), None);
        assert_eq!(parse_i64(b" 7"), None);
        assert_eq!(parse_i64(b""), None);
        assert_eq!(parse_i64(b"-"), None);
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"99999999999999999999"), None);
        assert_eq!(parse_i64(b"12a"), None);
    }
}

/// Why [`parse_duration`] refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    Invalid,
    Zero,
    OutOfRange,
    /// `M` alone: minutes to some, months to others. Units are otherwise
    /// case-insensitive (`1H`, `1MO`), but a `1M` that silently meant a
    /// minute turned a monthly quota into a per-minute one.
    Ambiguous,
}

impl DurationError {
    /// The words every reader of a duration (commands, policy files,
    /// flags) uses for [`DurationError::Ambiguous`].
    /// `months`: whether the field takes the calendar's `1mo` (a limit's
    /// period does; a `BLOCK` or a flag does not).
    pub fn ambiguous(what: &str, text: &str, months: bool) -> String {
        let digits = text.trim_end_matches(|c: char| !c.is_ascii_digit());
        if months {
            format!("{what} '{text}' is ambiguous: write {digits}m for minutes or 1mo for a calendar month")
        } else {
            format!("{what} '{text}' is ambiguous: write {digits}m for minutes (M alone could mean months)")
        }
    }
}

/// A duration as limits are written (`RL.ALLOW`'s period, a policy file's
/// `period`): whole seconds, or a whole number with `ms`, `s`, `m`, `h` or
/// `d`. Returns nanoseconds, positive and at most `i64::MAX`.
pub fn parse_duration(arg: &[u8]) -> Result<u64, DurationError> {
    let split = arg
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(arg.len());
    let (digits, unit) = arg.split_at(split);
    if digits.is_empty() || digits.len() > 1 && digits[0] == b'0' {
        return Err(DurationError::Invalid);
    }
    let unit_ns: u64 = match unit {
        b"" => 1_000_000_000,
        b"M" => return Err(DurationError::Ambiguous),
        u if u.eq_ignore_ascii_case(b"s") => 1_000_000_000,
        u if u.eq_ignore_ascii_case(b"ms") => 1_000_000,
        u if u.eq_ignore_ascii_case(b"m") => 60 * 1_000_000_000,
        u if u.eq_ignore_ascii_case(b"h") => 3_600 * 1_000_000_000,
        u if u.eq_ignore_ascii_case(b"d") => 86_400 * 1_000_000_000,
        _ => return Err(DurationError::Invalid),
    };
    let n = digits
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or(DurationError::OutOfRange)?;
    if n == 0 {
        return Err(DurationError::Zero);
    }
    n.checked_mul(unit_ns)
        .filter(|&ns| ns <= i64::MAX as u64)
        .ok_or(DurationError::OutOfRange)
}
