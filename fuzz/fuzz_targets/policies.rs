//! Policy files on arbitrary text: `policy::from_texts`, which runs the
//! nesting scan, the YAML parser, every per-descriptor check and the
//! tree build.
//!
//! Input: the bytes of one policy file (non-UTF-8 input is read lossily,
//! as it would be refused whole anyway).
//!
//! Asserts: no panic (overflow included: built with debug assertions); an
//! error names the file and, when it has a line, one within the text; a
//! set that loads loads again from itself with every policy kept (its
//! `since` unchanged), and each policy is found by its name; a first
//! entry of each domain's tree resolves without panicking. Hangs (a
//! quadratic path: the nesting that took libyaml 3.6 s for 80 KB) are
//! caught by fuzz/run.sh's -timeout.

#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::policy::{self, PolicySet};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let set = match policy::from_texts(&[("f.yaml", &text)], &PolicySet::default(), 7) {
        Ok(set) => set,
        Err(e) => {
            assert_eq!(e.path.to_str(), Some("f.yaml"));
            if let Some(line) = e.line {
                assert!(line >= 1 && line <= yaml_lines(&text) + 1, "{e}");
            }
            return;
        }
    };
    let again = policy::from_texts(&[("f.yaml", &text)], &set, 9).expect("loaded once, loads again");
    assert_eq!(again.len(), set.len());
    for (a, b) in set.iter().zip(again.iter()) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.since_ms, b.since_ms, "{} changed nothing", a.name);
        // A name is unique in its domain; one file is one domain.
        assert!(set.get(&a.name).is_ok(), "{} not found by name", a.name);
    }
    let mut key = Vec::new();
    for p in set.iter() {
        // The descriptor path's first entry, `key_value` or `key`.
        let first = p.path[p.domain.len() + 1..].split('.').next().unwrap_or("");
        let (k, v) = first.split_once('_').unwrap_or((first, ""));
        let _ = set.resolve(p.domain.as_bytes(), &[(k.as_bytes(), v.as_bytes())], &mut key);
    }
});

/// Lines as YAML counts them: a lone `\r` breaks a line too (and NEL, LS
/// and PS), where `str::lines` sees only `\n`. A fuzzed file with one lone
/// `\r` had its end-of-stream error on line 84 of 83.
fn yaml_lines(text: &str) -> usize {
    let mut breaks = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => breaks += 1,
            _ => {}
        }
    }
    breaks + 1
}
