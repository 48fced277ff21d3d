//! Cluster mode under Redis Sentinel (`--cluster-sentinels`): every node
//! follows which member of each shard is its primary, so `CLUSTER SLOTS`,
//! `MOVED` and the routing of writes follow a failover.
//!
//! Each node keeps one connection to every Sentinel: on connecting it asks
//! where each shard's primary is (`SENTINEL GET-MASTER-ADDR-BY-NAME`), then
//! subscribes to `+switch-master`, which Sentinel publishes when it has
//! promoted a replica. Any Sentinel's word is taken (they agree by quorum
//! before they fail over); a repeated one changes nothing.
//!
//! The replies are read by a few lines of RESP2 parsing here: the server's
//! decoder reads requests (arrays of bulk strings) only, and Sentinel also
//! answers null arrays, errors and integers.

use bytes::{Buf, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::state::State;

const TIMEOUT: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_secs(1);
/// The longest reply kept while incomplete.
const MAX_REPLY: usize = 1 << 20;

/// Follows every Sentinel of `sentinels` until shutdown.
pub async fn watch(
    state: Arc<State>,
    sentinels: Vec<(String, u16)>,
    shutdown: watch::Receiver<bool>,
) {
    let tasks: Vec<_> = sentinels
        .into_iter()
        .map(|(host, port)| {
            let state = state.clone();
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    let r = tokio::select! {
                        r = follow(&state, &host, port) => r,
                        _ = shutdown.changed() => return,
                    };
                    if let Err(e) = r {
                        tracing::debug!(sentinel = %format!("{host}:{port}"), error = %e, "sentinel connection lost");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// Asks the Sentinels where each shard's primary is before the node
/// serves, so a restarted old primary knows at once that it is one no
/// longer. The first Sentinel that answers is enough; with none answering
/// within [`TIMEOUT`] each, the cluster file's word stands until one does.
pub async fn ask_first(state: &State, sentinels: &[(String, u16)]) {
    for (host, port) in sentinels {
        let asked = async {
            let mut s = connect(host, *port).await?;
            ask(state, &mut s, &mut BytesMut::new(), Start::Yes).await
        };
        match tokio::time::timeout(TIMEOUT, asked).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => {
                tracing::warn!(sentinel = %format!("{host}:{port}"), error = %e, "cannot ask Sentinel for the shards' primaries")
            }
            Err(_) => {
                tracing::warn!(sentinel = %format!("{host}:{port}"), "Sentinel did not answer in time")
            }
        }
    }
}

async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let s = tokio::time::timeout(TIMEOUT, TcpStream::connect((host, port)))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Whether the node is starting (it has served no one yet).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    Yes,
    No,
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` for every shard, applied.
async fn ask(
    state: &State,
    s: &mut TcpStream,
    buf: &mut BytesMut,
    start: Start,
) -> std::io::Result<()> {
    let Some(topology) = &state.cluster else {
        return Ok(());
    };
    for shard in &topology.shards {
        send(
            s,
            &[
                b"SENTINEL",
                b"GET-MASTER-ADDR-BY-NAME",
                shard.name.as_bytes(),
            ],
        )
        .await?;
        let reply = tokio::time::timeout(TIMEOUT, read(s, buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply"))??;
        if let Value::Array(Some(v)) = reply {
            if let [Value::Bulk(Some(ip)), Value::Bulk(Some(p))] = &v[..] {
                let ip = String::from_utf8_lossy(ip);
                let p = std::str::from_utf8(p).ok().and_then(|p| p.parse().ok());
                if let Some(p) = p {
                    primary_is(state, &shard.name, &ip, p, start);
                }
            }
        }
    }
    Ok(())
}

/// One connection to one Sentinel: ask, subscribe, apply what it says.
async fn follow(state: &State, host: &str, port: u16) -> std::io::Result<()> {
    // Subscribed first, then asked (on a second connection: a subscribed
    // one may not ask), so no failover can fall between the answer and
    // the subscription.
    let mut s = connect(host, port).await?;
    let mut buf = BytesMut::with_capacity(4096);
    send(&mut s, &[b"SUBSCRIBE", b"+switch-master"]).await?;
    tokio::time::timeout(TIMEOUT, read(&mut s, &mut buf))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply"))??;
    let mut asking = connect(host, port).await?;
    ask(state, &mut asking, &mut BytesMut::new(), Start::No).await?;
    drop(asking);
    tracing::info!(sentinel = %format!("{host}:{port}"), "following Sentinel's failovers");
    loop {
        // "message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"
        if let Value::Array(Some(v)) = read(&mut s, &mut buf).await? {
            if let [Value::Bulk(Some(kind)), _, Value::Bulk(Some(text))] = &v[..] {
                if kind.as_slice() == b"message" {
                    let text = String::from_utf8_lossy(text);
                    let w: Vec<&str> = text.split(' ').collect();
                    if let [name, _, _, ip, port] = w[..] {
                        if let Ok(port) = port.parse() {
                            primary_is(state, name, ip, port, Start::No);
                        }
                    }
                }
            }
        }
    }
}

/// Sentinel says shard `name`'s primary is `ip:port`. At start, a node
/// whose shard has another primary follows it at once (a restarted old
/// primary must not serve stale reads until Sentinel reconfigures it);
/// later, a node's own role is left to Sentinel's `REPLICAOF`, so a stale
/// answer from a Sentinel reconnecting mid-failover cannot demote the
/// primary it has just promoted.
fn primary_is(state: &State, name: &str, ip: &str, port: u16, start: Start) {
    let Some(t) = &state.cluster else { return };
    let Some(shard) = t.shard_named(name) else {
        return;
    };
    match t.find(ip, port) {
        Some(i) if t.nodes[i].shard == shard => {
            if t.set_primary(i) {
                tracing::info!(shard = name, primary = %format!("{ip}:{port}"), "shard primary changed (Sentinel)");
            }
            // Our own shard's primary is another node: follow it now
            // rather than serve stale reads until Sentinel says so (it
            // will, with the same REPLICAOF). Promotion stays Sentinel's.
            if start == Start::Yes && t.nodes[t.me].shard == shard && i != t.me {
                let n = &t.nodes[i];
                if state
                    .replication
                    .follow(&state.store, n.host.clone(), n.port)
                {
                    tracing::info!(primary = %n.addr(), "following this shard's primary (Sentinel)");
                }
            }
        }
        _ => tracing::warn!(
            shard = name,
            primary = %format!("{ip}:{port}"),
            "Sentinel names a primary that is not a member of the shard; ignored"
        ),
    }
}

async fn send(s: &mut TcpStream, args: &[&[u8]]) -> std::io::Result<()> {
    s.write_all(&crate::protocol::request::encode(args)).await
}

/// A RESP2 reply.
#[derive(Debug, PartialEq, Eq)]
enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

async fn read(s: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<Value> {
    loop {
        match parse(buf) {
            Ok(Some((v, n))) => {
                buf.advance(n);
                return Ok(v);
            }
            Ok(None) if buf.len() < MAX_REPLY => {}
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a RESP2 reply",
                ))
            }
        }
        if s.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// One whole reply at the start of `b` and its length; `Ok(None)` if it
/// is not all there yet.
fn parse(b: &[u8]) -> Result<Option<(Value, usize)>, ()> {
    let Some(end) = b.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let (head, line) = (*b.first().ok_or(())?, &b[1..end]);
    let text = std::str::from_utf8(line).map_err(|_| ())?;
    let at = end + 2;
    let num = || text.parse::<i64>().map_err(|_| ());
    Ok(Some(match head {
        b'+' => (Value::Simple(text.into()), at),
        b'-' => (Value::Error(text.into()), at),
        b':' => (Value::Int(num()?), at),
        b'$' => match num()? {
            -1 => (Value::Bulk(None), at),
            n if n >= 0 => {
                let n = n as usize;
                if b.len() < at + n + 2 {
                    return Ok(None);
                }
                (Value::Bulk(Some(b[at..at + n].to_vec())), at + n + 2)
            }
            _ => return Err(()),
        },
        b'*' => match num()? {
            -1 => (Value::Array(None), at),
            n if n >= 0 => {
                let mut items = Vec::new();
                let mut pos = at;
                for _ in 0..n {
                    let Some((v, used)) = parse(&b[pos..])? else {
                        return Ok(None);
                    };
                    items.push(v);
                    pos += used;
                }
                (Value::Array(Some(items)), pos)
            }
            _ => return Err(()),
        },
        _ => return Err(()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_whole_or_not_at_all() {
        let msg = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$5\r\nhello\r\n";
        let (v, n) = parse(msg).unwrap().unwrap();
        assert_eq!(n, msg.len());
        assert_eq!(
            v,
            Value::Array(Some(vec![
                Value::Bulk(Some(b"message".to_vec())),
                Value::Bulk(Some(b"+switch-master".to_vec())),
                Value::Bulk(Some(b"hello".to_vec())),
            ]))
        );
        for cut in 0..msg.len() {
            assert_eq!(parse(&msg[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(b"*-1\r\n"), Ok(Some((Value::Array(None), 5))));
        assert_eq!(parse(b":-3\r\n"), Ok(Some((Value::Int(-3), 5))));
        assert_eq!(
            parse(b"-ERR x\r\n").unwrap().unwrap().0,
            Value::Error("ERR x".into())
        );
        assert!(parse(b"?\r\n").is_err());
        assert!(parse(b"$-5\r\n").is_err());
    }
}
