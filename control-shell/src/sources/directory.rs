//! The directory source's thread: watches a directory with inotify (the
//! `notify` crate, debounced) and reports its `*.toml` files' fragments
//! after every change.
//!
//! Owns: the watch (re-established when the directory is missing, removed
//! or replaced), the debounce ([`DEBOUNCE`]: an editor's or `rsync`'s burst
//! of writes is one change), the scan (every fragment file read whole,
//! regular files of at most [`MAX_FILE_BYTES`] only, so a FIFO cannot hold
//! the thread), a file deleted during the scan taken as removed (never
//! as a broken fragment: a burst of 1,000 deletions is no warning), one
//! log line per scan for the files gone since the last one, and the
//! check for the stop flag every [`POLL`]. Must never: report a scan that
//! failed part way as a whole read.

use std::collections::BTreeSet;
use std::io::{self, ErrorKind};
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
    let mut known: BTreeSet<String> = BTreeSet::new();
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
                Ok(fragments) => {
                    let names = fragments.iter().map(|f| f.id.name.clone()).collect();
                    log_removed(path, &known, &names);
                    known = names;
                    SourceEvent::Synced {
                        kind: SourceKind::Directory,
                        fragments,
                        at: SystemTime::now(),
                    }
                }
                Err(error) => {
                    // Gone or replaced: a new watch is needed to see it again.
                    let _ = debouncer.watcher().unwatch(path);
                    watching = false;
                    failed(path, &format!("cannot be read: {error}"))
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

/// One line for the fragment files of `before` that `now` no longer
/// holds: a burst of deletions is one line, naming the first few.
fn log_removed(path: &Path, before: &BTreeSet<String>, now: &BTreeSet<String>) {
    let gone = removed(before, now);
    if let Some(first) = gone.first() {
        let more = match gone.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        log::info!(
            "directory source {}: {} fragment file(s) removed ({first}{more}); their routes go",
            path.display(),
            gone.len()
        );
    }
}

/// The names of `before` that `now` does not hold, in name order.
fn removed<'a>(before: &'a BTreeSet<String>, now: &BTreeSet<String>) -> Vec<&'a str> {
    before
        .iter()
        .filter(|name| !now.contains(*name))
        .map(String::as_str)
        .collect()
}

/// Every fragment file of `path`, in name order; a file deleted between
/// the listing and its read is left out, as removed.
fn scan(path: &Path) -> io::Result<Vec<Fragment>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
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
        .filter_map(|name| read_fragment(&path.join(&name), &name))
        .collect())
}

/// The fragment of `file`, or `None` when it no longer exists (deleted
/// since the listing: a removal, not a broken fragment).
fn read_fragment(file: &Path, name: &str) -> Option<Fragment> {
    let metadata = match std::fs::metadata(file) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == ErrorKind::NotFound => return None,
        Err(error) => return Some(unreadable(name, &error.to_string())),
    };
    if !metadata.is_file() {
        return Some(unreadable(name, "not a regular file"));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Some(unreadable(
            name,
            &format!(
                "{} bytes, over the {MAX_FILE_BYTES} a fragment file may hold",
                metadata.len()
            ),
        ));
    }
    match std::fs::read_to_string(file) {
        Ok(text) => Some(fragment(name, &text)),
        Err(error) if error.kind() == ErrorKind::NotFound => None,
        Err(error) => Some(unreadable(name, &error.to_string())),
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
        let fragments = scan(dir.path())?;
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

    /// Issue 28: a file deleted between the listing and its read is a
    /// removal, and the files gone since the last scan are named once.
    #[test]
    fn a_deleted_file_is_removed_not_broken() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let gone = dir.path().join("gone.toml");
        assert!(read_fragment(&gone, "gone.toml").is_none(), "deleted");
        std::fs::write(&gone, "[clusters.g]\n")?;
        assert!(matches!(
            read_fragment(&gone, "gone.toml").map(|f| f.body),
            Some(FragmentBody::Declared(_))
        ));
        let before: BTreeSet<String> = ["a.toml", "b.toml", "c.toml"].map(String::from).into();
        let now: BTreeSet<String> = ["b.toml", "d.toml"].map(String::from).into();
        assert_eq!(removed(&before, &now), ["a.toml", "c.toml"]);
        assert!(removed(&now, &now).is_empty());
        Ok(())
    }
}
