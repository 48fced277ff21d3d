//! Redis 7's ACL users: who may run which commands on which keys and
//! channels. The users and their rules (`user.rs`: the rule parser `ACL
//! SETUSER` runs, the canonical rules `ACL LIST` prints, the checks
//! dispatch makes), the categories (`Category`), the ids the rules index
//! commands by (`Catalog`, built by the command layer from its table), and
//! the set of users in force (`Acl`), each behind a cell that open
//! connections read once per command, so `ACL SETUSER` reaches them at
//! once and `ACL DELUSER` closes them; the log of refusals `ACL LOG`
//! shows (`log.rs`).
//!
//! Passwords are kept as SHA-256 digests only: `ACL LIST` and `ACL
//! GETUSER` can print nothing but the digest, and no clear password stays
//! in memory after the rule that gave it.

mod catalog;
pub mod file;
pub mod log;
mod user;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::RwLock;

pub use catalog::{CatSet, Catalog, CatalogEntry, Category, CATEGORIES, MAX_COMMANDS};
pub use user::{Access, RuleError, Selector, User, MAX_SELECTORS};

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

    /// The user's rules now, borrowed for one check: no reference count
    /// moves (`load`'s would, on one cache line every connection of the
    /// user shares, twice a request).
    pub fn peek(&self) -> arc_swap::Guard<Arc<User>> {
        self.user.load()
    }
}

/// What [`Acl::replace`] did to users that connections may hold.
#[derive(Debug, Default)]
pub struct Replaced {
    /// Removed: their connections close.
    pub gone: Vec<Arc<UserCell>>,
    /// Kept with other rules: (before, after).
    pub changed: Vec<(Arc<User>, Arc<User>)>,
}

/// Every user, by name in byte order (as Redis's radix tree lists them).
#[derive(Debug)]
pub struct Acl {
    users: RwLock<BTreeMap<Box<[u8]>, Arc<UserCell>>>,
    default: Arc<UserCell>,
    /// `ACL LOG`'s refusals.
    pub log: log::Log,
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
            log: log::Log::default(),
        }
    }

    /// The `default` user, whom every connection starts as.
    pub fn default_user(&self) -> &Arc<UserCell> {
        &self.default
    }

    /// The user a connection runs as: the one it authenticated as
    /// (`session_user`), or `default`.
    pub fn user_of<'a>(&'a self, session_user: &'a Option<Arc<UserCell>>) -> &'a UserCell {
        session_user.as_deref().unwrap_or(&self.default)
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
        if user::has_spaces(name) {
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

    /// `ACL LOAD` and `--aclfile` at start: `users` (checked, names
    /// unique) become the users in force, all at once. A user gone is
    /// deleted as by `ACL DELUSER`; a user kept whose rules changed
    /// takes them as by `ACL SETUSER` (its connections see them at their
    /// next command). `default`, which every connection starts as, keeps
    /// its cell: without a line for it, it is a new server's default
    /// user, with `password` (`requirepass`) if one is set.
    pub fn replace(&self, users: Vec<User>, password: Option<&[u8]>) -> Replaced {
        let mut fresh: BTreeMap<Box<[u8]>, User> =
            users.into_iter().map(|u| (u.name.clone(), u)).collect();
        if !fresh.contains_key(&b"default"[..]) {
            let default = (*Acl::new(password).default.load()).clone();
            fresh.insert(Box::from(&b"default"[..]), default);
        }
        let mut map = self.users.write();
        let mut out = Replaced::default();
        map.retain(|name, cell| {
            if fresh.contains_key(name) {
                return true;
            }
            cell.deleted.store(true, Ordering::Release);
            out.gone.push(cell.clone());
            false
        });
        for (name, u) in fresh {
            match map.get(&name) {
                Some(cell) => {
                    let old = cell.load();
                    if *old != u {
                        cell.store(u);
                        out.changed.push((old, cell.load()));
                    }
                }
                None => {
                    map.insert(name, UserCell::new(u));
                }
            }
        }
        out
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
