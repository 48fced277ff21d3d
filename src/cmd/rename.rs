//! `--rename-command NAME NEWNAME`: any client able to run `FLUSHALL`,
//! `CONFIG SET` or `RL.RESET` can lift every limit, so, as in Redis, such
//! commands can be given a secret name or disabled (an empty new name).

use std::collections::HashMap;

use super::table::{lookup, CommandSpec};

/// The renames in force; empty means every command under its own name.
#[derive(Debug, Default)]
pub struct Renames {
    /// Lower-case name a client sends -> the command it runs, or `None` for
    /// an original name that was renamed away or disabled.
    by_name: HashMap<Vec<u8>, Option<&'static CommandSpec>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenameError {
    #[error("rename-command: no command named '{0}'")]
    Unknown(String),
    #[error("rename-command: '{0}' is already a command name")]
    Taken(String),
    #[error("rename-command: '{0}' is renamed twice")]
    Twice(String),
}

impl Renames {
    /// Builds the table from (name, new name) pairs; an empty new name
    /// disables the command.
    pub fn new(pairs: &[(String, String)]) -> Result<Renames, RenameError> {
        let mut by_name: HashMap<Vec<u8>, Option<&'static CommandSpec>> = HashMap::new();
        for (name, _) in pairs {
            let lower = name.to_ascii_lowercase();
            if lookup(lower.as_bytes()).is_none() {
                return Err(RenameError::Unknown(name.clone()));
            }
            if by_name.insert(lower.into_bytes(), None).is_some() {
                return Err(RenameError::Twice(name.clone()));
            }
        }
        for (name, new) in pairs {
            if new.is_empty() {
                continue;
            }
            let spec = lookup(name.to_ascii_lowercase().as_bytes()).expect("checked above");
            let new_lower = new.to_ascii_lowercase().into_bytes();
            let taken_by_table = lookup(&new_lower).is_some() && !by_name.contains_key(&new_lower);
            if taken_by_table || matches!(by_name.get(&new_lower), Some(Some(_))) {
                return Err(RenameError::Taken(new.clone()));
            }
            by_name.insert(new_lower, Some(spec));
        }
        Ok(Renames { by_name })
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The command a client's name runs, renames applied.
    pub fn lookup(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        if self.by_name.is_empty() {
            return lookup(name);
        }
        // Lower-case into a stack buffer, as the table's own lookup does.
        let mut buf = [0u8; 64];
        let lower = buf.get_mut(..name.len())?;
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        match self.by_name.get(&*lower) {
            Some(renamed) => *renamed,
            None => lookup(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn rename_and_disable() {
        let r = Renames::new(&pairs(&[("FLUSHALL", "wipe-7f3a"), ("config", "")])).unwrap();
        assert!(r.lookup(b"flushall").is_none());
        assert_eq!(r.lookup(b"WIPE-7F3A").unwrap().name, "flushall");
        assert!(r.lookup(b"CONFIG").is_none());
        assert_eq!(r.lookup(b"get").unwrap().name, "get");
        // Swapping two names is allowed.
        let r = Renames::new(&pairs(&[("get", "set"), ("set", "get")])).unwrap();
        assert_eq!(r.lookup(b"set").unwrap().name, "get");
    }

    #[test]
    fn errors() {
        assert_eq!(
            Renames::new(&pairs(&[("nope", "x")])).unwrap_err(),
            RenameError::Unknown("nope".into())
        );
        assert_eq!(
            Renames::new(&pairs(&[("flushall", "get")])).unwrap_err(),
            RenameError::Taken("get".into())
        );
        assert_eq!(
            Renames::new(&pairs(&[("flushall", "a"), ("FLUSHALL", "b")])).unwrap_err(),
            RenameError::Twice("FLUSHALL".into())
        );
    }
}
