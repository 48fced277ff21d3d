//! Parsing limiter arguments into validated types, before anything runs:
//! a bad argument is an `ERR` and changes nothing.

use smallvec::SmallVec;
use std::num::NonZeroU64;

use super::args::{is, ArgList, Cursor};
use super::{error::show, CmdError};
use crate::limiter::calendar::{self, Period};
use crate::limiter::lease::{LeaseId, MAX_UNITS};
use crate::limiter::Algorithm;
pub use crate::limiter::LimitSpec;
use crate::protocol::request::ArgsMemo;
use crate::protocol::Request;
use crate::store::plan::{Act, Limit, Step};
use crate::util::parse_i64;

/// `RL.ALLOW` / `RL.PEEK`: one key, one limit, one cost.
#[derive(Debug, Clone, Copy)]
pub struct AllowRequest<'a> {
    pub key: &'a [u8],
    pub spec: LimitSpec,
    pub cost: u64,
}

/// One clause of `RL.ALLOWMANY`.
#[derive(Debug, Clone, Copy)]
pub enum Clause {
    /// `LIMIT key limit period [ALGO ...]`: a rate limit.
    Limit(LimitSpec),
    /// `LEASE key limit ttl`: a concurrency limit (`RL.ACQUIRE`'s).
    Lease { limit: u64, ttl: u64 },
}

/// `RL.ALLOWMANY`: several (key, clause) pairs, one cost, and the lease
/// id its `LEASE` clauses take (`ID`, or the server's). With `CHARGE n`
/// instead of `COST n`, `cost` is recorded under every limit whatever
/// their state (`RL.CHARGE`'s meaning). The clauses come apart, as the
/// steps of the plan that decides them (`store/plan.rs`), their leases'
/// id not yet chosen, written where the caller keeps them ([`Steps`]:
/// a few hundred bytes each, not moved).
#[derive(Debug, Clone, Copy)]
pub struct ManyRequest<'a> {
    pub cost: u64,
    pub charge: bool,
    pub id: Option<&'a [u8]>,
}

/// A request's steps: inline for the few limits a request names, so
/// parsing one allocates nothing.
pub type Steps<'a> = SmallVec<[Step<'a>; 4]>;

/// Clauses up to which repeated keys are looked for pair by pair, in
/// place; more are sorted (a copy of their keys) so that a request of
/// thousands of clauses costs no quadratic time.
const PAIRWISE_MAX: usize = 8;

/// The least (bytewise) of the keys two steps name.
fn repeated<'a>(steps: &[Step<'a>]) -> Option<&'a [u8]> {
    if steps.len() <= PAIRWISE_MAX {
        return steps
            .iter()
            .enumerate()
            .filter(|(i, s)| steps[..*i].iter().any(|t| t.key == s.key))
            .map(|(_, s)| s.key)
            .min();
    }
    let mut sorted: Vec<&[u8]> = steps.iter().map(|s| s.key).collect();
    sorted.sort_unstable();
    sorted.windows(2).find(|p| p[0] == p[1]).map(|p| p[0])
}

/// `RL.CHARGE`: one key, one limit, `n` units to record.
#[derive(Debug, Clone, Copy)]
pub struct ChargeRequest<'a> {
    pub key: &'a [u8],
    pub spec: LimitSpec,
    pub n: u64,
}

/// A positive integer argument, named in the error.
pub fn positive(arg: &[u8], what: &str) -> Result<u64, CmdError> {
    match parse_i64(arg) {
        Some(n) if n > 0 => Ok(n as u64),
        _ => Err(CmdError::err(format!("{what} must be a positive integer"))),
    }
}

/// A duration: an integer number of seconds, or an integer with a unit
/// (`250ms`, `10s`, `15m`, `1h`, `1d`). Returns nanoseconds, positive and
/// checked against overflow.
pub fn duration(arg: &[u8], what: &str) -> Result<u64, CmdError> {
    use crate::util::DurationError;
    crate::util::parse_duration(arg).map_err(|e| match e {
        DurationError::Invalid => CmdError::err(format!(
            "invalid {what} '{}': use whole seconds or a whole number with ms, s, m, h or d",
            show(arg)
        )),
        DurationError::Zero => CmdError::err(format!("{what} must be positive")),
        DurationError::OutOfRange => CmdError::err(format!("{what} is out of range")),
        DurationError::Ambiguous => {
            CmdError::err(DurationError::ambiguous(what, &show(arg), false))
        }
    })
}

/// A period: a duration, `Nw` weeks, or the calendar's `1mo` and `1y`
/// (`limiter/calendar.rs`). Returns its length in ns and the calendar
/// unit it names, if any.
pub fn period(arg: &[u8]) -> Result<Period, CmdError> {
    use crate::util::DurationError;
    calendar::parse_period(arg).map_err(|e| match e {
        DurationError::Invalid => CmdError::err(format!(
            "invalid period '{}': use whole seconds, a whole number with ms, s, m, h, d or w, or 1mo or 1y",
            show(arg)
        )),
        DurationError::Zero => CmdError::err("period must be positive"),
        DurationError::OutOfRange => CmdError::err("period is out of range"),
        DurationError::Ambiguous => CmdError::err(DurationError::ambiguous("period", &show(arg), true)),
    })
}

/// Options that may follow a limit, each at most once.
#[derive(Debug, Default)]
struct Options {
    algo: Option<Algorithm>,
    cost: Option<u64>,
    burst: Option<u64>,
    precision: Option<u64>,
    /// `TZ ±HH:MM`: minutes east of UTC.
    tz: Option<i16>,
    /// `BLOCK duration`, in ns.
    block: Option<u64>,
}

/// How much of the grammar a walk checks: everything (the parser), or
/// only its structure (the key finder, which must report keys wherever
/// they are, whatever the values say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Values,
    Structure,
}

/// Reads `NAME value` options until the end or (when `stop_at_limit`) the
/// next `LIMIT`.
fn options<A: ArgList + ?Sized>(
    c: &mut Cursor<'_, A>,
    stop_at_limit: bool,
    allow_cost: bool,
    check: Check,
) -> Result<Options, CmdError> {
    let mut o = Options::default();
    while let Some(name) = c.peek() {
        if stop_at_limit && (is(name, "LIMIT") || is(name, "LEASE")) {
            break;
        }
        let known = ["ALGO", "COST", "BURST", "PRECISION", "TZ", "BLOCK"]
            .into_iter()
            .find(|k| is(name, k) && (allow_cost || *k != "COST"));
        let Some(known) = known else {
            // An algorithm's name alone is the usual slip.
            if Algorithm::parse(name).is_some() {
                return Err(CmdError::err(format!(
                    "unknown option '{}': did you mean ALGO {}?",
                    show(name),
                    show(name).to_ascii_lowercase()
                )));
            }
            return Err(CmdError::err(format!("unknown option '{}'", show(name))));
        };
        c.next();
        let value = c.value_for(known)?;
        if check == Check::Structure {
            continue;
        }
        let twice = || CmdError::err(format!("option {known} given twice"));
        match known {
            "ALGO" => {
                let a = Algorithm::parse(value).ok_or_else(|| {
                    CmdError::err(format!(
                        "unknown ALGO '{}': use {}",
                        show(value),
                        Algorithm::NAMES
                    ))
                })?;
                if o.algo.replace(a).is_some() {
                    return Err(twice());
                }
            }
            "COST" => {
                if o.cost.replace(positive(value, "COST")?).is_some() {
                    return Err(twice());
                }
            }
            "BURST" => {
                if o.burst.replace(positive(value, "BURST")?).is_some() {
                    return Err(twice());
                }
            }
            "TZ" => {
                let offset = calendar::parse_offset(value).ok_or_else(|| {
                    CmdError::err(format!(
                        "invalid TZ '{}': use +HH:MM or -HH:MM, at most 18:00",
                        show(value)
                    ))
                })?;
                if o.tz.replace(offset).is_some() {
                    return Err(twice());
                }
            }
            "BLOCK" => {
                if o.block.replace(duration(value, "BLOCK")?).is_some() {
                    return Err(twice());
                }
            }
            _ => {
                if o.precision.replace(duration(value, "PRECISION")?).is_some() {
                    return Err(twice());
                }
            }
        }
    }
    Ok(o)
}

/// `key limit period` then options, at the cursor: the key, and (checking
/// values) a validated limit and its `COST`. The walk's one grammar.
#[allow(clippy::type_complexity)]
fn limit<'a, A: ArgList + ?Sized>(
    c: &mut Cursor<'a, A>,
    stop_at_limit: bool,
    allow_cost: bool,
    check: Check,
) -> Result<(&'a [u8], Option<(LimitSpec, Option<u64>)>), CmdError> {
    let (Some(key), Some(limit), Some(period)) = (c.next(), c.next(), c.next()) else {
        return Err(CmdError::Syntax);
    };
    if check == Check::Structure {
        options(c, stop_at_limit, allow_cost, check)?;
        return Ok((key, None));
    }
    let limit = positive(limit, "limit")?;
    let period = self::period(period)?;
    let o = options(c, stop_at_limit, allow_cost, check)?;
    Ok((key, Some((spec(limit, period, &o)?, o.cost))))
}

/// The validated limit of `limit` per `period` with options `o`.
fn spec(limit: u64, period: Period, o: &Options) -> Result<LimitSpec, CmdError> {
    let nz = |n: u64| NonZeroU64::new(n).expect("validated positive");
    let mut spec = LimitSpec::new(
        o.algo.unwrap_or_default(),
        nz(limit),
        nz(period.ns),
        o.burst.map(nz),
        o.precision.map(nz),
    )
    .and_then(|s| s.with_calendar(period.unit, o.tz))
    .map_err(|e| CmdError::err(e.to_string()))?;
    spec.block = o.block.map(nz);
    Ok(spec)
}

/// ```text
/// RL.CHARGE key limit period n [ALGO ...] [BURST b] [PRECISION d] [TZ ±HH:MM] [BLOCK d]
/// ```
/// `n` may exceed the limit (the charge overdraws); `COST` is `n` here.
pub fn charge_request<'a>(req: &'a Request<'_>) -> Result<ChargeRequest<'a>, CmdError> {
    let mut c = Cursor::new(req, 1);
    let (Some(key), Some(limit), Some(period), Some(n)) = (c.next(), c.next(), c.next(), c.next())
    else {
        return Err(CmdError::Syntax);
    };
    let limit = positive(limit, "limit")?;
    let period = self::period(period)?;
    let n = positive(n, "charge")?;
    let o = options(&mut c, false, false, Check::Values)?;
    Ok(ChargeRequest {
        key,
        spec: spec(limit, period, &o)?,
        n,
    })
}

/// A cost that can never fit is an error, not an eternal "retry later".
pub fn check_cost(spec: &LimitSpec, cost: u64) -> Result<(), CmdError> {
    let capacity = spec.capacity();
    if cost > capacity {
        return Err(CmdError::err(if spec.algo == Algorithm::Gcra {
            "cost exceeds burst"
        } else {
            "cost exceeds limit"
        }));
    }
    Ok(())
}

/// A lease's `COST`: within its limit, and what one lease can hold.
pub fn check_lease_cost(limit: u64, cost: u64) -> Result<(), CmdError> {
    if cost > limit {
        return Err(CmdError::err("cost exceeds limit"));
    }
    if cost > MAX_UNITS {
        return Err(CmdError::err(format!(
            "a lease holds at most {MAX_UNITS} units"
        )));
    }
    Ok(())
}

/// ```text
/// RL.ALLOW key limit period [ALGO window|sliding|log|gcra|fixed] [COST n] [BURST b] [PRECISION d]
/// ```
pub fn allow_request<'a>(req: &'a Request<'_>) -> Result<AllowRequest<'a>, CmdError> {
    let mut c = Cursor::new(req, 1);
    let (key, checked) = limit(&mut c, false, true, Check::Values)?;
    let (spec, cost) = checked.expect("values checked");
    let cost = cost.unwrap_or(1);
    check_cost(&spec, cost)?;
    Ok(AllowRequest { key, spec, cost })
}

/// [`allow_request`] through the connection's memo of the last inline
/// limit it parsed, with its cost, by the bytes of the arguments after
/// the key. A client sends the same limit with every request, and
/// comparing those bytes costs a fraction of parsing them again
/// (callgrind: 212 instructions a request against 655). Parsing is a
/// pure function of the bytes, so what the memo answers is what parsing
/// would; only a limit that parsed is kept.
pub fn allow_request_memo<'a>(
    req: &'a Request<'_>,
    memo: &mut ArgsMemo<(LimitSpec, u64)>,
) -> Result<AllowRequest<'a>, CmdError> {
    if let Some((spec, cost)) = memo.get(req, 2..req.len()) {
        return Ok(AllowRequest {
            key: req.arg(1),
            spec,
            cost,
        });
    }
    let r = allow_request(req)?;
    memo.put(req, 2..req.len(), (r.spec, r.cost));
    Ok(r)
}

/// A limiter command's policy form: the caller's key, the policy's name,
/// and the units (`COST`, or `RL.CHARGE`'s `n`).
pub struct Named<'a> {
    pub key: &'a [u8],
    pub policy: &'a [u8],
    pub units: u64,
}

/// `RL.ALLOW key POLICY name [COST n]` (and `RL.PEEK`'s), or with `charge`
/// `RL.CHARGE key POLICY name n`; `None` for the inline form.
pub fn named_request<'a>(
    req: &'a Request<'_>,
    charge: bool,
) -> Result<Option<Named<'a>>, CmdError> {
    if req.len() < 4 || !is(req.arg(2), "POLICY") {
        return Ok(None);
    }
    let units = match (charge, req.len()) {
        (false, 4) => 1,
        (false, 6) if is(req.arg(4), "COST") => positive(req.arg(5), "COST")?,
        (true, 5) => positive(req.arg(4), "charge")?,
        _ => return Err(CmdError::Syntax),
    };
    Ok(Some(Named {
        key: req.arg(1),
        policy: req.arg(3),
        units,
    }))
}

/// Most `LIMIT` clauses one `RL.ALLOWMANY` takes: far more than any real
/// request (a few per user, IP, route and period), few enough that one
/// request cannot hold a worker and its shards for long.
pub const MAX_LIMITS: usize = 1024;

/// ```text
/// RL.ALLOWMANY [COST n] [ID lease_id] LIMIT key limit period [ALGO a] [BURST b] [PRECISION d]
///     [LIMIT ...] [LEASE key limit ttl ...]
/// ```
/// Checks in O(n log n): at most [`MAX_LIMITS`] clauses, each key once.
pub fn many_request<'a>(
    req: &'a Request<'_>,
    clauses: &mut Steps<'a>,
) -> Result<ManyRequest<'a>, CmdError> {
    let (cost, charge, id) = walk_many(req, Check::Values, |key, _, checked, cost, charge| {
        let clause = checked.expect("values checked");
        match clause {
            // A charge may overdraw: any amount is recorded.
            Clause::Limit(_) if charge => {}
            Clause::Limit(spec) => check_cost(&spec, cost)?,
            Clause::Lease { .. } if charge => {
                return Err(CmdError::err(
                    "CHARGE takes LIMIT clauses only: leases are held, not charged",
                ))
            }
            Clause::Lease { limit, .. } => check_lease_cost(limit, cost)?,
        }
        let limit = match clause {
            Clause::Limit(spec) => Limit::Rate(spec),
            Clause::Lease { limit, ttl } => Limit::Lease {
                limit,
                ttl,
                id: LeaseId::default(),
            },
        };
        let act = if charge { Act::Charge } else { Act::Allow };
        clauses.push(Step::new(key, limit, cost, act));
        Ok(())
    })?;
    if clauses.is_empty() {
        return Err(CmdError::err(
            "RL.ALLOWMANY needs at least one LIMIT or LEASE",
        ));
    }
    // A key holds one limiter state: two clauses on it would charge it
    // twice for one request.
    if let Some(key) = repeated(clauses) {
        return Err(CmdError::err(format!(
            "key '{}' appears in more than one LIMIT or LEASE",
            show(key)
        )));
    }
    Ok(ManyRequest { cost, charge, id })
}

/// `RL.ALLOWMANY`'s grammar, walked once for the parser and once for the
/// key finder: `on_clause` gets each clause's key, its position, (when
/// checking values) its validated clause, the request's `COST` (or
/// `CHARGE`) and whether it is a charge; its error ends the walk. Returns
/// the `COST`, whether it is a `CHARGE`, and the `ID`.
#[allow(clippy::type_complexity)]
fn walk_many<'a, A: ArgList + ?Sized>(
    args: &'a A,
    check: Check,
    mut on_clause: impl FnMut(&'a [u8], usize, Option<Clause>, u64, bool) -> Result<(), CmdError>,
) -> Result<(u64, bool, Option<&'a [u8]>), CmdError> {
    let mut c = Cursor::new(args, 1);
    let mut cost = 1;
    let (given, charge) = match c.keyword("COST") {
        true => (true, false),
        false => {
            let charge = c.keyword("CHARGE");
            (charge, charge)
        }
    };
    if given {
        let what = if charge { "CHARGE" } else { "COST" };
        let value = c.value_for(what)?;
        if check == Check::Values {
            cost = positive(value, what)?;
        }
    }
    let mut id = None;
    if c.keyword("ID") {
        let value = c.value_for("ID")?;
        if value.is_empty() && check == Check::Values {
            return Err(CmdError::err("ID must not be empty"));
        }
        id = Some(value);
    }
    let mut clauses = 0;
    while let Some(arg) = c.next() {
        let lease = is(arg, "LEASE");
        if !lease && !is(arg, "LIMIT") {
            return Err(CmdError::err(format!(
                "expected LIMIT or LEASE, got '{}'",
                show(arg)
            )));
        }
        if clauses == MAX_LIMITS {
            return Err(CmdError::err(format!(
                "RL.ALLOWMANY takes at most {MAX_LIMITS} LIMIT and LEASE clauses"
            )));
        }
        clauses += 1;
        let at = c.position();
        if lease {
            let (Some(key), Some(limit), Some(ttl)) = (c.next(), c.next(), c.next()) else {
                return Err(CmdError::Syntax);
            };
            let clause = match check {
                Check::Structure => None,
                Check::Values => Some(Clause::Lease {
                    limit: positive(limit, "limit")?,
                    ttl: duration(ttl, "ttl")?,
                }),
            };
            on_clause(key, at, clause, cost, charge)?;
            continue;
        }
        let (key, checked) = limit(&mut c, true, false, check)?;
        let clause = checked.map(|(spec, _)| Clause::Limit(spec));
        on_clause(key, at, clause, cost, charge)?;
    }
    Ok((cost, charge, id))
}

/// Key positions of an `RL.ALLOWMANY` request: the argument after each
/// `LIMIT` (for `COMMAND GETKEYS` and cluster routing), found by walking
/// the parser's grammar without checking values; a request malformed
/// past some clause yields the keys before it.
pub fn many_keys(args: &[&[u8]]) -> Vec<usize> {
    let mut keys = Vec::new();
    let _ = walk_many(args, Check::Structure, |_, at, _, _, _| {
        keys.push(at);
        Ok(())
    });
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn durations() {
        assert_eq!(duration(b"10", "p"), Ok(10 * S));
        assert_eq!(duration(b"250ms", "p"), Ok(250_000_000));
        assert_eq!(duration(b"10s", "p"), Ok(10 * S));
        assert_eq!(duration(b"15m", "p"), Ok(900 * S));
        assert_eq!(duration(b"1h", "p"), Ok(3600 * S));
        assert_eq!(duration(b"1D", "p"), Ok(86_400 * S));
        for bad in [
            &b"1e9"[..],
            b"-1s",
            b"1.5s",
            b"s",
            b"",
            b"10 s",
            b"10w",
            b"010",
        ] {
            assert!(
                duration(bad, "p").is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(duration(b"0", "p")
            .unwrap_err()
            .to_string()
            .contains("positive"));
        assert!(duration(b"99999999999d", "p")
            .unwrap_err()
            .to_string()
            .contains("range"));
        assert!(duration(b"99999999999999999999999", "p").is_err());
    }

    /// A request of `args` framed as RESP, or as an inline line whose
    /// tokens are given as written (quoted or escaped ones make the
    /// decoder copy them).
    fn frame(args: &[(&str, &str)], inline: bool) -> bytes::BytesMut {
        let bytes = if inline {
            let mut line = String::from("RL.ALLOW k");
            for (_, written) in args {
                line.push(' ');
                line.push_str(written);
            }
            line.push_str("\r\n");
            line.into_bytes()
        } else {
            let mut all: Vec<&[u8]> = vec![b"RL.ALLOW", b"k"];
            all.extend(args.iter().map(|(arg, _)| arg.as_bytes()));
            crate::protocol::request::encode(&all)
        };
        bytes::BytesMut::from(&bytes[..])
    }

    /// Limits, periods and options as sent and as written inline: near
    /// misses of one another (the same length, other bytes; a quoted or
    /// escaped form of the same argument; a bad value).
    const LIMITS: [(&str, &str); 6] = [
        ("100", "100"),
        ("200", "200"),
        ("12", "12"),
        ("123", "123"),
        ("100", "\"1\\x300\""),
        ("0", "0"),
    ];
    const PERIODS: [(&str, &str); 5] = [
        ("60", "60"),
        ("16", "16"),
        ("34", "\"34\""),
        ("4", "4"),
        ("1m", "1m"),
    ];
    const OPTIONS: [[(&str, &str); 2]; 7] = [
        [("ALGO", "ALGO"), ("window", "window")],
        [("ALGO", "algo"), ("gcra", "\"gcra\"")],
        [("ALGO", "ALGO"), ("fixed", "fixed")],
        [("COST", "COST"), ("2", "2")],
        [("COST", "COST"), ("3", "3")],
        [("BURST", "BURST"), ("500", "500")],
        [("COST", "COST"), ("200", "200")],
    ];

    proptest::proptest! {
        /// The memo answers what parsing answers, request after request.
        #[test]
        fn the_limit_memo_answers_as_parsing(
            reqs in proptest::collection::vec(
                (0..LIMITS.len(), 0..PERIODS.len(),
                 proptest::collection::vec(0..OPTIONS.len(), 0..3), proptest::bool::ANY),
                1..16),
        ) {
            use crate::protocol::decode::{Decoder, Limits};
            let mut memo = ArgsMemo::default();
            for (limit, period, options, inline) in reqs {
                let mut args = vec![LIMITS[limit], PERIODS[period]];
                args.extend(options.iter().flat_map(|&o| OPTIONS[o]));
                let mut buf = frame(&args, inline);
                let mut decoder = Decoder::default();
                let req = decoder.decode(&mut buf, Limits::default()).unwrap().unwrap();
                let memoised = allow_request_memo(&req, &mut memo);
                let parsed = allow_request(&req);
                match (memoised, parsed) {
                    (Ok(m), Ok(p)) => {
                        proptest::prop_assert_eq!((m.key, m.spec, m.cost), (p.key, p.spec, p.cost));
                    }
                    (Err(m), Err(p)) => proptest::prop_assert_eq!(m.to_string(), p.to_string()),
                    (m, p) => proptest::prop_assert!(false, "memo {:?}, parse {:?}", m, p),
                }
            }
        }
    }

    /// The same bytes cut into other arguments are another limit: `12`
    /// per `34` s, then `123` per `4` s, from one copied buffer.
    #[test]
    fn the_limit_memo_compares_where_arguments_are() {
        let frame = bytes::Bytes::from_static(b"RL.ALLOWk1234");
        let mut memo = ArgsMemo::default();
        let a = [0..8, 8..9, 9..11, 11..13];
        let b = [0..8, 8..9, 9..12, 12..13];
        let (ra, rb) = (Request::new(frame.clone(), &a), Request::new(frame, &b));
        let first = allow_request_memo(&ra, &mut memo).unwrap().spec.params;
        let second = allow_request_memo(&rb, &mut memo).unwrap().spec.params;
        assert_eq!(
            (first.limit.get(), first.period.get()),
            (12, 34_000_000_000)
        );
        assert_eq!(
            (second.limit.get(), second.period.get()),
            (123, 4_000_000_000)
        );
    }

    #[test]
    fn many_keys_follow_each_limit() {
        let args: Vec<&[u8]> = vec![
            b"RL.ALLOWMANY",
            b"COST",
            b"2",
            b"LIMIT",
            b"a",
            b"10",
            b"1s",
            b"ALGO",
            b"log",
            b"LIMIT",
            b"b",
            b"100",
            b"1d",
        ];
        assert_eq!(many_keys(&args), vec![4, 10]);
    }
}
