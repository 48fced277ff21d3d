//! The hand-written reply encoder (`turnstile::protocol::ReplyBuf`) checked
//! against `redis-protocol`: for every reply method, in RESP2 and RESP3, the
//! bytes are what Redis sends and they decode to the frame we meant.

use proptest::prelude::*;
use redis_protocol::resp2::types::OwnedFrame as F2;
use redis_protocol::resp3::types::{FrameMap, FrameSet, OwnedFrame as F3, VerbatimStringFormat};
use turnstile::protocol::{Protocol, ReplyBuf};

fn reply(proto: Protocol, write: impl FnOnce(&mut ReplyBuf)) -> Vec<u8> {
    let mut r = ReplyBuf::with_capacity(64);
    r.proto = proto;
    assert_eq!(r.proto, proto);
    write(&mut r);
    let bytes = r.buffer().to_vec();
    assert_eq!(r.len(), bytes.len());
    bytes
}

/// Writes with RESP2, checks the exact bytes, decodes them with
/// redis-protocol's RESP2 decoder and returns the single frame.
fn resp2(expected_bytes: &[u8], write: impl FnOnce(&mut ReplyBuf)) -> F2 {
    let bytes = reply(Protocol::Resp2, write);
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(expected_bytes)
    );
    decode2(&bytes)
}

fn resp3(expected_bytes: &[u8], write: impl FnOnce(&mut ReplyBuf)) -> F3 {
    let bytes = reply(Protocol::Resp3, write);
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(expected_bytes)
    );
    decode3(&bytes)
}

/// Decodes exactly one RESP2 frame spanning all of `bytes`.
fn decode2(bytes: &[u8]) -> F2 {
    let (frame, used) = redis_protocol::resp2::decode::decode(bytes)
        .expect("invalid RESP2")
        .expect("incomplete RESP2");
    assert_eq!(used, bytes.len(), "trailing bytes after the frame");
    frame
}

fn decode3(bytes: &[u8]) -> F3 {
    let (frame, used) = redis_protocol::resp3::decode::complete::decode(bytes)
        .expect("invalid RESP3")
        .expect("incomplete RESP3");
    assert_eq!(used, bytes.len(), "trailing bytes after the frame");
    frame
}

fn bulk2(b: &[u8]) -> F2 {
    F2::BulkString(b.to_vec())
}

fn blob3(b: &[u8]) -> F3 {
    F3::BlobString {
        data: b.to_vec(),
        attributes: None,
    }
}

fn num3(n: i64) -> F3 {
    F3::Number {
        data: n,
        attributes: None,
    }
}

/// A verbatim string's format is three bytes, as Redis 7.0's
/// `addReplyVerbatim` takes it from a C string: cut, padded with spaces,
/// ended at a NUL; inside the length, so it cannot end the reply.
#[test]
fn verbatim_formats_are_three_bytes() {
    use turnstile::protocol::reply::verbatim_format;
    assert_eq!(&verbatim_format(b"txt"), b"txt");
    assert_eq!(&verbatim_format(b"markdown"), b"mar");
    assert_eq!(&verbatim_format(b""), b"   ");
    assert_eq!(&verbatim_format(b"a\0b"), b"a  ");
    assert_eq!(
        reply(Protocol::Resp3, |r| r
            .verbatim_as(verbatim_format(b"\r\n:1"), b"x")),
        b"=5\r\n\r\n::x\r\n"
    );
    assert_eq!(
        reply(Protocol::Resp2, |r| r.verbatim_as(*b"mkd", b"x")),
        b"$1\r\nx\r\n"
    );
}

#[test]
fn ok_and_simple_strings() {
    let ok2 = F2::SimpleString(b"OK".to_vec());
    let ok3 = F3::SimpleString {
        data: b"OK".to_vec(),
        attributes: None,
    };
    assert_eq!(resp2(b"+OK\r\n", |r| r.ok()), ok2);
    assert_eq!(resp3(b"+OK\r\n", |r| r.ok()), ok3);
    assert_eq!(resp2(b"+OK\r\n", |r| r.simple("OK")), ok2);
    assert_eq!(
        resp2(b"+PONG\r\n", |r| r.simple("PONG")),
        F2::SimpleString(b"PONG".to_vec())
    );
    assert_eq!(
        resp3(b"+PONG\r\n", |r| r.simple("PONG")),
        F3::SimpleString {
            data: b"PONG".to_vec(),
            attributes: None
        }
    );
    assert_eq!(resp2(b"+\r\n", |r| r.simple("")), F2::SimpleString(vec![]));
}

#[test]
fn errors() {
    let msg = "ERR unknown command 'foo', with args beginning with: 'bar' ";
    let wire = format!("-{msg}\r\n");
    assert_eq!(
        resp2(wire.as_bytes(), |r| r.error(msg)),
        F2::Error(msg.into())
    );
    assert_eq!(
        resp3(wire.as_bytes(), |r| r.error(msg)),
        F3::SimpleError {
            data: msg.into(),
            attributes: None
        }
    );
}

#[test]
fn error_with_crlf_inside_becomes_spaces() {
    let msg = "ERR line one\r\nline two\rthree\nfour";
    let clean = "ERR line one  line two three four";
    let wire = format!("-{clean}\r\n");
    assert_eq!(
        resp2(wire.as_bytes(), |r| r.error(msg)),
        F2::Error(clean.into())
    );
    assert_eq!(
        resp3(wire.as_bytes(), |r| r.error(msg)),
        F3::SimpleError {
            data: clean.into(),
            attributes: None
        }
    );
}

#[test]
fn integers() {
    for (n, wire) in [
        (0i64, ":0\r\n"),
        (1, ":1\r\n"),
        (-1, ":-1\r\n"),
        (42, ":42\r\n"),
        (i64::MAX, ":9223372036854775807\r\n"),
        (i64::MIN, ":-9223372036854775808\r\n"),
    ] {
        assert_eq!(resp2(wire.as_bytes(), |r| r.int(n)), F2::Integer(n));
        assert_eq!(resp3(wire.as_bytes(), |r| r.int(n)), num3(n));
    }
}

#[test]
fn bulk_strings() {
    assert_eq!(
        resp2(b"$5\r\nhello\r\n", |r| r.bulk(b"hello")),
        bulk2(b"hello")
    );
    assert_eq!(
        resp3(b"$5\r\nhello\r\n", |r| r.bulk(b"hello")),
        blob3(b"hello")
    );
    assert_eq!(resp2(b"$0\r\n\r\n", |r| r.bulk(b"")), bulk2(b""));
    assert_eq!(resp3(b"$0\r\n\r\n", |r| r.bulk(b"")), blob3(b""));
    assert_eq!(
        resp2(b"$6\r\na\r\nb\0\xff\r\n", |r| r.bulk(b"a\r\nb\0\xff")),
        bulk2(b"a\r\nb\0\xff")
    );
    assert_eq!(
        resp2(b"$3\r\nabc\r\n", |r| r.bulk_str("abc")),
        bulk2(b"abc")
    );
    assert_eq!(
        resp3(b"$3\r\nabc\r\n", |r| r.bulk_str("abc")),
        blob3(b"abc")
    );
}

#[test]
fn bulk_ints() {
    assert_eq!(resp2(b"$2\r\n10\r\n", |r| r.bulk_int(10)), bulk2(b"10"));
    assert_eq!(resp2(b"$2\r\n-1\r\n", |r| r.bulk_int(-1)), bulk2(b"-1"));
    assert_eq!(resp3(b"$1\r\n0\r\n", |r| r.bulk_int(0)), blob3(b"0"));
    assert_eq!(
        resp3(b"$20\r\n-9223372036854775808\r\n", |r| r.bulk_int(i64::MIN)),
        blob3(b"-9223372036854775808")
    );
}

#[test]
fn nulls() {
    assert_eq!(resp2(b"$-1\r\n", |r| r.null()), F2::Null);
    assert_eq!(resp3(b"_\r\n", |r| r.null()), F3::Null);
    assert_eq!(resp2(b"*-1\r\n", |r| r.null_array()), F2::Null);
    assert_eq!(resp3(b"_\r\n", |r| r.null_array()), F3::Null);
}

#[test]
fn arrays() {
    let five = |r: &mut ReplyBuf| {
        r.array(5);
        for n in [1, 0, -1, 100, 60] {
            r.int(n);
        }
    };
    assert_eq!(
        resp2(b"*5\r\n:1\r\n:0\r\n:-1\r\n:100\r\n:60\r\n", five),
        F2::Array([1, 0, -1, 100, 60].map(F2::Integer).to_vec())
    );
    assert_eq!(
        resp3(b"*5\r\n:1\r\n:0\r\n:-1\r\n:100\r\n:60\r\n", five),
        F3::Array {
            data: [1, 0, -1, 100, 60].map(num3).to_vec(),
            attributes: None
        }
    );
    assert_eq!(resp2(b"*0\r\n", |r| r.array(0)), F2::Array(vec![]));
    assert_eq!(
        resp3(b"*0\r\n", |r| r.array(0)),
        F3::Array {
            data: vec![],
            attributes: None
        }
    );
    // Nested, with a null element (MGET on a missing key).
    let nested = |r: &mut ReplyBuf| {
        r.array(3);
        r.bulk(b"a");
        r.null();
        r.array(1);
        r.int(7);
    };
    assert_eq!(
        resp2(b"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:7\r\n", nested),
        F2::Array(vec![bulk2(b"a"), F2::Null, F2::Array(vec![F2::Integer(7)])])
    );
    assert_eq!(
        resp3(b"*3\r\n$1\r\na\r\n_\r\n*1\r\n:7\r\n", nested),
        F3::Array {
            data: vec![
                blob3(b"a"),
                F3::Null,
                F3::Array {
                    data: vec![num3(7)],
                    attributes: None
                }
            ],
            attributes: None
        }
    );
}

#[test]
fn maps() {
    let write = |r: &mut ReplyBuf| {
        r.map(2);
        r.bulk(b"server");
        r.bulk(b"turnstile");
        r.bulk(b"proto");
        r.int(3);
    };
    assert_eq!(
        resp2(
            b"*4\r\n$6\r\nserver\r\n$9\r\nturnstile\r\n$5\r\nproto\r\n:3\r\n",
            write
        ),
        F2::Array(vec![
            bulk2(b"server"),
            bulk2(b"turnstile"),
            bulk2(b"proto"),
            F2::Integer(3)
        ])
    );
    let expected: FrameMap<F3, F3> = [
        (blob3(b"server"), blob3(b"turnstile")),
        (blob3(b"proto"), num3(3)),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        resp3(
            b"%2\r\n$6\r\nserver\r\n$9\r\nturnstile\r\n$5\r\nproto\r\n:3\r\n",
            write
        ),
        F3::Map {
            data: expected,
            attributes: None
        }
    );
    assert_eq!(resp2(b"*0\r\n", |r| r.map(0)), F2::Array(vec![]));
    assert_eq!(
        resp3(b"%0\r\n", |r| r.map(0)),
        F3::Map {
            data: FrameMap::default(),
            attributes: None
        }
    );
}

#[test]
fn sets() {
    let write = |r: &mut ReplyBuf| {
        r.set(2);
        r.bulk(b"a");
        r.bulk(b"b");
    };
    assert_eq!(
        resp2(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n", write),
        F2::Array(vec![bulk2(b"a"), bulk2(b"b")])
    );
    let expected: FrameSet<F3> = [blob3(b"a"), blob3(b"b")].into_iter().collect();
    assert_eq!(
        resp3(b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", write),
        F3::Set {
            data: expected,
            attributes: None
        }
    );
}

#[test]
fn doubles() {
    assert_eq!(resp2(b"$3\r\n1.5\r\n", |r| r.double(1.5)), bulk2(b"1.5"));
    assert_eq!(resp2(b"$4\r\n-0.1\r\n", |r| r.double(-0.1)), bulk2(b"-0.1"));
    assert_eq!(
        resp2(b"$3\r\ninf\r\n", |r| r.double(f64::INFINITY)),
        bulk2(b"inf")
    );
    assert_eq!(
        resp2(b"$4\r\n-inf\r\n", |r| r.double(f64::NEG_INFINITY)),
        bulk2(b"-inf")
    );
    for (d, wire) in [
        (1.5f64, ",1.5\r\n"),
        (3.0, ",3\r\n"),
        (-0.1, ",-0.1\r\n"),
        (0.0, ",0\r\n"),
        (f64::INFINITY, ",inf\r\n"),
        (f64::NEG_INFINITY, ",-inf\r\n"),
    ] {
        assert_eq!(
            resp3(wire.as_bytes(), |r| r.double(d)),
            F3::Double {
                data: d,
                attributes: None
            }
        );
    }
    match resp3(b",nan\r\n", |r| r.double(f64::NAN)) {
        F3::Double { data, .. } => assert!(data.is_nan()),
        other => panic!("not a double: {other:?}"),
    }
}

#[test]
fn booleans() {
    assert_eq!(resp2(b":1\r\n", |r| r.bool(true)), F2::Integer(1));
    assert_eq!(resp2(b":0\r\n", |r| r.bool(false)), F2::Integer(0));
    for (b, wire) in [(true, "#t\r\n"), (false, "#f\r\n")] {
        assert_eq!(
            resp3(wire.as_bytes(), |r| r.bool(b)),
            F3::Boolean {
                data: b,
                attributes: None
            }
        );
    }
}

#[test]
fn verbatim_strings() {
    let text = b"# Server\r\nredis_version:7.2.0\r\n";
    let mut wire2 = format!("${}\r\n", text.len()).into_bytes();
    wire2.extend_from_slice(text);
    wire2.extend_from_slice(b"\r\n");
    assert_eq!(resp2(&wire2, |r| r.verbatim(text)), bulk2(text));

    let mut wire3 = format!("={}\r\ntxt:", text.len() + 4).into_bytes();
    wire3.extend_from_slice(text);
    wire3.extend_from_slice(b"\r\n");
    assert_eq!(
        resp3(&wire3, |r| r.verbatim(text)),
        F3::VerbatimString {
            data: text.to_vec(),
            format: VerbatimStringFormat::Text,
            attributes: None
        }
    );
    assert_eq!(
        resp3(b"=4\r\ntxt:\r\n", |r| r.verbatim(b"")),
        F3::VerbatimString {
            data: vec![],
            format: VerbatimStringFormat::Text,
            attributes: None
        }
    );
}

#[test]
fn a_pipelined_batch_decodes_reply_by_reply() {
    let mut r = ReplyBuf::with_capacity(16);
    assert!(r.is_empty());
    r.ok();
    r.int(-1);
    r.null();
    r.error("ERR syntax error");
    r.array(2);
    r.bulk(b"x");
    r.int(2);
    let bytes = r.buffer().to_vec();
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let (frame, used) = redis_protocol::resp2::decode::decode(&bytes[pos..])
            .unwrap()
            .unwrap();
        frames.push(frame);
        pos += used;
    }
    assert_eq!(
        frames,
        vec![
            F2::SimpleString(b"OK".to_vec()),
            F2::Integer(-1),
            F2::Null,
            F2::Error("ERR syntax error".into()),
            F2::Array(vec![bulk2(b"x"), F2::Integer(2)]),
        ]
    );
}

#[test]
fn truncate_drops_a_partial_reply() {
    let mut r = ReplyBuf::with_capacity(16);
    r.ok();
    let mark = r.len();
    r.array(3);
    r.int(1);
    r.truncate(mark);
    r.error("ERR failed");
    assert_eq!(&r.buffer()[..], b"+OK\r\n-ERR failed\r\n");
}

#[test]
fn protocol_versions() {
    assert_eq!(Protocol::default(), Protocol::Resp2);
    assert_eq!(ReplyBuf::with_capacity(0).proto, Protocol::Resp2);
    assert_eq!(Protocol::Resp2.version(), 2);
    assert_eq!(Protocol::Resp3.version(), 3);
}

proptest! {
    #[test]
    fn any_bulk_round_trips(data in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assert_eq!(decode2(&reply(Protocol::Resp2, |r| r.bulk(&data))), bulk2(&data));
        prop_assert_eq!(decode3(&reply(Protocol::Resp3, |r| r.bulk(&data))), blob3(&data));
        prop_assert_eq!(
            decode3(&reply(Protocol::Resp3, |r| r.verbatim(&data))),
            F3::VerbatimString { data: data.clone(), format: VerbatimStringFormat::Text, attributes: None }
        );
    }

    #[test]
    fn any_int_round_trips(n in any::<i64>()) {
        prop_assert_eq!(decode2(&reply(Protocol::Resp2, |r| r.int(n))), F2::Integer(n));
        prop_assert_eq!(decode3(&reply(Protocol::Resp3, |r| r.int(n))), num3(n));
        prop_assert_eq!(
            decode2(&reply(Protocol::Resp2, |r| r.bulk_int(n))),
            bulk2(n.to_string().as_bytes())
        );
    }

    #[test]
    fn any_error_stays_one_line(msg in "[ -~\r\n]{0,80}") {
        let clean = msg.replace(['\r', '\n'], " ");
        prop_assert_eq!(decode2(&reply(Protocol::Resp2, |r| r.error(&msg))), F2::Error(clean.clone()));
        prop_assert_eq!(
            decode3(&reply(Protocol::Resp3, |r| r.error(&msg))),
            F3::SimpleError { data: clean, attributes: None }
        );
    }

    /// A status is one line whatever its text: a CR or LF in it would end
    /// the line early and let its writer forge the next reply.
    #[test]
    fn any_status_stays_one_line(msg in "[ -~\r\n]{0,80}") {
        let clean = msg.replace(['\r', '\n'], " ");
        prop_assert_eq!(decode2(&reply(Protocol::Resp2, |r| r.simple(&msg))), F2::SimpleString(clean.clone().into_bytes()));
        prop_assert_eq!(
            decode3(&reply(Protocol::Resp3, |r| r.simple(&msg))),
            F3::SimpleString { data: clean.into_bytes(), attributes: None }
        );
    }

    /// Every line-typed reply a script's bytes reach (`+`, `-`, `(`, `,`)
    /// is its prefix, the bytes with CR and LF made spaces, and one CRLF;
    /// RESP2's big number is a bulk string of those bytes.
    #[test]
    fn any_bytes_make_one_line(body in prop::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()], 0..64)) {
        let clean: Vec<u8> = body.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect();
        let line = |prefix: u8| [&[prefix][..], &clean, b"\r\n"].concat();
        for proto in [Protocol::Resp2, Protocol::Resp3] {
            prop_assert_eq!(reply(proto, |r| r.status(&body)), line(b'+'));
            prop_assert_eq!(reply(proto, |r| r.error_bytes(&body)), line(b'-'));
            prop_assert_eq!(reply(proto, |r| r.double_text(&body)), line(b','));
        }
        prop_assert_eq!(reply(Protocol::Resp3, |r| r.big_number(&body)), line(b'('));
        prop_assert_eq!(decode2(&reply(Protocol::Resp2, |r| r.big_number(&body))), bulk2(&clean));
    }

    #[test]
    fn any_finite_double_round_trips(d in any::<f64>().prop_filter("finite", |d| d.is_finite())) {
        match decode3(&reply(Protocol::Resp3, |r| r.double(d))) {
            F3::Double { data, .. } => prop_assert_eq!(data.to_bits(), d.to_bits()),
            other => prop_assert!(false, "not a double: {:?}", other),
        }
        match decode2(&reply(Protocol::Resp2, |r| r.double(d))) {
            F2::BulkString(b) => {
                let parsed: f64 = std::str::from_utf8(&b).unwrap().parse().unwrap();
                prop_assert_eq!(parsed.to_bits(), d.to_bits());
            }
            other => prop_assert!(false, "not a bulk: {:?}", other),
        }
    }
}
