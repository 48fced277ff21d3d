//! The categories (`Category`, `CatSet`) and the ids ACL rules name
//! commands by (`Catalog`), which the command layer builds from its table.

use std::collections::HashMap;

/// A command category, in the order `ACL CAT` lists them: Redis 7.0's,
/// then Turnstile's own `ratelimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Category(pub(super) u8);

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
    pub(super) names: Vec<String>,
    pub(super) cats: Vec<CatSet>,
    /// For a command with subcommands, the ids of its subcommands.
    pub(super) subs: Vec<std::ops::Range<usize>>,
    pub(super) parent: Vec<Option<usize>>,
    /// A top-level command's id by its position in the table.
    pub(super) top: Vec<usize>,
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
