//! The directory source's thread: watches a directory with inotify (the
//! `notify` crate, debounced) and reports its `*.toml` files' fragments
//! after every change.
//!
//! Owns: the watch (re-established when the directory is missing, removed
//! or replaced), the debounce ([`DEBOUNCE`]: an editor's or `rsync`'s burst
//! of writes is one change), the scan (every fragment file read whole,
//! regular files of at most [`MAX_FILE_BYTES`] only, so a FIFO cannot hold
//! the thread), and the check for the stop flag every [`POLL`]. Must
//! never: report a scan that failed part way as a whole read.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, SystemTime};

use command::sources::directory::{fragment, is_fragment_file, unreadable};
use command::sources::{Fragment, SourceKind};
use notify_debouncer_mini::new_debouncer;
use notify_debouncer_mini::notify::RecursiveMode;

use super::{Reporter, SourceEvent};

/// Quiet time after a change before the directory is read again.
pub(super) const DEBOUNCE: Duration = Duration::from_millis(100);

/// The largest fragment file read; a larger one is excluded.
pub(super) const MAX_FILE_BYTES: u64 = 16 << 20;

/// How often the thread looks at the stop flag, and retries a watch that
/// failed.
const POLL: Duration = Duration::from_secs(1);

/// Runs the source until the proxy stops it.
pub(super) fn run(path: &Path, reporter: &Reporter) {
    let (tx, rx) = mpsc::channel();
    let mut debouncer = match new_debouncer(DEBOUNCE, tx) {
        Ok(debouncer) => debouncer,
        Err(error) => {
            reporter.report(failed(path, &format!("cannot start watching: {error}")));
            return;
        }
    };
    let mut watching = false;
    loop {
        if !watching {
            match debouncer.watcher().watch(path, RecursiveMode::NonRecursive) {
                Ok(()) => watching = true,
                Err(error) => {
                    if !reporter.report(failed(path, &format!("cannot watch it: {error}"))) {
                        return;
                    }
                }
            }
        }
        if watching {
            let event = match scan(path) {
                Ok(fragments) => SourceEvent::Synced {
                    kind: SourceKind::Directory,
                    fragments,
                    at: SystemTime::now(),
                },
                Err(error) => {
                    // Gone or replaced: a new watch is needed to see it again.
                    let _ = debouncer.watcher().unwatch(path);
                    watching = false;
                    failed(path, &error)
                }
            };
            if !reporter.report(event) {
                return;
            }
        }
        // Wait for a change (or, without a watch, for the next attempt).
        loop {
            match rx.recv_timeout(POLL) {
                Ok(Ok(_)) if watching => break,
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    log::warn!("directory source {}: watch error: {error}", path.display());
                    let _ = debouncer.watcher().unwatch(path);
                    watching = false;
                    break;
                }
                Err(RecvTimeoutError::Timeout) if reporter.stopped() => return,
                Err(RecvTimeoutError::Timeout) if !watching => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

fn failed(path: &Path, why: &str) -> SourceEvent {
    SourceEvent::Failed {
        kind: SourceKind::Directory,
        error: format!("directory {}: {why}", path.display()),
    }
}

/// Every fragment file of `path`, in name order.
fn scan(path: &Path) -> Result<Vec<Fragment>, String> {
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot be read: {e}"))?;
        match entry.file_name().into_string() {
            Ok(name) if is_fragment_file(&name) => names.push(name),
            // Not a fragment file, or a name that is not UTF-8 (never one:
            // fragment names are printed and compared as text).
            _ => {}
        }
    }
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| read_fragment(&path.join(&name), &name))
        .collect())
}

fn read_fragment(file: &Path, name: &str) -> Fragment {
    let metadata = match std::fs::metadata(file) {
        Ok(metadata) => metadata,
        Err(error) => return unreadable(name, &error.to_string()),
    };
    if !metadata.is_file() {
        return unreadable(name, "not a regular file");
    }
    if metadata.len() > MAX_FILE_BYTES {
        return unreadable(
            name,
            &format!(
                "{} bytes, over the {MAX_FILE_BYTES} a fragment file may hold",
                metadata.len()
            ),
        );
    }
    match std::fs::read_to_string(file) {
        Ok(text) => fragment(name, &text),
        Err(error) => unreadable(name, &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use command::sources::FragmentBody;

    #[test]
    fn a_scan_reads_every_fragment_file_in_name_order() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("b.toml"), "[clusters.b]\n")?;
        std::fs::write(dir.path().join("a.toml"), "[clusters.a\n")?;
        std::fs::write(dir.path().join(".hidden.toml"), "[clusters.h]\n")?;
        std::fs::write(dir.path().join("notes.txt"), "x")?;
        std::fs::create_dir(dir.path().join("d.toml"))?;
        let fragments = scan(dir.path()).map_err(std::io::Error::other)?;
        let names: Vec<&str> = fragments.iter().map(|f| f.id.name.as_str()).collect();
        assert_eq!(names, ["a.toml", "b.toml", "d.toml"]);
        assert!(matches!(fragments[0].body, FragmentBody::Broken(_)));
        assert!(matches!(fragments[1].body, FragmentBody::Declared(_)));
        assert!(
            matches!(&fragments[2].body, FragmentBody::Broken(p) if p[0].message.contains("not a regular file"))
        );
        assert!(scan(&dir.path().join("missing")).is_err());
        Ok(())
    }
}
