//! One policy's limit as a step of a plan (`store/plan.rs`), and what its
//! decision counts: the step every policy decision takes, whether one key
//! (`RL.ALLOW ... POLICY`, `RL.CHECK`) or a request's descriptors
//! together (Envoy's rate limit service, `rls.rs`).

use crate::clock::Nanos;
use crate::limiter::LimitSpec;
use crate::policy::Policy;
use crate::stats::Local;
use crate::store::plan::{Act, Limit, Step};

/// `spec` on the policy counter `key` for `hits` units. Shadow mode (the
/// policy's, or `--policies-shadow`) reports a denial but lets it
/// through, blocking nothing; a counter another algorithm left (a reload
/// changed the policy's) starts afresh.
pub fn step<'k>(spec: LimitSpec, key: &'k [u8], hits: u64, act: Act, shadow: bool) -> Step<'k> {
    Step {
        shadow,
        fresh: true,
        ..Step::new(key, Limit::Rate(spec), hits, act)
    }
}

/// What a decided step counts: the algorithm's decision and the key's
/// (when it asked for units), and the policy's stats (`None` for a
/// descriptor's own limit).
pub fn account(policy: Option<&Policy>, step: &Step<'_>, now: Nanos, stats: &mut Local) {
    let (Limit::Rate(spec), Some(d)) = (step.limit, step.decision) else {
        return;
    };
    let name = policy.map(|p| p.name.as_str());
    if step.cost > 0 {
        stats.decision(spec.algo, &d, step.charged);
        stats.key_decision(step.key, d.allowed, step.shadow, name, now);
    }
    if let Some(p) = policy {
        let used = d.limit.saturating_sub(d.remaining);
        p.record(step.key, step.cost, !d.allowed, step.shadow, used, d.limit);
    }
}

/// What a `requests_per_unit: 0` limit counts: a denial of `hits` units.
pub fn account_denied(
    policy: Option<&Policy>,
    key: &[u8],
    hits: u64,
    shadow: bool,
    now: Nanos,
    stats: &mut Local,
) {
    if let Some(p) = policy {
        p.record(key, hits, true, shadow, 0, 0);
    }
    stats.key_decision(key, false, shadow, policy.map(|p| p.name.as_str()), now);
}
