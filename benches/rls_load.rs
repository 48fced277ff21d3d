//! A small gRPC load generator for the rate limit service (`ghz` is not
//! installable here): `ShouldRateLimit` calls with N descriptors each, C in
//! flight over K HTTP/2 connections, on one client thread (as
//! redis-benchmark runs on one), printing one JSON line with throughput and
//! latency percentiles. `benches/rls.py` drives it.
//!
//! ```text
//! cargo bench --bench rls_load -- --addr 127.0.0.1:8081 --domain bench \
//!     --descriptors 3 --requests 200000 --concurrency 64 --connections 4 --values 100000
//! ```

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

/// The descriptor keys, in the order requests use them (the policy file
/// `benches/rls.py` writes limits each).
const KEYS: [&str; 3] = ["user", "path", "ip"];

struct Args {
    addr: String,
    domain: String,
    descriptors: usize,
    requests: usize,
    concurrency: usize,
    connections: usize,
    values: u64,
}

fn args() -> Args {
    let mut a = Args {
        addr: "127.0.0.1:8081".into(),
        domain: "bench".into(),
        descriptors: 1,
        requests: 100_000,
        concurrency: 64,
        connections: 4,
        values: 100_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` adds `--bench`; skip flags without a value.
        if flag == "--bench" {
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let n = || -> u64 {
            v.parse()
                .unwrap_or_else(|_| panic!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--addr" => a.addr = v.clone(),
            "--domain" => a.domain = v.clone(),
            "--descriptors" => a.descriptors = n().clamp(1, KEYS.len() as u64) as usize,
            "--requests" => a.requests = n() as usize,
            "--concurrency" => a.concurrency = n().max(1) as usize,
            "--connections" => a.connections = n().max(1) as usize,
            "--values" => a.values = n().max(1),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A cheap deterministic value stream (xorshift), so every run asks the
/// same sequence of keys.
struct Values(u64);

impl Values {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn request(a: &Args, v: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: a.domain.clone(),
        descriptors: KEYS[..a.descriptors]
            .iter()
            .map(|k| RateLimitDescriptor {
                entries: vec![Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let mut channels = Vec::new();
        for _ in 0..a.connections {
            let c = Channel::from_shared(format!("http://{}", a.addr))
                .expect("an address")
                .connect()
                .await
                .expect("connect");
            channels.push(RateLimitServiceClient::new(c));
        }
        let a = std::sync::Arc::new(a);
        let per_task = a.requests / a.concurrency;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..a.concurrency {
            let mut client = channels[t % channels.len()].clone();
            let a = a.clone();
            tasks.push(tokio::spawn(async move {
                let mut values = Values(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                let mut latencies = Vec::with_capacity(per_task);
                let (mut ok, mut over) = (0u64, 0u64);
                for _ in 0..per_task {
                    let req = request(&a, values.next(a.values));
                    let sent = Instant::now();
                    let r = client
                        .should_rate_limit(req)
                        .await
                        .expect("answered")
                        .into_inner();
                    latencies.push(sent.elapsed());
                    if r.overall_code == 1 {
                        ok += 1;
                    } else {
                        over += 1;
                    }
                }
                (latencies, ok, over)
            }));
        }
        let mut all: Vec<Duration> = Vec::with_capacity(a.requests);
        let (mut ok, mut over) = (0, 0);
        for t in tasks {
            let (l, o, v) = t.await.expect("a task");
            all.extend(l);
            ok += o;
            over += v;
        }
        let seconds = started.elapsed().as_secs_f64();
        all.sort_unstable();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)].as_secs_f64() * 1e6;
        println!(
            "{{\"requests\": {}, \"seconds\": {seconds:.3}, \"rps\": {:.0}, \"p50_us\": {:.0}, \"p99_us\": {:.0}, \"max_us\": {:.0}, \"ok\": {ok}, \"over_limit\": {over}}}",
            all.len(),
            all.len() as f64 / seconds,
            pct(0.50),
            pct(0.99),
            pct(1.0),
        );
    });
}
