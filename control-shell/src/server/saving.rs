//! `automatic_state_save`: the saved state kept as a snapshot (the state
//! file) and a journal beside it (`<saved_state>.journal`).
//!
//! Owns: [`Saver`]: appending each committed routing generation to the
//! journal as one record, synced before the change is answered; the
//! compaction (a new snapshot written by a thread of its own from the
//! generated requests, after which the journal keeps only the records the
//! snapshot lacks); a full save when the saved files do not hold the
//! committed state (the boot from the config, an upgrade's successor, an
//! append that failed, `state save` to the saved state's path); the heap
//! trim once a compaction's copy is freed; and [`SavedBase`], what the
//! boot read.
//!
//! Must never: answer a change before its record is synced; write two
//! snapshots at once; drop a journal record before a synced snapshot holds
//! it; append after a record that may be torn; or put the snapshot's write
//! on the answer path of a change (only the copy of the requests it
//! renders is taken on the main thread).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use command::proto;
use command::state::ConfigState;
use command::state_file::{
    Journal, JournalReplay, StateFileError, highest_journal_seq, journal_path, save_snapshot,
};
use mio::Waker;

use super::CommandServer;

/// A compaction starts at most this long after the previous one started
/// (when the journal holds a record), unless the journal is past
/// [`COMPACT_MIN_BYTES`] and its share of the snapshot.
pub const COMPACT_INTERVAL: Duration = Duration::from_secs(5);

/// A journal of records past this many bytes is compacted without waiting
/// for [`COMPACT_INTERVAL`], once it is also past
/// 1/[`COMPACT_SNAPSHOT_SHARE`] of the snapshot: some 250 single adds,
/// whose replay at a boot costs far less than the snapshot's.
pub const COMPACT_MIN_BYTES: u64 = 64 << 10;

/// Past 1/this of the snapshot's length (and [`COMPACT_MIN_BYTES`]), the
/// journal is compacted at once: its replay never adds more than an eighth
/// to the snapshot's at a boot.
pub const COMPACT_SNAPSHOT_SHARE: u64 = 8;

/// How long a full save, an upgrade or the end of the command server
/// waits for a snapshot being written.
const COMPACTION_WAIT: Duration = Duration::from_secs(30);

/// Whether a journal holding `records` bytes of records, beside a
/// snapshot of `snapshot` bytes, whose last compaction started `since`
/// ago, is compacted now.
fn compaction_due(records: u64, snapshot: u64, since: Duration) -> bool {
    let past_size = records >= COMPACT_MIN_BYTES.max(snapshot / COMPACT_SNAPSHOT_SHARE);
    records > 0 && (past_size || since >= COMPACT_INTERVAL)
}

/// What the boot state is, for the saved files.
#[derive(Debug)]
pub enum SavedBase {
    /// The saved state's snapshot and journal, as read: the journal goes on
    /// after its last whole record.
    Saved(JournalReplay),
    /// Anything else (the config's declarations, an older state file
    /// without a journal, an upgrade's handover): the saved files must be
    /// written whole before a record can follow them.
    Other,
}

/// A snapshot being written.
#[derive(Debug)]
struct Compaction {
    /// The last record it holds.
    seq: u64,
    /// The journal's length when it was taken: the records after it are
    /// not in the snapshot.
    mark: u64,
    /// How long the copy of the requests took, on the main thread.
    copied: Duration,
    requests: usize,
    /// The snapshot's length, or why it was not written; and how long its
    /// thread took.
    done: Receiver<(Result<u64, StateFileError>, Duration)>,
    thread: Option<JoinHandle<()>>,
}

/// The saved state's writer. See the module documentation.
#[derive(Debug)]
pub(super) struct Saver {
    /// `saved_state`.
    path: Option<PathBuf>,
    /// `automatic_state_save`.
    automatic: bool,
    /// Open while the snapshot and the journal hold the committed state:
    /// the next change is appended.
    journal: Option<Journal>,
    /// The snapshot's length, for [`COMPACT_SNAPSHOT_SHARE`].
    snapshot_len: u64,
    last_compaction: Instant,
    compaction: Option<Compaction>,
    /// Woken by the compaction's thread when it is done, so that its end
    /// is taken while the command thread is idle rather than on the path
    /// of the next change.
    waker: Arc<Waker>,
}

impl Saver {
    pub(super) fn new(path: Option<PathBuf>, automatic: bool, waker: Arc<Waker>) -> Self {
        Self {
            path,
            automatic,
            journal: None,
            snapshot_len: 0,
            last_compaction: Instant::now(),
            compaction: None,
            waker,
        }
    }

    /// Whether `path` names the saved state file.
    pub(super) fn is_saved_state(&self, path: &Path) -> bool {
        let Some(saved) = &self.path else {
            return false;
        };
        if saved == path {
            return true;
        }
        // Two spellings of one file: compare what they resolve to.
        match (saved.canonicalize(), path.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// Takes over the saved files the boot read, or writes them whole
    /// when the boot state is not theirs. Nothing to do without
    /// `automatic_state_save`.
    fn resume(&mut self, base: SavedBase, state: &ConfigState) -> Result<(), StateFileError> {
        let Some(path) = self.path.clone().filter(|_| self.automatic) else {
            return Ok(());
        };
        match base {
            SavedBase::Saved(replay) => {
                if let Some(torn) = &replay.torn {
                    log::warn!(
                        "journal {}: dropped its last {} byte(s) from line {}: {}; an append \
                         that a crash interrupted, never acknowledged",
                        replay.path.display(),
                        torn.bytes,
                        torn.line,
                        torn.why
                    );
                }
                self.snapshot_len = std::fs::metadata(&path).map_or(0, |m| m.len());
                self.journal = Some(Journal::resume(&replay)?);
                Ok(())
            }
            SavedBase::Other => self.save_whole(state).map(|_| ()),
        }
    }

    /// Records a committed change with `automatic_state_save`: appended to
    /// the journal and synced, or the whole state saved when the journal
    /// cannot go on.
    pub(super) fn record(
        &mut self,
        steps: &[proto::Request],
        state: &ConfigState,
    ) -> Result<(), StateFileError> {
        if !self.automatic || self.path.is_none() {
            return Ok(());
        }
        let Some(journal) = &mut self.journal else {
            return self.save_whole(state).map(|_| ());
        };
        if let Err(error) = journal.append(steps) {
            // The record may be half there: the next change saves whole.
            self.journal = None;
            return Err(error);
        }
        Ok(())
    }

    /// Takes the end of a compaction, and starts one if it is due: called
    /// once the answers are written, so that the copy of the requests a
    /// snapshot renders (30 to 70 ms at 100,000 routes) is not on the answer
    /// path of the change that made it due.
    pub(super) fn tick(&mut self, state: &ConfigState) {
        self.collect(false);
        self.maybe_compact(state);
    }

    /// Writes the snapshot of `state` now (waiting for one being written),
    /// then a new empty journal after it: `state save` to the saved state's
    /// path, and the first save of a state the saved files do not hold.
    /// Returns the number of requests saved.
    pub(super) fn save_whole(&mut self, state: &ConfigState) -> Result<usize, StateFileError> {
        let Some(path) = self.path.clone() else {
            return Ok(0);
        };
        self.journal = None;
        self.collect(true);
        if self.compaction.is_some() {
            // Two snapshots at once could land in the wrong order.
            return Err(StateFileError::Io {
                path,
                operation: "save",
                source: std::io::Error::other(
                    "a snapshot is still being written: try again once it is done",
                ),
            });
        }
        // Higher than any record already in the journal, so that none is
        // replayed over this snapshot should the journal's rewrite below
        // not happen.
        let seq = highest_journal_seq(&path)?;
        let requests = state.generate_requests();
        self.snapshot_len = save_snapshot(&path, &requests, seq)?;
        self.last_compaction = Instant::now();
        let journal = Journal::create(journal_path(&path), seq)?;
        if self.automatic {
            self.journal = Some(journal);
        }
        Ok(requests.len())
    }

    /// Waits for a snapshot being written, and lets its journal go on: an
    /// upgrade's successor writes the saved files next.
    pub(super) fn settle(&mut self) {
        self.collect(true);
    }

    /// This process no longer writes the saved files (an upgrade's
    /// successor took them over).
    pub(super) fn retire(&mut self) {
        self.collect(true);
        self.journal = None;
        self.automatic = false;
    }

    fn maybe_compact(&mut self, state: &ConfigState) {
        let (Some(path), Some(journal), None) = (&self.path, &self.journal, &self.compaction)
        else {
            return;
        };
        let records = journal.len().saturating_sub(Journal::EMPTY_LEN);
        if !compaction_due(records, self.snapshot_len, self.last_compaction.elapsed()) {
            return;
        }
        let started = Instant::now();
        let requests = state.generate_requests();
        let copied = started.elapsed();
        let count = requests.len();
        let (seq, mark) = (journal.seq(), journal.len());
        let (done_tx, done) = mpsc::channel();
        let target = path.clone();
        let waker = Arc::clone(&self.waker);
        let spawned = std::thread::Builder::new()
            .name("preread-snapshot".to_owned())
            .spawn(move || {
                let written = save_snapshot(&target, &requests, seq);
                // The copy is freed here, in this thread's arena: trimmed
                // by the command thread once it takes the outcome.
                drop(requests);
                // The server may be gone by then: nothing to tell.
                let _ = done_tx.send((written, started.elapsed()));
                if let Err(error) = waker.wake() {
                    log::warn!(
                        "the snapshot is written, but the command thread was not woken: {error}"
                    );
                }
            });
        self.last_compaction = started;
        match spawned {
            Ok(thread) => {
                log::debug!(
                    "compacting the state journal: {count} request(s), up to record {seq}, \
                     into {}",
                    path.display()
                );
                self.compaction = Some(Compaction {
                    seq,
                    mark,
                    copied,
                    requests: count,
                    done,
                    thread: Some(thread),
                });
            }
            Err(error) => log::error!(
                "cannot start the thread that compacts the journal {}: {error}; it grows \
                 until the next try",
                journal.path().display()
            ),
        }
    }

    /// Takes the end of the snapshot being written, if it ended (or, with
    /// `wait`, once it ends, for at most [`COMPACTION_WAIT`]): its journal
    /// then keeps only the records after it.
    fn collect(&mut self, wait: bool) {
        let Some(compaction) = &mut self.compaction else {
            return;
        };
        let outcome = if wait {
            match compaction.done.recv_timeout(COMPACTION_WAIT) {
                Ok(outcome) => Some(outcome),
                Err(RecvTimeoutError::Timeout) => {
                    log::error!(
                        "the snapshot of record {} is still being written after {:?}",
                        compaction.seq,
                        COMPACTION_WAIT
                    );
                    return;
                }
                Err(RecvTimeoutError::Disconnected) => None,
            }
        } else {
            match compaction.done.try_recv() {
                Ok(outcome) => Some(outcome),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => None,
            }
        };
        if let Some(thread) = compaction.thread.take()
            && thread.join().is_err()
        {
            log::error!("the thread writing the snapshot panicked");
        }
        let Some(compaction) = self.compaction.take() else {
            return;
        };
        let Some(path) = &self.path else {
            return;
        };
        // The copy and the rendered text were freed: give the pages back.
        crate::heap::trim();
        match outcome {
            Some((Ok(len), took)) => {
                self.snapshot_len = len;
                let trimmed = match &mut self.journal {
                    Some(journal) => journal.keep_from(compaction.mark),
                    None => Ok(()),
                };
                match trimmed {
                    Ok(()) => log::info!(
                        "state journal compacted: {} holds {} request(s), the journal up to \
                         record {} ({} ms, {} ms of them copying the requests)",
                        path.display(),
                        compaction.requests,
                        compaction.seq,
                        took.as_millis(),
                        compaction.copied.as_millis()
                    ),
                    // The snapshot's header says which records it holds:
                    // the journal is still right, only longer.
                    Err(error) => log::error!(
                        "the snapshot {} holds the journal up to record {}, but the journal \
                         could not drop those records: {error}",
                        path.display(),
                        compaction.seq
                    ),
                }
            }
            Some((Err(error), _)) => log::error!(
                "compacting the state journal into {} failed: {error}; the journal keeps \
                 every record, and the next compaction tries again",
                path.display()
            ),
            None => log::error!("the thread writing the snapshot ended without a word"),
        }
    }
}

impl Drop for Saver {
    fn drop(&mut self) {
        self.collect(true);
    }
}

impl CommandServer {
    /// With `automatic_state_save`, takes over the saved files the boot
    /// read (`base`), or writes them whole when the boot state is not
    /// theirs. Call it once the workers booted, before serving.
    ///
    /// # Errors
    ///
    /// The file that could not be written or opened; the next change then
    /// saves the whole state again.
    pub fn resume_saved_state(&mut self, base: SavedBase) -> Result<(), StateFileError> {
        self.saved.resume(base, self.coordinator.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_journal_is_never_compacted() {
        assert!(!compaction_due(0, 0, Duration::from_secs(3600)));
    }

    #[test]
    fn a_small_journal_waits_for_the_interval() {
        let snapshot = 14 << 20;
        assert!(!compaction_due(300, snapshot, Duration::from_secs(1)));
        assert!(!compaction_due(
            COMPACT_MIN_BYTES,
            snapshot,
            COMPACT_INTERVAL - Duration::from_millis(1)
        ));
        assert!(compaction_due(300, snapshot, COMPACT_INTERVAL));
    }

    #[test]
    fn a_large_journal_is_compacted_at_once() {
        let now = Duration::ZERO;
        // A small snapshot: the floor decides.
        assert!(!compaction_due(COMPACT_MIN_BYTES - 1, 1_000, now));
        assert!(compaction_due(COMPACT_MIN_BYTES, 1_000, now));
        // A large one: its share decides.
        let snapshot = 14 << 20;
        assert!(!compaction_due(
            snapshot / COMPACT_SNAPSHOT_SHARE - 1,
            snapshot,
            now
        ));
        assert!(compaction_due(
            snapshot / COMPACT_SNAPSHOT_SHARE,
            snapshot,
            now
        ));
    }
}
