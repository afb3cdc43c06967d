//! One client connection inside a worker, from accept to close.
//!
//! Owns: the session's sockets, buffers, readiness flags and counters, and
//! the capped preread read (the pipe step lives in `worker/pipe.rs`). Must
//! never: consume the window while the preread is undecided (it is replayed
//! to the backend byte for byte), or forward a FIN before every queued byte
//! reached the other side.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use preread_core::Route;
use preread_core::routes::ClusterId;
use preread_core::step::PrereadStep;

use super::io::{Ready, read_some};
use super::lanes::Lanes;
use super::pool::Checkout;
use super::timers::TimerId;
use super::unrouted::Held;
use crate::shared::admission::{IpHold, Slot};
use crate::shared::instance::{Instance, Lease};

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

/// The timers a session may have armed.
#[derive(Debug, Default)]
pub struct SessionTimers {
    pub preread: Option<TimerId>,
    pub server_first: Option<TimerId>,
    /// The client has sent nothing since the accept.
    pub silent: Option<TimerId>,
    /// The connect timeout, or the retry after a local error.
    pub connect: Option<TimerId>,
    pub front_idle: Option<TimerId>,
    pub back_idle: Option<TimerId>,
}

impl SessionTimers {
    pub fn all(&self) -> impl Iterator<Item = TimerId> + '_ {
        [
            self.preread,
            self.server_first,
            self.silent,
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
    pub client: SocketAddr,
    pub front: TcpStream,
    pub back: Option<TcpStream>,
    pub phase: Phase,
    /// The preread policy around the core: budget, timers, the exit.
    pub step: PrereadStep,
    /// The preread window, then the client-to-backend queue. A spliced
    /// direction gives it back once the window went out.
    pub front_buf: Option<Checkout>,
    /// The backend-to-client queue; never taken by a spliced direction.
    pub back_buf: Option<Checkout>,
    /// Buffer claims this session holds without their memory (an idle
    /// copying direction parked its empty buffer); given back at close.
    pub parked: u8,
    /// How each pipe direction moves bytes (set up by `pipe::open_lanes`).
    pub lanes: Lanes,
    /// Written to the backend before `front_buf` (a PROXY v2 header).
    pub prefix: Vec<u8>,
    pub route: Option<Arc<Route>>,
    pub cluster: Option<ClusterId>,
    /// The connection to the backend instance, counted from its pick.
    pub lease: Option<Lease>,
    pub backend_id: Option<Arc<str>>,
    /// The instances this connection tried, so it never tries one twice.
    pub tried: Vec<Arc<Instance>>,
    /// The session's place in the process's `max_connections`.
    pub slot: Option<Slot>,
    /// Its count in the cluster's `max_connections_per_ip`.
    pub per_ip: Option<IpHold<IpAddr>>,
    /// Passive health has heard how the piped backend did (its first byte,
    /// or a close or reset before one).
    pub backend_judged: bool,
    /// Until when a backend socket this host could not open is retried
    /// (set at the first such local error).
    pub local_retry_until: Option<Instant>,
    /// The listener's unrouted count of the client's IP, while it prereads.
    pub unrouted: Option<Held>,
    pub accepted_at: Instant,
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

impl Session {
    /// A session just accepted: in preread, no bytes, no buffer, no backend.
    pub fn accepted(
        listener: SocketAddr,
        client: SocketAddr,
        front: TcpStream,
        step: PrereadStep,
        now: Instant,
    ) -> Self {
        Self {
            listener,
            client,
            front,
            back: None,
            phase: Phase::Preread,
            step,
            front_buf: None,
            back_buf: None,
            parked: 0,
            lanes: Default::default(),
            prefix: Vec::new(),
            route: None,
            cluster: None,
            lease: None,
            backend_id: None,
            tried: Vec::new(),
            slot: None,
            per_ip: None,
            backend_judged: false,
            local_retry_until: None,
            unrouted: None,
            accepted_at: now,
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

    /// The preread read: at most `budget` bytes (the step's), never
    /// consuming the window. Returns the bytes added and whether the client
    /// closed; the caller hands both to the step.
    pub fn preread_read(&mut self, budget: usize, now: Instant) -> io::Result<(usize, bool)> {
        let Some(buf) = self.front_buf.as_mut() else {
            return Ok((0, false));
        };
        let (added, eof) = read_some(&mut self.front, buf, &mut self.front_ready, budget)?;
        if added > 0 {
            self.bytes_in += added as u64;
            self.last_front_activity = now;
        }
        Ok((added, eof))
    }

    /// The front socket's local address: the listener's own, unless it
    /// listens on a wildcard address or port, when only the kernel knows
    /// (one `getsockname`, asked only by the PROXY header that needs it).
    pub fn local_address(&self) -> SocketAddr {
        if self.listener.ip().is_unspecified() || self.listener.port() == 0 {
            self.front.local_addr().unwrap_or(self.listener)
        } else {
            self.listener
        }
    }

    /// The window the preread has read so far.
    pub fn window(&self) -> &[u8] {
        self.front_buf.as_ref().map_or(&[][..], Checkout::data)
    }
}
