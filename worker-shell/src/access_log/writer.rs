//! The access-log writer: one thread that owns the sink and writes every
//! line the workers queue, in the order they queued them.
//!
//! Owns: the bounded queue (`access_log_queue` lines), the thread and its
//! loop, what a failed write does (one warning, then quiet until a write
//! succeeds again), reopening on order (SIGUSR1: the lines queued before
//! the order go where lines went until then, the rest to the new file),
//! and the end (the lines still queued are written, within a bound: a
//! writer stuck on a full pipe does not hold the process). Must never:
//! make a worker wait (the workers only offer), or reopen from any thread
//! but its own.

use std::io;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use command::config::{AccessLogFormat, AccessLogTarget};
use crossbeam_channel::{Receiver, Sender, bounded, select_biased, unbounded};
use log::{info, warn};

use super::sink::Sink;
use super::{AccessLogQueue, Line};

/// What the command thread asks of the writer.
#[derive(Debug)]
enum Order {
    /// Open the target again (SIGUSR1, after a rotation).
    Reopen,
    /// Write what is queued, then stop.
    Finish,
}

/// The command thread's handle on the writer.
#[derive(Debug)]
pub struct AccessLogWriter {
    orders: Sender<Order>,
    /// A second end of the queue, only to say how much was left at the end.
    queued: Receiver<Line>,
    thread: JoinHandle<()>,
}

/// Opens `target` and starts its writer with a queue of `capacity` lines.
/// Returns the queue the workers offer their lines to, and the writer
/// (`None` for `"off"`: no thread, nothing formatted). A file or socket
/// that cannot be opened is an error here.
pub fn start(
    target: &AccessLogTarget,
    format: AccessLogFormat,
    capacity: usize,
) -> io::Result<(AccessLogQueue, Option<AccessLogWriter>)> {
    let Some(sink) = Sink::open(target)? else {
        return Ok((AccessLogQueue::off(), None));
    };
    let (lines, queued) = bounded(capacity.max(1));
    let (orders, taken) = unbounded();
    let receiver = queued.clone();
    let thread = std::thread::Builder::new()
        .name("preread-access-log".to_owned())
        .spawn(move || run(sink, &receiver, &taken))?;
    let queue = AccessLogQueue {
        lines: Some(lines),
        format,
    };
    let writer = AccessLogWriter {
        orders,
        queued,
        thread,
    };
    Ok((queue, Some(writer)))
}

/// The command thread's way to ask for a reopen (SIGUSR1).
#[derive(Debug, Clone)]
pub struct Reopener {
    orders: Sender<Order>,
}

impl Reopener {
    /// Asks the writer to open its target again; it logs how that went.
    /// Never waits.
    pub fn reopen(&self) {
        if self.orders.send(Order::Reopen).is_err() {
            warn!("the access-log writer is gone: nothing to reopen");
        }
    }
}

impl AccessLogWriter {
    /// A handle that asks this writer for reopens.
    pub fn reopener(&self) -> Reopener {
        Reopener {
            orders: self.orders.clone(),
        }
    }

    /// Asks the writer to write what is queued and stop, and waits for it
    /// at most `within`. Call once the workers are done.
    pub fn finish(self, within: Duration) {
        let _ = self.orders.send(Order::Finish);
        let deadline = Instant::now() + within;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !self.thread.is_finished() {
            warn!(
                "the access-log writer did not finish within {within:?} (is its file a pipe \
                 nobody reads?): {} queued line(s) lost",
                self.queued.len()
            );
        } else if self.thread.join().is_err() {
            warn!("the access-log writer panicked");
        }
    }
}

/// The writer's loop: lines as they come, orders between them (an order
/// first when both wait, so the lines queued after it follow it).
fn run(mut sink: Sink, lines: &Receiver<Line>, orders: &Receiver<Order>) {
    let mut failing = false;
    if let Err(e) = sink.ready() {
        warn!(
            "cannot open the access log {}: {e}; its lines are dropped until a reopen (SIGUSR1) \
             works",
            sink.describe()
        );
        failing = true;
    }
    loop {
        select_biased! {
            recv(orders) -> order => {
                // Only what was queued before the order: the workers go on
                // queueing while this runs.
                for line in lines.try_iter().take(lines.len()) {
                    write(&mut sink, &line, &mut failing);
                }
                match order {
                    Ok(Order::Reopen) => reopen(&mut sink, &mut failing),
                    Ok(Order::Finish) | Err(_) => return,
                }
            }
            recv(lines) -> line => match line {
                Ok(line) => write(&mut sink, &line, &mut failing),
                // Every worker is gone.
                Err(_) => return,
            },
        }
    }
}

fn write(sink: &mut Sink, line: &Line, failing: &mut bool) {
    match sink.write(line) {
        Ok(()) => *failing = false,
        Err(e) if !*failing => {
            *failing = true;
            warn!(
                "access log write to {} failed, dropping lines until it works again: {e}",
                sink.describe()
            );
        }
        Err(_) => {}
    }
}

fn reopen(sink: &mut Sink, failing: &mut bool) {
    match sink.reopen() {
        Ok(()) => {
            *failing = false;
            info!("access log reopened: {}", sink.describe());
        }
        Err(e) => warn!(
            "cannot reopen the access log {}: {e}; it keeps writing where it did",
            sink.describe()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use command::config::{AccessLogFormat, AccessLogTarget};

    use super::super::{AccessLogEntry, Dropped, Line};
    use super::start;
    use crate::vocabulary::Outcome;

    fn line(text: &str) -> Line {
        Line {
            at: UNIX_EPOCH,
            text: text.to_owned(),
        }
    }

    fn entry() -> AccessLogEntry<'static> {
        let local = SocketAddr::from(([127, 0, 0, 1], 8443));
        AccessLogEntry {
            ts: SystemTime::now(),
            listener: local,
            client: local,
            sni: None,
            alpn: None,
            cluster: None,
            backend: None,
            outcome: Outcome::Routed,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0,
            preread_ms: None,
            proxy_client: None,
            hello: None,
            ja4: None,
            rule: None,
            quic: None,
        }
    }

    #[test]
    fn lines_arrive_in_order_and_a_reopen_splits_them_where_it_was_asked() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("access.log");
        let rotated = dir.path().join("access.log.1");
        let target = AccessLogTarget::File(path.clone());
        let (queue, writer) = start(&target, AccessLogFormat::Logfmt, 64)?;
        let Some(writer) = writer else {
            return Err(std::io::Error::other("a file target has a writer"));
        };
        let lines = queue
            .lines
            .as_ref()
            .ok_or(std::io::Error::other("a queue"))?;
        for text in ["a", "b"] {
            lines.send(line(text)).map_err(std::io::Error::other)?;
        }
        // Renamed while lines may still be queued: they go to the file
        // that was open, as the order comes after them.
        std::fs::rename(&path, &rotated)?;
        writer.reopener().reopen();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !path.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        lines.send(line("c")).map_err(std::io::Error::other)?;
        drop(queue);
        writer.finish(Duration::from_secs(5));
        assert_eq!(std::fs::read_to_string(&rotated)?, "a\nb\n");
        assert_eq!(std::fs::read_to_string(&path)?, "c\n");
        Ok(())
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
        assert!(made.success(), "mkfifo");
        // Nobody opens the FIFO for reading: the writer waits in its open,
        // and the queue fills.
        let target = AccessLogTarget::File(fifo);
        let (queue, writer) = start(&target, AccessLogFormat::Logfmt, 4)?;
        let started = Instant::now();
        let offered: Vec<Result<(), Dropped>> = (0..6).map(|_| queue.submit(&entry())).collect();
        assert_eq!(
            offered,
            [Ok(()), Ok(()), Ok(()), Ok(()), Err(Dropped), Err(Dropped)]
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no offer waited"
        );
        if let Some(writer) = writer {
            writer.finish(Duration::from_millis(50));
        }
        Ok(())
    }

    #[test]
    fn off_has_no_writer_and_takes_every_line() -> std::io::Result<()> {
        let (queue, writer) = start(&AccessLogTarget::Off, AccessLogFormat::Json, 8)?;
        assert!(writer.is_none() && queue.lines.is_none());
        assert_eq!(queue.submit(&entry()), Ok(()));
        Ok(())
    }
}
