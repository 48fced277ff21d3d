//! Envoy's rate limit service (`ShouldRateLimit`), decided: a domain and
//! its descriptors against the policies in force, with
//! envoyproxy/ratelimit's semantics (`replaces`, `unlimited`, per-descriptor
//! `hits_addend` and `limit` override, shadow mode, statuses in request
//! order), independent of the transport: `server/rls.rs` serves it over
//! gRPC, `server/http.rs` as `POST /json`.
//!
//! One difference, on purpose: a request is all-or-nothing. Every
//! descriptor's counter is locked together and peeked at first; only if no
//! descriptor denies (shadow-mode denials aside) are the admitting ones
//! charged. envoyproxy/ratelimit charges every descriptor, denied or not,
//! so a client over one limit also drains the others; here a denied
//! request costs nothing, as `RL.ALLOWMANY` behaves.

use crate::clock::Nanos;
use crate::cluster::Topology;
use crate::limiter::{Algorithm, Decision, LimitSpec};
use crate::policy::{step, Action, Policies, Policy, Unit};
use crate::stats::Local;
use crate::store::plan::{self, Act, PlanError, Rules, Step};
use crate::store::Keyspace;

/// The most descriptors one request may carry, and entries per descriptor
/// (a bound on the work and the locks one request takes).
pub const MAX_DESCRIPTORS: usize = 64;

/// One descriptor of a request.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor<'a> {
    /// `key value` entries, outermost first.
    pub entries: &'a [(&'a [u8], &'a [u8])],
    /// A limit the caller set for this descriptor instead of the file's.
    pub limit: Option<Override>,
    /// This descriptor's own `hits_addend` (0 allowed: a look, no charge).
    pub hits: Option<u64>,
    /// `is_negative_hits`: give the hits back instead of taking them
    /// (never denied; done only if the request as a whole is admitted).
    pub refund: bool,
}

/// A descriptor's `limit` override: `requests_per_unit` per `unit` (the
/// proto's unit number), a fixed window as envoyproxy/ratelimit counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    pub requests_per_unit: u32,
    pub unit: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

/// The limit a descriptor was decided under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The policy's name (empty for an override).
    pub name: String,
    pub requests_per_unit: u32,
    /// The proto's unit number; 0 (`UNKNOWN`) for a period no unit equals.
    pub unit: i32,
    /// The window, for the `RateLimit-Policy` header.
    pub period: u64,
}

/// One descriptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// `None` when no limit applies (no match, `unlimited`, replaced).
    pub limit: Option<Applied>,
    /// Units still admitted; `u32::MAX` for `unlimited`.
    pub remaining: u32,
    /// Nanoseconds until the limit has room again (denied) or is back to
    /// full (allowed).
    pub until_reset: Option<u64>,
    /// When denied: nanoseconds until this request would be admitted.
    pub retry_after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub overall: Code,
    pub statuses: Vec<Status>,
}

/// Why a request got no answer: the transport answers these as
/// `UNAVAILABLE`, so Envoy's `failure_mode_deny` decides.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlsError {
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    #[error("a rate limit descriptor must have at least one entry")]
    EmptyDescriptor,
    #[error("at most {MAX_DESCRIPTORS} descriptors, and {MAX_DESCRIPTORS} entries in each")]
    TooMany,
    #[error("descriptor limit override has an unknown unit {0}")]
    BadUnit(i32),
    #[error("a policy counter at {0} holds another kind of value")]
    WrongType(String),
    #[error("command not allowed when used memory > 'maxmemory'")]
    OutOfMemory,
    /// Cluster mode: the domain's counters live on another node.
    #[error("domain '{domain}' is served by {node} in this cluster")]
    Elsewhere { domain: String, node: String },
}

/// What one descriptor resolved to, before deciding.
enum Plan<'s> {
    /// No limit applies; `unlimited` answers remaining `u32::MAX`.
    Free { unlimited: bool },
    Limit {
        spec: LimitSpec,
        policy: Option<&'s Policy>,
        applied: Applied,
        key: Vec<u8>,
        shadow: bool,
        hits: u64,
        refund: bool,
    },
    /// `requests_per_unit: 0`, from the file or an override.
    Deny {
        policy: Option<&'s Policy>,
        applied: Applied,
        key: Vec<u8>,
        shadow: bool,
        hits: u64,
    },
}

/// What a decision reads and writes, handed down by the layer that owns
/// the server's state.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// Where the counters are.
    pub db: Keyspace<'a>,
    pub policies: &'a Policies,
    /// In cluster mode, who owns each domain's slot: the static topology,
    /// or the growing cluster's routing table.
    pub cluster: Option<&'a Topology>,
    pub routing: Option<&'a crate::cluster::routing::Routing>,
    /// `--maxmemory`'s headroom.
    pub room: usize,
}

/// Decides `descriptors` in `domain` at `now`: `hits` is the request's
/// `hits_addend` (0 means 1). Counts each descriptor's algorithm decision
/// in `stats` and its policy's stats.
pub fn should_rate_limit(
    env: Env<'_>,
    domain: &[u8],
    descriptors: &[Descriptor<'_>],
    hits: u64,
    now: Nanos,
    stats: &mut Local,
) -> Result<Response, RlsError> {
    if domain.is_empty() {
        return Err(RlsError::EmptyDomain);
    }
    if descriptors.is_empty() {
        return Err(RlsError::NoDescriptors);
    }
    if descriptors.len() > MAX_DESCRIPTORS
        || descriptors
            .iter()
            .any(|d| d.entries.len() > MAX_DESCRIPTORS)
    {
        return Err(RlsError::TooMany);
    }
    if descriptors.iter().any(|d| d.entries.is_empty()) {
        return Err(RlsError::EmptyDescriptor);
    }
    check_owner(env.cluster, env.routing, domain)?;
    let policies = env.policies;
    let set = policies.current();
    let shadow_all = policies.shadow_all();
    let default_hits = hits.max(1);
    let known_domain = set.has_domain(domain);

    // Resolve every descriptor, then drop those another one replaces.
    let mut plans = Vec::with_capacity(descriptors.len());
    let mut replacing: Vec<&str> = Vec::new();
    for d in descriptors {
        let hits = d.hits.unwrap_or(default_hits);
        let plan = match d.limit {
            Some(o) if known_domain => {
                override_plan(domain, d.entries, o, hits, d.refund, shadow_all)?
            }
            _ => {
                let mut key = Vec::new();
                match set.resolve(domain, d.entries, &mut key) {
                    None => {
                        // Envoy's meaning: allowed, and counted.
                        policies.note_unmatched(domain, d.entries, now.0 / 1_000_000);
                        Plan::Free { unlimited: false }
                    }
                    Some(m) => {
                        let p: &Policy = m.policy;
                        replacing.extend(p.def.replaces.iter().map(String::as_str));
                        policy_plan(p, key, hits, d.refund, shadow_all)
                    }
                }
            }
        };
        plans.push(plan);
    }
    if !replacing.is_empty() {
        for plan in &mut plans {
            let name = match plan {
                Plan::Limit {
                    policy: Some(p), ..
                }
                | Plan::Deny {
                    policy: Some(p), ..
                } => p.name.as_str(),
                _ => continue,
            };
            if replacing.contains(&name) {
                *plan = Plan::Free { unlimited: false };
            }
        }
    }

    let mut steps = Vec::with_capacity(plans.len());
    for plan in &plans {
        if let Plan::Limit {
            spec,
            key,
            shadow,
            hits,
            refund,
            ..
        } = plan
        {
            steps.push(limit_step(spec, key, *hits, *refund, *shadow));
        }
    }
    let rules = Rules {
        stop_at_denial: false,
        // A `requests_per_unit: 0` outside shadow mode denies the request.
        denied: plans
            .iter()
            .any(|p| matches!(p, Plan::Deny { shadow: false, .. })),
    };
    plan::run(env.db, &mut steps, now, env.room, rules).map_err(|e| match e {
        PlanError::OutOfMemory => RlsError::OutOfMemory,
        PlanError::Step { at, .. } => {
            RlsError::WrongType(String::from_utf8_lossy(steps[at].key).into_owned())
        }
    })?;

    let mut steps = steps.iter();
    let mut statuses = Vec::with_capacity(plans.len());
    let mut overall = Code::Ok;
    for plan in &plans {
        let status = match plan {
            Plan::Free { unlimited } => Status {
                code: Code::Ok,
                limit: None,
                remaining: if *unlimited { u32::MAX } else { 0 },
                until_reset: None,
                retry_after: None,
            },
            Plan::Limit {
                policy,
                applied,
                shadow,
                refund,
                ..
            } => {
                let s = steps.next().expect("a step per limit");
                let d = s.decision.expect("a limit has a decision");
                if *refund {
                    // Given back: no decision, no hits.
                    statuses.push(status_of(&d, applied, *shadow));
                    continue;
                }
                step::account(*policy, s, now, stats);
                status_of(&d, applied, *shadow)
            }
            Plan::Deny {
                policy,
                applied,
                key,
                shadow,
                hits,
            } => {
                step::account_denied(*policy, key, *hits, *shadow, now, stats);
                status_of(&super::DENY_ALL, applied, *shadow)
            }
        };
        if status.code == Code::OverLimit {
            overall = Code::OverLimit;
        }
        statuses.push(status);
    }
    Ok(Response { overall, statuses })
}

/// In cluster mode a domain's counters (`rl:{domain}...`) live on the node
/// owning the domain's slot; another node refuses rather than count apart.
fn check_owner(
    cluster: Option<&Topology>,
    routing: Option<&crate::cluster::routing::Routing>,
    domain: &[u8],
) -> Result<(), RlsError> {
    let slot = crate::cluster::key_slot(domain);
    let elsewhere = |node: String| RlsError::Elsewhere {
        domain: String::from_utf8_lossy(domain).into_owned(),
        node,
    };
    if let Some(r) = routing {
        return match r.owner(slot) {
            _ if r.serves(slot) => Ok(()),
            Some(n) => Err(elsewhere(n.addr())),
            None => Err(elsewhere("no node".to_string())),
        };
    }
    let Some(t) = cluster else {
        return Ok(());
    };
    match t.owner(slot) {
        Some((_, n)) if std::ptr::eq(n, t.myself()) => Ok(()),
        owner => Err(elsewhere(
            owner.map_or_else(|| "no node".to_string(), |(_, n)| n.addr()),
        )),
    }
}

fn policy_plan(p: &Policy, key: Vec<u8>, hits: u64, refund: bool, shadow_all: bool) -> Plan<'_> {
    let shadow = p.def.shadow || shadow_all;
    let applied = |rpu: u32, period: u64| Applied {
        name: p.name.clone(),
        requests_per_unit: rpu,
        unit: p
            .def
            .unit
            .or_else(|| Unit::of_period(period))
            .map_or(0, |u| u as i32),
        period,
    };
    match p.def.action {
        Action::Unlimited => Plan::Free { unlimited: true },
        Action::DenyAll => Plan::Deny {
            policy: Some(p),
            key,
            applied: applied(0, p.def.unit.map_or(0, |u| u.seconds() * Nanos::PER_SEC)),
            shadow,
            hits,
        },
        Action::Limit(spec) => Plan::Limit {
            spec,
            policy: Some(p),
            applied: applied(
                u32::try_from(spec.params.limit()).unwrap_or(u32::MAX),
                spec.params.period(),
            ),
            key,
            shadow,
            hits,
            refund,
        },
    }
}

/// A descriptor's own limit: a fixed window of `requests_per_unit` per
/// `unit`, counted at `rl:{domain}.k_v...@N/unit` (apart from the file's
/// policy for the same path, whose algorithm may differ).
fn override_plan<'s>(
    domain: &[u8],
    entries: &[(&[u8], &[u8])],
    o: Override,
    hits: u64,
    refund: bool,
    shadow_all: bool,
) -> Result<Plan<'s>, RlsError> {
    let unit = Unit::from_number(o.unit).ok_or(RlsError::BadUnit(o.unit))?;
    let period = unit.seconds() * Nanos::PER_SEC;
    let applied = Applied {
        name: String::new(),
        requests_per_unit: o.requests_per_unit,
        unit: o.unit,
        period,
    };
    let Some(limit) = std::num::NonZeroU64::new(u64::from(o.requests_per_unit)) else {
        return Ok(Plan::Deny {
            policy: None,
            applied,
            key: Vec::new(),
            shadow: shadow_all,
            hits,
        });
    };
    let spec = LimitSpec::new(
        Algorithm::Fixed,
        limit,
        std::num::NonZeroU64::new(period).expect("a unit is at least a second"),
        None,
        None,
    )
    .expect("a fixed window takes any positive limit and period");
    let mut key = Vec::with_capacity(64);
    key.extend_from_slice(crate::policy::KEY_PREFIX);
    key.push(b'{');
    key.extend_from_slice(domain);
    key.push(b'}');
    for (k, v) in entries {
        key.push(b'.');
        key.extend_from_slice(k);
        key.push(b'_');
        key.extend_from_slice(v);
    }
    key.push(b'@');
    key.extend_from_slice(o.requests_per_unit.to_string().as_bytes());
    key.push(b'/');
    key.extend_from_slice(unit.name().as_bytes());
    Ok(Plan::Limit {
        spec,
        policy: None,
        applied,
        key,
        shadow: shadow_all,
        hits,
        refund,
    })
}

/// A limited descriptor's step: a refund gives its hits back, and a
/// request over the whole capacity can never fit: denied, with what a
/// look at the counter shows.
fn limit_step<'k>(
    spec: &LimitSpec,
    key: &'k [u8],
    hits: u64,
    refund: bool,
    shadow: bool,
) -> Step<'k> {
    let act = if refund {
        Act::Refund
    } else if hits > spec.capacity() {
        Act::Refuse
    } else {
        Act::Allow
    };
    step::step(*spec, key, hits, act, shadow)
}

fn status_of(d: &Decision, applied: &Applied, shadow: bool) -> Status {
    let over = !d.allowed && !shadow;
    Status {
        code: if over { Code::OverLimit } else { Code::Ok },
        limit: Some(applied.clone()),
        remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
        until_reset: Some(match d.retry_after {
            Some(t) if !d.allowed => t,
            _ => d.reset_after,
        }),
        retry_after: if over { d.retry_after } else { None },
    }
}

/// The IETF draft-10 header fields for a response (`--rls-headers`):
/// `RateLimit-Policy` with one item per limit that applied, `RateLimit`
/// for the binding one (the first that denied, else the one with the
/// least left), and `Retry-After` when the request is over the limit.
pub fn headers(r: &Response) -> Vec<(&'static str, String)> {
    use std::fmt::Write;
    let limited = || {
        r.statuses
            .iter()
            .filter_map(|s| s.limit.as_ref().map(|l| (s, l)))
    };
    let binding = limited()
        .find(|(s, _)| s.code == Code::OverLimit)
        .or_else(|| limited().min_by_key(|(s, _)| s.remaining));
    let Some((bound, bound_limit)) = binding else {
        return Vec::new();
    };
    let mut policy = String::new();
    for (_, l) in limited() {
        if !policy.is_empty() {
            policy.push_str(", ");
        }
        let _ = write!(
            policy,
            "{};q={};w={}",
            sf_string(&l.name),
            l.requests_per_unit,
            secs_up(l.period)
        );
    }
    let mut out = vec![
        ("RateLimit-Policy", policy),
        (
            "RateLimit",
            format!(
                "{};r={};t={}",
                sf_string(&bound_limit.name),
                bound.remaining,
                secs_up(bound.until_reset.unwrap_or(0))
            ),
        ),
    ];
    if r.overall == Code::OverLimit {
        let wait = bound.retry_after.or(bound.until_reset).unwrap_or(0);
        out.push(("Retry-After", secs_up(wait).max(1).to_string()));
    }
    out
}

/// Nanoseconds as whole seconds, rounded up.
fn secs_up(ns: u64) -> u64 {
    ns.div_ceil(Nanos::PER_SEC)
}

/// A structured-field string (RFC 8941): quoted, `"` and `\` escaped;
/// bytes it cannot carry become `?`. An empty name (an override) is
/// `"default"`.
fn sf_string(s: &str) -> String {
    let s = if s.is_empty() { "default" } else { s };
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(name: &str, rpu: u32, period_s: u64) -> Applied {
        Applied {
            name: name.into(),
            requests_per_unit: rpu,
            unit: 2,
            period: period_s * Nanos::PER_SEC,
        }
    }

    #[test]
    fn headers_name_the_binding_limit() {
        let r = Response {
            overall: Code::OverLimit,
            statuses: vec![
                Status {
                    code: Code::Ok,
                    limit: Some(applied("per-user", 100, 60)),
                    remaining: 40,
                    until_reset: Some(30 * Nanos::PER_SEC),
                    retry_after: None,
                },
                Status {
                    code: Code::Ok,
                    limit: None,
                    remaining: u32::MAX,
                    until_reset: None,
                    retry_after: None,
                },
                Status {
                    code: Code::OverLimit,
                    limit: Some(applied("a \"quoted\" name", 5, 1)),
                    remaining: 0,
                    until_reset: Some(400_000_000),
                    retry_after: Some(400_000_000),
                },
            ],
        };
        assert_eq!(
            headers(&r),
            vec![
                (
                    "RateLimit-Policy",
                    r#""per-user";q=100;w=60, "a \"quoted\" name";q=5;w=1"#.to_string()
                ),
                ("RateLimit", r#""a \"quoted\" name";r=0;t=1"#.to_string()),
                ("Retry-After", "1".to_string()),
            ]
        );
    }

    #[test]
    fn no_limit_no_headers() {
        let r = Response {
            overall: Code::Ok,
            statuses: vec![Status {
                code: Code::Ok,
                limit: None,
                remaining: 0,
                until_reset: None,
                retry_after: None,
            }],
        };
        assert!(headers(&r).is_empty());
    }
}
