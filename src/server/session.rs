//! Per-connection state that commands read and change.

use std::sync::Arc;

use super::clients::ClientInfo;
use crate::stats::Local;

#[derive(Debug)]
pub struct Session {
    pub info: Arc<ClientInfo>,
    /// False while a password is set and not yet given.
    pub authenticated: bool,
    /// Close the connection once the replies so far are written (QUIT).
    pub close_after_reply: bool,
    /// Counters since the last batch, flushed into `Stats` after it.
    pub stats: Local,
}

impl Session {
    pub fn new(info: Arc<ClientInfo>, password_set: bool) -> Self {
        Session {
            info,
            authenticated: !password_set,
            close_after_reply: false,
            stats: Local::default(),
        }
    }
}
