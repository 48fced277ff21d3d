//! RESP benchmarks: request decoding and reply encoding.
//!
//! - `decode/*`: a pipelined batch of 1000 requests decoded from one read
//!   buffer (throughput in elements, so criterion's `elem/s` reads as
//!   commands per second and the time divided by 1000 as ns per command);
//!   `redis-protocol` decoding the same bytes is shown for reference.
//! - `encode/*`: 1000 replies written into a reused write buffer, by our
//!   hand-written `ReplyBuf` and by `redis-protocol` (an owned `BytesFrame`
//!   built per reply, as a frame-based server would, and a `BorrowedFrame`
//!   that needs no allocation), to show whether hand-encoding is justified.
//!
//! Run: `cargo bench --bench protocol` (about a minute), or add `-- --quick`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use redis_protocol::resp2::encode::{extend_encode, extend_encode_borrowed};
use redis_protocol::resp2::types::{BorrowedFrame, BytesFrame};
use turnstile::protocol::{Decoder, Limits, ReplyBuf};

const BATCH: usize = 1000;

fn encode_request(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn rl_allow_batch() -> Bytes {
    let mut out = Vec::new();
    for i in 0..BATCH {
        let key = format!("k:{i}");
        encode_request(&[b"RL.ALLOW", key.as_bytes(), b"100", b"60"], &mut out);
    }
    out.into()
}

fn set_batch() -> Bytes {
    let mut out = Vec::new();
    for i in 0..BATCH {
        let key = format!("key:{i:06}");
        encode_request(&[b"SET", key.as_bytes(), b"value"], &mut out);
    }
    out.into()
}

fn inline_ping_batch() -> Bytes {
    b"PING\r\n".repeat(BATCH).into()
}

/// Decodes every request in `buf`; returns a checksum so nothing is elided.
fn decode_all(decoder: &mut Decoder, mut buf: BytesMut) -> usize {
    let mut total = 0;
    while let Some(req) = decoder.decode(&mut buf, Limits::default()).unwrap() {
        total += req.len() + req.arg(req.len() - 1).len();
    }
    assert!(buf.is_empty());
    total
}

fn redis_protocol_decode_all(mut buf: BytesMut) -> usize {
    let mut total = 0;
    while let Some((frame, _, _)) =
        redis_protocol::resp2::decode::decode_bytes_mut(&mut buf).unwrap()
    {
        if let BytesFrame::Array(items) = frame {
            total += items.len();
        }
    }
    total
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(BATCH as u64));
    let batches = [
        ("rl_allow_x1000", rl_allow_batch()),
        ("set_x1000", set_batch()),
        ("inline_ping_x1000", inline_ping_batch()),
    ];
    for (name, input) in &batches {
        let mut decoder = Decoder::new();
        group.bench_function(format!("turnstile/{name}"), |b| {
            b.iter_batched(
                || BytesMut::from(&input[..]),
                |buf| decode_all(&mut decoder, black_box(buf)),
                BatchSize::SmallInput,
            )
        });
        if !name.starts_with("inline") {
            group.bench_function(format!("redis-protocol/{name}"), |b| {
                b.iter_batched(
                    || BytesMut::from(&input[..]),
                    |buf| redis_protocol_decode_all(black_box(buf)),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

/// The five integers an `RL.ALLOW` reply carries (allowed, limit,
/// remaining, retry-after, reset-after).
const FIVE: [i64; 5] = [1, 100, 99, -1, 60];
const VALUE: &[u8] = b"a-value-of-32-bytes-for-GET-repl";

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(BATCH as u64));

    let mut ours = ReplyBuf::with_capacity(64 * 1024);
    group.bench_function("turnstile/int_array5_x1000", |b| {
        b.iter(|| {
            ours.truncate(0);
            for _ in 0..BATCH {
                ours.array(5);
                for n in black_box(FIVE) {
                    ours.int(n);
                }
            }
            ours.len()
        })
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("redis-protocol-bytesframe/int_array5_x1000", |b| {
        b.iter(|| {
            buf.clear();
            for _ in 0..BATCH {
                let frame = BytesFrame::Array(
                    black_box(FIVE)
                        .iter()
                        .map(|&n| BytesFrame::Integer(n))
                        .collect(),
                );
                extend_encode(&mut buf, &frame, false).unwrap();
            }
            buf.len()
        })
    });
    group.bench_function("redis-protocol-borrowed/int_array5_x1000", |b| {
        b.iter(|| {
            buf.clear();
            for _ in 0..BATCH {
                let items = black_box(FIVE).map(BorrowedFrame::Integer);
                extend_encode_borrowed(&mut buf, &BorrowedFrame::Array(&items), false).unwrap();
            }
            buf.len()
        })
    });

    group.bench_function("turnstile/bulk32_x1000", |b| {
        b.iter(|| {
            ours.truncate(0);
            for _ in 0..BATCH {
                ours.bulk(black_box(VALUE));
            }
            ours.len()
        })
    });
    group.bench_function("redis-protocol-bytesframe/bulk32_x1000", |b| {
        b.iter(|| {
            buf.clear();
            for _ in 0..BATCH {
                // A server holding the value as `&[u8]` copies it into the frame.
                let frame = BytesFrame::BulkString(Bytes::copy_from_slice(black_box(VALUE)));
                extend_encode(&mut buf, &frame, false).unwrap();
            }
            buf.len()
        })
    });
    group.bench_function("redis-protocol-borrowed/bulk32_x1000", |b| {
        b.iter(|| {
            buf.clear();
            for _ in 0..BATCH {
                let frame = BorrowedFrame::BulkString(black_box(VALUE));
                extend_encode_borrowed(&mut buf, &frame, false).unwrap();
            }
            buf.len()
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
}

criterion_group! {
    name = benches;
    config = config();
    targets = decode, encode
}
criterion_main!(benches);
