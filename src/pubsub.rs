//! Pub/Sub: channels and patterns, and the mailboxes messages wait in until
//! their subscriber's connection writes them. Redis Sentinel finds the
//! other Sentinels through the `__sentinel__:hello` channel of the servers
//! it watches, and clients use it beside their limits.
//!
//! `PUBLISH` encodes each message once per subscriber, in the subscriber's
//! protocol (a RESP3 push or a RESP2 array), straight into that
//! subscriber's mailbox, and wakes its connection, which writes the mailbox
//! out between batches. A subscriber that lets its mailbox pass
//! [`MAILBOX_LIMIT`] is disconnected, as Redis's `client-output-buffer-limit
//! pubsub` hard limit does.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::clients::ClientInfo;
use crate::protocol::{Protocol, ReplyBuf};

/// Bytes a subscriber may leave unread before it is disconnected (Redis's
/// default `client-output-buffer-limit pubsub 32mb`).
pub const MAILBOX_LIMIT: usize = 32 << 20;

/// Where one subscriber's messages wait for its connection.
#[derive(Debug)]
pub struct Mailbox {
    info: Arc<ClientInfo>,
    pending: Mutex<BytesMut>,
    ready: Notify,
}

impl Mailbox {
    pub fn new(info: Arc<ClientInfo>) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            info,
            pending: Mutex::new(BytesMut::new()),
            ready: Notify::new(),
        })
    }

    /// Resolves when a message may be waiting (a permit is kept if none
    /// waits, so no message is missed).
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Moves the waiting messages to `out`.
    pub fn drain_into(&self, out: &mut ReplyBuf) {
        let mut pending = self.pending.lock();
        if !pending.is_empty() {
            out.buffer().extend_from_slice(&pending);
            pending.clear();
        }
    }

    /// Appends one message, written by `write` in the subscriber's
    /// protocol.
    fn post(&self, write: impl FnOnce(&mut ReplyBuf)) {
        let proto = match self.info.resp.load(Ordering::Relaxed) {
            3 => Protocol::Resp3,
            _ => Protocol::Resp2,
        };
        let mut pending = self.pending.lock();
        let mut buf = ReplyBuf::from_bytes(std::mem::take(&mut *pending), proto);
        write(&mut buf);
        *pending = buf.into_bytes();
        let over = pending.len() > MAILBOX_LIMIT;
        drop(pending);
        if over {
            self.info.kill();
        }
        self.ready.notify_one();
    }
}

/// Subscribers of one channel or pattern, by client id.
type Subscribers = HashMap<u64, Arc<Mailbox>>;

/// Every channel and pattern with at least one subscriber.
#[derive(Debug, Default)]
pub struct PubSub {
    channels: RwLock<HashMap<Box<[u8]>, Subscribers>>,
    patterns: RwLock<HashMap<Box<[u8]>, Subscribers>>,
}

impl PubSub {
    /// Adds `mailbox` to `channel` (`pattern`: a glob). False if it was
    /// there already.
    pub fn subscribe(&self, pattern: bool, name: &[u8], mailbox: &Arc<Mailbox>) -> bool {
        let mut map = self.map(pattern).write();
        map.entry(name.into())
            .or_default()
            .insert(mailbox.info.id, mailbox.clone())
            .is_none()
    }

    /// Removes client `id` from `name`. False if it was not there.
    pub fn unsubscribe(&self, pattern: bool, name: &[u8], id: u64) -> bool {
        let mut map = self.map(pattern).write();
        let Some(subs) = map.get_mut(name) else {
            return false;
        };
        let was = subs.remove(&id).is_some();
        if subs.is_empty() {
            map.remove(name);
        }
        was
    }

    fn map(&self, pattern: bool) -> &RwLock<HashMap<Box<[u8]>, Subscribers>> {
        if pattern {
            &self.patterns
        } else {
            &self.channels
        }
    }

    /// `PUBLISH`: posts `message` to every subscriber of `channel` and of
    /// every pattern it matches; returns how many got it (a client counted
    /// once per subscription, as Redis counts).
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> usize {
        let mut receivers = 0;
        if let Some(subs) = self.channels.read().get(channel) {
            receivers += deliver(subs, None, channel, message);
        }
        for (pattern, subs) in self.patterns.read().iter() {
            if crate::glob::matches(pattern, channel) {
                receivers += deliver(subs, Some(pattern), channel, message);
            }
        }
        receivers
    }

    /// How many subscribers `publish` would post a message on `channel`
    /// to now (for a script's deferred `PUBLISH`: its reply).
    pub fn receivers(&self, channel: &[u8]) -> usize {
        let mut receivers = self.channels.read().get(channel).map_or(0, HashMap::len);
        for (pattern, subs) in self.patterns.read().iter() {
            if crate::glob::matches(pattern, channel) {
                receivers += subs.len();
            }
        }
        receivers
    }

    /// Calls `f` with every subscription: pattern or channel, its name,
    /// the subscriber (`ACL SETUSER` closes those its new rules deny).
    pub fn each_subscription(&self, mut f: impl FnMut(bool, &[u8], &Arc<ClientInfo>)) {
        for pattern in [false, true] {
            for (name, subs) in self.map(pattern).read().iter() {
                for mailbox in subs.values() {
                    f(pattern, name, &mailbox.info);
                }
            }
        }
    }

    /// `PUBSUB CHANNELS [pattern]`: channels with subscribers.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Box<[u8]>> {
        self.channels
            .read()
            .keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::matches(p, c)))
            .cloned()
            .collect()
    }

    /// `PUBSUB NUMSUB`: subscribers of `channel`.
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.read().get(channel).map_or(0, HashMap::len)
    }

    /// Channels with subscribers (`INFO pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.channels.read().len()
    }

    /// Patterns with subscribers (`PUBSUB NUMPAT`, `INFO pubsub_patterns`).
    pub fn pattern_count(&self) -> usize {
        self.patterns.read().len()
    }
}

/// Posts one `message` (or, through `pattern`, `pmessage`) to each of
/// `subs`; returns how many.
fn deliver(subs: &Subscribers, pattern: Option<&[u8]>, channel: &[u8], message: &[u8]) -> usize {
    for m in subs.values() {
        m.post(|out| {
            match pattern {
                None => {
                    out.push(3);
                    out.bulk(b"message");
                }
                Some(p) => {
                    out.push(4);
                    out.bulk(b"pmessage");
                    out.bulk(p);
                }
            }
            out.bulk(channel);
            out.bulk(message);
        });
    }
    subs.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_channel_and_pattern_subscribers_in_their_protocol() {
        let clients = crate::clients::Clients::default();
        let addr = ([127, 0, 0, 1], 6379).into();
        let (a, b) = (clients.register(addr, addr), clients.register(addr, addr));
        b.resp.store(3, Ordering::Relaxed);
        let (ma, mb) = (Mailbox::new(a.clone()), Mailbox::new(b.clone()));
        let ps = PubSub::default();
        assert!(ps.subscribe(false, b"news", &ma));
        assert!(!ps.subscribe(false, b"news", &ma));
        assert!(ps.subscribe(true, b"n*", &mb));
        assert_eq!(ps.publish(b"news", b"hi"), 2);
        assert_eq!(ps.publish(b"other", b"x"), 0);
        let mut out = ReplyBuf::default();
        ma.drain_into(&mut out);
        assert_eq!(
            out.written_since(0),
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        let mut out = ReplyBuf::default();
        mb.drain_into(&mut out);
        assert_eq!(
            out.written_since(0),
            b">4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        assert_eq!(ps.numsub(b"news"), 1);
        assert!(ps.unsubscribe(false, b"news", a.id));
        assert!(!ps.unsubscribe(false, b"news", a.id));
        assert_eq!((ps.channel_count(), ps.pattern_count()), (0, 1));
    }
}
