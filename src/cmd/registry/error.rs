//! Command errors: each renders as the exact line Redis would send, prefix
//! (`ERR`, `WRONGTYPE`, `NOAUTH`...) included.

use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand { name: String, args: String },
    #[error("ERR unknown subcommand '{sub}'. Try {cmd} HELP.")]
    UnknownSubcommand { sub: String, cmd: String },
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    #[error("WRONGPASS invalid username-password pair or user is disabled.")]
    WrongPass,
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    #[error("MOVED {0} {1}")]
    Moved(u16, String),
    #[error("CROSSSLOT Keys in request don't hash to the same slot")]
    CrossSlot,
    #[error("CLUSTERDOWN Hash slot not served")]
    SlotNotServed,
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    OutOfMemory,
    #[error("READONLY You can't write against a read only replica.")]
    ReadOnlyReplica,
    /// Any other `ERR` reply; the text follows `ERR `.
    #[error("ERR {0}")]
    Err(Cow<'static, str>),
    /// A reply with its own prefix (`NOPROTO ...`).
    #[error("{0}")]
    Prefixed(Cow<'static, str>),
}

impl CmdError {
    pub fn err(msg: impl Into<Cow<'static, str>>) -> Self {
        CmdError::Err(msg.into())
    }
}

/// Bytes from a client, shown in an error: lossy UTF-8, cut to 128 bytes as
/// Redis's `%.128s` does.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned()
}

impl From<crate::store::limit::LimitError> for CmdError {
    fn from(e: crate::store::limit::LimitError) -> Self {
        match e {
            crate::store::limit::LimitError::WrongType => CmdError::WrongType,
            // Keeps Redis's prefix (clients match on it) and names the fix.
            crate::store::limit::LimitError::OtherLimiter { held, asked } => {
                CmdError::Prefixed(
                    format!(
                        "WRONGTYPE the key holds a {held} limiter, not {asked}: use another key, or RL.RESET it first"
                    )
                    .into(),
                )
            }
            crate::store::limit::LimitError::OutOfMemory => CmdError::OutOfMemory,
            crate::store::limit::LimitError::TooManyLeases => CmdError::err(format!(
                "too many leases on one key (at most {})",
                crate::limiter::lease::MAX_LEASES
            )),
        }
    }
}

impl From<crate::store::plan::PlanError> for CmdError {
    fn from(e: crate::store::plan::PlanError) -> Self {
        match e {
            crate::store::plan::PlanError::OutOfMemory => CmdError::OutOfMemory,
            crate::store::plan::PlanError::Step { err, .. } => err.into(),
        }
    }
}
