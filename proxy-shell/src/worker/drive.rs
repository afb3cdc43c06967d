//! Driving one session through its phases: preread, connect, pipe, close.
//!
//! Owns: what each phase does on readiness and on timers, the connect gate
//! (no backend connect before a route exists), retries on the next backend,
//! and `close`, the single exit where the gauges, the duration, the byte
//! counters, the backend and per-IP counts and the access log are settled,
//! exactly once per session. Must never: leave a session half-accounted.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use log::{debug, info, trace, warn};
use mio::Interest;
use mio::net::TcpStream;
use preread_core::names::{SNI_PREREAD_ACTIVE, SNI_PREREAD_DURATION, SNI_PREREAD_ROUTED};
use preread_core::routes::ClusterId;
use preread_core::{FallbackReason, Input, Output, RejectReason, Route};

use super::access_log::{AccessLogEntry, Outcome as LogOutcome};
use super::backends::HealthChange;
use super::event_loop::{TimerKind, Worker};
use super::handoff::handoff;
use super::metrics::names;
use super::pipe::PipeStep;
use super::session::{Phase, ReadStep};

/// Drives in a row without progress before a session is closed.
const LOOP_GUARD: u32 = 1_000;

/// How a session ended, for metrics and the access log.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    /// Piped to a backend, then closed.
    Routed,
    /// Piped to the default cluster.
    Fallback(FallbackReason),
    /// The core refused it.
    Rejected(RejectReason),
    /// Closed before or without a decision for a reason of the shell.
    Refused(&'static str),
    /// Closed without a byte and without a decision: a health check.
    Silent,
}

impl Worker {
    /// One drive of a session after events or a re-queue.
    pub(super) fn drive(&mut self, key: usize) {
        let Some(phase) = self.sessions.get(key).map(|s| s.phase) else {
            return;
        };
        let progressed = match phase {
            Phase::Preread => self.drive_preread(key),
            Phase::Connecting => self.drive_connect(key),
            Phase::Pipe => self.drive_pipe(key),
        };
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if progressed {
            session.idle_drives = 0;
        } else {
            session.idle_drives += 1;
            if session.idle_drives >= LOOP_GUARD {
                self.metrics.incr(names::SESSION_LOOP_GUARD);
                warn!(
                    "session of {} made no progress {LOOP_GUARD} times: closed",
                    session.client
                );
                self.close(key, Outcome::Refused("loop_guard"));
            }
        }
    }

    fn drive_preread(&mut self, key: usize) -> bool {
        let now = Instant::now();
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        let Some(listener) = self.runtime.listeners.get(&session.listener) else {
            self.close(key, Outcome::Refused("listener_removed"));
            return true;
        };
        if session.front_buf.is_none() {
            if !session.front_ready.readable {
                return false;
            }
            // The buffer is taken on the first readable event, not at accept:
            // an idle connection costs no buffer.
            match self.pool.checkout() {
                Some(buf) => session.front_buf = Some(buf),
                None => {
                    self.metrics.incr(names::TCP_REFUSED_POOL_EXHAUSTED);
                    self.close(key, Outcome::Refused("pool_exhausted"));
                    return true;
                }
            }
        }
        let step = session.preread_read(listener.preread.max_bytes, now);
        let output = match step {
            Err(e) => {
                debug!("read from {} failed during preread: {e}", session.client);
                session
                    .core
                    .handle_input(&listener.preread, Input::FrontClosed)
            }
            Ok(ReadStep::Idle) => return false,
            Ok(ReadStep::Eof) => session
                .core
                .handle_input(&listener.preread, Input::FrontClosed),
            Ok(ReadStep::Grew) => {
                let window = session.front_buf.as_ref().map_or(&[][..], |b| b.data());
                session
                    .core
                    .handle_input(&listener.preread, Input::Bytes { buf: window, now })
            }
        };
        self.on_output(key, output, now);
        true
    }

    /// Acts on the core's answer.
    fn on_output(&mut self, key: usize, output: Output, now: Instant) {
        match output {
            Output::NeedMore { deadline } => {
                let Some(session) = self.sessions.get_mut(key) else {
                    return;
                };
                if session.timers.preread.is_none() {
                    session.timers.preread =
                        Some(self.timers.schedule(deadline, (key, TimerKind::Preread)));
                }
                if let Some(id) = session.timers.server_first.take() {
                    self.timers.cancel(id);
                }
                // More bytes may already wait (a full buffer stopped the read).
                if session.front_ready.readable {
                    self.requeue(key);
                }
            }
            Output::Reject(RejectReason::FrontClosed)
                if self
                    .sessions
                    .get(key)
                    .is_some_and(|s| !s.core.has_received_bytes()) =>
            {
                self.close(key, Outcome::Silent);
            }
            Output::Reject(reason) => {
                self.leave_preread(key, now);
                self.metrics.incr(reason.metric_name());
                self.close(key, Outcome::Rejected(reason));
            }
            Output::Routed(route) => {
                self.leave_preread(key, now);
                match route.fallback {
                    Some(reason) => self.metrics.incr(reason.metric_name()),
                    None => self.metrics.incr(SNI_PREREAD_ROUTED),
                }
                let cluster = route.cluster.clone();
                if let Some(session) = self.sessions.get_mut(key) {
                    session.route = Some(route);
                }
                self.start_connect(key, cluster, now);
            }
        }
    }

    /// Lowers the preread gauge and records the duration, once.
    fn leave_preread(&mut self, key: usize, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if !session.in_preread_gauge {
            return;
        }
        session.in_preread_gauge = false;
        let since = session.first_byte_at.unwrap_or(session.accepted_at);
        let ms = now.saturating_duration_since(since).as_millis() as u64;
        session.preread_ms = Some(ms);
        for id in [
            session.timers.preread.take(),
            session.timers.server_first.take(),
        ]
        .into_iter()
        .flatten()
        {
            self.timers.cancel(id);
        }
        self.metrics.gauge_add(SNI_PREREAD_ACTIVE, -1);
        // The duration is "first byte to decision": a connection that never
        // sent a byte (a health check, an idle client) has none, and would
        // otherwise drag the percentiles to its idle timeout.
        if session.first_byte_at.is_some() {
            self.metrics.observe_ms(SNI_PREREAD_DURATION, ms);
        }
    }

    pub(super) fn route_catch_all(&mut self, key: usize, cluster: ClusterId, now: Instant) {
        let route = Route::unread(cluster.clone(), None);
        if let Some(session) = self.sessions.get_mut(key) {
            session.route = Some(Arc::new(route));
        }
        self.start_connect(key, cluster, now);
    }

    /// The connect gate: runs only once a route exists. Checks the
    /// per-(cluster, source IP) limit, then picks and connects a backend.
    fn start_connect(&mut self, key: usize, cluster: ClusterId, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        let source: IpAddr = session
            .route
            .as_ref()
            .and_then(|r| r.proxy_source)
            .map_or(session.client.ip(), |a| a.ip());
        let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
            self.close(key, Outcome::Refused("cluster_unknown"));
            return;
        };
        // Known before the limit check, so a refusal names whose limit it was.
        session.cluster = Some(cluster.clone());
        if !backends.admit_ip(source) {
            self.metrics.incr(names::TCP_REFUSED_PER_IP_LIMIT);
            self.close(key, Outcome::Refused("per_ip_limit"));
            return;
        }
        session.admitted_ip = Some(source);
        session.phase = Phase::Connecting;
        self.connect_next(key, now);
    }

    /// Picks a backend not tried yet and starts a non-blocking connect.
    fn connect_next(&mut self, key: usize, now: Instant) {
        loop {
            let Some(session) = self.sessions.get_mut(key) else {
                return;
            };
            let attempts = session.tried.len() as u32;
            let Some(cluster) = session.cluster.clone() else {
                return;
            };
            let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
                self.close(key, Outcome::Refused("cluster_unknown"));
                return;
            };
            if attempts >= self.settings.max_connection_attempts {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            }
            let Some(backend) = backends.pick(now, &mut self.rng, &session.tried) else {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            };
            let (Some(address), Some(id)) = (backends.address(backend), backends.id(backend))
            else {
                self.close(key, Outcome::Refused("backend_unavailable"));
                return;
            };
            let id = id.to_owned();
            if attempts > 0 {
                self.metrics.incr(names::BACKEND_CONNECT_RETRIES);
            }
            backends.connect_started(backend);
            session.tried.push(backend);
            session.backend = Some(backend);
            session.backend_id = Some(id);
            match self.open_backend(key, address) {
                Ok(()) => {
                    let timeout = self
                        .runtime
                        .listeners
                        .get(&self.sessions[key].listener)
                        .map_or(std::time::Duration::from_secs(3), |l| l.connect_timeout);
                    let id = self
                        .timers
                        .schedule(now + timeout, (key, TimerKind::Connect));
                    self.sessions[key].timers.connect = Some(id);
                    return;
                }
                Err(e) => {
                    debug!("connect to {address} failed at once: {e}");
                    self.backend_failed(key, now);
                }
            }
        }
    }

    fn open_backend(&mut self, key: usize, address: SocketAddr) -> io::Result<()> {
        let mut stream = TcpStream::connect(address)?;
        self.poll.registry().register(
            &mut stream,
            mio::Token(key * 2 + 1),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let session = &mut self.sessions[key];
        session.back = Some(stream);
        session.back_ready = Default::default();
        Ok(())
    }

    /// A connect failed (refused, reset, timed out): count it, mark the
    /// backend's health, drop the socket. The caller tries the next one.
    fn backend_failed(&mut self, key: usize, now: Instant) {
        self.metrics.incr(names::BACKEND_CONNECT_ERRORS);
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(mut back) = session.back.take() {
            let _ = self.poll.registry().deregister(&mut back);
        }
        if let Some(id) = session.timers.connect.take() {
            self.timers.cancel(id);
        }
        let (Some(cluster), Some(backend)) = (session.cluster.clone(), session.backend.take())
        else {
            return;
        };
        session.backend_id = None;
        if let Some(backends) = self.runtime.clusters.get_mut(&cluster) {
            backends.release(backend);
            let change = backends.connect_failed(backend, now);
            self.health_changed(&cluster, change);
        }
    }

    fn health_changed(&mut self, cluster: &str, change: Option<HealthChange>) {
        match change {
            Some(HealthChange::Down {
                backend_id,
                retry_in,
            }) => {
                self.metrics.incr(names::BACKEND_DOWN);
                warn!("backend {backend_id} of {cluster} is down; next try in {retry_in:?}");
            }
            Some(HealthChange::Up { backend_id }) => {
                info!("backend {backend_id} of {cluster} is up again");
            }
            None => {}
        }
    }

    fn drive_connect(&mut self, key: usize) -> bool {
        let now = Instant::now();
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        let Some(back) = session.back.as_ref() else {
            return false;
        };
        if !session.back_ready.writable {
            return false;
        }
        // mio: a non-blocking connect is done only once no error is pending
        // and the peer address is known.
        let connected = match back.take_error() {
            Ok(None) => match back.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
            Ok(Some(e)) | Err(e) => Err(e),
        };
        match connected {
            Ok(false) => {
                session.back_ready.writable = false;
                false
            }
            Err(e) => {
                debug!(
                    "connect of {} to {:?} failed: {e}",
                    session.client, session.backend_id
                );
                self.backend_failed(key, now);
                self.connect_next(key, now);
                true
            }
            Ok(true) => {
                self.connected(key, now);
                true
            }
        }
    }

    fn connected(&mut self, key: usize, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(id) = session.timers.connect.take() {
            self.timers.cancel(id);
        }
        if let Some(back) = &session.back {
            let _ = back.set_nodelay(true);
        }
        let (Some(cluster), Some(backend)) = (session.cluster.clone(), session.backend) else {
            return;
        };
        let Some(backends) = self.runtime.clusters.get_mut(&cluster) else {
            self.close(key, Outcome::Refused("cluster_unknown"));
            return;
        };
        let change = backends.connect_succeeded(backend, now);
        let mode = backends.proxy_protocol();
        self.health_changed(&cluster, change);
        self.metrics.gauge_add(names::BACKEND_CONNECTIONS, 1);
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if let Some(id) = &session.backend_id {
            self.metrics
                .gauge_add(&format!("backend.{id}.connections"), 1);
        }
        if let Some(route) = &session.route {
            let plan = handoff(mode, route, session.client, session.local);
            session.prefix = plan.prefix;
            if let Some(buf) = session.front_buf.as_mut() {
                buf.consume(plan.skip.min(buf.len()));
            }
        }
        let back_timeout = self
            .runtime
            .listeners
            .get(&session.listener)
            .map_or(std::time::Duration::from_secs(30), |l| l.back_timeout);
        session.last_back_activity = now;
        session.open_lanes(self.settings.splice);
        session.phase = Phase::Pipe;
        // The front may still hold readiness from before; the pipe must run
        // now, since edge-triggered events will not repeat.
        session.front_ready.readable = true;
        session.front_ready.writable = true;
        let id = self
            .timers
            .schedule(now + back_timeout, (key, TimerKind::BackIdle));
        session.timers.back_idle = Some(id);
        trace!("{} piped to {:?}", session.client, session.backend_id);
        self.requeue(key);
    }

    fn drive_pipe(&mut self, key: usize) -> bool {
        let now = Instant::now();
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        // Pooled buffers only for the directions that copy: a spliced one
        // moves its bytes through a kernel pipe.
        for _ in 0..session.buffers_wanted() {
            let Some(buf) = self.pool.checkout() else {
                self.metrics.incr(names::TCP_REFUSED_POOL_EXHAUSTED);
                self.close(key, Outcome::Refused("pool_exhausted"));
                return true;
            };
            let Some(session) = self.sessions.get_mut(key) else {
                return false;
            };
            session.lend_buffer(buf);
        }
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        let step = session.pipe(now);
        for buf in session.spare_buffers().into_iter().flatten() {
            self.pool.give_back(buf);
        }
        let fallbacks = session.take_fallbacks();
        if fallbacks > 0 {
            self.metrics
                .add(names::SPLICE_FALLBACKS, i64::from(fallbacks));
            // The direction now copies and needs a buffer: the next drive
            // lends it, and no socket event may come to trigger that drive.
            if matches!(step, PipeStep::Continue { .. }) {
                self.requeue(key);
            }
        }
        let Some(session) = self.sessions.get_mut(key) else {
            return false;
        };
        match step {
            PipeStep::Continue { moved } => moved,
            PipeStep::Yield => {
                self.requeue(key);
                true
            }
            PipeStep::Done => {
                let outcome = routed_outcome(session.route.as_ref());
                self.close(key, outcome);
                true
            }
            PipeStep::Failed(e) => {
                debug!("pipe of {} failed: {e}", session.client);
                let outcome = routed_outcome(session.route.as_ref());
                self.close(key, outcome);
                true
            }
        }
    }

    pub(super) fn requeue(&mut self, key: usize) {
        if let Some(session) = self.sessions.get_mut(key)
            && !session.dirty
        {
            session.dirty = true;
            self.dirty.push(key);
        }
    }

    pub(super) fn on_timer(&mut self, key: usize, kind: TimerKind, now: Instant) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        match kind {
            TimerKind::Preread | TimerKind::ServerFirst => {
                match kind {
                    TimerKind::Preread => session.timers.preread = None,
                    _ => session.timers.server_first = None,
                }
                if session.phase != Phase::Preread {
                    return;
                }
                let Some(listener) = self.runtime.listeners.get(&session.listener) else {
                    self.close(key, Outcome::Refused("listener_removed"));
                    return;
                };
                let output = session
                    .core
                    .handle_input(&listener.preread, Input::Timeout { now });
                self.on_output(key, output, now);
            }
            TimerKind::Connect => {
                session.timers.connect = None;
                if session.phase == Phase::Connecting {
                    debug!(
                        "connect of {} to {:?} timed out",
                        session.client, session.backend_id
                    );
                    self.backend_failed(key, now);
                    self.connect_next(key, now);
                }
            }
            TimerKind::FrontIdle | TimerKind::BackIdle => {
                let Some(listener) = self.runtime.listeners.get(&session.listener) else {
                    self.close(key, Outcome::Refused("listener_removed"));
                    return;
                };
                let (last, limit) = match kind {
                    TimerKind::FrontIdle => (session.last_front_activity, listener.front_timeout),
                    _ => (session.last_back_activity, listener.back_timeout),
                };
                let due = last + limit;
                if now < due {
                    // Activity since the timer was armed: sleep until the new due time.
                    let id = self.timers.schedule(due, (key, kind));
                    match kind {
                        TimerKind::FrontIdle => session.timers.front_idle = Some(id),
                        _ => session.timers.back_idle = Some(id),
                    }
                    return;
                }
                let outcome = match session.phase {
                    Phase::Preread if !session.core.has_received_bytes() => Outcome::Silent,
                    Phase::Preread => Outcome::Rejected(RejectReason::Fragmented),
                    _ => routed_outcome(session.route.as_ref()),
                };
                debug!("{} idle for {limit:?}: closed", session.client);
                if let Outcome::Rejected(reason) = outcome {
                    self.leave_preread(key, now);
                    self.metrics.incr(reason.metric_name());
                }
                self.close(key, outcome);
            }
        }
    }

    /// The one exit of every session: settles every count exactly once.
    pub(super) fn close(&mut self, key: usize, outcome: Outcome) {
        let now = Instant::now();
        self.leave_preread(key, now);
        let Some(mut session) = self.sessions.try_remove(key) else {
            return;
        };
        for id in session.timers.all().collect::<Vec<_>>() {
            self.timers.cancel(id);
        }
        let _ = self.poll.registry().deregister(&mut session.front);
        if let Some(mut back) = session.back.take() {
            let _ = self.poll.registry().deregister(&mut back);
        }
        for buf in [session.front_buf.take(), session.back_buf.take()]
            .into_iter()
            .flatten()
        {
            self.pool.give_back(buf);
        }
        self.metrics.gauge_add(names::TCP_ACTIVE, -1);
        if let Some(cluster) = &session.cluster
            && let Some(backends) = self.runtime.clusters.get_mut(cluster)
        {
            if let Some(ip) = session.admitted_ip {
                backends.release_ip(ip);
            }
            if let Some(backend) = session.backend {
                backends.release(backend);
                if session.phase == Phase::Pipe {
                    self.metrics.gauge_add(names::BACKEND_CONNECTIONS, -1);
                    if let Some(id) = &session.backend_id {
                        self.metrics
                            .gauge_add(&format!("backend.{id}.connections"), -1);
                    }
                }
            }
        }
        self.metrics.add(names::BYTES_IN, session.bytes_in as i64);
        self.metrics.add(names::BYTES_OUT, session.bytes_out as i64);
        if let Some(cluster) = &session.cluster {
            self.metrics.add(
                &format!("cluster.{cluster}.bytes_in"),
                session.bytes_in as i64,
            );
            self.metrics.add(
                &format!("cluster.{cluster}.bytes_out"),
                session.bytes_out as i64,
            );
        }
        if let Some(id) = &session.backend_id
            && session.phase == Phase::Pipe
        {
            self.metrics
                .add(&format!("backend.{id}.bytes_in"), session.bytes_in as i64);
            self.metrics
                .add(&format!("backend.{id}.bytes_out"), session.bytes_out as i64);
        }
        let log_outcome = match outcome {
            Outcome::Silent => {
                trace!(
                    "{} closed without sending a byte (health check)",
                    session.client
                );
                return;
            }
            Outcome::Routed => LogOutcome::Routed,
            Outcome::Fallback(reason) => LogOutcome::Fallback(reason),
            Outcome::Rejected(reason) => LogOutcome::Rejected(reason),
            Outcome::Refused(why) => LogOutcome::Refused(why),
        };
        let route = session.route.as_ref();
        let sni = route
            .and_then(|r| r.sni.as_ref())
            .or_else(|| session.core.sni())
            .map(|s| s.as_str().to_owned());
        // The protocol that chose the frontend; else what the client offered.
        let alpn = route.and_then(|r| {
            r.matched_alpn
                .as_ref()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .or_else(|| r.alpn.as_ref().map(ToString::to_string))
        });
        let entry = AccessLogEntry {
            ts: std::time::SystemTime::now(),
            listener: session.listener,
            client: session.client,
            sni: sni.as_deref(),
            alpn: alpn.as_deref(),
            cluster: session.cluster.as_deref(),
            backend: session.backend_id.as_deref(),
            outcome: log_outcome,
            bytes_in: session.bytes_in,
            bytes_out: session.bytes_out,
            duration_ms: now
                .saturating_duration_since(session.accepted_at)
                .as_millis() as u64,
            preread_ms: session.preread_ms,
        };
        self.access_log.write(&entry);
    }
}

fn routed_outcome(route: Option<&Arc<Route>>) -> Outcome {
    match route.and_then(|r| r.fallback) {
        Some(reason) => Outcome::Fallback(reason),
        None => Outcome::Routed,
    }
}
