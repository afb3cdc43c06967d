//! The worker's QUIC listeners: UDP sockets (`SO_REUSEPORT`, one per
//! worker and address), the flows of their clients, and the relay.
//!
//! Owns: the sockets and performing what the policy decides: a client's
//! datagram goes to its flow ([`flows::FlowTable`], pure), a new flow is
//! admitted by [`admit`] (process-wide `max_flows`, `max_flows_per_ip`)
//! and read by the QUIC preread step of `preread_core::quic` (the one
//! decision, its deadline and the reply of a reject); the datagrams an
//! undecided flow received are held (capped by the table), then replayed
//! in order to a backend of the chosen cluster, and the flow relays both
//! ways until it idles out. An upgrade hands the sockets and the decided
//! flows to the successor ([`upgrade`], in the form of [`handover`]).
//! Must never: decide a route, hold a datagram outside the table's caps,
//! or block.
//!
//! One socket per flow towards the backend, connected to it: the backend
//! tells clients apart by the 4-tuple, so every flow needs its own source
//! port, and a connected socket lets the kernel deliver the backend's
//! datagrams to the flow's socket by its 4-tuple (no demultiplexing here)
//! and send without an address per datagram (9–12% cheaper than
//! `send_to`, measured in doc/performance.md, "QUIC relay"). Plain
//! `recv`/`send` loops until `WouldBlock`: `recvmmsg` on the listener
//! saves 8–13% a datagram at the call level but is not adopted until its
//! effect through the whole relay is measured; `sendmmsg` and UDP GSO
//! need a batch for one socket, which an established flow's relay rarely
//! has (each datagram goes on as it is read).

mod buffers;
mod capture;
mod count;
pub mod flows;
pub mod handover;
mod relay;
pub mod upgrade;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::{info, warn};
use mio::net::UdpSocket;
use mio::{Interest, Token};
use slab::Slab;

pub use crate::shared::quic_flows::{FlowCounts, FlowHolds, Refused, admit};
use flows::{FlowTable, HoldCaps};
use relay::FlowState;
use upgrade::InheritedQuic;

use super::ctx::Ctx;
use super::timers::Timers;
use super::tokens::{QUIC_FLOW_BASE, QUIC_LISTENER_BASE};

/// The largest UDP payload read at once.
const MAX_DATAGRAM: usize = 65_535;

/// Asks for a listener's buffers ([`buffers`]), and says when the kernel
/// gave less: the operator's cap, which a busy listener drops datagrams
/// against.
fn widen_listener(socket: &UdpSocket, address: SocketAddr) {
    for way in [buffers::Way::Receive, buffers::Way::Send] {
        match buffers::widen(socket, way, buffers::LISTENER_BUFFER) {
            Ok(got) if got >= buffers::LISTENER_BUFFER => {}
            Ok(got) => warn!(
                "QUIC listener {address}: {way:?} buffer {} KiB, not the {} KiB asked for: \
                 raise {} (or give preread CAP_NET_ADMIN)",
                got >> 10,
                buffers::LISTENER_BUFFER >> 10,
                way.sysctl()
            ),
            Err(e) => warn!("QUIC listener {address}: {way:?} buffer: {e}"),
        }
    }
}

/// What a QUIC timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuicTimer {
    /// The flow's preread deadline.
    Preread,
    /// The flow may have idled out.
    Idle,
}

/// One worker's QUIC listeners and flows.
#[derive(Debug)]
pub(super) struct QuicShell {
    sockets: Slab<(SocketAddr, UdpSocket)>,
    by_address: HashMap<SocketAddr, usize>,
    flows: FlowTable<FlowState>,
    timers: Timers<(usize, QuicTimer)>,
    buffer: Vec<u8>,
    /// The sockets and flows were exported for an upgrade: nothing is
    /// read or fired until a resume or the stop ([`upgrade`]).
    paused: bool,
    /// Sockets and flows an upgrade handed over, taken when the state
    /// opens their address.
    inherited: HashMap<SocketAddr, Vec<InheritedQuic>>,
}

impl QuicShell {
    pub(super) fn new(inherited: Vec<InheritedQuic>) -> Self {
        let mut by_address: HashMap<SocketAddr, Vec<InheritedQuic>> = HashMap::new();
        for socket in inherited {
            by_address.entry(socket.address).or_default().push(socket);
        }
        Self {
            sockets: Slab::new(),
            by_address: HashMap::new(),
            flows: FlowTable::new(HoldCaps::default()),
            timers: Timers::new(),
            buffer: vec![0; MAX_DATAGRAM],
            paused: false,
            inherited: by_address,
        }
    }

    /// The flows this worker holds now.
    pub(super) fn flows(&self) -> usize {
        self.flows.len()
    }

    /// When the next QUIC timer falls.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// Whether a token is one of this shell's.
    pub(super) fn owns(token: Token) -> bool {
        token.0 >= QUIC_FLOW_BASE && token.0 < QUIC_LISTENER_BASE * 2
    }

    /// Opens the QUIC listeners the runtime wants and closes the others;
    /// a socket that cannot be opened is an error (the generation is taken
    /// back by the caller).
    pub(super) fn sync(&mut self, ctx: &mut Ctx) -> io::Result<()> {
        let wanted: Vec<SocketAddr> = ctx.runtime.listening_quic().collect();
        for address in &wanted {
            if !self.by_address.contains_key(address) {
                self.open(ctx, *address)?;
            }
        }
        let gone: Vec<SocketAddr> = self
            .by_address
            .keys()
            .filter(|address| !ctx.runtime.listens_quic(address))
            .copied()
            .collect();
        for address in gone {
            self.close(ctx, address);
        }
        self.forget_inherited();
        Ok(())
    }

    fn open(&mut self, ctx: &mut Ctx, address: SocketAddr) -> io::Result<()> {
        if self.inherited.contains_key(&address) {
            return self.take_inherited(ctx, address, Instant::now());
        }
        let registry = &ctx.registry;
        let mut socket = relay::bind_reuseport(address)?;
        widen_listener(&socket, address);
        let entry = self.sockets.vacant_entry();
        registry.register(
            &mut socket,
            Token(QUIC_LISTENER_BASE + entry.key()),
            Interest::READABLE,
        )?;
        self.by_address.insert(address, entry.key());
        entry.insert((address, socket));
        info!("listening on {address} (QUIC, UDP)");
        Ok(())
    }

    /// Stops listening at `address` (every socket of it: a successor may
    /// hold several); its flows end.
    fn close(&mut self, ctx: &mut Ctx, address: SocketAddr) {
        if self.by_address.remove(&address).is_some() {
            self.remove_sockets(ctx, address);
            for flow in self.flows.keys() {
                if self.flows.get(flow).is_some_and(|f| f.listener == address) {
                    relay::end(
                        ctx,
                        &mut self.flows,
                        &mut self.timers,
                        flow,
                        relay::End::Closed,
                    );
                }
            }
            info!("stopped listening on {address} (QUIC)");
        }
    }

    /// Closes every QUIC listener (a soft stop); flows keep relaying.
    pub(super) fn close_listeners(&mut self, ctx: &mut Ctx) {
        let addresses: Vec<SocketAddr> = self.by_address.keys().copied().collect();
        for address in addresses {
            if self.by_address.remove(&address).is_some() {
                self.remove_sockets(ctx, address);
            }
        }
    }

    fn remove_sockets(&mut self, ctx: &mut Ctx, address: SocketAddr) {
        let keys: Vec<usize> = self
            .sockets
            .iter()
            .filter(|(_, (at, _))| *at == address)
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            let (_, mut socket) = self.sockets.remove(key);
            let _ = ctx.registry.deregister(&mut socket);
        }
    }

    /// A readiness event for one of this shell's tokens.
    pub(super) fn ready(&mut self, ctx: &mut Ctx, token: Token, now: Instant) {
        // An event polled before the export, handled after it: the
        // successor reads that datagram.
        if self.paused {
            return;
        }
        if token.0 >= QUIC_LISTENER_BASE {
            self.read_clients(ctx, token.0 - QUIC_LISTENER_BASE, now);
        } else {
            self.read_backend(ctx, token.0 - QUIC_FLOW_BASE, now);
        }
    }

    /// Reads a listener socket until it would block.
    fn read_clients(&mut self, ctx: &mut Ctx, key: usize, now: Instant) {
        loop {
            let Some((listener, socket)) = self.sockets.get(key) else {
                return;
            };
            let listener = *listener;
            let (len, client) = match socket.recv_from(&mut self.buffer) {
                Ok(received) => received,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // An ICMP error queued on the socket: the next read
                    // goes on.
                    log::debug!("QUIC listener {listener}: {e}");
                    continue;
                }
            };
            let datagram = self.buffer[..len].to_vec();
            let mut io = relay::Io {
                ctx,
                flows: &mut self.flows,
                timers: &mut self.timers,
                socket,
                listener,
            };
            io.client_datagram(client, &datagram, now);
        }
    }

    /// Relays what the backend of flow `key` sent, until it would block.
    fn read_backend(&mut self, ctx: &mut Ctx, key: usize, now: Instant) {
        let Some(listener) = self.flows.get(key).map(|f| f.listener) else {
            return;
        };
        let Some(&socket_key) = self.by_address.get(&listener) else {
            return;
        };
        let Some((_, socket)) = self.sockets.get(socket_key) else {
            return;
        };
        let mut io = relay::Io {
            ctx,
            flows: &mut self.flows,
            timers: &mut self.timers,
            socket,
            listener,
        };
        io.read_backend(key, &mut self.buffer, now);
    }

    /// Fires the QUIC timers due at `now`.
    pub(super) fn fire(&mut self, ctx: &mut Ctx, now: Instant) {
        // The flows are the successor's to time out, unless it fails and
        // they resume.
        if self.paused {
            return;
        }
        while let Some((key, timer)) = self.timers.pop_expired(now) {
            let Some(listener) = self.flows.get(key).map(|f| f.listener) else {
                continue;
            };
            match timer {
                QuicTimer::Idle => {
                    let idle = ctx
                        .runtime
                        .quic_listener(listener)
                        .and_then(|l| l.quic)
                        .map_or(Duration::ZERO, |q| q.idle_timeout);
                    match self.flows.idle_since(key, idle) {
                        Some(at) if at > now => {
                            let idle = self.timers.schedule(at, (key, QuicTimer::Idle));
                            if let Some(flow) = self.flows.get_mut(key) {
                                flow.state.idle = Some(idle);
                            }
                        }
                        _ => relay::end(
                            ctx,
                            &mut self.flows,
                            &mut self.timers,
                            key,
                            relay::End::Idle,
                        ),
                    }
                }
                QuicTimer::Preread => {
                    let Some(&socket_key) = self.by_address.get(&listener) else {
                        relay::end(
                            ctx,
                            &mut self.flows,
                            &mut self.timers,
                            key,
                            relay::End::Closed,
                        );
                        continue;
                    };
                    let Some((_, socket)) = self.sockets.get(socket_key) else {
                        continue;
                    };
                    let mut io = relay::Io {
                        ctx,
                        flows: &mut self.flows,
                        timers: &mut self.timers,
                        socket,
                        listener,
                    };
                    io.preread_deadline(key, now);
                }
            }
        }
    }

    /// Ends every flow (the worker stops). After an export, the decided
    /// flows are the successor's: they are forgotten without a line.
    pub(super) fn end_all(&mut self, ctx: &mut Ctx) {
        for key in self.flows.keys() {
            let decided = self.flows.get(key).is_some_and(|f| f.state.relay.is_some());
            let how = if self.paused && decided {
                relay::End::HandedOver
            } else {
                relay::End::Closed
            };
            relay::end(ctx, &mut self.flows, &mut self.timers, key, how);
        }
        if !self.flows.is_empty() {
            warn!("QUIC flows left after the stop: {}", self.flows.len());
        }
    }
}
