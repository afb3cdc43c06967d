//! `preread rejects`: the windows of the last rejected and fallback
//! sessions, listed, and with `--dump DIR` written out for `inspect`.
//!
//! Owns: the dump (one `.bin` file per window, named by worker, capture
//! number, outcome and reason, and `.quic.bin` for a QUIC flow's
//! length-prefixed datagrams, so a second dump of the same capture
//! rewrites the same file) and the note on windows that did not fit in the
//! answer. Must never: write anywhere but DIR, or change a byte of a
//! window (the file is what the worker read, for `inspect` to replay).

use core::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use command::proto::{self, response_content::ContentType};

use super::client::{is_failure, open, socket_path};
use super::print::{failure_text, rejects_json, rejects_text};
use super::{EXIT_FAILED, EXIT_USAGE, Globals};

/// Runs `preread rejects` for `request`; with `dump`, writes every window
/// listed into that folder first.
pub(super) fn run(globals: &Globals, request: &proto::Request, dump: Option<&Path>) -> ExitCode {
    let socket = match socket_path(globals) {
        Ok(socket) => socket,
        Err(error) => {
            eprintln!("preread: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let response =
        match open(&socket, globals).and_then(|mut channel| channel.request(request, |_| {})) {
            Ok(response) => response,
            Err(error) => {
                eprintln!("preread: {error}");
                return ExitCode::from(EXIT_FAILED);
            }
        };
    if is_failure(&response) {
        eprintln!("{}", failure_text(&response));
        return ExitCode::from(EXIT_FAILED);
    }
    let Some(ContentType::Rejects(list)) = response.content.and_then(|c| c.content_type) else {
        eprintln!("preread: the proxy answered without a list of captured windows");
        return ExitCode::from(EXIT_FAILED);
    };
    let files = match dump {
        Some(dir) => match write_all(dir, &list) {
            Ok(files) => files,
            Err(error) => {
                eprintln!("preread: {error}");
                return ExitCode::from(EXIT_FAILED);
            }
        },
        None => Vec::new(),
    };
    if globals.json {
        for line in rejects_json(&list, &files) {
            println!("{line}");
        }
    } else {
        print!("{}", rejects_text(&list, &files));
    }
    if list.left_out > 0 {
        eprintln!(
            "{} more window(s) matched but did not fit in one answer: narrow the list with \
             --reason or --listener",
            list.left_out
        );
    }
    ExitCode::SUCCESS
}

/// The file name of a window: `w<worker>-<seq>-<rejected|fallback>-<reason>.bin`,
/// ending `.quic.bin` for a QUIC flow's datagrams (`inspect --quic` reads
/// them).
fn file_name(window: &proto::CapturedWindow) -> String {
    let outcome: String = window
        .outcome
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let kind = if window.quic { ".quic" } else { "" };
    format!("w{}-{:06}-{outcome}{kind}.bin", window.worker, window.seq)
}

/// Why a dump stopped: the folder or one of its files could not be
/// written.
#[derive(Debug)]
enum DumpError {
    CreateDir { dir: PathBuf, error: io::Error },
    Write { path: PathBuf, error: io::Error },
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CreateDir { dir, error } => write!(
                f,
                "cannot create {}: {error} (give --dump a folder this user can create)",
                dir.display()
            ),
            Self::Write { path, error } => write!(
                f,
                "cannot write {}: {error} (give --dump a folder this user can write)",
                path.display()
            ),
        }
    }
}

impl core::error::Error for DumpError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::CreateDir { error, .. } | Self::Write { error, .. } => Some(error),
        }
    }
}

/// Writes every window of `list` into `dir` (created if missing); the
/// paths written, in the list's order.
fn write_all(dir: &Path, list: &proto::RejectList) -> Result<Vec<String>, DumpError> {
    std::fs::create_dir_all(dir).map_err(|error| DumpError::CreateDir {
        dir: dir.to_owned(),
        error,
    })?;
    list.windows
        .iter()
        .map(|window| {
            let path = dir.join(file_name(window));
            match std::fs::write(&path, &window.window) {
                Ok(()) => Ok(path.display().to_string()),
                Err(error) => Err(DumpError::Write { path, error }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use command::proto;

    use super::{DumpError, file_name, write_all};

    fn window(seq: u64, outcome: &str, bytes: &[u8]) -> proto::CapturedWindow {
        proto::CapturedWindow {
            worker: 1,
            seq,
            outcome: outcome.to_owned(),
            window: bytes.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn each_window_is_written_byte_for_byte_under_a_stable_name() -> Result<(), Box<dyn Error>> {
        let dir = tempfile::tempdir()?;
        let list = proto::RejectList {
            windows: vec![
                window(7, "rejected:not_tls", b"GET / HTTP/1.1\r\n"),
                window(3, "fallback:sni_unmatched", &[22, 3, 1, 0, 5]),
                proto::CapturedWindow {
                    quic: true,
                    ..window(4, "rejected:quic_version", &[0, 1, 0xc0])
                },
            ],
            left_out: 0,
        };
        let files = write_all(&dir.path().join("dump"), &list)?;
        assert_eq!(
            file_name(&list.windows[0]),
            "w1-000007-rejected-not_tls.bin"
        );
        assert_eq!(
            file_name(&list.windows[1]),
            "w1-000003-fallback-sni_unmatched.bin"
        );
        assert_eq!(
            file_name(&list.windows[2]),
            "w1-000004-rejected-quic_version.quic.bin"
        );
        for (file, window) in files.iter().zip(&list.windows) {
            assert_eq!(std::fs::read(file)?, window.window);
        }
        Ok(())
    }

    #[test]
    fn a_dump_that_cannot_be_written_says_which_folder_to_give() -> Result<(), Box<dyn Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"")?;
        let list = proto::RejectList {
            windows: vec![window(1, "rejected:not_tls", b"x")],
            left_out: 0,
        };
        let refused = write_all(&file.join("dump"), &list);
        assert!(
            matches!(refused, Err(DumpError::CreateDir { .. })),
            "{refused:?}"
        );
        let shown = refused.map_err(|e| e.to_string());
        assert!(
            shown
                .as_ref()
                .is_err_and(|e| e.starts_with("cannot create ")
                    && e.ends_with("(give --dump a folder this user can create)")),
            "{shown:?}"
        );
        Ok(())
    }
}
