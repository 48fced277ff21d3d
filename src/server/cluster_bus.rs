//! The cluster bus: the listener on the bus port, one outbound link to
//! every known node, and the 100 ms clock that drives
//! [`ClusterState`]. Each link carries length-prefixed frames
//! (`cluster/bus.rs`): a [`Hello`] first, then messages. The state is
//! behind one lock, taken for the moment a message is handled; what it
//! asks for (replies, sends, following a primary, deleting keys of lost
//! slots) runs after the lock is released.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::cluster::bus::{self, Hello, Message};
use crate::cluster::state::{ClusterState, Effects, From, LinkId, Millis};

/// Wall-clock milliseconds: the bus's times are shown in `CLUSTER NODES`,
/// which Redis fills from `mstime()`.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// What the server does with the state's effects and changes.
pub trait Host: Send + Sync + 'static {
    /// The state changed (routing to republish, the file to write if
    /// `save_needed`). Called with the lock held.
    fn changed(&self, state: &mut ClusterState);
    /// Side effects that leave the cluster state: following a primary,
    /// deleting the keys of slots lost.
    fn apply(&self, effects: &Effects);
}

/// The bus of one node.
pub struct Bus {
    pub state: Mutex<ClusterState>,
    links: Mutex<HashMap<LinkId, mpsc::UnboundedSender<Message>>>,
    next_link: AtomicU64,
    /// The password this node sends in its Hello.
    pub auth: Mutex<Option<String>>,
    /// The password a peer's Hello must carry.
    pub require: Mutex<Option<String>>,
    /// Links refused for a wrong or missing password.
    pub refused: AtomicU64,
    host: Box<dyn Host>,
}

impl Bus {
    pub fn new(state: ClusterState, host: Box<dyn Host>) -> Arc<Self> {
        Arc::new(Bus {
            state: Mutex::new(state),
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
            auth: Mutex::new(None),
            require: Mutex::new(None),
            refused: AtomicU64::new(0),
            host,
        })
    }

    /// Runs `f` on the state, then does what it asked: the place every
    /// change to the state goes through, commands included.
    pub fn with<R>(&self, f: impl FnOnce(&mut ClusterState) -> (R, Effects)) -> R {
        let (r, fx) = {
            let mut st = self.state.lock();
            let (r, fx) = f(&mut st);
            if st.changed || st.save_needed {
                self.host.changed(&mut st);
                st.changed = false;
            }
            (r, fx)
        };
        self.dispatch(fx);
        r
    }

    fn dispatch(&self, fx: Effects) {
        if !fx.send.is_empty() {
            let links = self.links.lock();
            for (link, m) in &fx.send {
                if let Some(tx) = links.get(link) {
                    let _ = tx.send(m.clone());
                }
            }
        }
        if fx.follow.is_some() || !fx.dirty_slots.is_empty() {
            self.host.apply(&fx);
        }
    }

    /// Tells every node this node's configuration now (after a command
    /// changed its slots or epoch), rather than at the next PING.
    pub fn broadcast(&self) {
        self.with(|st| ((), st.broadcast_pong(now_ms())));
    }
}

/// Runs the bus until `shutdown`: accepts peers on `listener`, keeps links
/// and ticks every 100 ms.
pub async fn run(bus: Arc<Bus>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
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
                let wanted = bus.state.lock().wanted_links();
                for (id, ip, cport) in wanted {
                    connect(&bus, id, ip, cport, now);
                }
                bus.with(|st| ((), st.tick(now)));
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
    let required = bus.require.lock().clone();
    if let Some(pw) = required {
        let given = hello.password.as_deref().unwrap_or("");
        let same: bool = subtle::ConstantTimeEq::ct_eq(given.as_bytes(), pw.as_bytes()).into();
        if !same {
            bus.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("cluster bus: refused a link from {peer}: wrong or missing password");
            return;
        }
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

/// Opens the link to node `id`, unless one is being opened.
fn connect(bus: &Arc<Bus>, id: String, ip: String, cport: u16, now: Millis) {
    let link = bus.next_link.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::unbounded_channel();
    // Claim the node's link slot now, so the next tick does not open a
    // second one while this connects; the first message is sent once
    // connected.
    let first = {
        let mut st = bus.state.lock();
        st.link_up(&id, link, now)
    };
    let Some(first) = first else { return };
    bus.links.lock().insert(link, tx);
    let bus = bus.clone();
    tokio::spawn(async move {
        outbound(&bus, link, &ip, cport, first, rx).await;
        bus.links.lock().remove(&link);
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
    mut rx: mpsc::UnboundedReceiver<Message>,
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
    };
    if write.write_all(&bus::encode(&hello)).await.is_err()
        || write.write_all(&bus::encode(&first)).await.is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(m) = out else { return };
                if write.write_all(&bus::encode(&m)).await.is_err() {
                    return;
                }
            }
            body = read_frame(&mut read) => {
                let Some(body) = body else { return };
                let Ok(msg) = bus::decode::<Message>(&body) else { return };
                bus.with(|st| ((), st.receive(&msg, From::Outbound(link), &peer_ip, &local, now_ms())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quiet;
    impl Host for Quiet {
        fn changed(&self, _: &mut ClusterState) {}
        fn apply(&self, _: &Effects) {}
    }

    async fn node(password: Option<&str>) -> (Arc<Bus>, u16, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cport = listener.local_addr().unwrap().port();
        let st = ClusterState::new(
            crate::cluster::state::random_id(),
            String::new(),
            cport - 1,
            cport,
            500,
        );
        let bus = Bus::new(st, Box::new(Quiet));
        *bus.auth.lock() = password.map(str::to_string);
        *bus.require.lock() = password.map(str::to_string);
        let (tx, rx) = watch::channel(false);
        tokio::spawn(run(bus.clone(), listener, rx));
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
