//! `--tls-port`: the `redis` crate (rustls) over TLS, with and without
//! client certificates, next to the plaintext port; startup errors name the
//! bad file; a client stalled mid-handshake holds up no one else.
//!
//! Certificates are made fresh with rcgen for each test: a CA, a server
//! certificate for 127.0.0.1 and localhost, a client certificate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::{assert_pong, q, Server, IO_TIMEOUT};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ClientTlsConfig, TlsCertificates};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use turnstile::config::OutputLimit;
use turnstile::server::tls::HANDSHAKE_TIMEOUT;
use turnstile::Config;

/// PEM files in a fresh directory, removed on drop.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new() -> Certs {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "turnstile-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();

        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "turnstile test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(names).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![usage];
            let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "turnstile",
        );
        let (client_cert, client_key) =
            leaf(vec![], ExtendedKeyUsagePurpose::ClientAuth, "test client");

        let certs = Certs { dir };
        for (name, pem) in [
            ("ca.crt", ca_cert.pem()),
            ("server.crt", server_cert),
            ("server.key", server_key),
            ("client.crt", client_cert),
            ("client.key", client_key),
        ] {
            std::fs::write(certs.path(name), pem).unwrap();
        }
        certs
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    /// TLS on a free port with this CA's server certificate; with
    /// `client_certs`, clients must present one signed by the CA.
    fn configure(&self, c: &mut Config, client_certs: bool) {
        c.tls_port = Some(0);
        c.tls_cert_file = Some(self.path("server.crt"));
        c.tls_key_file = Some(self.path("server.key"));
        if client_certs {
            c.tls_ca_cert_file = Some(self.path("ca.crt"));
        }
    }

    /// A `redis` crate TLS connection trusting this CA, optionally with
    /// the client certificate.
    async fn connect(
        &self,
        addr: SocketAddr,
        with_client_cert: bool,
    ) -> redis::RedisResult<MultiplexedConnection> {
        let client_tls = with_client_cert.then(|| ClientTlsConfig {
            client_cert: self.read("client.crt"),
            client_key: self.read("client.key"),
        });
        let client = redis::Client::build_with_tls(
            format!("rediss://{addr}/"),
            TlsCertificates {
                client_tls,
                root_cert: Some(self.read("ca.crt")),
            },
        )?;
        crate::common::connect_client(client).await
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tls_addr(server: &Server) -> SocketAddr {
    server.handle().tls_addr().expect("TLS listener")
}

async fn assert_allow(con: &mut MultiplexedConnection, key: &str) {
    let reply: Vec<i64> = q(con, &["RL.ALLOW", key, "10", "60"]).await;
    assert_eq!(&reply[..3], &[1, 10, 9], "RL.ALLOW {key}: {reply:?}");
}

#[tokio::test]
async fn ping_and_allow_over_tls_next_to_plaintext() {
    let certs = Certs::new();
    let server = Server::start_with(|c| certs.configure(c, false)).await;
    let tls = tls_addr(&server);
    assert_ne!(tls, server.addr);

    let mut secure = certs.connect(tls, false).await.expect("TLS connect");
    assert_pong(&mut secure).await;
    assert_allow(&mut secure, "tls").await;

    // The plaintext port serves the same keyspace alongside.
    let mut plain = server.client().await;
    assert_pong(&mut plain).await;
    let reply: Vec<i64> = q(&mut plain, &["RL.ALLOW", "tls", "10", "60"]).await;
    assert_eq!(&reply[..3], &[1, 10, 8]);

    // Both count as clients; CLIENT LIST shows the TLS port as laddr.
    let list: String = q(&mut plain, &["CLIENT", "LIST"]).await;
    assert!(list.contains(&format!("laddr={tls}")), "{list}");
    let port: Vec<String> = q(&mut plain, &["CONFIG", "GET", "tls-port"]).await;
    assert_eq!(port, ["tls-port".to_string(), tls.port().to_string()]);
    let info: String = q(&mut plain, &["INFO", "server"]).await;
    assert!(
        info.contains(&format!("tls_port:{}\r\n", tls.port())),
        "{info}"
    );

    // Replies far larger than a socket buffer arrive whole: records rustls
    // still holds after a partial write are flushed.
    let big = "x".repeat(4 << 20);
    let _: () = q(&mut secure, &["SET", "big", &big]).await;
    let mut pipe = redis::pipe();
    for _ in 0..4 {
        pipe.cmd("GET").arg("big");
    }
    let got: Vec<String> = pipe.query_async(&mut secure).await.expect("GETs");
    assert!(got.iter().all(|v| *v == big));

    // A plaintext client on the TLS port gets no reply it could mistake
    // for one, and the port keeps serving.
    let mut confused = crate::common::Raw::connect(tls).await;
    confused.send(b"PING\r\n").await;
    let got = confused.closed_within(IO_TIMEOUT).await;
    assert!(
        got.as_ref().is_some_and(|b| !b.starts_with(b"+PONG")),
        "{got:?}"
    );
    assert_pong(&mut secure).await;
    server.shutdown().await;
}

#[tokio::test]
async fn tls_off_without_tls_port() {
    let server = Server::start().await;
    assert_eq!(server.handle().tls_addr(), None);
    let mut plain = server.client().await;
    let port: Vec<String> = q(&mut plain, &["CONFIG", "GET", "tls-port"]).await;
    assert_eq!(port, ["tls-port", "0"]);
    server.shutdown().await;
}

#[tokio::test]
async fn client_certificates_required_with_ca_file() {
    let certs = Certs::new();
    let server = Server::start_with(|c| certs.configure(c, true)).await;
    let tls = tls_addr(&server);

    // TLS 1.3 clients finish before the server checks their certificate:
    // the refusal may show at connect or at the first command.
    let refused = match certs.connect(tls, false).await {
        Err(_) => true,
        Ok(mut con) => redis::cmd("PING")
            .query_async::<String>(&mut con)
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");

    let mut con = certs.connect(tls, true).await.expect("mTLS connect");
    assert_pong(&mut con).await;
    assert_allow(&mut con, "mtls").await;

    // A certificate from another CA is refused too.
    let other = Certs::new();
    let stranger = redis::Client::build_with_tls(
        format!("rediss://{tls}/"),
        TlsCertificates {
            client_tls: Some(ClientTlsConfig {
                client_cert: other.read("client.crt"),
                client_key: other.read("client.key"),
            }),
            root_cert: Some(certs.read("ca.crt")),
        },
    )
    .unwrap();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(IO_TIMEOUT)
        .set_response_timeout(IO_TIMEOUT);
    let refused = match stranger
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Err(_) => true,
        Ok(mut con) => redis::cmd("PING")
            .query_async::<String>(&mut con)
            .await
            .is_err(),
    };
    assert!(refused, "a certificate from another CA was accepted");

    assert_pong(&mut con).await;
    server.shutdown().await;
}

async fn start_error(tweak: impl FnOnce(&mut Config)) -> String {
    let mut config = Config::for_tests();
    tweak(&mut config);
    let clock = turnstile::ManualClock::new(turnstile::Nanos(
        crate::common::START_SECS * turnstile::Nanos::PER_SEC,
    ));
    match turnstile::start(&config, std::sync::Arc::new(clock)).await {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test]
async fn bad_files_fail_start_naming_the_file() {
    let certs = Certs::new();
    let missing = certs.path("nope.crt");
    let e = start_error(|c| {
        certs.configure(c, false);
        c.tls_cert_file = Some(missing.clone());
    })
    .await;
    assert!(e.contains(&display(&missing)), "{e}");

    let missing_key = certs.path("nope.key");
    let e = start_error(|c| {
        certs.configure(c, false);
        c.tls_key_file = Some(missing_key.clone());
    })
    .await;
    assert!(e.contains(&display(&missing_key)), "{e}");

    // A key where the certificate should be, and a certificate where the
    // key should be.
    let e = start_error(|c| {
        certs.configure(c, false);
        c.tls_cert_file = Some(certs.path("server.key"));
    })
    .await;
    assert!(e.contains(&display(&certs.path("server.key"))), "{e}");
    let e = start_error(|c| {
        certs.configure(c, false);
        c.tls_key_file = Some(certs.path("server.crt"));
    })
    .await;
    assert!(e.contains(&display(&certs.path("server.crt"))), "{e}");

    // A key that does not belong to the certificate.
    let e = start_error(|c| {
        certs.configure(c, false);
        c.tls_key_file = Some(certs.path("client.key"));
    })
    .await;
    assert!(e.contains(&display(&certs.path("client.key"))), "{e}");

    let bad_ca = certs.path("bad-ca.crt");
    std::fs::write(&bad_ca, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    let e = start_error(|c| {
        certs.configure(c, true);
        c.tls_ca_cert_file = Some(bad_ca.clone());
    })
    .await;
    assert!(e.contains(&display(&bad_ca)), "{e}");

    let e = start_error(|c| c.tls_port = Some(0)).await;
    assert!(e.contains("--tls-cert-file"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_blocks_no_one() {
    let certs = Certs::new();
    let server = Server::start_with(|c| certs.configure(c, false)).await;
    let tls = tls_addr(&server);

    // One client connects and never says hello; another sends half a
    // ClientHello and stops.
    let mut silent = crate::common::Raw::connect(tls).await;
    let mut half = crate::common::Raw::connect(tls).await;
    half.send(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await;

    // Both hold client slots while they wait.
    crate::common::eventually("stalled clients registered", || {
        server.state().clients.len() >= 2
    })
    .await;

    // Meanwhile new TLS clients are served at once: well inside the
    // handshake timeout that would free a blocked accept loop.
    let soon = HANDSHAKE_TIMEOUT / 2;
    for _ in 0..3 {
        let mut con = tokio::time::timeout(soon, certs.connect(tls, false))
            .await
            .expect("not held up by the stalled handshakes")
            .expect("TLS connect");
        assert_pong(&mut con).await;
    }

    // CLIENT KILL ends a stalled handshake without waiting for the timeout.
    let mut plain = server.client().await;
    let killed: i64 = q(
        &mut plain,
        &["CLIENT", "KILL", "ADDR", &silent.local_addr().to_string()],
    )
    .await;
    assert_eq!(killed, 1);
    let rest = silent.closed_within(soon).await;
    assert_eq!(rest.as_deref(), Some(&b""[..]), "killed mid-handshake");

    // Shutdown does not wait for the other one's handshake timeout.
    let started = std::time::Instant::now();
    server.shutdown().await;
    assert!(
        started.elapsed() < soon,
        "shutdown took {:?}",
        started.elapsed()
    );
    assert_eq!(half.closed_within(soon).await.as_deref(), Some(&b""[..]));
}

/// A raw rustls client, for a peer that writes and does not read.
async fn raw_tls(certs: &Certs, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(certs.path("ca.crt")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// tests/it/output_limit.rs over TLS: the hard limit still sees "would block"
/// through rustls's buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_never_reads_is_disconnected() {
    let certs = Certs::new();
    let server = Server::start_with(|c| {
        certs.configure(c, false);
        c.client_output_buffer_limit.normal = OutputLimit {
            hard: 256 * 1024,
            soft: 0,
            soft_seconds: 0,
        };
    })
    .await;
    let mut other = server.client().await;
    let _: () = q(&mut other, &["SET", "big", &"x".repeat(1 << 20)]).await;

    // 64 GETs of a 1 MB value, written and never read.
    let mut greedy = raw_tls(&certs, tls_addr(&server)).await;
    let pipeline = crate::common::encode_words(&["GET", "big"]).repeat(64);
    let _ = greedy.write_all(&pipeline).await;
    assert_pong(&mut other).await;

    let mut received = 0usize;
    let mut chunk = vec![0; 64 * 1024];
    let closed = tokio::time::timeout(IO_TIMEOUT, async {
        // EOF or a reset, well before 64 MB.
        while let Ok(n @ 1..) = greedy.read(&mut chunk).await {
            received += n;
        }
    })
    .await;
    assert!(closed.is_ok(), "the server closes the connection");
    assert!(received < 64 << 20, "got {received} bytes: every reply");
    assert_pong(&mut other).await;
    server.shutdown().await;
}

/// `--tls-replication`: a replica reaches its primary's TLS port, checks
/// the primary's certificate against `--tls-ca-cert-file`, and follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_a_primary_over_tls() {
    let certs = Certs::new();
    let primary = Server::start_with(|c| certs.configure(c, false)).await;
    let at = tls_addr(&primary);
    let ca = certs.path("ca.crt");
    let replica = Server::start_with(move |c| {
        c.tls_replication = true;
        c.tls_ca_cert_file = Some(ca);
        c.replicaof = Some(("127.0.0.1".into(), at.port()));
    })
    .await;
    let mut p = primary.client().await;
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("over tls")
        .query_async(&mut p)
        .await
        .unwrap();
    let end = || primary.state().store.effects.offset();
    crate::common::eventually("the replica follows over TLS", || {
        replica.state().replication.link() == turnstile::replication::Link::Up
            && replica.state().store.effects.offset() == end()
    })
    .await;
    let mut r = replica.client().await;
    let got: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(got, "over tls");
}

/// Without a CA to check the primary with, `--tls-replication` refuses to
/// start.
#[tokio::test]
async fn tls_replication_needs_a_ca() {
    let mut c = Config::for_tests();
    c.tls_replication = true;
    let e = match turnstile::start(
        &c,
        Arc::new(turnstile::ManualClock::new(turnstile::Nanos(0))),
    )
    .await
    {
        Ok(_) => panic!("started without a CA"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("--tls-replication needs --tls-ca-cert-file"),
        "{e}"
    );
}
