//! Reloads the policies when their files change. The watch is on the
//! directory (a file's parent, for a single file): editors and
//! Kubernetes' ConfigMap mounts replace a file by renaming a new one over
//! it, which a watch on the file itself would miss. Events are debounced
//! (a burst of writes is one reload), and a reload that finds a bad file
//! keeps the policies in force (`Policies::reload`).

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use super::Policies;

/// How long the files must be quiet before a reload: an editor's save or
/// a `cp` is several events.
const SETTLE: Duration = Duration::from_millis(100);

/// A running watch; dropping it stops the thread.
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
    stop: Option<mpsc::Sender<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.take();
    }
}

/// Watches the policy path of `policies`, reloading through `reload`
/// (which stamps the time and counts the outcome).
pub fn start(
    policies: Arc<Policies>,
    reload: impl Fn(&Policies) + Send + 'static,
) -> Result<Option<Watch>, notify::Error> {
    let Some(path) = policies.path().map(Path::to_path_buf) else {
        return Ok(None);
    };
    let dir = if path.is_dir() {
        path.clone()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let (tx, rx) = mpsc::channel::<()>();
    let events = tx.clone();
    let file = (!path.is_dir())
        .then(|| path.file_name().map(|n| n.to_os_string()))
        .flatten();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if event.kind.is_access() {
            return;
        }
        // For a single file, only events on it (by name: it may be a new
        // inode now) matter.
        let relevant = match &file {
            Some(name) => event
                .paths
                .iter()
                .any(|p| p.file_name() == Some(name.as_os_str())),
            None => true,
        };
        if relevant {
            let _ = events.send(());
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("policy-watch".into())
        .spawn(move || {
            let _keep = tx;
            loop {
                // Wait for a change, or for the watch to be dropped.
                match rx.recv_timeout(Duration::from_millis(200)) {
                    Ok(()) => {}
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if let Err(mpsc::TryRecvError::Disconnected) = stop_rx.try_recv() {
                            return;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
                while rx.recv_timeout(SETTLE).is_ok() {}
                if let Err(mpsc::TryRecvError::Disconnected) = stop_rx.try_recv() {
                    return;
                }
                reload(&policies);
            }
        })
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Some(Watch {
        _watcher: watcher,
        stop: Some(stop_tx),
    }))
}
