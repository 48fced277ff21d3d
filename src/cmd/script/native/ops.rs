//! What the native scripts are made of: the calls their scripts make
//! (`GET`, `INCRBY`, `EXPIRE`, ... as the command handlers make them),
//! Lua's number rules, and the [`Call`] a native run goes through.

use std::sync::OnceLock;

use crate::cmd::data::{collection, keys, list, string};
use crate::cmd::registry::spec::{CommandSpec, Ctx, Registry};
use crate::protocol::Request;
use crate::store::keys::Keys;
use crate::store::{Entry, Keyspace, Locked};
pub(super) use crate::util::parse_i64;

/// A case the native code does not reproduce: run the script in Lua.
/// Answered before any write, so the Lua run starts from the same store.
#[derive(Debug)]
pub struct Fallback;

pub type Fb<T> = Result<T, Fallback>;

impl From<crate::cmd::CmdError> for Fallback {
    fn from(_: crate::cmd::CmdError) -> Self {
        Fallback
    }
}

/// One catalogued script.
pub struct Native {
    /// Short name, as the benchmarks and docs call it.
    pub name: &'static str,
    /// The library (and version) the exact text was taken from.
    pub library: &'static str,
    pub version: &'static str,
    /// SHA1 of `text`, 40 lower-case hex digits.
    pub sha: &'static str,
    /// The script, byte for byte as the library sends it.
    pub text: &'static str,
    /// The commands the script calls: a `--rename-command` of any of them
    /// changes what the Lua does, so the call then goes to Lua.
    pub commands: &'static [Cmd],
    pub run: fn(&mut Call<'_, '_, '_>) -> Fb<()>,
}

/// The commands catalogued scripts call, for `INFO commandstats` and the
/// rename check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Get,
    Set,
    Incr,
    Incrby,
    Expire,
    Pttl,
    Exists,
    Lindex,
    Lpush,
    Ltrim,
    Rename,
}

impl Cmd {
    pub const ALL: [Cmd; 11] = [
        Cmd::Get,
        Cmd::Set,
        Cmd::Incr,
        Cmd::Incrby,
        Cmd::Expire,
        Cmd::Pttl,
        Cmd::Exists,
        Cmd::Lindex,
        Cmd::Lpush,
        Cmd::Ltrim,
        Cmd::Rename,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cmd::Get => "get",
            Cmd::Set => "set",
            Cmd::Incr => "incr",
            Cmd::Incrby => "incrby",
            Cmd::Expire => "expire",
            Cmd::Pttl => "pttl",
            Cmd::Exists => "exists",
            Cmd::Lindex => "lindex",
            Cmd::Lpush => "lpush",
            Cmd::Ltrim => "ltrim",
            Cmd::Rename => "rename",
        }
    }

    /// Its position in the command table, looked up once.
    pub fn position(self, registry: &Registry) -> usize {
        static POSITIONS: OnceLock<[usize; Cmd::ALL.len()]> = OnceLock::new();
        POSITIONS.get_or_init(|| {
            Cmd::ALL.map(|c| {
                let spec = registry.lookup(c.name().as_bytes());
                spec.map_or(usize::MAX, |s| registry.index_of(s))
            })
        })[self as usize]
    }

    /// Its spec in the command table.
    pub fn spec(self, registry: &Registry) -> Option<&'static CommandSpec> {
        registry.commands().get(self.position(registry))
    }
}

/// One native run: the request's keys and arguments, the store, the
/// commands it ran (counted in `INFO commandstats` once it answers).
pub struct Call<'r, 'c, 'q> {
    pub ctx: &'r mut Ctx<'c>,
    pub(super) req: &'r Request<'q>,
    pub(super) n: usize,
    pub(super) read_only: bool,
    /// Calls made of each command, counted once the run answers.
    pub(super) counted: [u8; Cmd::ALL.len()],
}

impl<'r, 'c, 'q> Call<'r, 'c, 'q> {
    /// `KEYS[i + 1]`; none is a Lua error (a nil key): run in Lua.
    pub fn key(&self, i: usize) -> Fb<&'r [u8]> {
        let req: &'r Request<'q> = self.req;
        if i < self.n {
            Ok(req.arg(3 + i))
        } else {
            Err(Fallback)
        }
    }

    /// `ARGV[i + 1]`.
    pub fn arg(&self, i: usize) -> Fb<&'r [u8]> {
        let req: &'r Request<'q> = self.req;
        if 3 + self.n + i < req.len() {
            Ok(req.arg(3 + self.n + i))
        } else {
            Err(Fallback)
        }
    }

    /// Before each write command (whether or not it would change
    /// anything): under `EVAL_RO` the call runs in Lua, which refuses it.
    pub fn writing(&self) -> Fb<()> {
        if self.read_only {
            Err(Fallback)
        } else {
            Ok(())
        }
    }

    /// Notes a command the script ran, for `INFO commandstats`.
    pub fn ran(&mut self, c: Cmd) {
        self.counted[c as usize] += 1;
    }

    /// The shards of `keys`, held until the result drops: the script's
    /// atomicity. In a transaction, the shards it holds (every one, for a
    /// script); a key outside them runs in Lua.
    pub fn lock(&self, keys: &[&[u8]]) -> Fb<Locked<'c>> {
        match self.ctx.db {
            Keyspace::Store(s) => Ok(Locked::Own(s.lock_many(keys.iter().copied()))),
            Keyspace::Held(h) if keys.iter().all(|k| h.holds(k)) => Ok(Locked::Held(h)),
            Keyspace::Held(_) => Err(Fallback),
        }
    }

    pub fn now(&self) -> crate::clock::Nanos {
        self.ctx.now
    }
}

/// Lua 5.1's `tonumber` of a string, for the strings where it is plainly
/// a decimal (`-?digits[.digits]`): Rust's parse and C's `strtod` both
/// round correctly, so they agree. Anything else (spaces, `0x`, exponents,
/// `inf`): run in Lua.
pub fn lua_num(s: &[u8]) -> Fb<f64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let (int, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(p) => (&digits[..p], Some(&digits[p + 1..])),
        None => (digits, None),
    };
    let ok = !int.is_empty()
        && s.len() <= 40
        && int.iter().all(u8::is_ascii_digit)
        && frac.is_none_or(|f| !f.is_empty() && f.iter().all(u8::is_ascii_digit));
    if !ok {
        return Err(Fallback);
    }
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(Fallback)
}

/// Lua 5.1's `tonumber` of a string where it is sure: a plain decimal
/// (as [`lua_num`]), or `None` where `strtod` reads nothing (empty, or a
/// first byte that is a letter other than the `i`/`n` of `inf`/`nan`);
/// anything else runs in Lua.
pub fn lua_tonumber(s: &[u8]) -> Fb<Option<f64>> {
    match s.first() {
        None => Ok(None),
        Some(b) if b.is_ascii_alphabetic() && !b"iInN".contains(b) => Ok(None),
        Some(_) => lua_num(s).map(Some),
    }
}

/// A Lua number as a script's reply shows it: truncated to an integer
/// (`(long long)` of the double; Rust's cast saturates where C's is
/// undefined, and both agree on every integer-valued double in range).
pub fn lua_int(x: f64) -> i64 {
    x as i64
}

/// An integer reply of `redis.call` as Lua holds it (a double), as the
/// script returns it again.
pub fn through_lua(i: i64) -> i64 {
    lua_int(i as f64)
}

/// A number as a script's `redis.call` argument: `%.17g`, as Redis
/// writes one (not Lua's own `%.14g`, which loses digits), into `buf`;
/// the bytes written.
pub fn fmt_num(x: f64, buf: &mut [u8; 32]) -> &[u8] {
    crate::util::format_g(x, 17, buf)
}

/// A number as Lua 5.1 writes it into a string (`..`, `tostring`:
/// `lua_Number2str`, `%.14g`).
pub fn lua_str(x: f64, buf: &mut [u8; 32]) -> &[u8] {
    crate::util::format_g(x, 14, buf)
}

// The commands, each as its handler reaches the store (see the module
// docs); an error the handler would answer is a `Fallback`.

/// `GET key`, the value read by `f`; `None` if absent.
pub fn get<R>(
    db: &mut Locked<'_>,
    key: &[u8],
    c: &mut Call,
    f: impl FnOnce(&[u8]) -> R,
) -> Fb<Option<R>> {
    c.ran(Cmd::Get);
    match db.get(key, c.now(), |e| e.value.as_str().map(|s| f(s))) {
        None => Ok(None),
        Some(None) => Err(Fallback),
        Some(Some(r)) => Ok(Some(r)),
    }
}

/// `PTTL key`: -2 missing, -1 persistent, else milliseconds.
pub fn pttl(db: &mut Locked<'_>, key: &[u8], c: &mut Call) -> i64 {
    c.ran(Cmd::Pttl);
    let now = c.now();
    db.get(key, now, |e| e.pttl_ms(now).unwrap_or(-1))
        .unwrap_or(-2)
}

/// `EXISTS key` of one key.
pub fn exists(db: &mut Locked<'_>, key: &[u8], c: &mut Call) -> bool {
    c.ran(Cmd::Exists);
    db.get(key, c.now(), |_| ()).is_some()
}

/// `INCRBY key delta` (and `INCR`): the new value; a value that is not an
/// integer, another type, or an overflow is a fallback, the key untouched.
pub fn incrby(db: &mut Locked<'_>, key: &[u8], delta: i64, c: &mut Call, cmd: Cmd) -> Fb<i64> {
    c.writing()?;
    let r = db.update(key, c.now(), |slot| string::add_to(slot, delta))?;
    c.ran(cmd);
    Ok(r)
}

/// `EXPIRE key seconds` with `at`, the deadline [`expire_at`] worked out
/// (before any write): true if the key was there.
pub fn expire(db: &mut Locked<'_>, key: &[u8], at: Option<u64>, c: &mut Call) -> Fb<bool> {
    c.writing()?;
    c.ran(Cmd::Expire);
    Ok(db.update(key, c.now(), |slot| {
        let Some(entry) = slot.as_mut() else {
            return false;
        };
        match at {
            None => *slot = None,
            Some(t) => entry.set_expiry_ms(Some(t)),
        }
        true
    }))
}

/// The deadline `EXPIRE key <arg>` sets (see `keys::deadline`); an
/// argument `EXPIRE` refuses is a fallback.
pub fn expire_at(arg: &[u8], c: &Call) -> Fb<Option<u64>> {
    let n = parse_i64(arg).ok_or(Fallback)?;
    Ok(keys::deadline(
        c.now(),
        n,
        keys::Unit::Seconds,
        false,
        "expire",
    )?)
}

/// The deadline of `SET ... EX|PX <arg>`: positive, or a fallback.
pub fn set_deadline(arg: &[u8], unit: keys::Unit, c: &Call) -> Fb<u64> {
    let n = parse_i64(arg).ok_or(Fallback)?;
    if n <= 0 {
        return Err(Fallback);
    }
    keys::deadline(c.now(), n, unit, false, "set")?.ok_or(Fallback)
}

/// `SET key value PX|EX ...` with a deadline [`set_deadline`] worked out,
/// `NX` if `nx`: true if it stored.
pub fn set(
    db: &mut Locked<'_>,
    key: &[u8],
    value: &[u8],
    at: u64,
    nx: bool,
    c: &mut Call,
) -> Fb<bool> {
    use crate::store::{SmallBytes, Touch, Value};
    c.writing()?;
    c.ran(Cmd::Set);
    let touch = if nx { Touch::IfChanged } else { Touch::Always };
    Ok(db.update_touching(key, c.now(), touch, |slot| {
        if nx && slot.is_some() {
            return false;
        }
        *slot = Some(Entry::with_expiry_ms(
            Value::Str(SmallBytes::new(value)),
            Some(at),
        ));
        true
    }))
}

/// `LINDEX key i`, the item read by `f`; `None` if none. A key of another
/// type is a fallback.
pub fn lindex<R>(
    db: &mut Locked<'_>,
    key: &[u8],
    i: i64,
    c: &mut Call,
    f: impl FnOnce(&[u8]) -> R,
) -> Fb<Option<R>> {
    use crate::store::collections::List;
    use collection::Kind;
    c.ran(Cmd::Lindex);
    match db.get(key, c.now(), |e| {
        List::of(&e.value).map(|l| list::item(l, i).map(|v| f(v)))
    }) {
        None => Ok(None),
        Some(None) => Err(Fallback),
        Some(Some(r)) => Ok(r),
    }
}

/// Whether `key` holds a list or nothing (what `LINDEX`, `LPUSH` and
/// `LTRIM` take).
pub fn is_list_or_none(db: &mut Locked<'_>, key: &[u8], c: &Call) -> bool {
    use crate::store::Value;
    db.get(key, c.now(), |e| matches!(e.value, Value::List(_)))
        .unwrap_or(true)
}

/// `LPUSH key item...` of `count` copies of `item`, as one call (the
/// caller checked the key is a list or missing).
pub fn lpush(db: &mut Locked<'_>, key: &[u8], item: &[u8], count: usize, c: &mut Call) -> Fb<()> {
    use crate::store::collections::List;
    use collection::Kind;
    c.writing()?;
    c.ran(Cmd::Lpush);
    let item = bytes::Bytes::copy_from_slice(item);
    db.update(key, c.now(), |slot| {
        if slot.is_none() {
            *slot = Some(Entry::new(List::default().wrap()));
        }
        let l = slot
            .as_mut()
            .and_then(|e| List::of_mut(&mut e.value))
            .ok_or(Fallback)?;
        for _ in 0..count {
            l.push_front(item.clone());
        }
        if l.is_empty() {
            *slot = None;
        }
        Ok(())
    })
}

/// `LTRIM key start stop` (the caller checked the key is a list or
/// missing); a list left empty is deleted.
pub fn ltrim(db: &mut Locked<'_>, key: &[u8], start: i64, stop: i64, c: &mut Call) -> Fb<()> {
    use crate::store::collections::List;
    use collection::Kind;
    c.writing()?;
    c.ran(Cmd::Ltrim);
    db.update(key, c.now(), |slot| {
        let Some(e) = slot.as_mut() else {
            return Ok(());
        };
        let l = List::of_mut(&mut e.value).ok_or(Fallback)?;
        list::trim(l, start, stop);
        if l.is_empty() {
            *slot = None;
        }
        Ok(())
    })
}

/// `RENAME from to` of a key that is there (the caller checked).
pub fn rename(db: &mut Locked<'_>, from: &[u8], to: &[u8], c: &mut Call) -> Fb<()> {
    c.writing()?;
    c.ran(Cmd::Rename);
    let now = c.now();
    keys::rename_in(db, from, to, now, false)?;
    Ok(())
}
