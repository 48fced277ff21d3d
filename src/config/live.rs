//! The settings in force: those `CONFIG SET` changes, each in a cell read
//! on every request, beside the values the server started with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::cells::Password;
use super::fields::{Config, Live};
use super::values::{MaxmemoryPolicy, OutputLimit, OutputLimits};

/// The live cells, and the settings as the server started with them
/// (flags, variables, file) for those fixed at start.
pub struct Settings {
    pub(super) live: Live,
    pub config: Config,
}

impl std::ops::Deref for Settings {
    type Target = Live;
    fn deref(&self) -> &Live {
        &self.live
    }
}

impl Settings {
    /// Why the server is open to the network without protection, if it
    /// is: it listens beyond loopback with protected mode off and no
    /// password. Computed live (`CONFIG SET` changes both), for the
    /// start-up warning and `INFO`'s `security_warning`.
    pub fn exposure(&self, listening: std::net::IpAddr) -> Option<String> {
        let open = !listening.is_loopback()
            && !self.protected_mode.load(Ordering::Relaxed)
            && self.password().is_none();
        open.then(|| {
            format!(
                "listening on {listening} with protected mode off and no password: anyone who can reach the port can lift every limit (set --requirepass-file, or bind to 127.0.0.1)"
            )
        })
    }

    pub fn password(&self) -> Option<Arc<[u8]>> {
        self.requirepass.0.read().as_ref().map(|p| p.text.clone())
    }

    pub fn set_password(&self, p: Option<&[u8]>) {
        *self.requirepass.0.write() = p.and_then(Password::new);
    }

    /// Whether `guess` is the password, in time that depends on neither
    /// how much of it is right nor the password's length: SHA-256 digests
    /// are compared in constant time, the password's computed when it was
    /// set (comparing the bytes would take time in proportion to the
    /// password's length: 25 us for 15,000 bytes). `None` if there is no
    /// password.
    pub fn password_matches(&self, guess: &[u8]) -> Option<bool> {
        use subtle::ConstantTimeEq;
        let stored = self.requirepass.0.read();
        let p = stored.as_ref()?;
        let digest = ring::digest::digest(&ring::digest::SHA256, guess);
        Some(digest.as_ref().ct_eq(&p.digest).into())
    }

    pub fn output_limit(&self) -> OutputLimit {
        self.output_limits().normal
    }

    /// Every class of `--client-output-buffer-limit`.
    pub fn output_limits(&self) -> OutputLimits {
        self.live.output_limits.get()
    }

    /// `CONFIG SET client-output-buffer-limit`.
    pub fn set_output_limits(&self, limits: OutputLimits) {
        self.live.output_limits.set(limits)
    }

    pub fn policy(&self) -> MaxmemoryPolicy {
        MaxmemoryPolicy::from_index(self.maxmemory_policy.load(Ordering::Relaxed))
    }

    pub fn get(&self, a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_compare_by_digest() {
        let settings = Settings::new(&Config::default(), Some(b"s3cret".to_vec()));
        assert_eq!(settings.password_matches(b"s3cret"), Some(true));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3CRET", &[b'x'; 15_000]] {
            assert_eq!(settings.password_matches(wrong), Some(false), "{wrong:?}");
        }
        settings.set_password(Some(b""));
        assert_eq!(settings.password_matches(b""), None);
        assert!(settings.password().is_none());
        settings.set_password(Some(b"new"));
        assert_eq!(settings.password_matches(b"new"), Some(true));
        assert_eq!(settings.password().as_deref(), Some(&b"new"[..]));
    }
}
