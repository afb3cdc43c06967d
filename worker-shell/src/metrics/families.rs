//! The Prometheus families `GET /metrics` serves (doc/configure.md §5.4):
//! each family's name, type, labels, help line and, for a histogram, its
//! bucket bounds.
//!
//! Owns: the one table of families every other metrics module reads, so a
//! family cannot be served without its HELP line, labelled by a label it
//! does not declare, or documented apart from what is served. Must never:
//! name a label whose values come from the client (an SNI, an ALPN), or put
//! an id or a reason inside a family's name.

/// What a family's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up; its name ends in `_total`.
    Counter,
    /// Goes up and down, or is sampled.
    Gauge,
    /// Observations counted in buckets, with their sum and count.
    Histogram,
}

/// A label a family's series may carry. Its values come from the config
/// (ids, listener addresses) or from a fixed set, never from a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Label {
    /// The listener's address, as configured.
    Listener,
    /// A cluster id.
    Cluster,
    /// A backend id.
    Backend,
    /// A reject, fallback or refusal reason (fixed names).
    Reason,
    /// `in` (from clients) or `out` (to clients).
    Direction,
    /// The side that reset a piped session: `backend` or `client`.
    From,
    /// A worker's number.
    Worker,
    /// A route source's kind (`etcd`).
    Source,
}

impl Label {
    /// The label's name in the exposition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Listener => "listener",
            Self::Cluster => "cluster",
            Self::Backend => "backend",
            Self::Reason => "reason",
            Self::Direction => "direction",
            Self::From => "from",
            Self::Worker => "worker",
            Self::Source => "source",
        }
    }
}

/// Duration buckets in microseconds (the recorded unit), served in
/// seconds. The millisecond bounds of `metrics get` (1 ms … 10 s) are all
/// among them, so its flat histogram is read off these exactly.
pub const DURATION_BOUNDS_US: &[u64] = &[
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// ClientHello size buckets in bytes: a classic hello is under 512 bytes,
/// a post-quantum one about 1,800, and the default read cap is 65,536.
pub const HELLO_BOUNDS: &[u64] = &[
    256, 512, 1_024, 1_536, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536,
];

/// Every family, in the order served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    ConnectionsAccepted,
    ConnectionsActive,
    ConnectionsRefused,
    ConnectionsReset,
    AcceptDescriptorErrors,
    PrereadActive,
    PrereadRouted,
    PrereadFallback,
    PrereadRejected,
    PrereadDuration,
    ClientHelloBytes,
    ClientBytes,
    ClusterBytes,
    BackendConnections,
    BackendConnectErrors,
    BackendConnectRetries,
    BackendConnectLocalErrors,
    BackendUp,
    BackendBytes,
    BackendDown,
    BackendRecovered,
    BackendResolveErrors,
    SplicePipesCreated,
    SplicePipesGrown,
    SpliceFallbacks,
    BuffersInUse,
    SpliceBulkPipes,
    AccessLogDropped,
    WorkerConnectionsActive,
    ConfigGeneration,
    SourceRevision,
    SourceConnected,
    QuicFlowsActive,
    QuicDatagrams,
    QuicDroppedDatagrams,
}

impl Family {
    /// Every family, in the order served and documented.
    pub const ALL: [Self; 35] = [
        Self::ConnectionsAccepted,
        Self::ConnectionsActive,
        Self::ConnectionsRefused,
        Self::ConnectionsReset,
        Self::AcceptDescriptorErrors,
        Self::PrereadActive,
        Self::PrereadRouted,
        Self::PrereadFallback,
        Self::PrereadRejected,
        Self::PrereadDuration,
        Self::ClientHelloBytes,
        Self::ClientBytes,
        Self::ClusterBytes,
        Self::BackendConnections,
        Self::BackendConnectErrors,
        Self::BackendConnectRetries,
        Self::BackendConnectLocalErrors,
        Self::BackendUp,
        Self::BackendBytes,
        Self::BackendDown,
        Self::BackendRecovered,
        Self::BackendResolveErrors,
        Self::SplicePipesCreated,
        Self::SplicePipesGrown,
        Self::SpliceFallbacks,
        Self::BuffersInUse,
        Self::SpliceBulkPipes,
        Self::AccessLogDropped,
        Self::WorkerConnectionsActive,
        Self::ConfigGeneration,
        Self::SourceRevision,
        Self::SourceConnected,
        Self::QuicFlowsActive,
        Self::QuicDatagrams,
        Self::QuicDroppedDatagrams,
    ];

    /// The family's name as served (a counter's with its `_total`).
    pub fn name(self) -> &'static str {
        match self {
            Self::ConnectionsAccepted => "preread_connections_accepted_total",
            Self::ConnectionsActive => "preread_connections_active",
            Self::ConnectionsRefused => "preread_connections_refused_total",
            Self::ConnectionsReset => "preread_connections_reset_total",
            Self::AcceptDescriptorErrors => "preread_accept_descriptor_errors_total",
            Self::PrereadActive => "preread_preread_active",
            Self::PrereadRouted => "preread_preread_routed_total",
            Self::PrereadFallback => "preread_preread_fallback_total",
            Self::PrereadRejected => "preread_preread_rejected_total",
            Self::PrereadDuration => "preread_preread_duration_seconds",
            Self::ClientHelloBytes => "preread_client_hello_bytes",
            Self::ClientBytes => "preread_client_bytes_total",
            Self::ClusterBytes => "preread_cluster_bytes_total",
            Self::BackendConnections => "preread_backend_connections",
            Self::BackendConnectErrors => "preread_backend_connect_errors_total",
            Self::BackendConnectRetries => "preread_backend_connect_retries_total",
            Self::BackendConnectLocalErrors => "preread_backend_connect_local_errors_total",
            Self::BackendUp => "preread_backend_up",
            Self::BackendBytes => "preread_backend_bytes_total",
            Self::BackendDown => "preread_backend_down_total",
            Self::BackendRecovered => "preread_backend_recovered_total",
            Self::BackendResolveErrors => "preread_backend_resolve_errors_total",
            Self::SplicePipesCreated => "preread_splice_pipes_created_total",
            Self::SplicePipesGrown => "preread_splice_pipes_grown_total",
            Self::SpliceFallbacks => "preread_splice_fallbacks_total",
            Self::BuffersInUse => "preread_buffers_in_use",
            Self::SpliceBulkPipes => "preread_splice_bulk_pipes",
            Self::AccessLogDropped => "preread_access_log_dropped_total",
            Self::WorkerConnectionsActive => "preread_worker_connections_active",
            Self::ConfigGeneration => "preread_config_generation",
            Self::SourceRevision => "preread_source_revision",
            Self::SourceConnected => "preread_source_connected",
            Self::QuicFlowsActive => "preread_quic_flows_active",
            Self::QuicDatagrams => "preread_quic_datagrams_total",
            Self::QuicDroppedDatagrams => "preread_quic_dropped_datagrams_total",
        }
    }

    /// The family named `name`, as served.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|family| family.name() == name)
    }

    /// The family's type.
    pub fn kind(self) -> Kind {
        match self {
            Self::ConnectionsActive
            | Self::PrereadActive
            | Self::BackendConnections
            | Self::BackendUp
            | Self::BuffersInUse
            | Self::SpliceBulkPipes
            | Self::WorkerConnectionsActive
            | Self::ConfigGeneration
            | Self::SourceRevision
            | Self::SourceConnected
            | Self::QuicFlowsActive => Kind::Gauge,
            Self::PrereadDuration | Self::ClientHelloBytes => Kind::Histogram,
            Self::ConnectionsAccepted
            | Self::ConnectionsRefused
            | Self::ConnectionsReset
            | Self::AcceptDescriptorErrors
            | Self::PrereadRouted
            | Self::PrereadFallback
            | Self::PrereadRejected
            | Self::ClientBytes
            | Self::ClusterBytes
            | Self::BackendConnectErrors
            | Self::BackendConnectRetries
            | Self::BackendConnectLocalErrors
            | Self::BackendBytes
            | Self::BackendDown
            | Self::BackendRecovered
            | Self::BackendResolveErrors
            | Self::SplicePipesCreated
            | Self::SplicePipesGrown
            | Self::SpliceFallbacks
            | Self::AccessLogDropped
            | Self::QuicDatagrams
            | Self::QuicDroppedDatagrams => Kind::Counter,
        }
    }

    /// The labels every series of the family carries, in order.
    pub fn labels(self) -> &'static [Label] {
        use Label::{Backend, Cluster, Direction, From, Listener, Reason, Worker};
        match self {
            Self::ConnectionsAccepted
            | Self::ConnectionsActive
            | Self::AcceptDescriptorErrors
            | Self::PrereadActive
            | Self::PrereadDuration
            | Self::ClientHelloBytes
            | Self::QuicFlowsActive => &[Listener],
            Self::ConnectionsRefused
            | Self::PrereadFallback
            | Self::PrereadRejected
            | Self::QuicDroppedDatagrams => &[Listener, Reason],
            Self::ConnectionsReset => &[Listener, From],
            Self::PrereadRouted => &[Listener, Cluster],
            Self::ClientBytes | Self::QuicDatagrams => &[Listener, Direction],
            Self::ClusterBytes => &[Cluster, Direction],
            Self::BackendConnections
            | Self::BackendConnectErrors
            | Self::BackendConnectRetries
            | Self::BackendUp => &[Cluster, Backend],
            Self::BackendBytes => &[Cluster, Backend, Direction],
            Self::WorkerConnectionsActive => &[Worker],
            Self::BackendConnectLocalErrors
            | Self::BackendDown
            | Self::BackendRecovered
            | Self::BackendResolveErrors
            | Self::SplicePipesCreated
            | Self::SplicePipesGrown
            | Self::SpliceFallbacks
            | Self::BuffersInUse
            | Self::SpliceBulkPipes
            | Self::AccessLogDropped
            | Self::ConfigGeneration => &[],
            Self::SourceRevision | Self::SourceConnected => &[Label::Source],
        }
    }

    /// A histogram's bucket bounds in its recorded unit, and how many of
    /// that unit make one served base unit; `None` for a counter or a
    /// gauge. (Dividing, not multiplying by 1e-6, serves `0.0001`, not
    /// `9.999999999999999e-05`.)
    pub fn histogram(self) -> Option<(&'static [u64], f64)> {
        match self {
            Self::PrereadDuration => Some((DURATION_BOUNDS_US, 1e6)),
            Self::ClientHelloBytes => Some((HELLO_BOUNDS, 1.0)),
            _ => None,
        }
    }

    /// The family's `# HELP` line.
    pub fn help(self) -> &'static str {
        match self {
            Self::ConnectionsAccepted => "Connections accepted, before the admission checks.",
            Self::ConnectionsActive => "Open sessions.",
            Self::ConnectionsRefused => {
                "Connections the proxy refused or ended itself, by reason (not a client's fault)."
            }
            Self::ConnectionsReset => {
                "Piped sessions reset by one side; the proxy reset the other side too."
            }
            Self::AcceptDescriptorErrors => {
                "Accepts that failed for lack of file descriptors (EMFILE, ENFILE)."
            }
            Self::PrereadActive => "Sessions reading their ClientHello.",
            Self::PrereadRouted => "Connections routed by SNI and ALPN, by cluster.",
            Self::PrereadFallback => {
                "Connections sent to the listener's default cluster, by reason."
            }
            Self::PrereadRejected => "Connections refused at the ClientHello, by reason.",
            Self::PrereadDuration => "Time from the first byte of a connection to its decision.",
            Self::ClientHelloBytes => {
                "Size of the TLS records carrying a parsed ClientHello, headers included."
            }
            Self::ClientBytes => "Bytes from clients (in) and to clients (out).",
            Self::ClusterBytes => "Bytes of the sessions routed to a cluster, by direction.",
            Self::BackendConnections => "Sessions piped to a backend.",
            Self::BackendConnectErrors => {
                "Backend connects that failed (refused, reset, timed out)."
            }
            Self::BackendConnectRetries => "Connects to a further backend after a failed one.",
            Self::BackendConnectLocalErrors => {
                "Backend sockets this host could not open for lack of its own resources."
            }
            Self::BackendUp => "Instances of a backend that are up (0: the backend is down).",
            Self::BackendBytes => "Bytes of the sessions piped to a backend, by direction.",
            Self::BackendDown => "Backend instances marked down (passive or active health).",
            Self::BackendRecovered => "Backend instances that came back up.",
            Self::BackendResolveErrors => "Resolutions of a named backend that failed.",
            Self::SplicePipesCreated => "Kernel pipes created for splicing (the rest were reused).",
            Self::SplicePipesGrown => {
                "Kernel pipes grown to splice_bulk_pipe_size for a bulk transfer."
            }
            Self::SpliceFallbacks => "Directions that fell back from splice to copying.",
            Self::BuffersInUse => "Pooled buffers checked out (max_buffers bounds them).",
            Self::SpliceBulkPipes => {
                "Kernel pipes grown for a bulk transfer, held now (splice_bulk_budget bounds them)."
            }
            Self::AccessLogDropped => {
                "Access-log entries dropped because the writer's queue was full."
            }
            Self::WorkerConnectionsActive => "Open sessions of each worker.",
            Self::ConfigGeneration => "Routing generations committed since the start.",
            Self::SourceRevision => "The store revision whose routes are served (etcd).",
            Self::SourceConnected => "1 while a member of the store answers the watch, else 0.",
            Self::QuicFlowsActive => "QUIC flows open (undecided or relaying).",
            Self::QuicDatagrams => {
                "QUIC datagrams from clients (in) and to clients (out), dropped ones included."
            }
            Self::QuicDroppedDatagrams => {
                "QUIC datagrams from clients or backends that were not passed on, by reason."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{Family, Kind, Label};

    #[test]
    fn names_are_distinct_and_follow_the_conventions() {
        let names: HashSet<_> = Family::ALL.map(Family::name).into();
        assert_eq!(names.len(), Family::ALL.len());
        for family in Family::ALL {
            let name = family.name();
            assert!(name.starts_with("preread_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert_eq!(
                family.kind() == Kind::Counter,
                name.ends_with("_total"),
                "{name}: counters and only counters end in _total"
            );
            assert_eq!(
                family.kind() == Kind::Histogram,
                family.histogram().is_some(),
                "{name}"
            );
            assert!(!family.help().is_empty(), "{name}");
            assert_eq!(Family::from_name(name), Some(family));
        }
    }

    #[test]
    fn histogram_bounds_rise_and_labels_are_never_repeated() {
        for family in Family::ALL {
            if let Some((bounds, _)) = family.histogram() {
                assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{family:?}");
            }
            let labels: HashSet<&Label> = family.labels().iter().collect();
            assert_eq!(labels.len(), family.labels().len(), "{family:?}");
        }
    }
}
