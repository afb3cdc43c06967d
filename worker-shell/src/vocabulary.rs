//! The proxy's words for what happens to a connection: every metric name,
//! every way a session ends ([`Outcome`]) and every reason the shell refuses
//! one ([`RefuseReason`]), as counted and as logged.
//!
//! Owns: the metric names of doc/configure.md (fixed ones as constants,
//! per-reason ones through total `match`es so that a new reason without a
//! name does not compile, per-cluster and per-backend ones through the
//! builders here) and the access log's `outcome` values. Must never: let
//! two reasons share a name, or build a metric name anywhere else.

use std::fmt;

use preread_core::{FallbackReason, RejectReason, Route};

/// Gauge: sessions currently in the preread stage.
pub const SNI_PREREAD_ACTIVE: &str = "tcp.sni_preread.active";
/// Counter: connections routed by SNI/ALPN (fallbacks are counted apart).
pub const SNI_PREREAD_ROUTED: &str = "tcp.sni_preread.routed";
/// Histogram: time from the first byte to the decision.
pub const SNI_PREREAD_DURATION: &str = "tcp.sni_preread.duration";
/// Counter: connections accepted (before admission checks).
pub const TCP_ACCEPTED: &str = "tcp.accepted";
/// Counter: accepts that failed because the process or the system was out
/// of descriptors (`EMFILE`, `ENFILE`); the retries of a paused listener
/// included.
pub const TCP_ACCEPT_EMFILE: &str = "tcp.accept.emfile";
/// Counter: piped sessions whose backend reset: the client was reset too.
pub const TCP_RESET_FROM_BACKEND: &str = "tcp.reset.from_backend";
/// Counter: piped sessions whose client reset: the backend was reset too.
pub const TCP_RESET_FROM_CLIENT: &str = "tcp.reset.from_client";
/// Gauge: open sessions.
pub const TCP_ACTIVE: &str = "tcp.active";
/// Gauge: sessions piped to a backend.
pub const BACKEND_CONNECTIONS: &str = "backend.connections";
/// Counter: backend connects that failed (refused, reset, timed out).
pub const BACKEND_CONNECT_ERRORS: &str = "backend.connect.errors";
/// Counter: backend sockets this host could not open or connect for lack
/// of its own resources (descriptors, memory, local ports): never a
/// backend failure.
pub const BACKEND_CONNECT_LOCAL_ERRORS: &str = "backend.connect.local_errors";
/// Counter: connects to a further backend after a failed one.
pub const BACKEND_CONNECT_RETRIES: &str = "backend.connect.retries";
/// Counter: backend instances marked down, once for the whole process
/// (passive or active health).
pub const BACKEND_DOWN: &str = "backend.down";
/// Counter: backend instances that came back up, once for the process.
pub const BACKEND_RECOVERED: &str = "backend.recovered";
/// Counter: resolutions of a named backend that failed (its last good set
/// of addresses stays).
pub const BACKEND_RESOLVE_ERRORS: &str = "backend.resolve.errors";
/// Counter: bytes from clients.
pub const BYTES_IN: &str = "bytes_in";
/// Counter: bytes to clients.
pub const BYTES_OUT: &str = "bytes_out";
/// Gauge: pooled buffers checked out.
pub const BUFFERS_IN_USE: &str = "buffers.in_use";
/// Gauge: kernel pipes grown for a bulk transfer and held now.
pub const SPLICE_BULK_PIPES: &str = "splice.bulk_pipes";
/// Counter: directions that fell back from splice to copying.
pub const SPLICE_FALLBACKS: &str = "splice.fallbacks";
/// Counter: kernel pipes created for splicing (the rest were reused).
pub const SPLICE_PIPES_CREATED: &str = "splice.pipes_created";
/// Counter: kernel pipes grown to `splice_bulk_pipe_size` for a bulk
/// transfer.
pub const SPLICE_PIPES_GROWN: &str = "splice.pipes_grown";
/// Counter: access-log lines dropped because the writer's queue was full
/// (a slow disk, a pipe nobody reads): the worker never waits for it.
pub const ACCESS_LOG_DROPPED: &str = "access_log.dropped_total";

/// Gauge: routing generations committed since the start (process-wide).
pub const CONFIG_GENERATION: &str = "config.generation";

/// Gauge: QUIC flows open, undecided or relaying.
pub const QUIC_FLOWS_ACTIVE: &str = "quic.flows.active";
/// Counter: QUIC datagrams read from clients, dropped ones included.
pub const QUIC_DATAGRAMS_IN: &str = "quic.datagrams_in";
/// Counter: QUIC datagrams sent to clients (relayed, and the replies of
/// rejects).
pub const QUIC_DATAGRAMS_OUT: &str = "quic.datagrams_out";
/// Counter: QUIC flows whose first Initial did not open
/// (`quic_undecryptable`): a reason only QUIC listeners have.
pub const QUIC_REJECTED_UNDECRYPTABLE: &str = "quic.rejected.undecryptable";
/// Counter: QUIC flows of a version the proxy cannot read
/// (`quic_version`): a reason only QUIC listeners have.
pub const QUIC_REJECTED_VERSION: &str = "quic.rejected.version";

/// The counter of connections refused by the core for `reason`.
pub fn rejected(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::NotTls => "tcp.sni_preread.rejected.not_tls",
        RejectReason::MalformedRecord => "tcp.sni_preread.rejected.malformed_record",
        RejectReason::MalformedHandshake => "tcp.sni_preread.rejected.malformed_handshake",
        RejectReason::Fragmented => "tcp.sni_preread.rejected.fragmented",
        RejectReason::TooLarge => "tcp.sni_preread.rejected.too_large",
        RejectReason::NoSni => "tcp.sni_preread.rejected.no_sni",
        RejectReason::EchOuterAbsent => "tcp.sni_preread.rejected.ech_outer_absent",
        RejectReason::SniUnmatched => "tcp.sni_preread.rejected.sni_unmatched",
        RejectReason::AlpnUnmatched => "tcp.sni_preread.rejected.alpn_unmatched",
        RejectReason::ProxyHeaderInvalid => "tcp.sni_preread.rejected.proxy_header_invalid",
        RejectReason::FrontClosed => "tcp.sni_preread.rejected.front_closed",
        RejectReason::AccessDenied => "tcp.sni_preread.rejected.access_denied",
        RejectReason::QuicUndecryptable => QUIC_REJECTED_UNDECRYPTABLE,
        RejectReason::QuicVersion => QUIC_REJECTED_VERSION,
    }
}

/// The counter of connections sent to the default cluster for `reason`.
pub fn fallback(reason: FallbackReason) -> &'static str {
    match reason {
        FallbackReason::NotTls => "tcp.sni_preread.fallback.not_tls",
        FallbackReason::NoSni => "tcp.sni_preread.fallback.no_sni",
        FallbackReason::SniUnmatched => "tcp.sni_preread.fallback.sni_unmatched",
        FallbackReason::EchOuterAbsent => "tcp.sni_preread.fallback.ech_outer_absent",
        FallbackReason::ServerFirst => "tcp.sni_preread.fallback.server_first",
    }
}

/// The gauge of sessions piped to backend `id`.
pub fn backend_connections(id: &str) -> String {
    format!("backend.{id}.connections")
}

/// The gauge of backend `id`'s instances that are up (0 or 1 for an
/// `ip:port`), for the whole process.
pub fn backend_up(id: &str) -> String {
    format!("backend.{id}.up")
}

/// Whether `name` is counted for the whole process rather than by a
/// worker: backend health and name resolution. Such a name is in the
/// metrics' total only.
pub fn is_process_wide(name: &str) -> bool {
    matches!(
        name,
        BACKEND_DOWN | BACKEND_RECOVERED | BACKEND_RESOLVE_ERRORS | CONFIG_GENERATION
    ) || (name.starts_with("backend.") && name.ends_with(".up"))
}

/// The byte counter of cluster `id` in `direction` (`in` or `out`).
pub fn cluster_bytes(id: &str, direction: &str) -> String {
    format!("cluster.{id}.bytes_{direction}")
}

/// The byte counter of backend `id` in `direction` (`in` or `out`).
pub fn backend_bytes(id: &str, direction: &str) -> String {
    format!("backend.{id}.bytes_{direction}")
}

preread_core::stable_names! {
    /// Why the shell, not the core, ended or refused a connection. Each has a
    /// stable name (the access log's `refused:<name>`) and a counter.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RefuseReason {
        /// No pooled buffer was free.
        PoolExhausted => "pool_exhausted",
        /// The global session cap was reached (refused at accept).
        MaxConnections => "max_connections",
        /// The cluster's `max_connections_per_ip` for the client's address.
        PerIpLimit => "per_ip_limit",
        /// The listener's `max_unrouted_per_ip`: the client's address already
        /// holds that many connections not routed yet (refused at accept).
        UnroutedPerIp => "unrouted_per_ip",
        /// The client sent nothing (past a load balancer's PROXY header)
        /// within `sni_preread_timeout` of the accept, or of the header.
        SilentTimeout => "silent_timeout",
        /// No backend of the cluster could be connected: none up (the
        /// connection is refused at once), or every one tried failed.
        BackendUnavailable => "backend_unavailable",
        /// Every instance the connection could go to holds its backend's
        /// `max_connections`.
        BackendFull => "backend_full",
        /// This host ran short (descriptors, memory, local ports) opening the
        /// backend socket: no backend is to blame.
        LocalResources => "local_resources",
        /// The routed cluster is gone (removed while the session was open).
        ClusterUnknown => "cluster_unknown",
        /// The session's listener is gone.
        ListenerRemoved => "listener_removed",
        /// Driven again and again without progress: closed, not spun.
        LoopGuard => "loop_guard",
        /// The worker stopped with the session still open.
        Shutdown => "shutdown",
        /// A listener's or a cluster's `allow` or `deny` refused the source.
        AccessDenied => "access_denied",
        /// The source's `connection_rate_per_ip` bucket is empty.
        RateLimited => "rate_limited",
    }
    /// Every reason, for tests and metric registration.
    pub const ALL;
}

impl RefuseReason {
    /// The counter incremented once per refusal for this reason.
    pub fn metric_name(self) -> &'static str {
        match self {
            Self::PoolExhausted => "tcp.refused.pool_exhausted",
            Self::MaxConnections => "tcp.refused.max_connections",
            Self::PerIpLimit => "tcp.refused.per_ip_limit",
            Self::UnroutedPerIp => "tcp.refused.unrouted_per_ip",
            Self::SilentTimeout => "tcp.refused.silent_timeout",
            Self::BackendUnavailable => "tcp.refused.backend_unavailable",
            Self::BackendFull => "tcp.refused.backend_full",
            Self::LocalResources => "tcp.refused.local_resources",
            Self::ClusterUnknown => "tcp.refused.cluster_unknown",
            Self::ListenerRemoved => "tcp.refused.listener_removed",
            Self::LoopGuard => "session.loop_guard",
            Self::Shutdown => "tcp.refused.shutdown",
            Self::AccessDenied => "tcp.refused.access_denied",
            Self::RateLimited => "tcp.refused.rate_limited",
        }
    }
}

preread_core::stable_names! {
    /// Why a QUIC listener did not pass a datagram on. Each has a stable
    /// name (the `reason` of `preread_quic_dropped_datagrams_total`) and a
    /// counter (`quic.dropped.<reason>`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum QuicDrop {
        /// A short header (or an empty datagram) from an address with no
        /// flow, whose connection ID no flow learned: nobody to give it to.
        UnknownFlow => "unknown_flow",
        /// A new flow refused: its listener holds `max_flows`.
        MaxFlows => "max_flows",
        /// A new flow refused: its client address holds `max_flows_per_ip`.
        MaxFlowsPerIp => "max_flows_per_ip",
        /// A new flow refused: the listener's `allow` or `deny` refused
        /// its source.
        AccessDenied => "access_denied",
        /// A new flow refused: the source's `connection_rate_per_ip`
        /// bucket on the listener is empty.
        RateLimited => "rate_limited",
        /// An undecided flow holds its cap of datagrams or bytes: the
        /// datagram is dropped and the flow rejected `too_large`.
        FlowBufferFull => "flow_buffer_full",
        /// The undecided flows of a worker hold the total cap of bytes: the
        /// datagram is dropped and its flow rejected `too_large`.
        BufferFull => "buffer_full",
        /// The datagrams of a flow rejected at its decision (held ones and
        /// the one that decided): `preread_preread_rejected_total` says why.
        Rejected => "rejected",
        /// The datagrams of a decided flow no backend could take: the
        /// refusal's reason is in `preread_connections_refused_total`.
        Refused => "refused",
        /// The datagrams an undecided flow held when it ended without a
        /// decision (idle, its listener removed, the worker stopped), and a
        /// datagram that came in while its listener was being removed.
        Closed => "closed",
        /// The kernel refused to send it, to the backend or to the client
        /// (a full socket buffer, an ICMP error queued).
        SendFailed => "send_failed",
    }
    /// Every reason, for tests and metric registration.
    pub const ALL;
}

impl QuicDrop {
    /// The flat counter of datagrams dropped for this reason.
    pub fn metric_name(self) -> &'static str {
        match self {
            Self::UnknownFlow => "quic.dropped.unknown_flow",
            Self::MaxFlows => "quic.dropped.max_flows",
            Self::MaxFlowsPerIp => "quic.dropped.max_flows_per_ip",
            Self::AccessDenied => "quic.dropped.access_denied",
            Self::RateLimited => "quic.dropped.rate_limited",
            Self::FlowBufferFull => "quic.dropped.flow_buffer_full",
            Self::BufferFull => "quic.dropped.buffer_full",
            Self::Rejected => "quic.dropped.rejected",
            Self::Refused => "quic.dropped.refused",
            Self::Closed => "quic.dropped.closed",
            Self::SendFailed => "quic.dropped.send_failed",
        }
    }
}

/// How a session ended: the access log's `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Routed by SNI/ALPN and piped.
    Routed,
    /// Piped to the listener's default cluster.
    Fallback(FallbackReason),
    /// Refused by the core.
    Rejected(RejectReason),
    /// Ended by the shell.
    Refused(RefuseReason),
    /// Closed before the client spoke and without a decision: a health
    /// check. Never logged, never counted as a reject.
    Silent,
}

impl Outcome {
    /// How a session that reached a backend ends: routed, or the fallback
    /// that sent it there.
    pub fn of_route(route: Option<&Route>) -> Self {
        match route.and_then(|r| r.fallback) {
            Some(reason) => Self::Fallback(reason),
            None => Self::Routed,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Routed => f.write_str("routed"),
            Self::Fallback(reason) => write!(f, "fallback:{reason}"),
            Self::Rejected(reason) => write!(f, "rejected:{reason}"),
            Self::Refused(reason) => write!(f, "refused:{reason}"),
            Self::Silent => f.write_str("silent"),
        }
    }
}

/// Counters and gauges registered at 0 when a worker starts: every name
/// without an id in it.
pub fn fixed_names() -> impl Iterator<Item = &'static str> {
    [
        SNI_PREREAD_ACTIVE,
        SNI_PREREAD_ROUTED,
        TCP_ACCEPTED,
        TCP_ACCEPT_EMFILE,
        TCP_ACTIVE,
        TCP_RESET_FROM_BACKEND,
        TCP_RESET_FROM_CLIENT,
        BACKEND_CONNECTIONS,
        BACKEND_CONNECT_ERRORS,
        BACKEND_CONNECT_LOCAL_ERRORS,
        BACKEND_CONNECT_RETRIES,
        BYTES_IN,
        BYTES_OUT,
        BUFFERS_IN_USE,
        SPLICE_BULK_PIPES,
        SPLICE_FALLBACKS,
        SPLICE_PIPES_CREATED,
        SPLICE_PIPES_GROWN,
        ACCESS_LOG_DROPPED,
        QUIC_FLOWS_ACTIVE,
        QUIC_DATAGRAMS_IN,
        QUIC_DATAGRAMS_OUT,
    ]
    .into_iter()
    .chain(RejectReason::ALL.map(rejected))
    .chain(FallbackReason::ALL.map(fallback))
    .chain(RefuseReason::ALL.map(RefuseReason::metric_name))
    .chain(QuicDrop::ALL.map(QuicDrop::metric_name))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use preread_core::{FallbackReason, RejectReason};

    use super::{Outcome, QuicDrop, RefuseReason, fallback, fixed_names, rejected};

    #[test]
    fn every_reject_reason_has_a_distinct_metric_name() {
        let names: HashSet<_> = RejectReason::ALL.map(rejected).into();
        assert_eq!(names.len(), RejectReason::ALL.len());
        for reason in RejectReason::ALL {
            let name = rejected(reason);
            match reason.as_str().strip_prefix("quic_") {
                Some(quic) => assert_eq!(name, format!("quic.rejected.{quic}")),
                None => assert_eq!(
                    name,
                    format!("tcp.sni_preread.rejected.{}", reason.as_str())
                ),
            }
        }
    }

    #[test]
    fn every_quic_drop_reason_has_a_distinct_name_and_metric() {
        let names: HashSet<_> = QuicDrop::ALL.map(QuicDrop::as_str).into();
        assert_eq!(names.len(), QuicDrop::ALL.len());
        for reason in QuicDrop::ALL {
            assert_eq!(reason.metric_name(), format!("quic.dropped.{reason}"));
        }
    }

    #[test]
    fn every_fallback_reason_has_a_distinct_metric_name() {
        let names: HashSet<_> = FallbackReason::ALL.map(fallback).into();
        assert_eq!(names.len(), FallbackReason::ALL.len());
        for reason in FallbackReason::ALL {
            assert_eq!(
                fallback(reason),
                format!("tcp.sni_preread.fallback.{}", reason.as_str())
            );
        }
    }

    #[test]
    fn every_refuse_reason_has_a_distinct_name_and_metric() {
        let names: HashSet<_> = RefuseReason::ALL.map(RefuseReason::as_str).into();
        let metrics: HashSet<_> = RefuseReason::ALL.map(RefuseReason::metric_name).into();
        assert_eq!(names.len(), RefuseReason::ALL.len());
        assert_eq!(metrics.len(), RefuseReason::ALL.len());
        for reason in RefuseReason::ALL {
            assert_eq!(reason.to_string(), reason.as_str());
            let metric = reason.metric_name();
            assert!(
                metric == format!("tcp.refused.{reason}") || metric == "session.loop_guard",
                "{metric}"
            );
        }
    }

    #[test]
    fn health_and_resolution_are_the_process_wide_names() {
        for name in [
            "backend.down",
            "backend.recovered",
            "backend.resolve.errors",
            &super::backend_up("alpha-0"),
        ] {
            assert!(super::is_process_wide(name), "{name}");
        }
        for name in fixed_names() {
            assert!(!super::is_process_wide(name), "{name}");
        }
        assert!(!super::is_process_wide("backend.alpha-0.connections"));
    }

    #[test]
    fn no_two_fixed_names_collide() {
        let all: Vec<_> = fixed_names().collect();
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(all.len(), distinct.len());
    }

    #[test]
    fn outcomes_read_as_the_access_log_writes_them() {
        assert_eq!(Outcome::Routed.to_string(), "routed");
        assert_eq!(
            Outcome::Fallback(FallbackReason::ServerFirst).to_string(),
            "fallback:server_first"
        );
        assert_eq!(
            Outcome::Rejected(RejectReason::TooLarge).to_string(),
            "rejected:too_large"
        );
        assert_eq!(
            Outcome::Refused(RefuseReason::PerIpLimit).to_string(),
            "refused:per_ip_limit"
        );
        assert_eq!(
            Outcome::Refused(RefuseReason::SilentTimeout).to_string(),
            "refused:silent_timeout"
        );
        assert_eq!(Outcome::of_route(None), Outcome::Routed);
    }
}
