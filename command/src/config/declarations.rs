//! The routing declarations of a config file (listeners, clusters and their
//! frontends and backends) turned into command requests, in dispatch order.
//!
//! Owns: the mapping of each table to the request the command socket would
//! carry, the spellings of enumerations (`protocol`, `load_balancing`,
//! `proxy_protocol`, `reject_with`; a `health_check`'s are in `health_check.rs`),
//! generated backend ids, the order of the requests
//! (clusters, listeners, frontends, backends; document order within each
//! group), and the check that a listener's preread cap fits in a buffer.
//!
//! Must never: decide whether a declaration is acceptable as a routing
//! object (unknown cluster, duplicate listener, bad address...): that is
//! [`ConfigState::dispatch`](crate::state::ConfigState::dispatch)'s job, so
//! the config file and the command socket agree.

use toml::Spanned;

use super::LocatedRequest;
use super::health_check::health_check;
use super::lines::{Problems, duration_millis, ranged};
use super::raw::{RawConfig, RawDuration, RawRate};
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::spelling::{
    self, LOAD_BALANCING, PROTOCOL, PROXY_PROTOCOL, REJECT_WITH, Spelling, quoted,
};

/// An optional request field: `None` when absent or out of range (the
/// problem is recorded and the request goes on with the default, so one bad
/// value does not cascade into refusals of the declarations that depend on
/// it).
fn optional_u32(
    value: Option<&Spanned<i64>>,
    key: &str,
    problems: &mut Problems<'_>,
) -> Option<u32> {
    value.and_then(|value| ranged::<u32>(value, key, 0, problems))
}

/// A duration carried in a `uint32` of milliseconds (the preread
/// timeouts); absent or refused is `None`, as for [`optional_u32`].
fn millis_u32<const SECONDS: bool>(
    value: Option<&Spanned<RawDuration<SECONDS>>>,
    key: &str,
    problems: &mut Problems<'_>,
) -> Option<u32> {
    let millis = duration_millis(value?, key, (0, u64::from(u32::MAX)), problems)?;
    u32::try_from(millis).ok()
}

/// A duration carried in a `uint64` of milliseconds (the connection
/// timeouts).
fn millis_u64<const SECONDS: bool>(
    value: Option<&Spanned<RawDuration<SECONDS>>>,
    key: &str,
    problems: &mut Problems<'_>,
) -> Option<u64> {
    duration_millis(value?, key, (0, u64::MAX), problems)
}

/// `connection_rate_per_ip` as its request field (`per` unset is one
/// second); whether it is a rate is the resolution's to judge (E121), for
/// the config file and the command socket alike.
fn connection_rate(raw: &RawRate, problems: &mut Problems<'_>) -> Option<proto::ConnectionRate> {
    let rate = ranged::<u32>(&raw.rate, "connection_rate_per_ip rate", 0, problems)?;
    let per_ms = match raw.per.as_ref() {
        None => 1_000,
        Some(per) => duration_millis(per, "connection_rate_per_ip per", (0, u64::MAX), problems)?,
    };
    let burst = match raw.burst.as_ref() {
        None => None,
        Some(burst) => Some(ranged::<u32>(
            burst,
            "connection_rate_per_ip burst",
            0,
            problems,
        )?),
    };
    Some(proto::ConnectionRate {
        rate,
        per_ms,
        burst,
    })
}

pub(super) fn routing_requests(raw: RawConfig, problems: &mut Problems<'_>) -> Vec<LocatedRequest> {
    // (position, request) per group; sorted by position, then concatenated
    // in dispatch order.
    let mut clusters = Vec::new();
    let mut listeners = Vec::new();
    let mut frontends = Vec::new();
    let mut backends = Vec::new();

    for listener in raw.listeners {
        let position = listener.span().start;
        let listener = listener.into_inner();
        let protocol = protocol(listener.protocol.as_ref(), problems);
        let config = proto::TcpListenerConfig {
            address: listener.address,
            expect_proxy: listener.expect_proxy.unwrap_or(false),
            sni_preread_timeout: millis_u32(
                listener.sni_preread_timeout.as_ref(),
                "sni_preread_timeout",
                problems,
            ),
            sni_preread_max_bytes: optional_u32(
                listener.sni_preread_max_bytes.as_ref(),
                "sni_preread_max_bytes",
                problems,
            ),
            default_cluster: listener.default_cluster,
            server_first_timeout: millis_u32(
                listener.server_first_timeout.as_ref(),
                "server_first_timeout",
                problems,
            ),
            front_timeout: None,
            front_timeout_ms: millis_u64(
                listener.front_timeout.as_ref(),
                "front_timeout",
                problems,
            ),
            back_timeout: None,
            back_timeout_ms: millis_u64(listener.back_timeout.as_ref(), "back_timeout", problems),
            connect_timeout: None,
            connect_timeout_ms: millis_u64(
                listener.connect_timeout.as_ref(),
                "connect_timeout",
                problems,
            ),
            active: None,
            reject_with: listener
                .reject_with
                .as_ref()
                .and_then(|value| spelt(value, "reject_with", REJECT_WITH, problems))
                .map(|with| with as i32),
            max_unrouted_per_ip: optional_u32(
                listener.max_unrouted_per_ip.as_ref(),
                "max_unrouted_per_ip",
                problems,
            ),
            protocol,
            quic_preread_timeout_ms: millis_u64(
                listener.quic_preread_timeout.as_ref(),
                "quic_preread_timeout",
                problems,
            ),
            quic_idle_timeout_ms: millis_u64(
                listener.quic_idle_timeout.as_ref(),
                "quic_idle_timeout",
                problems,
            ),
            max_flows: optional_u32(listener.max_flows.as_ref(), "max_flows", problems),
            max_flows_per_ip: optional_u32(
                listener.max_flows_per_ip.as_ref(),
                "max_flows_per_ip",
                problems,
            ),
            allow: listener.allow,
            deny: listener.deny,
            connection_rate_per_ip: listener
                .connection_rate_per_ip
                .as_ref()
                .and_then(|rate| connection_rate(rate.get_ref(), problems)),
            ipv6_prefix: optional_u32(listener.ipv6_prefix.as_ref(), "ipv6_prefix", problems),
            deny_ja4: listener.deny_ja4,
        };
        listeners.push((position, RequestType::AddTcpListener(config)));
    }

    for (id, cluster) in raw.clusters.0 {
        let cluster_id = id.into_inner();
        let position = cluster.span().start;
        let cluster = cluster.into_inner();
        let protocol = protocol(cluster.protocol.as_ref(), problems);
        let load_balancing = cluster
            .load_balancing
            .as_ref()
            .and_then(|value| spelt(value, "load_balancing", LOAD_BALANCING, problems))
            .unwrap_or(proto::LoadBalancing::RoundRobin);
        let proxy_protocol = cluster
            .proxy_protocol
            .as_ref()
            .and_then(|value| spelt(value, "proxy_protocol", PROXY_PROTOCOL, problems))
            .unwrap_or(proto::ProxyProtocol::None);
        let max_connections_per_ip = cluster
            .max_connections_per_ip
            .as_ref()
            .and_then(|value| ranged::<u32>(value, "max_connections_per_ip", 0, problems))
            .unwrap_or(0);
        let health_check = cluster
            .health_check
            .as_ref()
            .map(|check| health_check(check.get_ref(), problems));
        clusters.push((
            position,
            RequestType::AddCluster(proto::Cluster {
                cluster_id: cluster_id.clone(),
                load_balancing: load_balancing as i32,
                proxy_protocol: proxy_protocol as i32,
                max_connections_per_ip,
                health_check,
                protocol,
                allow: cluster.allow,
                deny: cluster.deny,
                connection_rate_per_ip: cluster
                    .connection_rate_per_ip
                    .as_ref()
                    .and_then(|rate| connection_rate(rate.get_ref(), problems)),
                ipv6_prefix: optional_u32(cluster.ipv6_prefix.as_ref(), "ipv6_prefix", problems),
                deny_ja4: cluster.deny_ja4,
            }),
        ));

        for frontend in cluster.frontends {
            let position = frontend.span().start;
            let frontend = frontend.into_inner();
            frontends.push((
                position,
                RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: cluster_id.clone(),
                    address: frontend.address,
                    sni: frontend.sni,
                    alpn: frontend.alpn,
                    tags: frontend.tags,
                    // A frontend routes on the listener of its cluster's
                    // protocol at its address.
                    protocol,
                }),
            ));
        }

        for (index, backend) in cluster.backends.into_iter().enumerate() {
            let position = backend.span().start;
            let backend = backend.into_inner();
            let weight = backend
                .weight
                .as_ref()
                .and_then(|value| ranged::<u32>(value, "weight", 0, problems));
            let max_connections = backend
                .max_connections
                .as_ref()
                .and_then(|value| ranged::<u32>(value, "max_connections", 0, problems));
            backends.push((
                position,
                RequestType::AddBackend(proto::Backend {
                    cluster_id: cluster_id.clone(),
                    backend_id: backend
                        .backend_id
                        .unwrap_or_else(|| format!("{cluster_id}-{index}")),
                    address: backend.address,
                    weight,
                    backup: backend.backup.unwrap_or(false),
                    max_connections,
                }),
            ));
        }
    }

    let mut requests = Vec::new();
    for mut group in [clusters, listeners, frontends, backends] {
        group.sort_by_key(|(position, _)| *position);
        requests.extend(group.into_iter().map(|(position, request)| LocatedRequest {
            request: proto::Request {
                request_type: Some(request),
            },
            location: problems.lines.location(position),
        }));
    }
    requests
}

/// A listener's or cluster's `protocol`: unset for TCP (the default, and
/// how the state stores it), set for QUIC.
fn protocol(protocol: Option<&Spanned<String>>, problems: &mut Problems<'_>) -> Option<i32> {
    match spelt(protocol?, "protocol", PROTOCOL, problems)? {
        proto::ListenerProtocol::Tcp => None,
        proto::ListenerProtocol::Quic => Some(proto::ListenerProtocol::Quic as i32),
    }
}

/// An enumerated setting, in any of its spellings.
fn spelt<T: Copy>(
    value: &Spanned<String>,
    key: &str,
    table: &[Spelling<T>],
    problems: &mut Problems<'_>,
) -> Option<T> {
    let parsed = spelling::parse(table, value.get_ref());
    if parsed.is_none() {
        problems.push(
            value.span().start,
            ErrorCode::InvalidValue,
            format!(
                "{key} {} is unknown: use {}",
                quoted(value.get_ref()),
                spelling::accepted(table)
            ),
        );
    }
    parsed
}
