//! The values settings take, each parsed as Redis's config parses it
//! (sizes with units, `yes`/`no`, ranges refused in Redis's words) for the
//! flags, the config file and `CONFIG SET` alike.

/// A numeric setting's range and form (its row's `Kind::Number`), for its
/// flag, its config-file key and `CONFIG SET`, which refuse the same
/// values with the same words.
#[derive(Debug, Clone, Copy)]
pub struct Number {
    pub min: i64,
    pub max: i64,
    /// A size: memory units (`kb`, `mb`, `gb`) are accepted.
    pub memory: bool,
}

impl Number {
    /// A whole number from `min` to `max`.
    pub const fn count(min: i64, max: i64) -> Number {
        Number {
            min,
            max,
            memory: false,
        }
    }

    /// A size (memory units accepted) from `min` to `max` bytes.
    pub const fn size(min: i64, max: i64) -> Number {
        Number {
            min,
            max,
            memory: true,
        }
    }

    /// Reads and checks a flag's or a file's value; a bad size says which
    /// units there are.
    pub fn parse(&self, s: &str) -> Result<u64, String> {
        self.read(s, parse_memory)
    }

    /// Reads and checks a `CONFIG SET` value, refused in Redis's words.
    pub fn parse_config_set(&self, s: &str) -> Result<u64, String> {
        self.read(s, |s| {
            parse_memory(s).map_err(|_| "argument must be a memory value".to_string())
        })
    }

    fn read(&self, s: &str, size: impl Fn(&str) -> Result<u64, String>) -> Result<u64, String> {
        let n: i128 = if self.memory {
            size(s)?.into()
        } else {
            s.trim()
                .parse::<i64>()
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())?
                .into()
        };
        check_range(n, (self.min, self.max))?;
        Ok(n as u64)
    }
}

/// A number within a setting's range, or the words Redis refuses it with
/// (at `CONFIG SET` and at start-up alike).
pub fn check_range(n: i128, (min, max): (i64, i64)) -> Result<(), String> {
    if n < i128::from(min) || n > i128::from(max) {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(())
}

/// `--top-keys`: at most 1,048,576 (about 2.4 GB of sketches).
pub fn parse_top_keys(s: &str) -> Result<usize, String> {
    let n: i128 = s
        .trim()
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    check_range(n, (0, 1 << 20))?;
    Ok(n as usize)
}

/// `--client-output-buffer-limit`: each class's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Clients: redis.conf's `normal` class.
    pub normal: OutputLimit,
    /// Replicas, from their `PSYNC` on: `replica` (or `slave`).
    pub replica: OutputLimit,
}

/// Why a `--client-output-buffer-limit` is refused, in Redis's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OutputLimitError {
    #[error("Wrong number of arguments in buffer limit configuration.")]
    Arguments,
    #[error("Invalid client class specified in buffer limit configuration.")]
    Class,
    #[error("Error in hard, soft or soft_seconds setting in buffer limit configuration.")]
    Value,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            normal: OutputLimit::default(),
            replica: OutputLimit {
                hard: 256 << 20,
                soft: 64 << 20,
                soft_seconds: 60,
            },
        }
    }
}

impl OutputLimits {
    /// The flag's default: Redis's, [`OutputLimits::default`].
    pub const DEFAULT: &'static str = "normal 0 0 0 replica 256mb 64mb 60";

    /// The flag: classes not named keep their defaults.
    pub fn parse(s: &str) -> Result<OutputLimits, String> {
        OutputLimits::default()
            .with(s)
            .map_err(|e| format!("{e} (expected [CLASS] HARD SOFT SECONDS ...)"))
    }

    /// These limits with the classes `s` names changed (`CONFIG SET`, as
    /// Redis's: `replica 256mb 64mb 60` leaves `normal` alone). A bare
    /// `HARD SOFT SECONDS` is the normal class's.
    pub fn with(mut self, s: &str) -> Result<OutputLimits, OutputLimitError> {
        let words: Vec<&str> = s.split_whitespace().collect();
        if words.len() == 3 && parse_memory(words[0]).is_ok() {
            self.normal = OutputLimit::from_words(&words)?;
            return Ok(self);
        }
        if words.is_empty() || !words.len().is_multiple_of(4) {
            return Err(OutputLimitError::Arguments);
        }
        for group in words.chunks(4) {
            let limit = OutputLimit::from_words(&group[1..])?;
            match group[0].to_ascii_lowercase().as_str() {
                "normal" => self.normal = limit,
                "replica" | "slave" => self.replica = limit,
                _ => return Err(OutputLimitError::Class),
            }
        }
        Ok(self)
    }
}

impl std::fmt::Display for OutputLimits {
    /// As Redis's `CONFIG GET` shows them (bytes, and `slave`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, r) = (self.normal, self.replica);
        write!(
            f,
            "normal {} {} {} slave {} {} {}",
            n.hard, n.soft, n.soft_seconds, r.hard, r.soft, r.soft_seconds
        )
    }
}

/// One class's limits: bytes and seconds; 0 disables a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

impl OutputLimit {
    /// `HARD SOFT SECONDS`, optionally led by redis.conf's class name
    /// `normal`.
    pub fn parse(s: &str) -> Result<OutputLimit, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let words = match words.as_slice() {
            ["normal", rest @ ..] => rest,
            all => all,
        };
        OutputLimit::from_words(words).map_err(|e| format!("{e} (got '{s}')"))
    }

    /// `HARD SOFT SECONDS`, three words.
    fn from_words(words: &[&str]) -> Result<OutputLimit, OutputLimitError> {
        let [hard, soft, secs] = words else {
            return Err(OutputLimitError::Arguments);
        };
        let bad = |_| OutputLimitError::Value;
        Ok(OutputLimit {
            hard: parse_memory(hard).map_err(bad)?,
            soft: parse_memory(soft).map_err(bad)?,
            soft_seconds: secs.parse().map_err(|_| OutputLimitError::Value)?,
        })
    }
}

/// What to do at `--maxmemory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum MaxmemoryPolicy {
    #[default]
    NoEviction = 0,
    VolatileTtl = 1,
}

impl MaxmemoryPolicy {
    pub const ALL: [MaxmemoryPolicy; 2] =
        [MaxmemoryPolicy::NoEviction, MaxmemoryPolicy::VolatileTtl];
    pub const NAMES: [&'static str; 2] = ["noeviction", "volatile-ttl"];

    /// Position in `ALL`, for storing the policy in an atomic.
    pub fn index(self) -> u8 {
        self as u8
    }

    pub fn from_index(i: u8) -> MaxmemoryPolicy {
        Self::ALL[usize::from(i) % Self::ALL.len()]
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn parse(s: &str) -> Result<MaxmemoryPolicy, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("unknown maxmemory policy '{s}': use noeviction or volatile-ttl")
            })
    }
}

/// `yes`/`no` as redis.conf writes booleans.
pub fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("expected yes or no, got '{s}'")),
    }
}

/// A file name without a directory (`--appendfilename`).
pub fn parse_file_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains('/') || s == "." || s == ".." {
        return Err("appendfilename can't be a path, just a filename".into());
    }
    Ok(s.to_string())
}

/// A duration flag in the one grammar limits use too
/// ([`crate::util::parse_duration`]): `250ms`, `1s`, `2m`, `1h`, `1d`, or a
/// bare number of seconds;
/// zero is refused (an interval of nothing would spin).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    use crate::util::DurationError;
    crate::util::parse_duration(s.trim().as_bytes())
        .map(std::time::Duration::from_nanos)
        .map_err(|e| match e {
            DurationError::Zero => format!("duration '{s}' must be more than zero"),
            DurationError::OutOfRange => format!("duration '{s}' is out of range"),
            DurationError::Ambiguous => DurationError::ambiguous("duration", s, false),
            DurationError::Invalid => format!(
                "invalid duration '{s}': use whole seconds, or a whole number with ms, s, m, h or d"
            ),
        })
}

/// Parses a size the way Redis's config does: bytes, or a number with
/// k/kb/m/mb/g/gb (k = 1000, kb = 1024).
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let units = [
        ("", 1),
        ("b", 1),
        ("k", 1000),
        ("kb", 1024),
        ("m", 1000 * 1000),
        ("mb", 1024 * 1024),
        ("g", 1000 * 1000 * 1000),
        ("gb", 1024 * 1024 * 1024),
    ];
    scaled(
        s,
        "size",
        &units,
        ": use bytes, or a whole number with k, kb, m, mb, g or gb (k = 1000, kb = 1024)",
    )
}

/// A whole number followed by one of `units` (case-insensitive), times
/// that unit's multiplier, checked: the shape sizes and durations share.
fn scaled(s: &str, what: &str, units: &[(&str, u64)], hint: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid {what} '{s}'"))?;
    let (_, mul) = units
        .iter()
        .find(|(u, _)| *u == unit)
        .ok_or_else(|| format!("invalid {what} unit in '{s}'{hint}"))?;
    n.checked_mul(*mul)
        .ok_or_else(|| format!("{what} '{s}' is too large"))
}
