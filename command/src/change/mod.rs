//! The typed change model: one accepted state change, with its addresses,
//! ids and settings already parsed, checked and resolved.
//!
//! Owns: [`Change`] and the settings it carries, [`Change::from_request`]
//! (the one place a command request becomes a change: the edge) and
//! [`Change::to_request`] (the way back, for the wire, the journal and
//! the state, which stores the wire form because the state file is the
//! wire form). Must never: hold a value that still needs parsing (an
//! address as text, an enum as its number), or a default left unresolved;
//! a worker applies a change as it is, and only the state judges it.
//!
//! A change round-trips: `from_request(&change.to_request())` is the same
//! change, and the state it builds is the one the request built (the
//! property tests in `tests/state_props.rs` check both).

mod from_request;
mod to_request;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use preread_core::pattern::SniPattern;

use crate::backend_address::BackendAddress;
use crate::listener_key::ListenerKey;
use crate::proto::{LoadBalancing, ProxyProtocol, RejectWith};
pub use crate::validate::AccessSettings;

/// A listener's settings, every default resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// Where it listens.
    pub address: SocketAddr,
    /// Whether connections start with a PROXY protocol header.
    pub expect_proxy: bool,
    /// How long the ClientHello may take to arrive.
    pub preread_timeout: Duration,
    /// The most bytes the preread holds.
    pub preread_max_bytes: u32,
    /// Where a connection no frontend takes goes.
    pub default_cluster: Option<String>,
    /// How long to wait for a first byte before routing to the default
    /// cluster (server-first protocols).
    pub server_first_timeout: Option<Duration>,
    /// Idle timeout towards the client.
    pub front_timeout: Duration,
    /// Idle timeout towards the backend.
    pub back_timeout: Duration,
    /// How long a backend connection may take.
    pub connect_timeout: Duration,
    /// How an unrouted connection is refused.
    pub reject_with: RejectWith,
    /// Connections one client IP may hold before routing; 0 is none.
    pub max_unrouted_per_ip: u32,
    /// A QUIC listener's own settings; `None` for a TCP listener.
    pub quic: Option<QuicSettings>,
    /// Who may connect, checked at accept.
    pub access: AccessSettings,
}

/// A QUIC listener's settings, every default resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicSettings {
    /// From a flow's first datagram to the decision.
    pub preread_timeout: Duration,
    /// A flow with no datagram either way for this long is forgotten.
    pub idle_timeout: Duration,
    /// Flows open at once on the listener, for the whole process; 0 is
    /// no limit.
    pub max_flows: u32,
    /// Flows one client IP may hold on the listener, for the whole
    /// process; 0 is no limit.
    pub max_flows_per_ip: u32,
}

/// An active health check's resolved settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheckSettings {
    /// A TLS handshake rather than a TCP connect.
    pub tls: bool,
    /// Time between two checks.
    pub interval: Duration,
    /// How long one check may take.
    pub timeout: Duration,
    /// Successes that bring a backend back (at least 1).
    pub rise: u32,
    /// Failures that take a backend out (at least 1).
    pub fall: u32,
}

/// A cluster's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Its id.
    pub id: String,
    /// How a backend is picked.
    pub load_balancing: LoadBalancing,
    /// Whether a PROXY protocol header is sent or relayed.
    pub proxy_protocol: ProxyProtocol,
    /// Open connections one client IP may hold; 0 is no limit.
    pub max_connections_per_ip: u32,
    /// The active health check, if any.
    pub health_check: Option<HealthCheckSettings>,
    /// Its backends are QUIC servers (UDP), reached from QUIC listeners.
    pub quic: bool,
    /// Who may use it, checked once routed.
    pub access: AccessSettings,
}

/// A frontend: its key (address, protocol, SNI pattern, ALPN list), its
/// cluster and its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendSettings {
    /// The address of the listener it routes on.
    pub address: SocketAddr,
    /// Its cluster is a QUIC one, so it routes on the QUIC listener at
    /// `address`.
    pub quic: bool,
    /// The names it takes; none for the listener's catch-all.
    pub sni: Option<SniPattern>,
    /// The protocols it serves, sorted; empty for any.
    pub alpn: Vec<String>,
    /// The cluster it routes to.
    pub cluster_id: String,
    /// The operator's tags.
    pub tags: BTreeMap<String, String>,
}

/// A backend's settings, every default resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSettings {
    /// The cluster it serves.
    pub cluster_id: String,
    /// Its id, unique across clusters.
    pub backend_id: String,
    /// Where it listens.
    pub address: BackendAddress,
    /// Its share of the picks.
    pub weight: u32,
    /// Picked only when no other backend can be.
    pub backup: bool,
    /// The most connections it takes at once; 0 is no limit.
    pub max_connections: u32,
}

/// Which backend a removal names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendRef {
    /// The cluster it serves.
    pub cluster_id: String,
    /// Its id.
    pub backend_id: String,
    /// Where it listens.
    pub address: BackendAddress,
}

/// One accepted state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new listener, active or not.
    AddListener {
        /// Its settings.
        settings: ListenerSettings,
        /// Whether it listens.
        active: bool,
    },
    /// Every setting of a listener; `active` unset keeps its activation.
    UpdateListener {
        /// Its new settings.
        settings: ListenerSettings,
        /// Its activation, when the update sets it.
        active: Option<bool>,
    },
    /// A listener goes (it has no frontend left).
    RemoveListener(ListenerKey),
    /// A listener starts listening.
    ActivateListener(ListenerKey),
    /// A listener stops listening, keeping its settings and routes.
    DeactivateListener(ListenerKey),
    /// A new cluster.
    AddCluster(ClusterSettings),
    /// A cluster's settings, its backends and routes kept.
    UpdateCluster(ClusterSettings),
    /// A cluster goes (nothing uses it any more).
    RemoveCluster(String),
    /// A new frontend.
    AddFrontend(FrontendSettings),
    /// A frontend goes.
    RemoveFrontend(FrontendSettings),
    /// A new backend.
    AddBackend(BackendSettings),
    /// A backend's settings, in place.
    UpdateBackend(BackendSettings),
    /// A backend goes.
    RemoveBackend(BackendRef),
}

impl Change {
    /// The listener whose route table the change alters: that of a
    /// frontend with an SNI pattern.
    #[must_use]
    pub fn routed_at(&self) -> Option<ListenerKey> {
        match self {
            Self::AddFrontend(frontend) | Self::RemoveFrontend(frontend)
                if frontend.sni.is_some() =>
            {
                Some(frontend.listener())
            }
            _ => None,
        }
    }

    /// The listener the change may start.
    #[must_use]
    pub fn opened_at(&self) -> Option<ListenerKey> {
        match self {
            Self::AddListener { settings, .. } | Self::UpdateListener { settings, .. } => {
                Some(settings.key())
            }
            Self::ActivateListener(address) => Some(*address),
            _ => None,
        }
    }

    /// The cluster the change is about, if one.
    #[must_use]
    pub fn cluster(&self) -> Option<&str> {
        match self {
            Self::AddCluster(cluster) | Self::UpdateCluster(cluster) => Some(&cluster.id),
            Self::RemoveCluster(id) => Some(id),
            Self::AddFrontend(frontend) | Self::RemoveFrontend(frontend) => {
                Some(&frontend.cluster_id)
            }
            Self::AddBackend(backend) | Self::UpdateBackend(backend) => Some(&backend.cluster_id),
            Self::RemoveBackend(backend) => Some(&backend.cluster_id),
            Self::AddListener { .. }
            | Self::UpdateListener { .. }
            | Self::RemoveListener(_)
            | Self::ActivateListener(_)
            | Self::DeactivateListener(_) => None,
        }
    }
}

impl ListenerSettings {
    /// What names the listener: its address and protocol.
    #[must_use]
    pub fn key(&self) -> ListenerKey {
        ListenerKey {
            address: self.address,
            quic: self.quic.is_some(),
        }
    }
}

impl FrontendSettings {
    /// The listener it routes on.
    #[must_use]
    pub fn listener(&self) -> ListenerKey {
        ListenerKey {
            address: self.address,
            quic: self.quic,
        }
    }
}
