//! A command request as a [`Change`]: parsed, checked and resolved once.
//!
//! Owns: [`Change::from_request`]. Must never: accept what the state's own
//! resolution refuses (it calls the same `resolve_*` rules), or consult
//! the state: whether a change fits the state is the state's to judge.

use std::time::Duration;

use super::{
    BackendRef, BackendSettings, Change, ClusterSettings, FrontendSettings, HealthCheckSettings,
    ListenerSettings, QuicSettings,
};
use crate::backend_address::BackendAddress;
use crate::codes::ErrorCode;
use crate::health_check::{DEFAULT_FALL, DEFAULT_INTERVAL_MS, DEFAULT_RISE, DEFAULT_TIMEOUT_MS};
use crate::listener_key::ListenerKey;
use crate::proto::{self, request::RequestType};
use crate::validate::{
    AccessFields, DEFAULT_MAX_FLOWS, DEFAULT_QUIC_IDLE_TIMEOUT_MS, DEFAULT_QUIC_PREREAD_TIMEOUT_MS,
    DEFAULT_SNI_PREREAD_MAX_BYTES, DEFAULT_SNI_PREREAD_TIMEOUT_MS, DEFAULT_WEIGHT, ValidationError,
    back_timeout, connect_timeout, front_timeout, is_quic_cluster, is_quic_listener,
    resolve_access, resolve_backend, resolve_cluster, resolve_frontend, resolve_listener,
    validate_id,
};

fn millis(value: u32) -> Duration {
    Duration::from_millis(u64::from(value))
}

fn listener(config: &proto::TcpListenerConfig) -> Result<ListenerSettings, ValidationError> {
    let (key, resolved) = resolve_listener(config)?;
    let address = key.address;
    Ok(ListenerSettings {
        address,
        expect_proxy: resolved.expect_proxy,
        preread_timeout: millis(
            resolved
                .sni_preread_timeout
                .unwrap_or(DEFAULT_SNI_PREREAD_TIMEOUT_MS),
        ),
        preread_max_bytes: resolved
            .sni_preread_max_bytes
            .unwrap_or(DEFAULT_SNI_PREREAD_MAX_BYTES),
        default_cluster: resolved.default_cluster.clone(),
        server_first_timeout: resolved.server_first_timeout.map(millis),
        front_timeout: front_timeout(&resolved),
        back_timeout: back_timeout(&resolved),
        connect_timeout: connect_timeout(&resolved),
        reject_with: resolved.reject_with(),
        max_unrouted_per_ip: resolved.max_unrouted_per_ip.unwrap_or(0),
        quic: is_quic_listener(&resolved).then(|| QuicSettings {
            preread_timeout: Duration::from_millis(
                resolved
                    .quic_preread_timeout_ms
                    .unwrap_or(DEFAULT_QUIC_PREREAD_TIMEOUT_MS),
            ),
            idle_timeout: Duration::from_millis(
                resolved
                    .quic_idle_timeout_ms
                    .unwrap_or(DEFAULT_QUIC_IDLE_TIMEOUT_MS),
            ),
            max_flows: resolved.max_flows.unwrap_or(DEFAULT_MAX_FLOWS),
            max_flows_per_ip: resolved.max_flows_per_ip.unwrap_or(0),
        }),
        access: resolve_access(
            &format!("listener {key}"),
            AccessFields::of_listener(&resolved),
        )?,
    })
}

fn cluster(cluster: &proto::Cluster) -> Result<ClusterSettings, ValidationError> {
    let resolved = resolve_cluster(cluster)?;
    let access = resolve_access(
        &format!("cluster `{}`", resolved.cluster_id),
        AccessFields::of_cluster(&resolved),
    )?;
    Ok(ClusterSettings {
        access,
        load_balancing: resolved.load_balancing(),
        proxy_protocol: resolved.proxy_protocol(),
        max_connections_per_ip: resolved.max_connections_per_ip,
        health_check: resolved
            .health_check
            .as_ref()
            .map(|check| HealthCheckSettings {
                tls: check.kind() == proto::HealthCheckKind::Tls,
                interval: millis(check.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS)),
                timeout: millis(check.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
                rise: check.rise.unwrap_or(DEFAULT_RISE),
                fall: check.fall.unwrap_or(DEFAULT_FALL),
            }),
        quic: is_quic_cluster(&resolved),
        id: resolved.cluster_id,
    })
}

fn frontend(frontend: &proto::TcpFrontend) -> Result<FrontendSettings, ValidationError> {
    let (key, canonical) = resolve_frontend(frontend)?;
    Ok(FrontendSettings {
        address: key.address,
        quic: key.quic,
        sni: key.sni,
        alpn: canonical.alpn,
        cluster_id: canonical.cluster_id,
        tags: canonical.tags,
    })
}

fn backend_address(
    cluster_id: &str,
    backend_id: &str,
    address: &str,
) -> Result<BackendAddress, ValidationError> {
    BackendAddress::parse(
        &format!("backend `{backend_id}` of cluster `{cluster_id}`"),
        address,
    )
}

fn backend(backend: &proto::Backend) -> Result<BackendSettings, ValidationError> {
    let resolved = resolve_backend(backend)?;
    Ok(BackendSettings {
        address: backend_address(
            &resolved.cluster_id,
            &resolved.backend_id,
            &resolved.address,
        )?,
        weight: resolved.weight.unwrap_or(DEFAULT_WEIGHT),
        backup: resolved.backup,
        max_connections: resolved.max_connections.unwrap_or(0),
        cluster_id: resolved.cluster_id,
        backend_id: resolved.backend_id,
    })
}

fn backend_ref(backend: &proto::BackendRef) -> Result<BackendRef, ValidationError> {
    validate_id("backend", &backend.backend_id)?;
    Ok(BackendRef {
        address: backend_address(&backend.cluster_id, &backend.backend_id, &backend.address)?,
        cluster_id: backend.cluster_id.clone(),
        backend_id: backend.backend_id.clone(),
    })
}

impl Change {
    /// The change `request` asks for, with every address parsed and every
    /// default resolved; refused as the state would refuse the request's
    /// own values ([`ErrorCode::UnsupportedRequest`] for a request that
    /// changes nothing: a query, a stop).
    pub fn from_request(request: &proto::Request) -> Result<Self, ValidationError> {
        let Some(kind) = &request.request_type else {
            return Err(ValidationError::new(
                ErrorCode::UnsupportedRequest,
                "the request is empty: send one of the add/update/remove/activate/deactivate \
                 requests",
            ));
        };
        let listener_at = ListenerKey::of_request;
        Ok(match kind {
            RequestType::AddTcpListener(config) => Self::AddListener {
                settings: listener(config)?,
                active: config.active.unwrap_or(true),
            },
            RequestType::UpdateTcpListener(config) => Self::UpdateListener {
                settings: listener(config)?,
                active: config.active,
            },
            RequestType::RemoveListener(at) => Self::RemoveListener(listener_at(at)?),
            RequestType::ActivateListener(at) => Self::ActivateListener(listener_at(at)?),
            RequestType::DeactivateListener(at) => Self::DeactivateListener(listener_at(at)?),
            RequestType::AddCluster(settings) => Self::AddCluster(cluster(settings)?),
            RequestType::UpdateCluster(settings) => Self::UpdateCluster(cluster(settings)?),
            RequestType::RemoveCluster(at) => {
                validate_id("cluster", &at.cluster_id)?;
                Self::RemoveCluster(at.cluster_id.clone())
            }
            RequestType::AddTcpFrontend(settings) => Self::AddFrontend(frontend(settings)?),
            RequestType::RemoveTcpFrontend(settings) => Self::RemoveFrontend(frontend(settings)?),
            RequestType::AddBackend(settings) => Self::AddBackend(backend(settings)?),
            RequestType::UpdateBackend(settings) => Self::UpdateBackend(backend(settings)?),
            RequestType::RemoveBackend(at) => Self::RemoveBackend(backend_ref(at)?),
            RequestType::Status(_)
            | RequestType::ListListeners(_)
            | RequestType::ListClusters(_)
            | RequestType::ListFrontends(_)
            | RequestType::ListSources(_)
            | RequestType::QueryMetrics(_)
            | RequestType::QueryRejects(_)
            | RequestType::ListBackends(_)
            | RequestType::SaveState(_)
            | RequestType::LoadState(_)
            | RequestType::SoftStop(_)
            | RequestType::HardStop(_)
            | RequestType::ApplyChanges(_)
            | RequestType::Upgrade(_)
            | RequestType::ReloadFile(_) => {
                return Err(ValidationError::new(
                    ErrorCode::UnsupportedRequest,
                    "this request does not change the routing state: the command server \
                     answers it, it is not a change",
                ));
            }
        })
    }
}
