//! Reading arguments: integers as Redis reads them, keywords without
//! allocating.

use super::error::CmdError;
use crate::protocol::Request;
use crate::util::parse_i64;

/// Argument `i` as an `i64`, or `ERR value is not an integer or out of range`.
pub fn int(req: &Request<'_>, i: usize) -> Result<i64, CmdError> {
    parse_i64(req.arg(i)).ok_or(CmdError::NotInteger)
}

/// Case-insensitive keyword match. Inlined: every argument parser calls
/// it, and out of line it was 2.6% of `RL.ALLOWMANY`'s instructions.
#[inline]
pub fn is(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

/// `i64` to `u64` for a count that must not be negative.
pub fn non_negative(n: i64) -> Result<u64, CmdError> {
    u64::try_from(n).map_err(|_| CmdError::NotInteger)
}

/// What a cursor reads from: a request, or the plain argument list that
/// key finders get.
pub trait ArgList {
    fn count(&self) -> usize;
    fn at(&self, i: usize) -> &[u8];
}

impl ArgList for Request<'_> {
    fn count(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> &[u8] {
        self.arg(i)
    }
}

impl ArgList for [&[u8]] {
    fn count(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> &[u8] {
        self[i]
    }
}

/// A cursor over a command's arguments, as mini-redis's `Parse`: each
/// parser reads its grammar front to back (`next_key`, `keyword`,
/// `value_for`, ...) instead of by index arithmetic, and the positions it
/// read keys at are what key finders report, so routing and `COMMAND
/// GETKEYS` follow the parser's own grammar.
pub struct Cursor<'a, A: ArgList + ?Sized> {
    args: &'a A,
    pos: usize,
}

impl<'a, A: ArgList + ?Sized> Cursor<'a, A> {
    /// A cursor at argument `pos` (1 skips the command name).
    pub fn new(args: &'a A, pos: usize) -> Self {
        Cursor { args, pos }
    }

    /// Position of the next argument.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_done(&self) -> bool {
        self.pos >= self.args.count()
    }

    /// The next argument, not consumed.
    pub fn peek(&self) -> Option<&'a [u8]> {
        (!self.is_done()).then(|| self.args.at(self.pos))
    }

    /// The next argument, which the grammar requires: a syntax error if
    /// missing.
    pub fn next_required(&mut self) -> Result<&'a [u8], CmdError> {
        self.next().ok_or(CmdError::Syntax)
    }

    /// Consumes the next argument if it is `keyword` (any case).
    pub fn keyword(&mut self, keyword: &str) -> bool {
        let found = self.peek().is_some_and(|a| is(a, keyword));
        self.pos += found as usize;
        found
    }

    /// The value of option `name`, just read: `ERR option NAME needs a
    /// value` if none follows.
    pub fn value_for(&mut self, name: &str) -> Result<&'a [u8], CmdError> {
        self.next()
            .ok_or_else(|| CmdError::err(format!("option {name} needs a value")))
    }

    /// The end of the grammar: anything left is a syntax error.
    pub fn finish(&self) -> Result<(), CmdError> {
        if self.is_done() {
            Ok(())
        } else {
            Err(CmdError::Syntax)
        }
    }
}

impl<'a, A: ArgList + ?Sized> Iterator for Cursor<'a, A> {
    type Item = &'a [u8];

    /// The next argument, or `None` at the end.
    fn next(&mut self) -> Option<&'a [u8]> {
        let arg = self.peek()?;
        self.pos += 1;
        Some(arg)
    }
}
