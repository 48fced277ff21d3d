//! The live cells that are more than an atomic: the password with its
//! digest, and the output buffer limits of each client class.

use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::kind::{Cell, Val};
use super::values::{OutputLimit, OutputLimits};

/// `requirepass`: the password and its digest.
#[derive(Default)]
pub struct Secret(pub(super) RwLock<Option<Password>>);

impl Cell for Secret {
    fn load(&self) -> Val {
        self.0
            .read()
            .as_ref()
            .map_or(Val::None, |p| Val::Bytes(p.text.to_vec()))
    }
    fn store(&self, v: Val) {
        *self.0.write() = match v {
            Val::Bytes(b) => Password::new(&b),
            Val::Text(s) => Password::new(s.as_bytes()),
            _ => None,
        };
    }
}

/// The password and its digest, taken once when it is set.
pub(super) struct Password {
    pub(super) text: Arc<[u8]>,
    pub(super) digest: [u8; 32],
}

impl Password {
    /// `None` for an empty password (none).
    pub(super) fn new(text: &[u8]) -> Option<Password> {
        if text.is_empty() {
            return None;
        }
        let mut digest = [0; 32];
        digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, text).as_ref());
        Some(Password {
            text: text.into(),
            digest,
        })
    }
}

/// `--client-output-buffer-limit`: each class's hard, soft and soft
/// seconds.
#[derive(Default)]
pub struct LiveOutputLimits([[AtomicU64; 3]; 2]);

impl LiveOutputLimits {
    pub(super) fn get(&self) -> OutputLimits {
        let class = |[hard, soft, secs]: &[AtomicU64; 3]| OutputLimit {
            hard: hard.load(Ordering::Relaxed),
            soft: soft.load(Ordering::Relaxed),
            soft_seconds: secs.load(Ordering::Relaxed),
        };
        OutputLimits {
            normal: class(&self.0[0]),
            replica: class(&self.0[1]),
        }
    }

    pub(super) fn set(&self, limits: OutputLimits) {
        for (cells, l) in self.0.iter().zip([limits.normal, limits.replica]) {
            cells[0].store(l.hard, Ordering::Relaxed);
            cells[1].store(l.soft, Ordering::Relaxed);
            cells[2].store(l.soft_seconds, Ordering::Relaxed);
        }
    }
}

impl Cell for LiveOutputLimits {
    fn load(&self) -> Val {
        Val::Limits(self.get())
    }
    fn store(&self, v: Val) {
        if let Val::Limits(l) = v {
            self.set(l);
        }
    }
}
