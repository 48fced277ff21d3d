//! The limiter commands: `RL.ALLOW`, `RL.ALLOWMANY` and the rest
//! (`allow.rs`), charging after use (`charge.rs`), leases (`lease.rs`), redis-cell's `CL.THROTTLE`
//! (`throttle.rs`), their arguments (`parse.rs`), the reply every decision
//! shares (`reply.rs`), and the policy commands (`policy.rs`).

pub mod allow;
pub mod charge;
pub mod lease;
pub mod parse;
pub mod policy;
pub mod reply;
pub mod throttle;
pub mod top;

use super::{args, error, CmdError, Ctx};
