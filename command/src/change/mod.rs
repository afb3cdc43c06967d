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

use ipnet::IpNet;
use preread_core::access::{DEFAULT_IPV6_PREFIX, Rate};
use preread_core::pattern::SniPattern;
use preread_parser::tls::Ja4;

use crate::backend_address::BackendAddress;
use crate::proto::{LoadBalancing, ProxyProtocol, RejectWith};

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
    /// Who may connect, checked at accept.
    pub access: AccessSettings,
}

/// Who may connect to a listener or use a cluster, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSettings {
    /// When not empty, only these sources are admitted.
    pub allow: Vec<IpNet>,
    /// Sources refused, whatever `allow` says.
    pub deny: Vec<IpNet>,
    /// New connections per source, for the whole process.
    pub connection_rate_per_ip: Option<Rate>,
    /// The prefix length an IPv6 source is counted under.
    pub ipv6_prefix: u8,
    /// JA4 fingerprints refused, sorted, without duplicates.
    pub deny_ja4: Vec<Ja4>,
}

impl Default for AccessSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            connection_rate_per_ip: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            deny_ja4: Vec::new(),
        }
    }
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
    /// Who may use it, checked once routed.
    pub access: AccessSettings,
}

/// A frontend: its key (address, SNI pattern, ALPN list), its cluster and
/// its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendSettings {
    /// The listener it routes on.
    pub address: SocketAddr,
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
    RemoveListener(SocketAddr),
    /// A listener starts listening.
    ActivateListener(SocketAddr),
    /// A listener stops listening, keeping its settings and routes.
    DeactivateListener(SocketAddr),
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
    pub fn routed_at(&self) -> Option<SocketAddr> {
        match self {
            Self::AddFrontend(frontend) | Self::RemoveFrontend(frontend)
                if frontend.sni.is_some() =>
            {
                Some(frontend.address)
            }
            _ => None,
        }
    }

    /// The address at which the change may start listening.
    #[must_use]
    pub fn opened_at(&self) -> Option<SocketAddr> {
        match self {
            Self::AddListener { settings, .. } | Self::UpdateListener { settings, .. } => {
                Some(settings.address)
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
