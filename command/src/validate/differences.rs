//! What two versions of one listener or cluster differ in, as the
//! `field was → now` list a refused re-add shows the operator.
//!
//! Must never: decide whether a difference is allowed; the state does.

use crate::duration;
use crate::health_check::describe_health_check;
use crate::proto;
use crate::spelling;

/// A setting as an operator writes it, for "was … now …" messages.
trait Shown {
    fn shown(&self) -> String;
}

impl Shown for bool {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for u32 {
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// The `_ms` fields: a duration, as the config writes one.
impl Shown for u64 {
    fn shown(&self) -> String {
        duration::shown(*self)
    }
}

impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref()
            .map_or_else(|| "unset".to_owned(), Shown::shown)
    }
}

/// An `allow`, `deny` or `deny_ja4` list: its length and first entries.
impl Shown for Vec<String> {
    fn shown(&self) -> String {
        const SHOWN: usize = 3;
        let head = self
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        match self.len() {
            0 => "[]".to_owned(),
            n if n <= SHOWN => format!("[{head}]"),
            n => format!("[{head}, … {n} entries]"),
        }
    }
}

impl Shown for proto::ConnectionRate {
    fn shown(&self) -> String {
        format!(
            "{{ rate = {}, per = \"{}\", burst = {} }}",
            self.rate,
            duration::shown(self.per_ms),
            self.burst.unwrap_or(self.rate)
        )
    }
}

impl Shown for String {
    fn shown(&self) -> String {
        format!("`{self}`")
    }
}

/// `name existing → requested` for each field that differs.
/// A field may be shown under the config key it comes from
/// (`front_timeout_ms => front_timeout`).
macro_rules! differences {
    ($existing:expr, $requested:expr, $($field:ident $(=> $key:ident)?),+) => {{
        let mut changes: Vec<String> = Vec::new();
        $(
            if $existing.$field != $requested.$field {
                changes.push(format!(
                    "{} {} → {}",
                    differences!(@key $field $($key)?),
                    $existing.$field.shown(),
                    $requested.$field.shown()
                ));
            }
        )+
        changes.join(", ")
    }};
    (@key $field:ident $key:ident) => { stringify!($key) };
    (@key $field:ident) => { stringify!($field) };
}

/// The settings in which two resolved listener configs differ, as
/// `field existing → requested`.
pub(crate) fn listener_differences(
    existing: &proto::TcpListenerConfig,
    requested: &proto::TcpListenerConfig,
) -> String {
    let protocol = |config: &proto::TcpListenerConfig| {
        if crate::validate::is_quic_listener(config) {
            "quic"
        } else {
            "tcp"
        }
    };
    let mut changes = Vec::new();
    if protocol(existing) != protocol(requested) {
        changes.push(format!(
            "protocol {} → {}",
            protocol(existing),
            protocol(requested)
        ));
    }
    changes.push(differences!(
        existing,
        requested,
        expect_proxy,
        sni_preread_timeout,
        sni_preread_max_bytes,
        default_cluster,
        server_first_timeout,
        front_timeout_ms => front_timeout,
        back_timeout_ms => back_timeout,
        connect_timeout_ms => connect_timeout,
        active,
        max_unrouted_per_ip,
        quic_preread_timeout_ms => quic_preread_timeout,
        quic_idle_timeout_ms => quic_idle_timeout,
        max_flows,
        max_flows_per_ip,
        allow,
        deny,
        connection_rate_per_ip,
        ipv6_prefix,
        deny_ja4
    ));
    changes.retain(|change| !change.is_empty());
    changes.join(", ")
}

/// The settings in which two clusters of one id differ.
pub(crate) fn cluster_differences(existing: &proto::Cluster, requested: &proto::Cluster) -> String {
    let name = |lb: i32| {
        proto::LoadBalancing::try_from(lb)
            .ok()
            .and_then(|lb| spelling::name_of(spelling::LOAD_BALANCING, lb))
            .map_or_else(|| lb.to_string(), str::to_owned)
    };
    let proxy = |pp: i32| {
        proto::ProxyProtocol::try_from(pp)
            .ok()
            .and_then(|pp| spelling::name_of(spelling::PROXY_PROTOCOL, pp))
            .map_or_else(|| pp.to_string(), str::to_owned)
    };
    let mut changes = Vec::new();
    if existing.protocol != requested.protocol {
        let protocol = |cluster: &proto::Cluster| {
            if crate::validate::is_quic_cluster(cluster) {
                "quic"
            } else {
                "tcp"
            }
        };
        changes.push(format!(
            "protocol {} → {}",
            protocol(existing),
            protocol(requested)
        ));
    }
    if existing.load_balancing != requested.load_balancing {
        changes.push(format!(
            "load_balancing {} → {}",
            name(existing.load_balancing),
            name(requested.load_balancing)
        ));
    }
    if existing.proxy_protocol != requested.proxy_protocol {
        changes.push(format!(
            "proxy_protocol {} → {}",
            proxy(existing.proxy_protocol),
            proxy(requested.proxy_protocol)
        ));
    }
    let per_ip = differences!(
        existing,
        requested,
        max_connections_per_ip,
        allow,
        deny,
        connection_rate_per_ip,
        ipv6_prefix,
        deny_ja4
    );
    if !per_ip.is_empty() {
        changes.push(per_ip);
    }
    if existing.health_check != requested.health_check {
        changes.push(format!(
            "health_check {} → {}",
            describe_health_check(existing.health_check.as_ref()),
            describe_health_check(requested.health_check.as_ref())
        ));
    }
    changes.join(", ")
}
