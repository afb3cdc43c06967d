//! Clusters, frontends and backends in the canonical form the state
//! stores: ids and enum values checked, defaults resolved, a frontend's
//! address, SNI pattern and ALPN list normalized into its key.
//!
//! Must never: look at the state (a frontend's cluster must exist:
//! [`crate::state`] checks that).

use core::fmt;
use std::net::SocketAddr;

use preread_core::pattern::{SniPattern, validate_sni_pattern};
use preread_core::routes::AlpnSet;

use super::access::{AccessFields, resolve_access};
use super::{DEFAULT_WEIGHT, parse_address_of, validate_id};
use crate::backend_address::BackendAddress;
use crate::codes::ErrorCode;
use crate::health_check::resolve_health_check;
use crate::listener_key::{ListenerKey, is_quic};
use crate::proto;
use crate::spelling;
use crate::validation_error::ValidationError;

/// The cluster with its enum values checked and its health check's
/// defaults resolved: the form the state stores.
pub(crate) fn resolve_cluster(cluster: &proto::Cluster) -> Result<proto::Cluster, ValidationError> {
    check_cluster(cluster)?;
    let health_check = match &cluster.health_check {
        Some(check) => Some(resolve_health_check(&cluster.cluster_id, check)?),
        None => None,
    };
    let what = format!("cluster `{}`", cluster.cluster_id);
    let access = resolve_access(&what, AccessFields::of_cluster(cluster))?;
    let mut resolved = proto::Cluster {
        health_check,
        // TCP is the default: stored unset, as before QUIC existed.
        protocol: is_quic_cluster(cluster).then_some(proto::ListenerProtocol::Quic as i32),
        ..cluster.clone()
    };
    access.write_cluster(&mut resolved);
    Ok(resolved)
}

/// The cluster with its enum values checked.
fn check_cluster(cluster: &proto::Cluster) -> Result<(), ValidationError> {
    validate_id("cluster", &cluster.cluster_id)?;
    let id = &cluster.cluster_id;
    if proto::LoadBalancing::try_from(cluster.load_balancing).is_err() {
        return Err(ValidationError::new(
            ErrorCode::InvalidValue,
            format!(
                "cluster `{id}`: load_balancing {} is unknown: use round_robin (0), random (1), \
                 least_connections (2) or power_of_two (3)",
                cluster.load_balancing
            ),
        ));
    }
    if let Some(protocol) = cluster.protocol {
        if proto::ListenerProtocol::try_from(protocol).is_err() {
            return Err(ValidationError::new(
                ErrorCode::InvalidValue,
                format!("cluster `{id}`: protocol {protocol} is unknown: use tcp (0) or quic (1)"),
            ));
        }
    }
    if is_quic_cluster(cluster) {
        let tcp_only = [
            ("proxy_protocol", cluster.proxy_protocol != 0),
            ("health_check", cluster.health_check.is_some()),
        ];
        if let Some((key, _)) = tcp_only.iter().find(|(_, set)| *set) {
            return Err(ValidationError::new(
                ErrorCode::QuicClusterSetting,
                format!(
                    "cluster `{id}`: {key} applies to TCP clusters only: remove it from this \
                     QUIC cluster"
                ),
            ));
        }
    }
    if proto::ProxyProtocol::try_from(cluster.proxy_protocol).is_err() {
        return Err(ValidationError::new(
            ErrorCode::InvalidValue,
            format!(
                "cluster `{id}`: proxy_protocol {} is unknown: use none (0), send (1) or relay (2)",
                cluster.proxy_protocol
            ),
        ));
    }
    Ok(())
}

/// Whether the cluster's backends are QUIC servers.
#[must_use]
pub fn is_quic_cluster(cluster: &proto::Cluster) -> bool {
    cluster.protocol == Some(proto::ListenerProtocol::Quic as i32)
}

/// Whether the cluster relays the client's PROXY header (and so needs
/// listeners with `expect_proxy`).
pub(crate) fn is_relay(cluster: &proto::Cluster) -> bool {
    cluster.proxy_protocol == proto::ProxyProtocol::Relay as i32
}

/// The key of a frontend: the canonical address, its protocol (its
/// cluster's, which picks the listener of that address), SNI pattern (none
/// for the listener's catch-all) and ALPN set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FrontendKey {
    pub(crate) address: SocketAddr,
    pub(crate) quic: bool,
    pub(crate) sni: Option<SniPattern>,
    pub(crate) alpn: AlpnSet,
}

impl FrontendKey {
    /// The smallest key of a listener, to start a range over its frontends.
    pub(crate) fn first_of(listener: ListenerKey) -> Self {
        Self {
            address: listener.address,
            quic: listener.quic,
            sni: None,
            alpn: AlpnSet::Any,
        }
    }

    /// The listener it routes on.
    pub(crate) fn listener(&self) -> ListenerKey {
        ListenerKey {
            address: self.address,
            quic: self.quic,
        }
    }
}

/// `frontend (127.0.0.1:8443, sni a.example.com, alpn [h2])`.
impl fmt::Display for FrontendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let protocol = if self.quic { "quic " } else { "" };
        write!(f, "{protocol}frontend ({}, ", self.address)?;
        match &self.sni {
            Some(sni) => write!(f, "sni {sni}")?,
            None => f.write_str("no sni")?,
        }
        write!(f, ", alpn {})", self.alpn)
    }
}

/// Validates a frontend's key and returns it with the canonical frontend
/// (address as `SocketAddr` prints it, normalized pattern, sorted ALPN).
/// Refuses a bad address, pattern or ALPN list, and an ALPN list without
/// SNI.
pub(crate) fn resolve_frontend(
    frontend: &proto::TcpFrontend,
) -> Result<(FrontendKey, proto::TcpFrontend), ValidationError> {
    let key = frontend_key(frontend)?;
    let mut protocols = frontend.alpn.clone();
    protocols.sort_unstable();
    let canonical = proto::TcpFrontend {
        cluster_id: frontend.cluster_id.clone(),
        address: key.address.to_string(),
        sni: key.sni.as_ref().map(ToString::to_string),
        alpn: protocols,
        tags: frontend.tags.clone(),
        protocol: key.listener().protocol_field(),
    };
    Ok((key, canonical))
}

/// The key of a frontend, checked as [`resolve_frontend`] checks it,
/// without building the canonical request: what the state keeps of a
/// frontend it adds (the cluster and tags come from the request as they
/// are), at a tenth of the cost at 100,000 routes.
pub(crate) fn frontend_key(frontend: &proto::TcpFrontend) -> Result<FrontendKey, ValidationError> {
    let what = || {
        let sni = frontend.sni.as_deref().map_or_else(
            || "no sni".to_owned(),
            |sni| format!("sni {}", spelling::quoted(sni)),
        );
        let alpn = if frontend.alpn.is_empty() {
            "any".to_owned()
        } else {
            let names: Vec<String> = frontend.alpn.iter().map(|p| spelling::quoted(p)).collect();
            format!("[{}]", names.join(", "))
        };
        format!(
            "frontend ({}, {sni}, alpn {alpn}) of cluster `{}`",
            frontend.address, frontend.cluster_id
        )
    };
    let address = parse_address_of(what, &frontend.address)?;
    // `what` is built only for an error: 100,000 frontends at a boot.
    let quic = frontend.protocol.is_some() && is_quic(&what(), frontend.protocol)?;
    let sni = match &frontend.sni {
        None => None,
        Some(sni) => Some(validate_sni_pattern(sni).map_err(|e| {
            ValidationError::new(ErrorCode::InvalidSniPattern, format!("{}: {e}", what()))
        })?),
    };
    let alpn = if frontend.alpn.is_empty() {
        AlpnSet::Any
    } else {
        AlpnSet::protocols(&frontend.alpn)
            .map_err(|e| ValidationError::new(ErrorCode::InvalidAlpn, format!("{}: {e}", what())))?
    };
    if sni.is_none() && alpn != AlpnSet::Any {
        return Err(ValidationError::new(
            ErrorCode::AlpnWithoutSni,
            format!(
                "{}: a frontend without sni takes every connection without reading the \
                 ClientHello, so it cannot match ALPN: add an sni pattern, or remove the alpn list",
                what()
            ),
        ));
    }
    Ok(FrontendKey {
        address,
        quic,
        sni,
        alpn,
    })
}

/// The backend with its ids and address checked, its address canonical
/// (an `ip:port` as `SocketAddr` prints it, or a lowercase `name:port`)
/// and its weight and `max_connections` resolved.
pub(crate) fn resolve_backend(backend: &proto::Backend) -> Result<proto::Backend, ValidationError> {
    validate_id("backend", &backend.backend_id)?;
    let what = format!(
        "backend `{}` of cluster `{}`",
        backend.backend_id, backend.cluster_id
    );
    let address = BackendAddress::parse(&what, &backend.address)?;
    Ok(proto::Backend {
        cluster_id: backend.cluster_id.clone(),
        backend_id: backend.backend_id.clone(),
        address: address.to_string(),
        weight: Some(backend.weight.unwrap_or(DEFAULT_WEIGHT)),
        backup: backend.backup,
        max_connections: Some(backend.max_connections.unwrap_or(0)),
    })
}
