//! Reading arguments: integers as Redis reads them, keywords without
//! allocating.

use super::CmdError;
use crate::protocol::Request;
use crate::util::parse_i64;

/// Argument `i` as an `i64`, or `ERR value is not an integer or out of range`.
pub fn int(req: &Request<'_>, i: usize) -> Result<i64, CmdError> {
    parse_i64(req.arg(i)).ok_or(CmdError::NotInteger)
}

/// Case-insensitive keyword match.
pub fn is(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// `i64` to `u64` for a count that must not be negative.
pub fn non_negative(n: i64) -> Result<u64, CmdError> {
    u64::try_from(n).map_err(|_| CmdError::NotInteger)
}
