//! What the list, sorted set and hash commands share: reaching a key's
//! collection for reading or writing with Redis's `WRONGTYPE` rule, and
//! deleting a collection a command emptied, as Redis does.

use super::{CmdError, Ctx};
use crate::store::entry::{Entry, Value};
use crate::store::keys::Keys;

/// A collection type as a `Value` variant.
pub trait Kind: Default {
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
    fn wrap(self) -> Value;
    fn is_empty(&self) -> bool;
}

macro_rules! kind {
    ($t:ty, $variant:ident) => {
        impl Kind for $t {
            fn of(v: &Value) -> Option<&Self> {
                match v {
                    Value::$variant(c) => Some(c),
                    _ => None,
                }
            }
            fn of_mut(v: &mut Value) -> Option<&mut Self> {
                match v {
                    Value::$variant(c) => Some(c),
                    _ => None,
                }
            }
            fn wrap(self) -> Value {
                Value::$variant(Box::new(self))
            }
            fn is_empty(&self) -> bool {
                <$t>::is_empty(self)
            }
        }
    };
}

kind!(crate::store::collections::List, List);
kind!(crate::store::collections::ZSet, ZSet);
kind!(crate::store::collections::Hash, Hash);

/// Reads `key`'s collection: `f` gets it, or `None` if the key does not
/// exist; `WRONGTYPE` if it holds something else.
pub fn read<T: Kind, R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    f: impl FnOnce(Option<&T>, &mut crate::protocol::ReplyBuf) -> R,
) -> Result<R, CmdError> {
    let out = &mut *ctx.out;
    let mut f = Some(f);
    let found = ctx.db.get(key, ctx.now, |e| match T::of(&e.value) {
        Some(c) => Ok((f.take().expect("called once"))(Some(c), &mut *out)),
        None => Err(CmdError::WrongType),
    });
    match found {
        Some(r) => r,
        None => Ok((f.take().expect("not called yet"))(None, out)),
    }
}

/// Changes `key`'s collection. `f` gets it, created empty if the key does
/// not exist and `create` says so (else `None`); a collection left empty
/// is deleted. `WRONGTYPE` if the key holds something else.
pub fn write<T: Kind, R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    create: bool,
    f: impl FnOnce(Option<&mut T>) -> Result<R, CmdError>,
) -> Result<R, CmdError> {
    ctx.db.update(key, ctx.now, |slot| {
        if let Some(e) = slot.as_ref() {
            if T::of(&e.value).is_none() {
                return Err(CmdError::WrongType);
            }
        } else if create {
            *slot = Some(Entry::new(T::default().wrap()));
        } else {
            return f(None);
        }
        let entry = slot.as_mut().expect("present or created");
        let c = T::of_mut(&mut entry.value).expect("checked above");
        let r = f(Some(c));
        if T::of(&entry.value).is_none_or(|c| c.is_empty()) {
            *slot = None;
        }
        r
    })
}

/// Redis's range normalisation of `LRANGE`/`ZRANGE` indexes over `len`
/// items: negative from the end, clamped; `None` for an empty range.
pub fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}
