//! The cluster bus's messages and their framing.
//!
//! The design is Redis Cluster's (PING, PONG, MEET, FAIL, UPDATE, and the
//! failover's AUTH-REQUEST, AUTH-ACK and MFSTART, each
//! header carrying the sender's epochs, role and slots, PINGs carrying a
//! gossip section about other nodes); the encoding is Turnstile's own:
//! one JSON object per frame behind a 4-byte big-endian length. Redis's
//! binary header buys nothing here (a node sends about ten messages a
//! second), while JSON through serde can be read by a person and parsed
//! without a line of hand-written decoding that a hostile peer could
//! break. A frame is at most [`MAX_FRAME`] bytes; a longer one ends the
//! link.

use serde::{Deserialize, Serialize};

/// Largest frame a node accepts: a PING about 1,000 nodes with fragmented
/// slots is well under it.
pub const MAX_FRAME: usize = 4 << 20;

/// The bus protocol's version, in the first frame of every link.
pub const VERSION: u32 = 1;

/// What a message is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Kind {
    Ping,
    Pong,
    /// A PING that asks the receiver to add the sender to its nodes.
    Meet,
    /// `id` failed: a majority of primaries agreed.
    Fail {
        id: String,
    },
    /// `id` owns `slots` at `config_epoch`: sent to a node whose claim is
    /// stale.
    Update {
        id: String,
        config_epoch: u64,
        slots: Vec<(u16, u16)>,
    },
    /// A replica asks a primary for its vote in the election of the
    /// header's current epoch, for the slots the header claims. `force`
    /// is Redis's FORCEACK: a manual failover, voted for although the
    /// replica's primary is not `fail`.
    AuthRequest {
        #[serde(default)]
        force: bool,
    },
    /// A primary's vote, for the election of the header's current epoch.
    AuthAck,
    /// A replica asks its primary to pause writes for a manual failover
    /// (Redis's MFSTART); the primary answers with PINGs marked `paused`
    /// carrying its replication offset.
    MfStart,
}

/// What a message says about one other node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gossip {
    pub id: String,
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    pub ping_sent: u64,
    pub pong_received: u64,
}

/// One bus message: the sender's header, then what it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub kind: Kind,
    pub sender: String,
    /// The sender's address as it announces it; empty if it does not know
    /// it yet (the receiver takes the link's peer address).
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    /// The sender's primary, if it is a replica.
    pub primary: Option<String>,
    pub current_epoch: u64,
    /// The sender's config epoch (its primary's, if a replica).
    pub config_epoch: u64,
    pub repl_offset: u64,
    /// Slots the sender (or its primary) serves, as inclusive ranges.
    pub slots: Vec<(u16, u16)>,
    #[serde(default)]
    pub gossip: Vec<Gossip>,
    /// The sender is a primary pausing writes for its replica's manual
    /// failover (Redis's CLUSTERMSG_FLAG0_PAUSED): `repl_offset` is final.
    #[serde(default)]
    pub paused: bool,
}

/// The first frame on every link: who connects, and the password if the
/// receiver needs one (its `requirepass`, which every node of a cluster
/// shares; the sender uses its `masterauth`, else its own password), or
/// with `user` (the sender's `masteruser`) an ACL user's name and
/// password, checked against the receiver's users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("cluster bus frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLong(usize),
    #[error("malformed cluster bus message: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Encodes `value` as one frame.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The body length a frame header announces, checked against the limit.
pub fn frame_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let n = u32::from_be_bytes(header) as usize;
    if n > MAX_FRAME {
        return Err(FrameError::TooLong(n));
    }
    Ok(n)
}

/// Decodes a frame's body.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, FrameError> {
    Ok(serde_json::from_slice(body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Hello without a user is the bytes nodes before users sent, and
    /// theirs still read: a cluster can be upgraded a node at a time.
    #[test]
    fn a_hello_without_a_user_is_the_one_older_nodes_speak() {
        let old = Hello {
            version: VERSION,
            password: Some("pw".into()),
            user: None,
        };
        let body = serde_json::to_string(&old).unwrap();
        assert!(!body.contains("user"), "{body}");
        let read: Hello = decode(br#"{"version":1,"password":"pw"}"#).unwrap();
        assert_eq!(read.user, None);
        let with: Hello = decode(br#"{"version":1,"password":"pw","user":"node"}"#).unwrap();
        assert_eq!(with.user.as_deref(), Some("node"));
    }

    #[test]
    fn a_message_round_trips_and_garbage_is_refused() {
        let m = Message {
            kind: Kind::Update {
                id: "a".repeat(40),
                config_epoch: 7,
                slots: vec![(0, 5460)],
            },
            sender: "b".repeat(40),
            ip: "127.0.0.1".into(),
            port: 7000,
            cport: 17000,
            flags: 2,
            primary: None,
            current_epoch: 9,
            config_epoch: 3,
            repl_offset: 12,
            slots: vec![(5461, 10922)],
            gossip: vec![],
            paused: false,
        };
        let frame = encode(&m);
        let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, frame.len() - 4);
        assert_eq!(decode::<Message>(&frame[4..]).unwrap(), m);
        assert!(decode::<Message>(b"{\"kind\":1}").is_err());
        assert!(decode::<Message>(&[0xff; 64]).is_err());
        assert!(frame_len((MAX_FRAME as u32 + 1).to_be_bytes()).is_err());
    }
}
