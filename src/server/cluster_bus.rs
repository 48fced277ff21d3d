//! The cluster bus: the listener on the bus port, one outbound link to
//! every known node, and the 100 ms clock that drives
//! [`ClusterState`]. Each link carries length-prefixed frames
//! (`cluster/bus.rs`): a [`Hello`] first, then messages. The state is
//! behind one lock, taken for the moment a message is handled; what it
//! asks for (replies, sends, following a primary, deleting keys of lost
//! slots) runs after the lock is released.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::cluster::bus::{self, Hello, Message};
use crate::cluster::node::ClusterNode as Bus;
use crate::cluster::state::{Effects, From, LinkId, Millis};

pub use crate::cluster::node::now_ms;

use crate::cluster::node::{ClusterNode, Host};
use crate::cluster::state::ClusterState;
use crate::config::Config;
use crate::state::State;

/// Why cluster mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot listen on {addr} for the cluster bus: {source}; choose another with --cluster-port PORT")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

use BusError as StartError;

/// With `--cluster-enabled yes`: this node's cluster state, from its config
/// file if there is one (a restart keeps its id, epochs, role and slots)
/// or new (alone, no slots), and the bus's listener.
pub async fn prepare(
    config: &Config,
    local: SocketAddr,
) -> Result<Option<(Arc<ClusterNode>, TcpListener)>, StartError> {
    if !config.cluster_enabled {
        return Ok(None);
    }
    if config.cluster_nodes.is_some() || config.cluster_config.is_some() {
        return Err(StartError::Config(
            "--cluster-enabled yes is a cluster that grows by CLUSTER MEET; it cannot be combined with a static --cluster-nodes or --cluster-config".into(),
        ));
    }
    let port = local.port();
    // Redis's default is the client port + 10000; a client port picked by
    // the OS (`--port 0`: tests, several servers on one host) gets a bus
    // port picked the same way.
    let wanted = match config.cluster_port {
        0 if config.port == 0 => 0,
        0 => port.checked_add(10000).ok_or_else(|| {
            StartError::Config(format!(
                "the cluster bus port would be {port} + 10000, past 65535: give --cluster-port"
            ))
        })?,
        p => p as u16,
    };
    let listener = TcpListener::bind((local.ip(), wanted))
        .await
        .map_err(|source| StartError::Bind {
            addr: format!("{}:{wanted}", local.ip()),
            source,
        })?;
    let cport = listener.local_addr().map(|a| a.port()).unwrap_or(wanted);
    let announced_port = match config.cluster_announce_port {
        0 => port,
        p => p as u16,
    };
    let announced_cport = match config.cluster_announce_bus_port {
        0 => cport,
        p => p as u16,
    };
    let path = &config.cluster_config_file;
    // One node per file, as Redis locks nodes.conf: a second node started
    // on it would overwrite the first's identity and slots.
    let mut lock_path = path.clone().into_os_string();
    lock_path.push(".lock");
    let lock = crate::util::lock_beside(std::path::Path::new(&lock_path)).map_err(|e| {
        StartError::Config(match e {
            crate::util::LockError::Held => format!(
                "the cluster config file {} is in use by another node (its lock {} is held): give each node its own --cluster-config-file",
                path.display(),
                std::path::Path::new(&lock_path).display()
            ),
            crate::util::LockError::Symlink => format!(
                "the cluster config file's lock {} is a symbolic link: remove it",
                std::path::Path::new(&lock_path).display()
            ),
            crate::util::LockError::Io(e) => format!(
                "cannot lock the cluster config file {}: {}",
                path.display(),
                crate::util::strerror(&e)
            ),
        })
    })?;
    let mut state = match std::fs::read_to_string(path) {
        // An empty file is no configuration yet, as Redis reads one.
        Ok(text) if text.trim().is_empty() => ClusterState::new(
            crate::cluster::state::random_id(),
            String::new(),
            announced_port,
            announced_cport,
            config.cluster_node_timeout,
        ),
        Ok(text) => ClusterState::from_config(
            &text,
            announced_port,
            announced_cport,
            config.cluster_node_timeout,
        )
        .map_err(|e| StartError::Config(format!("cluster config file {}: {e}", path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ClusterState::new(
            crate::cluster::state::random_id(),
            String::new(),
            announced_port,
            announced_cport,
            config.cluster_node_timeout,
        ),
        Err(e) => {
            return Err(StartError::Config(format!(
                "cannot read the cluster config file {}: {e}",
                path.display()
            )))
        }
    };
    if let Some(ip) = &config.cluster_announce_ip {
        state.set_my_ip(ip);
    }
    let id = state.myself.clone();
    let node = ClusterNode::new(state, Some(path.clone()));
    node.hold_lock(lock);
    if let Some(e) = node.file_error() {
        return Err(StartError::Config(format!(
            "cannot write the cluster config file {}: {e}",
            path.display()
        )));
    }
    tracing::info!(
        "cluster mode: node {id}, bus on port {cport}, config file {}",
        path.display()
    );
    Ok(Some((node, listener)))
}

/// Ties the node to the running server: passwords, what its effects do,
/// the bus's task, and replication if the file says this node is a replica.
pub fn attach(
    state: &Arc<State>,
    node: Arc<ClusterNode>,
    listener: TcpListener,
    shutdown: watch::Receiver<bool>,
) {
    let password = state
        .settings
        .password()
        .map(|p| String::from_utf8_lossy(&p).into_owned());
    let masterauth = state.settings.masterauth.read().clone();
    // With `masterauth`, `masteruser` names the user it is the password
    // of, as replication's `AUTH user password` does.
    if masterauth.is_some() {
        *node.auth_user.lock() = state.settings.masteruser.read().clone();
    }
    *node.require.lock() = password.clone();
    *node.auth.lock() = masterauth.or(password);
    node.set_host(Box::new(ServerHost(Arc::downgrade(state))));
    let primary = {
        let st = node.lock_state();
        st.me()
            .primary
            .as_ref()
            .and_then(|p| st.nodes.get(p))
            .map(|p| (p.ip.clone(), p.port))
    };
    if let Some((ip, port)) = primary {
        state.replication.follow(&state.store, ip, port);
    }
    // The replication offset, read at every tick: replicas rank
    // themselves by it in an election, and a manual failover waits for it.
    let weak = Arc::downgrade(state);
    let offset = move || weak.upgrade().map_or(0, |s| s.store.effects.offset());
    tokio::spawn(run(node, listener, shutdown, offset));
}

/// Carries out what the cluster state asks of the server.
struct ServerHost(std::sync::Weak<State>);

impl Host for ServerHost {
    /// A peer node naming a user must log in as it, and the user must be
    /// allowed `CLUSTER MEET` (what joining a cluster is; a gateway's
    /// credentials must not make a node).
    fn admits(&self, user: &str, password: &str) -> bool {
        let Some(state) = self.0.upgrade() else {
            return false;
        };
        let Some(cell) = state.acl.authenticate(user.as_bytes(), password.as_bytes()) else {
            return false;
        };
        crate::cmd::exec::permit::may_run_args(
            &crate::cmd::registry::table::REGISTRY,
            &cell,
            &[b"CLUSTER", b"MEET", b"127.0.0.1", b"0"],
        )
        .is_ok()
    }

    /// As the server runs its other long waits (`Store::blocking_section`).
    fn off_worker(&self, f: &mut dyn FnMut()) {
        match self.0.upgrade() {
            Some(state) => state.store.blocking_section(f),
            None => f(),
        }
    }

    fn apply(&self, effects: &Effects) {
        let Some(state) = self.0.upgrade() else {
            return;
        };
        match &effects.follow {
            Some(Some((ip, port))) => {
                tracing::info!("cluster: following {ip}:{port}");
                state.replication.follow(&state.store, ip.clone(), *port);
            }
            Some(None) => {
                let backlog = state.settings.get(&state.settings.repl_backlog_size);
                state
                    .replication
                    .promote(&state.store, usize::try_from(backlog).unwrap_or(usize::MAX));
            }
            None => {}
        }
        if !effects.dirty_slots.is_empty() {
            let n = crate::cmd::admin::cluster::delete_keys_in_slots(&state, &effects.dirty_slots);
            // A slot given away by a move is empty here: only keys left
            // behind (a slot taken by a higher epoch) are news.
            if n > 0 {
                tracing::warn!(
                    "cluster: deleted {n} keys of {} slots another node took",
                    effects.dirty_slots.len()
                );
            }
        }
    }
}

/// Runs the bus until `shutdown`: accepts peers on `listener`, keeps links
/// and ticks every 100 ms.
pub async fn run(
    bus: Arc<Bus>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    offset: impl Fn() -> u64 + Send + 'static,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            accepted = listener.accept() => {
                if let Ok((stream, peer)) = accepted {
                    tokio::spawn(inbound(bus.clone(), stream, peer));
                }
            }
            _ = tick.tick() => {
                let now = now_ms();
                let wanted = bus.lock_state().wanted_links();
                for (id, ip, cport) in wanted {
                    connect(&bus, id, ip, cport, now);
                }
                let offset = offset();
                bus.with(|st| {
                    st.set_repl_offset(offset);
                    ((), st.tick(now))
                });
            }
        }
    }
}

async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.ok()?;
    let n = bus::frame_len(header).ok()?;
    let mut body = vec![0u8; n];
    stream.read_exact(&mut body).await.ok()?;
    Some(body)
}

/// A link a peer opened: its Hello, then PINGs (and MEETs, FAILs,
/// UPDATEs) answered on the same link.
async fn inbound(bus: Arc<Bus>, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let local = stream
        .local_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let peer_ip = peer.ip().to_string();
    let hello = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut stream)).await;
    let Ok(Some(body)) = hello else { return };
    let Ok(hello) = bus::decode::<Hello>(&body) else {
        return;
    };
    let given = hello.password.as_deref().unwrap_or("");
    let admitted = match (&hello.user, bus.require.lock().clone()) {
        // A user named is always checked, as `AUTH user password` is.
        (Some(user), _) => bus.admits(user, given),
        (None, Some(pw)) => subtle::ConstantTimeEq::ct_eq(given.as_bytes(), pw.as_bytes()).into(),
        (None, None) => true,
    };
    if !admitted {
        bus.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("cluster bus: refused a link from {peer}: wrong or missing password, or a user not allowed CLUSTER MEET");
        return;
    }
    while let Some(body) = read_frame(&mut stream).await {
        let Ok(msg) = bus::decode::<Message>(&body) else {
            tracing::warn!("cluster bus: malformed message from {peer}, closing the link");
            return;
        };
        let reply = bus.with(|st| {
            let mut fx = st.receive(&msg, From::Inbound, &peer_ip, &local, now_ms());
            (fx.reply.take(), fx)
        });
        if let Some(r) = reply {
            if stream.write_all(&bus::encode(&r)).await.is_err() {
                return;
            }
        }
    }
}

/// A link's writer: the messages queued for it, each batch in one write,
/// after the tasks ready when they were queued. A command that queues a
/// message (`SETSLOT NODE` broadcasts a PONG to every node) writes its
/// reply first, as Redis's event loop writes the clients' replies before
/// the cluster links' buffers: sent before it, the three PONGs of a
/// four-node reshard took ~150 us of each SETSLOT's reply time.
async fn send_queued(
    mut rx: mpsc::UnboundedReceiver<Message>,
    mut write: impl AsyncWriteExt + Unpin,
) {
    let mut frames = Vec::new();
    while let Some(m) = rx.recv().await {
        super::connection::behind_the_ready().await;
        frames.clear();
        frames.extend_from_slice(&bus::encode(&m));
        while let Ok(m) = rx.try_recv() {
            frames.extend_from_slice(&bus::encode(&m));
        }
        if write.write_all(&frames).await.is_err() {
            return;
        }
    }
}

/// Opens the link to node `id`, unless one is being opened.
fn connect(bus: &Arc<Bus>, id: String, ip: String, cport: u16, now: Millis) {
    let link = bus.new_link_id();
    let (tx, rx) = mpsc::unbounded_channel();
    // Claim the node's link slot now, so the next tick does not open a
    // second one while this connects; the first message is sent once
    // connected.
    let first = bus.link_up(&id, link, now);
    let Some(first) = first else { return };
    bus.add_link(link, tx);
    let bus = bus.clone();
    tokio::spawn(async move {
        outbound(&bus, link, &ip, cport, first, rx).await;
        bus.remove_link(link);
        bus.with(|st| {
            st.link_down(link);
            ((), Effects::default())
        });
    });
}

async fn outbound(
    bus: &Arc<Bus>,
    link: LinkId,
    ip: &str,
    cport: u16,
    first: Message,
    rx: mpsc::UnboundedReceiver<Message>,
) {
    let addr = format!(
        "{}:{cport}",
        ip.trim_start_matches('[').trim_end_matches(']')
    );
    let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&addr)).await;
    let Ok(Ok(stream)) = connect else {
        // Keep the link slot a moment, so a dead node is not redialled
        // every 100 ms.
        tokio::time::sleep(Duration::from_millis(500)).await;
        return;
    };
    let _ = stream.set_nodelay(true);
    let peer_ip = ip.to_string();
    let local = stream
        .local_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let (mut read, mut write) = stream.into_split();
    let hello = Hello {
        version: bus::VERSION,
        password: bus.auth.lock().clone(),
        user: bus.auth_user.lock().clone(),
    };
    if write.write_all(&bus::encode(&hello)).await.is_err()
        || write.write_all(&bus::encode(&first)).await.is_err()
    {
        return;
    }
    // The writer runs as a task of its own, not as a `select!` arm beside
    // the reader: `read_frame` is not cancel-safe (`read_exact`), and a
    // send arriving while half a PONG was read dropped that half, so the
    // next header was JSON text and the link closed. Under load (a
    // reshard broadcasts a PONG on every SETSLOT) links churned, PONGs were
    // lost, and nodes counted a majority unreachable.
    let mut writer = tokio::spawn(send_queued(rx, write));
    let reader = async {
        while let Some(body) = read_frame(&mut read).await {
            let Ok(msg) = bus::decode::<Message>(&body) else {
                return;
            };
            bus.with(|st| {
                (
                    (),
                    st.receive(&msg, From::Outbound(link), &peer_ip, &local, now_ms()),
                )
            });
        }
    };
    tokio::select! {
        _ = &mut writer => {}
        () = reader => {}
    }
    writer.abort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::node::Host;
    use crate::cluster::state::ClusterState;

    /// A link's socket that notes when it is written to.
    struct Noted(Arc<parking_lot::Mutex<Vec<&'static str>>>);

    impl tokio::io::AsyncWrite for Noted {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.lock().push("message");
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A message a command queues (SETSLOT NODE's PONG) is written after
    /// the command's reply, which its connection writes once the tasks
    /// ready before it have run: the reply does not wait for the links.
    #[tokio::test(flavor = "current_thread")]
    async fn a_message_a_command_queues_goes_after_the_commands_reply() {
        let noted = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(send_queued(rx, Noted(noted.clone())));
        // The writer waits for its first message.
        tokio::task::yield_now().await;
        let (note, m) = (
            noted.clone(),
            ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000)
                .message(bus::Kind::Pong, 0),
        );
        let command = tokio::spawn(async move {
            tx.send(m.clone()).unwrap();
            tx.send(m).unwrap();
            // As the connection does between a batch and its flush.
            crate::server::connection::behind_the_ready().await;
            note.lock().push("reply");
            tx
        });
        let tx = command.await.unwrap();
        drop(tx);
        writer.await.unwrap();
        // Both messages in one write, after the reply.
        assert_eq!(*noted.lock(), ["reply", "message"]);
    }

    struct Quiet;
    impl Host for Quiet {
        fn apply(&self, _: &Effects) {}
    }

    async fn node(password: Option<&str>) -> (Arc<Bus>, u16, watch::Sender<bool>) {
        node_timed(password, 500).await
    }

    /// A node whose node timeout is `timeout_ms`.
    async fn node_timed(
        password: Option<&str>,
        timeout_ms: u64,
    ) -> (Arc<Bus>, u16, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cport = listener.local_addr().unwrap().port();
        let st = ClusterState::new(
            crate::cluster::state::random_id(),
            String::new(),
            cport - 1,
            cport,
            timeout_ms,
        );
        let bus = Bus::new(st, None);
        bus.set_host(Box::new(Quiet));
        *bus.auth.lock() = password.map(str::to_string);
        *bus.require.lock() = password.map(str::to_string);
        let (tx, rx) = watch::channel(false);
        tokio::spawn(run(bus.clone(), listener, rx, || 0));
        (bus, cport, tx)
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_meet_over_tcp_and_agree_on_slots() {
        let a = node(Some("s3cret")).await;
        let b = node(Some("s3cret")).await;
        let c = node(Some("s3cret")).await;
        b.0.with(|st| (st.add_slots(&[1, 2, 3]).unwrap(), Effects::default()));
        b.0.with(|st| {
            (
                st.start_handshake("127.0.0.1", a.1 - 1, a.1, now_ms()),
                Effects::default(),
            )
        });
        c.0.with(|st| {
            (
                st.start_handshake("127.0.0.1", a.1 - 1, a.1, now_ms()),
                Effects::default(),
            )
        });
        let all = [a.0.clone(), b.0.clone(), c.0.clone()];
        until("three nodes to know each other", || {
            all.iter().all(|n| {
                n.state
                    .lock()
                    .nodes
                    .values()
                    .filter(|x| !x.in_handshake())
                    .count()
                    == 3
            })
        })
        .await;
        let owner = b.0.state.lock().myself.clone();
        until("slot 2 to be known everywhere", || {
            all.iter()
                .all(|n| n.state.lock().owner(2) == Some(owner.as_str()))
        })
        .await;
    }

    /// A peer whose PONGs arrive in pieces while this node sends on the
    /// same link: every one is read, on the one link (a send used to drop
    /// a half-read frame and close the link). The fake peer keeps its end
    /// open to the end: closed after its last PONG, the node rightly
    /// redialled it on its next 100 ms tick, and whether the test saw that
    /// second link before its last look depended on the machine's load
    /// (12 runs in 30 failed at a load average of 10).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_read_in_pieces_survive_sends_on_the_same_link() {
        const PONGS: u64 = 200;
        // A node timeout past the test's own deadline: the link is to be
        // reopened only if a frame is broken. At 500 ms, a machine loaded
        // enough to stall the fake peer for 250 ms made the node reopen a
        // quiet link by the liveness rule (1 run in 6 beside a cluster
        // test), which is not what this test is about.
        let (a, _, _stop) = node_timed(None, 60_000).await;
        let fake = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cport = fake.local_addr().unwrap().port();
        a.with(|st| {
            (
                st.start_handshake("127.0.0.1", cport - 1, cport, now_ms()),
                Effects::default(),
            )
        });
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let (first, _) = fake.accept().await.unwrap();
            counter.fetch_add(1, Ordering::Relaxed);
            // Count any reconnection too.
            tokio::spawn(async move {
                while fake.accept().await.is_ok() {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            let (mut rd, mut wr) = first.into_split();
            read_frame(&mut rd).await.expect("hello");
            read_frame(&mut rd).await.expect("meet");
            // Whatever the node sends is drained, so its writes never wait.
            tokio::spawn(async move { while read_frame(&mut rd).await.is_some() {} });
            for i in 1..=PONGS {
                let m = Message {
                    kind: bus::Kind::Pong,
                    sender: "f".repeat(40),
                    ip: "127.0.0.1".into(),
                    port: cport - 1,
                    cport,
                    flags: crate::cluster::state::flag::MASTER,
                    primary: None,
                    current_epoch: i,
                    config_epoch: 0,
                    repl_offset: 0,
                    slots: vec![],
                    gossip: vec![],
                    paused: false,
                };
                let frame = bus::encode(&m);
                let (head, tail) = frame.split_at(frame.len() / 2);
                if wr.write_all(head).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                if wr.write_all(tail).await.is_err() {
                    return;
                }
            }
            // The link stays open: a peer that closes it is redialled.
            std::future::pending::<()>().await;
            drop(wr);
        });
        let sender = a.clone();
        let sending = tokio::spawn(async move {
            loop {
                sender.with(|st| ((), st.broadcast_pong(now_ms())));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        // A broken frame closes the link and loses the PONGs after it:
        // a second link ends the wait at once.
        until("every PONG to be read, or a second link", || {
            a.state.lock().messages_received >= PONGS || accepted.load(Ordering::Relaxed) > 1
        })
        .await;
        sending.abort();
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            1,
            "one link, never reopened"
        );
        assert_eq!(a.state.lock().messages_received, PONGS);
        assert_eq!(a.state.lock().current_epoch, PONGS);
        let st = a.state.lock();
        assert!(st.nodes[&"f".repeat(40)].link.is_some(), "still linked");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_without_the_password_is_not_let_in() {
        let a = node(Some("s3cret")).await;
        let b = node(Some("wrong")).await;
        b.0.with(|st| {
            (
                st.start_handshake("127.0.0.1", a.1 - 1, a.1, now_ms()),
                Effects::default(),
            )
        });
        until("two refused links", || {
            a.0.refused.load(Ordering::Relaxed) >= 2
        })
        .await;
        assert_eq!(a.0.state.lock().nodes.len(), 1, "a learned nothing from b");
        let st = b.0.state.lock();
        assert!(st
            .nodes
            .values()
            .all(|n| n.in_handshake() || n.id == st.myself));
    }
}
