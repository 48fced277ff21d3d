//! `ACL LOG`: the latest refusals (a command, a key, a channel, a
//! password), newest first, similar ones within a minute counted in one
//! entry, as Redis's `addACLLogEntry` keeps them.

use std::collections::VecDeque;

use parking_lot::Mutex;

/// Entries kept (Redis's `acllog-max-len` default).
pub const MAX_ENTRIES: usize = 128;

/// Refusals this close together (and alike) count in one entry.
const GROUPING_MS: u64 = 60_000;

/// Entries compared with a new one before it is added (Redis's bound on
/// the work).
const SCAN: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused command ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    /// The command's full name, the key, the channel, or for a password
    /// the command that gave it (`AUTH`, `HELLO`, as sent).
    pub object: Box<[u8]>,
    pub username: Box<[u8]>,
    /// Server time of the latest refusal, in milliseconds.
    pub ms: u64,
    /// The client as `CLIENT LIST` shows it, at the latest refusal.
    pub client: String,
}

#[derive(Debug, Default)]
pub struct Log {
    entries: Mutex<VecDeque<Entry>>,
}

impl Log {
    /// Records a refusal: counted in a recent alike entry (moved to the
    /// front), else added, the oldest entries dropped past the limit.
    pub fn add(&self, e: Entry) {
        let mut entries = self.entries.lock();
        let alike = entries.iter().take(SCAN).position(|o| {
            o.reason == e.reason
                && o.context == e.context
                && o.ms.abs_diff(e.ms) <= GROUPING_MS
                && o.object == e.object
                && o.username == e.username
        });
        match alike.and_then(|i| entries.remove(i)) {
            Some(mut o) => {
                o.count += 1;
                o.ms = e.ms;
                o.client = e.client;
                entries.push_front(o);
            }
            None => {
                entries.push_front(e);
                entries.truncate(MAX_ENTRIES);
            }
        }
    }

    /// The newest `n` entries.
    pub fn latest(&self, n: usize) -> Vec<Entry> {
        self.entries.lock().iter().take(n).cloned().collect()
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(object: &str, ms: u64) -> Entry {
        Entry {
            count: 1,
            reason: Reason::Key,
            context: Context::Toplevel,
            object: object.as_bytes().into(),
            username: (*b"u").into(),
            ms,
            client: String::new(),
        }
    }

    #[test]
    fn alike_refusals_within_a_minute_share_an_entry() {
        let log = Log::default();
        log.add(entry("a", 0));
        log.add(entry("b", 1));
        log.add(entry("a", 60_000));
        let l = log.latest(10);
        assert_eq!(l.len(), 2);
        assert_eq!((&*l[0].object, l[0].count, l[0].ms), (&b"a"[..], 2, 60_000));
        // Past a minute since the entry's latest: a new entry.
        log.add(entry("a", 120_001));
        assert_eq!(log.latest(10).len(), 3);
        for i in 0..200 {
            log.add(entry(&i.to_string(), 0));
        }
        assert_eq!(log.latest(usize::MAX).len(), MAX_ENTRIES);
        log.reset();
        assert!(log.latest(10).is_empty());
    }
}
