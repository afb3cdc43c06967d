//! One client connection inside a worker, from accept to close.
//!
//! Owns: the session's sockets, buffers, readiness flags and counters, and
//! the capped preread read (the pipe step lives in `worker/pipe.rs`). Must
//! never: consume the window while the preread is undecided (it is replayed
//! to the backend byte for byte), or forward a FIN before every queued byte
//! reached the other side.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use preread_core::routes::ClusterId;
use preread_core::window::read_budget;
use preread_core::{Route, SniPrereadCore};

use super::backends::BackendRef;
use super::pipe::Lanes;
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
    /// The preread window, then the client-to-backend queue. A spliced
    /// direction gives it back once the window went out.
    pub front_buf: Option<Checkout>,
    /// The backend-to-client queue; never taken by a spliced direction.
    pub back_buf: Option<Checkout>,
    /// How each pipe direction moves bytes (set up by [`Session::open_lanes`]).
    pub lanes: Lanes,
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

fn is_retryable(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Interrupted
}

/// Reads from `stream` into `buf` until it would block, the buffer is full
/// or `budget` bytes were added. Returns the bytes added and whether EOF came.
pub(super) fn read_some(
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
pub(super) fn write_some(
    stream: &mut TcpStream,
    data: &[u8],
    ready: &mut Ready,
) -> io::Result<usize> {
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
    /// A session just accepted: in preread, no bytes, no buffer, no backend.
    pub fn accepted(
        listener: SocketAddr,
        local: SocketAddr,
        client: SocketAddr,
        front: TcpStream,
        now: Instant,
    ) -> Self {
        Self {
            listener,
            local,
            client,
            front,
            back: None,
            phase: Phase::Preread,
            core: SniPrereadCore::new(),
            front_buf: None,
            back_buf: None,
            lanes: Default::default(),
            prefix: Vec::new(),
            route: None,
            cluster: None,
            backend: None,
            backend_id: None,
            tried: Vec::new(),
            admitted_ip: None,
            accepted_at: now,
            first_byte_at: None,
            preread_ms: None,
            in_preread_gauge: false,
            front_ready: Ready::default(),
            back_ready: Ready::default(),
            front_eof: false,
            back_eof: false,
            back_write_shut: false,
            front_write_shut: false,
            bytes_in: 0,
            bytes_out: 0,
            last_front_activity: now,
            last_back_activity: now,
            timers: SessionTimers::default(),
            dirty: false,
            idle_drives: 0,
        }
    }

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
}
