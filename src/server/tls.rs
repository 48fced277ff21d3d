//! TLS for `--tls-port`: the server config built once at startup from the
//! PEM files, and the handshake each TLS connection runs on its own task.
//!
//! The `ring` provider is passed to every builder rather than relying on a
//! process default, so which provider serves is never ambiguous.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::Config;

/// A client has this long to finish its handshake; it holds a client slot
/// meanwhile, so one that stalls must not hold it for ever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-port needs --tls-cert-file and --tls-key-file")]
    MissingFiles,
    #[error("--tls-replication needs --tls-ca-cert-file, to verify the primary's certificate")]
    MissingCa,
    #[error("TLS setup: {0}")]
    Setup(rustls::Error),
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{what} {} is not valid PEM: {source}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        source: pem::Error,
    },
    #[error("{what} {} holds no {expected}", path.display())]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("TLS CA certificate file {}: {source}", path.display())]
    BadCa {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS CA certificate file {}: {source}", path.display())]
    Verifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error(
        "TLS certificate {} and key {} cannot be used together: {source}",
        cert.display(),
        key.display()
    )]
    CertKey {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

const CERT: &str = "TLS certificate file";
const KEY: &str = "TLS key file";
const CA: &str = "TLS CA certificate file";

/// The acceptor for `--tls-port`, or None when TLS is off.
pub fn acceptor(config: &Config) -> Result<Option<TlsAcceptor>, TlsError> {
    if config.tls_port.is_none() {
        if config.tls_cert_file.is_some()
            || config.tls_key_file.is_some()
            || config.tls_ca_cert_file.is_some()
        {
            tracing::warn!("TLS files given without --tls-port: TLS is off");
        }
        return Ok(None);
    }
    let (Some(cert_path), Some(key_path)) = (&config.tls_cert_file, &config.tls_key_file) else {
        return Err(TlsError::MissingFiles);
    };
    let provider = Arc::new(crypto::ring::default_provider());
    let certs = read_certs(CERT, cert_path)?;
    let key = read_key(key_path)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?;
    let builder = match &config.tls_ca_cert_file {
        None => builder.with_no_client_auth(),
        Some(ca_path) => builder.with_client_cert_verifier(client_verifier(ca_path, provider)?),
    };
    let server = builder
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::CertKey {
            cert: cert_path.clone(),
            key: key_path.clone(),
            source,
        })?;
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

/// How a replica reaches a TLS primary (`--tls-replication yes`), or None.
pub fn connector(config: &Config) -> Result<Option<TlsConnector>, TlsError> {
    if !config.tls_replication {
        return Ok(None);
    }
    let Some(ca_path) = &config.tls_ca_cert_file else {
        return Err(TlsError::MissingCa);
    };
    let provider = Arc::new(crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_root_certificates(roots(ca_path)?);
    let client = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs(CERT, cert)?, read_key(key)?)
            .map_err(|source| TlsError::CertKey {
                cert: cert.clone(),
                key: key.clone(),
                source,
            })?,
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(TlsConnector::from(Arc::new(client))))
}

/// Requires every client to present a certificate chaining to a CA in
/// `path`.
fn client_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(path)?), provider)
        .build()
        .map_err(|source| TlsError::Verifier {
            path: path.to_path_buf(),
            source,
        })
}

/// The CAs of `--tls-ca-cert-file`: what client certificates (on
/// `--tls-port`) and a primary's certificate (`--tls-replication`) must
/// chain to.
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(CA, path)? {
        roots.add(cert).map_err(|source| TlsError::BadCa {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(roots)
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "PEM certificate",
        });
    }
    Ok(certs)
}

/// The first private key in the file: PKCS#8, PKCS#1 or SEC1.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(KEY, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| match source {
        pem::Error::NoItemsFound => TlsError::Empty {
            what: KEY,
            path: path.to_path_buf(),
            expected: "PEM private key (PKCS#8, PKCS#1 or SEC1)",
        },
        source => TlsError::Pem {
            what: KEY,
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Runs the server side of the handshake, bounded by
/// [`HANDSHAKE_TIMEOUT`]; None if it failed or timed out. Refusals are
/// logged at `info` with their reason (an expired or v1 certificate, a
/// client without one under `--tls-ca-cert-file`), at most one line a
/// second with a count of the ones not shown, so a scanner cannot flood
/// the log.
pub async fn handshake(acceptor: &TlsAcceptor, socket: TcpStream) -> Option<TlsStream<TcpStream>> {
    let peer = socket.peer_addr().ok();
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            refused(peer, &e.to_string());
            None
        }
        Err(_) => {
            refused(peer, "handshake timed out");
            None
        }
    }
}

/// Logs a refused handshake, rate-limited to one line per second.
fn refused(peer: Option<std::net::SocketAddr>, reason: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static NOT_SHOWN: AtomicU64 = AtomicU64::new(0);
    let now_ms = START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1_000;
    let last = LAST_MS.load(Ordering::Relaxed);
    if now_ms < last + 1_000
        || LAST_MS
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        NOT_SHOWN.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let not_shown = NOT_SHOWN.swap(0, Ordering::Relaxed);
    // The address plainly (`127.0.0.1:5000`), or `unknown`.
    let addr = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    tracing::info!(%addr, reason, refused_not_shown = not_shown, "TLS handshake refused");
}
