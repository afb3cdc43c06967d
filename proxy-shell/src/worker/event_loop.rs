//! The worker's event loop: poll, orders from the main thread, accepts,
//! readiness bookkeeping and timers.
//!
//! Owns: tokens (a session's front socket is `2k`, its backend `2k+1`, a
//! listener `LISTENER_BASE + i`), the accept loop with its admission checks,
//! and the turn structure: events mark sessions dirty, each dirty session is
//! driven once per turn, then expired timers fire. Must never: block, or
//! drive a session from inside another session's step.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::{debug, error, info, trace, warn};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::access_log::AccessLog;
use super::backends::Rng;
use super::listen::bind_reuseport;
use super::metrics::{Metrics, names};
use super::orders::{Answer, Order, OrderId, WorkerInbox};
use super::pipe_pool::{MAX_IDLE_PIPES, PipePool};
use super::pool::BufferPool;
use super::runtime::{Applied, Runtime};
use super::session::{Ready, Session};
use super::timers::Timers;
use super::{WAKER_TOKEN, WorkerSettings};
use preread_core::names::SNI_PREREAD_ACTIVE;

/// Listener tokens start here; session tokens (`2k`, `2k+1`) stay below.
pub(super) const LISTENER_BASE: usize = 1 << 48;

/// Why a timer was armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    Preread,
    ServerFirst,
    Connect,
    FrontIdle,
    BackIdle,
}

pub(super) type TimerKey = (usize, TimerKind);

/// A soft stop in progress: sessions drain until `deadline`.
#[derive(Debug, Clone, Copy)]
struct Stopping {
    deadline: Instant,
}

pub(super) struct Worker {
    pub(super) id: u32,
    pub(super) poll: Poll,
    pub(super) settings: WorkerSettings,
    pub(super) runtime: Runtime,
    pub(super) pool: BufferPool,
    pub(super) pipes: PipePool,
    pub(super) timers: Timers<TimerKey>,
    pub(super) metrics: Metrics,
    pub(super) access_log: AccessLog,
    pub(super) rng: Rng,
    pub(super) sessions: Slab<Session>,
    listeners: Slab<(SocketAddr, TcpListener)>,
    listener_keys: HashMap<SocketAddr, usize>,
    inbox: WorkerInbox,
    stopping: Option<Stopping>,
    /// The soft stop order, answered only once the sessions drained (or the
    /// grace ran out): the main thread waits for that answer before it
    /// lets the process exit.
    stop_order: Option<OrderId>,
    exit: bool,
    pub(super) dirty: Vec<usize>,
}

impl Worker {
    pub(super) fn new(
        id: u32,
        poll: Poll,
        settings: WorkerSettings,
        inbox: WorkerInbox,
    ) -> io::Result<Self> {
        let access_log = AccessLog::open(&settings.access_logs, settings.access_log_format)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open the access log {:?}: {e}", settings.access_logs),
                )
            })?;
        Ok(Self {
            id,
            poll,
            runtime: Runtime::new(settings.buffer_size),
            pool: BufferPool::new(settings.buffer_size, settings.max_buffers),
            pipes: PipePool::new(MAX_IDLE_PIPES),
            timers: Timers::new(),
            metrics: Metrics::new(id),
            access_log,
            // Seeded per worker: load balancing needs spread, not secrecy.
            rng: Rng::new(
                0x9e37_79b9_7f4a_7c15 ^ u64::from(id).wrapping_mul(0x2545_f491_4f6c_dd1d),
            ),
            sessions: Slab::new(),
            listeners: Slab::new(),
            listener_keys: HashMap::new(),
            inbox,
            stopping: None,
            stop_order: None,
            exit: false,
            dirty: Vec::new(),
            settings,
        })
    }

    pub(super) fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        while !self.exit {
            let now = Instant::now();
            let mut wake_at = self.timers.next_deadline();
            if let Some(stopping) = self.stopping {
                wake_at = Some(wake_at.map_or(stopping.deadline, |t| t.min(stopping.deadline)));
            }
            // Sessions re-queued during the last turn (a busy pipe that
            // yielded, a connect that just completed) must run now: no
            // edge-triggered event will come for readiness already known.
            let timeout = if self.dirty.is_empty() {
                wake_at.map(|t| t.saturating_duration_since(now))
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!("worker {}: poll failed, stopping: {e}", self.id);
                break;
            }
            for event in events.iter() {
                match event.token() {
                    WAKER_TOKEN => self.take_orders(),
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
                    Token(t) => {
                        let side = if t % 2 == 0 { Side::Front } else { Side::Back };
                        self.mark(
                            t / 2,
                            side,
                            event.is_readable() || event.is_read_closed() || event.is_error(),
                            event.is_writable() || event.is_write_closed() || event.is_error(),
                        );
                    }
                }
            }
            self.drive_dirty();
            self.fire_timers(Instant::now());
            self.check_stop(Instant::now());
        }
        self.close_everything();
        if let Some(order) = self.stop_order.take() {
            self.inbox.answer(order, Answer::Done);
        }
    }

    fn mark(&mut self, key: usize, side: Side, readable: bool, writable: bool) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        let ready: &mut Ready = match side {
            Side::Front => &mut session.front_ready,
            Side::Back => &mut session.back_ready,
        };
        ready.readable |= readable;
        ready.writable |= writable;
        if !session.dirty {
            session.dirty = true;
            self.dirty.push(key);
        }
    }

    fn drive_dirty(&mut self) {
        let mut turn = std::mem::take(&mut self.dirty);
        for key in turn.drain(..) {
            if let Some(session) = self.sessions.get_mut(key) {
                session.dirty = false;
                self.drive(key);
            }
        }
        // Reuse the allocation; sessions that yielded re-queued themselves.
        if self.dirty.is_empty() {
            self.dirty = turn;
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some((key, kind)) = self.timers.pop_expired(now) {
            if self.sessions.contains(key) {
                self.on_timer(key, kind, now);
            }
        }
    }

    fn accept(&mut self, listener_key: usize) {
        loop {
            let Some((address, listener)) = self.listeners.get(listener_key) else {
                return;
            };
            let address = *address;
            let (stream, client) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: drop this round, the next event retries.
                    warn!("worker {}: accept on {address} failed: {e}", self.id);
                    return;
                }
            };
            self.metrics.incr(names::TCP_ACCEPTED);
            if self.sessions.len() >= self.settings.max_connections {
                self.metrics.incr(names::TCP_REFUSED_MAX_CONNECTIONS);
                debug!("refused {client} on {address}: max_connections");
                continue;
            }
            if self.pool.in_use() >= self.pool.capacity() {
                self.metrics.incr(names::TCP_REFUSED_POOL_EXHAUSTED);
                debug!("refused {client} on {address}: buffer pool exhausted");
                continue;
            }
            self.open_session(address, stream, client);
        }
    }

    fn open_session(
        &mut self,
        listener: SocketAddr,
        mut front: mio::net::TcpStream,
        client: SocketAddr,
    ) {
        let now = Instant::now();
        let local = front.local_addr().unwrap_or(listener);
        let _ = front.set_nodelay(true);
        let entry = self.sessions.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut front,
            Token(key * 2),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            warn!("worker {}: cannot register {client}: {e}", self.id);
            return;
        }
        entry.insert(Session::accepted(listener, local, client, front, now));
        self.metrics.gauge_add(names::TCP_ACTIVE, 1);
        let Some(runtime) = self.runtime.listeners.get(&listener) else {
            self.close(key, super::drive::Outcome::Refused("listener_removed"));
            return;
        };
        let (catch_all, front_timeout, server_first) = (
            runtime.catch_all.clone(),
            runtime.front_timeout,
            runtime.server_first,
        );
        let session_timers_front = self
            .timers
            .schedule(now + front_timeout, (key, TimerKind::FrontIdle));
        if let Some(session) = self.sessions.get_mut(key) {
            session.timers.front_idle = Some(session_timers_front);
        }
        if let Some(cluster) = catch_all {
            trace!("{client} on {listener}: catch-all to {cluster}");
            self.route_catch_all(key, cluster, now);
            return;
        }
        self.metrics.gauge_add(SNI_PREREAD_ACTIVE, 1);
        if let Some(session) = self.sessions.get_mut(key) {
            session.in_preread_gauge = true;
        }
        if let Some(wait) = server_first {
            let id = self
                .timers
                .schedule(now + wait, (key, TimerKind::ServerFirst));
            if let Some(session) = self.sessions.get_mut(key) {
                session.timers.server_first = Some(id);
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
            Order::Apply(request) => self.apply(&request),
            Order::Metrics => {
                self.metrics
                    .gauge_set(names::BUFFERS_IN_USE, self.pool.in_use() as i64);
                Answer::Metrics(self.metrics.snapshot())
            }
            Order::Status => Answer::Status {
                sessions: self.sessions.len() as u64,
                listeners: self.listeners.len() as u32,
            },
            Order::SoftStop { grace_ms } => {
                self.close_listeners();
                self.stopping = Some(Stopping {
                    deadline: Instant::now() + Duration::from_millis(grace_ms),
                });
                info!(
                    "worker {}: soft stop, draining {} session(s) for at most {grace_ms} ms",
                    self.id,
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

    fn apply(&mut self, request: &command::proto::Request) -> Answer {
        match self.runtime.apply(request) {
            Err(refusal) => Answer::Refused {
                code: String::new(),
                message: refusal.0,
            },
            Ok(Applied::Routing) => Answer::Done,
            Ok(Applied::Close(address)) => {
                self.close_listener(address);
                Answer::Done
            }
            Ok(Applied::Open(address)) => match self.open_listener(address) {
                Ok(()) => Answer::Done,
                Err(e) => {
                    self.runtime.undo_open(request, address);
                    Answer::Refused {
                        code: String::new(),
                        message: format!("worker {}: cannot listen on {address}: {e}", self.id),
                    }
                }
            },
        }
    }

    fn open_listener(&mut self, address: SocketAddr) -> io::Result<()> {
        if self.stopping.is_some() || self.listener_keys.contains_key(&address) {
            return Ok(());
        }
        let mut listener = bind_reuseport(address)?;
        let entry = self.listeners.vacant_entry();
        self.poll.registry().register(
            &mut listener,
            Token(LISTENER_BASE + entry.key()),
            Interest::READABLE,
        )?;
        self.listener_keys.insert(address, entry.key());
        entry.insert((address, listener));
        info!("worker {}: listening on {address}", self.id);
        Ok(())
    }

    fn close_listener(&mut self, address: SocketAddr) {
        if let Some(key) = self.listener_keys.remove(&address) {
            let (_, mut listener) = self.listeners.remove(key);
            let _ = self.poll.registry().deregister(&mut listener);
            info!("worker {}: stopped listening on {address}", self.id);
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
                    self.id,
                    self.sessions.len()
                );
                self.exit = true;
            }
        }
    }

    fn close_everything(&mut self) {
        self.close_listeners();
        let keys: Vec<usize> = self.sessions.iter().map(|(key, _)| key).collect();
        for key in keys {
            self.close(key, super::drive::Outcome::Refused("shutdown"));
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Front,
    Back,
}
