//! The saved state file: a version header line, one request per line as
//! JSON, and a trailer line with the number of requests and the CRC-32 of
//! everything before it. Replayed in order into a fresh [`ConfigState`].
//!
//! ```text
//! {"preread_state":2}
//! {"request_type":{"add_cluster":{"cluster_id":"alpha",...}}}
//! {"request_type":{"add_tcp_listener":{"address":"127.0.0.1:8443",...}}}
//! {"preread_state_end":{"requests":2,"crc32":"5d3c2f1a"}}
//! ```
//!
//! A saved state may go on in a **journal** beside it (`<path>.journal`,
//! see [`journal_path`]): `automatic_state_save` appends each committed
//! routing generation there as one record, and compacts it into a new
//! snapshot from time to time. A snapshot that a journal continues says
//! so in its header (`{"preread_state":2,"journal_seq":41}`: it holds the
//! journal's records up to 41), and every load of it replays the journal's
//! later records over it.
//!
//! Owns: the public API of state files, journals and their errors.
//! `format` holds the text (header, lines, trailer, replay), `journal` the
//! journal's records, `saved` the snapshot and its journal read together,
//! `journal_file` the journal open for appends, `files` the bounded read,
//! the atomic write and the removal of stale temp files.
//!
//! Must never: return a partially replayed state, hand out the state of a
//! file whose trailer is missing or does not match (a file cut at a line
//! boundary would boot with routes missing) except through the explicit
//! [`seal_state_file`], block on a FIFO or read a file without bound, or
//! leave a half-written file at the target path (a crash leaves either the
//! old or the new file, and at worst a stray temp file next to it, which
//! [`remove_stale_temp_files`] removes at the next start).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::codes::ErrorCode;
use crate::proto;
use crate::state::ConfigState;

mod files;
mod format;
mod journal;
mod journal_file;
#[cfg(test)]
mod journal_tests;
mod saved;
#[cfg(test)]
mod tests;

use format::Check;
pub use journal::{JOURNAL_VERSION, TornTail};
pub use journal_file::Journal;

/// The format version this build writes and reads: version 2 has the
/// trailer.
pub const STATE_FILE_VERSION: u64 = 2;

/// The format of older builds, without a trailer: refused by the loads,
/// read only by [`seal_state_file`].
pub const LEGACY_STATE_FILE_VERSION: u64 = 1;

/// The key of the header object, the file's first line.
pub const HEADER_KEY: &str = "preread_state";

/// The key, in the header of a snapshot that a journal continues, of the
/// sequence number of the last journal record it holds.
pub const JOURNAL_SEQ_KEY: &str = "journal_seq";

/// The key of the trailer object, the file's last line.
pub const TRAILER_KEY: &str = "preread_state_end";

/// The largest state file read: 64 MiB, some 400,000 requests, far above
/// any real routing state. A longer file is refused before it is read.
pub const MAX_STATE_FILE_LEN: u64 = 64 << 20;

/// Why a state file could not be saved or loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum StateFileError {
    /// The file does not exist: not an error at boot, where the state is
    /// then built from the config file.
    NotFound {
        /// The path looked at.
        path: PathBuf,
    },
    /// Reading, writing, syncing or renaming failed (code
    /// [`ErrorCode::StateFileIo`]).
    Io {
        /// The path of the file (or directory) the operation was on.
        path: PathBuf,
        /// What was being done, e.g. `"rename"`.
        operation: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The path names something else than a regular file (a FIFO, a
    /// device, a directory), which is never read (code
    /// [`ErrorCode::StateFileIo`]).
    NotRegular {
        /// The path looked at.
        path: PathBuf,
        /// What it is, e.g. `"a FIFO"`.
        kind: &'static str,
    },
    /// The file is over [`MAX_STATE_FILE_LEN`] (code
    /// [`ErrorCode::StateFileIo`]).
    TooLarge {
        /// The path looked at.
        path: PathBuf,
        /// Its length, or the bytes read before giving up.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// The file is refused: bad header or trailer, bad JSON, cut short, or
    /// a request that does not replay. Nothing of the file was applied.
    Invalid {
        /// 1-based line number in the file.
        line: usize,
        /// [`ErrorCode::StateFileCorrupt`], [`ErrorCode::StateFileVersion`],
        /// [`ErrorCode::StateFileIntegrity`] or the code of the dispatch
        /// refusal.
        code: ErrorCode,
        /// What is wrong with the line.
        message: String,
    },
    /// The journal beside the state file could not be read or is refused
    /// (see [`load_saved_state`]); nothing of either file was applied.
    Journal {
        /// The journal's path.
        path: PathBuf,
        /// What is wrong with it; its line is the journal's.
        error: Box<StateFileError>,
    },
}

impl StateFileError {
    /// The stable code of the error.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound { .. }
            | Self::Io { .. }
            | Self::NotRegular { .. }
            | Self::TooLarge { .. } => ErrorCode::StateFileIo,
            Self::Invalid { code, .. } => *code,
            Self::Journal { error, .. } => error.code(),
        }
    }

    /// The 1-based line the error is about, if it is about one.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Invalid { line, .. } => Some(*line),
            Self::Journal { error, .. } => error.line(),
            Self::NotFound { .. }
            | Self::Io { .. }
            | Self::NotRegular { .. }
            | Self::TooLarge { .. } => None,
        }
    }

    /// Whether the file simply does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    fn io(path: &Path, operation: &'static str, source: io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            operation,
            source,
        }
    }

    fn invalid(line: usize, code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Invalid {
            line,
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for StateFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { path } => write!(
                f,
                "{}: state file {} does not exist",
                self.code(),
                path.display()
            ),
            Self::Io {
                path,
                operation,
                source,
            } => write!(
                f,
                "{}: state file {}: {operation} failed: {source}",
                self.code(),
                path.display()
            ),
            Self::NotRegular { path, kind } => write!(
                f,
                "{}: state file {} is {kind}, not a regular file: it was not read (give the \
                 path of a file written by `preread state save`)",
                self.code(),
                path.display()
            ),
            Self::TooLarge { path, len, max } => write!(
                f,
                "{}: state file {} holds {len} bytes, over the {max}-byte cap of a state \
                 file: it was not read (is it the right file?)",
                self.code(),
                path.display()
            ),
            Self::Invalid {
                line,
                code,
                message,
            } => write!(f, "line {line}: {code}: {message}"),
            Self::Journal { path, error } => write!(f, "journal {}: {error}", path.display()),
        }
    }
}

impl std::error::Error for StateFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Journal { error, .. } => Some(error.as_ref()),
            Self::NotFound { .. }
            | Self::NotRegular { .. }
            | Self::TooLarge { .. }
            | Self::Invalid { .. } => None,
        }
    }
}

/// The text of a state file holding `requests`: the header line, one JSON
/// request per line, then the trailer, each line ending with `\n`.
///
/// # Errors
///
/// A request that does not serialize (not expected for generated types:
/// serialization is done before any file is touched).
pub fn render_state(requests: &[proto::Request]) -> Result<String, StateFileError> {
    let mut text = Vec::new();
    format::write_state(&mut text, requests, None).map_err(|failure| match failure {
        format::WriteFailure::Request(error) => error,
        // Writes to a Vec do not fail.
        format::WriteFailure::Io(error) => {
            StateFileError::io(Path::new("(memory)"), "render", error)
        }
    })?;
    // Serialized JSON and the ASCII lines around it.
    String::from_utf8(text).map_err(|_| {
        StateFileError::invalid(1, ErrorCode::StateFileCorrupt, "the text is not UTF-8")
    })
}

/// `body` (a header line and request lines, each ending with `\n`) with the
/// trailer a save appends: for tools and tests that build a state text line
/// by line. Nothing is checked.
#[must_use]
pub fn seal(body: &str) -> String {
    format::seal(body)
}

/// Writes `requests` (usually [`ConfigState::generate_requests`]) to
/// `path` atomically: the text is written line by line to a temp file in
/// the same directory, synced, renamed over `path`, and the directory
/// synced. On any failure the temp file is removed and `path` keeps its old
/// content.
///
/// # Errors
///
/// [`StateFileError::Io`] naming the failed operation.
pub fn save_state(
    path: impl AsRef<Path>,
    requests: &[proto::Request],
) -> Result<(), StateFileError> {
    files::write_atomically_with(path.as_ref(), |out| {
        format::write_state(out, requests, None)
            .map(|_| ())
            .map_err(files::Failure::from)
    })
}

/// [`save_state`] of a snapshot that the journal beside `path` continues:
/// its header says it holds the journal's records up to `journal_seq`, so
/// that a load replays only the later ones. Write it before the journal
/// drops those records. Returns the file's length.
///
/// # Errors
///
/// As [`save_state`].
pub fn save_snapshot(
    path: impl AsRef<Path>,
    requests: &[proto::Request],
    journal_seq: u64,
) -> Result<u64, StateFileError> {
    files::write_atomically_with(path.as_ref(), |out| {
        format::write_state(out, requests, Some(journal_seq)).map_err(files::Failure::from)
    })
}

/// The journal that continues the state file at `path`: `<path>.journal`.
#[must_use]
pub fn journal_path(path: impl AsRef<Path>) -> PathBuf {
    let mut name = path.as_ref().as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

/// A state file read with its journal.
#[derive(Debug)]
pub struct SavedState {
    /// The state: the snapshot, then the journal's later records.
    pub state: ConfigState,
    /// The snapshot's requests, then those of the records replayed, in
    /// order.
    pub requests: Vec<proto::Request>,
    /// How many of `requests` are the snapshot's.
    pub snapshot_requests: usize,
    /// The journal, when the snapshot is one a journal continues.
    pub journal: Option<JournalReplay>,
}

/// What a load found in the journal of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalReplay {
    /// The journal's path.
    pub path: PathBuf,
    /// The last record the snapshot holds.
    pub snapshot_seq: u64,
    /// The last change the state holds: the last record replayed, or the
    /// snapshot's.
    pub seq: u64,
    /// Records replayed over the snapshot.
    pub replayed: usize,
    /// Records the snapshot already held (a compaction ended before it
    /// could drop them).
    pub already_held: usize,
    /// Bytes of the header and the whole records; `None` when there is no
    /// journal file (no change since the snapshot).
    pub whole_len: Option<u64>,
    /// The last record, cut short or damaged with nothing after it: an
    /// append a crash interrupted, never acknowledged, so not replayed.
    pub torn: Option<TornTail>,
}

/// Reads, checks and replays a state file and, when its header says a
/// journal continues it, the journal's records after the snapshot, each
/// request checked as a state file's line. A torn last record is left out
/// (it was never acknowledged) and reported in [`JournalReplay::torn`].
///
/// # Errors
///
/// As [`load_state`] for the snapshot, and [`StateFileError::Journal`]
/// for the journal: unreadable, over [`MAX_STATE_FILE_LEN`], damaged
/// before its last record or with records missing
/// ([`ErrorCode::StateJournalCorrupt`]), or a request that does not
/// replay. Nothing is returned in part.
pub fn load_saved_state(path: impl AsRef<Path>) -> Result<SavedState, StateFileError> {
    saved::load(path.as_ref())
}

/// The sequence number a new snapshot at `path` must hold for no record
/// of the journal beside it to be replayed over it: the highest of the
/// snapshot's and of every record head in the journal, read leniently
/// (a damaged journal still tells its highest record); 0 without either.
///
/// # Errors
///
/// [`StateFileError::Io`] (or `NotRegular`, `TooLarge`) when a file that
/// exists cannot be read.
pub fn highest_journal_seq(path: impl AsRef<Path>) -> Result<u64, StateFileError> {
    saved::highest_seq(path.as_ref())
}

/// Reads, checks and replays a state file, with its journal (see
/// [`load_saved_state`]).
///
/// # Errors
///
/// [`StateFileError::NotFound`] when the file does not exist,
/// [`StateFileError::NotRegular`] or [`StateFileError::TooLarge`] when it
/// is not read, [`StateFileError::Io`] when it cannot be read, what
/// [`parse_state`] refuses, and [`StateFileError::Journal`].
pub fn load_state(path: impl AsRef<Path>) -> Result<ConfigState, StateFileError> {
    load_state_requests(path).map(|(state, _)| state)
}

/// Reads a state file (with its journal, see [`load_saved_state`]) and
/// returns its checked requests along with the state they build (for a
/// caller that forwards the requests, such as the boot of the workers).
///
/// # Errors
///
/// As [`load_state`].
pub fn load_state_requests(
    path: impl AsRef<Path>,
) -> Result<(ConfigState, Vec<proto::Request>), StateFileError> {
    load_saved_state(path).map(|saved| (saved.state, saved.requests))
}

/// Checks a whole state text (header, trailer, every line's JSON, every
/// request dispatched in order into a fresh state) and only then returns
/// the state.
///
/// # Errors
///
/// [`StateFileError::Invalid`] for the first refused line, with its 1-based
/// number: a missing or foreign header ([`ErrorCode::StateFileCorrupt`]),
/// another version, version 1 included ([`ErrorCode::StateFileVersion`]),
/// a trailer missing, or whose count or checksum does not match
/// ([`ErrorCode::StateFileIntegrity`]), a line that is not a request
/// ([`ErrorCode::StateFileCorrupt`]), or a request the state refuses (the
/// refusal's code).
pub fn parse_state(text: &str) -> Result<ConfigState, StateFileError> {
    parse_state_requests(text).map(|(state, _)| state)
}

/// [`parse_state`], also returning the requests in file order.
///
/// # Errors
///
/// As [`parse_state`].
pub fn parse_state_requests(
    text: &str,
) -> Result<(ConfigState, Vec<proto::Request>), StateFileError> {
    format::replay(text, Check::Sealed).map(|replayed| (replayed.state, replayed.requests))
}

/// `preread state seal`: reads a state file without trusting its trailer (a
/// version 1 file, or one edited by hand), replays every line, and rewrites
/// it atomically in the current format with a fresh trailer. Returns the
/// number of requests. The operator's check of the content is what the
/// trailer then vouches for. A snapshot's `journal_seq` is kept, so its
/// journal still continues it.
///
/// # Errors
///
/// As [`load_state`] (without the trailer's check), and as [`save_state`].
pub fn seal_state_file(path: impl AsRef<Path>) -> Result<usize, StateFileError> {
    let path = path.as_ref();
    let text = files::read_state_text(path)?;
    let replayed = format::replay(&text, Check::Unsealed)?;
    let requests = replayed.requests;
    match replayed.journal_seq {
        None => save_state(path, &requests)?,
        Some(seq) => save_snapshot(path, &requests, seq).map(|_| ())?,
    }
    Ok(requests.len())
}

/// Removes the temp files that saves to `path` left behind when their
/// process was killed (`.NAME.tmp.<pid>.<n>` beside it, whose process is
/// gone). Call it at start, before the first save. Returns each file found:
/// removed, or why not.
pub fn remove_stale_temp_files(path: impl AsRef<Path>) -> Vec<Result<PathBuf, StateFileError>> {
    files::remove_stale_temp_files(path.as_ref())
}
