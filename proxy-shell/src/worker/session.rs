//! One client connection inside a worker, from accept to close.
//!
//! Owns: the session's sockets, buffers, readiness flags and counters, and
//! the two byte-moving steps: the capped preread read and the pipe. Must
//! never: consume the window while the preread is undecided (it is replayed
//! to the backend byte for byte), or forward a FIN before every queued byte
//! reached the other side.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use preread_core::routes::ClusterId;
use preread_core::window::read_budget;
use preread_core::{Route, SniPrereadCore};

use super::backends::BackendRef;
use super::pool::Checkout;
use super::timers::TimerId;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the first bytes; the core has not decided.
    Preread,
    /// Routed; a backend connect is in flight.
    Connecting,
    /// Both sockets open; bytes flow both ways.
    Pipe,
}

/// Edge-triggered readiness remembered per socket: set by events, cleared
/// only by `WouldBlock`, so a socket is retried after backpressure ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
}

/// The timers a session may have armed.
#[derive(Debug, Default)]
pub struct SessionTimers {
    pub preread: Option<TimerId>,
    pub server_first: Option<TimerId>,
    pub connect: Option<TimerId>,
    pub front_idle: Option<TimerId>,
    pub back_idle: Option<TimerId>,
}

impl SessionTimers {
    pub fn all(&self) -> impl Iterator<Item = TimerId> + '_ {
        [
            self.preread,
            self.server_first,
            self.connect,
            self.front_idle,
            self.back_idle,
        ]
        .into_iter()
        .flatten()
    }
}

/// One session.
#[derive(Debug)]
pub struct Session {
    pub listener: SocketAddr,
    pub local: SocketAddr,
    pub client: SocketAddr,
    pub front: TcpStream,
    pub back: Option<TcpStream>,
    pub phase: Phase,
    pub core: SniPrereadCore,
    /// The preread window, then the client-to-backend queue.
    pub front_buf: Option<Checkout>,
    /// The backend-to-client queue.
    pub back_buf: Option<Checkout>,
    /// Written to the backend before `front_buf` (a PROXY v2 header).
    pub prefix: Vec<u8>,
    pub route: Option<Arc<Route>>,
    pub cluster: Option<ClusterId>,
    pub backend: Option<BackendRef>,
    pub backend_id: Option<String>,
    pub tried: Vec<BackendRef>,
    pub admitted_ip: Option<IpAddr>,
    pub accepted_at: Instant,
    pub first_byte_at: Option<Instant>,
    pub preread_ms: Option<u64>,
    /// The preread gauge was raised and not yet lowered.
    pub in_preread_gauge: bool,
    pub front_ready: Ready,
    pub back_ready: Ready,
    pub front_eof: bool,
    pub back_eof: bool,
    pub back_write_shut: bool,
    pub front_write_shut: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub last_front_activity: Instant,
    pub last_back_activity: Instant,
    pub timers: SessionTimers,
    /// Queued for a drive in this loop turn.
    pub dirty: bool,
    /// Drives in a row that moved nothing and changed nothing: a session
    /// woken again and again without progress is closed, not spun.
    pub idle_drives: u32,
}

/// What a read step saw.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// Bytes were added (the window grew).
    Grew,
    /// Nothing new (would block, or the budget is spent).
    Idle,
    /// The peer closed its write side.
    Eof,
}

/// Rounds of the pipe loop before a busy session yields to the others.
const PIPE_ROUNDS_PER_TURN: usize = 32;

/// What a pipe step concluded.
#[derive(Debug)]
pub enum PipeStep {
    /// Waiting for readiness; `moved` says whether any byte moved.
    Continue { moved: bool },
    /// Still busy after its share of the turn: drive it again next turn.
    Yield,
    /// Both directions finished: every byte delivered, both FINs forwarded.
    Done,
    /// A socket failed.
    Failed(io::Error),
}

fn is_retryable(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Interrupted
}

/// Reads from `stream` into `buf` until it would block, the buffer is full
/// or `budget` bytes were added. Returns the bytes added and whether EOF came.
fn read_some(
    stream: &mut TcpStream,
    buf: &mut Checkout,
    ready: &mut Ready,
    mut budget: usize,
) -> io::Result<(usize, bool)> {
    let mut added = 0;
    while ready.readable && budget > 0 {
        let space = buf.space();
        if space.is_empty() {
            break;
        }
        let want = space.len().min(budget);
        match stream.read(&mut space[..want]) {
            Ok(0) => return Ok((added, true)),
            Ok(n) => {
                buf.fill(n);
                added += n;
                budget -= n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.readable = false,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((added, false))
}

/// Writes `data` to `stream` until it would block; returns bytes written.
fn write_some(stream: &mut TcpStream, data: &[u8], ready: &mut Ready) -> io::Result<usize> {
    let mut written = 0;
    while ready.writable && written < data.len() {
        match stream.write(&data[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.writable = false,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

impl Session {
    /// The preread read: never past `effective_max` bytes of window, never
    /// consuming. The caller feeds the whole window to the core after it.
    pub fn preread_read(&mut self, effective_max: usize, now: Instant) -> io::Result<ReadStep> {
        let Some(buf) = self.front_buf.as_mut() else {
            return Ok(ReadStep::Idle);
        };
        let budget = read_budget(effective_max, buf.len());
        let (added, eof) = read_some(&mut self.front, buf, &mut self.front_ready, budget)?;
        if added > 0 {
            self.bytes_in += added as u64;
            self.first_byte_at.get_or_insert(now);
            self.last_front_activity = now;
        }
        debug_assert!(
            buf.len() <= effective_max,
            "the window never passes the cap"
        );
        Ok(match (added, eof) {
            (0, true) => ReadStep::Eof,
            (0, false) => ReadStep::Idle,
            // Bytes and EOF in one go: report the bytes now; the EOF is seen
            // again on the next read, after the core had its say.
            _ => ReadStep::Grew,
        })
    }

    /// Moves bytes both ways until nothing moves, forwarding each FIN only
    /// once the queue towards that side is empty.
    pub fn pipe(&mut self, now: Instant) -> PipeStep {
        match self.pipe_inner(now) {
            Ok(step) => step,
            Err(e) => PipeStep::Failed(e),
        }
    }

    fn pipe_inner(&mut self, now: Instant) -> io::Result<PipeStep> {
        let (Some(back), Some(front_buf), Some(back_buf)) = (
            self.back.as_mut(),
            self.front_buf.as_mut(),
            self.back_buf.as_mut(),
        ) else {
            return Err(io::Error::other("pipe without its socket or buffers"));
        };
        let mut moved_any = false;
        for _ in 0..PIPE_ROUNDS_PER_TURN {
            let mut moved = 0;
            if !self.prefix.is_empty() {
                let n = write_some(back, &self.prefix, &mut self.back_ready)?;
                self.prefix.drain(..n);
                moved += n;
            }
            if self.prefix.is_empty() && !front_buf.is_empty() {
                let n = write_some(back, front_buf.data(), &mut self.back_ready)?;
                front_buf.consume(n);
                moved += n;
            }
            if !self.front_eof {
                let (n, eof) = read_some(
                    &mut self.front,
                    front_buf,
                    &mut self.front_ready,
                    usize::MAX,
                )?;
                self.front_eof = eof;
                self.bytes_in += n as u64;
                moved += n;
                if n > 0 || eof {
                    self.last_front_activity = now;
                }
            }
            if !back_buf.is_empty() {
                let n = write_some(&mut self.front, back_buf.data(), &mut self.front_ready)?;
                back_buf.consume(n);
                self.bytes_out += n as u64;
                moved += n;
                if n > 0 {
                    self.last_front_activity = now;
                }
            }
            if !self.back_eof {
                let (n, eof) = read_some(back, back_buf, &mut self.back_ready, usize::MAX)?;
                self.back_eof = eof;
                moved += n;
                if n > 0 || eof {
                    self.last_back_activity = now;
                }
            }
            if self.front_eof
                && self.prefix.is_empty()
                && front_buf.is_empty()
                && !self.back_write_shut
            {
                shutdown_write(back)?;
                self.back_write_shut = true;
            }
            if self.back_eof && back_buf.is_empty() && !self.front_write_shut {
                shutdown_write(&self.front)?;
                self.front_write_shut = true;
            }
            if self.back_write_shut && self.front_write_shut {
                return Ok(PipeStep::Done);
            }
            if moved == 0 {
                return Ok(PipeStep::Continue { moved: moved_any });
            }
            moved_any = true;
        }
        Ok(PipeStep::Yield)
    }
}

fn shutdown_write(stream: &TcpStream) -> io::Result<()> {
    match stream.shutdown(Shutdown::Write) {
        // The peer already went away entirely: nothing left to tell it.
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        other => other,
    }
}
