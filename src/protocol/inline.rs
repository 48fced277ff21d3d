//! Inline commands (`PING\r\n`, as telnet and redis-benchmark's PING_INLINE
//! send), split exactly as Redis's `sdssplitargs` splits them.

use std::ops::Range;

/// The closing quote is not followed by a space, or a quote never closes.
#[derive(Debug, PartialEq, Eq)]
pub struct UnbalancedQuotes;

/// C's `isspace`, which `sdssplitargs` uses between arguments.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Splits `line` into arguments, pushing their spans onto `spans`.
///
/// Returns `false` when every span points into `line` (no quotes: the common
/// case costs no copy) and `true` when the arguments were unescaped into
/// `scratch` and the spans point there.
pub fn split_inline(
    line: &[u8],
    spans: &mut Vec<Range<usize>>,
    scratch: &mut Vec<u8>,
) -> Result<bool, UnbalancedQuotes> {
    if memchr::memchr2(b'"', b'\'', line).is_none() {
        let mut i = 0;
        while i < line.len() {
            while i < line.len() && is_space(line[i]) {
                i += 1;
            }
            if i == line.len() {
                break;
            }
            let start = i;
            while i < line.len() && !matches!(line[i], b' ' | b'\n' | b'\r' | b'\t') {
                i += 1;
            }
            spans.push(start..i);
        }
        return Ok(false);
    }
    split_quoted(line, spans, scratch)?;
    Ok(true)
}

fn split_quoted(
    line: &[u8],
    spans: &mut Vec<Range<usize>>,
    out: &mut Vec<u8>,
) -> Result<(), UnbalancedQuotes> {
    let at = |i: usize| line.get(i).copied();
    let mut i = 0;
    loop {
        while at(i).is_some_and(is_space) {
            i += 1;
        }
        if i >= line.len() {
            return Ok(());
        }
        let start = out.len();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let Some(c) = at(i) else {
                if in_double || in_single {
                    return Err(UnbalancedQuotes);
                }
                break;
            };
            if in_double {
                if c == b'\\' && at(i + 1) == Some(b'x') {
                    if let (Some(h), Some(l)) =
                        (at(i + 2).and_then(hex_value), at(i + 3).and_then(hex_value))
                    {
                        out.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    out.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    // The closing quote must be followed by a space or end.
                    if at(i + 1).is_some_and(|n| !is_space(n)) {
                        return Err(UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                out.push(c);
            } else if in_single {
                if c == b'\\' && at(i + 1) == Some(b'\'') {
                    out.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if at(i + 1).is_some_and(|n| !is_space(n)) {
                        return Err(UnbalancedQuotes);
                    }
                    i += 1;
                    break;
                }
                out.push(c);
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' => break,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => out.push(c),
                }
            }
            i += 1;
        }
        spans.push(start..out.len());
    }
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> Result<Vec<Vec<u8>>, UnbalancedQuotes> {
        let (mut spans, mut scratch) = (Vec::new(), Vec::new());
        let copied = split_inline(line.as_bytes(), &mut spans, &mut scratch)?;
        let src: &[u8] = if copied { &scratch } else { line.as_bytes() };
        Ok(spans.into_iter().map(|r| src[r].to_vec()).collect())
    }

    fn v(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn plain_words() {
        assert_eq!(split("  SET  k\tv ").unwrap(), v(&["SET", "k", "v"]));
        assert_eq!(split("").unwrap(), v(&[]));
        assert_eq!(split("   ").unwrap(), v(&[]));
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            split(r#"set "a b" 'c d'"#).unwrap(),
            v(&["set", "a b", "c d"])
        );
        assert_eq!(split(r#""\x41\n""#).unwrap(), vec![b"A\n".to_vec()]);
        assert_eq!(split(r#"'it\'s'"#).unwrap(), v(&["it's"]));
        assert_eq!(split(r#"a"b c"d"#), Err(UnbalancedQuotes));
        assert_eq!(split(r#"foo"bar" baz"#).unwrap(), v(&["foobar", "baz"]));
        assert_eq!(split(r#""unterminated"#), Err(UnbalancedQuotes));
        assert_eq!(split(r#"'unterminated"#), Err(UnbalancedQuotes));
        assert_eq!(split(r#""closed"x"#), Err(UnbalancedQuotes));
        assert_eq!(split(r#""""#).unwrap(), v(&[""]));
    }
}
