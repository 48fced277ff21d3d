//! The listener: accepts clients up to `--maxclients`, runs each on its own
//! task, and shuts down gracefully: stop accepting, let every connection
//! finish the replies it has decoded, then return.

pub mod aof;
pub mod auth;
pub mod cluster_bus;
pub mod connection;
pub mod http;
pub mod replication;
pub mod rls;
pub mod sentinel;
pub mod snapshots;
pub mod status;
pub mod tls;

use crate::cmd::registry::rename;
use crate::cmd::registry::spec::Registry;
use crate::cmd::registry::table::REGISTRY;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::state::{FinalSnapshot, State};
use crate::store::snapshot;
use crate::store::sweeper::{self, SweeperGuard};

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    tls_addr: Option<SocketAddr>,
    rls_addr: Option<SocketAddr>,
    /// The rate limit service, drained on shutdown.
    rls_task: Option<JoinHandle<()>>,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    _sweeper: SweeperGuard,
    persist: Option<snapshots::PersistGuard>,
    /// The append-only file's writer thread.
    aof: Option<aof::AofGuard>,
    /// Reloads the policies when their files change; stops when dropped.
    _policy_watch: Option<crate::policy::watch::Watch>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `flag` is the setting that chose the port, named in the error with
    /// the way out.
    #[error("cannot listen on {addr}: {source}; choose another with {flag} PORT (or another address with --bind), or stop what listens there{hint}", hint = if addr.ends_with(":6379") { " (often a local redis-server)" } else { "" })]
    Bind {
        addr: String,
        flag: &'static str,
        source: io::Error,
    },
    #[error("cannot listen on {addr} for the metrics endpoint: {source}; choose another with --metrics-addr HOST:PORT (TURNSTILE_METRICS_ADDR), or turn it off with --metrics-addr off")]
    MetricsBind { addr: String, source: io::Error },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cluster: {0}")]
    Cluster(#[from] crate::cluster::TopologyError),
    #[error(transparent)]
    ClusterBus(#[from] cluster_bus::BusError),
    #[error(transparent)]
    Rename(#[from] crate::cmd::registry::rename::RenameError),
    #[error(transparent)]
    Snapshot(#[from] crate::store::snapshot::SnapshotError),
    #[error(transparent)]
    Aof(#[from] crate::persist::aof::AofError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// `--aclfile` missing or with a bad line: every error, in Redis's
    /// words.
    #[error("Aborting startup because of ACL errors: {0}")]
    Acl(String),
    #[error("policies: {0}")]
    Policies(#[from] crate::policy::LoadError),
    #[error("cannot watch the policy files: {0}")]
    PolicyWatch(#[from] notify::Error),
}

impl ServerHandle {
    /// The address the server listens on (with its real port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `/metrics` is served, unless `--metrics-addr off`.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where TLS clients connect, with `--tls-port`.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Where Envoy's rate limit service is served, with `--rls-port`.
    pub fn rls_addr(&self) -> Option<SocketAddr> {
        self.rls_addr
    }

    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Resolves once a client's `SHUTDOWN` asked the server to stop (its
    /// connection is closing): the holder then calls
    /// [`ServerHandle::shutdown`], as on SIGTERM.
    pub async fn shutdown_requested(&self) {
        self.state.shutdown.wait_requested().await;
    }

    /// Stops accepting, waits for every connection to finish what it has
    /// decoded, and returns once all are closed and the final snapshot (with
    /// `--snapshot`) is written; its error if that failed. After a
    /// `SHUTDOWN`, the snapshot is as it asked: none with `NOSAVE` (nor
    /// after a save `FORCE` went past), and after the one it wrote, another
    /// only if a write came in since.
    pub async fn shutdown(mut self) -> Result<(), ShutdownError> {
        use crate::store::snapshot::SnapshotError;
        let snapshot = self
            .state
            .shutdown
            .requested()
            .unwrap_or(FinalSnapshot::Write);
        self.signal_stop();
        // Nothing is to be saved: scripts are stopped at once, and one
        // that has written is not waited for past the grace.
        let prompt = snapshot == FinalSnapshot::Skip;
        if !drain(&self.state, &mut self.task, prompt).await {
            // The script holds its shards: a snapshot would wait for them
            // forever, or hold half the script.
            tracing::error!(
                "a script that has written was still running {}s after the stop: exiting without the final snapshot (the last one stands)",
                if prompt { SCRIPT_GRACE } else { SCRIPT_WAIT }.as_secs()
            );
            // Nor may dropping the handle join the sweeper and snapshot
            // threads, which may wait for the same shards: the handle is
            // left behind as the process exits.
            std::mem::forget(self);
            return Err(ShutdownError::ScriptRunning);
        }
        if let Some(rls) = self.rls_task.take() {
            // In-flight calls finish; a gateway holding an idle connection
            // open is not waited for past this.
            let _ = tokio::time::timeout(RLS_DRAIN, rls).await;
        }
        // Every decoded command has been answered: the append-only file
        // and the final snapshot hold all of them.
        if let Some(a) = self.aof.take() {
            let _ = tokio::task::spawn_blocking(move || a.finish()).await;
        }
        // The cluster config file is written for the last time and let go,
        // so a node started next on it (a restart in this process) takes it.
        if let Some(node) = &self.state.cluster_node {
            node.close();
        }
        let Some(p) = self.persist.take() else {
            return Ok(());
        };
        let unchanged = || {
            let writes = self.state.stats.writes();
            self.state
                .persist
                .as_ref()
                .is_none_or(|p| p.changes_since_save(writes) == 0)
        };
        match snapshot {
            FinalSnapshot::Write => {}
            FinalSnapshot::IfChanged if !unchanged() => {
                tracing::info!("writes since SHUTDOWN's snapshot: writing it again");
            }
            // Dropped, the thread stops without a snapshot (joined off
            // the worker: it may be mid-way through a periodic one).
            FinalSnapshot::IfChanged | FinalSnapshot::Skip => {
                let _ = tokio::task::spawn_blocking(move || drop(p)).await;
                return Ok(());
            }
        }
        let path = p.path().to_owned();
        tokio::task::spawn_blocking(move || p.finish())
            .await
            .unwrap_or_else(|panicked| {
                Err(SnapshotError {
                    path,
                    kind: std::io::Error::other(panicked.to_string()).into(),
                })
            })
            .map_err(ShutdownError::Snapshot)
    }

    /// Resolves when the server stops by itself (it only does on shutdown).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }

    /// Raises the shutdown signal, then wakes every client connection to
    /// see it: a connection's waits watch its own wake-up only
    /// ([`ClientInfo::nudge`]). Signal first, so a connection woken looks
    /// and finds it raised.
    fn signal_stop(&self) {
        let _ = self.shutdown.send(true);
        for client in self.state.clients.all() {
            client.nudge();
        }
    }
}

/// A handle dropped without [`ServerHandle::shutdown`] stops the
/// connections as a shutdown does (they are not waited for).
impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// How long shutdown waits for the rate limit service's calls in flight.
const RLS_DRAIN: Duration = Duration::from_secs(5);

/// How long shutdown lets running scripts finish before it stops those
/// that have not written.
pub const SCRIPT_GRACE: Duration = Duration::from_secs(1);

/// How long, from the stop, shutdown waits for a script that has written
/// (which stopping would leave half done) before it exits without it.
pub const SCRIPT_WAIT: Duration = Duration::from_secs(10);

/// Why shutdown did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error(transparent)]
    Snapshot(#[from] crate::store::snapshot::SnapshotError),
    #[error("a script that has written was still running: no final snapshot")]
    ScriptRunning,
}

/// Waits for the accept loop and every connection to finish. Connections
/// drain within their own bounds (`connection.rs`), except one running a
/// script, and those waiting for its shards: after [`SCRIPT_GRACE`] every
/// script that has not written is stopped, and past [`SCRIPT_WAIT`] one
/// that has written is given up on. False if it was. `prompt` (no final
/// snapshot to protect: `SHUTDOWN NOSAVE`): scripts are stopped at once,
/// and one that has written is given up on after [`SCRIPT_GRACE`].
async fn drain(state: &State, task: &mut JoinHandle<()>, prompt: bool) -> bool {
    let start = tokio::time::Instant::now();
    if !prompt {
        tokio::select! {
            _ = &mut *task => return true,
            _ = tokio::time::sleep(SCRIPT_GRACE) => {}
        }
    }
    state.scripts.stop_for_shutdown();
    let give_up = match prompt {
        true => start + SCRIPT_GRACE,
        false => start + SCRIPT_WAIT,
    };
    tokio::select! {
        _ = &mut *task => return true,
        _ = tokio::time::sleep_until(give_up) => {}
    }
    if state.scripts.running() {
        return false;
    }
    let _ = task.await;
    true
}

/// Descriptors kept for everything but clients (listeners, the metrics
/// endpoint and its scrapers, the snapshot file), as Redis keeps 32.
const RESERVED_FDS: u64 = 32;

/// `--maxclients`, fitted to the open-file limit as Redis fits it: the
/// soft limit is raised towards `maxclients + 32` as far as the hard limit
/// allows, and if that is still too few, `maxclients` is lowered (with a
/// warning) so the next client is refused with `max number of clients
/// reached` instead of finding no descriptor left (under `ulimit -n 512`
/// new clients hung without a reply and snapshots failed with "Too many
/// open files"). With `--rls-port`, its `--rls-maxclients` connections
/// are kept descriptors too (1,100 silent gRPC connections used to take
/// the Redis port's). The binary calls it at start; an in-process server
/// (the tests) keeps the limit it is given.
// `rlim_t` is `u64` here but not on every platform: the casts stay.
#[allow(clippy::unnecessary_cast)]
pub fn fit_maxclients(config: &Config) -> u64 {
    let maxclients = config.maxclients;
    let reserved = RESERVED_FDS.saturating_add(if config.rls_port.is_some() {
        config.rls_maxclients
    } else {
        0
    });
    let want = maxclients.saturating_add(reserved);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return maxclients;
    }
    if lim.rlim_cur != libc::RLIM_INFINITY && (lim.rlim_cur as u64) < want {
        let raised = libc::rlimit {
            rlim_cur: if lim.rlim_max == libc::RLIM_INFINITY {
                want as libc::rlim_t
            } else {
                (want as libc::rlim_t).min(lim.rlim_max)
            },
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = raised.rlim_cur;
        }
    }
    let have = if lim.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        lim.rlim_cur as u64
    };
    if have >= want {
        return maxclients;
    }
    let fitted = have.saturating_sub(reserved).max(1);
    tracing::warn!(
        "maxclients lowered from {maxclients} to {fitted}: the open-file limit is {have} and {reserved} descriptors are kept for the server and the rate limit service (raise it with ulimit -n or LimitNOFILE=)"
    );
    fitted
}

/// `--aclfile` at start: its users, or the start refused (Redis's
/// `ACLLoadUsersAtStartup`).
fn load_acl_file(
    state: &State,
    path: &std::path::Path,
    registry: &Registry,
) -> Result<(), StartError> {
    let users = crate::acl::file::read(path, registry.acl()).map_err(StartError::Acl)?;
    let password = state.settings.password();
    if password.is_some() && users.iter().any(|u| &*u.name == b"default") {
        tracing::warn!(
            path = %path.display(),
            "the ACL file declares the default user: --requirepass does not apply to it"
        );
    }
    let count = users.len();
    state.acl.replace(users, password.as_deref());
    tracing::info!(path = %path.display(), users = count, "ACL users loaded");
    Ok(())
}

/// Redis's refusal of users in redis.conf beside an ACL file.
const USERS_AND_ACLFILE: &str = "Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.";

/// The `user` setting's lines at start (Redis's `user` lines of
/// redis.conf), read as an ACL file's would be; a line break inside one
/// would read as another user, so it is refused.
fn load_user_lines(state: &State, lines: &[String], registry: &Registry) -> Result<(), StartError> {
    let mut text = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.contains(['\r', '\n']) {
            return Err(StartError::Acl(format!(
                "user setting {}: a user line cannot hold a line break",
                i + 1
            )));
        }
        text.extend_from_slice(b"user ");
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
    }
    let users =
        crate::acl::file::parse("user setting", &text, registry.acl()).map_err(StartError::Acl)?;
    let password = state.settings.password();
    if password.is_some() && users.iter().any(|u| &*u.name == b"default") {
        tracing::warn!("a user line declares the default user: --requirepass does not apply to it");
    }
    let count = users.len();
    state.acl.replace(users, password.as_deref());
    tracing::info!(users = count, "ACL users from the user setting");
    Ok(())
}

/// Binds and starts serving on the current tokio runtime.
pub async fn start(config: &Config, clock: Arc<dyn Clock>) -> Result<ServerHandle, StartError> {
    let password = config.password()?;
    let tls_acceptor = tls::acceptor(config)?;
    let replica_tls = tls::connector(config)?;
    let addr = format!("{}:{}", config.bind, config.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| StartError::Bind {
            addr: addr.clone(),
            flag: "--port",
            source,
        })?;
    let local = listener.local_addr().map_err(|source| StartError::Bind {
        addr,
        flag: "--port",
        source,
    })?;
    let tls_listener = match (tls_acceptor, config.tls_port) {
        (Some(acceptor), Some(port)) => {
            let (l, a) = bind_port(&config.bind, port, "--tls-port").await?;
            Some((l, a, acceptor))
        }
        _ => None,
    };
    let metrics_listener = match config.metrics_enabled() {
        false => None,
        true => {
            let bind = |source| StartError::MetricsBind {
                addr: config.metrics_addr.clone(),
                source,
            };
            let l = TcpListener::bind(&config.metrics_addr)
                .await
                .map_err(bind)?;
            let a = l.local_addr().map_err(bind)?;
            Some((l, a))
        }
    };
    let rls_listener = match config.rls_port {
        None => None,
        Some(port) => Some(bind_port(&config.bind, port, "--rls-port").await?),
    };
    let topology = config.topology(local.port())?;
    let cluster_node = cluster_bus::prepare(config, local).await?;
    if let Some(t) = &topology {
        let me = t.myself();
        tracing::info!(
            "cluster mode: node {} ({}) of {}, {} slots",
            me.id,
            me.addr(),
            t.nodes.len(),
            me.ranges
                .iter()
                .map(|(a, b)| (b - a) as usize + 1)
                .sum::<usize>()
        );
    }
    let registry: &Registry = &REGISTRY;
    let renames = rename::build(registry, &config.renames())?;
    let catalog = registry.catalog();
    let mut state = State::new(config, password, clock.clone(), local, &catalog);
    match (&config.aclfile, config.user.is_empty()) {
        (Some(_), false) => return Err(StartError::Acl(USERS_AND_ACLFILE.into())),
        (Some(path), true) => load_acl_file(&state, path, registry)?,
        (None, false) => load_user_lines(&state, &config.user, registry)?,
        (None, true) => {}
    }
    if topology.is_some() || cluster_node.is_some() {
        // Keys findable by slot (CLUSTER GETKEYSINSLOT, COUNTKEYSINSLOT);
        // nothing has reached the store yet.
        state.store = Arc::new(crate::store::Store::sharded_by_slot(
            crate::store::DEFAULT_SHARDS,
        ));
    }
    state.cluster = topology;
    state.cluster_node = cluster_node.as_ref().map(|(n, _)| n.clone());
    state.renames = renames;
    state.tls_port = tls_listener.as_ref().map(|(_, a, _)| a.port());
    state.store.set_blocking(off_the_worker);
    state.scripts.set_blocking(off_the_worker, hand_off_worker);
    let maxclients = fit_maxclients(config);
    state
        .settings
        .maxclients
        .store(maxclients, Ordering::Relaxed);
    if let Some(path) = &config.policies {
        let policies = crate::policy::Policies::new(
            Some(path.clone()),
            config.policies_shadow,
            state.policy_load_args(),
        )?;
        let set = policies.current();
        tracing::info!(path = %path.display(), policies = set.len(), domains = set.domains(), "policies loaded");
        drop(set);
        state.policies = Arc::new(policies);
    }
    if let Some(p) = &state.persist {
        snapshot::check_writable(p.path())?;
    }
    if !(config.appendonly && load_aof(&state)?) {
        if let Some(p) = &state.persist {
            load_snapshot(&state, p.path())?;
        }
    }
    if config.appendonly {
        start_aof(&state)?;
    }
    let state = Arc::new(state);
    let policy_watch = {
        let state = Arc::downgrade(&state);
        crate::policy::watch::start(
            state.upgrade().expect("held above").policies.clone(),
            move |_| {
                // The outcome is logged by the reload itself.
                if let Some(state) = state.upgrade() {
                    let _ = state.reload_policies();
                }
            },
        )?
    };
    let persist = snapshots::spawn(state.clone());
    let aof = aof::spawn(state.clone());
    let sweeper = sweeper::spawn(state.store.clone(), clock);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics_addr = metrics_listener.map(|(l, a)| {
        tokio::spawn(http::serve(
            l,
            state.clone(),
            http::Options {
                rls_headers: config.rls_headers,
                allowed_hosts: config.metrics_allowed_hosts.clone(),
            },
            shutdown_rx.clone(),
        ));
        tracing::info!("metrics listening on http://{a}/metrics, status page on http://{a}/");
        if let Some(why) = http::exposure(&state, a) {
            tracing::warn!("{why}");
        }
        a
    });
    let rls_addr = rls_listener.as_ref().map(|(_, a)| *a);
    let rls_task = rls_listener.map(|(l, a)| {
        tracing::info!("rate limit service (gRPC) listening on {a}");
        tokio::spawn(rls::serve(
            l,
            state.clone(),
            config.rls_headers,
            shutdown_rx.clone(),
        ))
    });
    let tls_addr = tls_listener.as_ref().map(|(_, a, _)| *a);
    let tls = tls_listener.map(|(l, _, acceptor)| (l, acceptor));
    {
        let appended = state.replication.appended.clone();
        state
            .store
            .effects
            .on_append(Box::new(move || appended.notify_waiters()));
    }
    if let Some((host, port)) = &config.replicaof {
        state.replication.follow(&state.store, host.clone(), *port);
    }
    // A cluster node that is not its shard's primary follows it.
    if let Some(t) = &state.cluster {
        if !t.is_primary(t.me) {
            let p = &t.nodes[t.primary_of(t.nodes[t.me].shard)];
            state
                .replication
                .follow(&state.store, p.host.clone(), p.port);
        }
        if !config.cluster_sentinels.is_empty() {
            sentinel::ask_first(&state, &config.cluster_sentinels).await;
            tokio::spawn(sentinel::watch(
                state.clone(),
                config.cluster_sentinels.clone(),
                shutdown_rx.clone(),
            ));
        }
    }
    if let Some((node, listener)) = cluster_node {
        cluster_bus::attach(&state, node, listener, shutdown_rx.clone());
    }
    tokio::spawn(replication::follow(
        state.clone(),
        replica_tls,
        shutdown_rx.clone(),
    ));
    tokio::spawn(replication::cron(state.clone(), shutdown_rx.clone()));
    tokio::spawn(connection::release_idle_buffers(
        state.clone(),
        shutdown_rx.clone(),
    ));
    let task = tokio::spawn(accept_loop(listener, tls, state.clone(), shutdown_rx));
    // Plaintext first: scripts take the first "listening" line's port.
    tracing::info!(%local, "turnstile listening");
    if let Some(local) = tls_addr {
        tracing::info!(%local, "turnstile listening (tls)");
    }
    if let Some(why) = state.settings.exposure(local.ip()) {
        tracing::warn!("{why}");
    }
    Ok(ServerHandle {
        addr: local,
        metrics_addr,
        tls_addr,
        rls_addr,
        rls_task,
        state,
        shutdown: shutdown_tx,
        task,
        _sweeper: sweeper,
        persist,
        aof: Some(aof),
        _policy_watch: policy_watch,
    })
}

/// A further listener on `--bind` (the TLS port, the rate limit service's)
/// and the address it got.
async fn bind_port(
    host: &str,
    port: u16,
    flag: &'static str,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let addr = format!("{host}:{port}");
    let bind = |source| StartError::Bind {
        addr: addr.clone(),
        flag,
        source,
    };
    let l = TcpListener::bind(&addr).await.map_err(bind)?;
    let a = l.local_addr().map_err(bind)?;
    Ok((l, a))
}

/// How far ahead of the clock a snapshot's time may be and still set a
/// floor under server time at start (a clock set back across a restart
/// must not re-open windows; one a day or more behind is another story).
const MAX_FLOOR_AHEAD: u64 = 86_400 * crate::clock::Nanos::PER_SEC;

/// Loads `--snapshot` before the first client: a missing file is a first
/// start; a damaged one stops the server, untouched, rather than serve
/// with limits forgotten.
fn load_snapshot(state: &State, path: &std::path::Path) -> Result<(), StartError> {
    let started = std::time::Instant::now();
    match snapshot::load(&state.store, path, state.clock.now())? {
        None => tracing::info!(path = %path.display(), "no snapshot yet; starting empty"),
        Some(loaded) => {
            floor_clock(state, path, loaded.written_at);
            tracing::info!(
                path = %path.display(),
                keys = loaded.keys,
                expired_while_down = loaded.expired,
                down_for_ms = state.clock.now().saturating_sub(loaded.written_at) / 1_000_000,
                ms = started.elapsed().as_millis() as u64,
                "snapshot loaded"
            );
        }
    }
    Ok(())
}

/// A snapshot (or an append-only file's base) written under a clock far
/// ahead of this one (a wrong clock then, or now) must not drag server
/// time there for good: past the bound it sets no floor.
fn floor_clock(state: &State, path: &std::path::Path, written_at: crate::clock::Nanos) {
    let now = state.clock.now();
    if written_at.0 > now.0.saturating_add(MAX_FLOOR_AHEAD) {
        tracing::warn!(
            path = %path.display(),
            written_at_ms = written_at.as_millis(),
            now_ms = now.as_millis(),
            "snapshot was written more than a day ahead of this clock; \
             not moving server time to it (its keys keep their expiries)"
        );
    } else {
        state.clock.not_before(written_at);
    }
}

/// With `--appendonly yes`, loads the append-only file if there is one:
/// it holds every write up to the crash or stop, later than any snapshot,
/// so the snapshot is not loaded (as Redis loads the AOF alone). False if
/// there is no file yet. A file that does not read stops the server,
/// untouched (but for a torn tail cut off under `--aof-load-truncated`).
fn load_aof(state: &State) -> Result<bool, StartError> {
    let aof = &state.aof;
    let started = std::time::Instant::now();
    let truncated_ok = state.settings.aof_load_truncated.load(Ordering::Relaxed);
    let Some(r) = aof.load(&state.store, state.clock.now(), truncated_ok)? else {
        return Ok(false);
    };
    floor_clock(state, aof.path(), r.base.written_at);
    aof.open_existing(&state.store, &r, state.clock.now())
        .map_err(|source| crate::persist::aof::AofError::Io {
            path: aof.path().to_owned(),
            source,
        })?;
    tracing::info!(
        path = %aof.path().display(),
        keys = state.store.len(),
        base_keys = r.base.keys,
        effects = r.effects,
        truncated_bytes = r.truncated,
        ms = started.elapsed().as_millis() as u64,
        "append-only file loaded"
    );
    Ok(true)
}

/// Turns the append-only file on before the first client: writes are
/// logged from here, and a file that was not loaded starts from a base of
/// what the snapshot held.
fn start_aof(state: &State) -> Result<(), StartError> {
    let aof = &state.aof;
    state.store.effects.set_emitting(true);
    if !aof.is_on() {
        // A second server on the file is refused in these words, not as
        // a base that failed.
        aof.acquire()?;
        aof.start(&state.store, state.clock.now()).map_err(|kind| {
            crate::persist::aof::AofError::Base {
                path: aof.path().to_owned(),
                kind,
            }
        })?;
        tracing::info!(path = %aof.path().display(), "append-only file started");
    }
    Ok(())
}

/// Accepts on the plaintext listener and, with `--tls-port`, the TLS one:
/// the same rules for both, one drain on shutdown.
async fn accept_loop(
    listener: TcpListener,
    tls: Option<(TcpListener, TlsAcceptor)>,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Every connection task holds a clone of `done_tx`; when the last one
    // drops, `done_rx.recv()` returns None: all connections have drained.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let mut backoff = Duration::from_millis(1);
    loop {
        let accept_tls = async {
            match &tls {
                Some((l, _)) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        let (accepted, acceptor) = tokio::select! {
            r = listener.accept() => (r, None),
            r = accept_tls => (r, tls.as_ref().map(|(_, a)| a.clone())),
            _ = shutdown.changed() => break,
        };
        let (socket, peer) = match accepted {
            Ok(pair) => {
                backoff = Duration::from_millis(1);
                pair
            }
            Err(e) => {
                // Out of file descriptors and the like: wait, then retry,
                // rather than spin or give up.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        if refused_by_protected_mode(&state, peer) {
            state.stats.counters.add_at(
                crate::metrics::table::CONNECTIONS_REJECTED,
                crate::stats::Rejected::ProtectedMode as usize,
                1,
            );
            tokio::spawn(reject(socket, acceptor, PROTECTED_MODE_DENIED));
            continue;
        }
        let max = state.settings.maxclients.load(Ordering::Relaxed);
        if state.clients.len() as u64 >= max {
            // As Redis: a refused client counts as rejected, not received.
            state.stats.counters.add_at(
                crate::metrics::table::CONNECTIONS_REJECTED,
                crate::stats::Rejected::Maxclients as usize,
                1,
            );
            tokio::spawn(reject(
                socket,
                acceptor,
                b"-ERR max number of clients reached\r\n",
            ));
            continue;
        }
        state
            .stats
            .counters
            .inc(crate::metrics::table::CONNECTIONS_RECEIVED);
        let _ = socket.set_nodelay(true);
        let _ = socket2::SockRef::from(&socket).set_keepalive(true);
        let laddr = socket.local_addr().unwrap_or(state.addr);
        let info = state.clients.register(peer, laddr);
        let state = state.clone();
        let shutdown = shutdown.clone();
        let done = done_tx.clone();
        match acceptor {
            None => tokio::spawn(async move {
                connection::run(socket, &state, info.clone(), shutdown).await;
                state.clients.unregister(info.id);
                drop(done);
            }),
            // The handshake runs here, on the client's task, never in the
            // accept loop; it holds the client's slot until it ends.
            Some(acceptor) => tokio::spawn(async move {
                let mut stop = shutdown.clone();
                let stream = tokio::select! {
                    s = tls::handshake(&acceptor, socket) => s,
                    _ = stop.changed() => None,
                    _ = info.killed() => None,
                };
                if let Some(stream) = stream {
                    connection::run(stream, &state, info.clone(), shutdown).await;
                }
                state.clients.unregister(info.id);
                drop(done);
            }),
        };
    }
    drop(listener);
    drop(tls);
    drop(done_tx);
    let _ = done_rx.recv().await;
}

/// Redis tells a refused client why before closing; a TLS client is told
/// over TLS, after a handshake bounded like any other.
async fn reject(mut socket: TcpStream, tls: Option<TlsAcceptor>, why: &'static [u8]) {
    use tokio::io::AsyncWriteExt;
    match tls {
        None => {
            let _ = socket.write_all(why).await;
            let _ = socket.shutdown().await;
        }
        Some(acceptor) => {
            let Some(mut stream) = tls::handshake(&acceptor, socket).await else {
                return;
            };
            let _ = tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, async {
                let _ = stream.write_all(why).await;
                let _ = stream.shutdown().await;
            })
            .await;
        }
    }
}

/// Redis's protected-mode reply, naming Turnstile's ways out.
const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Turnstile is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Turnstile you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Turnstile from the same host the server is running, however MAKE SURE Turnstile is not publicly accessible from internet if you do so. 2) Restart the server with the '--protected-mode no' option (or TURNSTILE_PROTECTED_MODE=no). 3) Set up an authentication password with --requirepass. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Redis's rule: with protected mode on and no password set, only
/// loopback clients may connect.
fn refused_by_protected_mode(state: &State, peer: SocketAddr) -> bool {
    protected_mode_refuses(
        state.settings.protected_mode.load(Ordering::Relaxed),
        state.settings.password().is_some(),
        peer.ip(),
    )
}

/// The rule itself, apart for testing.
pub fn protected_mode_refuses(protected: bool, password_set: bool, peer: std::net::IpAddr) -> bool {
    protected && !password_set && !crate::util::is_loopback(peer)
}

/// Runs a long wait for a shard lock (a script holds it) off the async
/// worker, when called on one: the runtime hands the worker's other tasks
/// to another thread meanwhile, so clients keep being served (and `SCRIPT
/// KILL` reaches the script). Elsewhere (the snapshot and sweeper threads,
/// a current-thread runtime in tests) the wait runs where it is.
fn off_the_worker(wait: &mut dyn FnMut()) {
    match multi_thread_runtime() {
        Some(_) => tokio::task::block_in_place(wait),
        None => wait(),
    }
}

/// The runtime this thread runs in, if it is a multi-thread one: the only
/// kind `block_in_place` may be called in.
fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Hands the async worker a long script runs on to another thread
/// (`script::HandOff`). `block_in_place` moves the worker's queued tasks
/// to a new thread while this one waits inside it; the task spawned there
/// wakes a parked worker, which then polls the sockets. Without that the
/// other workers can sleep on their condition variable with no one
/// polling (the worker that ran the script was the poller): no client,
/// not even `SCRIPT KILL`, is read until the script ends. Waits at most
/// `limit` for that task to run (elsewhere: this thread is inside).
fn hand_off_worker(limit: std::time::Duration) {
    let Some(h) = multi_thread_runtime() else {
        return;
    };
    let (ran, answered) = std::sync::mpsc::sync_channel(1);
    tokio::task::block_in_place(|| {
        h.spawn(async move {
            let _ = ran.try_send(());
        });
        let _ = answered.recv_timeout(limit);
    });
}

#[cfg(test)]
mod tests {
    use super::protected_mode_refuses;

    #[test]
    fn protected_mode_rule() {
        let ip = |s: &str| s.parse().unwrap();
        assert!(protected_mode_refuses(true, false, ip("10.0.0.5")));
        assert!(protected_mode_refuses(true, false, ip("2001:db8::1")));
        assert!(!protected_mode_refuses(true, false, ip("127.0.0.1")));
        assert!(!protected_mode_refuses(true, false, ip("127.8.9.1")));
        assert!(!protected_mode_refuses(true, false, ip("::1")));
        assert!(!protected_mode_refuses(true, false, ip("::ffff:127.0.0.1")));
        assert!(!protected_mode_refuses(true, true, ip("10.0.0.5")));
        assert!(!protected_mode_refuses(false, false, ip("10.0.0.5")));
    }
}
