//! `preread metrics get --watch INTERVAL`: `query_metrics` every interval
//! until SIGINT or SIGTERM, each answer shown as `watch_table` lays it out
//! and `screen` draws it (JSON Lines with `--json`).
//!
//! Owns: the schedule (ticks on a fixed grid from the first answer; a tick
//! missed while an answer was late is skipped, not caught up), the signals
//! that end the watch (exit 0, the terminal restored), and what a lost
//! proxy does: the first refresh must be answered (else the watch exits as
//! any socket subcommand would); a later failure (a restart, an upgrade, a
//! busy command socket) is retried at every tick, shown by a `proxy
//! unreachable since …` line, until the proxy answers again or the
//! operator stops the watch. Must never: exit without restoring the
//! terminal, or write a failure to stdout unless stdout is the terminal
//! being redrawn.

use core::fmt;
use std::io::{self, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use command::channel::ChannelError;
use command::duration;
use command::proto::{self, request::RequestType, response_content::ContentType};
use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::args::MetricsGetArgs;
use super::client::{is_failure, open, socket_path};
use super::print::failure_text;
use super::screen::Screen;
use super::watch_table::{self, Frame, Previous, Selection};
use super::{EXIT_FAILED, EXIT_USAGE, Globals};

/// Why a refresh got no metrics.
#[derive(Debug)]
enum Failure {
    /// No connection or no answer.
    Unreachable(ChannelError),
    /// An answer that was a refusal, as `failure_text` writes it.
    Refused(String),
}

impl Failure {
    fn why(&self) -> String {
        match self {
            Self::Unreachable(error) => error.to_string(),
            Self::Refused(why) => why.clone(),
        }
    }

    /// The stderr line of a failed first refresh, as other socket
    /// subcommands write it.
    fn stderr_line(&self) -> String {
        match self {
            Self::Unreachable(error) => format!("preread: {error}"),
            Self::Refused(text) => text.clone(),
        }
    }
}

/// Why the watch itself stopped (a lost proxy does not stop it).
#[derive(Debug)]
enum WatchError {
    /// Stdout is closed or full: nobody sees the table any more.
    Stdout(io::Error),
    /// The stop signals could not be taken over.
    Signals(io::Error),
    /// The thread that forwards them could not start.
    SignalThread(io::Error),
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdout(error) => write!(f, "cannot write to stdout: {error}"),
            Self::Signals(error) => write!(f, "cannot handle SIGINT and SIGTERM: {error}"),
            Self::SignalThread(error) => write!(f, "cannot start the signal thread: {error}"),
        }
    }
}

impl core::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Stdout(error) | Self::Signals(error) | Self::SignalThread(error) => Some(error),
        }
    }
}

/// An answer and when it came.
#[derive(Debug)]
struct Answer {
    report: proto::MetricsReport,
    at: Instant,
    wall: SystemTime,
}

/// Failed refreshes in a row.
#[derive(Debug)]
struct Outage {
    since: Instant,
    since_wall: SystemTime,
    failures: u32,
}

/// The watch's output: what it drew last, for the outage frame.
#[derive(Debug)]
struct View {
    screen: Screen,
    json: bool,
    selection: Selection,
    interval_ms: u64,
    drawn: bool,
    last_lines: Vec<String>,
}

fn utc(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

impl View {
    fn write(text: &str) -> Result<(), WatchError> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(WatchError::Stdout)
    }

    /// Shows `answer`, with rates against `previous`.
    fn show(&mut self, answer: &Answer, previous: Option<&Answer>) -> Result<(), WatchError> {
        let previous = previous.map(|p| Previous {
            total: &p.report.total,
            elapsed: answer.at.saturating_duration_since(p.at),
        });
        let rows = watch_table::rows(previous, &answer.report.total, &self.selection);
        let at = utc(answer.wall);
        let frame = Frame {
            at: &at,
            interval_ms: self.interval_ms,
            workers: answer.report.workers.len(),
            metrics: answer.report.total.len(),
            filter: self.selection.filter.as_deref(),
        };
        if self.json {
            let line = watch_table::json_line(&frame, previous.map(|p| p.elapsed), &rows);
            return Self::write(&format!("{line}\n"));
        }
        let mut lines = vec![watch_table::header_line(&frame, rows.len())];
        lines.extend(watch_table::table_lines(&rows));
        self.draw(lines.clone())?;
        self.last_lines = lines;
        Ok(())
    }

    fn draw(&mut self, lines: Vec<String>) -> Result<(), WatchError> {
        let lines = watch_table::fit(lines, self.screen.size());
        let first = !self.drawn;
        self.drawn = true;
        Self::write(&self.screen.frame(&lines, first))
    }

    /// Shows a failed refresh: on the terminal, the last frame under an
    /// outage line; elsewhere one line on stderr when the outage starts.
    fn outage(&mut self, outage: &Outage, failure: &Failure) -> Result<(), WatchError> {
        let line = watch_table::outage_line(
            &utc(outage.since_wall),
            outage.failures,
            &failure.why(),
            self.interval_ms,
        );
        if self.json || self.screen == Screen::Plain {
            if outage.failures == 1 {
                eprintln!("preread: {line}");
            }
            return Ok(());
        }
        let mut lines = self.last_lines.clone();
        lines.insert(lines.len().min(1), line);
        self.draw(lines)
    }

    /// Says on stderr, off the terminal, that the proxy answers again.
    fn recovered(&self, outage: &Outage, now: Instant) {
        if self.json || self.screen == Screen::Plain {
            eprintln!(
                "preread: the proxy answers again after {} ({} failed refresh(es))",
                duration::shown_duration(now.saturating_duration_since(outage.since)),
                outage.failures
            );
        }
    }

    fn restore(&self) -> Result<(), WatchError> {
        if self.drawn {
            Self::write(self.screen.restore())?;
        }
        Ok(())
    }
}

/// One `query_metrics` on a new connection: an idle connection would be
/// closed by the proxy's `command_client_timeout` between two refreshes.
fn query(socket: &Path, globals: &Globals) -> Result<Answer, Failure> {
    let mut channel = open(socket, globals).map_err(Failure::Unreachable)?;
    let request = proto::Request {
        request_type: Some(RequestType::QueryMetrics(proto::QueryMetrics::default())),
    };
    let response = channel
        .request(&request, |_| {})
        .map_err(Failure::Unreachable)?;
    if is_failure(&response) {
        return Err(Failure::Refused(failure_text(&response)));
    }
    match response.content.and_then(|c| c.content_type) {
        Some(ContentType::Metrics(report)) => Ok(Answer {
            report,
            at: Instant::now(),
            wall: SystemTime::now(),
        }),
        _ => Err(Failure::Refused(
            "error: the proxy answered query_metrics without metrics".to_owned(),
        )),
    }
}

/// SIGINT and SIGTERM, delivered on a channel instead of ending the
/// process, so that the terminal is restored first.
fn stop_signals() -> Result<Receiver<i32>, WatchError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(WatchError::Signals)?;
    let (sender, receiver) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("watch-signals".to_owned())
        .spawn(move || {
            for signal in signals.forever() {
                // A full channel already holds a stop: one is enough.
                let _ = sender.try_send(signal);
            }
        })
        .map_err(WatchError::SignalThread)?;
    Ok(receiver)
}

/// The first tick of the grid `tick + k × interval` (k ≥ 1) after `now`.
fn next_tick(tick: Instant, interval: Duration, now: Instant) -> Instant {
    let mut next = tick + interval;
    if next <= now && !interval.is_zero() {
        let behind = now.duration_since(next).as_nanos() / interval.as_nanos();
        let skipped = u32::try_from(behind + 1).unwrap_or(u32::MAX);
        next += interval.saturating_mul(skipped);
    }
    next
}

/// Runs the watch of `args`, every `interval_ms`.
pub(super) fn run(globals: &Globals, args: &MetricsGetArgs, interval_ms: u64) -> ExitCode {
    let socket = match socket_path(globals) {
        Ok(socket) => socket,
        Err(error) => {
            eprintln!("preread: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let stop = match stop_signals() {
        Ok(stop) => stop,
        Err(error) => {
            eprintln!("preread: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut last = match query(&socket, globals) {
        Ok(answer) => answer,
        Err(failure) => {
            eprintln!("{}", failure.stderr_line());
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut view = View {
        screen: if globals.json {
            Screen::Plain
        } else {
            Screen::of_stdout()
        },
        json: globals.json,
        selection: Selection {
            filter: args.filter.clone(),
            hide_zero: args.hide_zero,
        },
        interval_ms,
        drawn: false,
        last_lines: Vec::new(),
    };
    let watched = watch(&socket, globals, &stop, &mut view, &mut last);
    let restored = view.restore();
    match watched.and(restored) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("preread: {error}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Refreshes until a stop signal; `last` is the first answer.
fn watch(
    socket: &Path,
    globals: &Globals,
    stop: &Receiver<i32>,
    view: &mut View,
    last: &mut Answer,
) -> Result<(), WatchError> {
    let interval = Duration::from_millis(view.interval_ms);
    view.show(last, None)?;
    let mut tick = last.at;
    let mut outage: Option<Outage> = None;
    loop {
        tick = next_tick(tick, interval, Instant::now());
        match stop.recv_deadline(tick) {
            Err(RecvTimeoutError::Timeout) => {}
            // A stop signal, or the thread that forwards them is gone and
            // nothing could stop the watch any more.
            Ok(_) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        match query(socket, globals) {
            Ok(answer) => {
                if let Some(ended) = outage.take() {
                    view.recovered(&ended, answer.at);
                }
                view.show(&answer, Some(last))?;
                *last = answer;
            }
            Err(failure) => {
                let current = outage.get_or_insert_with(|| Outage {
                    since: Instant::now(),
                    since_wall: SystemTime::now(),
                    failures: 0,
                });
                current.failures = current.failures.saturating_add(1);
                view.outage(current, &failure)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_stopped_watch_says_what_failed_with_the_system_error() {
        let closed = io::Error::from(io::ErrorKind::BrokenPipe);
        let shown = WatchError::Stdout(closed).to_string();
        assert!(shown.starts_with("cannot write to stdout: "), "{shown}");
        assert!(shown.len() > "cannot write to stdout: ".len(), "{shown}");
        let lost = Failure::Unreachable(ChannelError::Timeout);
        assert_eq!(lost.why(), ChannelError::Timeout.to_string());
        assert_eq!(lost.stderr_line(), format!("preread: {}", lost.why()));
    }

    #[test]
    fn ticks_stay_on_their_grid_and_skip_what_a_late_answer_missed() {
        let start = Instant::now();
        let every = Duration::from_millis(200);
        let on_time = start + Duration::from_millis(50);
        assert_eq!(next_tick(start, every, on_time), start + every);
        let late = start + Duration::from_millis(650);
        assert_eq!(
            next_tick(start, every, late),
            start + Duration::from_millis(800),
            "the ticks at 200, 400 and 600 ms are skipped, not caught up"
        );
        let exactly = start + Duration::from_millis(400);
        assert_eq!(
            next_tick(start, every, exactly),
            start + Duration::from_millis(600)
        );
    }
}
