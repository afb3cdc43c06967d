//! A worker's QUIC sockets and decided flows across `preread upgrade`: the
//! old process's export and resume, the successor's adoption.
//!
//! The cut-over, so that every datagram is read by exactly one process:
//!
//! 1. **Old worker, `ExportListeners`** (`QuicShell::export`). It stops
//!    reading first: every listening UDP socket and every flow's backend
//!    socket leaves its poll, and readiness already polled is ignored
//!    (`paused`). Every datagram it read before was relayed (decided
//!    flows) or held (undecided ones). It then hands duplicates of the
//!    listening sockets over, each with the decided flows of its address
//!    ([`FlowSnapshot`] and a duplicate of the backend socket). From here
//!    on, datagrams wait in the kernel's socket buffers: the old worker
//!    fires no QUIC timer, so no flow of its idles out or is logged.
//! 2. **Successor** (`QuicShell::take_inherited`, when its boot state
//!    opens the address). It adopts the same sockets (the kernel's
//!    `SO_REUSEPORT` group is unchanged, so a client's 4-tuple still
//!    lands on the same socket, and its flow goes to the worker the socket
//!    is dealt to) and the flows, and reads what waited.
//! 3. **Old worker, after.** The upgrade succeeded: the soft stop forgets
//!    the handed flows without a line (the successor writes it, with the
//!    counts carried over) and ends the undecided ones (their clients
//!    send their Initial again and the successor decides). It failed:
//!    `Resume` (`QuicShell::resume`) registers everything again, and
//!    the old worker reads what waited, as if nothing happened.
//!
//! Owns: that pause, the export, the resume and the adoption. Must never:
//! read a socket it exported until a resume, hand over an undecided flow
//! (its held datagrams and its step stay behind), or adopt a flow whose
//! backend is not in this process's state.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use coordinator::QuicExport;
use log::{info, warn};
use mio::net::UdpSocket;
use mio::{Interest, Token};
use preread_core::Route;

use super::flows::{Flow, Handed};
use super::handover::FlowSnapshot;
use super::relay::{self, Carried, FlowState, Relay};
use super::{QuicShell, QuicTimer, admit};
use crate::worker::ctx::Ctx;
use crate::worker::tokens::{QUIC_FLOW_BASE, QUIC_LISTENER_BASE};

/// One UDP socket of a QUIC listener an upgrade handed over, with the
/// decided flows read on it and their backend sockets, each checked by
/// the successor's takeover (bound to `address`; connected to the flow's
/// backend; non-blocking).
#[derive(Debug)]
pub struct InheritedQuic {
    pub address: SocketAddr,
    pub socket: std::net::UdpSocket,
    pub flows: Vec<(FlowSnapshot, std::net::UdpSocket)>,
}

impl QuicShell {
    /// Stops reading, then duplicates every listening socket with the
    /// decided flows of its address. On an error the worker reads again
    /// and the error is returned.
    pub(in crate::worker) fn export(
        &mut self,
        ctx: &mut Ctx,
        now: Instant,
    ) -> io::Result<Vec<QuicExport>> {
        self.pause(ctx);
        let exported = self.exports(now);
        if exported.is_err() {
            self.resume(ctx);
        }
        exported
    }

    fn exports(&self, now: Instant) -> io::Result<Vec<QuicExport>> {
        let mut exports: Vec<QuicExport> = Vec::new();
        for (_, (address, socket)) in &self.sockets {
            exports.push(QuicExport {
                address: *address,
                socket: socket.as_fd().try_clone_to_owned()?,
                flows: Vec::new(),
            });
        }
        for key in self.flows.keys() {
            let Some(flow) = self.flows.get(key) else {
                continue;
            };
            // A worker holding several sockets of one address (it was
            // dealt them) hands its flows over with the first.
            let Some(export) = exports.iter_mut().find(|e| e.address == flow.listener) else {
                continue;
            };
            if let Some((snapshot, backend)) = snapshot(flow, now)? {
                export.flows.push((snapshot.to_proto(), backend));
            }
        }
        let flows: usize = exports.iter().map(|e| e.flows.len()).sum();
        info!(
            "QUIC: {} socket(s) and {flows} decided flow(s) exported; not read until the \
             upgrade fails",
            exports.len()
        );
        Ok(exports)
    }

    fn pause(&mut self, ctx: &mut Ctx) {
        self.paused = true;
        for (_, (_, socket)) in &mut self.sockets {
            let _ = ctx.registry.deregister(socket);
        }
        for key in self.flows.keys() {
            if let Some(relay) = self.flows.get_mut(key).and_then(|f| f.state.relay.as_mut()) {
                let _ = ctx.registry.deregister(&mut relay.socket);
            }
        }
    }

    /// The upgrade failed: reads the sockets and flows again (a worker that
    /// exported nothing has nothing to do). Readiness is reported again
    /// on registration, so what waited is read at the next poll.
    pub(in crate::worker) fn resume(&mut self, ctx: &mut Ctx) {
        if !std::mem::take(&mut self.paused) {
            return;
        }
        for (key, (address, socket)) in &mut self.sockets {
            let token = Token(QUIC_LISTENER_BASE + key);
            if let Err(e) = ctx.registry.register(socket, token, Interest::READABLE) {
                warn!("QUIC listener {address}: cannot read it again after the upgrade: {e}");
            }
        }
        for key in self.flows.keys() {
            if let Some(relay) = self.flows.get_mut(key).and_then(|f| f.state.relay.as_mut()) {
                let token = Token(QUIC_FLOW_BASE + key);
                if let Err(e) = ctx
                    .registry
                    .register(&mut relay.socket, token, Interest::READABLE)
                {
                    warn!("QUIC flow {key}: cannot read its backend again: {e}");
                }
            }
        }
    }

    /// Listens at `address` on the sockets an upgrade handed over, and
    /// relays their flows.
    pub(super) fn take_inherited(
        &mut self,
        ctx: &mut Ctx,
        address: SocketAddr,
        now: Instant,
    ) -> io::Result<()> {
        let inherited = self.inherited.remove(&address).unwrap_or_default();
        let mut flows = Vec::new();
        for handed in inherited {
            let mut socket = UdpSocket::from_std(handed.socket);
            let entry = self.sockets.vacant_entry();
            ctx.registry.register(
                &mut socket,
                Token(QUIC_LISTENER_BASE + entry.key()),
                Interest::READABLE,
            )?;
            self.by_address.entry(address).or_insert(entry.key());
            entry.insert((address, socket));
            flows.extend(handed.flows);
        }
        let (count, mut adopted) = (flows.len(), 0);
        for (snapshot, backend) in flows {
            adopted += usize::from(self.adopt(ctx, address, snapshot, backend, now));
        }
        info!(
            "listening on {address} (QUIC, UDP, inherited; {adopted} of {count} flow(s) adopted)"
        );
        Ok(())
    }

    /// Relays one handed flow from now on; whether it could.
    fn adopt(
        &mut self,
        ctx: &mut Ctx,
        listener: SocketAddr,
        snapshot: FlowSnapshot,
        backend: std::net::UdpSocket,
        now: Instant,
    ) -> bool {
        let client = snapshot.client;
        let lease = ctx
            .runtime
            .clusters
            .get_mut(&*snapshot.cluster)
            .and_then(|c| c.adopt(&snapshot.backend, snapshot.backend_address));
        let Some(lease) = lease else {
            warn!(
                "QUIC flow of {client}: backend {}/{} at {} is not in this state; the flow ends",
                snapshot.cluster, snapshot.backend, snapshot.backend_address
            );
            return false;
        };
        // Counted, never refused: the old process admitted it.
        let Ok(holds) = admit(&ctx.shared.quic_flows, listener, client.ip(), (0, 0)) else {
            return false;
        };
        let mut route = Route::unread(Arc::clone(&snapshot.cluster), None);
        route.sni = snapshot.sni;
        route.matched_alpn = snapshot.alpn.clone();
        let relay = Relay {
            socket: UdpSocket::from_std(backend),
            route: Arc::new(route),
            lease,
        };
        let carried = Carried {
            version: snapshot.version,
            preread: snapshot.preread,
        };
        let (first_seen, last_seen) = snapshot.seen(now);
        let handed = Handed {
            listener,
            client,
            state: FlowState::handed(relay, carried, holds),
            cids: snapshot.cids,
            backend_spoke: snapshot.backend_spoke,
            first_seen,
            last_seen,
            counts: snapshot.counts,
        };
        let Some(key) = self.flows.adopt(handed) else {
            warn!("QUIC flow of {client} on {listener} handed over twice: the first is kept");
            return false;
        };
        let registered = self
            .flows
            .get_mut(key)
            .and_then(|f| f.state.relay.as_mut())
            .map(|relay| {
                ctx.registry.register(
                    &mut relay.socket,
                    Token(QUIC_FLOW_BASE + key),
                    Interest::READABLE,
                )
            });
        if let Some(Err(e)) = registered {
            warn!("QUIC flow of {client}: cannot read its backend: {e}");
            relay::end(ctx, &mut self.flows, key, relay::End::Closed);
            return false;
        }
        let idle = ctx
            .runtime
            .listeners
            .get(&listener)
            .and_then(|l| l.quic)
            .map(|q| q.idle_timeout)
            .unwrap_or_default();
        self.timers
            .schedule(last_seen + idle, (key, QuicTimer::Idle));
        true
    }

    /// Drops what an upgrade handed over for addresses this state does not
    /// open as QUIC listeners: their flows end with the old process.
    pub(super) fn forget_inherited(&mut self) {
        for (address, sockets) in self.inherited.drain() {
            let flows: usize = sockets.iter().map(|s| s.flows.len()).sum();
            warn!(
                "QUIC: the state does not listen on {address}: its {} inherited socket(s) and \
                 {flows} flow(s) are closed",
                sockets.len()
            );
        }
    }
}

/// A decided flow's snapshot and a duplicate of its backend socket; `None`
/// for an undecided flow.
fn snapshot(flow: &Flow<FlowState>, now: Instant) -> io::Result<Option<(FlowSnapshot, OwnedFd)>> {
    let Some(relay) = &flow.state.relay else {
        return Ok(None);
    };
    let backend = relay.socket.as_fd().try_clone_to_owned()?;
    let instance = relay.lease.instance();
    let step = flow.state.step.as_deref();
    let carried = flow.state.carried;
    let snapshot = FlowSnapshot {
        client: flow.client,
        cids: flow.cids().to_vec(),
        backend_spoke: flow.backend_spoke(),
        backend_address: instance.address(),
        cluster: Arc::clone(&relay.route.cluster),
        backend: Arc::clone(instance.backend_id()),
        counts: flow.counts,
        age: now.saturating_duration_since(flow.first_seen),
        idle: now.saturating_duration_since(flow.last_seen),
        sni: step.and_then(|s| s.sni().copied()).or(relay.route.sni),
        alpn: relay.route.matched_alpn.clone(),
        version: step
            .and_then(|s| s.version())
            .or_else(|| carried.and_then(|c| c.version)),
        preread: step
            .and_then(|s| s.preread_time())
            .or_else(|| carried.and_then(|c| c.preread)),
    };
    Ok(Some((snapshot, backend)))
}
