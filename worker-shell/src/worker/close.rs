//! The single exit of every session.
//!
//! Owns: [`close`], where the preread stage is left (through the step), the
//! timers of every phase, both sockets, the buffers, the pipes, the gauges, the refusal
//! and byte counters and the access-log line are settled, exactly once per
//! session (a line the writer's queue has no room for is counted in
//! `access_log.dropped_total` instead); the process-wide counts (the
//! session's slot, its per-IP count, its backend lease) are given back when
//! the session is dropped here.
//!
//! Must never: be bypassed (a session removed anywhere else is left
//! half-accounted), count anything twice, or write an access-log line for a
//! silent connection (a health check).

use std::time::{Instant, SystemTime};

use log::trace;
use preread_parser::tls::Ja4;

use super::access::AccessRule;
use super::ctx::Ctx;
use super::pipe::Growth;
use super::preread;
use super::session::{Phase, Session};
use crate::access_log::AccessLogEntry;
use crate::metrics::families::Family;
use crate::metrics::series::{IN, OUT, Series};
use crate::vocabulary::Outcome;

/// Closes a session already taken out of the slab: settles every count
/// exactly once, then writes its access-log line.
pub(super) fn close(ctx: &mut Ctx, key: usize, mut session: Session, outcome: Outcome) {
    let now = Instant::now();
    let left = session.step.abandon(now);
    let _ = preread::perform(ctx, key, &mut session, left, now);
    for id in session.armed_timers() {
        ctx.timers.cancel(id);
    }
    // No `EPOLL_CTL_DEL`: closing a socket's last descriptor takes it out
    // of the epoll set, session sockets are never duplicated, and mio keeps
    // nothing per registration on Linux. Both close when `session` drops.
    // The JA4 of a session refused in its preread is read off its window,
    // before the window goes back.
    let ja4 = if ctx.access_log.is_on() && outcome != Outcome::Silent {
        session.ja4()
    } else {
        None
    };
    give_back(ctx, &mut session.phase);
    let listener = session.listener;
    ctx.metrics
        .gauge_add(Series::on(Family::ConnectionsActive, listener), -1);
    if let Outcome::Refused(reason) = outcome {
        let refused = Series::on(Family::ConnectionsRefused, listener).reason(reason.as_str());
        ctx.metrics.incr(refused);
    }
    let piped = match &session.phase {
        Phase::Piped(piped) => Some((
            &piped.target.route.cluster,
            piped.lease.instance().backend_id(),
        )),
        Phase::Preread(_) | Phase::Gated(_) | Phase::Connecting(_) => None,
    };
    if let Some((cluster, id)) = piped {
        let connections = Series::backend(Family::BackendConnections, cluster, id);
        ctx.metrics.gauge_add(connections, -1);
    }
    let (bytes_in, bytes_out) = (session.front.read, session.bytes_out());
    for (direction, bytes) in [(IN, bytes_in), (OUT, bytes_out)] {
        let client = Series::on(Family::ClientBytes, listener).direction(direction);
        ctx.metrics.add(client, bytes);
        if let Some(cluster) = session.cluster() {
            let routed = Series::of(Family::ClusterBytes).cluster(cluster);
            ctx.metrics.add(routed.direction(direction), bytes);
        }
        if let Some((cluster, id)) = piped {
            let piped = Series::backend(Family::BackendBytes, cluster, id);
            ctx.metrics.add(piped.direction(direction), bytes);
        }
    }
    if outcome == Outcome::Silent {
        trace!(
            "{} closed before the client spoke (a health check)",
            session.client
        );
        return;
    }
    log(ctx, &session, (outcome, ja4), now);
}

/// Gives the phase's buffers, parked claims and kernel pipes back to the
/// worker's pools.
fn give_back(ctx: &mut Ctx, phase: &mut Phase) {
    let window = match phase {
        Phase::Preread(preread) => preread.window.take(),
        Phase::Connecting(connecting) => connecting.window.take(),
        Phase::Gated(_) => None,
        Phase::Piped(piped) => {
            let pipe = &mut piped.pipe;
            for flow in [&mut pipe.up, &mut pipe.down] {
                if let Some(buf) = flow.buf.take() {
                    ctx.pool.give_back(buf);
                }
                if let Some(kernel_pipe) = std::mem::take(&mut flow.lane).into_pipe() {
                    ctx.pipes.give_back(kernel_pipe);
                }
                if let Growth::Grown(_) = std::mem::take(&mut flow.growth) {
                    ctx.pipes.count_released();
                }
            }
            ctx.pool.release_parked(usize::from(pipe.parked));
            None
        }
    };
    if let Some(buf) = window {
        ctx.pool.give_back(buf);
    }
}

/// The session's access-log line, offered to the writer; a full queue
/// drops it, counted.
fn log(ctx: &mut Ctx, session: &Session, (outcome, ja4): (Outcome, Option<Ja4>), now: Instant) {
    let core = session.step.core();
    let route = session.route();
    let sni = route
        .and_then(|r| r.sni.as_ref())
        .or_else(|| core.sni())
        .map(|s| s.as_str().to_owned());
    // The protocol that chose the frontend; else what the client offered.
    let alpn = route.and_then(|r| {
        r.matched_alpn
            .as_ref()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .or_else(|| r.alpn.as_ref().map(ToString::to_string))
    });
    let entry = AccessLogEntry {
        ts: SystemTime::now(),
        listener: session.listener,
        client: session.client,
        sni: sni.as_deref(),
        alpn: alpn.as_deref(),
        cluster: session.cluster().map(AsRef::as_ref),
        backend: session.backend_id().map(AsRef::as_ref),
        outcome,
        bytes_in: session.front.read,
        bytes_out: session.bytes_out(),
        duration_ms: now
            .saturating_duration_since(session.step.accepted_at())
            .as_millis() as u64,
        preread_ms: session.step.preread_time().map(|d| d.as_millis() as u64),
        proxy_client: route
            .and_then(|r| r.proxy_source)
            .or_else(|| core.proxy_source()),
        hello: core.hello(),
        ja4,
        rule: (session.access_rule.map(AccessRule::as_str))
            .or_else(|| core.denied_by().map(|rule| rule.as_str())),
        quic: None,
    };
    if ctx.access_log.submit(&entry).is_err() {
        ctx.metrics.incr(Series::of(Family::AccessLogDropped));
    }
}
