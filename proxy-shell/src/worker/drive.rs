//! Driving one session through its phases: preread, connect, pipe, close.
//!
//! Owns: the phase dispatch of each drive (and the loop guard on drives that
//! make no progress), what the preread phase does on readiness, acting on
//! the core's answer, leaving the preread gauge exactly once, the catch-all
//! route that skips preread, re-queueing, and what each timer does when it
//! fires. The backend side lives in `connect.rs`, the single exit in
//! `close.rs`.
//!
//! Must never: contact a backend before a route exists (that goes through
//! `start_connect`), or end a session any other way than `close`, so no
//! session is left half-accounted.

use std::sync::Arc;
use std::time::Instant;

use log::{debug, warn};
use preread_core::names::{SNI_PREREAD_ACTIVE, SNI_PREREAD_DURATION, SNI_PREREAD_ROUTED};
use preread_core::routes::ClusterId;
use preread_core::{FallbackReason, Input, Output, RejectReason, Route};

use super::close::routed_outcome;
use super::event_loop::{TimerKind, Worker};
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
                // A load balancer's PROXY header is not the client speaking:
                // the server-first timer stays until the client does.
                if session.core.client_spoke()
                    && let Some(id) = session.timers.server_first.take()
                {
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
                    .is_some_and(|s| !s.core.client_spoke()) =>
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
    pub(super) fn leave_preread(&mut self, key: usize, now: Instant) {
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
        // The duration is "first byte to decision": a client that never
        // spoke (a health check, an idle or server-first client, maybe behind
        // a load balancer's PROXY header) would drag the percentiles to its
        // timeout.
        if session.core.client_spoke() {
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
                    Phase::Preread if !session.core.client_spoke() => Outcome::Silent,
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
}
