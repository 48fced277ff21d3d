//! One server per file: a lock (`flock`) on `NAME.lock` beside the
//! append-only file, held while the file is on, and the clean-up of
//! rewrites' temporary files that only the lock's holder may make.

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
        let file = crate::util::lock_beside(&lock).map_err(|e| match e {
            crate::util::LockError::Symlink => AofError::Symlink { path: lock.clone() },
            crate::util::LockError::Held => AofError::Locked {
                path: self.path.clone(),
                lock: lock.clone(),
            },
            crate::util::LockError::Io(source) => AofError::Io {
                path: self.path.clone(),
                source,
            },
        })?;
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
