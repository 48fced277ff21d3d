//! RESP in and out: the request decoder (RESP arrays and inline commands)
//! and the reply encoder (RESP2 and RESP3).

pub mod decode;
pub mod inline;
pub mod peek;
pub mod reply;
pub mod request;

pub use decode::{Decoder, Limits, ProtocolError};
pub use reply::{Protocol, ReplyBuf};
pub use request::Request;

/// The Redis version reported to clients (`INFO`, `HELLO`): the Redis 7
/// command set and replies this server follows. Clients gate features on it.
pub const REDIS_VERSION: &str = "7.2.0";
