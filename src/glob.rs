//! Redis's glob matching (`stringmatchlen`), for `KEYS`, `SCAN MATCH`,
//! `CONFIG GET` and `COMMAND LIST FILTERBY PATTERN`.
//!
//! Hand-written because the glob crates match paths or UTF-8 text, while
//! keys are arbitrary bytes and Redis's dialect (`[^a-z]`, `\` escapes, an
//! unclosed `[`) has its own edge cases. It backtracks only to the last `*`,
//! so a hostile pattern like `*a*a*a*a*b` costs O(pattern x key), not
//! exponential time.

/// True if `s` matches the glob `pattern`.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    let (hit, next) = class(pattern, p, s[i]);
                    if hit {
                        p = next;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == s[i] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[i] {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp + 1;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[open] == b'['`;
/// returns whether it matched and the index just past the class.
fn class(pattern: &[u8], open: usize, c: u8) -> (bool, usize) {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' if i + 1 < pattern.len() => {
                hit |= pattern[i + 1] == c;
                i += 2;
            }
            b']' => {
                i += 1;
                return (hit != negate, i);
            }
            lo if i + 2 < pattern.len() && pattern[i + 1] == b'-' => {
                let hi = pattern[i + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                i += 3;
            }
            other => {
                hit |= other == c;
                i += 1;
            }
        }
    }
    // An unclosed class ends with the pattern, as in Redis.
    (hit != negate, i)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        let yes = [
            ("*", ""),
            ("*", "anything"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("rl:*:day", "rl:user42:day"),
            ("a\\*b", "a*b"),
            ("*a*a*b", "aaaaaab"),
            ("[abc", "b"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes()), "{p} should match {s}");
        }
        let no = [
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("*a*a*a*a*a*a*a*b", &"a".repeat(5000)),
        ];
        for (p, s) in no {
            assert!(
                !matches(p.as_bytes(), s.as_bytes()),
                "{p} should not match {s}"
            );
        }
    }
}
