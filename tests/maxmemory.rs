//! `--maxmemory` through a real client: `noeviction` refuses writes with
//! Redis's -OOM; `volatile-ttl` evicts the keys nearest their expiry first
//! and refuses only when no key with a TTL is left.

mod common;

use common::{q, q_err, Server};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_refuses_writes_and_keeps_reads() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let _: () = q(&mut c, &["SET", "old", "v"]).await;
    let _: redis::Value = q(&mut c, &["RL.ACQUIRE", "pool", "5", "60s", "ID", "held"]).await;
    // A one-byte cap: whatever the process uses is over it.
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", "1"]).await;
    assert_eq!(q_err(&mut c, &["RL.ALLOW", "k", "10", "60"]).await, OOM);
    assert_eq!(
        q_err(&mut c, &["RL.ACQUIRE", "pool", "5", "60s"]).await,
        OOM
    );
    assert_eq!(
        q_err(&mut c, &["RL.ALLOWMANY", "LEASE", "pool", "5", "60s"]).await,
        OOM
    );
    // Giving a lease back frees memory: never refused.
    let released: i64 = q(&mut c, &["RL.RELEASE", "pool", "held"]).await;
    assert_eq!(released, 1);
    assert_eq!(q_err(&mut c, &["SET", "new", "v"]).await, OOM);
    assert_eq!(
        q_err(&mut c, &["CL.THROTTLE", "t", "1", "1", "1"]).await,
        OOM
    );
    let exists: i64 = q(&mut c, &["EXISTS", "k", "new", "t"]).await;
    assert_eq!(exists, 0, "a refused write creates nothing");
    // Reads and deletes still work.
    let v: String = q(&mut c, &["GET", "old"]).await;
    assert_eq!(v, "v");
    let peek: Vec<i64> = q(&mut c, &["RL.PEEK", "k", "10", "60"]).await;
    assert_eq!(peek[0], 1);
    let del: i64 = q(&mut c, &["DEL", "old"]).await;
    assert_eq!(del, 1);
    let info: String = q(&mut c, &["INFO", "memory"]).await;
    assert!(info.contains("maxmemory:1\r\n"), "{info}");
    assert!(info.contains("maxmemory_policy:noeviction\r\n"), "{info}");
    // Lifting the cap lifts the refusal.
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", "0"]).await;
    let d: Vec<i64> = q(&mut c, &["RL.ALLOW", "k", "10", "60"]).await;
    assert_eq!(d[0], 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_ttl_evicts_the_keys_nearest_expiry() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let _: () = q(&mut c, &["SET", "soon", "v", "PX", "1000"]).await;
    let _: () = q(&mut c, &["SET", "later", "v", "PX", "5000"]).await;
    let _: () = q(&mut c, &["SET", "latest", "v", "PX", "90000"]).await;
    let _: () = q(&mut c, &["SET", "forever", "v"]).await;
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"],
    )
    .await;
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", "1"]).await;
    let policy: Vec<String> = q(&mut c, &["CONFIG", "GET", "maxmemory-policy"]).await;
    assert_eq!(policy, ["maxmemory-policy", "volatile-ttl"]);

    // Each write first evicts one key with a TTL: the nearest to expiry in
    // the shard it writes to, else in the next shards.
    for (i, w) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let _: () = q(&mut c, &["SET", w, "v"]).await;
        let volatile: i64 = q(&mut c, &["EXISTS", "soon", "later", "latest"]).await;
        assert_eq!(volatile, 2 - i as i64, "one evicted per write");
    }
    // No key with a TTL left: keys without one are never evicted, and the
    // write is refused.
    assert_eq!(q_err(&mut c, &["SET", "w4", "v"]).await, OOM);
    let kept: i64 = q(&mut c, &["EXISTS", "forever", "w1", "w2", "w3"]).await;
    assert_eq!(kept, 4);

    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert!(info.contains("evicted_keys:3\r\n"), "{info}");
    let metrics = server.handle().metrics_addr().unwrap();
    let body = http_get(metrics).await;
    assert!(body.contains("turnstile_keys_evicted_total 3"), "{body}");
    assert!(body.contains("turnstile_memory_max_bytes 1"), "{body}");
    server.shutdown().await;
}

async fn http_get(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// `INFO memory`'s field `name`, as a number.
async fn info_field(c: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    let info: String = q(c, &["INFO", "memory"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// An upload that never finishes is a client's buffer, not the keyspace:
/// while it is what passes the cap, `volatile-ttl` refuses writes instead
/// of evicting limiter keys (which would re-open their limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_buffers_never_make_room_by_eviction() {
    let server = Server::start().await;
    let mut c = server.client().await;
    for k in ["a", "b", "c"] {
        let d: Vec<i64> = q(&mut c, &["RL.ALLOW", k, "1", "3600"]).await;
        assert_eq!(d[0], 1);
    }
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"],
    )
    .await;
    // 64 MB of a 100 MB value, never finished: most of the memory in use,
    // which in a test process is its RSS (the counting allocator is the
    // binary's), shared with the other tests' servers.
    let mut upload = server.raw().await;
    upload
        .send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$100000000\r\n")
        .await;
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        upload.send(&chunk).await;
    }
    let deadline = std::time::Instant::now() + common::IO_TIMEOUT;
    let buffers = loop {
        let b = info_field(&mut c, "mem_clients_normal").await;
        if b >= 64 << 20 {
            break b;
        }
        assert!(std::time::Instant::now() < deadline, "buffers at {b}");
        tokio::task::yield_now().await;
    };
    // Over the cap with the upload, under it without.
    let used = info_field(&mut c, "used_memory").await;
    let cap = used - buffers / 2;
    let _: () = q(&mut c, &["CONFIG", "SET", "maxmemory", &cap.to_string()]).await;
    assert_eq!(q_err(&mut c, &["SET", "w", "v"]).await, OOM);
    let kept: i64 = q(&mut c, &["EXISTS", "a", "b", "c"]).await;
    assert_eq!(kept, 3, "no limiter key evicted for a client's buffer");
    let d: Vec<i64> = q(&mut c, &["RL.PEEK", "a", "1", "3600"]).await;
    assert_eq!(d[0], 0, "the limit still holds");
    // The upload gone, its buffer is given back and writes go on.
    drop(upload);
    let deadline = std::time::Instant::now() + common::IO_TIMEOUT;
    while info_field(&mut c, "mem_clients_normal").await >= buffers {
        assert!(std::time::Instant::now() < deadline);
        tokio::task::yield_now().await;
    }
    let _: () = q(&mut c, &["SET", "w", "v"]).await;
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert!(info.contains("evicted_keys:0\r\n"), "{info}");
    server.shutdown().await;
}
