//! The ACL file (`--aclfile`), in Redis 7.0's format: one `user <name>
//! <rules...>` line per user, blank lines skipped, anything else an
//! error naming its line. Reading checks every line before anything is
//! applied (Redis's `ACLLoadFromFile`): the caller gets all the users, or
//! every error found, in Redis's words, and changes nothing. Writing is
//! `ACL LIST`'s lines, one per user.
//!
//! A `#` line is an error, as in Redis: `ACL SAVE` rewrites the file, and
//! a comment would be lost without a word.

use std::io::Read;
use std::path::Path;

use super::user::{has_spaces, merge_selectors, RuleError};
use super::{Catalog, User};

/// The largest file read (64 MiB, a million users of modest rules): a
/// path pointed at something endless (`/dev/zero`) is refused, not read
/// until memory runs out.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Errors listed before the rest are only counted: a file of garbage
/// gives a reply of a few lines, not one per line.
const MAX_ERRORS: usize = 20;

/// What Redis appends to the errors of a file that was not loaded.
const NO_CHANGE: &str =
    "WARNING: ACL errors detected, no change to the previously active ACL rules was performed";

/// Reads `path` and checks every line: its users, in file order, or the
/// errors, all on one line as Redis replies them.
pub fn read(path: &Path, cat: &Catalog) -> Result<Vec<User>, String> {
    let shown = path.display();
    let opening = |e: std::io::Error| {
        format!(
            "Error loading ACLs, opening file '{shown}': {}",
            os_text(&e)
        )
    };
    let file = std::fs::File::open(path).map_err(opening)?;
    // Redis's fopen takes a directory and reads it as empty, which
    // deleted every user: refused here.
    let meta = file.metadata().map_err(opening)?;
    if meta.is_dir() {
        return Err(format!(
            "Error loading ACLs, opening file '{shown}': Is a directory"
        ));
    }
    let mut text = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| {
            format!(
                "Error loading ACLs, reading file '{shown}': {}",
                os_text(&e)
            )
        })?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "Error loading ACLs, file '{shown}' is larger than {} MiB",
            MAX_FILE_BYTES >> 20
        ));
    }
    parse(&shown.to_string(), &text, cat)
}

/// An I/O error as `strerror` words it, without Rust's `(os error N)`.
fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// At most 128 bytes of what a client or file gave, for an error.
fn show(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&b[..b.len().min(128)])
}

fn trim<'a>(mut s: &'a [u8], set: &[u8]) -> &'a [u8] {
    while let [first, rest @ ..] = s {
        if !set.contains(first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !set.contains(last) {
            break;
        }
        s = rest;
    }
    s
}

/// The lines of an ACL file, as Redis's `ACLLoadFromFile` reads them:
/// split on `\n`, each trimmed of spaces, tabs and line ends, then split
/// on single spaces (two spaces make an empty rule, which does nothing),
/// each rule trimmed of tabs and line ends. `file` names the file in
/// errors.
pub fn parse(file: &str, text: &[u8], cat: &Catalog) -> Result<Vec<User>, String> {
    let mut errors: Vec<String> = Vec::new();
    let mut users: Vec<User> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, raw) in text.split(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        let line = trim(raw, b" \t\r\n");
        if line.is_empty() {
            continue;
        }
        let argv: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        if argv[0] != b"user" || argv.len() < 2 {
            errors.push(format!(
                "{file}:{n} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = argv[1];
        if has_spaces(name) {
            errors.push(format!(
                "{file}:{n}: username '{}' contains invalid characters. ",
                show(name)
            ));
            continue;
        }
        if !seen.insert(name) {
            errors.push(format!(
                "WARNING: Duplicate user '{}' found on line {n}. ",
                show(name)
            ));
            continue;
        }
        // Selectors spread over words (`(~x` `+get)`) are joined first,
        // then each rule trimmed, as Redis's `ACLLoadFromFile` does.
        let rules = match merge_selectors(&argv[2..]) {
            Ok(rules) => rules,
            Err(_) => {
                // Redis 7.0.15 crashes here (it reads the rules it failed
                // to merge); its words for the error, and the line skipped.
                errors.push(format!(
                    "{file}:{n}: Unmatched parenthesis in selector definition. "
                ));
                continue;
            }
        };
        let mut u = User::new(name);
        let mut syntax_error = false;
        for rule in &rules {
            let rule = trim(rule, b"\t\r\n");
            match u.apply(cat, rule) {
                Ok(()) => {}
                // Redis names the rule only for an unknown command: other
                // rules may hold a password.
                Err(RuleError::Unknown) => errors.push(format!(
                    "{file}:{n}: Error in applying operation '{}': {}. ",
                    show(rule),
                    RuleError::Unknown.text()
                )),
                Err(e) if !syntax_error => {
                    syntax_error = true;
                    errors.push(format!("{file}:{n}: {}. ", e.text()));
                }
                Err(_) => {}
            }
        }
        if errors.is_empty() {
            users.push(u);
        }
    }
    if errors.is_empty() {
        return Ok(users);
    }
    let mut text = String::new();
    for e in errors.iter().take(MAX_ERRORS) {
        text.push_str(e);
    }
    if errors.len() > MAX_ERRORS {
        text.push_str(&format!("({} more errors) ", errors.len() - MAX_ERRORS));
    }
    text.push_str(NO_CHANGE);
    Err(text)
}

/// The file `ACL SAVE` writes: `user <name> <rules>` for each user, as
/// `ACL LIST` prints them. A line break inside a line would make another
/// line of the file (a user no one declared): refused, never written.
pub fn render<'a>(
    users: impl IntoIterator<Item = &'a User>,
    cat: &Catalog,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for u in users {
        let start = out.len();
        out.extend_from_slice(b"user ");
        out.extend_from_slice(&u.name);
        out.push(b' ');
        out.extend_from_slice(&u.describe(cat));
        if out[start..].iter().any(|b| *b == b'\n' || *b == b'\r') {
            return Err(format!(
                "the rules of user '{}' hold a line break",
                show(&u.name)
            ));
        }
        out.push(b'\n');
    }
    Ok(out)
}
