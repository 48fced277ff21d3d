//! The shape of the source tree, checked: no import circle between files,
//! no file over 1,000 lines outside its tests, a command layer split by
//! job, and every `unsafe` block justified.
//!
//! Hand-written rather than a crate: what counts as an import here (a
//! `use` tree, `super::{a, b}` included, and any path written inline in
//! code) is this project's rule, and the scan is a few hundred lines of
//! string handling with nothing to configure. It reads the source, so it
//! runs with `cargo test` and needs nothing installed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// One source file as a module: its path from the crate root, its text
/// with comments, strings and `#[cfg(test)]` modules removed.
struct File {
    rel: String,
    module: Vec<String>,
    code: String,
    lines_outside_tests: usize,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` is `a::b`, `src/a/mod.rs` is `a`, `src/lib.rs` the root.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Blanks comments and string literals (keeping line breaks), so neither
/// a doc comment's `crate::x` nor a message's text reads as an import.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r' && matches!(b.get(i + 1), Some(b'"' | b'#')) && !ident_byte(prev(b, i))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if b.get(i) == Some(&b'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' {
            // A char literal ('a', '\n', '\'') or a lifetime ('a).
            let close = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn prev(b: &[u8], i: usize) -> u8 {
    if i == 0 {
        b' '
    } else {
        b[i - 1]
    }
}

fn ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Removes every `#[cfg(test)]` item (a test module, a test-only
/// function): tests may reach anything, and do not count towards a file's
/// length. Returns the code left and how many lines it spans.
fn drop_tests(code: &str) -> (String, usize) {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at its first `;` before any `{`, or at the brace
        // that closes its first `{`.
        let b = after.as_bytes();
        let mut depth = 0usize;
        let mut end = b.len();
        for (k, &c) in b.iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    // Comments and strings were blanked with their line breaks kept, so
    // this is the file's own line count less its tests.
    let lines = out.lines().count();
    (out, lines)
}

fn load() -> Vec<File> {
    let root = src_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths
        .into_iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under src/")
                .to_string_lossy()
                .replace('\\', "/");
            // The binary and the fuzzing harness sit outside the library.
            if rel == "main.rs" || rel.starts_with("bin/") {
                return None;
            }
            let text = std::fs::read_to_string(&p).expect("source is UTF-8");
            let (code, lines_outside_tests) = drop_tests(&strip(&text));
            Some(File {
                module: module_of(&rel),
                rel,
                code,
                lines_outside_tests,
            })
        })
        .collect()
}

/// Every `use` tree in `code`, expanded into whole paths
/// (`use super::{a, b::c}` is `super::a` and `super::b::c`).
fn use_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while let Some(at) = code[i..].find("use ") {
        let start = i + at;
        i = start + 4;
        if start > 0 && ident_byte(b[start - 1]) {
            continue;
        }
        let Some(end) = code[i..].find(';') else {
            break;
        };
        let tree: String = code[i..i + end].split_whitespace().collect();
        expand(&tree, &mut Vec::new(), &mut paths);
        i += end;
    }
    paths
}

fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_start_matches("::");
    // Split at top-level commas first.
    let mut depth = 0;
    let mut last = 0;
    let mut parts = Vec::new();
    for (k, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[last..k]);
                last = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[last..]);
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        if let Some(brace) = part.find('{') {
            let head: Vec<String> = part[..brace]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let inner = &part[brace + 1..part.rfind('}').unwrap_or(part.len())];
            let n = prefix.len();
            prefix.extend(head);
            expand(inner, prefix, out);
            prefix.truncate(n);
        } else {
            let name = part.split(" as ").next().unwrap_or(part);
            let name = name.split("as").next().unwrap_or(name);
            let mut path = prefix.clone();
            path.extend(
                name.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            out.push(path);
        }
    }
}

/// Paths written inline in code: `crate::a::b`, `super::x`, `self::y`, or
/// `name::z` where `name` is a child module or a `use`d module alias.
fn inline_paths(code: &str, heads: &BTreeSet<String>) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if ident_byte(b[i]) && (i == 0 || !(ident_byte(b[i - 1]) || b[i - 1] == b':')) {
            let mut j = i;
            let mut path = Vec::new();
            loop {
                let s = j;
                while j < b.len() && ident_byte(b[j]) {
                    j += 1;
                }
                path.push(code[s..j].to_owned());
                if code[j..].starts_with("::") && b.get(j + 2).is_some_and(|&c| ident_byte(c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            if path.len() > 1 && heads.contains(&path[0]) {
                out.push(path);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The file a path lands in: the deepest module the path names.
fn resolve(
    from: &[String],
    path: &[String],
    aliases: &HashMap<String, Vec<String>>,
    modules: &BTreeMap<Vec<String>, usize>,
) -> Option<usize> {
    let mut cur: Vec<String>;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            cur = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            cur = from.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            cur = from.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                cur.pop();
                rest = &rest[1..];
            }
        }
        Some(head) => {
            let mut child = from.to_vec();
            child.push(head.to_owned());
            if modules.contains_key(&child) {
                cur = child;
                rest = &path[1..];
            } else if let Some(target) = aliases.get(head) {
                cur = target.clone();
                rest = &path[1..];
            } else {
                return None;
            }
        }
        None => return None,
    }
    for seg in rest {
        let mut next = cur.clone();
        next.push(seg.clone());
        if modules.contains_key(&next) {
            cur = next;
        } else {
            break;
        }
    }
    modules.get(&cur).copied()
}

/// File-to-file import edges (a file's own module and its ancestors'
/// `mod` declarations are not imports).
fn edges(files: &[File]) -> Vec<BTreeSet<usize>> {
    let modules: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let uses = use_paths(&f.code);
            // `use crate::cmd;` makes `cmd::x` inline mean `crate::cmd::x`.
            let mut aliases = HashMap::new();
            for p in &uses {
                // `use super::*;` brings the glob's child modules into
                // scope: `call::install` then means `super::call`.
                if p.last().is_some_and(|l| l == "*") {
                    if let Some(t) =
                        resolve(&f.module, &p[..p.len() - 1], &HashMap::new(), &modules)
                    {
                        let m = &files[t].module;
                        for child in modules.keys() {
                            if child.len() == m.len() + 1 && child.starts_with(m) {
                                aliases.insert(child[m.len()].clone(), child.clone());
                            }
                        }
                    }
                    continue;
                }
                if let Some(t) = resolve(&f.module, p, &HashMap::new(), &modules) {
                    if files[t].module.last() == p.last() {
                        aliases.insert(
                            p.last().cloned().unwrap_or_default(),
                            files[t].module.clone(),
                        );
                    }
                }
            }
            let mut heads: BTreeSet<String> = ["crate", "super", "self"]
                .into_iter()
                .map(str::to_owned)
                .collect();
            heads.extend(aliases.keys().cloned());
            for m in modules.keys() {
                if m.len() == f.module.len() + 1 && m.starts_with(&f.module) {
                    heads.insert(m[m.len() - 1].clone());
                }
            }
            let mut out = BTreeSet::new();
            for p in uses.iter().chain(inline_paths(&f.code, &heads).iter()) {
                if let Some(t) = resolve(&f.module, p, &aliases, &modules) {
                    if t != i {
                        out.insert(t);
                    }
                }
            }
            out
        })
        .collect()
}

/// Tarjan's strongly connected components: each import circle.
fn circles(n: usize, edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges[v].iter() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Circles still to be cut, each named by its sorted files: a ratchet. A
/// circle not listed fails the test, and so does a listed one that is
/// gone (take it off the list).
const KNOWN_CIRCLES: &[&str] = &[];

#[test]
fn no_import_circle_between_files() {
    let files = &load();
    let e = &edges(files);
    let found = circles(files.len(), e);
    let described: Vec<(String, String)> = found
        .iter()
        .map(|scc| {
            let mut names: Vec<&str> = scc.iter().map(|&i| files[i].rel.as_str()).collect();
            names.sort();
            // The imports inside the circle, so the one to cut can be found.
            let mut inside: Vec<String> = scc
                .iter()
                .flat_map(|&a| {
                    e[a].iter()
                        .filter(|b| scc.contains(b))
                        .map(move |&b| format!("  {} -> {}", files[a].rel, files[b].rel))
                })
                .collect();
            inside.sort();
            (names.join(", "), inside.join("\n"))
        })
        .collect();
    let new: Vec<String> = described
        .iter()
        .filter(|(names, _)| !KNOWN_CIRCLES.contains(&names.as_str()))
        .map(|(names, inside)| format!("{names}\n{inside}"))
        .collect();
    assert!(
        new.is_empty(),
        "import circles (a file importing one that imports it back, through any chain):\n{}",
        new.join("\n")
    );
    let gone: Vec<&str> = KNOWN_CIRCLES
        .iter()
        .copied()
        .filter(|k| !described.iter().any(|(names, _)| names == k))
        .collect();
    assert!(
        gone.is_empty(),
        "circles cut: take them off KNOWN_CIRCLES: {gone:?}"
    );
}

#[test]
fn the_scan_sees_a_circle_through_super_braces() {
    // The scan itself, on a made-up tree: `a` imports `b` through a brace
    // list, `b` reaches back inline; the leaf names `a` only in a string.
    let mk = |rel: &str, code: &str| File {
        rel: rel.to_owned(),
        module: module_of(rel),
        code: strip(code),
        lines_outside_tests: 0,
    };
    let files = vec![
        mk("x/mod.rs", "pub mod a; pub mod b; pub mod leaf;"),
        mk("x/a.rs", "use super::{b::Thing, leaf};"),
        mk("x/b.rs", "fn f() { crate::x::a::g(); } // crate::x::leaf"),
        mk("x/leaf.rs", "fn g() -> &'static str { \"crate::x::a\" }"),
    ];
    let e = edges(&files);
    assert_eq!(e[1], BTreeSet::from([2, 3]));
    assert_eq!(e[2], BTreeSet::from([1]), "comments are not imports");
    assert!(e[3].is_empty(), "strings are not imports");
    let found = circles(files.len(), &e);
    assert_eq!(found.len(), 1);
    let mut scc = found[0].clone();
    scc.sort();
    assert_eq!(scc, vec![1, 2]);
}

#[test]
fn no_file_over_a_thousand_lines_outside_its_tests() {
    let long: Vec<String> = load()
        .into_iter()
        .filter(|f| f.lines_outside_tests > 1000)
        .map(|f| format!("{}: {} lines", f.rel, f.lines_outside_tests))
        .collect();
    assert!(
        long.is_empty(),
        "split these along their seams:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_command_layer_is_split_by_job() {
    let top: Vec<String> = std::fs::read_dir(src_dir().join("cmd"))
        .expect("src/cmd")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        top.len() <= 12,
        "src/cmd/ has {} entries at its top level (at most 12): {top:?}",
        top.len()
    );
}

/// The files that may reach `State`, what every command can reach: the
/// command layer, the server over it, and the harness that stands in for
/// the server. The layers below them (protocol, limiter, store, and the
/// services: policy, stats, persist, replication, clients, cluster) are
/// handed what they need, so a service is testable without a server and
/// no import runs up the layers.
const ABOVE_STATE: &[&str] = &["cmd/", "server/", "harness.rs", "state.rs"];

#[test]
fn nothing_below_the_command_layer_imports_state() {
    let files = &load();
    let e = &edges(files);
    let state = files
        .iter()
        .position(|f| f.rel == "state.rs")
        .expect("src/state.rs");
    let up: Vec<&str> = files
        .iter()
        .enumerate()
        .filter(|(i, f)| {
            !ABOVE_STATE.iter().any(|a| f.rel.starts_with(a)) && e[*i].contains(&state)
        })
        .map(|(_, f)| f.rel.as_str())
        .collect();
    assert!(
        up.is_empty(),
        "these import crate::state from below cmd/ (hand them what they need instead): {up:?}"
    );
}
