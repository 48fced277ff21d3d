//! Redis 7's ACL users: who may run which commands on which keys and
//! channels. The users and their rules (`user.rs`: the rule parser `ACL
//! SETUSER` runs, the canonical rules `ACL LIST` prints, the checks
//! dispatch makes), the categories (`Category`), the ids the rules index
//! commands by (`Catalog`, built by the command layer from its table), and
//! the set of users in force (`Acl`), each behind a cell that open
//! connections read once per command, so `ACL SETUSER` reaches them at
//! once and `ACL DELUSER` closes them.
//!
//! Passwords are kept as SHA-256 digests only: `ACL LIST` and `ACL
//! GETUSER` can print nothing but the digest, and no clear password stays
//! in memory after the rule that gave it.

mod user;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::RwLock;

pub use user::{Access, Denied, RuleError, User};

/// A command category, in the order `ACL CAT` lists them: Redis 7.0's,
/// then Turnstile's own `ratelimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Category(u8);

/// The categories' names, by bit.
pub const CATEGORIES: [&str; 22] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
    "ratelimit",
];

impl Category {
    /// A category by its name, case-insensitively (as Redis finds one).
    pub fn by_name(name: &[u8]) -> Option<Category> {
        CATEGORIES
            .iter()
            .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
            .map(|i| Category(i as u8))
    }

    pub fn name(self) -> &'static str {
        CATEGORIES[self.0 as usize]
    }

    pub fn all() -> impl Iterator<Item = Category> {
        (0..CATEGORIES.len() as u8).map(Category)
    }
}

/// A set of categories: what the command table declares for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CatSet(u32);

macro_rules! cats {
    ($($name:ident = $bit:expr),* $(,)?) => {
        impl CatSet {
            $(pub const $name: CatSet = CatSet(1 << $bit);)*
        }
    };
}

cats! {
    KEYSPACE = 0, READ = 1, WRITE = 2, SET = 3, SORTEDSET = 4, LIST = 5, HASH = 6,
    STRING = 7, BITMAP = 8, HYPERLOGLOG = 9, GEO = 10, STREAM = 11, PUBSUB = 12,
    ADMIN = 13, FAST = 14, SLOW = 15, BLOCKING = 16, DANGEROUS = 17, CONNECTION = 18,
    TRANSACTION = 19, SCRIPTING = 20, RATELIMIT = 21,
}

impl CatSet {
    pub const fn empty() -> CatSet {
        CatSet(0)
    }

    pub const fn with(self, other: CatSet) -> CatSet {
        CatSet(self.0 | other.0)
    }

    pub const fn contains(self, other: CatSet) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn has(self, c: Category) -> bool {
        self.0 & (1 << c.0) != 0
    }

    /// The names, `@`-prefixed, in `ACL CAT`'s order (as `COMMAND INFO`
    /// lists them).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        const AT: [&str; 22] = [
            "@keyspace",
            "@read",
            "@write",
            "@set",
            "@sortedset",
            "@list",
            "@hash",
            "@string",
            "@bitmap",
            "@hyperloglog",
            "@geo",
            "@stream",
            "@pubsub",
            "@admin",
            "@fast",
            "@slow",
            "@blocking",
            "@dangerous",
            "@connection",
            "@transaction",
            "@scripting",
            "@ratelimit",
        ];
        Category::all()
            .filter(move |c| self.has(*c))
            .map(|c| AT[c.0 as usize])
    }
}

/// Most commands and subcommands a rule can name (Redis keeps 1024 bits).
pub const MAX_COMMANDS: usize = 512;

/// Every command and subcommand, by the id a user's rules index them by:
/// each command of the table in order, its subcommands right after it.
/// Built once by the command layer (`Registry`), which owns the names
/// and categories.
#[derive(Debug)]
pub struct Catalog {
    /// Full names by id: `get`, `client|kill`.
    names: Vec<String>,
    cats: Vec<CatSet>,
    /// For a command with subcommands, the ids of its subcommands.
    subs: Vec<std::ops::Range<usize>>,
    parent: Vec<Option<usize>>,
    /// A top-level command's id by its position in the table.
    top: Vec<usize>,
    by_name: HashMap<String, usize>,
}

/// One command as the catalogue takes it: name, categories, and its
/// subcommands' names and categories.
pub type CatalogEntry<'a> = (&'a str, CatSet, Vec<(&'a str, CatSet)>);

impl Catalog {
    /// # Panics
    /// If the table has more than [`MAX_COMMANDS`] commands and
    /// subcommands (a build-time fact, tested).
    pub fn new<'a>(commands: impl IntoIterator<Item = CatalogEntry<'a>>) -> Catalog {
        let mut c = Catalog {
            names: Vec::new(),
            cats: Vec::new(),
            subs: Vec::new(),
            parent: Vec::new(),
            top: Vec::new(),
            by_name: HashMap::new(),
        };
        for (name, cats, subs) in commands {
            let id = c.names.len();
            c.top.push(id);
            c.push(name.to_string(), cats, None);
            for (sub, cats) in &subs {
                c.push(format!("{name}|{sub}"), *cats, Some(id));
            }
            c.subs[id] = id + 1..id + 1 + subs.len();
        }
        assert!(c.names.len() < MAX_COMMANDS, "raise acl::MAX_COMMANDS");
        c
    }

    fn push(&mut self, name: String, cats: CatSet, parent: Option<usize>) {
        let id = self.names.len();
        self.by_name.insert(name.clone(), id);
        self.names.push(name);
        self.cats.push(cats);
        self.subs.push(id..id);
        self.parent.push(parent);
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The id of the command at `cmd` in the table, or of its subcommand
    /// at `sub`.
    pub fn id(&self, cmd: usize, sub: Option<usize>) -> usize {
        self.top[cmd] + sub.map_or(0, |s| s + 1)
    }

    /// A command or `command|subcommand` by name, case-insensitively.
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        self.by_name.get(&name).copied()
    }

    pub fn name(&self, id: usize) -> &str {
        &self.names[id]
    }

    /// Every command and subcommand in `cat`, in id order (`ACL CAT`).
    pub fn in_category(&self, cat: Category) -> impl Iterator<Item = &str> {
        (0..self.len())
            .filter(move |&i| self.cats[i].has(cat))
            .map(|i| self.names[i].as_str())
    }
}

/// One user as connections see it: its rules, swapped whole by `ACL
/// SETUSER`, and two flags read on every command without loading them.
#[derive(Debug)]
pub struct UserCell {
    user: ArcSwap<User>,
    /// All commands, all keys, all channels: nothing to check per command
    /// (the default user's state, and the hot path's).
    unrestricted: AtomicBool,
    /// `ACL DELUSER` removed it: its connections close.
    deleted: AtomicBool,
}

impl UserCell {
    fn new(user: User) -> Arc<UserCell> {
        Arc::new(UserCell {
            unrestricted: AtomicBool::new(user.unrestricted()),
            user: ArcSwap::from_pointee(user),
            deleted: AtomicBool::new(false),
        })
    }

    fn store(&self, user: User) {
        let open = user.unrestricted();
        self.user.store(Arc::new(user));
        self.unrestricted.store(open, Ordering::Release);
    }

    /// Whether the user may run anything on anything: one load, no
    /// lookup (the check dispatch makes first).
    #[inline]
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Acquire)
    }

    pub fn deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// The user's rules now.
    pub fn load(&self) -> Arc<User> {
        self.user.load_full()
    }
}

/// Every user, by name in byte order (as Redis's radix tree lists them).
#[derive(Debug)]
pub struct Acl {
    users: RwLock<BTreeMap<Box<[u8]>, Arc<UserCell>>>,
    default: Arc<UserCell>,
}

impl Acl {
    /// The users of a new server: `default` alone, `on ~* &* +@all`, with
    /// `requirepass`'s password if one is set, else `nopass`.
    pub fn new(password: Option<&[u8]>) -> Acl {
        let mut default = User::new(b"default");
        for rule in [&b"+@all"[..], b"~*", b"&*", b"on", b"nopass"] {
            default
                .apply_root(rule)
                .expect("the default user's rules are valid");
        }
        if let Some(p) = password.filter(|p| !p.is_empty()) {
            default.set_only_password(p);
        }
        let default = UserCell::new(default);
        let mut users = BTreeMap::new();
        users.insert(Box::from(&b"default"[..]), default.clone());
        Acl {
            users: RwLock::new(users),
            default,
        }
    }

    /// The `default` user, whom every connection starts as.
    pub fn default_user(&self) -> &Arc<UserCell> {
        &self.default
    }

    /// Whether a new connection must authenticate (Redis's `authRequired`
    /// at connect time): the default user has a password or is off.
    pub fn auth_required(&self) -> bool {
        let u = self.default.load();
        !u.nopass || !u.enabled
    }

    /// `CONFIG SET requirepass`: the default user's passwords become this
    /// one alone (`resetpass >password`), or `nopass` for none, as
    /// Redis's `ACLUpdateDefaultUserPassword`.
    pub fn set_default_password(&self, password: Option<&[u8]>) {
        let _w = self.users.write();
        let mut u = (*self.default.load()).clone();
        match password.filter(|p| !p.is_empty()) {
            Some(p) => u.set_only_password(p),
            None => {
                u.apply_root(b"nopass").expect("nopass is valid");
            }
        }
        self.default.store(u);
    }

    /// The user `name`, if there is one.
    pub fn get(&self, name: &[u8]) -> Option<Arc<UserCell>> {
        self.users.read().get(name).cloned()
    }

    /// `ACL SETUSER`: applies every rule to a copy of the user (a new one
    /// if `name` is unknown) and keeps it only if all of them were valid.
    pub fn set_user(&self, catalog: &Catalog, name: &[u8], rules: &[&[u8]]) -> Result<(), String> {
        if name
            .iter()
            .any(|b| b.is_ascii_whitespace() || *b == 0 || *b == 0x0b)
        {
            return Err("Usernames can't contain spaces or null characters".into());
        }
        let mut users = self.users.write();
        let cell = users.get(name).cloned();
        let mut u = match &cell {
            Some(c) => (*c.load()).clone(),
            None => User::new(name),
        };
        u.apply_all(catalog, rules)?;
        match cell {
            Some(c) => c.store(u),
            None => {
                users.insert(name.into(), UserCell::new(u));
            }
        }
        Ok(())
    }

    /// `ACL DELUSER`: removes the users named (never `default`: the
    /// caller refuses it first) and returns them, for their connections
    /// to be closed.
    pub fn delete(&self, names: &[&[u8]]) -> Vec<Arc<UserCell>> {
        let mut users = self.users.write();
        let mut gone = Vec::new();
        for name in names {
            if *name == b"default" {
                continue;
            }
            if let Some(c) = users.remove(*name) {
                c.deleted.store(true, Ordering::Release);
                gone.push(c);
            }
        }
        gone
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        self.users.read().values().map(|c| c.load()).collect()
    }

    /// `AUTH user pass`: the user, if it exists, is on, and takes this
    /// password (every digest compared in constant time).
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<UserCell>> {
        let cell = self.get(name)?;
        cell.load().accepts(password).then_some(cell)
    }
}

#[cfg(test)]
mod tests;
