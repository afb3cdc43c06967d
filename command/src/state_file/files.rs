//! The file side of a state file and its journal: the bounded read, the
//! atomic write, and the removal of temp files that killed saves left
//! behind.
//!
//! Owns: opening for reading without blocking (`O_NONBLOCK`, then `fstat`:
//! only a regular file is read, so a FIFO or a device cannot hold up the
//! caller), the [`MAX_STATE_FILE_LEN`] cap, the temp file's name
//! (`.NAME.tmp.<pid>.<n>`), the write-sync-rename-sync sequence, and which
//! temp files are stale.
//!
//! Must never: interpret the text, leave a half-written file at the target
//! path, or remove a temp file of a process that is still running.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{MAX_STATE_FILE_LEN, StateFileError};
use crate::codes::ErrorCode;

/// Reads the whole of a regular file of at most [`MAX_STATE_FILE_LEN`]
/// bytes, as UTF-8.
pub(super) fn read_state_text(path: &Path) -> Result<String, StateFileError> {
    String::from_utf8(read_bounded(path)?).map_err(|_| {
        StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!("{} is not UTF-8 text", path.display()),
        )
    })
}

/// Reads the whole of a regular file of at most [`MAX_STATE_FILE_LEN`]
/// bytes.
pub(super) fn read_bounded(path: &Path) -> Result<Vec<u8>, StateFileError> {
    let file = OpenOptions::new()
        .read(true)
        // A FIFO opens at once instead of waiting for a writer; it is then
        // refused below, before any read.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|error| match error.kind() {
            io::ErrorKind::NotFound => StateFileError::NotFound {
                path: path.to_owned(),
            },
            _ => StateFileError::io(path, "open", error),
        })?;
    let metadata = file
        .metadata()
        .map_err(|error| StateFileError::io(path, "stat", error))?;
    if !metadata.is_file() {
        return Err(StateFileError::NotRegular {
            path: path.to_owned(),
            kind: kind_of(&metadata.file_type()),
        });
    }
    let too_large = |len: u64| StateFileError::TooLarge {
        path: path.to_owned(),
        len,
        max: MAX_STATE_FILE_LEN,
    };
    if metadata.len() > MAX_STATE_FILE_LEN {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::new();
    // One byte over the cap tells a file that grew since the stat.
    file.take(MAX_STATE_FILE_LEN.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| StateFileError::io(path, "read", error))?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > MAX_STATE_FILE_LEN {
        return Err(too_large(len));
    }
    Ok(bytes)
}

fn kind_of(file_type: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The buffer between a text being rendered and its temp file.
const WRITE_BUFFER: usize = 256 << 10;

/// Distinguishes the temp files of concurrent saves within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The directory of `path` and its file name.
fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr), StateFileError> {
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
    Ok((directory, file_name))
}

/// The prefix of every temp file of saves to a file named `file_name`.
fn temp_prefix(file_name: &std::ffi::OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(file_name);
    prefix.push(".tmp.");
    prefix
}

pub(super) fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StateFileError> {
    write_atomically_with(path, |out| out.write_all(contents).map_err(Failure::Io))
}

/// What the writer of [`write_atomically_with`] can fail with.
#[derive(Debug)]
pub(super) enum Failure {
    /// Nothing was wrong with the file (a request that does not
    /// serialize): the error as it is.
    Content(StateFileError),
    /// A write to the temp file failed.
    Io(io::Error),
}

impl From<super::format::WriteFailure> for Failure {
    fn from(failure: super::format::WriteFailure) -> Self {
        match failure {
            super::format::WriteFailure::Request(error) => Self::Content(error),
            super::format::WriteFailure::Io(error) => Self::Io(error),
        }
    }
}

/// [`write_atomically`] of what `write` writes (through a buffer, so that
/// no copy of a large text need be held): a temp file in the same
/// directory, synced, renamed over `path`, the directory synced.
pub(super) fn write_atomically_with<T>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, Failure>,
) -> Result<T, StateFileError> {
    let (directory, file_name) = split(path)?;
    let mut temp_name = temp_prefix(file_name);
    temp_name.push(format!(
        "{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = directory.join(temp_name);

    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|error| StateFileError::io(&temp, "create temp file", error))?;
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
    let written = write(&mut out)
        .map_err(|failure| match failure {
            Failure::Content(error) => error,
            Failure::Io(error) => StateFileError::io(&temp, "write", error),
        })
        .and_then(|value| {
            let file = out
                .into_inner()
                .map_err(|error| StateFileError::io(&temp, "write", error.into_error()))?;
            file.sync_all()
                .map_err(|error| StateFileError::io(&temp, "sync", error))?;
            Ok(value)
        });
    let renamed = written.and_then(|value| {
        fs::rename(&temp, path).map_err(|error| StateFileError::io(path, "rename", error))?;
        Ok(value)
    });
    let value = match renamed {
        Ok(value) => value,
        Err(error) => {
            // Best effort: the temp file is garbage either way.
            let _ = fs::remove_file(&temp);
            return Err(error);
        }
    };
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| StateFileError::io(directory, "sync directory", error))?;
    Ok(value)
}

/// The pid in a temp file name `<prefix><pid>.<n>`, if it is one.
fn temp_owner(name: &std::ffi::OsStr, prefix: &std::ffi::OsStr) -> Option<u32> {
    let name = name.to_str()?;
    let rest = name.strip_prefix(prefix.to_str()?)?;
    let (pid, serial) = rest.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(serial) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` exists (a process of another user counts).
fn is_running(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be
    // signalled; nothing is sent and no memory is involved.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Removes the temp files of saves to `path` whose process is gone.
pub(super) fn remove_stale_temp_files(path: &Path) -> Vec<Result<PathBuf, StateFileError>> {
    let Ok((directory, file_name)) = split(path) else {
        return Vec::new();
    };
    let prefix = temp_prefix(file_name);
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        // No directory yet: no save ever ran there.
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(error) => return vec![Err(StateFileError::io(directory, "list", error))],
    };
    let own = std::process::id();
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let owner = temp_owner(&entry.file_name(), &prefix)?;
            if owner == own || is_running(owner) {
                return None;
            }
            let stale = entry.path();
            Some(match fs::remove_file(&stale) {
                Ok(()) => Ok(stale),
                Err(error) => Err(StateFileError::io(&stale, "remove stale temp file", error)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognized_exactly() {
        let prefix = temp_prefix(std::ffi::OsStr::new("state.json"));
        let owner = |name: &str| temp_owner(std::ffi::OsStr::new(name), &prefix);
        assert_eq!(owner(".state.json.tmp.123.0"), Some(123));
        assert_eq!(owner(".state.json.tmp.7.42"), Some(7));
        for other in [
            "state.json",
            ".state.json.tmp.",
            ".state.json.tmp.123",
            ".state.json.tmp.123.",
            ".state.json.tmp.x.1",
            ".state.json.tmp.1.2.3",
            ".other.json.tmp.1.2",
            ".state.json.tmp.-1.2",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
    }

    #[test]
    fn a_running_process_is_running() {
        assert!(is_running(std::process::id()));
        assert!(is_running(1), "init exists and may not be signalled");
        assert!(!is_running(0));
        assert!(!is_running(u32::MAX));
    }
}
