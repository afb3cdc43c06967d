//! A [`Change`] as the command request that asks for it: what goes on the
//! wire, into the journal and into the state.
//!
//! Owns: [`Change::to_request`], in the canonical form the state stores
//! (every default written out, timeouts in both their forms as the
//! state's own resolution writes them). Must never: write a request that
//! [`Change::from_request`] reads as another change.

use super::{
    BackendRef, BackendSettings, Change, ClusterSettings, FrontendSettings, ListenerSettings,
};
use crate::listener_key::ListenerKey;
use crate::proto::{self, request::RequestType};
use crate::validate::whole_seconds;

fn millis_u32(duration: std::time::Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

fn millis_u64(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ListenerSettings {
    /// The resolved listener config, with `active` as given.
    #[must_use]
    pub fn to_proto(&self, active: Option<bool>) -> proto::TcpListenerConfig {
        let (front, back, connect) = (
            millis_u64(self.front_timeout),
            millis_u64(self.back_timeout),
            millis_u64(self.connect_timeout),
        );
        let mut config = proto::TcpListenerConfig {
            address: self.address.to_string(),
            expect_proxy: self.expect_proxy,
            sni_preread_timeout: Some(millis_u32(self.preread_timeout)),
            sni_preread_max_bytes: Some(self.preread_max_bytes),
            default_cluster: self.default_cluster.clone(),
            server_first_timeout: self.server_first_timeout.map(millis_u32),
            front_timeout: whole_seconds(front),
            front_timeout_ms: Some(front),
            back_timeout: whole_seconds(back),
            back_timeout_ms: Some(back),
            connect_timeout: whole_seconds(connect),
            connect_timeout_ms: Some(connect),
            active,
            reject_with: Some(self.reject_with as i32),
            max_unrouted_per_ip: Some(self.max_unrouted_per_ip),
            protocol: self.quic.map(|_| proto::ListenerProtocol::Quic as i32),
            quic_preread_timeout_ms: self.quic.map(|q| millis_u64(q.preread_timeout)),
            quic_idle_timeout_ms: self.quic.map(|q| millis_u64(q.idle_timeout)),
            max_flows: self.quic.map(|q| q.max_flows),
            max_flows_per_ip: self.quic.map(|q| q.max_flows_per_ip),
            allow: Vec::new(),
            deny: Vec::new(),
            connection_rate_per_ip: None,
            ipv6_prefix: None,
            deny_ja4: Vec::new(),
        };
        self.access.write_listener(&mut config);
        config
    }
}

impl ClusterSettings {
    /// The resolved cluster.
    #[must_use]
    pub fn to_proto(&self) -> proto::Cluster {
        let mut cluster = proto::Cluster {
            cluster_id: self.id.clone(),
            load_balancing: self.load_balancing as i32,
            proxy_protocol: self.proxy_protocol as i32,
            max_connections_per_ip: self.max_connections_per_ip,
            health_check: self.health_check.map(|check| proto::HealthCheck {
                kind: if check.tls {
                    proto::HealthCheckKind::Tls
                } else {
                    proto::HealthCheckKind::Tcp
                } as i32,
                interval_ms: Some(millis_u32(check.interval)),
                timeout_ms: Some(millis_u32(check.timeout)),
                rise: Some(check.rise),
                fall: Some(check.fall),
            }),
            protocol: self.quic.then_some(proto::ListenerProtocol::Quic as i32),
            allow: Vec::new(),
            deny: Vec::new(),
            connection_rate_per_ip: None,
            ipv6_prefix: None,
            deny_ja4: Vec::new(),
        };
        self.access.write_cluster(&mut cluster);
        cluster
    }
}

impl FrontendSettings {
    /// The canonical frontend.
    #[must_use]
    pub fn to_proto(&self) -> proto::TcpFrontend {
        proto::TcpFrontend {
            cluster_id: self.cluster_id.clone(),
            address: self.address.to_string(),
            sni: self.sni.as_ref().map(ToString::to_string),
            alpn: self.alpn.clone(),
            tags: self.tags.clone(),
            protocol: self.listener().protocol_field(),
        }
    }
}

impl BackendSettings {
    /// The resolved backend.
    #[must_use]
    pub fn to_proto(&self) -> proto::Backend {
        proto::Backend {
            cluster_id: self.cluster_id.clone(),
            backend_id: self.backend_id.clone(),
            address: self.address.to_string(),
            weight: Some(self.weight),
            backup: self.backup,
            max_connections: Some(self.max_connections),
        }
    }
}

impl BackendRef {
    /// The backend reference of a removal.
    #[must_use]
    pub fn to_proto(&self) -> proto::BackendRef {
        proto::BackendRef {
            cluster_id: self.cluster_id.clone(),
            backend_id: self.backend_id.clone(),
            address: self.address.to_string(),
        }
    }
}

impl Change {
    /// The request that asks for this change.
    #[must_use]
    pub fn to_request(&self) -> proto::Request {
        let at = |key: &ListenerKey| key.to_proto();
        let kind = match self {
            Self::AddListener { settings, active } => {
                RequestType::AddTcpListener(settings.to_proto(Some(*active)))
            }
            Self::UpdateListener { settings, active } => {
                RequestType::UpdateTcpListener(settings.to_proto(*active))
            }
            Self::RemoveListener(address) => RequestType::RemoveListener(at(address)),
            Self::ActivateListener(address) => RequestType::ActivateListener(at(address)),
            Self::DeactivateListener(address) => RequestType::DeactivateListener(at(address)),
            Self::AddCluster(cluster) => RequestType::AddCluster(cluster.to_proto()),
            Self::UpdateCluster(cluster) => RequestType::UpdateCluster(cluster.to_proto()),
            Self::RemoveCluster(id) => RequestType::RemoveCluster(proto::ClusterRef {
                cluster_id: id.clone(),
            }),
            Self::AddFrontend(frontend) => RequestType::AddTcpFrontend(frontend.to_proto()),
            Self::RemoveFrontend(frontend) => RequestType::RemoveTcpFrontend(frontend.to_proto()),
            Self::AddBackend(backend) => RequestType::AddBackend(backend.to_proto()),
            Self::UpdateBackend(backend) => RequestType::UpdateBackend(backend.to_proto()),
            Self::RemoveBackend(backend) => RequestType::RemoveBackend(backend.to_proto()),
        };
        proto::Request {
            request_type: Some(kind),
        }
    }
}
