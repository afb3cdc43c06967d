//! A saved state as the boot and `state load` read it: the snapshot, then
//! the journal's records that follow it.
//!
//! Owns: reading the two files together and the sequence number a new
//! snapshot must carry. Must never: return the snapshot without the
//! journal records it is continued by, or a state replayed in part.

use std::path::Path;

use super::format::{self, Check};
use super::journal;
use super::{JournalReplay, SavedState, StateFileError, files, journal_path};

pub(super) fn load(path: &Path) -> Result<SavedState, StateFileError> {
    let text = files::read_state_text(path)?;
    let snapshot = format::replay(&text, Check::Sealed)?;
    drop(text);
    let snapshot_requests = snapshot.requests.len();
    let mut state = snapshot.state;
    let mut requests = snapshot.requests;
    let Some(snapshot_seq) = snapshot.journal_seq else {
        return Ok(SavedState {
            state,
            requests,
            snapshot_requests,
            journal: None,
        });
    };
    let journal = journal_path(path);
    let in_journal = |error: StateFileError| StateFileError::Journal {
        path: journal.clone(),
        error: Box::new(error),
    };
    let mut replay = JournalReplay {
        path: journal.clone(),
        snapshot_seq,
        seq: snapshot_seq,
        replayed: 0,
        already_held: 0,
        whole_len: None,
        torn: None,
    };
    let bytes = match files::read_bounded(&journal) {
        Ok(bytes) => bytes,
        // No change was journaled since the snapshot.
        Err(error) if error.is_not_found() => {
            return Ok(SavedState {
                state,
                requests,
                snapshot_requests,
                journal: Some(replay),
            });
        }
        Err(error) => return Err(in_journal(error)),
    };
    let scanned = journal::scan(&bytes).map_err(in_journal)?;
    let done = journal::replay(&scanned.records, snapshot_seq, &mut state, &mut requests)
        .map_err(in_journal)?;
    replay.seq = done.seq;
    replay.replayed = done.applied;
    replay.already_held = done.skipped;
    replay.whole_len = Some(u64::try_from(scanned.whole_len).unwrap_or(u64::MAX));
    replay.torn = scanned.torn;
    Ok(SavedState {
        state,
        requests,
        snapshot_requests,
        journal: Some(replay),
    })
}

pub(super) fn highest_seq(path: &Path) -> Result<u64, StateFileError> {
    let snapshot = match files::read_bounded(path) {
        Ok(bytes) => snapshot_seq(&bytes),
        Err(error) if error.is_not_found() => None,
        Err(error) => return Err(error),
    };
    let journal = journal_path(path);
    let journal = match files::read_bounded(&journal) {
        Ok(bytes) => journal::highest_seq(&bytes),
        Err(error) if error.is_not_found() => None,
        Err(error) => {
            return Err(StateFileError::Journal {
                path: journal,
                error: Box::new(error),
            });
        }
    };
    Ok(snapshot.max(journal).unwrap_or(0))
}

/// The `journal_seq` of a snapshot's header line, if it has one.
fn snapshot_seq(bytes: &[u8]) -> Option<u64> {
    let first = bytes.split(|&b| b == b'\n').next()?;
    let header: serde_json::Value = serde_json::from_slice(first).ok()?;
    header.get(super::JOURNAL_SEQ_KEY)?.as_u64()
}
