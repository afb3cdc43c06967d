//! The saved state file: a version header line, then one request per line
//! as JSON, replayed in order into a fresh [`ConfigState`].
//!
//! ```text
//! {"preread_state":1}
//! {"request_type":{"add_cluster":{"cluster_id":"alpha",...}}}
//! {"request_type":{"add_tcp_listener":{"address":"127.0.0.1:8443",...}}}
//! ```
//!
//! Owns: the format (header, line framing, JSON of [`proto::Request`]), the
//! atomic write (temp file in the target's directory, write, `sync_all`,
//! rename over the target, fsync of the directory) and the all-or-nothing
//! read: the whole file is validated, every line dispatched into a fresh
//! state through [`ConfigState::dispatch`] (the validator shared with the
//! config and the command socket), before any state is handed out.
//!
//! Must never: return a partially replayed state, or leave a half-written
//! file at the target path (a crash leaves either the old or the new file,
//! and at worst a stray temp file next to it).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::codes::ErrorCode;
use crate::proto;
use crate::state::ConfigState;

/// The format version this build writes and reads.
pub const STATE_FILE_VERSION: u64 = 1;

/// The key of the header object, the file's first line.
pub const HEADER_KEY: &str = "preread_state";

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
    /// A line of the file is refused: bad header, bad JSON, cut short, or a
    /// request that does not replay. Nothing of the file was applied.
    Invalid {
        /// 1-based line number in the file.
        line: usize,
        /// [`ErrorCode::StateFileCorrupt`], [`ErrorCode::StateFileVersion`]
        /// or the code of the dispatch refusal.
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
            Self::NotFound { .. } | Self::Io { .. } => ErrorCode::StateFileIo,
            Self::Invalid { code, .. } => *code,
        }
    }

    /// The 1-based line the error is about, if it is about one.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Invalid { line, .. } => Some(*line),
            Self::NotFound { .. } | Self::Io { .. } => None,
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
            Self::NotFound { .. } | Self::Invalid { .. } => None,
        }
    }
}

/// The text of a state file holding `requests`: the header line, then one
/// JSON request per line, each line ending with `\n`.
///
/// # Errors
///
/// A request that does not serialize (not expected for generated types:
/// serialization is done before any file is touched).
pub fn render_state(requests: &[proto::Request]) -> Result<String, StateFileError> {
    let mut text = header_line();
    text.push('\n');
    for (index, request) in requests.iter().enumerate() {
        let json = serde_json::to_string(request).map_err(|error| {
            // Line of the request in the file that would have been written.
            StateFileError::invalid(
                index + 2,
                ErrorCode::StateFileCorrupt,
                format!("request does not serialize: {error}"),
            )
        })?;
        debug_assert!(!json.contains('\n'), "serde_json escapes newlines");
        text.push_str(&json);
        text.push('\n');
    }
    Ok(text)
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
    write_atomically(path, text.as_bytes())
}

/// Reads, validates and replays a state file.
///
/// # Errors
///
/// [`StateFileError::NotFound`] when the file does not exist,
/// [`StateFileError::Io`] when it cannot be read, and what
/// [`parse_state`] refuses.
pub fn load_state(path: impl AsRef<Path>) -> Result<ConfigState, StateFileError> {
    let path = path.as_ref();
    let text = read_state_text(path)?;
    parse_state(&text)
}

/// Reads a state file and returns its validated requests along with the
/// state they build (for a caller that forwards the requests, such as the
/// boot of the workers).
///
/// # Errors
///
/// As [`load_state`].
pub fn load_state_requests(
    path: impl AsRef<Path>,
) -> Result<(ConfigState, Vec<proto::Request>), StateFileError> {
    let path = path.as_ref();
    let text = read_state_text(path)?;
    parse_state_requests(&text)
}

/// Validates a whole state text (header, every line's JSON, every request
/// dispatched in order into a fresh state) and only then returns the state.
///
/// # Errors
///
/// [`StateFileError::Invalid`] for the first refused line, with its 1-based
/// number: a missing or foreign header ([`ErrorCode::StateFileCorrupt`]),
/// another version ([`ErrorCode::StateFileVersion`]), a line cut short or
/// not a request ([`ErrorCode::StateFileCorrupt`]), or a request the state
/// refuses (the refusal's code).
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
    let mut lines = text.split_inclusive('\n').enumerate();

    let Some((_, header)) = lines.next() else {
        return Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!(
                "the file is empty: a state file starts with {}",
                header_line()
            ),
        ));
    };
    check_header(header)?;

    let mut state = ConfigState::default();
    let mut requests = Vec::new();
    for (index, raw) in lines {
        let number = index + 1;
        let Some(line) = raw.strip_suffix('\n') else {
            return Err(StateFileError::invalid(
                number,
                ErrorCode::StateFileCorrupt,
                "the last line does not end with a newline: the file was cut short",
            ));
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let request: proto::Request = serde_json::from_str(line).map_err(|error| {
            StateFileError::invalid(
                number,
                ErrorCode::StateFileCorrupt,
                format!("not a JSON request: {error}"),
            )
        })?;
        if request.request_type.is_none() {
            return Err(StateFileError::invalid(
                number,
                ErrorCode::StateFileCorrupt,
                "the request has no request_type",
            ));
        }
        let _applied = state.dispatch(&request).map_err(|refusal| {
            StateFileError::invalid(
                number,
                refusal.code,
                format!("request refused on replay: {}", refusal.message),
            )
        })?;
        requests.push(request);
    }
    Ok((state, requests))
}

fn header_line() -> String {
    format!("{{\"{HEADER_KEY}\":{STATE_FILE_VERSION}}}")
}

fn check_header(raw: &str) -> Result<(), StateFileError> {
    let not_state = || {
        StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!(
                "not a preread state file: the first line must be {}",
                header_line()
            ),
        )
    };
    let Some(line) = raw.strip_suffix('\n') else {
        return Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            "the header line does not end with a newline: the file was cut short",
        ));
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    let header: serde_json::Value = serde_json::from_str(line).map_err(|_| not_state())?;
    let version = header
        .as_object()
        .filter(|object| object.len() == 1)
        .and_then(|object| object.get(HEADER_KEY))
        .ok_or_else(not_state)?;
    match version.as_u64() {
        Some(STATE_FILE_VERSION) => Ok(()),
        _ => Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileVersion,
            format!(
                "state file format version {version} is not supported: this preread reads \
                 version {STATE_FILE_VERSION}"
            ),
        )),
    }
}

fn read_state_text(path: &Path) -> Result<String, StateFileError> {
    fs::read_to_string(path).map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => StateFileError::NotFound {
            path: path.to_owned(),
        },
        io::ErrorKind::InvalidData => StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!("{} is not UTF-8 text", path.display()),
        ),
        _ => StateFileError::io(path, "read", error),
    })
}

/// Distinguishes the temp files of concurrent saves within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StateFileError> {
    let Some(file_name) = path.file_name() else {
        return Err(StateFileError::io(
            path,
            "name",
            io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file"),
        ));
    };
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = directory.join(temp_name);

    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|error| StateFileError::io(&temp, "create temp file", error))?;
    let written = file
        .write_all(contents)
        .map_err(|error| StateFileError::io(&temp, "write", error))
        .and_then(|()| {
            file.sync_all()
                .map_err(|error| StateFileError::io(&temp, "sync", error))
        });
    drop(file);
    let renamed = written.and_then(|()| {
        fs::rename(&temp, path).map_err(|error| StateFileError::io(path, "rename", error))
    });
    if let Err(error) = renamed {
        // Best effort: the temp file is garbage either way.
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| StateFileError::io(directory, "sync directory", error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_state_is_the_header_alone() {
        let text = render_state(&[]).unwrap();
        assert_eq!(text, "{\"preread_state\":1}\n");
        assert_eq!(parse_state(&text).unwrap(), ConfigState::default());
        // Blank lines and CRLF line ends are tolerated.
        assert!(parse_state("{\"preread_state\":1}\r\n\n  \n").is_ok());
    }

    #[test]
    fn header_must_be_exactly_the_version_object() {
        for (text, code) in [
            ("{\"preread_state\":1}", ErrorCode::StateFileCorrupt),
            (
                "{\"preread_state\":1,\"x\":2}\n",
                ErrorCode::StateFileCorrupt,
            ),
            ("[1]\n", ErrorCode::StateFileCorrupt),
            ("{\"preread_state\":0}\n", ErrorCode::StateFileVersion),
            ("{\"preread_state\":\"1\"}\n", ErrorCode::StateFileVersion),
        ] {
            let error = parse_state(text).unwrap_err();
            assert_eq!(
                (error.line(), error.code()),
                (Some(1), code),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn a_request_without_type_is_corrupt() {
        let error = parse_state("{\"preread_state\":1}\n{\"request_type\":null}\n").unwrap_err();
        assert_eq!(
            (error.line(), error.code()),
            (Some(2), ErrorCode::StateFileCorrupt)
        );
        assert!(error.to_string().starts_with("line 2: E010: "), "{error}");
    }
}
