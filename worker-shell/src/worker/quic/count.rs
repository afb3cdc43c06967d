//! The metrics a QUIC listener's flows move (doc/configure.md §5.3, §5.4):
//! the flows open, the datagrams both ways and the dropped ones by reason,
//! and the decision families a TCP session moves (preread, routed,
//! fallback, rejected, refused, the two histograms, the bytes).
//!
//! Owns: which series each event of a flow moves, so that the relay only
//! says what happened. Must never: decide anything, read a socket, or
//! count an event twice (a flow's preread gauge goes down once: at its
//! decision, or at its end if it had none).

use std::net::SocketAddr;
use std::sync::Arc;

use preread_core::Route;
use preread_core::quic::QuicPrereadStep;
use preread_core::step::Left;

use super::flows::FlowCounts;
use crate::metrics::families::Family;
use crate::metrics::series::{IN, OUT, Series};
use crate::shared::quic_flows::Refused;
use crate::vocabulary::{Outcome, QuicDrop, RefuseReason};
use crate::worker::ctx::Ctx;

/// A datagram read from a client on `listener`.
pub(super) fn datagram_in(ctx: &mut Ctx, listener: SocketAddr) {
    let series = Series::on(Family::QuicDatagrams, listener).direction(IN);
    ctx.metrics.incr(series);
}

/// A datagram sent to a client from `listener`.
pub(super) fn datagram_out(ctx: &mut Ctx, listener: SocketAddr) {
    let series = Series::on(Family::QuicDatagrams, listener).direction(OUT);
    ctx.metrics.incr(series);
}

/// `n` datagrams of `listener` not passed on, for `reason`.
pub(super) fn dropped(ctx: &mut Ctx, listener: SocketAddr, reason: QuicDrop, n: usize) {
    if n == 0 {
        return;
    }
    let series = Series::on(Family::QuicDroppedDatagrams, listener).reason(reason.as_str());
    ctx.metrics
        .add(series, u64::try_from(n).unwrap_or(u64::MAX));
}

/// A new flow's first datagram dropped: the flow was `refused` a place.
pub(super) fn not_admitted(ctx: &mut Ctx, listener: SocketAddr, refused: Refused) {
    let reason = match refused {
        Refused::MaxFlows => QuicDrop::MaxFlows,
        Refused::PerIpLimit => QuicDrop::MaxFlowsPerIp,
    };
    dropped(ctx, listener, reason, 1);
}

/// A new flow's first datagram dropped: the listener's access policy
/// refused its source for `reason` (`access_denied` or `rate_limited`).
pub(super) fn refused_access(ctx: &mut Ctx, listener: SocketAddr, reason: RefuseReason) {
    let reason = match reason {
        RefuseReason::RateLimited => QuicDrop::RateLimited,
        _ => QuicDrop::AccessDenied,
    };
    dropped(ctx, listener, reason, 1);
}

/// A flow opened on `listener`: it is open, and in preread.
pub(super) fn opened(ctx: &mut Ctx, listener: SocketAddr) {
    ctx.metrics
        .gauge_add(Series::on(Family::QuicFlowsActive, listener), 1);
    ctx.metrics
        .gauge_add(Series::on(Family::PrereadActive, listener), 1);
}

/// The flow's preread ended (`left`, from the step's actions): out of the
/// preread gauge, its duration and its ClientHello's size observed.
pub(super) fn left(
    ctx: &mut Ctx,
    listener: SocketAddr,
    step: Option<&QuicPrereadStep>,
    left: Left,
) {
    ctx.metrics
        .gauge_add(Series::on(Family::PrereadActive, listener), -1);
    if let Some(sample) = left.sample {
        let micros = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX);
        ctx.metrics
            .observe(Series::on(Family::PrereadDuration, listener), micros);
    }
    if let Some(hello) = step.and_then(QuicPrereadStep::hello) {
        let size = u64::try_from(hello.len).unwrap_or(u64::MAX);
        ctx.metrics
            .observe(Series::on(Family::ClientHelloBytes, listener), size);
    }
}

/// The flow was routed by `route`: by name, or to `default_cluster` for a
/// fallback reason (a catch-all route counts as neither, as on TCP).
pub(super) fn routed(ctx: &mut Ctx, listener: SocketAddr, route: &Route) {
    match route.fallback {
        Some(reason) => {
            let fallback = Series::on(Family::PrereadFallback, listener);
            ctx.metrics.incr(fallback.reason(reason.as_str()));
        }
        None if route.matched_sni.is_some() => {
            let routed = Series::on(Family::PrereadRouted, listener);
            ctx.metrics.incr(routed.cluster(&route.cluster));
        }
        None => {}
    }
}

/// The flow now relays to backend `backend` of `cluster`.
pub(super) fn piped(ctx: &mut Ctx, cluster: &Arc<str>, backend: &Arc<str>) {
    let connections = Series::backend(Family::BackendConnections, cluster, backend);
    ctx.metrics.gauge_add(connections, 1);
}

/// A relaying flow handed over by the process this one upgraded: open,
/// and piped to backend `backend` of `cluster`, as it was there (its end
/// counts it out like any flow's).
pub(super) fn adopted(ctx: &mut Ctx, listener: SocketAddr, cluster: &Arc<str>, backend: &Arc<str>) {
    ctx.metrics
        .gauge_add(Series::on(Family::QuicFlowsActive, listener), 1);
    piped(ctx, cluster, backend);
}

/// What a flow that ends leaves behind.
pub(super) struct Ended<'a> {
    pub(super) listener: SocketAddr,
    pub(super) outcome: Outcome,
    /// Still undecided: its preread gauge goes down now.
    pub(super) reading: bool,
    /// The datagrams it held, dropped with it.
    pub(super) held: usize,
    pub(super) counts: FlowCounts,
    /// The cluster it was admitted to, and the backend it relayed to.
    pub(super) cluster: Option<&'a Arc<str>>,
    pub(super) backend: Option<&'a Arc<str>>,
}

/// A flow ended: out of the gauges, its refusal or rejection counted, its
/// held datagrams dropped, its bytes added.
pub(super) fn ended(ctx: &mut Ctx, flow: &Ended<'_>) {
    let listener = flow.listener;
    ctx.metrics
        .gauge_add(Series::on(Family::QuicFlowsActive, listener), -1);
    if flow.reading {
        ctx.metrics
            .gauge_add(Series::on(Family::PrereadActive, listener), -1);
    }
    let drop = match flow.outcome {
        Outcome::Rejected(reason) => {
            let rejected = Series::on(Family::PrereadRejected, listener);
            ctx.metrics.incr(rejected.reason(reason.as_str()));
            QuicDrop::Rejected
        }
        Outcome::Refused(reason) => {
            let refused = Series::on(Family::ConnectionsRefused, listener);
            ctx.metrics.incr(refused.reason(reason.as_str()));
            QuicDrop::Refused
        }
        Outcome::Routed | Outcome::Fallback(_) | Outcome::Silent => QuicDrop::Closed,
    };
    dropped(ctx, listener, drop, flow.held);
    if let (Some(cluster), Some(backend)) = (flow.cluster, flow.backend) {
        let connections = Series::backend(Family::BackendConnections, cluster, backend);
        ctx.metrics.gauge_add(connections, -1);
    }
    let counts = flow.counts;
    for (direction, bytes) in [(IN, counts.bytes_in), (OUT, counts.bytes_out)] {
        let client = Series::on(Family::ClientBytes, listener).direction(direction);
        ctx.metrics.add(client, bytes);
        if let Some(cluster) = flow.cluster {
            let routed = Series::of(Family::ClusterBytes).cluster(cluster);
            ctx.metrics.add(routed.direction(direction), bytes);
            if let Some(backend) = flow.backend {
                let piped = Series::backend(Family::BackendBytes, cluster, backend);
                ctx.metrics.add(piped.direction(direction), bytes);
            }
        }
    }
}
