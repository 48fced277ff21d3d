//! The values settings take as the settings' table handles them: one
//! [`Val`] type, how a setting's value is read and shown ([`Kind`]), and
//! the [`Config`](super::fields::Config) field types ([`Value`]) and live
//! cells ([`Cell`]) that hold it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use clap::builder::{TypedValueParser, ValueParser};
use parking_lot::RwLock;

use super::values::{parse_yes_no, MaxmemoryPolicy, Number, OutputLimits};
use crate::persist::aof::Fsync;

/// A setting's value, as parsed and as kept.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// Not set (an optional setting, an empty text).
    None,
    Num(u64),
    Bool(bool),
    /// One of a [`Kind::Choice`]'s names, by position.
    Index(u8),
    Text(String),
    /// A password: any bytes.
    Bytes(Vec<u8>),
    Path(PathBuf),
    Duration(Duration),
    Addr(String, u16),
    Limits(OutputLimits),
    /// A repeatable setting's values.
    List(Vec<Val>),
}

/// How a setting's value is read (flag, variable, file, `CONFIG SET`) and
/// shown (`CONFIG GET`).
#[derive(Clone, Copy)]
pub enum Kind {
    /// A number in a range, memory units for a size; `CONFIG SET`
    /// refuses in Redis's words.
    Number(Number),
    /// `yes` or `no`.
    YesNo,
    /// One of `names`; `parse` reads a flag's value in its own words.
    Choice(&'static [&'static str], fn(&str) -> Result<u8, String>),
    /// Text; empty is none. `CONFIG SET` refuses a name or an address
    /// with a control character in it (a CR or LF would end the line it
    /// is shown on, in `INFO` or the `REPLCONF` a replica sends); a secret
    /// may hold any bytes.
    Text(Line),
    /// `requirepass`: any bytes.
    Password,
    /// `client-output-buffer-limit`: the classes named change.
    Limits,
    /// A value only the command line sets, read by this parser.
    Other(fn() -> ValueParser),
}

/// What a text setting may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Name,
    Secret,
}

impl Kind {
    /// The command line's (and the file's) parser.
    pub fn parser(self) -> ValueParser {
        match self {
            Kind::Number(n) => ValueParser::new(move |s: &str| n.parse(s).map(Val::Num)),
            Kind::YesNo => ValueParser::new(|s: &str| parse_yes_no(s).map(Val::Bool)),
            Kind::Choice(_, parse) => ValueParser::new(move |s: &str| parse(s).map(Val::Index)),
            Kind::Limits => ValueParser::new(|s: &str| OutputLimits::parse(s).map(Val::Limits)),
            Kind::Text(_) | Kind::Password => text(),
            Kind::Other(parser) => parser(),
        }
    }

    /// A `CONFIG SET` value, or why it is refused, in Redis's words.
    pub fn parse_set(self, value: &[u8], current: Option<Val>) -> Result<Val, String> {
        let text = std::str::from_utf8(value).unwrap_or("");
        Ok(match self {
            Kind::Number(n) => Val::Num(n.parse_config_set(text)?),
            Kind::YesNo => {
                Val::Bool(parse_yes_no(text).map_err(|_| "argument must be 'yes' or 'no'")?)
            }
            Kind::Choice(names, parse) => Val::Index(parse(text).map_err(|_| {
                format!(
                    "argument(s) must be one of the following: {}",
                    names.join(", ")
                )
            })?),
            Kind::Text(Line::Name) if value.iter().any(u8::is_ascii_control) => {
                return Err("argument must not contain control characters".into())
            }
            Kind::Text(_) if value.is_empty() => Val::None,
            Kind::Text(_) => Val::Text(String::from_utf8_lossy(value).into_owned()),
            Kind::Password => Val::Bytes(value.to_vec()),
            Kind::Limits => {
                let Some(Val::Limits(limits)) = current else {
                    return Err("can't set immutable config".into());
                };
                Val::Limits(limits.with(text).map_err(|e| e.to_string())?)
            }
            Kind::Other(_) => return Err("can't set immutable config".into()),
        })
    }

    /// As `CONFIG GET` shows it.
    pub fn show(self, v: &Val) -> String {
        match (self, v) {
            (Kind::Choice(names, _), Val::Index(i)) => names
                .get(usize::from(*i))
                .map_or(String::new(), |n| n.to_string()),
            (_, Val::None) => String::new(),
            (_, Val::Num(n)) => n.to_string(),
            (_, Val::Bool(b)) => if *b { "yes" } else { "no" }.into(),
            (_, Val::Index(i)) => i.to_string(),
            (_, Val::Text(s)) => s.clone(),
            (_, Val::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
            (_, Val::Path(p)) => p.display().to_string(),
            (_, Val::Duration(d)) => d.as_secs().to_string(),
            (_, Val::Addr(h, p)) => format!("{h}:{p}"),
            (_, Val::Limits(l)) => l.to_string(),
            (_, Val::List(items)) => items
                .iter()
                .map(|v| self.show(v))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// A type a [`Config`](super::fields::Config) field may have.
pub trait Value {
    fn val(&self) -> Val;
    /// Takes a parsed value (a repeatable one adds it).
    fn put(&mut self, v: Val);
}

macro_rules! number_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn val(&self) -> Val {
                Val::Num(*self as u64)
            }
            fn put(&mut self, v: Val) {
                if let Val::Num(n) = v {
                    *self = n as $t;
                }
            }
        }
    )*};
}
number_value!(u64, u32, u16, usize);

/// A value kept as itself: `Val::$v(x)`.
macro_rules! plain_value {
    ($($t:ty => $v:ident),*) => {$(
        impl Value for $t {
            fn val(&self) -> Val {
                Val::$v(self.clone())
            }
            fn put(&mut self, v: Val) {
                if let Val::$v(x) = v {
                    *self = x;
                }
            }
        }
    )*};
}
plain_value!(bool => Bool, String => Text, PathBuf => Path, Duration => Duration, OutputLimits => Limits);

impl Value for (String, u16) {
    fn val(&self) -> Val {
        Val::Addr(self.0.clone(), self.1)
    }
    fn put(&mut self, v: Val) {
        if let Val::Addr(h, p) = v {
            *self = (h, p);
        }
    }
}

impl Value for MaxmemoryPolicy {
    fn val(&self) -> Val {
        Val::Index(self.index())
    }
    fn put(&mut self, v: Val) {
        if let Val::Index(i) = v {
            *self = MaxmemoryPolicy::from_index(i);
        }
    }
}

impl Value for Fsync {
    fn val(&self) -> Val {
        Val::Index(*self as u8)
    }
    fn put(&mut self, v: Val) {
        if let Val::Index(i) = v {
            *self = Fsync::from_index(i);
        }
    }
}

impl<T: Value + Default> Value for Option<T> {
    fn val(&self) -> Val {
        self.as_ref().map_or(Val::None, Value::val)
    }
    fn put(&mut self, v: Val) {
        if v == Val::None {
            *self = None;
            return;
        }
        let mut t = T::default();
        t.put(v);
        *self = Some(t);
    }
}

impl<T: Value + Default> Value for Vec<T> {
    fn val(&self) -> Val {
        Val::List(self.iter().map(Value::val).collect())
    }
    fn put(&mut self, v: Val) {
        let mut t = T::default();
        t.put(v);
        self.push(t);
    }
}

/// A text flag's parser.
pub fn text() -> ValueParser {
    clap::builder::StringValueParser::new()
        .map(Val::Text)
        .into()
}

/// Where a `MODIFIABLE` setting is kept while the server
/// runs: loaded and stored as a [`Val`].
pub trait Cell: Sync {
    fn load(&self) -> Val;
    fn store(&self, v: Val);
}

impl Cell for AtomicU64 {
    fn load(&self) -> Val {
        Val::Num(self.load(Ordering::Relaxed))
    }
    fn store(&self, v: Val) {
        if let Val::Num(n) = v {
            self.store(n, Ordering::Relaxed);
        }
    }
}

impl Cell for AtomicBool {
    fn load(&self) -> Val {
        Val::Bool(self.load(Ordering::Relaxed))
    }
    fn store(&self, v: Val) {
        if let Val::Bool(b) = v {
            self.store(b, Ordering::Relaxed);
        }
    }
}

impl Cell for AtomicU8 {
    fn load(&self) -> Val {
        Val::Index(self.load(Ordering::Relaxed))
    }
    fn store(&self, v: Val) {
        if let Val::Index(i) = v {
            self.store(i, Ordering::Relaxed);
        }
    }
}

impl Cell for RwLock<Option<String>> {
    fn load(&self) -> Val {
        self.read().clone().map_or(Val::None, Val::Text)
    }
    fn store(&self, v: Val) {
        *self.write() = match v {
            Val::Text(s) if !s.is_empty() => Some(s),
            _ => None,
        };
    }
}
