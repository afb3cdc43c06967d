//! The single exit of every session.
//!
//! Owns: `close`, where the timers, both sockets, the buffers, the gauges,
//! the backend and per-IP counts, the byte counters and the access-log line
//! are settled, exactly once per session; and which outcome a routed session
//! ends with.
//!
//! Must never: be bypassed (a session removed anywhere else is left
//! half-accounted), count anything twice, or write an access-log line for a
//! silent connection (a health check).

use std::sync::Arc;
use std::time::Instant;

use log::trace;
use preread_core::Route;

use super::access_log::{AccessLogEntry, Outcome as LogOutcome};
use super::drive::Outcome;
use super::event_loop::Worker;
use super::metrics::names;
use super::session::Phase;

impl Worker {
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
        for pipe in std::mem::take(&mut session.lanes).into_pipes() {
            self.pipes.give_back(pipe);
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
                    "{} closed before the client spoke (a health check)",
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
            proxy_client: route
                .and_then(|r| r.proxy_source)
                .or_else(|| session.core.proxy_source()),
        };
        self.access_log.write(&entry);
    }
}

pub(super) fn routed_outcome(route: Option<&Arc<Route>>) -> Outcome {
    match route.and_then(|r| r.fallback) {
        Some(reason) => Outcome::Fallback(reason),
        None => Outcome::Routed,
    }
}
