//! One policy file, as envoyproxy/ratelimit writes it, read into plain
//! types; every check a single descriptor allows is made here, while the
//! YAML parser still knows where the descriptor is, so an error names its
//! line. Rules that span descriptors (duplicates, `replaces`, names) are
//! checked when the tree is built (`mod.rs`).

use std::num::NonZeroU64;

use serde::Deserialize;

use crate::limiter::calendar::{self, Period};
use crate::limiter::{Algorithm, LimitSpec};
use crate::util::DurationError;

/// A file's root: one domain and its descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "WrittenFile")]
pub struct RawFile {
    pub domain: String,
    pub descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenFile {
    #[serde(default)]
    domain: Option<Scalar>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

impl TryFrom<WrittenFile> for RawFile {
    type Error = String;

    fn try_from(w: WrittenFile) -> Result<RawFile, String> {
        let domain = w.domain.as_ref().map(Scalar::text).unwrap_or_default();
        if domain.is_empty() {
            return Err("config file cannot have empty domain".into());
        }
        // The domain is the hash tag of every counter key it derives
        // (`rl:{domain}...`), which braces would cut short.
        if domain.contains(['{', '}']) {
            return Err(format!("domain '{domain}' must not contain '{{' or '}}'"));
        }
        no_duplicates(&w.descriptors)?;
        Ok(RawFile {
            domain,
            descriptors: w.descriptors,
        })
    }
}

/// Two descriptors at one level with the same key and value would each
/// claim the same requests. Checked with a hash set of the level's
/// `(key, value)` pairs: comparing each descriptor with every earlier one
/// took 14 s for 60,000 descriptors, on the thread that reloads.
fn no_duplicates(list: &[RawDescriptor]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for d in list {
        if !seen.insert((d.key.as_str(), d.value.as_deref())) {
            let composite = match &d.value {
                Some(v) => format!("{}_{v}", d.key),
                None => d.key.clone(),
            };
            return Err(format!("duplicate descriptor composite key '{composite}'"));
        }
    }
    Ok(())
}

/// One descriptor as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "Written")]
pub struct RawDescriptor {
    pub key: String,
    /// Absent: the descriptor matches every value, each counted apart.
    pub value: Option<String>,
    pub limit: Option<RawLimit>,
    pub descriptors: Vec<RawDescriptor>,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    pub share_threshold: bool,
}

/// What a matched descriptor does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Count and limit with this algorithm.
    Limit(LimitSpec),
    /// Always allowed, never counted (`unlimited: true`).
    Unlimited,
    /// Always over the limit (`requests_per_unit: 0`, as envoyproxy/ratelimit
    /// reads it).
    DenyAll,
}

/// A validated `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "WrittenLimit")]
pub struct RawLimit {
    pub action: Action,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// The envoyproxy/ratelimit unit the window equals, if it equals one:
    /// what Envoy is told in `current_limit`.
    pub unit: Option<Unit>,
    pub requests_per_unit: u32,
}

/// `unit:` as written: read on its own, so that a unit the file misspells
/// is reported at its own line, with the units there are. Empty is no unit
/// (envoyproxy/ratelimit's `UNKNOWN`).
struct WrittenUnit(Option<Unit>);

impl<'de> Deserialize<'de> for WrittenUnit {
    /// Checked inside the scalar's own visit: serde_yaml_ng places an error
    /// raised there at the scalar, one raised after it (`try_from`) at the
    /// enclosing mapping.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<WrittenUnit, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = WrittenUnit;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a rate limit unit ({})", Unit::LIST)
            }

            fn visit_str<E: serde::de::Error>(self, u: &str) -> Result<WrittenUnit, E> {
                if u.is_empty() {
                    return Ok(WrittenUnit(None));
                }
                Unit::parse(u).map(|u| WrittenUnit(Some(u))).ok_or_else(|| {
                    E::custom(format!(
                        "invalid rate limit unit '{u}': use one of {}",
                        Unit::LIST
                    ))
                })
            }
        }
        d.deserialize_str(Visit)
    }
}

/// envoyproxy/ratelimit's units (its `RateLimitResponse.RateLimit.Unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second = 1,
    Minute = 2,
    Hour = 3,
    Day = 4,
    Month = 5,
    Year = 6,
    Week = 7,
}

impl Unit {
    /// The names [`Unit::parse`] takes, for errors.
    const LIST: &'static str = "second, minute, hour, day, week, month, year";

    const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's length in seconds, as envoyproxy/ratelimit counts it (a
    /// month is 30 days, a year 365).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Any case, as envoyproxy/ratelimit accepts it.
    fn parse(s: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(s))
    }

    /// The unit numbered `n` in Envoy's `RateLimitUnit` (as the
    /// discriminants here are), if any.
    pub fn from_number(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|&u| u as i32 == n)
    }

    /// The calendar unit `calendar: true` makes of this one, if any.
    fn calendar(self) -> Option<calendar::Unit> {
        match self {
            Unit::Day => Some(calendar::Unit::Day),
            Unit::Week => Some(calendar::Unit::Week),
            Unit::Month => Some(calendar::Unit::Month),
            Unit::Year => Some(calendar::Unit::Year),
            Unit::Second | Unit::Minute | Unit::Hour => None,
        }
    }

    /// The unit a period of `ns` nanoseconds is exactly, if any.
    pub fn of_period(ns: u64) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.seconds() * 1_000_000_000 == ns)
    }
}

/// The descriptor's fields as written, before the checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a descriptor mapping")]
struct Written {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<Scalar>,
    #[serde(default)]
    rate_limit: Option<RawLimit>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    /// Accepted and ignored: envoyproxy/ratelimit's metric-naming and
    /// quota options, which have no effect here (see docs/policies.md).
    #[serde(default)]
    #[allow(dead_code)]
    quota_mode: bool,
    #[serde(default)]
    #[allow(dead_code)]
    value_to_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml_ng::Value>,
}

/// A value written as a string or as a number (`value: 200` is `"200"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenLimit {
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unit: Option<WrittenUnit>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<Replaces>,
    // Turnstile's own fields.
    #[serde(default)]
    algorithm: Option<String>,
    #[serde(default)]
    period: Option<Scalar>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    precision: Option<Scalar>,
    /// `unit: day|week|month|year` follows the calendar (ISO weeks from
    /// Monday, calendar months and years) rather than envoyproxy/
    /// ratelimit's epoch-aligned spans of 1, 7, 30 and 365 days.
    #[serde(default)]
    calendar: bool,
    /// `+HH:MM` or `-HH:MM`: where a calendar period's boundaries fall.
    #[serde(default)]
    tz: Option<String>,
    /// A denial blocks the counter key for this long (`BLOCK`).
    #[serde(default)]
    block: Option<Scalar>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Replaces {
    #[serde(default)]
    name: String,
}

/// A duration as a policy file writes it: whole seconds, or a whole number
/// with `ms`, `s`, `m`, `h` or `d` (as `RL.ALLOW` takes it).
fn duration(v: &Scalar, what: &str) -> Result<NonZeroU64, String> {
    let text = v.text();
    match crate::util::parse_duration(text.as_bytes()) {
        Ok(ns) => NonZeroU64::new(ns),
        Err(DurationError::Ambiguous) => return Err(DurationError::ambiguous(what, &text, false)),
        Err(_) => None,
    }
    .ok_or_else(|| {
        format!(
            "invalid {what} '{text}': use whole seconds or a whole number with ms, s, m, h or d"
        )
    })
}

impl TryFrom<Written> for RawDescriptor {
    type Error = String;

    fn try_from(w: Written) -> Result<RawDescriptor, String> {
        let key = w.key.unwrap_or_default();
        if key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let value = w.value.as_ref().map(Scalar::text).filter(|v| !v.is_empty());
        if w.share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{key}'"
            ));
        }
        let limit = w.rate_limit;
        no_duplicates(&w.descriptors)?;
        Ok(RawDescriptor {
            key,
            value,
            limit,
            descriptors: w.descriptors,
            shadow_mode: w.shadow_mode,
            detailed_metric: w.detailed_metric,
            share_threshold: w.share_threshold,
        })
    }
}

impl TryFrom<WrittenLimit> for RawLimit {
    type Error = String;

    fn try_from(w: WrittenLimit) -> Result<RawLimit, String> {
        limit(w)
    }
}

fn limit(w: WrittenLimit) -> Result<RawLimit, String> {
    let mut replaces = Vec::with_capacity(w.replaces.len());
    for r in &w.replaces {
        if r.name.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if w.name.as_deref() == Some(r.name.as_str()) {
            return Err("replaces should not contain name of same descriptor".into());
        }
        replaces.push(r.name.clone());
    }
    let (action, unit, requests_per_unit) = action(&w)?;
    Ok(RawLimit {
        action,
        name: w.name.filter(|n| !n.is_empty()),
        replaces,
        unit,
        requests_per_unit,
    })
}

/// What a `rate_limit` does, the envoyproxy/ratelimit unit its window
/// equals (if any), and its `requests_per_unit`.
fn action(w: &WrittenLimit) -> Result<(Action, Option<Unit>, u32), String> {
    let unit = w.unit.as_ref().and_then(|u| u.0);
    let ours = w.algorithm.is_some()
        || w.period.is_some()
        || w.burst.is_some()
        || w.precision.is_some()
        || w.calendar
        || w.tz.is_some()
        || w.block.is_some();
    if w.unlimited {
        if unit.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
        if ours {
            return Err(
                "an unlimited rate_limit takes no algorithm, period, burst, precision, calendar, tz or block".into(),
            );
        }
        return Ok((Action::Unlimited, None, 0));
    }
    let period = match (unit, &w.period) {
        (Some(_), Some(_)) => return Err("give unit or period, not both".into()),
        (None, None) => {
            return Err(format!(
                "invalid rate limit unit '': give unit ({}) or period",
                Unit::LIST
            ))
        }
        (Some(u), None) => Period {
            ns: u.seconds() * 1_000_000_000,
            unit: None,
        },
        (None, Some(p)) => {
            let text = p.text();
            calendar::parse_period(text.as_bytes()).map_err(|e| match e {
                DurationError::Ambiguous => DurationError::ambiguous("period", &text, true),
                _ => format!("invalid period '{text}': use whole seconds, a whole number with ms, s, m, h, d or w, or 1mo or 1y"),
            })?
        }
    };
    let period = match (w.calendar, unit) {
        (false, _) => period,
        (true, Some(u)) => Period {
            unit: Some(u.calendar().ok_or_else(|| {
                format!(
                    "calendar: true needs unit day, week, month or year, not {}",
                    u.name()
                )
            })?),
            ..period
        },
        (true, None) if period.unit.is_some() => period,
        (true, None) => {
            return Err("calendar: true needs a period of 1d, 1w, 1mo or 1y".into());
        }
    };
    let tz =
        w.tz.as_deref()
            .map(|t| {
                calendar::parse_offset(t.as_bytes())
                    .ok_or_else(|| format!("invalid tz '{t}': use +HH:MM or -HH:MM, at most 18:00"))
            })
            .transpose()?;
    let block = w.block.as_ref().map(|b| duration(b, "block")).transpose()?;
    let unit = Unit::of_period(period.ns);
    let period_ns = NonZeroU64::new(period.ns).ok_or("period must be positive")?;
    let requests = w.requests_per_unit.unwrap_or(0);
    let algo = match w.algorithm.as_deref() {
        None => Algorithm::Fixed,
        Some(a) => Algorithm::parse(a.as_bytes())
            .ok_or_else(|| format!("unknown algorithm '{a}': use {}", Algorithm::NAMES))?,
    };
    let Some(limit) = NonZeroU64::new(requests.into()) else {
        if ours {
            return Err(
                "requests_per_unit must be positive with algorithm, burst or precision".into(),
            );
        }
        return Ok((Action::DenyAll, unit, 0));
    };
    let burst = w
        .burst
        .map(|b| NonZeroU64::new(b).ok_or("burst must be positive"))
        .transpose()?;
    let precision = w
        .precision
        .as_ref()
        .map(|p| duration(p, "precision"))
        .transpose()?;
    let mut spec = LimitSpec::new(algo, limit, period_ns, burst, precision)
        .and_then(|s| s.with_calendar(period.unit, tz))
        .map_err(|e| {
            // The command's words name its options in capitals; a file's
            // fields are lower case.
            e.to_string()
                .replace("BURST", "burst")
                .replace("PRECISION", "precision")
                .replace("ALGO ", "algorithm ")
                .replace("TZ", "tz")
        })?;
    spec.block = block;
    Ok((Action::Limit(spec), unit, requests))
}

/// Where a parse failed: 1-based line and column, when the parser knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub reason: String,
}

/// Parses one file's text. serde_yaml_ng places every error, including
/// those the checks above raise, at the line and column of the node being
/// read, with its path (`descriptors[1].rate_limit: ...`).
pub fn parse(text: &str) -> Result<RawFile, Failure> {
    check_depth(text)?;
    serde_yaml_ng::from_str::<RawFile>(text).map_err(|e| {
        let loc = e.location();
        let (line, column) = (
            loc.as_ref().map(|l| l.line()),
            loc.as_ref().map(|l| l.column()),
        );
        let mut reason = split_location(&e.to_string()).2;
        // libyaml's words for a tab where indentation goes say nothing of
        // tabs: name the character.
        if reason.contains("cannot start any token") && at(text, line, column) == Some('\t') {
            reason = "a tab: YAML indents with spaces, never tabs".into();
        }
        Failure {
            line,
            column,
            reason,
        }
    })
}

/// The character at a 1-based line and column of `text`, if there is one.
fn at(text: &str, line: Option<usize>, column: Option<usize>) -> Option<char> {
    text.lines()
        .nth(line?.checked_sub(1)?)?
        .chars()
        .nth(column?.checked_sub(1)?)
}

/// The deepest a policy file may nest, flow (`[`, `{`) and block
/// (indentation, `- `) levels together. envoyproxy/ratelimit's files nest
/// a few descriptor levels, two YAML levels each.
pub const MAX_DEPTH: usize = 64;

/// Refuses text nested deeper than [`MAX_DEPTH`] before the YAML parser
/// sees it, in one pass over the bytes. libyaml's scanner walks every open
/// flow level at each token, so nesting costs it quadratic time: 80 KB of
/// `[` took 3.6 s to be refused by serde_yaml_ng's recursion limit, which
/// only applies once the whole text is parsed. The count is the
/// indentation levels open (a `- ` opens one more) plus the flow levels
/// open, outside quotes, comments and block scalars; it may overcount a
/// multi-line plain scalar's deeper continuation lines, which policy files
/// do not have.
pub fn check_depth(text: &str) -> Result<(), Failure> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    // Inside a block scalar (`|`, `>`): lines indented past this column
    // are its text.
    let mut block_scalar: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        let blank = bytes[indent..].iter().all(|b| b.is_ascii_whitespace());
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        let mut at = 0;
        let mut col = indent;
        if flow == 0 && quote.is_none() {
            if blank || bytes[indent] == b'#' {
                continue;
            }
            if indent == 0 && (line.starts_with("---") || line.starts_with("...")) {
                indents.clear();
                continue;
            }
            // Each `- ` opens a level, its item one column further on.
            at = indent;
            loop {
                while indents.last().is_some_and(|&top| top >= col) {
                    indents.pop();
                }
                indents.push(col);
                let dash =
                    bytes.get(at) == Some(&b'-') && bytes.get(at + 1).is_none_or(|b| *b == b' ');
                if !dash {
                    break;
                }
                at += 1;
                while bytes.get(at) == Some(&b' ') {
                    at += 1;
                }
                if at >= bytes.len() {
                    break;
                }
                col = at;
            }
        }
        let mut prev: Option<u8> = None;
        let mut last_token: Option<usize> = None;
        let mut i = at;
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Some(b'"') if b == b'\\' => i += 1,
                Some(q) if b == q => {
                    // '' inside single quotes is a quote, not the end.
                    if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        quote = None;
                    }
                }
                Some(_) => {}
                None => {
                    let token_start = prev.is_none_or(|p| {
                        p == b' ' || p == b'\t' || (flow > 0 && b"[{,:".contains(&p))
                    });
                    match b {
                        b'#' if prev.is_none_or(|p| p == b' ' || p == b'\t') => break,
                        b'"' | b'\'' if token_start => quote = Some(b),
                        b'[' | b'{' if token_start || flow > 0 => flow += 1,
                        b']' | b'}' if flow > 0 => flow -= 1,
                        _ => {}
                    }
                    if !b.is_ascii_whitespace() && token_start {
                        last_token = Some(i);
                    }
                }
            }
            if indents.len() + flow > MAX_DEPTH {
                return Err(Failure {
                    line: Some(n + 1),
                    column: Some(i + 1),
                    reason: format!("nested deeper than {MAX_DEPTH} levels"),
                });
            }
            prev = Some(b);
            i += 1;
        }
        if indents.len() + flow > MAX_DEPTH {
            return Err(Failure {
                line: Some(n + 1),
                column: Some(col + 1),
                reason: format!("nested deeper than {MAX_DEPTH} levels"),
            });
        }
        // A block scalar's header ends the line: `key: |`, `- >-`.
        if flow == 0 && quote.is_none() {
            let header = last_token.map(|t| &bytes[t..]).map(|t| {
                let t = t.split(|&b| b == b' ').next().unwrap_or(t);
                matches!(t.first(), Some(b'|' | b'>'))
                    && t[1..]
                        .iter()
                        .all(|b| matches!(b, b'-' | b'+' | b'0'..=b'9'))
            });
            if header == Some(true) {
                block_scalar = Some(col);
            }
        }
    }
    Ok(())
}

/// Splits serde_yaml's "reason at line L column C" into its parts.
fn split_location(msg: &str) -> (Option<usize>, Option<usize>, String) {
    if let Some(at) = msg.rfind(" at line ") {
        let rest = &msg[at + " at line ".len()..];
        let mut words = rest.split(' ');
        let line = words.next().and_then(|l| l.parse().ok());
        let column = match (words.next(), words.next()) {
            (Some("column"), Some(c)) => c.parse().ok(),
            _ => None,
        };
        return (line, column, msg[..at].to_string());
    }
    (None, None, msg.to_string())
}
