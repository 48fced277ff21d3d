//! One server per file: a lock (`flock`) on `NAME.lock` beside the
//! append-only file, held while the file is on, and the clean-up of
//! rewrites' temporary files that only the lock's holder may make.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

use super::{Aof, AofError};

impl Aof {
    /// The lock file beside the file: `NAME.lock`.
    pub fn lock_path(&self) -> PathBuf {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        self.path.with_file_name(format!("{name}.lock"))
    }

    /// Takes the lock beside the file (`flock` on `NAME.lock`, held while
    /// the file is on: a lock on the file itself would not survive a
    /// rewrite's rename), then removes temporary files of rewrites cut
    /// short (`.NAME.tmp-*`: with the lock held, no one else writes
    /// one). Another server holding it is [`AofError::Locked`].
    pub fn acquire(&self) -> Result<(), AofError> {
        let mut held = self.lock.lock();
        if held.is_some() {
            return Ok(());
        }
        let lock = self.lock_path();
        let io_err = |source| AofError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = super::open_nofollow(
            &lock,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600),
        )
        .map_err(|e| match e.raw_os_error() {
            // A link planted where the lock goes is not followed, and
            // named as what it is.
            Some(libc::ELOOP) => AofError::Symlink { path: lock.clone() },
            _ => io_err(e),
        })?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(AofError::Locked {
                    path: self.path.clone(),
                    lock,
                });
            }
            return Err(io_err(e));
        }
        // Who holds it, for whoever finds the second server refused.
        let _ = file
            .set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        *held = Some(file);
        drop(held);
        self.remove_stale_temps();
        Ok(())
    }

    /// Lets the lock go (the file is off, or the server stops).
    pub fn release(&self) {
        *self.lock.lock() = None;
    }

    /// Removes `.NAME.tmp-*` beside the file: rewrites' temporary files
    /// (`snapshot::create_temp`'s names) that a kill during a rewrite
    /// left. Called with the lock held.
    fn remove_stale_temps(&self) {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let prefix = format!(".{name}.tmp-");
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) => d.to_owned(),
            None => PathBuf::from("."),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            if !file.to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let path = entry.path();
            let bytes = entry.metadata().map_or(0, |m| m.len());
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::warn!(
                    path = %path.display(),
                    bytes,
                    "removed a temporary file of an append-only file rewrite cut short"
                ),
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot remove a stale temporary file: {e}")
                }
            }
        }
    }
}
