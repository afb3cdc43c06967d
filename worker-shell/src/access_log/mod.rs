//! The access log: one line per closed session, written by one thread of
//! its own so that no worker ever waits for a disk, a pipe or a syslog
//! daemon.
//!
//! Owns: the hand-off from the workers to the writer ([`AccessLogQueue`]:
//! a worker formats the line and offers it to a bounded channel; when the
//! channel is full the line is dropped and the worker counts it in
//! `access_log.dropped_total`). The parts: `line` is the format of a line,
//! `sink` where lines go (stderr, a file, a syslog socket), `syslog` the
//! RFC 5424 framing, and `writer` the thread that owns the sink, so that
//! reopening it (SIGUSR1) happens in one place.
//!
//! Must never: block a worker (an offer never waits), or lose a line
//! without a trace (a dropped line is counted, a failed write logged).

mod line;
mod sink;
mod syslog;
mod writer;

use std::time::SystemTime;

use command::config::AccessLogFormat;
use crossbeam_channel::{Sender, TrySendError};

pub use line::{AccessLogEntry, QuicLog, rfc3339_millis};
pub use writer::{AccessLogWriter, Reopener, start};

/// A finished line on its way to the writer: its text, without the
/// newline, and when its session closed (the syslog header's time).
#[derive(Debug)]
struct Line {
    at: SystemTime,
    text: String,
}

/// The line was not queued: the writer is behind by the whole queue (or
/// gone). Count it; never wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped;

/// A worker's end of the access log: clone one per worker.
#[derive(Debug, Clone)]
pub struct AccessLogQueue {
    /// `None` with `access_logs = "off"`: nothing is formatted.
    lines: Option<Sender<Line>>,
    format: AccessLogFormat,
}

impl AccessLogQueue {
    /// The queue of `access_logs = "off"`: every line is discarded unformatted.
    pub fn off() -> Self {
        Self {
            lines: None,
            format: AccessLogFormat::default(),
        }
    }

    /// Whether lines are written: what the log alone needs (the JA4) is
    /// not computed when they are not.
    pub fn is_on(&self) -> bool {
        self.lines.is_some()
    }

    /// Formats `entry` and offers it to the writer, without waiting.
    pub fn submit(&self, entry: &AccessLogEntry<'_>) -> Result<(), Dropped> {
        let Some(lines) = &self.lines else {
            return Ok(());
        };
        let line = Line {
            at: entry.ts,
            text: entry.format(self.format),
        };
        match lines.try_send(line) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(Dropped),
        }
    }
}
