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
//! Owns: the public API of state files and their errors. `format` holds the
//! text (header, lines, trailer, replay), `files` the bounded read, the
//! atomic write and the removal of stale temp files.
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
#[cfg(test)]
mod tests;

use format::Check;

/// The format version this build writes and reads: version 2 has the
/// trailer.
pub const STATE_FILE_VERSION: u64 = 2;

/// The format of older builds, without a trailer: refused by the loads,
/// read only by [`seal_state_file`].
pub const LEGACY_STATE_FILE_VERSION: u64 = 1;

/// The key of the header object, the file's first line.
pub const HEADER_KEY: &str = "preread_state";

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
        }
    }

    /// The 1-based line the error is about, if it is about one.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Invalid { line, .. } => Some(*line),
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
        }
    }
}

impl std::error::Error for StateFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
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
    format::render_body(requests).map(|body| format::seal(&body))
}

/// `body` (a header line and request lines, each ending with `\n`) with the
/// trailer a save appends: for tools and tests that build a state text line
/// by line. Nothing is checked.
#[must_use]
pub fn seal(body: &str) -> String {
    format::seal(body)
}

/// Writes `requests` (usually [`ConfigState::generate_requests`]) to
/// `path` atomically: the text is built first, then written to a temp file
/// in the same directory, synced, renamed over `path`, and the directory
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
    let path = path.as_ref();
    let text = render_state(requests)?;
    files::write_atomically(path, text.as_bytes())
}

/// Reads, checks and replays a state file.
///
/// # Errors
///
/// [`StateFileError::NotFound`] when the file does not exist,
/// [`StateFileError::NotRegular`] or [`StateFileError::TooLarge`] when it
/// is not read, [`StateFileError::Io`] when it cannot be read, and what
/// [`parse_state`] refuses.
pub fn load_state(path: impl AsRef<Path>) -> Result<ConfigState, StateFileError> {
    load_state_requests(path).map(|(state, _)| state)
}

/// Reads a state file and returns its checked requests along with the
/// state they build (for a caller that forwards the requests, such as the
/// boot of the workers).
///
/// # Errors
///
/// As [`load_state`].
pub fn load_state_requests(
    path: impl AsRef<Path>,
) -> Result<(ConfigState, Vec<proto::Request>), StateFileError> {
    let text = files::read_state_text(path.as_ref())?;
    parse_state_requests(&text)
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
    format::replay(text, Check::Sealed)
}

/// `preread state seal`: reads a state file without trusting its trailer (a
/// version 1 file, or one edited by hand), replays every line, and rewrites
/// it atomically in the current format with a fresh trailer. Returns the
/// number of requests. The operator's check of the content is what the
/// trailer then vouches for.
///
/// # Errors
///
/// As [`load_state`] (without the trailer's check), and as [`save_state`].
pub fn seal_state_file(path: impl AsRef<Path>) -> Result<usize, StateFileError> {
    let path = path.as_ref();
    let text = files::read_state_text(path)?;
    let (_, requests) = format::replay(&text, Check::Unsealed)?;
    save_state(path, &requests)?;
    Ok(requests.len())
}

/// Removes the temp files that saves to `path` left behind when their
/// process was killed (`.NAME.tmp.<pid>.<n>` beside it, whose process is
/// gone). Call it at start, before the first save. Returns each file found:
/// removed, or why not.
pub fn remove_stale_temp_files(path: impl AsRef<Path>) -> Vec<Result<PathBuf, StateFileError>> {
    files::remove_stale_temp_files(path.as_ref())
}
