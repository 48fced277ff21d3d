//! Tests of the request decoder (`turnstile::protocol::Decoder`): valid RESP
//! arrays and inline commands, every malformed case with Redis's exact
//! wording, requests split at every byte boundary, linear parsing of long
//! dribbled pipelines, and a differential oracle against `redis-protocol`.

use bytes::BytesMut;
use proptest::prelude::*;
use turnstile::harness::encode_request;
use turnstile::protocol::{Decoder, Limits, ProtocolError};

type Args = Vec<Vec<u8>>;

/// Redis's `PROTO_INLINE_MAX_SIZE`.
const INLINE_MAX: usize = 64 * 1024;

fn unauth() -> Limits {
    Limits {
        unauthenticated: true,
        ..Limits::default()
    }
}

fn args(list: &[&[u8]]) -> Args {
    list.iter().map(|a| a.to_vec()).collect()
}

/// What feeding some input produced: the requests in order, then how it
/// ended (an error, or waiting for more bytes with `rest` bytes buffered).
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    requests: Vec<Args>,
    error: Option<ProtocolError>,
    rest: usize,
    bytes_scanned: u64,
}

/// Decodes every complete request at the front of `buf`; stops at `Ok(None)`
/// or the first error.
fn drain(
    decoder: &mut Decoder,
    buf: &mut BytesMut,
    limits: Limits,
    out: &mut Vec<Args>,
) -> Result<(), ProtocolError> {
    loop {
        match decoder.decode(buf, limits)? {
            Some(req) => {
                assert!(!req.is_empty(), "a request always has a command name");
                assert_eq!(req.len(), req.to_vecs().len());
                for i in 0..req.len() {
                    assert_eq!(req.arg(i), req.to_vecs()[i].as_slice());
                }
                out.push(req.to_vecs());
            }
            None => return Ok(()),
        }
    }
}

/// Feeds `input` in the given pieces, decoding after each piece, as a
/// connection does after each read. Stops at the first error.
fn feed<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, limits: Limits) -> Outcome {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut error = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        if let Err(e) = drain(&mut decoder, &mut buf, limits, &mut requests) {
            error = Some(e);
            break;
        }
    }
    Outcome {
        requests,
        error,
        rest: buf.len(),
        bytes_scanned: decoder.bytes_scanned(),
    }
}

fn one_shot(input: &[u8], limits: Limits) -> Outcome {
    feed([input], limits)
}

fn chunked(input: &[u8], size: usize, limits: Limits) -> Outcome {
    feed(input.chunks(size), limits)
}

/// Decodes `input` fed in one piece, expecting it all to be consumed.
fn decode_ok(input: &[u8]) -> Vec<Args> {
    let out = one_shot(input, Limits::default());
    assert_eq!(
        out.error,
        None,
        "input {:?}",
        String::from_utf8_lossy(input)
    );
    assert_eq!(out.rest, 0, "input {:?}", String::from_utf8_lossy(input));
    assert_eq!(out.bytes_scanned, input.len() as u64);
    out.requests
}

/// Decodes `input` fed in one piece, expecting an error; returns its text.
fn decode_err_with(input: &[u8], limits: Limits) -> String {
    match one_shot(input, limits).error {
        Some(e) => e.to_string(),
        None => panic!("no error for {:?}", String::from_utf8_lossy(input)),
    }
}

fn decode_err(input: &[u8]) -> String {
    decode_err_with(input, Limits::default())
}

// ---------------------------------------------------------------------------
// Valid requests
// ---------------------------------------------------------------------------

#[test]
fn resp_array_of_bulk_strings() {
    assert_eq!(decode_ok(b"*1\r\n$4\r\nPING\r\n"), vec![args(&[b"PING"])]);
    assert_eq!(
        decode_ok(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"),
        vec![args(&[b"SET", b"key", b"value"])]
    );
}

#[test]
fn empty_bulk_string() {
    assert_eq!(
        decode_ok(b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$0\r\n\r\n"),
        vec![args(&[b"SET", b"", b""])]
    );
}

#[test]
fn binary_bulk_with_crlf_and_nul_inside() {
    let value: Vec<u8> = (0..=255u8).chain(*b"\r\n\r\n\0*$").collect();
    let req = vec![b"SET".to_vec(), b"k\r\n".to_vec(), value];
    assert_eq!(decode_ok(&encode_request(&req)), vec![req]);
    assert_eq!(
        decode_ok(b"*2\r\n$4\r\nECHO\r\n$2\r\n\r\n\r\n"),
        vec![args(&[b"ECHO", b"\r\n"])]
    );
}

#[test]
fn arg_bytes_is_a_view_of_the_argument() {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\nPING\r\n"[..]);
    let req = decoder
        .decode(&mut buf, Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(&req.arg_bytes(1)[..], b"hello");
    assert_eq!(req.args().collect::<Vec<_>>(), vec![&b"GET"[..], b"hello"]);
    assert!(!req.is_empty());
    assert!(!decoder.in_progress());
    assert_eq!(&buf[..], b"PING\r\n", "only the first request is consumed");
}

#[test]
fn in_progress_tracks_a_partial_multibulk() {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n"[..]);
    assert!(decoder
        .decode(&mut buf, Limits::default())
        .unwrap()
        .is_none());
    assert!(decoder.in_progress());
    buf.extend_from_slice(b"$1\r\nk\r\n");
    let req = decoder
        .decode(&mut buf, Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(req.to_vecs(), args(&[b"GET", b"k"]));
    assert!(!decoder.in_progress());
}

#[test]
fn inline_commands() {
    assert_eq!(decode_ok(b"PING\r\n"), vec![args(&[b"PING"])]);
    assert_eq!(decode_ok(b"PING\n"), vec![args(&[b"PING"])]);
    assert_eq!(
        decode_ok(b"  SET   key\tvalue  \r\n"),
        vec![args(&[b"SET", b"key", b"value"])]
    );
    // A lone CR inside the line separates words, as in sdssplitargs.
    assert_eq!(decode_ok(b"GET a\rb\n"), vec![args(&[b"GET", b"a", b"b"])]);
}

#[test]
fn inline_quotes_and_escapes() {
    assert_eq!(
        decode_ok(b"SET a \"b\\x41\\n\" 'it\\'s'\r\n"),
        vec![args(&[b"SET", b"a", b"bA\n", b"it's"])]
    );
    assert_eq!(
        decode_ok(b"SET \"a b\" 'c \"d\"'\r\n"),
        vec![args(&[b"SET", b"a b", b"c \"d\""])]
    );
    assert_eq!(
        decode_ok(b"ECHO \"\\r\\t\\b\\a\\\\\\\"\\z\" \"\"\r\n"),
        vec![args(&[b"ECHO", b"\r\t\x08\x07\\\"z", b""])]
    );
    // Escapes are only special inside double quotes.
    assert_eq!(
        decode_ok(b"ECHO a\\x41\r\n"),
        vec![args(&[b"ECHO", b"a\\x41"])]
    );
    // A quoted part may follow unquoted text in the same word.
    assert_eq!(
        decode_ok(b"ECHO foo\"bar baz\"\r\n"),
        vec![args(&[b"ECHO", b"foobar baz"])]
    );
    // An invalid \x escape is taken literally (minus the backslash).
    assert_eq!(
        decode_ok(b"ECHO \"\\xZZ\"\r\n"),
        vec![args(&[b"ECHO", b"xZZ"])]
    );
}

#[test]
fn several_requests_in_one_buffer() {
    let input = b"*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nECHO hi\n\
                  *3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    assert_eq!(
        decode_ok(input),
        vec![
            args(&[b"PING"]),
            args(&[b"PING"]),
            args(&[b"GET", b"k"]),
            args(&[b"ECHO", b"hi"]),
            args(&[b"SET", b"k", b"v"]),
        ]
    );
}

#[test]
fn one_request_per_call() {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&b"PING\r\n*1\r\n$4\r\nPING\r\nPI"[..]);
    let limits = Limits::default();
    assert_eq!(
        decoder.decode(&mut buf, limits).unwrap().unwrap().to_vecs(),
        args(&[b"PING"])
    );
    assert_eq!(&buf[..], b"*1\r\n$4\r\nPING\r\nPI");
    assert_eq!(
        decoder.decode(&mut buf, limits).unwrap().unwrap().to_vecs(),
        args(&[b"PING"])
    );
    assert_eq!(&buf[..], b"PI");
    assert!(decoder.decode(&mut buf, limits).unwrap().is_none());
    buf.extend_from_slice(b"NG\r\n");
    assert_eq!(
        decoder.decode(&mut buf, limits).unwrap().unwrap().to_vecs(),
        args(&[b"PING"])
    );
    assert!(buf.is_empty());
    assert!(decoder.decode(&mut buf, limits).unwrap().is_none());
}

#[test]
fn empty_lines_and_empty_arrays_are_skipped() {
    assert_eq!(decode_ok(b"\r\n"), Vec::<Args>::new());
    assert_eq!(decode_ok(b"\n"), Vec::<Args>::new());
    assert_eq!(decode_ok(b"   \t \r\n"), Vec::<Args>::new());
    assert_eq!(decode_ok(b"*0\r\n"), Vec::<Args>::new());
    assert_eq!(decode_ok(b"*-1\r\n"), Vec::<Args>::new());
    assert_eq!(decode_ok(b"*-10\r\n"), Vec::<Args>::new());
    assert_eq!(
        decode_ok(b"\r\n*0\r\n\r\n*-10\r\nPING\r\n*0\r\n*1\r\n$4\r\nPING\r\n\n"),
        vec![args(&[b"PING"]), args(&[b"PING"])]
    );
}

#[test]
fn largest_allowed_values_are_accepted() {
    // The argument-count cap is 1,048,576: the header alone is accepted.
    let out = one_shot(b"*1048576\r\n$1\r\na\r\n", Limits::default());
    assert_eq!(out.error, None);
    assert!(out.requests.is_empty());
    // A bulk exactly at proto-max-bulk-len is accepted (and waited for).
    let limits = Limits {
        max_bulk_len: 10,
        unauthenticated: false,
    };
    let out = one_shot(b"*1\r\n$10\r\n0123456789\r\n", limits);
    assert_eq!(out.error, None);
    assert_eq!(out.requests, vec![args(&[b"0123456789"])]);
    // Unauthenticated: 10 arguments and a 16384-byte bulk are still fine.
    let ten: Vec<Vec<u8>> = (0..10).map(|i| vec![b'a' + i]).collect();
    let out = one_shot(&encode_request(&ten), unauth());
    assert_eq!((out.error, out.requests), (None, vec![ten]));
    let big = vec![vec![b'x'; 16384]];
    let out = one_shot(&encode_request(&big), unauth());
    assert_eq!((out.error, out.requests), (None, vec![big]));
}

// ---------------------------------------------------------------------------
// Malformed requests: Redis's exact wording
// ---------------------------------------------------------------------------

#[test]
fn invalid_multibulk_length() {
    const MSG: &str = "Protocol error: invalid multibulk length";
    assert_eq!(decode_err(b"*20000000\r\n"), MSG);
    assert_eq!(decode_err(b"*1048577\r\n"), MSG);
    assert_eq!(decode_err(b"*abc\r\n"), MSG);
    assert_eq!(decode_err(b"*\r\n"), MSG);
    assert_eq!(decode_err(b"*+1\r\n"), MSG);
    assert_eq!(decode_err(b"*01\r\n"), MSG);
    assert_eq!(decode_err(b"* 1\r\n"), MSG);
    assert_eq!(decode_err(b"*1 \r\n"), MSG);
    assert_eq!(decode_err(b"*99999999999999999999\r\n"), MSG);
    // The cap applies before the unauthenticated check, as in Redis.
    assert_eq!(decode_err_with(b"*20000000\r\n", unauth()), MSG);
}

#[test]
fn invalid_bulk_length() {
    const MSG: &str = "Protocol error: invalid bulk length";
    assert_eq!(decode_err(b"*1\r\n$-10\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$-1\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$2000000000\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$536870913\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$blabla\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$01\r\n"), MSG);
    assert_eq!(
        decode_err(b"*2\r\n$3\r\nGET\r\n$9223372036854775808\r\n"),
        MSG
    );
    let small = Limits {
        max_bulk_len: 10,
        unauthenticated: false,
    };
    assert_eq!(decode_err_with(b"*1\r\n$11\r\n", small), MSG);
    // The same with the bulk's bytes already there: a length is judged
    // before its bytes are taken.
    assert_eq!(decode_err_with(b"*1\r\n$11\r\nhello world\r\n", small), MSG);
    assert_eq!(decode_err_with(b"*1\r\n$2000000000\r\n", unauth()), MSG);
}

#[test]
fn expected_dollar() {
    assert_eq!(
        decode_err(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
        "Protocol error: expected '$', got 'f'"
    );
    assert_eq!(
        decode_err(b"*1\r\n:1\r\n"),
        "Protocol error: expected '$', got ':'"
    );
    // An unprintable byte is shown escaped rather than raw.
    assert_eq!(
        decode_err(b"*1\r\n\x01"),
        "Protocol error: expected '$', got '\\x01'"
    );
}

#[test]
fn bulk_without_crlf_after_its_data() {
    const MSG: &str = "Protocol error: expected CRLF after bulk string";
    assert_eq!(decode_err(b"*1\r\n$3\r\nfooXY"), MSG);
    assert_eq!(decode_err(b"*2\r\n$3\r\nGET\r\n$1\r\nkey\r\n"), MSG);
    assert_eq!(decode_err(b"*1\r\n$3\r\nfoo\n\r"), MSG);
    // Until both bytes after the data are there, it waits.
    let out = one_shot(b"*1\r\n$3\r\nfoo\r", Limits::default());
    assert_eq!((out.error, out.rest), (None, 12));
}

#[test]
fn too_big_inline_request() {
    const MSG: &str = "Protocol error: too big inline request";
    let line = vec![b'a'; 70 * 1024];
    assert_eq!(decode_err(&line), MSG);
    // Fed in reads, it fails as soon as the buffer passes 64 KiB.
    let out = chunked(&line, 1024, Limits::default());
    assert_eq!(out.error.unwrap().to_string(), MSG);
    assert_eq!(out.rest, INLINE_MAX + 1024);
    // Exactly 64 KiB without a newline still waits.
    let out = one_shot(&line[..INLINE_MAX], Limits::default());
    assert_eq!(out.error, None);
}

#[test]
fn too_big_header_lines() {
    let mut mbulk = b"*".to_vec();
    mbulk.resize(70 * 1024, b'1');
    assert_eq!(
        decode_err(&mbulk),
        "Protocol error: too big mbulk count string"
    );
    let out = chunked(&mbulk, 4096, Limits::default());
    assert_eq!(
        out.error.unwrap().to_string(),
        "Protocol error: too big mbulk count string"
    );
    assert!(out.rest <= INLINE_MAX + 4096);

    let mut bulk = b"*1\r\n$".to_vec();
    bulk.resize(70 * 1024, b'1');
    assert_eq!(
        decode_err(&bulk),
        "Protocol error: too big bulk count string"
    );
    let out = chunked(&bulk, 4096, Limits::default());
    assert_eq!(
        out.error.unwrap().to_string(),
        "Protocol error: too big bulk count string"
    );
    assert!(out.rest <= INLINE_MAX + 4096 + 4);
}

#[test]
fn unbalanced_quotes() {
    const MSG: &str = "Protocol error: unbalanced quotes in request";
    assert_eq!(decode_err(b"set \"foo\r\n"), MSG);
    assert_eq!(decode_err(b"set 'foo\r\n"), MSG);
    assert_eq!(decode_err(b"set \"foo\"bar\r\n"), MSG);
    assert_eq!(decode_err(b"set 'foo'bar\n"), MSG);
    assert_eq!(decode_err(b"set \"foo\\\"\r\n"), MSG);
}

#[test]
fn unauthenticated_limits() {
    let eleven: Vec<Vec<u8>> = (0..11).map(|i| vec![b'a' + i]).collect();
    assert_eq!(
        decode_err_with(&encode_request(&eleven), unauth()),
        "Protocol error: unauthenticated multibulk length"
    );
    // Refused on the header alone, before any argument arrives.
    assert_eq!(
        decode_err_with(b"*11\r\n", unauth()),
        "Protocol error: unauthenticated multibulk length"
    );
    assert_eq!(
        decode_err_with(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", unauth()),
        "Protocol error: unauthenticated bulk length"
    );
    let whole = vec![b"AUTH".to_vec(), vec![b'p'; 16385]];
    assert_eq!(
        decode_err_with(&encode_request(&whole), unauth()),
        "Protocol error: unauthenticated bulk length"
    );
    // The same requests are fine once authenticated.
    let out = one_shot(&encode_request(&eleven), Limits::default());
    assert_eq!((out.error, out.requests), (None, vec![eleven]));
    let big = vec![b"AUTH".to_vec(), vec![b'p'; 16385]];
    let out = one_shot(&encode_request(&big), Limits::default());
    assert_eq!((out.error, out.requests), (None, vec![big]));
}

/// Redis's desync test: a NUL byte then 1 KiB lines. `strchr` stops at the
/// NUL, so the line never ends; the connection must be refused once the
/// buffer passes 64 KiB, not buffered forever.
#[test]
fn nul_byte_then_lines_hits_the_inline_cap() {
    let mut line = vec![b'A'; 1023];
    line.push(b'\n');
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&b"\x00"[..]);
    let limits = Limits::default();
    let mut fed = 1;
    loop {
        match decoder.decode(&mut buf, limits) {
            Ok(Some(req)) => panic!("decoded {:?} from a desynchronised stream", req.to_vecs()),
            Ok(None) => {
                assert!(
                    buf.len() <= INLINE_MAX,
                    "buffer grew to {} bytes",
                    buf.len()
                );
                assert!(fed < 10 * INLINE_MAX, "never refused");
            }
            Err(e) => {
                assert_eq!(e.to_string(), "Protocol error: too big inline request");
                assert!(buf.len() > INLINE_MAX);
                assert!(buf.len() <= INLINE_MAX + line.len());
                break;
            }
        }
        buf.extend_from_slice(&line);
        fed += line.len();
    }
}

#[test]
fn nul_byte_in_the_middle_of_an_inline_line() {
    // Once the NUL is seen, later newlines do not end the line either.
    let out = one_shot(b"PING\r\nGET a\x00b\r\nPING\r\n", Limits::default());
    assert_eq!(out.requests, vec![args(&[b"PING"])]);
    assert_eq!(out.error, None);
    assert_eq!(out.rest, 15);
}

#[test]
fn header_cr_not_followed_by_lf() {
    assert_eq!(
        decode_err(b"*1\rX"),
        "Protocol error: invalid multibulk length"
    );
    assert_eq!(
        decode_err(b"*1\r\n$3\rXfoo\r\n"),
        "Protocol error: invalid bulk length"
    );
}

#[test]
fn display_texts_of_every_variant() {
    let cases = [
        (
            ProtocolError::InvalidMultibulkLength,
            "Protocol error: invalid multibulk length",
        ),
        (
            ProtocolError::InvalidBulkLength,
            "Protocol error: invalid bulk length",
        ),
        (
            ProtocolError::ExpectedBulk(b'x'),
            "Protocol error: expected '$', got 'x'",
        ),
        (
            ProtocolError::MissingCrlf,
            "Protocol error: expected CRLF after bulk string",
        ),
        (
            ProtocolError::TooBigMultibulkCount,
            "Protocol error: too big mbulk count string",
        ),
        (
            ProtocolError::TooBigBulkCount,
            "Protocol error: too big bulk count string",
        ),
        (
            ProtocolError::TooBigInline,
            "Protocol error: too big inline request",
        ),
        (
            ProtocolError::UnbalancedQuotes,
            "Protocol error: unbalanced quotes in request",
        ),
        (
            ProtocolError::UnauthenticatedMultibulk,
            "Protocol error: unauthenticated multibulk length",
        ),
        (
            ProtocolError::UnauthenticatedBulk,
            "Protocol error: unauthenticated bulk length",
        ),
    ];
    for (err, text) in cases {
        assert_eq!(err.to_string(), text);
    }
}

// ---------------------------------------------------------------------------
// Requests split at every byte boundary
// ---------------------------------------------------------------------------

fn valid_inputs() -> Vec<Vec<u8>> {
    let mut inputs: Vec<Vec<u8>> = vec![
        b"*1\r\n$4\r\nPING\r\n".to_vec(),
        b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$4\r\n\r\n\r\n\r\n".to_vec(),
        b"PING\r\n".to_vec(),
        b"PING\n".to_vec(),
        b"SET a \"b\\x41\\n\" 'it\\'s'\r\n".to_vec(),
        b"\r\n*0\r\n*-10\r\n\n".to_vec(),
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nECHO \"x y\"\nPING\r\n*0\r\n\
          *4\r\n$8\r\nRL.ALLOW\r\n$5\r\nk:123\r\n$3\r\n100\r\n$2\r\n60\r\n"
            .to_vec(),
    ];
    let binary: Vec<u8> = (0..=255u8).collect();
    inputs.push(encode_request(&[b"SET".to_vec(), b"k".to_vec(), binary]));
    inputs.push(encode_request(&[vec![b'v'; 40_000]]));
    inputs
}

#[test]
fn every_split_point_gives_the_same_requests() {
    for input in valid_inputs() {
        let expected = decode_ok(&input);
        assert!(!input.is_empty());
        let len = input.len() as u64;
        let short = input.len() < 2000;

        let out = chunked(&input, 1, Limits::default());
        assert_eq!(out.error, None);
        assert_eq!(out.requests, expected, "byte by byte");
        assert_eq!((out.rest, out.bytes_scanned), (0, len), "byte by byte");

        let step = if short { 1 } else { 997 };
        for split in (0..=input.len()).step_by(step) {
            let (a, b) = input.split_at(split);
            let out = feed([a, b], Limits::default());
            assert_eq!(out.error, None, "split at {split}");
            assert_eq!(out.requests, expected, "split at {split}");
            assert_eq!((out.rest, out.bytes_scanned), (0, len), "split at {split}");
        }
    }
}

#[test]
fn every_split_point_gives_the_same_error() {
    let bad: [&[u8]; 7] = [
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
        b"*1\r\n$-10\r\n",
        b"*abc\r\n",
        b"set \"foo\r\n",
        b"*1\r\n$3\r\nfooXY",
        b"PING\r\n*1\r\n$blabla\r\n",
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*20000000\r\n",
    ];
    for input in bad {
        let expected = one_shot(input, Limits::default());
        assert!(expected.error.is_some());
        for split in 0..=input.len() {
            let (a, b) = input.split_at(split);
            let out = feed([a, b], Limits::default());
            assert_eq!(out.requests, expected.requests, "split at {split}");
            assert_eq!(out.error, expected.error, "split at {split}");
        }
        let out = chunked(input, 1, Limits::default());
        assert_eq!(
            (out.requests, out.error),
            (expected.requests, expected.error)
        );
    }
}

// ---------------------------------------------------------------------------
// Linear parsing
// ---------------------------------------------------------------------------

fn set_pipeline(n: usize) -> (Vec<u8>, Vec<Args>) {
    let mut input = Vec::new();
    let mut reqs = Vec::new();
    for i in 0..n {
        let req = vec![
            b"SET".to_vec(),
            format!("key:{i:06}").into_bytes(),
            format!("value:{i:06}").into_bytes(),
        ];
        input.extend_from_slice(&encode_request(&req));
        reqs.push(req);
    }
    (input, reqs)
}

#[test]
fn pipeline_of_10000_sets_dribbled_3_bytes_at_a_time() {
    let (input, reqs) = set_pipeline(10_000);
    assert!(input.len() > 300_000, "{} bytes", input.len());
    let whole = one_shot(&input, Limits::default());
    assert_eq!(whole.requests, reqs);
    assert_eq!(whole.bytes_scanned, input.len() as u64);

    let dribbled = chunked(&input, 3, Limits::default());
    assert_eq!(dribbled, whole);
    // No byte examined twice, however the reads split the requests.
    assert_eq!(dribbled.bytes_scanned, input.len() as u64);
}

#[test]
fn one_megabyte_bulk_in_4k_reads() {
    let value: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let req = vec![b"SET".to_vec(), b"big".to_vec(), value];
    let input = encode_request(&req);
    let out = chunked(&input, 4096, Limits::default());
    assert_eq!(out.error, None);
    assert_eq!(out.requests, vec![req]);
    assert_eq!((out.rest, out.bytes_scanned), (0, input.len() as u64));
}

#[test]
fn inline_pipeline_dribbled() {
    let mut input = Vec::new();
    for i in 0..2000 {
        input.extend_from_slice(format!("SET \"k {i}\" v{i}\r\nPING\n").as_bytes());
    }
    let whole = one_shot(&input, Limits::default());
    assert_eq!(whole.requests.len(), 4000);
    assert_eq!(whole.requests[2], args(&[b"SET", b"k 1", b"v1"]));
    let dribbled = chunked(&input, 3, Limits::default());
    assert_eq!(dribbled, whole);
    assert_eq!(dribbled.bytes_scanned, input.len() as u64);
}

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

/// Decodes `input` with redis-protocol: each frame must be an array of bulk
/// strings (or an empty array, which a server skips).
fn oracle(input: &[u8]) -> Vec<Args> {
    use redis_protocol::resp2::decode::decode;
    use redis_protocol::resp2::types::OwnedFrame;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let (frame, used) = decode(&input[pos..])
            .expect("redis-protocol rejected the input")
            .expect("redis-protocol found an incomplete frame");
        pos += used;
        let OwnedFrame::Array(items) = frame else {
            panic!("not an array: {frame:?}");
        };
        let request: Args = items
            .into_iter()
            .map(|f| match f {
                OwnedFrame::BulkString(b) => b,
                other => panic!("not a bulk string: {other:?}"),
            })
            .collect();
        if !request.is_empty() {
            out.push(request);
        }
    }
    out
}

/// Splits `input` at the given fractions of its length.
fn split_at_fractions<'a>(input: &'a [u8], cuts: &[f64]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| ((input.len() as f64) * c) as usize)
        .collect();
    points.push(0);
    points.push(input.len());
    points.sort_unstable();
    points.windows(2).map(|w| &input[w[0]..w[1]]).collect()
}

/// Bytes that exercise the decoder's paths more than uniform noise would.
fn protocolish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\\x4".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"-".to_vec()),
        (0u32..40).prop_map(|n| n.to_string().into_bytes()),
        Just(b"PING".to_vec()),
        prop::collection::vec(any::<u8>(), 1..8),
    ];
    prop::collection::vec(token, 0..400).prop_map(|t| {
        let mut v = t.concat();
        v.truncate(4096);
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn agrees_with_redis_protocol(
        requests in prop::collection::vec(
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..8),
            1..5,
        ),
        cuts in prop::collection::vec(0.0f64..1.0, 0..6),
    ) {
        let input: Vec<u8> = requests.iter().flat_map(|r| encode_request(r)).collect();
        let expected = oracle(&input);
        prop_assert_eq!(&expected, &requests);
        let out = feed(split_at_fractions(&input, &cuts), Limits::default());
        prop_assert_eq!(out.error, None);
        prop_assert_eq!(out.requests, expected);
        prop_assert_eq!(out.rest, 0);
        prop_assert_eq!(out.bytes_scanned, input.len() as u64);
    }

    #[test]
    fn random_bytes_never_panic(
        input in prop::collection::vec(any::<u8>(), 0..4096),
        cuts in prop::collection::vec(0.0f64..1.0, 0..8),
        unauthenticated in any::<bool>(),
        small_bulks in any::<bool>(),
    ) {
        let max_bulk_len = if small_bulks { 1024 } else { Limits::default().max_bulk_len };
        let limits = Limits { max_bulk_len, unauthenticated };
        let out = feed(split_at_fractions(&input, &cuts), limits);
        prop_assert!(out.bytes_scanned <= input.len() as u64);
    }

    /// However protocol-like noise is split into reads, the decoder reaches
    /// the same requests and the same end state as when fed in one piece.
    #[test]
    fn protocolish_noise_is_split_independent(
        input in protocolish_bytes(),
        cuts in prop::collection::vec(0.0f64..1.0, 0..8),
        unauthenticated in any::<bool>(),
    ) {
        let limits = Limits { max_bulk_len: 1024, unauthenticated };
        let whole = one_shot(&input, limits);
        let split = feed(split_at_fractions(&input, &cuts), limits);
        prop_assert!(split.bytes_scanned <= input.len() as u64);
        if whole.error.is_none() {
            prop_assert_eq!(whole.bytes_scanned + whole.rest as u64, input.len() as u64);
        }
        prop_assert_eq!(split.requests, whole.requests);
        prop_assert_eq!(&split.error, &whole.error);
        if whole.error.is_none() {
            prop_assert_eq!(split.rest, whole.rest);
            prop_assert_eq!(split.bytes_scanned, whole.bytes_scanned);
        }
    }
}

/// `connection.rs` passes `i64::MAX` when `proto-max-bulk-len` is set above
/// it (the flag `--proto-max-bulk-len` takes any size; `CONFIG SET` stops
/// at `i64::MAX`).
/// A declared bulk that large must wait for bytes (or be refused), not
/// panic while reserving room for it.
#[test]
fn huge_declared_bulk_under_a_huge_limit_does_not_panic() {
    let limits = Limits {
        max_bulk_len: i64::MAX,
        unauthenticated: false,
    };
    let out = one_shot(b"*1\r\n$9223372036854775807\r\n", limits);
    assert!(out.requests.is_empty());
}
