//! One user: its flags, password digests, root selector (commands, key
//! patterns, channels) and further selectors (`(...)` rules, Redis 7.0's:
//! a command is allowed if any one selector allows it and its keys and
//! channels); the rules `ACL SETUSER` applies, in Redis 7.0's words; the
//! canonical rules `ACL LIST` prints back; the checks dispatch makes.

use super::catalog::{Catalog, Category, CATEGORIES, MAX_COMMANDS};

const WORDS: usize = MAX_COMMANDS / 64;

/// What a command does with a key, as Redis 7's key specs say: `%R~`
/// patterns allow reading, `%W~` writing, `~` both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

impl Access {
    pub const NONE: Access = Access {
        read: false,
        write: false,
    };
    pub const READ: Access = Access {
        read: true,
        write: false,
    };
    pub const WRITE: Access = Access {
        read: false,
        write: true,
    };
    pub const READ_WRITE: Access = Access {
        read: true,
        write: true,
    };
}

/// Why a rule was refused; the text is Redis's `ACLSetUserStringError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    Syntax,
    Unknown,
    AfterAllKeys,
    AfterAllChannels,
    NoSuchPassword,
    BadHash,
    SubcommandFirstArg,
    TooManySelectors,
    UnprintableInSelector,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::AfterAllKeys => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::AfterAllChannels => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
            RuleError::TooManySelectors => "A user can have at most 1024 selectors",
            RuleError::UnprintableInSelector => "A rule inside a selector can't end with ')' or hold a quote: ACL LIST and ACL SAVE could not print it back",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyPattern {
    pattern: Box<[u8]>,
    access: Access,
}

/// What a user may run and touch: its root selector, or one `(...)`
/// rule (Redis's `aclSelector`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    all_keys: bool,
    patterns: Vec<KeyPattern>,
    all_channels: bool,
    channels: Vec<Box<[u8]>>,
    all_commands: bool,
    /// Set by `+@all` alone (Redis's reserved bit): the rules start from
    /// `+@all` rather than `-@all` when printed.
    future: bool,
    bits: [u64; WORDS],
    /// `+select|0`: first arguments allowed of a command otherwise denied.
    first_args: Vec<(usize, Vec<Box<[u8]>>)>,
}

impl Selector {
    fn new() -> Selector {
        Selector {
            all_keys: false,
            patterns: Vec::new(),
            // Redis 7.0's `acl-pubsub-default` is `resetchannels`.
            all_channels: false,
            channels: Vec::new(),
            all_commands: false,
            future: false,
            bits: [0; WORDS],
            first_args: Vec::new(),
        }
    }

    fn bit(&self, id: usize) -> bool {
        id < MAX_COMMANDS && self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if id >= MAX_COMMANDS {
            return;
        }
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies a command, and with a container all its
    /// subcommands (Redis's `ACLChangeSelectorPerm`).
    fn change_perm(&mut self, cat: &Catalog, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.retain(|(i, _)| *i != id);
        for sub in cat.subs[id].clone() {
            self.set_bit(sub, allow);
        }
    }

    fn set_category(&mut self, cat: &Catalog, c: Category, allow: bool) {
        for id in 0..cat.len() {
            if cat.cats[id].has(c) {
                self.change_perm(cat, id, allow);
            }
        }
    }

    fn count_category(&self, cat: &Catalog, c: Category) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for id in 0..cat.len() {
            if cat.cats[id].has(c) {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    fn all(&mut self) {
        self.bits = [u64::MAX; WORDS];
        self.all_commands = true;
        self.future = true;
        self.first_args.clear();
    }

    fn none(&mut self) {
        self.bits = [0; WORDS];
        self.all_commands = false;
        self.future = false;
        self.first_args.clear();
    }

    /// Redis's `ACLSetSelector`.
    fn apply(&mut self, cat: &Catalog, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || is("~*") {
            self.all_keys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.patterns.clear();
        } else if is("allchannels") || is("&*") {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.all();
        } else if is("nocommands") || is("-@all") {
            self.none();
        } else if op[0] == b'~' || op[0] == b'%' {
            if self.all_keys {
                return Err(RuleError::AfterAllKeys);
            }
            let mut access = Access::NONE;
            let mut offset = 1;
            if op[0] == b'%' {
                loop {
                    match op.get(offset).map(u8::to_ascii_uppercase) {
                        Some(b'R') if !access.read => access.read = true,
                        Some(b'W') if !access.write => access.write = true,
                        Some(b'~') => {
                            offset += 1;
                            break;
                        }
                        // `%R` without `~`, or `%~` with no access: Redis
                        // 7.0 kept an empty or access-less pattern (and
                        // crashed printing the latter); 7.2 refuses both.
                        _ => return Err(RuleError::Syntax),
                    }
                    offset += 1;
                }
                if access == Access::NONE {
                    return Err(RuleError::Syntax);
                }
            } else {
                access = Access::READ_WRITE;
            }
            let pattern = &op[offset.min(op.len())..];
            if has_spaces(pattern) {
                return Err(RuleError::Syntax);
            }
            match self.patterns.iter_mut().find(|p| &*p.pattern == pattern) {
                Some(p) => {
                    p.access.read |= access.read;
                    p.access.write |= access.write;
                }
                None => self.patterns.push(KeyPattern {
                    pattern: pattern.into(),
                    access,
                }),
            }
            self.all_keys = false;
        } else if op[0] == b'&' {
            if self.all_channels {
                return Err(RuleError::AfterAllChannels);
            }
            let pattern = &op[1..];
            if has_spaces(pattern) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| &**c == pattern) {
                self.channels.push(pattern.into());
            }
            self.all_channels = false;
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let c = Category::by_name(&op[2..]).ok_or(RuleError::Unknown)?;
            self.set_category(cat, c, op[0] == b'+');
        } else if op[0] == b'+' {
            let name = &op[1..];
            match memchr::memrchr(b'|', name) {
                None => {
                    let id = cat.lookup(name).ok_or(RuleError::Unknown)?;
                    self.change_perm(cat, id, true);
                }
                Some(bar) => {
                    let (head, sub) = (&name[..bar], &name[bar + 1..]);
                    let id = cat.lookup(head).ok_or(RuleError::Unknown)?;
                    if cat.parent[id].is_some() {
                        return Err(RuleError::SubcommandFirstArg);
                    }
                    // A space or line break in a first argument would split
                    // or end the rule's line in the ACL file `ACL SAVE`
                    // writes (Redis 7.0 takes it, and saves a file that
                    // does not load, or loads a line it never meant).
                    if sub.is_empty() || has_spaces(sub) {
                        return Err(RuleError::Syntax);
                    }
                    if !cat.subs[id].is_empty() {
                        let id = cat.lookup(name).ok_or(RuleError::Unknown)?;
                        self.change_perm(cat, id, true);
                    } else {
                        let lower = sub.to_ascii_lowercase().into_boxed_slice();
                        match self.first_args.iter_mut().find(|(i, _)| *i == id) {
                            Some((_, args)) => {
                                if !args.contains(&lower) {
                                    args.push(lower);
                                }
                            }
                            None => self.first_args.push((id, vec![lower])),
                        }
                    }
                }
            }
        } else if op[0] == b'-' {
            let id = cat.lookup(&op[1..]).ok_or(RuleError::Unknown)?;
            self.change_perm(cat, id, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// The command rules that rebuild this selector's bitmap, Redis's
    /// `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, the
    /// categories that fit best, then single commands (in table order,
    /// where Redis follows its hash table's).
    fn describe_commands(&self, cat: &Catalog) -> Vec<u8> {
        let mut rules = Vec::new();
        let mut fake = Selector::new();
        let additive = !self.future;
        if additive {
            rules.extend_from_slice(b"-@all ");
            fake.none();
        } else {
            rules.extend_from_slice(b"+@all ");
            fake.all();
        }
        let mut temp = Selector::new();
        temp.bits = self.bits;
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for c in Category::all() {
                if applied[c.0 as usize] {
                    continue;
                }
                let (on, off) = temp.count_category(cat, c);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(c);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(c) = best else { break };
            fake.set_category(cat, c, additive);
            temp.set_category(cat, c, !additive);
            rules.extend_from_slice(if additive { b"+@" } else { b"-@" });
            rules.extend_from_slice(c.name().as_bytes());
            rules.push(b' ');
            applied[c.0 as usize] = true;
        }
        for &top in &cat.top {
            for id in std::iter::once(top).chain(cat.subs[top].clone()) {
                let (user, faked) = (self.bit(id), fake.bit(id));
                if user != faked {
                    rules.push(if user { b'+' } else { b'-' });
                    rules.extend_from_slice(cat.name(id).as_bytes());
                    rules.push(b' ');
                    fake.change_perm(cat, id, user);
                }
            }
            if !self.bit(top) {
                if let Some((_, args)) = self.first_args.iter().find(|(i, _)| *i == top) {
                    for a in args {
                        rules.push(b'+');
                        rules.extend_from_slice(cat.name(top).as_bytes());
                        rules.push(b'|');
                        rules.extend_from_slice(a);
                        rules.push(b' ');
                    }
                }
            }
        }
        rules.pop();
        rules
    }

    /// Whether this selector allows command `id` (with `first_arg`, its
    /// first argument after the command or subcommand name). Commands
    /// that run before AUTH always may.
    pub fn may_run(&self, id: usize, no_auth: bool, first_arg: Option<&[u8]>) -> bool {
        if self.all_commands || no_auth || self.bit(id) {
            return true;
        }
        let Some(arg) = first_arg else { return false };
        self.first_args
            .iter()
            .find(|(i, _)| *i == id)
            .is_some_and(|(_, args)| args.iter().any(|a| a.eq_ignore_ascii_case(arg)))
    }

    pub fn all_keys(&self) -> bool {
        self.all_keys
    }

    pub fn all_channels(&self) -> bool {
        self.all_channels
    }

    /// The selector inside a `(...)` rule: its rules split as Redis's
    /// `sdssplitargs` splits them (quotes allowed), each applied to a new
    /// selector. Redis 7.0 takes an unbalanced quote as an empty selector,
    /// which grants nothing while looking like it does: refused here.
    fn parse(cat: &Catalog, inner: &[u8]) -> Result<Selector, RuleError> {
        let mut spans = Vec::new();
        let mut scratch = Vec::new();
        let unescaped = crate::protocol::inline::split_inline(inner, &mut spans, &mut scratch)
            .map_err(|_| RuleError::Syntax)?;
        let text = if unescaped { &scratch[..] } else { inner };
        let mut sel = Selector::new();
        for span in spans {
            let rule = &text[span];
            // Redis's error first, for a rule it refuses too.
            sel.apply(cat, rule)?;
            // `(~a) +get)` would print as `(~a) resetchannels -@all +get)`,
            // whose `(~a)` reads back as a whole selector and the rest as
            // root rules; `(~'a"b' +get)` as `(~a"b ...)`, whose quote
            // opens a word that never closes (Redis 7.0 takes both, and
            // saves a file that does not load).
            if rule.last() == Some(&b')') || rule.iter().any(|b| matches!(b, b'"' | b'\'')) {
                return Err(RuleError::UnprintableInSelector);
            }
        }
        Ok(sel)
    }

    /// Keys, channels and commands as `ACL LIST` prints them, Redis's
    /// `ACLDescribeSelector`.
    fn describe(&self, cat: &Catalog) -> Vec<u8> {
        let mut s = Vec::new();
        if self.all_keys {
            s.extend_from_slice(b"~* ");
        } else {
            for p in &self.patterns {
                s.extend_from_slice(&pattern_bytes(p));
                s.push(b' ');
            }
        }
        if self.all_channels {
            s.extend_from_slice(b"&* ");
        } else {
            s.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                s.push(b'&');
                s.extend_from_slice(c);
                s.push(b' ');
            }
        }
        s.extend_from_slice(&self.describe_commands(cat));
        s
    }

    /// `ACL GETUSER`'s commands.
    pub fn command_rules(&self, cat: &Catalog) -> String {
        String::from_utf8_lossy(&self.describe_commands(cat)).into_owned()
    }

    /// `ACL GETUSER`'s keys.
    pub fn key_rules(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let v: Vec<String> = self
            .patterns
            .iter()
            .map(|p| String::from_utf8_lossy(&pattern_bytes(p)).into_owned())
            .collect();
        v.join(" ")
    }

    /// `ACL GETUSER`'s channels.
    pub fn channel_rules(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let v: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        v.join(" ")
    }

    pub fn may_access(&self, key: &[u8], access: Access) -> bool {
        self.key_allowed(key, access)
    }

    pub fn may_use_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.channel_allowed(channel, is_pattern)
    }

    fn key_allowed(&self, key: &[u8], access: Access) -> bool {
        self.all_keys
            || self.patterns.iter().any(|p| {
                (p.access.read || !access.read)
                    && (p.access.write || !access.write)
                    && crate::glob::matches(&p.pattern, key)
            })
    }

    fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|c| {
                if is_pattern {
                    **c == *channel
                } else {
                    crate::glob::matches(c, channel)
                }
            })
    }
}

/// Most selectors beside the root one a user may have. Redis sets no
/// bound; every command a restricted user runs may try each selector, so
/// `ACL SETUSER` with a million `()` rules would slow that user's every
/// command (and `ACL LIST`) to a crawl: refused, with a clear error.
pub const MAX_SELECTORS: usize = 1024;

/// A user (Redis's `user`): its root selector and its `(...)` selectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: Box<[u8]>,
    pub enabled: bool,
    pub nopass: bool,
    /// `skip-sanitize-payload` (Some(false)) or `sanitize-payload`
    /// (Some(true)): kept and shown; RESTORE always checks its payload.
    sanitize: Option<bool>,
    /// SHA-256 digests, in the order given.
    passwords: Vec<[u8; 32]>,
    sel: Selector,
    /// The `(...)` rules, in the order given.
    selectors: Vec<Selector>,
}

/// Redis's `ACLMergeSelectorArguments`: a selector given over several
/// arguments (`(+get` `~x)`) becomes one, its parts joined by a space.
/// An argument that opens a selector while one is open starts it again
/// (Redis drops the first). `Err(i)`: the selector opened by argument `i`
/// never closes.
pub(super) fn merge_selectors<'a>(
    rules: &[&'a [u8]],
) -> Result<Vec<std::borrow::Cow<'a, [u8]>>, usize> {
    use std::borrow::Cow;
    let mut out = Vec::with_capacity(rules.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, rule) in rules.iter().enumerate() {
        if rule.first() == Some(&b'(') && rule.last() != Some(&b')') {
            open = Some((i, rule.to_vec()));
            continue;
        }
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(rule);
            if rule.last() == Some(&b')') {
                let (_, sel) = open.take().expect("open");
                out.push(Cow::Owned(sel));
            }
            continue;
        }
        out.push(Cow::Borrowed(*rule));
    }
    match open {
        Some((i, _)) => Err(i),
        None => Ok(out),
    }
}

/// Redis's `ACLStringHasSpaces`: `isspace` or NUL.
pub(super) fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|b| b.is_ascii_whitespace() || *b == 0 || *b == 0x0b)
}

fn digest(password: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, password);
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A `#hash`: exactly 64 lower-case hex digits.
fn parse_hash(hex: &[u8]) -> Result<[u8; 32], RuleError> {
    if hex.len() != 64 || !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(RuleError::BadHash);
    }
    let mut out = [0; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let v = |b: u8| if b <= b'9' { b - b'0' } else { b - b'a' + 10 };
        out[i] = v(pair[0]) << 4 | v(pair[1]);
    }
    Ok(out)
}

fn hex(d: &[u8; 32]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(64);
    for b in d {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl User {
    /// A user as `ACL SETUSER` creates one: off, no password, no
    /// commands, keys or channels.
    pub fn new(name: &[u8]) -> User {
        User {
            name: name.into(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            sel: Selector::new(),
            selectors: Vec::new(),
        }
    }

    /// All commands, keys and channels: no check to make per command.
    pub fn unrestricted(&self) -> bool {
        self.sel.all_commands && self.sel.all_keys && self.sel.all_channels
    }

    /// The root selector.
    pub fn root(&self) -> &Selector {
        &self.sel
    }

    /// The root selector, then the `(...)` ones in order: a request is
    /// allowed if one of them allows it whole.
    pub fn selectors(&self) -> impl Iterator<Item = &Selector> {
        std::iter::once(&self.sel).chain(&self.selectors)
    }

    /// The `(...)` selectors alone (`ACL GETUSER`'s `selectors`).
    pub fn extra_selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// The rules of `ACL SETUSER` in order, all or none: on the first
    /// invalid one, Redis's error naming it.
    pub fn apply_all(&mut self, cat: &Catalog, rules: &[&[u8]]) -> Result<(), String> {
        // A selector may span arguments (`(+get` `~x)`), as Redis merges
        // them before anything applies; one left open is refused first.
        let merged = merge_selectors(rules).map_err(|i| {
            format!(
                "Unmatched parenthesis in acl selector starting at '{}'.",
                String::from_utf8_lossy(rules[i])
            )
        })?;
        let mut staged = self.clone();
        for rule in &merged {
            staged.apply(cat, rule).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(rule),
                    e.text()
                )
            })?;
        }
        *self = staged;
        Ok(())
    }

    /// A rule that names no command (the default user's own).
    pub(super) fn apply_root(&mut self, rule: &[u8]) -> Result<(), RuleError> {
        self.apply(&Catalog::new([]), rule)
    }

    /// `resetpass >password`.
    pub(super) fn set_only_password(&mut self, password: &[u8]) {
        self.nopass = false;
        self.passwords = vec![digest(password)];
    }

    /// Redis's `ACLSetUser`: one rule (a `(...)` selector whole, as
    /// [`merge_selectors`] joins it).
    pub fn apply(&mut self, cat: &Catalog, op: &[u8]) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize = Some(false);
        } else if is("sanitize-payload") {
            self.sanitize = Some(true);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let d = if op[0] == b'>' {
                digest(&op[1..])
            } else {
                parse_hash(&op[1..])?
            };
            if !self.passwords.contains(&d) {
                self.passwords.push(d);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let d = if op[0] == b'<' {
                digest(&op[1..])
            } else {
                parse_hash(&op[1..])?
            };
            let i = self
                .passwords
                .iter()
                .position(|p| *p == d)
                .ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(i);
        } else if op.len() >= 2 && op[0] == b'(' && op[op.len() - 1] == b')' {
            if self.selectors.len() >= MAX_SELECTORS {
                return Err(RuleError::TooManySelectors);
            }
            let sel = Selector::parse(cat, &op[1..op.len() - 1])?;
            self.selectors.push(sel);
        } else if is("clearselectors") {
            self.selectors.clear();
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.sel.all_keys = false;
            self.sel.patterns.clear();
            self.sel.all_channels = false;
            self.sel.channels.clear();
            self.enabled = false;
            self.sanitize = Some(true);
            self.selectors.clear();
            self.sel.none();
        } else {
            self.sel.apply(cat, op)?;
        }
        Ok(())
    }

    /// The user's rules as `ACL LIST` prints them (after `user NAME `):
    /// flags, password digests, then the root selector's keys, channels
    /// and commands, then each `(...)` selector. Bytes, as the patterns
    /// were given: what `ACL SAVE` writes must read back the same.
    pub fn describe(&self, cat: &Catalog) -> Vec<u8> {
        let mut s = Vec::new();
        for (on, flag) in [
            (self.enabled, "on"),
            (!self.enabled, "off"),
            (self.nopass, "nopass"),
            (self.sanitize == Some(false), "skip-sanitize-payload"),
            (self.sanitize == Some(true), "sanitize-payload"),
        ] {
            if on {
                s.extend_from_slice(flag.as_bytes());
                s.push(b' ');
            }
        }
        for p in &self.passwords {
            s.push(b'#');
            s.extend_from_slice(hex(p).as_bytes());
            s.push(b' ');
        }
        s.extend_from_slice(&self.sel.describe(cat));
        for sel in &self.selectors {
            s.extend_from_slice(b" (");
            s.extend_from_slice(&sel.describe(cat));
            s.push(b')');
        }
        s
    }

    /// `ACL GETUSER`'s flags.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// `ACL GETUSER`'s passwords: hex digests.
    pub fn password_hashes(&self) -> Vec<String> {
        self.passwords.iter().map(hex).collect()
    }

    /// `ACL GETUSER`'s commands (the root selector's).
    pub fn command_rules(&self, cat: &Catalog) -> String {
        self.sel.command_rules(cat)
    }

    /// `ACL GETUSER`'s keys (the root selector's).
    pub fn key_rules(&self) -> String {
        self.sel.key_rules()
    }

    /// `ACL GETUSER`'s channels (the root selector's).
    pub fn channel_rules(&self) -> String {
        self.sel.channel_rules()
    }

    /// Whether this user logs in with `password`: on, and `nopass` or one
    /// digest equal (each compared in constant time).
    pub fn accepts(&self, password: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let d = digest(password);
        let mut ok = subtle::Choice::from(0);
        for p in &self.passwords {
            ok |= p.ct_eq(&d);
        }
        ok.into()
    }

    /// Whether every channel rule of `old` is among this user's, in any
    /// selector (Redis's test before it looks for subscribers to close).
    pub fn channels_cover(&self, old: &User) -> bool {
        if self.selectors().any(|s| s.all_channels) {
            return true;
        }
        if old.selectors().any(|s| s.all_channels) {
            return false;
        }
        old.selectors()
            .flat_map(|s| &s.channels)
            .all(|c| self.selectors().any(|s| s.channels.contains(c)))
    }

    /// Whether any selector lets this user publish or subscribe to
    /// `channel` (a subscriber stays if one does, as in Redis).
    pub fn may_use_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.selectors()
            .any(|s| s.channel_allowed(channel, is_pattern))
    }
}

/// A key pattern as a rule. A read-write `*` reached through `%RW~*` (not
/// `allkeys`) prints as `%RW~*`: Redis prints `~*`, which reads back as
/// `allkeys`, after which the user's other patterns are refused, so its
/// `ACL LIST` could not be loaded again.
fn pattern_bytes(p: &KeyPattern) -> Vec<u8> {
    let prefix: &[u8] = match (p.access.read, p.access.write) {
        (true, false) => b"%R~",
        (false, true) => b"%W~",
        _ if &*p.pattern == b"*" => b"%RW~",
        _ => b"~",
    };
    [prefix, &p.pattern].concat()
}
