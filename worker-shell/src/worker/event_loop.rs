//! The worker's event loop: poll, orders from the main thread, listeners,
//! readiness bookkeeping, timers, and the soft stop.
//!
//! Owns: [`Worker`] (the sessions' slab, the listeners and the shared
//! [`Ctx`]) and the turn structure: events mark sessions dirty, each dirty
//! session is driven once per turn, then expired timers fire; whatever
//! answers [`Drive::End`] is taken out of the slab and closed. Must never:
//! block, or drive a session from inside another session's step.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::generation::Generation;
use log::{error, info, warn};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use preread_core::rng::Rng;
use slab::Slab;

use super::Inheritance;
use super::accept::{Accepted, accept};
use super::accept_retry::AcceptRetry;
use super::close::close;
use super::configured::Configured;
use super::ctx::{Ctx, Drive};
use super::defer;
use super::drive::drive;
use super::io::Ready;
use super::listen::{bind_reuseport, prepare};
use super::metrics::Metrics;
use super::orders::{Answer, Order, OrderId, WorkerInbox};
use super::pipe_pool::{PipePool, idle_pipes};
use super::pool::BufferPool;
use super::quic::QuicShell;
use super::rejects::RejectRing;
use super::runtime::Runtime;
use super::session::Session;
use super::settings::WorkerSettings;
use super::timer::fired;
use super::timers::Timers;
use super::tokens::{LISTENER_BASE, Side, WAKER_TOKEN, session_of};
use super::unrouted::Unrouted;
use crate::access_log::AccessLogQueue;
use crate::answer_code::AnswerCode;
use crate::metrics::families::Family;
use crate::metrics::series::Series;
use crate::shared::Shared;
use crate::shared::shortage::ShortageLog;
use crate::vocabulary::{Outcome, RefuseReason};
use coordinator::Exported;

/// A soft stop in progress: sessions drain until `deadline`.
#[derive(Debug, Clone, Copy)]
struct Stopping {
    deadline: Instant,
}

/// One worker thread's state.
#[derive(Debug)]
pub(super) struct Worker {
    poll: Poll,
    ctx: Ctx,
    sessions: Slab<Session>,
    listeners: Slab<(SocketAddr, TcpListener)>,
    /// The slab keys of the sockets listening at each address: one, or
    /// several inherited from an upgrade whose predecessor ran more workers.
    listener_keys: HashMap<SocketAddr, Vec<usize>>,
    /// Sockets an upgrade handed over, not yet listened on: taken instead
    /// of a bind when the state opens their address.
    inherited: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
    /// Listening sockets paused because the proxy ran short, and their
    /// retries.
    accept_retry: AcceptRetry,
    inbox: WorkerInbox,
    stopping: Option<Stopping>,
    /// The soft stop order, answered only once the sessions drained (or the
    /// grace ran out): the main thread waits for that answer before it
    /// lets the process exit.
    stop_order: Option<OrderId>,
    exit: bool,
    /// The QUIC listeners and their flows.
    quic: QuicShell,
}

impl Worker {
    pub(super) fn new(
        id: u32,
        poll: Poll,
        (settings, shared): (WorkerSettings, Arc<Shared>),
        inbox: WorkerInbox,
        access_log: AccessLogQueue,
        inherited: Inheritance,
    ) -> io::Result<Self> {
        let mut by_address: HashMap<SocketAddr, Vec<std::net::TcpListener>> = HashMap::new();
        for (address, listener) in inherited.tcp {
            by_address.entry(address).or_default().push(listener);
        }
        let ctx = Ctx {
            id,
            registry: poll.registry().try_clone()?,
            runtime: Runtime::new(Arc::clone(&shared.registry)),
            pool: BufferPool::new(settings.buffer_size, Arc::clone(&shared.buffers)),
            pipes: PipePool::new(
                idle_pipes(settings.splice_pipe_size),
                settings.splice_pipe_size,
            ),
            timers: Timers::new(),
            metrics: Metrics::new(id),
            access_log,
            rejects: RejectRing::new(settings.reject_capture, settings.buffer_size),
            // Seeded per worker: load balancing needs spread, not secrecy.
            rng: Rng::new(
                0x9e37_79b9_7f4a_7c15 ^ u64::from(id).wrapping_mul(0x2545_f491_4f6c_dd1d),
            ),
            unrouted: Unrouted::new(Arc::clone(&shared.unrouted)),
            shared,
            dirty: Vec::new(),
            local_errors_log: ShortageLog::default(),
            settings,
        };
        Ok(Self {
            poll,
            ctx,
            sessions: Slab::new(),
            listeners: Slab::new(),
            listener_keys: HashMap::new(),
            inherited: by_address,
            accept_retry: AcceptRetry::new(id),
            inbox,
            stopping: None,
            stop_order: None,
            exit: false,
            quic: QuicShell::new(inherited.quic),
        })
    }

    pub(super) fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        while !self.exit {
            let now = Instant::now();
            let mut wake_at = self.ctx.timers.next_deadline();
            if let Some(stopping) = self.stopping {
                wake_at = Some(wake_at.map_or(stopping.deadline, |t| t.min(stopping.deadline)));
            }
            if let Some(retry) = self.accept_retry.next_wake() {
                wake_at = Some(wake_at.map_or(retry, |t| t.min(retry)));
            }
            if let Some(quic) = self.quic.next_deadline() {
                wake_at = Some(wake_at.map_or(quic, |t| t.min(quic)));
            }
            // Sessions re-queued during the last turn (a busy pipe that
            // yielded, a connect that just completed) must run now: no
            // edge-triggered event will come for readiness already known.
            let timeout = if self.ctx.dirty.is_empty() {
                wake_at.map(|t| t.saturating_duration_since(now))
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!("worker {}: poll failed, stopping: {e}", self.ctx.id);
                break;
            }
            for event in events.iter() {
                match event.token() {
                    WAKER_TOKEN => self.take_orders(),
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
                    token if QuicShell::owns(token) => {
                        self.quic.ready(&mut self.ctx, token, Instant::now());
                    }
                    Token(t) => {
                        let (key, side) = session_of(t);
                        self.mark(key, side, Ready::of_event(event));
                    }
                }
            }
            self.drive_dirty();
            self.fire_timers(Instant::now());
            self.quic.fire(&mut self.ctx, Instant::now());
            self.retry_accepts(Instant::now());
            self.check_stop(Instant::now());
        }
        self.close_everything();
        if let Some(order) = self.stop_order.take() {
            self.inbox.answer(order, Answer::Done);
        }
    }

    fn mark(&mut self, key: usize, side: Side, event: Ready) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        // A backend socket's event after the socket was dropped (a
        // failed connect) has nothing left to tell.
        if let Some(peer) = session.peer_mut(side) {
            peer.ready.merge(event);
        }
        self.ctx.requeue(key, session);
    }

    fn drive_dirty(&mut self) {
        let mut turn = std::mem::take(&mut self.ctx.dirty);
        for key in turn.drain(..) {
            let Some(session) = self.sessions.get_mut(key) else {
                continue;
            };
            session.dirty = false;
            let result = drive(&mut self.ctx, key, session);
            self.settle(key, result);
        }
        // Reuse the allocation; sessions that yielded re-queued themselves.
        if self.ctx.dirty.is_empty() {
            self.ctx.dirty = turn;
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((key, kind)) = self.ctx.timers.pop_expired(now) {
            if let Some(session) = self.sessions.get_mut(key) {
                let result = fired(&mut self.ctx, key, session, kind, now);
                self.settle(key, result);
            }
        }
    }

    /// Closes session `key` if its step ended it.
    fn settle(&mut self, key: usize, result: Drive) {
        if let Drive::End(outcome) = result
            && let Some(session) = self.sessions.try_remove(key)
        {
            close(&mut self.ctx, key, session, outcome);
            self.accept_retry.session_closed();
        }
    }

    fn accept(&mut self, listener_key: usize) {
        if let Some((address, listener)) = self.listeners.get(listener_key) {
            let socket = (*address, listener_key);
            match accept(&mut self.ctx, &mut self.sessions, *address, listener) {
                Accepted::Drained => self.accept_retry.drained(socket, Instant::now()),
                Accepted::Short(e) => self.accept_retry.short(socket, &e, Instant::now()),
            }
        }
    }

    /// Accepts again on the sockets paused for a shortage, when a retry is
    /// due: their queued clients bring no new event. A socket closed since
    /// (its slab key gone, or taken by another address) is forgotten.
    fn retry_accepts(&mut self, now: Instant) {
        for socket in self.accept_retry.due(now) {
            let (address, key) = socket;
            match self.listeners.get(key) {
                Some((listening, _)) if *listening == address => self.accept(key),
                _ => self.accept_retry.forget(socket),
            }
        }
    }

    fn take_orders(&mut self) {
        while let Ok((id, order)) = self.inbox.orders.try_recv() {
            self.handle_order(id, order);
        }
    }

    fn handle_order(&mut self, id: OrderId, order: Order) {
        let answer = match order {
            Order::Apply(generation) => self.apply(&generation),
            Order::Metrics => {
                let in_use = self.ctx.pool.in_use() as i64;
                let buffers = Series::of(Family::BuffersInUse);
                self.ctx.metrics.gauge_set(buffers, in_use);
                let bulk = Series::of(Family::SpliceBulkPipes);
                self.ctx
                    .metrics
                    .gauge_set(bulk, self.ctx.pipes.grown() as i64);
                let configured = Configured::of(&self.ctx.runtime);
                Answer::Metrics(self.ctx.metrics.snapshot(&configured))
            }
            Order::Rejects(query) => Answer::Rejects(self.ctx.rejects.list(self.ctx.id, &query)),
            Order::ExportListeners => self.export_listeners(),
            Order::Resume => {
                self.quic.resume(&mut self.ctx);
                Answer::Done
            }
            Order::Status => Answer::Status {
                // A QUIC flow is a session of its listener.
                sessions: (self.sessions.len() + self.quic.flows()) as u64,
                listeners: self.listener_keys.len() as u32,
            },
            Order::SoftStop { grace_ms } => {
                self.close_listeners();
                self.quic.close_listeners(&mut self.ctx);
                self.stopping = Some(Stopping {
                    deadline: Instant::now() + Duration::from_millis(grace_ms),
                });
                info!(
                    "worker {}: soft stop, draining {} session(s) for at most {grace_ms} ms",
                    self.ctx.id,
                    self.sessions.len()
                );
                self.stop_order = Some(id);
                return;
            }
            Order::HardStop => {
                self.exit = true;
                Answer::Done
            }
        };
        self.inbox.answer(id, answer);
    }

    /// Applies a whole generation within this one order, so no event is
    /// handled with part of it: the routing first, then the listening
    /// sockets it opens, then those it closes. A socket that cannot be
    /// opened takes everything back.
    fn apply(&mut self, generation: &Generation) -> Answer {
        let refused = |message: String| Answer::Refused {
            code: AnswerCode::WorkerRefused,
            message,
        };
        if let Err(refusal) = self.ctx.runtime.apply_generation(generation) {
            return refused(format!("worker {}: {}", self.ctx.id, refusal));
        }
        let to_open: Vec<SocketAddr> = self
            .ctx
            .runtime
            .listening()
            .filter(|address| !self.listener_keys.contains_key(address))
            .collect();
        for (index, &address) in to_open.iter().enumerate() {
            if let Err(e) = self.open_listener(address) {
                for &opened in &to_open[..index] {
                    self.close_listener(opened);
                }
                self.ctx.runtime.undo_generation(generation);
                return refused(format!(
                    "worker {}: cannot listen on {address}: {e}; the generation was taken back",
                    self.ctx.id
                ));
            }
        }
        let to_close: Vec<SocketAddr> = self
            .listener_keys
            .keys()
            .filter(|address| !self.ctx.runtime.listens(address))
            .copied()
            .collect();
        for address in to_close {
            self.close_listener(address);
        }
        if self.stopping.is_none()
            && let Err(e) = self.quic.sync(&mut self.ctx)
        {
            self.ctx.runtime.undo_generation(generation);
            if let Err(again) = self.quic.sync(&mut self.ctx) {
                error!(
                    "worker {}: QUIC listeners after a refused generation: {again}",
                    self.ctx.id
                );
            }
            return refused(format!(
                "worker {}: cannot open a QUIC listener: {e}; the generation was taken back",
                self.ctx.id
            ));
        }
        self.defer_accepts();
        Answer::Done
    }

    /// Sets each listening socket's deferred accept from its listener's
    /// settings as this generation left them (`worker/defer.rs`). A socket
    /// that refuses it still accepts, at once: logged, not fatal.
    fn defer_accepts(&self) {
        for (_, (address, listener)) in &self.listeners {
            let Some(runtime) = self.ctx.runtime.tcp_listener(*address) else {
                continue;
            };
            let seconds = defer::seconds(&runtime.preread, self.ctx.settings.defer_accept);
            if let Err(e) = defer::apply(listener, seconds) {
                warn!(
                    "worker {}: cannot set TCP_DEFER_ACCEPT on {address} ({e}): it accepts \
                     silent clients at once",
                    self.ctx.id
                );
            }
        }
    }

    /// Listens at `address`: on the sockets an upgrade handed over for it,
    /// or on a new `SO_REUSEPORT` socket.
    fn open_listener(&mut self, address: SocketAddr) -> io::Result<()> {
        if self.stopping.is_some() || self.listener_keys.contains_key(&address) {
            return Ok(());
        }
        let (sockets, from) = match self.inherited.remove(&address) {
            Some(inherited) => (
                inherited.into_iter().map(TcpListener::from_std).collect(),
                "inherited ",
            ),
            None => (vec![bind_reuseport(address)?], ""),
        };
        for socket in &sockets {
            prepare(socket, self.ctx.settings.tcp_keepalive.as_ref())?;
        }
        let how = if sockets.len() == 1 { "" } else { "s" };
        let count = sockets.len();
        let mut keys = Vec::with_capacity(sockets.len());
        for mut listener in sockets {
            let entry = self.listeners.vacant_entry();
            let registered = self.poll.registry().register(
                &mut listener,
                Token(LISTENER_BASE + entry.key()),
                Interest::READABLE,
            );
            if let Err(e) = registered {
                for key in keys {
                    let (_, mut opened): (SocketAddr, TcpListener) = self.listeners.remove(key);
                    let _ = self.poll.registry().deregister(&mut opened);
                }
                return Err(e);
            }
            keys.push(entry.key());
            entry.insert((address, listener));
        }
        self.listener_keys.insert(address, keys);
        info!(
            "worker {}: listening on {address} ({count} {from}socket{how})",
            self.ctx.id
        );
        Ok(())
    }

    fn close_listener(&mut self, address: SocketAddr) {
        if let Some(keys) = self.listener_keys.remove(&address) {
            for key in keys {
                let (_, mut listener) = self.listeners.remove(key);
                let _ = self.poll.registry().deregister(&mut listener);
            }
            info!("worker {}: stopped listening on {address}", self.ctx.id);
        }
    }

    /// Duplicates of every listening socket, for an upgrade's successor,
    /// with the QUIC flows (whose sockets this worker stops reading:
    /// `quic/upgrade.rs`).
    fn export_listeners(&mut self) -> Answer {
        let mut exported = Vec::with_capacity(self.listeners.len());
        for (_, (address, listener)) in &self.listeners {
            match listener.as_fd().try_clone_to_owned() {
                Ok(fd) => exported.push((*address, fd)),
                Err(e) => {
                    return Answer::Refused {
                        code: AnswerCode::WorkerRefused,
                        message: format!(
                            "worker {}: cannot duplicate the socket listening on {address}: {e}",
                            self.ctx.id
                        ),
                    };
                }
            }
        }
        match self.quic.export(&mut self.ctx, Instant::now()) {
            Ok(quic) => Answer::Listeners(Arc::new(Exported {
                tcp: exported,
                quic,
            })),
            Err(e) => Answer::Refused {
                code: AnswerCode::WorkerRefused,
                message: format!(
                    "worker {}: cannot duplicate a QUIC socket: {e}",
                    self.ctx.id
                ),
            },
        }
    }

    fn close_listeners(&mut self) {
        let addresses: Vec<SocketAddr> = self.listener_keys.keys().copied().collect();
        for address in addresses {
            self.close_listener(address);
        }
    }

    fn check_stop(&mut self, now: Instant) {
        if let Some(stopping) = self.stopping {
            if self.sessions.is_empty() {
                self.exit = true;
            } else if now >= stopping.deadline {
                info!(
                    "worker {}: soft stop grace over, closing {} session(s)",
                    self.ctx.id,
                    self.sessions.len()
                );
                self.exit = true;
            }
        }
    }

    fn close_everything(&mut self) {
        self.close_listeners();
        self.quic.close_listeners(&mut self.ctx);
        self.quic.end_all(&mut self.ctx);
        let keys: Vec<usize> = self.sessions.iter().map(|(key, _)| key).collect();
        for key in keys {
            self.settle(key, Drive::End(Outcome::Refused(RefuseReason::Shutdown)));
        }
    }
}
