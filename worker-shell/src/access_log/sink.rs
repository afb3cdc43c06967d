//! Where access-log lines go: stderr, a file, or a syslog socket.
//!
//! Owns: opening the target (a file created if missing and appended to; a
//! FIFO opened by the writer thread, since opening one blocks until it has
//! a reader), one write per line (the newline included, so lines stay
//! whole in a file other processes append to), and reopening (a fresh file
//! at the path after a rotation; a new socket). Must never: be written
//! from a worker thread (only the writer holds a sink), or split a line
//! over two writes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

use command::config::{AccessLogTarget, SyslogTarget};

use super::Line;
use super::syslog::SyslogSink;

/// A sink, open (or, for a FIFO, to be opened by the writer thread).
#[derive(Debug)]
pub(super) enum Sink {
    Stderr,
    File {
        path: PathBuf,
        /// `None` until a FIFO is opened by the writer, or after a reopen
        /// that failed with nothing open before it.
        file: Option<File>,
        /// Reused for each line: the text and its newline in one write.
        buf: Vec<u8>,
    },
    Syslog(SyslogSink),
}

impl Sink {
    /// The sink of `target`; `None` for `"off"`. A regular file or a socket
    /// that cannot be opened is an error now, so `preread start` can stop
    /// and say why; a FIFO is left to [`Self::ready`].
    pub(super) fn open(target: &AccessLogTarget) -> io::Result<Option<Self>> {
        Ok(Some(match target {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stderr => Self::Stderr,
            AccessLogTarget::File(path) => {
                let file = if is_fifo(path) {
                    None
                } else {
                    Some(open_append(path)?)
                };
                Self::File {
                    path: path.clone(),
                    file,
                    buf: Vec::with_capacity(512),
                }
            }
            AccessLogTarget::Syslog(target) => Self::Syslog(SyslogSink::open(target)?),
        }))
    }

    /// Opens what [`Self::open`] left for the writer thread: a FIFO, which
    /// blocks until some process opens it for reading.
    pub(super) fn ready(&mut self) -> io::Result<()> {
        if let Self::File { path, file, .. } = self
            && file.is_none()
        {
            *file = Some(open_append(path)?);
        }
        Ok(())
    }

    /// Writes one line and its newline.
    pub(super) fn write(&mut self, line: &Line) -> io::Result<()> {
        match self {
            Self::Stderr => {
                let mut bytes = Vec::with_capacity(line.text.len() + 1);
                bytes.extend_from_slice(line.text.as_bytes());
                bytes.push(b'\n');
                io::stderr().write_all(&bytes)
            }
            Self::File { file, buf, .. } => {
                let Some(file) = file else {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "the access-log file is not open",
                    ));
                };
                buf.clear();
                buf.extend_from_slice(line.text.as_bytes());
                buf.push(b'\n');
                file.write_all(buf)
            }
            Self::Syslog(syslog) => syslog.send(line),
        }
    }

    /// Opens the target again: a file at its path (the old one may have
    /// been renamed by a rotation), a new socket to the syslog daemon.
    /// On failure the sink keeps what it had.
    pub(super) fn reopen(&mut self) -> io::Result<()> {
        match self {
            Self::Stderr => Ok(()),
            Self::File { path, file, .. } => {
                *file = Some(open_append(path)?);
                Ok(())
            }
            Self::Syslog(syslog) => syslog.reconnect(),
        }
    }

    /// What the sink writes to, for log lines.
    pub(super) fn describe(&self) -> String {
        match self {
            Self::Stderr => "stderr".to_owned(),
            Self::File { path, .. } => path.display().to_string(),
            Self::Syslog(syslog) => match syslog.target() {
                SyslogTarget::Unix(path) => format!("syslog:{}", path.display()),
                SyslogTarget::Udp(address) => format!("syslog:udp://{address}"),
            },
        }
    }
}

fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use command::config::AccessLogTarget;

    use super::{Line, Sink};

    fn line(text: &str) -> Line {
        Line {
            at: UNIX_EPOCH,
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_file_gets_whole_lines_and_a_reopen_follows_the_path() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("access.log");
        let rotated = dir.path().join("access.log.1");
        let target = AccessLogTarget::File(path.clone());
        let Some(mut sink) = Sink::open(&target)? else {
            return Err(std::io::Error::other("a file target opens a sink"));
        };
        sink.write(&line("one"))?;
        std::fs::rename(&path, &rotated)?;
        sink.write(&line("two"))?;
        sink.reopen()?;
        sink.write(&line("three"))?;
        assert_eq!(std::fs::read_to_string(&rotated)?, "one\ntwo\n");
        assert_eq!(std::fs::read_to_string(&path)?, "three\n");
        assert_eq!(sink.describe(), path.display().to_string());

        // Opened again: append mode keeps what is there.
        if let Some(mut again) = Sink::open(&target)? {
            again.write(&line("four"))?;
        }
        assert_eq!(std::fs::read_to_string(&path)?, "three\nfour\n");
        Ok(())
    }

    #[test]
    fn a_missing_folder_fails_at_open_and_off_is_no_sink() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("no-such-dir").join("access.log");
        assert!(Sink::open(&AccessLogTarget::File(missing)).is_err());
        assert!(Sink::open(&AccessLogTarget::Off)?.is_none());
        Ok(())
    }
}
