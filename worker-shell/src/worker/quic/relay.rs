//! One QUIC flow's I/O: its datagrams fed to the preread step, held, then
//! replayed to a backend and relayed both ways; its end and access-log
//! line.
//!
//! Owns: performing the step's actions (the timer, the hold, the connect,
//! the reject's reply), the access policies' two places on a flow (the
//! listener's `allow`, `deny` and `connection_rate_per_ip` on the
//! datagram that would start it: a refused source's datagram is dropped
//! and no flow is made; the routed cluster's once the step decided:
//! CONNECTION_CLOSE with `access_denied`), and the relay's sends and
//! receives. Must never: decide anything the step, the flow table or
//! the access checks decide, or read a socket past `WouldBlock`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mio::net::UdpSocket;
use mio::{Interest, Token};
use preread_core::access::source_key;
use preread_core::quic::{QuicActions, QuicListener, QuicNext, QuicPrereadStep};
use preread_core::step::TimerAction;
use preread_core::{RejectReason, Route};
use preread_parser::quic::Version;
use socket2::{Domain, Protocol, Socket, Type};

use super::flows::{FlowTable, Lookup, Overflow};
use super::{QuicTimer, buffers, capture, count};
use crate::access_log::{AccessLogEntry, QuicLog};
use crate::shared::instance::Lease;
use crate::shared::quic_flows::{FlowHolds, admit};
use crate::vocabulary::{Outcome, QuicDrop, RefuseReason};
use crate::worker::accept::refuse_for_access;
use crate::worker::access::{self, Scope};
use crate::worker::ctx::Ctx;
use crate::worker::timers::{TimerId, Timers};
use crate::worker::tokens::QUIC_FLOW_BASE;

/// What the shell keeps of a flow.
#[derive(Debug)]
pub(crate) struct FlowState {
    /// The flow's preread: it reads the client's Initials until it
    /// decides, then keeps what it learned for the access log. `None` for
    /// a flow an upgrade handed over, decided in the old process.
    pub(super) step: Option<Box<QuicPrereadStep>>,
    /// What the old process's step learned, for a handed-over flow.
    pub(super) carried: Option<Carried>,
    /// The preread deadline's timer, while armed.
    timer: Option<TimerId>,
    /// The idle timer: cancelled when the flow ends, so that it neither
    /// fires on a flow that reuses the slot nor outlives the flow in the
    /// heap (a flood of rejected flows would otherwise leave one per flow
    /// for `quic_idle_timeout`).
    pub(super) idle: Option<TimerId>,
    /// Once routed: the socket connected to the backend.
    pub(super) relay: Option<Relay>,
    /// The process-wide counts the flow holds.
    pub(super) _holds: FlowHolds,
}

/// What a handed-over flow's access-log line reports of its preread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Carried {
    pub(super) version: Option<Version>,
    pub(super) preread: Option<Duration>,
}

impl FlowState {
    /// A flow an upgrade handed over, relaying to its backend already.
    pub(super) fn handed(relay: Relay, carried: Carried, holds: FlowHolds) -> Self {
        Self {
            step: None,
            carried: Some(carried),
            timer: None,
            idle: None,
            relay: Some(relay),
            _holds: holds,
        }
    }
}

/// A routed flow's way to its backend.
#[derive(Debug)]
pub(super) struct Relay {
    pub(super) socket: UdpSocket,
    pub(super) route: Arc<Route>,
    /// Counts the flow on its backend instance while it lives.
    pub(super) lease: Lease,
}

/// How a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// Silent both ways for `quic_idle_timeout`.
    Idle,
    /// Its listener closed, or the worker stopped.
    Closed,
    /// Refused by the step.
    Rejected(RejectReason),
    /// Decided, but no backend could take it.
    Refused(RefuseReason),
    /// Handed over to an upgrade's successor, which relays it and writes
    /// its line.
    HandedOver,
    /// Routed to a cluster whose access policy refused the client.
    Denied(access::Refused, Arc<Route>),
}

/// A `SO_REUSEPORT` UDP socket bound to `address`, non-blocking.
pub(crate) fn bind_reuseport(address: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    Ok(UdpSocket::from_std(socket.into()))
}

/// A non-blocking UDP socket on an ephemeral port, connected to `backend`.
fn connect_to(backend: SocketAddr) -> io::Result<UdpSocket> {
    let local: SocketAddr = if backend.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    // A smaller buffer still relays (the listener's warning names the
    // cap): not a reason to refuse the flow.
    let _ = buffers::ask_receive(&socket, buffers::FLOW_BUFFER);
    socket.connect(backend)?;
    Ok(socket)
}

/// What one flow's I/O runs against.
pub(crate) struct Io<'a> {
    pub(crate) ctx: &'a mut Ctx,
    pub(crate) flows: &'a mut FlowTable<FlowState>,
    pub(crate) timers: &'a mut Timers<(usize, QuicTimer)>,
    /// The listener's socket: the return path to the client.
    pub(crate) socket: &'a UdpSocket,
    pub(crate) listener: SocketAddr,
}

impl Io<'_> {
    /// The step's view of the listener, with the routes of now.
    fn quic_listener(&self) -> Option<QuicListener> {
        let runtime = self.ctx.runtime.quic_listener(self.listener)?;
        let quic = runtime.quic?;
        let mut config = runtime.preread.config.clone();
        config.timeout = quic.preread_timeout;
        Some(QuicListener::new(config, runtime.quic_reject_with))
    }

    /// A datagram from `client` on this listener.
    pub(crate) fn client_datagram(&mut self, client: SocketAddr, datagram: &[u8], now: Instant) {
        count::datagram_in(self.ctx, self.listener);
        let key = match self.flows.lookup(self.listener, client, datagram) {
            Lookup::Known(key) | Lookup::Moved(key) => key,
            Lookup::Unknown => {
                self.new_flow(client, datagram, now);
                return;
            }
        };
        self.flows.touch(key, datagram.len(), true, now);
        let Some(listener) = self.quic_listener() else {
            count::dropped(self.ctx, self.listener, QuicDrop::Closed, 1);
            return;
        };
        let Some(flow) = self.flows.get_mut(key) else {
            return;
        };
        if let Some(relay) = &flow.state.relay {
            if relay.socket.send(datagram).is_err() {
                count::dropped(self.ctx, self.listener, QuicDrop::SendFailed, 1);
            }
            return;
        }
        let Some(step) = flow.state.step.as_mut() else {
            return;
        };
        let actions = step.datagram(&listener, datagram, now);
        self.act(key, datagram, actions, now);
    }

    fn new_flow(&mut self, client: SocketAddr, datagram: &[u8], now: Instant) {
        // Only a long header can start a flow: a short header of a flow
        // this worker does not know has nobody to go to.
        if datagram.first().is_none_or(|b| b & 0x80 == 0) {
            count::dropped(self.ctx, self.listener, QuicDrop::UnknownFlow, 1);
            return;
        }
        let Some(runtime) = self.ctx.runtime.quic_listener(self.listener) else {
            count::dropped(self.ctx, self.listener, QuicDrop::Closed, 1);
            return;
        };
        let Some(quic) = runtime.quic else {
            count::dropped(self.ctx, self.listener, QuicDrop::Closed, 1);
            return;
        };
        let counted = source_key(client.ip(), runtime.ipv6_prefix);
        if let Some(policy) = runtime.access.clone() {
            let rates = (&*self.ctx.shared.listener_rates, |source| {
                (self.listener, source)
            });
            if let Err(refused) = access::check(&policy, Scope::Listener, client.ip(), rates, now) {
                let quic = QuicLog {
                    version: None,
                    datagrams_in: 1,
                    datagrams_out: 0,
                };
                count::refused_access(self.ctx, self.listener, refused.reason);
                refuse_for_access(self.ctx, self.listener, client, refused, Some(quic));
                return;
            }
        }
        let limits = (quic.max_flows, quic.max_flows_per_ip);
        let holds = match admit(&self.ctx.shared.quic_flows, self.listener, counted, limits) {
            Ok(holds) => holds,
            Err(refused) => {
                count::not_admitted(self.ctx, self.listener, refused);
                return;
            }
        };
        let Some(listener) = self.quic_listener() else {
            count::dropped(self.ctx, self.listener, QuicDrop::Closed, 1);
            return;
        };
        let (step, actions) = QuicPrereadStep::first(&listener, datagram, now);
        let state = FlowState {
            step: Some(Box::new(step)),
            carried: None,
            timer: None,
            idle: None,
            relay: None,
            _holds: holds,
        };
        let key = self
            .flows
            .insert(self.listener, client, datagram, state, now);
        count::opened(self.ctx, self.listener);
        self.flows.touch(key, datagram.len(), true, now);
        let idle = self
            .timers
            .schedule(now + quic.idle_timeout, (key, QuicTimer::Idle));
        if let Some(flow) = self.flows.get_mut(key) {
            flow.state.idle = Some(idle);
        }
        self.act(key, datagram, actions, now);
    }

    /// Performs the step's actions for the datagram it just read.
    fn act(&mut self, key: usize, datagram: &[u8], actions: QuicActions, now: Instant) {
        if let Some(timer) = self.flows.get_mut(key).map(|f| &mut f.state.timer) {
            match actions.timer {
                TimerAction::Arm(at) => {
                    *timer = Some(self.timers.schedule(at, (key, QuicTimer::Preread)));
                }
                TimerAction::Cancel => {
                    if let Some(id) = timer.take() {
                        self.timers.cancel(id);
                    }
                }
                TimerAction::Keep => {}
            }
        }
        if let (Some(left), Some(flow)) = (actions.left, self.flows.get(key)) {
            count::left(self.ctx, self.listener, flow.state.step.as_deref(), left);
        }
        match actions.next {
            QuicNext::Wait => {
                if let Err(overflow) = self.flows.hold(key, datagram) {
                    self.overflow(overflow);
                    let Some(step) = self.flows.get_mut(key).and_then(|f| f.state.step.as_mut())
                    else {
                        return;
                    };
                    let abandoned = step.abandon(RejectReason::TooLarge, now);
                    self.act(key, &[], abandoned, now);
                }
            }
            QuicNext::Connect(route) => {
                count::routed(self.ctx, self.listener, &route);
                if let (Some(reason), Some(flow)) = (route.fallback, self.flows.get(key)) {
                    let addresses = (flow.listener, flow.client);
                    let outcome = Outcome::Fallback(reason);
                    let window = (self.flows.held_datagrams(key), datagram);
                    capture::keep(self.ctx, addresses, outcome, window);
                }
                if !datagram.is_empty()
                    && let Err(overflow) = self.flows.hold(key, datagram)
                {
                    self.overflow(overflow);
                }
                self.connect(key, route);
            }
            QuicNext::Reject(reject) => {
                if let Some(flow) = self.flows.get(key) {
                    let addresses = (flow.listener, flow.client);
                    let outcome = Outcome::Rejected(reject.reason);
                    let window = (self.flows.held_datagrams(key), datagram);
                    capture::keep(self.ctx, addresses, outcome, window);
                    if let Some(reply) = &reject.reply {
                        self.send_to_client(reply, addresses.1);
                    }
                }
                if !datagram.is_empty() {
                    count::dropped(self.ctx, self.listener, QuicDrop::Rejected, 1);
                }
                end(
                    self.ctx,
                    self.flows,
                    self.timers,
                    key,
                    End::Rejected(reject.reason),
                );
            }
            QuicNext::Ignore => {}
        }
    }

    /// Counts a datagram an undecided flow could not hold.
    fn overflow(&mut self, overflow: Overflow) {
        let reason = match overflow {
            Overflow::Flow => QuicDrop::FlowBufferFull,
            Overflow::Table => QuicDrop::BufferFull,
        };
        count::dropped(self.ctx, self.listener, reason, 1);
    }

    /// A routed flow its cluster's access policy refused: the client
    /// reads `access_denied` (or nothing, with `reject_with = "drop"`).
    fn deny(&mut self, key: usize, denied: access::Refused, route: Arc<Route>) {
        let with = (self.ctx.runtime.quic_listener(self.listener))
            .map_or_else(Default::default, |l| l.quic_reject_with);
        let reply = (self.flows.get(key)).and_then(|flow| {
            Some((
                flow.state.step.as_deref()?.access_denied_reply(with)?,
                flow.client,
            ))
        });
        if let Some((reply, client)) = reply {
            self.send_to_client(&reply, client);
        }
        end(
            self.ctx,
            self.flows,
            self.timers,
            key,
            End::Denied(denied, route),
        );
    }

    /// Sends `datagram` to `client` from the listener's socket.
    fn send_to_client(&mut self, datagram: &[u8], client: SocketAddr) {
        match self.socket.send_to(datagram, client) {
            Ok(_) => count::datagram_out(self.ctx, self.listener),
            Err(_) => count::dropped(self.ctx, self.listener, QuicDrop::SendFailed, 1),
        }
    }

    /// Checks the route's cluster's access policy, picks one of its
    /// backends, replays the held datagrams to it, and relays from now on.
    fn connect(&mut self, key: usize, route: Arc<Route>) {
        let now = Instant::now();
        let Some(client) = self.flows.get(key).map(|f| f.client) else {
            return;
        };
        let lease = match self.ctx.runtime.clusters.get_mut(&*route.cluster) {
            Some(backends) => match backends.check_access(client.ip(), now) {
                Ok(()) => backends.pick(now, &mut self.ctx.rng, &[]),
                Err(denied) => {
                    self.deny(key, denied, route);
                    return;
                }
            },
            None => {
                end(
                    self.ctx,
                    self.flows,
                    self.timers,
                    key,
                    End::Refused(RefuseReason::ClusterUnknown),
                );
                return;
            }
        };
        let Ok(lease) = lease else {
            end(
                self.ctx,
                self.flows,
                self.timers,
                key,
                End::Refused(RefuseReason::BackendUnavailable),
            );
            return;
        };
        let backend = lease.instance().address();
        let mut socket = match connect_to(backend) {
            Ok(socket) => socket,
            Err(e) => {
                log::warn!("QUIC flow to {backend}: cannot open its socket: {e}");
                end(
                    self.ctx,
                    self.flows,
                    self.timers,
                    key,
                    End::Refused(RefuseReason::LocalResources),
                );
                return;
            }
        };
        if self
            .ctx
            .registry
            .register(&mut socket, Token(QUIC_FLOW_BASE + key), Interest::READABLE)
            .is_err()
        {
            end(
                self.ctx,
                self.flows,
                self.timers,
                key,
                End::Refused(RefuseReason::LocalResources),
            );
            return;
        }
        let unsent = self
            .flows
            .take_held(key)
            .iter()
            .filter(|held| socket.send(held).is_err())
            .count();
        count::dropped(self.ctx, self.listener, QuicDrop::SendFailed, unsent);
        count::piped(self.ctx, &route.cluster, lease.instance().backend_id());
        if let Some(flow) = self.flows.get_mut(key) {
            flow.state.relay = Some(Relay {
                socket,
                route,
                lease,
            });
        }
    }

    /// Relays what flow `key`'s backend sent, until it would block.
    pub(crate) fn read_backend(&mut self, key: usize, buffer: &mut [u8], now: Instant) {
        loop {
            let Some(flow) = self.flows.get(key) else {
                return;
            };
            let Some(relay) = &flow.state.relay else {
                return;
            };
            let client = flow.client;
            let len = match relay.socket.recv(buffer) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A port unreachable from the backend: the next read goes
                // on, and the flow idles out if the backend is gone.
                Err(_) => continue,
            };
            let datagram = &buffer[..len];
            self.flows.learn_from_backend(key, datagram);
            self.flows.touch(key, len, false, now);
            self.send_to_client(datagram, client);
        }
    }

    /// The preread deadline of flow `key` fell.
    pub(crate) fn preread_deadline(&mut self, key: usize, now: Instant) {
        let Some(listener) = self.quic_listener() else {
            return;
        };
        let Some(flow) = self.flows.get_mut(key) else {
            return;
        };
        flow.state.timer = None;
        let Some(step) = flow.state.step.as_mut() else {
            return;
        };
        let actions = step.timeout(&listener, now);
        self.act(key, &[], actions, now);
    }
}

/// Forgets flow `key`: its socket closes, its counts are given back, and
/// its access-log line is written.
pub(crate) fn end(
    ctx: &mut Ctx,
    flows: &mut FlowTable<FlowState>,
    timers: &mut Timers<(usize, QuicTimer)>,
    key: usize,
    how: End,
) {
    let held = flows.get(key).map_or(0, |flow| flow.held());
    let Some(mut flow) = flows.remove(key) else {
        return;
    };
    for id in [flow.state.timer.take(), flow.state.idle.take()]
        .into_iter()
        .flatten()
    {
        timers.cancel(id);
    }
    if how == End::HandedOver {
        // Its sockets are the successor's now: this process only forgets
        // its copies (deregistered when the flows were exported).
        return;
    }
    let step = flow.state.step.as_deref();
    let (route, backend) = match &mut flow.state.relay {
        None => match &how {
            End::Denied(_, route) => (Some(route.clone()), None),
            _ => (None, None),
        },
        Some(relay) => {
            let _ = ctx.registry.deregister(&mut relay.socket);
            let backend = relay.lease.instance().backend_id().clone();
            (Some(relay.route.clone()), Some(backend))
        }
    };
    let (outcome, rule) = match &how {
        // A `deny_ja4` refusal is the access policy's, as on TCP.
        End::Rejected(RejectReason::AccessDenied) => (
            Outcome::Refused(RefuseReason::AccessDenied),
            step.and_then(QuicPrereadStep::denied_by)
                .map(|rule| rule.as_str()),
        ),
        End::Rejected(reason) => (Outcome::Rejected(*reason), None),
        End::Refused(reason) => (Outcome::Refused(*reason), None),
        End::Denied(denied, _) => (Outcome::Refused(denied.reason), Some(denied.rule.as_str())),
        End::Idle | End::Closed | End::HandedOver => (Outcome::of_route(route.as_deref()), None),
    };
    let sni = step
        .and_then(QuicPrereadStep::sni)
        .or_else(|| route.as_ref().and_then(|r| r.sni.as_ref()))
        .map(|s| s.as_str().to_owned());
    let carried = flow.state.carried;
    let preread = step
        .and_then(QuicPrereadStep::preread_time)
        .or_else(|| carried.and_then(|c| c.preread));
    let version = step
        .and_then(QuicPrereadStep::version)
        .or_else(|| carried.and_then(|c| c.version));
    let alpn = route
        .as_ref()
        .and_then(|r| r.matched_alpn.as_ref())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let counts = flow.counts;
    count::ended(
        ctx,
        &count::Ended {
            listener: flow.listener,
            outcome,
            reading: step.is_some_and(QuicPrereadStep::is_reading),
            held,
            counts,
            cluster: route.as_ref().map(|r| &r.cluster),
            backend: backend.as_ref(),
        },
    );
    let entry = AccessLogEntry {
        ts: SystemTime::now(),
        listener: flow.listener,
        client: flow.client,
        sni: sni.as_deref(),
        alpn: alpn.as_deref(),
        cluster: route.as_ref().map(|r| &*r.cluster),
        backend: backend.as_deref(),
        outcome,
        bytes_in: counts.bytes_in,
        bytes_out: counts.bytes_out,
        duration_ms: u64::try_from(flow.last_seen.duration_since(flow.first_seen).as_millis())
            .unwrap_or(u64::MAX),
        preread_ms: preread.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        proxy_client: None,
        hello: step.and_then(QuicPrereadStep::hello),
        ja4: step
            .filter(|_| ctx.access_log.is_on())
            .and_then(QuicPrereadStep::ja4),
        rule,
        quic: Some(QuicLog {
            version,
            datagrams_in: counts.datagrams_in,
            datagrams_out: counts.datagrams_out,
        }),
    };
    let _ = ctx.access_log.submit(&entry);
}
