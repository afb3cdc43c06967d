//! One line a person reads for a routing change, as a change subcommand
//! answers it and `reload` lists what it applied or skipped: `add frontend
//! 127.0.0.1:8443 sni=new.example.com alpn=any -> www`, not the request's
//! JSON.
//!
//! Owns: the wording of a change, with the config file's key names and
//! spellings. Must never: drop the identity of what changed (the address,
//! cluster or backend id, the SNI and ALPN), since the operator finds the
//! change in the config by it; `--json` keeps the request itself.

use command::health_check::describe_health_check;
use command::proto::{self, request::RequestType};
use command::{duration, spelling};

use super::print::{lb_name, pp_name, tags_text};

/// The change `request` makes, in one line; `None` for a request that
/// changes no routing by itself (a listing, `status`, a stop, a state
/// save or load, whose answers say what they did).
pub(super) fn change(request: &proto::Request) -> Option<String> {
    let line = match request.request_type.as_ref()? {
        RequestType::AddTcpListener(l) => format!("add listener {}", listener(l)),
        RequestType::UpdateTcpListener(l) => format!("update listener {}", listener(l)),
        RequestType::RemoveListener(a) => format!("remove listener {}", named(a)),
        RequestType::ActivateListener(a) => format!("activate listener {}", named(a)),
        RequestType::DeactivateListener(a) => format!("deactivate listener {}", named(a)),
        RequestType::AddCluster(c) => format!("add cluster {}", cluster(c)),
        RequestType::UpdateCluster(c) => format!("update cluster {}", cluster(c)),
        RequestType::RemoveCluster(c) => format!("remove cluster {}", c.cluster_id),
        RequestType::AddTcpFrontend(f) => format!("add frontend {}", frontend(f)),
        RequestType::RemoveTcpFrontend(f) => format!("remove frontend {}", frontend(f)),
        RequestType::AddBackend(b) => format!("add backend {}", backend(b)),
        RequestType::UpdateBackend(b) => format!("update backend {}", backend(b)),
        RequestType::RemoveBackend(b) => format!(
            "remove backend {} {} of cluster {}",
            b.backend_id, b.address, b.cluster_id
        ),
        RequestType::ApplyChanges(batch) => format!("{} change(s)", batch.requests.len()),
        _ => return None,
    };
    Some(line)
}

/// ` (quic)` after a QUIC listener's or frontend's address; nothing for TCP.
fn quic_mark(protocol: Option<i32>) -> &'static str {
    if protocol == Some(proto::ListenerProtocol::Quic as i32) {
        " (quic)"
    } else {
        ""
    }
}

/// The listener a removal or (de)activation names.
fn named(at: &proto::ListenerAddress) -> String {
    format!("{}{}", at.address, quic_mark(at.protocol))
}

fn listener(l: &proto::TcpListenerConfig) -> String {
    let ms = |value: Option<u64>| value.map(duration::shown);
    let ms32 = |value: Option<u32>| value.map(|v| duration::shown(u64::from(v)));
    let reject_with = l
        .reject_with
        .and_then(|v| proto::RejectWith::try_from(v).ok())
        .and_then(|v| spelling::name_of(spelling::REJECT_WITH, v))
        .map(str::to_owned);
    let settings = [
        ("expect_proxy", l.expect_proxy.then(|| "true".to_owned())),
        ("default_cluster", l.default_cluster.clone()),
        ("sni_preread_timeout", ms32(l.sni_preread_timeout)),
        (
            "sni_preread_max_bytes",
            l.sni_preread_max_bytes.map(|v| v.to_string()),
        ),
        ("server_first_timeout", ms32(l.server_first_timeout)),
        ("front_timeout", ms(l.front_timeout_ms)),
        ("back_timeout", ms(l.back_timeout_ms)),
        ("connect_timeout", ms(l.connect_timeout_ms)),
        ("reject_with", reject_with),
        (
            "max_unrouted_per_ip",
            l.max_unrouted_per_ip.map(|v| v.to_string()),
        ),
    ];
    let mut line = format!("{}{}", l.address, quic_mark(l.protocol));
    for (key, value) in settings {
        if let Some(value) = value {
            line.push_str(&format!(" {key}={value}"));
        }
    }
    line.push_str(&access(
        (&l.allow, &l.deny),
        l.connection_rate_per_ip.as_ref(),
        l.ipv6_prefix,
    ));
    line
}

/// The access settings that are set, each as ` key=value`: a list by its
/// length when it is long.
fn access(
    (allow, deny): (&[String], &[String]),
    rate: Option<&proto::ConnectionRate>,
    ipv6_prefix: Option<u32>,
) -> String {
    let list = |list: &[String]| match list.len() {
        0 => None,
        1..=3 => Some(list.join(",")),
        n => Some(format!("{},…({n} prefixes)", list[..3].join(","))),
    };
    let rate = rate.map(|r| {
        let burst = r.burst.unwrap_or(r.rate);
        format!("{}/{},burst={burst}", r.rate, duration::shown(r.per_ms))
    });
    let settings = [
        ("allow", list(allow)),
        ("deny", list(deny)),
        ("connection_rate_per_ip", rate),
        ("ipv6_prefix", ipv6_prefix.map(|v| v.to_string())),
    ];
    let mut line = String::new();
    for (key, value) in settings {
        if let Some(value) = value {
            line.push_str(&format!(" {key}={value}"));
        }
    }
    line
}

fn cluster(c: &proto::Cluster) -> String {
    format!(
        "{} load_balancing={} proxy_protocol={} max_connections_per_ip={} health_check={}{}",
        c.cluster_id,
        lb_name(c.load_balancing),
        pp_name(c.proxy_protocol),
        c.max_connections_per_ip,
        describe_health_check(c.health_check.as_ref()),
        access(
            (&c.allow, &c.deny),
            c.connection_rate_per_ip.as_ref(),
            c.ipv6_prefix
        )
    )
}

fn frontend(f: &proto::TcpFrontend) -> String {
    let alpn = if f.alpn.is_empty() {
        "any".to_owned()
    } else {
        f.alpn.join(",")
    };
    let sni = f.sni.as_deref().unwrap_or("-");
    let mut line = format!(
        "{}{} sni={sni} alpn={alpn} -> {}",
        f.address,
        quic_mark(f.protocol),
        f.cluster_id
    );
    if !f.tags.is_empty() {
        line.push_str(&format!(" tags={}", tags_text(&f.tags)));
    }
    line
}

fn backend(b: &proto::Backend) -> String {
    let mut line = format!("{} {} of cluster {}", b.backend_id, b.address, b.cluster_id);
    if let Some(weight) = b.weight {
        line.push_str(&format!(" weight={weight}"));
    }
    if b.backup {
        line.push_str(" backup");
    }
    if let Some(max) = b.max_connections {
        line.push_str(&format!(" max_connections={max}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use command::proto::{self, request::RequestType};

    use super::change;

    fn wrap(request_type: RequestType) -> proto::Request {
        proto::Request {
            request_type: Some(request_type),
        }
    }

    #[test]
    fn a_frontend_change_reads_as_the_route_it_is() {
        let frontend = proto::TcpFrontend {
            cluster_id: "www".into(),
            address: "127.0.0.1:8443".into(),
            sni: Some("new.example.com".into()),
            alpn: vec![],
            tags: [("team".to_owned(), "web".to_owned())].into(),
            protocol: None,
        };
        assert_eq!(
            change(&wrap(RequestType::RemoveTcpFrontend(frontend))).as_deref(),
            Some(
                "remove frontend 127.0.0.1:8443 sni=new.example.com alpn=any -> www tags=team=web"
            )
        );
        assert_eq!(change(&wrap(RequestType::Status(proto::Status {}))), None);
    }

    #[test]
    fn settings_use_the_config_keys_and_spellings() {
        let listener = proto::TcpListenerConfig {
            address: "127.0.0.1:8443".into(),
            front_timeout_ms: Some(120_000),
            reject_with: Some(proto::RejectWith::Reset as i32),
            ..Default::default()
        };
        let line = change(&wrap(RequestType::UpdateTcpListener(listener))).unwrap_or_default();
        assert_eq!(
            line,
            "update listener 127.0.0.1:8443 front_timeout=2m reject_with=reset"
        );
        let cluster = proto::Cluster {
            cluster_id: "alpha".into(),
            load_balancing: proto::LoadBalancing::Random as i32,
            ..Default::default()
        };
        let line = change(&wrap(RequestType::UpdateCluster(cluster))).unwrap_or_default();
        assert_eq!(
            line,
            "update cluster alpha load_balancing=random proxy_protocol=none \
             max_connections_per_ip=0 health_check=none"
        );
        let backend = proto::Backend {
            cluster_id: "www".into(),
            backend_id: "www-0".into(),
            address: "127.0.0.1:9001".into(),
            weight: Some(100),
            backup: true,
            max_connections: None,
        };
        assert_eq!(
            change(&wrap(RequestType::AddBackend(backend))).as_deref(),
            Some("add backend www-0 127.0.0.1:9001 of cluster www weight=100 backup")
        );
        assert!(!line.contains('{'), "{line}");
    }
}
