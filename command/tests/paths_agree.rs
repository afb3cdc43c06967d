//! The three ways a routing declaration reaches the state agree: a random
//! sequence of requests (valid and invalid mixed) is accepted or refused,
//! request by request and with the same code, whether it is
//!
//! - (A) dispatched directly into a [`ConfigState`],
//! - (B) written as a state file (the accepted prefix plus the request) and
//!   loaded, or
//! - (C) rendered as a TOML config and checked with [`check_config`];
//!
//! and the final states are equal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use command::codes::ErrorCode;
use command::config::{check_config, load_config};
use command::proto;
use command::proto::request::RequestType;
use command::state::ConfigState;
use command::state_file::{StateFileError, load_state, parse_state, render_state, save_state};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Generators: small pools so that references, duplicates and conflicts are
// frequent, each pool mixing valid and invalid values.

const CLUSTER_IDS: &[&str] = &["alpha", "beta", "gamma", "delta", "bad id", "", "é"];
const GOOD_LISTENERS: &[&str] = &["127.0.0.1:8443", "127.0.0.1:9443", "[::1]:8443"];
const BAD_LISTENERS: &[&str] = &[
    "127.0.0.1:08443",
    "127.0.0.1:0",
    "localhost:8443",
    "127.0.0.1",
    "",
];
const GOOD_SNIS: &[&str] = &[
    "a.example.com",
    "A.Example.COM.",
    "*.example.com",
    "**.example.com",
];
const BAD_SNIS: &[&str] = &[
    "*.com",
    "a..example.com",
    "a.*.example.com",
    "",
    "é.example.com",
    "x\"y.example.com",
];
const GOOD_ALPNS: &[&str] = &["h2", "http/1.1", "acme-tls/1"];
const BAD_ALPNS: &[&str] = &[""];
const BACKEND_IDS: &[&str] = &["b0", "b1", "b2", "bad id", ""];
const BACKEND_ADDRESSES: &[&str] = &[
    "127.0.0.1:9001",
    "127.0.0.1:9002",
    "DB.internal:5432",
    "db",
    "127.0.0.1:0",
];

/// Mostly a good value, sometimes a bad one.
fn mostly(
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(good),
        1 => prop::sample::select(bad),
    ]
    .prop_map(str::to_owned)
}

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_owned)
}

/// Mostly unset, sometimes one of `values`.
fn small_option<T: Clone + std::fmt::Debug + 'static>(
    values: &'static [T],
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.15, prop::sample::select(values))
}

fn cluster(id: String) -> impl Strategy<Value = proto::Cluster> {
    let proxy_protocol = prop::sample::select(&[0i32, 0, 0, 0, 1, 1, 1, 2][..]);
    let health_check = prop::option::weighted(
        0.3,
        (0..2i32, small_option(&[0u32, 200, 5_000])).prop_map(|(kind, interval_ms)| {
            proto::HealthCheck {
                kind,
                interval_ms,
                timeout_ms: None,
                rise: None,
                fall: None,
            }
        }),
    );
    (
        0..4i32,
        proxy_protocol,
        prop::sample::select(&[0u32, 0, 10][..]),
        health_check,
        access(),
    )
        .prop_map(
            move |(
                load_balancing,
                proxy_protocol,
                max_connections_per_ip,
                health_check,
                access,
            )| {
                let (allow, deny, connection_rate_per_ip, ipv6_prefix) = access;
                proto::Cluster {
                    cluster_id: id.clone(),
                    load_balancing,
                    proxy_protocol,
                    max_connections_per_ip,
                    health_check,
                    allow,
                    deny,
                    connection_rate_per_ip,
                    ipv6_prefix,
                    protocol: None,
                    deny_ja4: Vec::new(),
                }
            },
        )
}

const GOOD_PREFIXES: &[&str] = &["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"];
const BAD_PREFIXES: &[&str] = &["10.1.2.3/8", "10.0.0.0/33", "office", "::/129"];

type Access = (
    Vec<String>,
    Vec<String>,
    Option<proto::ConnectionRate>,
    Option<u32>,
);

/// Mostly no access settings; else lists of good and bad prefixes, rates
/// with zeroes, and prefix lengths past 128.
fn access() -> impl Strategy<Value = Access> {
    let list = || {
        prop::option::weighted(
            0.1,
            prop::collection::vec(mostly(GOOD_PREFIXES, BAD_PREFIXES), 0..3),
        )
        .prop_map(Option::unwrap_or_default)
    };
    let rate = prop::option::weighted(
        0.1,
        (
            prop::sample::select(&[0u32, 1, 50][..]),
            prop::sample::select(&[0u64, 1_000, 60_000][..]),
            small_option(&[0u32, 100]),
        )
            .prop_map(|(rate, per_ms, burst)| proto::ConnectionRate {
                rate,
                per_ms,
                burst,
            }),
    );
    (list(), list(), rate, small_option(&[48u32, 64, 129]))
}

/// The access keys of a rendered listener or cluster.
fn render_access(
    text: &mut String,
    (allow, deny): (&[String], &[String]),
    rate: Option<&proto::ConnectionRate>,
    ipv6_prefix: Option<u32>,
) {
    for (key, list) in [("allow", allow), ("deny", deny)] {
        if !list.is_empty() {
            let quoted: Vec<String> = list.iter().map(|p| toml_string(p)).collect();
            let _ = writeln!(text, "{key} = [{}]", quoted.join(", "));
        }
    }
    if let Some(rate) = rate {
        let burst = rate
            .burst
            .map(|b| format!(", burst = {b}"))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "connection_rate_per_ip = {{ rate = {}, per = \"{}ms\"{burst} }}",
            rate.rate, rate.per_ms
        );
    }
    if let Some(bits) = ipv6_prefix {
        let _ = writeln!(text, "ipv6_prefix = {bits}");
    }
}

/// Often a plain listener at a good address, else anything.
fn listener(cluster_ids: Vec<String>) -> impl Strategy<Value = proto::TcpListenerConfig> {
    prop_oneof![
        2 => prop_oneof![
            3 => Just(GOOD_LISTENERS[0].to_owned()),
            1 => pick(GOOD_LISTENERS),
        ]
        .prop_map(|address| proto::TcpListenerConfig {
            address,
            ..Default::default()
        }),
        3 => any_listener(cluster_ids),
    ]
}

fn any_listener(cluster_ids: Vec<String>) -> impl Strategy<Value = proto::TcpListenerConfig> {
    let mut default_clusters = cluster_ids;
    default_clusters.push("nope".to_owned());
    (
        mostly(GOOD_LISTENERS, BAD_LISTENERS),
        prop::bool::weighted(0.2),
        small_option(&[4u32, 5, 16_384]),
        prop::option::weighted(0.3, prop::sample::select(default_clusters)),
        small_option(&[0u32, 300]),
        small_option(&[0u32, 5_000]),
        small_option(&[0u32, 60]),
        small_option(&[1u32, 30]),
        small_option(&[0u32, 3]),
        prop::option::weighted(0.3, prop::sample::select(vec![0i32, 1, 2])),
        small_option(&[0u32, 2]),
        access(),
    )
        .prop_map(
            |(
                address,
                expect_proxy,
                sni_preread_max_bytes,
                default_cluster,
                server_first_timeout,
                sni_preread_timeout,
                front_timeout,
                back_timeout,
                connect_timeout,
                reject_with,
                max_unrouted_per_ip,
                (allow, deny, connection_rate_per_ip, ipv6_prefix),
            )| proto::TcpListenerConfig {
                address,
                expect_proxy,
                sni_preread_timeout,
                sni_preread_max_bytes,
                default_cluster,
                server_first_timeout,
                front_timeout,
                back_timeout,
                connect_timeout,
                active: None,
                reject_with,
                max_unrouted_per_ip,
                front_timeout_ms: None,
                back_timeout_ms: None,
                connect_timeout_ms: None,
                allow,
                deny,
                connection_rate_per_ip,
                ipv6_prefix,
                protocol: None,
                quic_preread_timeout_ms: None,
                quic_idle_timeout_ms: None,
                max_flows: None,
                max_flows_per_ip: None,
                deny_ja4: Vec::new(),
            },
        )
}

fn frontend(cluster_ids: Vec<String>) -> impl Strategy<Value = proto::TcpFrontend> {
    (
        prop::sample::select(cluster_ids),
        prop_oneof![
            8 => Just(GOOD_LISTENERS[0].to_owned()),
            3 => mostly(GOOD_LISTENERS, BAD_LISTENERS),
        ],
        prop::option::weighted(0.9, mostly(GOOD_SNIS, BAD_SNIS)),
        prop_oneof![
            6 => prop::sample::subsequence(GOOD_ALPNS, 0..=2)
                .prop_shuffle()
                .prop_map(|names| names.into_iter().map(str::to_owned).collect()),
            1 => prop::collection::vec(mostly(GOOD_ALPNS, BAD_ALPNS), 0..4),
        ],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(cluster_id, address, sni, alpn, tagged)| {
            let mut tags = BTreeMap::new();
            if tagged {
                tags.insert("team".to_owned(), "web".to_owned());
            }
            proto::TcpFrontend {
                cluster_id,
                address,
                sni,
                alpn,
                tags,
                protocol: None,
            }
        })
}

fn backend(cluster_ids: Vec<String>) -> impl Strategy<Value = proto::Backend> {
    (
        prop::sample::select(cluster_ids),
        pick(BACKEND_IDS),
        pick(BACKEND_ADDRESSES),
        small_option(&[0u32, 5, 100]),
        prop::bool::weighted(0.2),
        small_option(&[0u32, 2]),
    )
        .prop_map(
            |(cluster_id, backend_id, address, weight, backup, max_connections)| proto::Backend {
                cluster_id,
                backend_id,
                address,
                weight,
                backup,
                max_connections,
            },
        )
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

/// Clusters (distinct ids: a TOML table key appears once), listeners,
/// frontends and backends, in the order a config file dispatches them.
fn sequence() -> impl Strategy<Value = Vec<proto::Request>> {
    prop::sample::subsequence(CLUSTER_IDS, 2..=CLUSTER_IDS.len())
        .prop_shuffle()
        .prop_flat_map(|ids| {
            let ids: Vec<String> = ids.into_iter().map(str::to_owned).collect();
            let clusters: Vec<_> = ids.iter().cloned().map(cluster).collect();
            (
                clusters,
                prop::collection::vec(listener(ids.clone()), 1..4),
                prop::collection::vec(frontend(ids.clone()), 0..10),
                prop::collection::vec(backend(ids), 0..6),
            )
        })
        .prop_map(|(clusters, listeners, frontends, backends)| {
            let mut requests = Vec::new();
            requests.extend(
                clusters
                    .into_iter()
                    .map(RequestType::AddCluster)
                    .map(request),
            );
            requests.extend(
                listeners
                    .into_iter()
                    .map(RequestType::AddTcpListener)
                    .map(request),
            );
            requests.extend(
                frontends
                    .into_iter()
                    .map(RequestType::AddTcpFrontend)
                    .map(request),
            );
            requests.extend(
                backends
                    .into_iter()
                    .map(RequestType::AddBackend)
                    .map(request),
            );
            requests
        })
}

// ---------------------------------------------------------------------------
// The TOML renderer: every request becomes a table whose header line is
// recorded, so a problem's line names its request.

fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn load_balancing_name(value: i32) -> &'static str {
    match proto::LoadBalancing::try_from(value).expect("generated") {
        proto::LoadBalancing::RoundRobin => "round_robin",
        proto::LoadBalancing::Random => "random",
        proto::LoadBalancing::LeastConnections => "least_connections",
        proto::LoadBalancing::PowerOfTwo => "power_of_two",
    }
}

fn proxy_protocol_name(value: i32) -> &'static str {
    match proto::ProxyProtocol::try_from(value).expect("generated") {
        proto::ProxyProtocol::None => "none",
        proto::ProxyProtocol::Send => "send",
        proto::ProxyProtocol::Relay => "relay",
    }
}

fn reject_with_name(value: i32) -> &'static str {
    match proto::RejectWith::try_from(value).expect("generated") {
        proto::RejectWith::Alert => "alert",
        proto::RejectWith::Close => "close",
        proto::RejectWith::Reset => "reset",
        proto::RejectWith::Drop => "drop",
    }
}

/// The config text and, for each request, the line of its table header.
/// Requests must be adds, grouped clusters, listeners, frontends, backends.
fn render_config(requests: &[proto::Request]) -> (String, Vec<usize>) {
    let mut text = String::from("# rendered by paths_agree\nworker_count = 1\n");
    let mut lines = Vec::new();
    let mut header = |text: &mut String, header: String| {
        text.push('\n');
        lines.push(text.lines().count() + 1);
        text.push_str(&header);
        text.push('\n');
    };
    for request in requests {
        match request.request_type.as_ref().expect("set") {
            RequestType::AddCluster(c) => {
                header(
                    &mut text,
                    format!("[clusters.{}]", toml_string(&c.cluster_id)),
                );
                let _ = writeln!(
                    text,
                    "load_balancing = \"{}\"\nproxy_protocol = \"{}\"\nmax_connections_per_ip = {}",
                    load_balancing_name(c.load_balancing),
                    proxy_protocol_name(c.proxy_protocol),
                    c.max_connections_per_ip
                );
                if let Some(check) = &c.health_check {
                    let kind =
                        match proto::HealthCheckKind::try_from(check.kind).expect("generated") {
                            proto::HealthCheckKind::Tcp => "tcp",
                            proto::HealthCheckKind::Tls => "tls",
                        };
                    let interval = check
                        .interval_ms
                        .map(|ms| format!(", interval = \"{ms}ms\""))
                        .unwrap_or_default();
                    let _ = writeln!(text, "health_check = {{ kind = \"{kind}\"{interval} }}");
                }
                render_access(
                    &mut text,
                    (&c.allow, &c.deny),
                    c.connection_rate_per_ip.as_ref(),
                    c.ipv6_prefix,
                );
            }
            RequestType::AddTcpListener(l) => {
                header(&mut text, "[[listeners]]".to_owned());
                let _ = writeln!(text, "address = {}", toml_string(&l.address));
                let _ = writeln!(text, "expect_proxy = {}", l.expect_proxy);
                // Durations are written both ways, a bare integer in the
                // key's unit or a string with the unit (even values).
                for (key, value, unit) in [
                    ("sni_preread_timeout", l.sni_preread_timeout, Some("ms")),
                    ("sni_preread_max_bytes", l.sni_preread_max_bytes, None),
                    ("server_first_timeout", l.server_first_timeout, Some("ms")),
                    ("front_timeout", l.front_timeout, Some("s")),
                    ("back_timeout", l.back_timeout, Some("s")),
                    ("connect_timeout", l.connect_timeout, Some("s")),
                    ("max_unrouted_per_ip", l.max_unrouted_per_ip, None),
                ] {
                    match (value, unit) {
                        (Some(value), Some(unit)) if value % 2 == 0 => {
                            let _ = writeln!(text, "{key} = \"{value}{unit}\"");
                        }
                        (Some(value), _) => {
                            let _ = writeln!(text, "{key} = {value}");
                        }
                        (None, _) => {}
                    }
                }
                if let Some(default) = &l.default_cluster {
                    let _ = writeln!(text, "default_cluster = {}", toml_string(default));
                }
                if let Some(with) = l.reject_with {
                    let _ = writeln!(text, "reject_with = \"{}\"", reject_with_name(with));
                }
                render_access(
                    &mut text,
                    (&l.allow, &l.deny),
                    l.connection_rate_per_ip.as_ref(),
                    l.ipv6_prefix,
                );
            }
            RequestType::AddTcpFrontend(f) => {
                header(
                    &mut text,
                    format!("[[clusters.{}.frontends]]", toml_string(&f.cluster_id)),
                );
                let _ = writeln!(text, "address = {}", toml_string(&f.address));
                if let Some(sni) = &f.sni {
                    let _ = writeln!(text, "sni = {}", toml_string(sni));
                }
                let alpn: Vec<String> = f.alpn.iter().map(|p| toml_string(p)).collect();
                let _ = writeln!(text, "alpn = [{}]", alpn.join(", "));
                let tags: Vec<String> = f
                    .tags
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
                    .collect();
                let _ = writeln!(text, "tags = {{ {} }}", tags.join(", "));
            }
            RequestType::AddBackend(b) => {
                header(
                    &mut text,
                    format!("[[clusters.{}.backends]]", toml_string(&b.cluster_id)),
                );
                let _ = writeln!(text, "address = {}", toml_string(&b.address));
                let _ = writeln!(text, "backend_id = {}", toml_string(&b.backend_id));
                if let Some(weight) = b.weight {
                    let _ = writeln!(text, "weight = {weight}");
                }
                let _ = writeln!(text, "backup = {}", b.backup);
                if let Some(max) = b.max_connections {
                    let _ = writeln!(text, "max_connections = {max}");
                }
            }
            other => panic!("not renderable: {other:?}"),
        }
    }
    (text, lines)
}

// ---------------------------------------------------------------------------
// The property

fn check_paths_agree(requests: &[proto::Request]) -> Result<(), TestCaseError> {
    // (A) direct dispatch.
    let mut direct = ConfigState::default();
    let mut outcomes: Vec<Result<(), ErrorCode>> = Vec::new();
    let mut states_after = Vec::new();
    for request in requests {
        outcomes.push(direct.dispatch(request).map(drop).map_err(|e| e.code));
        states_after.push(direct.clone());
    }
    let accepted: Vec<proto::Request> = requests
        .iter()
        .zip(&outcomes)
        .filter(|(_, outcome)| outcome.is_ok())
        .map(|(request, _)| request.clone())
        .collect();

    // (B) state files: the accepted prefix, plus the request.
    let mut prefix: Vec<proto::Request> = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        let mut lines = prefix.clone();
        lines.push(request.clone());
        let text = render_state(&lines).expect("renders");
        match (parse_state(&text), outcomes[index]) {
            (Ok(state), Ok(())) => {
                prop_assert_eq!(&state, &states_after[index], "request {}", index);
                prefix.push(request.clone());
            }
            (Err(StateFileError::Invalid { line, code, .. }), Err(expected)) => {
                prop_assert_eq!(line, prefix.len() + 2, "request {}", index);
                prop_assert_eq!(code, expected, "request {}", index);
            }
            (loaded, direct) => {
                return Err(TestCaseError::fail(format!(
                    "request {index} {request:?}: direct {direct:?}, state file {loaded:?}"
                )));
            }
        }
    }
    let scratch = tempfile::Builder::new()
        .prefix("preread-paths-agree-")
        .tempdir()
        .expect("temp dir");
    let path = scratch.path().join("state.json");
    save_state(&path, &accepted).expect("saves");
    let loaded = load_state(&path);
    let saved_again =
        save_state(&path, &direct.generate_requests()).and_then(|()| load_state(&path));
    prop_assert_eq!(&loaded.expect("loads"), &direct);
    prop_assert_eq!(&saved_again.expect("loads"), &direct);

    // (C) a TOML config: each problem names one request, by its line.
    let (text, header_lines) = render_config(requests);
    let problems = check_config(&text);
    let mut from_config: Vec<Result<(), ErrorCode>> = vec![Ok(()); requests.len()];
    // Warnings (all backends drained, say) refuse nothing.
    for problem in problems.iter().filter(|p| !p.code.is_warning()) {
        let line = problem
            .location
            .ok_or_else(|| TestCaseError::fail(format!("unlocated: {problem}\n{text}")))?
            .line;
        let Some(index) = header_lines.iter().position(|&l| l == line) else {
            return Err(TestCaseError::fail(format!(
                "problem on no request's line: {problem}\n{text}"
            )));
        };
        prop_assert!(
            from_config[index].is_ok(),
            "two problems for request {}",
            index
        );
        from_config[index] = Err(problem.code);
    }
    prop_assert_eq!(&from_config, &outcomes, "config:\n{}", text);

    // The accepted requests alone load as a config and build the same state.
    let (text, _) = render_config(&accepted);
    let config = load_config(&text)
        .map_err(|problems| TestCaseError::fail(format!("{problems:?}\n{text}")))?;
    let mut from_file = ConfigState::default();
    for located in &config.requests {
        let _applied = from_file
            .dispatch(&located.request)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    }
    prop_assert_eq!(&from_file, &direct);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn direct_state_file_and_config_agree(requests in sequence()) {
        check_paths_agree(&requests)?;
    }
}

/// The generator reaches both outcomes of each kind often enough for the
/// property to mean something.
#[test]
fn generated_sequences_mix_accepted_and_refused() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = sequence();
    let mut accepted = 0;
    let mut codes = std::collections::BTreeSet::new();
    let mut frontends = 0;
    for _ in 0..300 {
        let requests = strategy.new_tree(&mut runner).unwrap().current();
        let mut state = ConfigState::default();
        for request in &requests {
            match state.dispatch(request) {
                Ok(_) => {
                    accepted += 1;
                    if matches!(request.request_type, Some(RequestType::AddTcpFrontend(_))) {
                        frontends += 1;
                    }
                }
                Err(e) => {
                    codes.insert(e.code);
                }
            }
        }
    }
    assert!(accepted > 300, "{accepted}");
    assert!(frontends > 200, "{frontends}");
    for code in [
        ErrorCode::InvalidAddress,
        ErrorCode::InvalidSniPattern,
        ErrorCode::InvalidAlpn,
        ErrorCode::AlpnProtocolTaken,
        ErrorCode::FrontendConflict,
        ErrorCode::CatchAllMixedWithSni,
        ErrorCode::AlpnWithoutSni,
        ErrorCode::UnknownListener,
        ErrorCode::UnknownCluster,
        ErrorCode::InvalidId,
        ErrorCode::DuplicateBackendId,
        ErrorCode::ListenerConflict,
        ErrorCode::PrereadMaxBytesTooSmall,
        ErrorCode::ServerFirstWithoutDefaultCluster,
        ErrorCode::InvalidTimeout,
        ErrorCode::RelayWithoutExpectProxy,
        ErrorCode::InvalidAccessPrefix,
        ErrorCode::InvalidConnectionRate,
        ErrorCode::InvalidIpv6Prefix,
    ] {
        assert!(codes.contains(&code), "{code:?} never generated: {codes:?}");
    }
}
