//! One client connection inside a worker, from accept to close, as the
//! phase it is in: each phase holds what is true of it and nothing else.
//!
//! Owns: [`Session`], what every phase shares (the client's socket, the
//! preread step, the place in `max_connections`, the front idle timer),
//! and [`Phase`]: the preread's window, unrouted count and timers
//! ([`Preread`]); a route refused at the connect gate ([`Gated`]); the
//! route, its per-IP count, the backends tried and the attempt in flight
//! ([`Connecting`]); the backend's lease and the pipe ([`Piped`]). The
//! later phases are boxed: a silent connection holds only what its preread
//! needs. Must never: hold a backend before the route (only a
//! [`Connecting`] phase opens one), or forget a timer of a phase it leaves
//! ([`Session::armed_timers`] lists every one the close cancels).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use preread_core::Route;
use preread_core::routes::ClusterId;
use preread_core::step::PrereadStep;

use super::io::Peer;
use super::pipe::Pipe;
use super::pool::Checkout;
use super::timers::TimerId;
use super::tokens::Side;
use super::unrouted::Held;
use crate::shared::admission::{IpHold, Slot};
use crate::shared::instance::{Instance, Lease};
use crate::vocabulary::RefuseReason;

/// One session.
#[derive(Debug)]
pub struct Session {
    pub listener: SocketAddr,
    pub client: SocketAddr,
    /// The client's socket; its `read` is the session's `bytes_in`.
    pub front: Peer,
    /// The preread policy around the core: budget, timers, the exit. Kept
    /// after the preread for what the access-log line tells of it.
    pub step: PrereadStep,
    pub phase: Phase,
    /// The session's place in the process's `max_connections`.
    pub slot: Option<Slot>,
    pub accepted_at: Instant,
    pub front_idle: Option<TimerId>,
    /// Queued for a drive in this loop turn.
    pub dirty: bool,
    /// Drives in a row that moved nothing and changed nothing: a session
    /// woken again and again without progress is closed, not spun.
    pub idle_drives: u32,
}

/// Where a session is in its life, with what it holds there.
#[derive(Debug)]
pub enum Phase {
    /// Reading the first bytes; the core has not decided.
    Preread(Preread),
    /// Routed, then refused at the connect gate: no backend was tried,
    /// and the session only waits for its close.
    Gated(Box<Gated>),
    /// Routed and admitted; a backend connect is in flight, or waits for
    /// its retry.
    Connecting(Box<Connecting>),
    /// Both sockets open; bytes flow both ways.
    Piped(Box<Piped>),
}

/// The preread phase.
#[derive(Debug, Default)]
pub struct Preread {
    /// The preread window: taken on the first readable event, so an idle
    /// connection holds no buffer memory.
    pub window: Option<Checkout>,
    /// The listener's unrouted count of the client's IP.
    pub unrouted: Option<Held>,
    pub timers: PrereadTimers,
}

/// The preread step's timers the session holds.
#[derive(Debug, Default)]
pub struct PrereadTimers {
    pub preread: Option<TimerId>,
    pub server_first: Option<TimerId>,
    /// The client has sent nothing since the accept.
    pub silent: Option<TimerId>,
}

/// A route the connect gate refused.
#[derive(Debug)]
pub struct Gated {
    pub route: Arc<Route>,
    /// The route's cluster, when this worker knows it (a refusal by its
    /// per-IP limit names whose limit it was).
    pub cluster: Option<ClusterId>,
    pub reason: RefuseReason,
}

/// What a routed and admitted session holds until its close.
#[derive(Debug)]
pub struct Target {
    pub route: Arc<Route>,
    /// Its count in the cluster's `max_connections_per_ip`.
    pub per_ip: IpHold<IpAddr>,
}

/// The connecting phase.
#[derive(Debug)]
pub struct Connecting {
    pub target: Target,
    /// The preread window, replayed to the backend once connected.
    pub window: Option<Checkout>,
    /// The instances this connection tried, so it never tries one twice.
    pub tried: Vec<Arc<Instance>>,
    /// The backend connect in flight.
    pub attempt: Option<Attempt>,
    /// Until when a backend socket this host could not open is retried
    /// (set at the first such local error).
    pub local_retry_until: Option<Instant>,
    /// The connect timeout, or the retry after a local error.
    pub timer: Option<TimerId>,
}

/// One backend connect in flight.
#[derive(Debug)]
pub struct Attempt {
    /// The connection to the backend instance, counted from its pick.
    pub lease: Lease,
    pub back: Peer,
}

/// The piped phase.
#[derive(Debug)]
pub struct Piped {
    pub target: Target,
    pub lease: Lease,
    pub pipe: Pipe,
    /// Passive health has heard how the backend did (its first byte, or a
    /// close or reset before one).
    pub backend_judged: bool,
    pub back_idle: Option<TimerId>,
}

/// An empty preread: what a phase being replaced leaves for the instant
/// its successor is built.
impl Default for Phase {
    fn default() -> Self {
        Phase::Preread(Preread::default())
    }
}

impl Connecting {
    /// Admitted to its cluster, with the window the preread read.
    pub fn new(target: Target, window: Option<Checkout>) -> Self {
        Self {
            target,
            window,
            tried: Vec::new(),
            attempt: None,
            local_retry_until: None,
            timer: None,
        }
    }
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
            front: Peer::new(front, now),
            step,
            phase: Phase::Preread(Preread::default()),
            slot: None,
            accepted_at: now,
            front_idle: None,
            dirty: false,
            idle_drives: 0,
        }
    }

    /// The front socket's local address: the listener's own, unless it
    /// listens on a wildcard address or port, when only the kernel knows
    /// (one `getsockname`, asked only by the PROXY header that needs it).
    pub fn local_address(&self) -> SocketAddr {
        if self.listener.ip().is_unspecified() || self.listener.port() == 0 {
            self.front.stream.local_addr().unwrap_or(self.listener)
        } else {
            self.listener
        }
    }

    /// A socket of the session, when it has that one (a backend socket
    /// only while connecting or piped).
    pub(super) fn peer_mut(&mut self, side: Side) -> Option<&mut Peer> {
        match (side, &mut self.phase) {
            (Side::Front, _) => Some(&mut self.front),
            (Side::Back, Phase::Connecting(connecting)) => {
                connecting.attempt.as_mut().map(|attempt| &mut attempt.back)
            }
            (Side::Back, Phase::Piped(piped)) => Some(&mut piped.pipe.back),
            (Side::Back, Phase::Preread(_) | Phase::Gated(_)) => None,
        }
    }

    /// The window the preread has read so far (nothing once it is over).
    pub fn window(&self) -> &[u8] {
        match &self.phase {
            Phase::Preread(preread) => preread.window.as_ref().map_or(&[][..], Checkout::data),
            Phase::Gated(_) | Phase::Connecting(_) | Phase::Piped(_) => &[],
        }
    }

    /// The preread window, taken by the phase after the preread.
    pub fn take_window(&mut self) -> Option<Checkout> {
        match &mut self.phase {
            Phase::Preread(preread) => preread.window.take(),
            Phase::Gated(_) | Phase::Connecting(_) | Phase::Piped(_) => None,
        }
    }

    /// The route, once the preread decided one.
    pub fn route(&self) -> Option<&Arc<Route>> {
        match &self.phase {
            Phase::Preread(_) => None,
            Phase::Gated(gated) => Some(&gated.route),
            Phase::Connecting(connecting) => Some(&connecting.target.route),
            Phase::Piped(piped) => Some(&piped.target.route),
        }
    }

    /// The route's cluster, once this worker admitted the session to it
    /// (or refused it by the cluster's per-IP limit).
    pub fn cluster(&self) -> Option<&ClusterId> {
        match &self.phase {
            Phase::Preread(_) => None,
            Phase::Gated(gated) => gated.cluster.as_ref(),
            Phase::Connecting(connecting) => Some(&connecting.target.route.cluster),
            Phase::Piped(piped) => Some(&piped.target.route.cluster),
        }
    }

    /// The backend being connected or piped to.
    pub fn backend_id(&self) -> Option<&Arc<str>> {
        let lease = match &self.phase {
            Phase::Preread(_) | Phase::Gated(_) => None,
            Phase::Connecting(connecting) => connecting.attempt.as_ref().map(|a| &a.lease),
            Phase::Piped(piped) => Some(&piped.lease),
        };
        lease.map(|lease| lease.instance().backend_id())
    }

    /// Bytes written to the client.
    pub fn bytes_out(&self) -> u64 {
        match &self.phase {
            Phase::Piped(piped) => piped.pipe.bytes_out,
            Phase::Preread(_) | Phase::Gated(_) | Phase::Connecting(_) => 0,
        }
    }

    /// Every timer the session holds, whatever its phase.
    pub fn armed_timers(&self) -> impl Iterator<Item = TimerId> + use<> {
        let (preread, server_first, silent, phase) = match &self.phase {
            Phase::Preread(preread) => {
                let timers = &preread.timers;
                (timers.preread, timers.server_first, timers.silent, None)
            }
            Phase::Gated(_) => (None, None, None, None),
            Phase::Connecting(connecting) => (None, None, None, connecting.timer),
            Phase::Piped(piped) => (None, None, None, piped.back_idle),
        };
        [self.front_idle, preread, server_first, silent, phase]
            .into_iter()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::{Connecting, Phase, Piped, Preread, Session};

    /// A silent connection holds the common part and the preread phase
    /// only: the backend half and the pipe come boxed, at routing, and the
    /// core at the first byte (`PrereadStep`). The bound is the design's
    /// promise of ≤ 0.5 KiB per idle connection (doc/configure.md §2.1,
    /// doc/performance.md "The kernel's floor"): 384 bytes of record leave
    /// the rest for its timer and its slab slot's share. 520 bytes when the
    /// phases were split, 576 with the core's framing cursor inline; a
    /// change that makes it bigger should say why.
    #[test]
    fn a_silent_session_holds_only_what_its_preread_needs() {
        let session = size_of::<Session>();
        eprintln!(
            "Session {session}, Phase {}, Preread {}, Connecting {}, Piped {}",
            size_of::<Phase>(),
            size_of::<Preread>(),
            size_of::<Connecting>(),
            size_of::<Piped>()
        );
        assert!(
            size_of::<Phase>() <= size_of::<Preread>() + 8,
            "a later phase is stored inline"
        );
        assert!(session <= 384, "Session is {session} bytes");
    }
}
