//! A look ahead at the requests waiting in a read buffer, without decoding
//! them: the first argument after each command name, which for nearly
//! every command a limiter client sends (`RL.ALLOW`, `CL.THROTTLE`, `INCR`,
//! `GET`, `EVALSHA`'s is not, and costs one wasted hint) is its key.
//!
//! The batch loop hands these to the store as prefetch hints before it
//! runs the batch, so that the cache misses of a pipeline's lookups
//! overlap instead of queueing one after another. A hint is never trusted:
//! anything this scan does not recognise stops it, and the decoder, which
//! checks everything, still decodes every request.

use super::decode::MAX_MULTIBULK;

/// Fills `keys` from the front with the second argument of each complete
/// multibulk request at the front of `buf`, in order, stopping at the
/// first request that is incomplete, inline, or malformed, or when `keys`
/// is full. Requests of one argument are passed over (they have no key).
/// Returns how many requests it read and how many keys it found.
pub fn second_args<'b>(buf: &'b [u8], keys: &mut [&'b [u8]]) -> (usize, usize) {
    let mut pos = 0;
    let mut found = 0;
    let mut requests = 0;
    while found < keys.len() {
        let Some((count, next)) = header(buf, pos, b'*') else {
            break;
        };
        if !(1..=MAX_MULTIBULK as u64).contains(&count) {
            break;
        }
        pos = next;
        let mut key = None;
        for arg in 0..count {
            let Some((len, next)) = header(buf, pos, b'$') else {
                return (requests, found);
            };
            let Some(end) = usize::try_from(len).ok().and_then(|l| next.checked_add(l)) else {
                return (requests, found);
            };
            if buf.get(end..end + 2) != Some(b"\r\n") {
                return (requests, found);
            }
            if arg == 1 {
                key = Some(&buf[next..end]);
            }
            pos = end + 2;
        }
        requests += 1;
        if let Some(key) = key {
            keys[found] = key;
            found += 1;
        }
    }
    (requests, found)
}

/// The number in the header line `<kind><digits>\r\n` at `pos`, and the
/// offset after it: digits only, no leading zero, at most 18 of them (a
/// byte loop, as these lines are a few bytes: `memchr` and the decoder's
/// parser cost more than the scan saves).
fn header(buf: &[u8], pos: usize, kind: u8) -> Option<(u64, usize)> {
    if *buf.get(pos)? != kind {
        return None;
    }
    let digits = pos + 1;
    let mut n: u64 = 0;
    let mut i = digits;
    loop {
        let b = *buf.get(i)?;
        if b == b'\r' {
            break;
        }
        if !b.is_ascii_digit() || i - digits == 18 || (i > digits && n == 0) {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
        i += 1;
    }
    (i > digits && buf.get(i + 1) == Some(&b'\n')).then_some((n, i + 2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Decoder, Limits};
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn enc(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    #[test]
    fn stops_at_anything_unfinished_or_foreign() {
        let mut keys = [&b""[..]; 4];
        let mut buf = enc(&[b"RL.ALLOW", b"k1", b"10", b"60"]);
        buf.extend(enc(&[b"PING"]));
        buf.extend(enc(&[b"GET", b"k2"]));
        buf.extend(b"*2\r\n$3\r\nGET\r\n$2\r\nk");
        assert_eq!(second_args(&buf, &mut keys), (3, 2));
        assert_eq!(&keys[..2], &[&b"k1"[..], &b"k2"[..]]);
        assert_eq!(
            second_args(b"PING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", &mut keys),
            (0, 0)
        );
        assert_eq!(
            second_args(b"*2\r\n$3\r\nGET\r\n$-1\r\n", &mut keys),
            (0, 0)
        );
        assert_eq!(
            second_args(b"*2\r\n$3\r\nGET\r\n$1\r\nkX\r\n", &mut keys),
            (0, 0)
        );
        assert_eq!(
            second_args(b"*2\r\n$3\r\nGET\r\n$01\r\nk\r\n", &mut keys),
            (0, 0)
        );
        assert_eq!(
            second_args(b"*99999999999999999999999\r\n", &mut keys),
            (0, 0)
        );
    }

    #[test]
    fn stops_when_full() {
        let mut keys = [&b""[..]; 2];
        let buf: Vec<u8> = (0..5)
            .flat_map(|i| enc(&[b"GET", format!("k{i}").as_bytes()]))
            .collect();
        assert_eq!(second_args(&buf, &mut keys), (2, 2));
        assert_eq!(&keys[..], &[&b"k0"[..], &b"k1"[..]]);
    }

    proptest! {
        /// Whatever the bytes, the keys it finds are the second arguments
        /// the decoder decodes, in order.
        #[test]
        fn agrees_with_the_decoder(
            reqs in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 1..4), 0..6),
            cut in any::<prop::sample::Index>(),
            noise in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut bytes: Vec<u8> = reqs.iter().flat_map(|r| {
                enc(&r.iter().map(Vec::as_slice).collect::<Vec<_>>())
            }).collect();
            bytes.extend(noise);
            let bytes = &bytes[..cut.index(bytes.len() + 1)];
            let mut keys = [&b""[..]; 8];
            let (requests, n) = second_args(bytes, &mut keys);
            prop_assert!(n <= requests);
            let mut decoder = Decoder::default();
            let mut buf = BytesMut::from(bytes);
            let limits = Limits { max_bulk_len: i64::MAX, unauthenticated: false };
            let mut decoded = Vec::new();
            while let Ok(Some(req)) = decoder.decode(&mut buf, limits) {
                if req.len() > 1 {
                    decoded.push(req.arg(1).to_vec());
                }
            }
            prop_assert!(n <= decoded.len());
            for (k, d) in keys[..n].iter().zip(&decoded) {
                prop_assert_eq!(*k, d.as_slice());
            }
        }
    }
}
