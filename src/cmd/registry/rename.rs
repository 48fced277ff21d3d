//! `--rename-command NAME NEWNAME`: any client able to run `FLUSHALL`,
//! `CONFIG SET` or `RL.RESET` can lift every limit, so, as in Redis, such
//! commands can be given a secret name or disabled (an empty new name).

use std::collections::HashMap;

use super::spec::Registry;
pub use crate::state::Renames;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenameError {
    #[error("rename-command: no command named '{0}'")]
    Unknown(String),
    #[error("rename-command: '{0}' is already a command name")]
    Taken(String),
    #[error("rename-command: '{0}' is renamed twice")]
    Twice(String),
}

/// Builds the table from (name, new name) pairs; an empty new name
/// disables the command.
pub fn build(registry: &Registry, pairs: &[(String, String)]) -> Result<Renames, RenameError> {
    let lookup = |name: &[u8]| registry.lookup(name);
    let mut by_name: HashMap<Vec<u8>, Option<usize>> = HashMap::new();
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
        by_name.insert(new_lower, Some(registry.index_of(spec)));
    }
    Ok(Renames { by_name })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::registry::table::REGISTRY;

    fn build(pairs: &[(String, String)]) -> Result<Renames, RenameError> {
        super::build(&REGISTRY, pairs)
    }

    fn lookup<'a>(
        r: &'a Renames,
    ) -> impl Fn(&[u8]) -> Option<&'static crate::cmd::CommandSpec> + 'a {
        move |name| REGISTRY.renamed(r, name)
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn rename_and_disable() {
        let r = build(&pairs(&[("FLUSHALL", "wipe-7f3a"), ("config", "")])).unwrap();
        assert!(lookup(&r)(b"flushall").is_none());
        assert_eq!(lookup(&r)(b"WIPE-7F3A").unwrap().name, "flushall");
        assert!(lookup(&r)(b"CONFIG").is_none());
        assert_eq!(lookup(&r)(b"get").unwrap().name, "get");
        // Swapping two names is allowed.
        let r = build(&pairs(&[("get", "set"), ("set", "get")])).unwrap();
        assert_eq!(lookup(&r)(b"set").unwrap().name, "get");
    }

    /// The memo of the last name resolves as the lookup does, request
    /// after request, with and without renames: case, unknown names,
    /// subcommands and arity included.
    #[test]
    fn the_name_memo_resolves_as_the_lookup() {
        use crate::protocol::decode::{Decoder, Limits};
        use crate::protocol::request::{encode, ArgsMemo};
        let requests: &[&[&str]] = &[
            &["get", "k"],
            &["get", "k"],
            &["GET", "k"],
            &["get"],
            &["set", "k", "v"],
            &["Set", "k", "v"],
            &["config", "get", "x"],
            &["CONFIG", "nope"],
            &["wipe-7f3a"],
            &["nope", "a"],
            &["nope", "a"],
            &["client", "list"],
            &["CLIENT", "LIST"],
            &["client", "nope"],
            &["ping"],
            &["ping"],
            &["ping", "a", "b"],
        ];
        for renames in [
            build(&[]).unwrap(),
            build(&pairs(&[
                ("get", "set"),
                ("set", "get"),
                ("config", ""),
                ("flushall", "wipe-7f3a"),
            ]))
            .unwrap(),
        ] {
            let mut memo = ArgsMemo::default();
            for args in requests {
                let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                let mut buf = bytes::BytesMut::from(&encode(&bytes)[..]);
                let mut decoder = Decoder::default();
                let req = decoder
                    .decode(&mut buf, Limits::default())
                    .unwrap()
                    .unwrap();
                let remembered = REGISTRY.resolve_remembered(&renames, &mut memo, &req);
                let looked_up = REGISTRY.resolve_renamed(&renames, &req);
                match (remembered, looked_up) {
                    (Ok((a, a_sub)), Ok((b, b_sub))) => {
                        assert!(std::ptr::eq(a, b), "{args:?}");
                        assert_eq!(a_sub.map(|s| s.name), b_sub.map(|s| s.name), "{args:?}");
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{args:?}"),
                    (a, b) => panic!("{args:?}: memo {:?}, lookup {:?}", a.is_ok(), b.is_ok()),
                }
            }
        }
    }

    #[test]
    fn errors() {
        assert_eq!(
            build(&pairs(&[("nope", "x")])).unwrap_err(),
            RenameError::Unknown("nope".into())
        );
        assert_eq!(
            build(&pairs(&[("flushall", "get")])).unwrap_err(),
            RenameError::Taken("get".into())
        );
        assert_eq!(
            build(&pairs(&[("flushall", "a"), ("FLUSHALL", "b")])).unwrap_err(),
            RenameError::Twice("FLUSHALL".into())
        );
    }
}
