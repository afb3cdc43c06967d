//! The Docker source's vocabulary: the labels of running containers turned
//! into fragments, one per label name.
//!
//! Owns: the label keys (`preread.tcp.<name>.listener`, `.sni`, `.sni.N`,
//! `.alpn`, `.port`, `.address`, `.proxy_protocol`, `.weight`), a
//! container's default backend address (`127.0.0.1` on the host network,
//! else its address on its first network), the generated backend ids
//! (`<name>-<first 12 hex digits of the container id>`), and the grouping:
//! every container that carries one `<name>` is one backend of the cluster
//! `<name>`, whose routes are the union of theirs. Must never: validate a
//! routing object (the merge's `dispatch` does, as for every other source),
//! or let one container's bad labels take down the other containers of its
//! name: that container alone is left out (E502).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::{Declared, Fragment, FragmentBody, FragmentId, Problem, SourceKind};
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::spelling;

/// Every label of preread's starts with this.
pub const LABEL_PREFIX: &str = "preread.";

/// The labels of a route: `preread.tcp.<name>.<key>`.
pub const TCP_PREFIX: &str = "preread.tcp.";

/// The keys a `preread.tcp.<name>.` label may end with (`sni.N` too).
pub const KEYS: [&str; 7] = [
    "listener",
    "sni",
    "alpn",
    "port",
    "address",
    "proxy_protocol",
    "weight",
];

/// A running container, as the Docker source read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// Its full id (64 hex digits).
    pub id: String,
    /// Its name, as Docker prints it (`/web-1`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Whether it runs on the host's network (`--network host`).
    pub host_network: bool,
    /// Its IP address on each of its networks, in network name order.
    pub addresses: Vec<IpAddr>,
}

/// What one container declares for one `<name>`.
#[derive(Debug)]
struct Member<'c> {
    container: &'c Container,
    frontends: Vec<(String, Option<String>, Vec<String>)>,
    backend: SocketAddr,
    weight: Option<u32>,
    /// `none` when the label is absent.
    proxy_protocol: proto::ProxyProtocol,
}

/// The fragments the labels of `containers` declare: one per `<name>`
/// (the containers that carry it, each a backend), plus one excluded
/// fragment per container whose labels for a name do not parse. In name
/// order, whatever the order of `containers`.
#[must_use]
pub fn fragments(containers: &[Container]) -> Vec<Fragment> {
    let mut ordered: Vec<&Container> = containers.iter().collect();
    ordered.sort_by(|a, b| a.id.cmp(&b.id));
    let mut members: BTreeMap<String, Vec<Member<'_>>> = BTreeMap::new();
    let mut broken = Vec::new();
    for container in ordered {
        let (by_name, stray) = names(container);
        if !stray.is_empty() {
            broken.push(Fragment {
                id: FragmentId::new(SourceKind::Docker, format!("container {}", container.name)),
                body: FragmentBody::Broken(stray),
            });
        }
        for (name, keys) in by_name {
            match member(container, &name, &keys) {
                Ok(member) => members.entry(name).or_default().push(member),
                Err(problems) => broken.push(Fragment {
                    id: FragmentId::new(
                        SourceKind::Docker,
                        format!("{name} (container {})", container.name),
                    ),
                    body: FragmentBody::Broken(problems),
                }),
            }
        }
    }
    let mut out: Vec<Fragment> = members
        .into_iter()
        .map(|(name, members)| cluster(&name, &members))
        .collect();
    out.extend(broken);
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The `preread.tcp.` labels of a container by name (key → value), and a
/// problem per other `preread.` label.
fn names(container: &Container) -> (BTreeMap<String, BTreeMap<&str, &str>>, Vec<Problem>) {
    let mut by_name: BTreeMap<String, BTreeMap<&str, &str>> = BTreeMap::new();
    let mut stray = Vec::new();
    for (label, value) in &container.labels {
        if !label.starts_with(LABEL_PREFIX) {
            continue;
        }
        let split = label
            .strip_prefix(TCP_PREFIX)
            .and_then(|rest| rest.split_once('.'))
            .filter(|(name, key)| !name.is_empty() && !key.is_empty());
        match split {
            Some((name, key)) => {
                by_name
                    .entry(name.to_owned())
                    .or_default()
                    .insert(key, value.as_str());
            }
            None => stray.push(Problem {
                code: ErrorCode::InvalidLabel,
                message: format!(
                    "label {label} of container {}: preread's labels are \
                     preread.tcp.<name>.<key>, with a <name> without dots and a key among {}",
                    container.name,
                    KEYS.join(", ")
                ),
            }),
        }
    }
    (by_name, stray)
}

fn member<'c>(
    container: &'c Container,
    name: &str,
    keys: &BTreeMap<&str, &str>,
) -> Result<Member<'c>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, what: String| {
        problems.push(Problem {
            code: ErrorCode::InvalidLabel,
            message: format!(
                "label {TCP_PREFIX}{name}.{key} of container {}: {what}",
                container.name
            ),
        });
    };
    let mut snis: Vec<(u32, String)> = Vec::new();
    for (&key, &value) in keys {
        match key {
            "listener" | "alpn" | "port" | "address" | "proxy_protocol" | "weight" => {}
            "sni" => snis.push((0, value.to_owned())),
            other => match other.strip_prefix("sni.").map(str::parse::<u32>) {
                Some(Ok(index)) => snis.push((index.saturating_add(1), value.to_owned())),
                _ => problem(
                    other,
                    format!(
                        "unknown key `{other}`: use {}, or sni.0, sni.1, … for several names",
                        KEYS.join(", ")
                    ),
                ),
            },
        }
    }
    snis.sort();
    let listener = keys.get("listener").map(|v| (*v).to_owned());
    if listener.is_none() {
        problem(
            "listener",
            "missing: say which listener routes to it, e.g. 127.0.0.1:443 or *:443".to_owned(),
        );
    }
    let port = match keys.get("port").map(|v| v.trim().parse::<u16>()) {
        Some(Ok(port)) if port > 0 => Some(port),
        Some(_) => {
            problem("port", "not a port: use 1 to 65535".to_owned());
            None
        }
        None => {
            problem(
                "port",
                "missing: the port the container's backend listens on".to_owned(),
            );
            None
        }
    };
    let ip = match keys.get("address") {
        Some(value) => match value.trim().trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                problem(
                    "address",
                    format!("{} is not an IP address", spelling::quoted(value)),
                );
                None
            }
        },
        None if container.host_network => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        None => {
            let first = container.addresses.first().copied();
            if first.is_none() {
                problem(
                    "address",
                    "the container has no address on its network: set this label".to_owned(),
                );
            }
            first
        }
    };
    let weight = match keys.get("weight").map(|v| v.trim().parse::<u32>()) {
        Some(Ok(weight)) => Some(weight),
        Some(Err(_)) => {
            problem("weight", "not an integer from 0 to 4294967295".to_owned());
            None
        }
        None => None,
    };
    let proxy_protocol = match keys.get("proxy_protocol").map(|v| v.trim()) {
        Some(text) => {
            let parsed = spelling::parse(spelling::PROXY_PROTOCOL, text);
            if parsed.is_none() {
                problem(
                    "proxy_protocol",
                    format!(
                        "{} is unknown: use {}",
                        spelling::quoted(text),
                        spelling::accepted(spelling::PROXY_PROTOCOL)
                    ),
                );
            }
            parsed
        }
        None => None,
    };
    let alpn: Vec<String> = keys
        .get("alpn")
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(ToOwned::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let (Some(listener), Some(port), Some(ip), true) = (listener, port, ip, problems.is_empty())
    else {
        return Err(problems);
    };
    let frontends = if snis.is_empty() {
        vec![(listener, None, alpn)]
    } else {
        snis.into_iter()
            .map(|(_, sni)| (listener.clone(), Some(sni), alpn.clone()))
            .collect()
    };
    Ok(Member {
        container,
        frontends,
        backend: SocketAddr::new(ip, port),
        weight,
        proxy_protocol: proxy_protocol.unwrap_or(proto::ProxyProtocol::None),
    })
}

/// The fragment of `<name>`: its cluster, the union of the members'
/// routes, a backend per member; or, when the members disagree on the
/// cluster's settings, an excluded fragment.
fn cluster(name: &str, members: &[Member<'_>]) -> Fragment {
    let id = FragmentId::new(SourceKind::Docker, name);
    let said: BTreeSet<i32> = members.iter().map(|m| m.proxy_protocol as i32).collect();
    if said.len() > 1 {
        let who: Vec<String> = members
            .iter()
            .map(|m| {
                let mode = match m.proxy_protocol {
                    proto::ProxyProtocol::None => "none",
                    proto::ProxyProtocol::Send => "send",
                    proto::ProxyProtocol::Relay => "relay",
                };
                format!("{} says {mode}", m.container.name)
            })
            .collect();
        return Fragment {
            id,
            body: FragmentBody::Broken(vec![Problem {
                code: ErrorCode::LabelsDisagree,
                message: format!(
                    "the containers of {TCP_PREFIX}{name}.* disagree on proxy_protocol ({}): \
                     give them all the same",
                    who.join(", ")
                ),
            }]),
        };
    }
    let containers: Vec<&str> = members.iter().map(|m| m.container.name.as_str()).collect();
    let proxy_protocol = members
        .first()
        .map_or(proto::ProxyProtocol::None, |m| m.proxy_protocol);
    let mut declared = vec![Declared {
        request: request(RequestType::AddCluster(proto::Cluster {
            cluster_id: name.to_owned(),
            load_balancing: proto::LoadBalancing::RoundRobin as i32,
            proxy_protocol: proxy_protocol as i32,
            max_connections_per_ip: 0,
            health_check: None,
            ..proto::Cluster::default()
        })),
        origin: format!(
            "labels {TCP_PREFIX}{name}.* of container(s) {}",
            containers.join(", ")
        ),
    }];
    let mut seen = BTreeSet::new();
    for member in members {
        for (listener, sni, alpn) in &member.frontends {
            if !seen.insert((listener, sni, alpn)) {
                continue;
            }
            let key = if sni.is_some() { "sni" } else { "listener" };
            declared.push(Declared {
                request: request(RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: name.to_owned(),
                    address: listener.clone(),
                    sni: sni.clone(),
                    alpn: alpn.clone(),
                    tags: BTreeMap::new(),
                    protocol: None,
                })),
                origin: format!(
                    "label {TCP_PREFIX}{name}.{key} of container {}",
                    member.container.name
                ),
            });
        }
    }
    for member in members {
        let short: String = member.container.id.chars().take(12).collect();
        declared.push(Declared {
            request: request(RequestType::AddBackend(proto::Backend {
                cluster_id: name.to_owned(),
                backend_id: format!("{name}-{short}"),
                address: member.backend.to_string(),
                weight: member.weight,
                backup: false,
                max_connections: None,
            })),
            origin: format!(
                "labels {TCP_PREFIX}{name}.port/.address of container {}",
                member.container.name
            ),
        });
    }
    Fragment {
        id,
        body: FragmentBody::Declared(declared.into()),
    }
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: &str, labels: &[(&str, &str)], host: bool) -> Container {
        Container {
            id: format!("{id}{}", "0".repeat(64 - id.len())),
            name: format!("/{id}"),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            host_network: host,
            addresses: vec!["172.17.0.2".parse().expect("ip")],
        }
    }

    fn requests(fragment: &Fragment) -> Vec<RequestType> {
        match &fragment.body {
            FragmentBody::Declared(declared) => declared
                .decode()
                .into_iter()
                .filter_map(|d| d.request.request_type)
                .collect(),
            FragmentBody::Broken(problems) => panic!("broken: {problems:?}"),
        }
    }

    fn problems(fragment: &Fragment) -> Vec<(ErrorCode, String)> {
        match &fragment.body {
            FragmentBody::Broken(problems) => problems
                .iter()
                .map(|p| (p.code, p.message.clone()))
                .collect(),
            FragmentBody::Declared(_) => panic!("declared"),
        }
    }

    const WEB: [(&str, &str); 4] = [
        ("preread.tcp.web.listener", "127.0.0.1:8443"),
        ("preread.tcp.web.sni.0", "a.example.com"),
        ("preread.tcp.web.sni.1", "b.example.com"),
        ("preread.tcp.web.port", "9001"),
    ];

    #[test]
    fn containers_of_one_name_are_one_cluster_one_backend_each() {
        let mut second: Vec<(&str, &str)> = WEB.to_vec();
        second.push(("preread.tcp.web.weight", "50"));
        second.push(("preread.tcp.web.alpn", "h2, http/1.1"));
        let containers = [
            container("bbb", &second, false),
            container("aaa", &WEB, true),
            container("ccc", &[("com.example.other", "x")], true),
        ];
        let out = fragments(&containers);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].id, FragmentId::new(SourceKind::Docker, "web"));
        assert_eq!(out[0].routes(), 4, "two names, two ALPN settings");
        let kinds = requests(&out[0]);
        let backends: Vec<(String, String, Option<u32>)> = kinds
            .iter()
            .filter_map(|k| match k {
                RequestType::AddBackend(b) => {
                    Some((b.backend_id.clone(), b.address.clone(), b.weight))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            backends,
            [
                ("web-aaa000000000".into(), "127.0.0.1:9001".into(), None),
                (
                    "web-bbb000000000".into(),
                    "172.17.0.2:9001".into(),
                    Some(50)
                ),
            ]
        );
        let alpns: Vec<Vec<String>> = kinds
            .iter()
            .filter_map(|k| match k {
                RequestType::AddTcpFrontend(f) => Some(f.alpn.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(alpns[0], Vec::<String>::new());
        assert_eq!(alpns[2], ["h2", "http/1.1"]);
        // The same labels in any order of containers: the same fragments.
        let reversed: Vec<Container> = containers.iter().rev().cloned().collect();
        assert_eq!(fragments(&reversed), out);
    }

    #[test]
    fn bad_labels_leave_out_that_container_alone() {
        let bad = [
            ("preread.tcp.web.listener", "127.0.0.1:8443"),
            ("preread.tcp.web.port", "0"),
            ("preread.tcp.web.snii", "x.example.com"),
            ("preread.tcp.web.address", "not-an-ip"),
            ("preread.tcp.web.weight", "-1"),
            ("preread.tcp.web.proxy_protocol", "v2"),
            ("preread.http.web.rule", "x"),
        ];
        let out = fragments(&[container("aaa", &WEB, true), container("bbb", &bad, false)]);
        let names: Vec<&str> = out.iter().map(|f| f.id.name.as_str()).collect();
        assert_eq!(names, ["container /bbb", "web", "web (container /bbb)"]);
        assert_eq!(requests(&out[1]).len(), 1 + 2 + 1, "aaa alone serves web");
        let found = problems(&out[2]);
        assert!(
            found
                .iter()
                .all(|(code, _)| *code == ErrorCode::InvalidLabel)
        );
        let keys: Vec<&str> = found
            .iter()
            .filter_map(|(_, m)| m.split_whitespace().nth(1))
            .collect();
        assert_eq!(
            keys,
            [
                "preread.tcp.web.snii",
                "preread.tcp.web.port",
                "preread.tcp.web.address",
                "preread.tcp.web.weight",
                "preread.tcp.web.proxy_protocol",
            ]
        );
        assert_eq!(problems(&out[0])[0].0, ErrorCode::InvalidLabel);

        let missing = fragments(&[container("ccc", &[("preread.tcp.x.sni", "x.io")], false)]);
        let found = problems(&missing[0]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].1.contains("listener"), "{found:?}");
        let mut no_address = container("ddd", &WEB, false);
        no_address.addresses.clear();
        let found = problems(&fragments(&[no_address])[0]);
        assert!(found[0].1.contains("no address"), "{found:?}");
    }

    #[test]
    fn disagreeing_containers_exclude_their_name() {
        let mut relay: Vec<(&str, &str)> = WEB.to_vec();
        relay.push(("preread.tcp.web.proxy_protocol", "relay"));
        let out = fragments(&[container("aaa", &WEB, true), container("bbb", &relay, true)]);
        assert_eq!(out.len(), 1);
        let found = problems(&out[0]);
        assert_eq!(found[0].0, ErrorCode::LabelsDisagree);
        assert!(
            found[0].1.contains("/aaa says none, /bbb says relay"),
            "{found:?}"
        );
    }

    #[test]
    fn a_name_without_sni_is_a_catch_all() {
        let labels = [
            ("preread.tcp.raw.listener", "*:9000"),
            ("preread.tcp.raw.port", "7000"),
        ];
        let out = fragments(&[container("aaa", &labels, true)]);
        let frontends: Vec<(String, Option<String>)> = requests(&out[0])
            .into_iter()
            .filter_map(|k| match k {
                RequestType::AddTcpFrontend(f) => Some((f.address, f.sni)),
                _ => None,
            })
            .collect();
        assert_eq!(frontends, [("*:9000".to_owned(), None)]);
    }
}
