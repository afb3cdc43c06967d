//! QUIC listeners and clusters in the config file: their keys, defaults
//! and the stable codes of what a TCP listener or cluster cannot mix
//! with (doc/configure.md §8).

use std::time::Duration;

use command::change::{Change, QuicSettings};
use command::codes::ErrorCode;
use command::config::{ConfigProblem, check_config, load_config};
use command::diff::diff;
use command::generation::plan;
use command::listener_key::ListenerKey;
use command::proto::request::RequestType;
use command::state::ConfigState;
use command::validate::ValidationError;
use preread_core::routes::Lookup;

fn codes(problems: &[ConfigProblem]) -> Vec<ErrorCode> {
    problems.iter().map(|p| p.code).collect()
}

const QUIC: &str = r#"
[[listeners]]
protocol = "quic"
address = "127.0.0.1:8443"
default_cluster = "web-quic"
quic_preread_timeout = "1500ms"
quic_idle_timeout = "30s"
max_flows = 500
max_flows_per_ip = 20
reject_with = "drop"

[clusters.web-quic]
protocol = "quic"
frontends = [ { address = "127.0.0.1:8443", sni = "a.example.com", alpn = ["h3"] } ]
backends = [ { address = "127.0.0.1:9443", backend_id = "web-quic-0" } ]
"#;

#[test]
fn a_quic_listener_and_cluster_load_with_their_settings() {
    let loaded = load_config(QUIC).unwrap_or_else(|p| panic!("{p:?}"));
    let mut state = ConfigState::default();
    let mut listener = None;
    let mut cluster = None;
    for request in loaded.requests() {
        let change = Change::from_request(request).unwrap_or_else(|e| panic!("{e}"));
        match change {
            Change::AddListener { settings, .. } => listener = Some(settings),
            Change::AddCluster(settings) => cluster = Some(settings),
            _ => {}
        }
        let _applied = state
            .dispatch(request)
            .unwrap_or_else(|e| panic!("{request:?}: {e}"));
    }
    let listener = listener.expect("a listener");
    assert_eq!(
        listener.quic,
        Some(QuicSettings {
            preread_timeout: Duration::from_millis(1500),
            idle_timeout: Duration::from_secs(30),
            max_flows: 500,
            max_flows_per_ip: 20,
        })
    );
    assert_eq!(listener.reject_with, command::proto::RejectWith::Drop);
    assert!(cluster.expect("a cluster").quic);
}

#[test]
fn a_quic_listener_takes_its_defaults_and_round_trips() {
    let text = QUIC
        .replace("quic_preread_timeout = \"1500ms\"\n", "")
        .replace("quic_idle_timeout = \"30s\"\n", "")
        .replace("max_flows = 500\n", "")
        .replace("max_flows_per_ip = 20\n", "")
        .replace("reject_with = \"drop\"\n", "");
    let loaded = load_config(&text).unwrap_or_else(|p| panic!("{p:?}"));
    let listener = loaded
        .requests()
        .find_map(|r| match &r.request_type {
            Some(RequestType::AddTcpListener(config)) => Some(config.clone()),
            _ => None,
        })
        .expect("a listener");
    let request = command::proto::Request {
        request_type: Some(RequestType::AddTcpListener(listener)),
    };
    let change = Change::from_request(&request).unwrap_or_else(|e| panic!("{e}"));
    let Change::AddListener { settings, .. } = &change else {
        panic!("{change:?}");
    };
    assert_eq!(
        settings.quic,
        Some(QuicSettings {
            preread_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(60),
            max_flows: 100_000,
            max_flows_per_ip: 0,
        })
    );
    assert_eq!(settings.reject_with, command::proto::RejectWith::Close);
    assert_eq!(
        Change::from_request(&change.to_request()).ok(),
        Some(change.clone())
    );
}

#[test]
fn a_quic_frontend_on_a_tcp_listener_is_e209() {
    let text = QUIC.replace("protocol = \"quic\"\naddress", "address");
    let text = text.replace("default_cluster = \"web-quic\"\n", "");
    let text = text
        .replace("quic_preread_timeout = \"1500ms\"\n", "")
        .replace("quic_idle_timeout = \"30s\"\n", "")
        .replace("max_flows = 500\n", "")
        .replace("max_flows_per_ip = 20\n", "")
        .replace("reject_with = \"drop\"\n", "");
    let problems = check_config(&text);
    assert_eq!(
        codes(&problems),
        vec![ErrorCode::ProtocolMismatch],
        "{problems:?}"
    );
    assert!(problems[0].message.contains("tcp listener"), "{problems:?}");
}

#[test]
fn a_tcp_cluster_on_a_quic_listener_is_e209() {
    let text = QUIC.replace(
        "[clusters.web-quic]\nprotocol = \"quic\"\n",
        "[clusters.web-quic]\n",
    );
    let problems = check_config(&text);
    // The listener is refused for its default_cluster (and its frontend
    // then finds no listener).
    assert_eq!(
        codes(&problems)[0],
        ErrorCode::ProtocolMismatch,
        "{problems:?}"
    );
    assert!(
        problems[0].message.contains("quic listener"),
        "{problems:?}"
    );
}

#[test]
fn settings_of_the_other_protocol_are_e107() {
    let tcp_with_flows = "[[listeners]]\naddress = \"127.0.0.1:8443\"\nmax_flows = 5\n";
    assert_eq!(
        codes(&check_config(tcp_with_flows)),
        vec![ErrorCode::ListenerProtocolSetting]
    );
    let tcp_with_drop = "[[listeners]]\naddress = \"127.0.0.1:8443\"\nreject_with = \"drop\"\n";
    assert_eq!(
        codes(&check_config(tcp_with_drop)),
        vec![ErrorCode::ListenerProtocolSetting]
    );
    let quic_with_proxy =
        "[[listeners]]\nprotocol = \"quic\"\naddress = \"127.0.0.1:8443\"\nexpect_proxy = true\n";
    assert_eq!(
        codes(&check_config(quic_with_proxy)),
        vec![ErrorCode::ListenerProtocolSetting]
    );
    let quic_with_alert = "[[listeners]]\nprotocol = \"quic\"\naddress = \"127.0.0.1:8443\"\nreject_with = \"alert\"\n";
    assert_eq!(
        codes(&check_config(quic_with_alert)),
        vec![ErrorCode::ListenerProtocolSetting]
    );
}

#[test]
fn a_quic_cluster_with_a_tcp_only_setting_is_e306() {
    let text = QUIC.replace(
        "[clusters.web-quic]\nprotocol = \"quic\"\n",
        "[clusters.web-quic]\nprotocol = \"quic\"\nproxy_protocol = \"send\"\n",
    );
    let problems = check_config(&text);
    assert!(
        codes(&problems).contains(&ErrorCode::QuicClusterSetting),
        "{problems:?}"
    );
}

#[test]
fn an_unknown_protocol_is_e003_and_a_zero_idle_timeout_e103() {
    let problems =
        check_config("[[listeners]]\nprotocol = \"udp\"\naddress = \"127.0.0.1:8443\"\n");
    assert_eq!(codes(&problems), vec![ErrorCode::InvalidValue]);
    assert!(problems[0].message.contains("\"quic\""), "{problems:?}");
    let problems = check_config(
        "[[listeners]]\nprotocol = \"quic\"\naddress = \"127.0.0.1:8443\"\nquic_idle_timeout = 0\n",
    );
    assert_eq!(codes(&problems), vec![ErrorCode::InvalidTimeout]);
}

#[test]
fn the_new_codes_explain_themselves() {
    for code in [
        ErrorCode::ListenerProtocolSetting,
        ErrorCode::ProtocolMismatch,
        ErrorCode::QuicClusterSetting,
    ] {
        let explanation = code.explain();
        assert_eq!(explanation.section, "8", "{code}");
        assert!(explanation.fix.len() > 20, "{code}");
    }
}

/// HTTP/3 beside TCP: a TCP and a QUIC listener on one address, each with
/// its own cluster for the same name (doc/configure.md §8).
const SAME_PORT: &str = r#"
[[listeners]]
address = "127.0.0.1:8443"
[[listeners]]
protocol = "quic"
address = "127.0.0.1:8443"
[clusters.web]
frontends = [ { address = "127.0.0.1:8443", sni = "a.example.com" } ]
backends = [ { address = "127.0.0.1:9001" } ]
[clusters.webq]
protocol = "quic"
frontends = [ { address = "127.0.0.1:8443", sni = "a.example.com" } ]
backends = [ { address = "127.0.0.1:9001" } ]
"#;

fn routed(state: &ConfigState, listener: ListenerKey, name: &str) -> Option<String> {
    match state.route_table(&listener)?.lookup(name.as_bytes(), []) {
        Lookup::Matched { cluster, .. } => Some(cluster.to_string()),
        _ => None,
    }
}

#[test]
fn a_tcp_and_a_quic_listener_share_an_address() {
    assert_eq!(codes(&check_config(SAME_PORT)), vec![]);
    let loaded = load_config(SAME_PORT).unwrap_or_else(|p| panic!("{p:?}"));
    let address = "127.0.0.1:8443".parse().expect("address");
    let (tcp, quic) = (ListenerKey::tcp(address), ListenerKey::quic(address));
    assert_eq!(loaded.state.listeners().len(), 2);
    let name = "a.example.com";
    assert_eq!(routed(&loaded.state, tcp, name).as_deref(), Some("web"));
    assert_eq!(routed(&loaded.state, quic, name).as_deref(), Some("webq"));
    // Only a listener's own protocol clashes: a second QUIC listener there does.
    let twice = format!(
        "{SAME_PORT}[[listeners]]\nprotocol = \"quic\"\naddress = \"127.0.0.1:8443\"\nmax_flows = 5\n"
    );
    assert_eq!(
        codes(&check_config(&twice)),
        vec![ErrorCode::ListenerConflict]
    );
}

/// A reload that edits the QUIC side alone asks nothing of the TCP
/// listener or its frontend, and builds the state the new file declares.
#[test]
fn a_reload_of_one_protocol_leaves_the_other_alone() {
    let before = load_config(SAME_PORT).unwrap_or_else(|p| panic!("{p:?}"));
    let edited = SAME_PORT
        .replace(
            "protocol = \"quic\"\naddress = \"127.0.0.1:8443\"\n",
            "protocol = \"quic\"\naddress = \"127.0.0.1:8443\"\nquic_idle_timeout = \"5s\"\n",
        )
        .replace(
            "protocol = \"quic\"\nfrontends = [ { address = \"127.0.0.1:8443\", sni = \"a.example.com\" } ]",
            "protocol = \"quic\"\nfrontends = [ { address = \"127.0.0.1:8443\", sni = \"b.example.com\" } ]",
        );
    let after = load_config(&edited).unwrap_or_else(|p| panic!("{p:?}"));
    let steps = diff(&before.state, &after.state);
    assert_eq!(steps.len(), 3, "{steps:?}");
    for step in &steps {
        let change = Change::from_request(step).unwrap_or_else(|e| panic!("{e}"));
        let quic = match &change {
            Change::UpdateListener { settings, .. } => settings.quic.is_some(),
            Change::AddFrontend(frontend) | Change::RemoveFrontend(frontend) => frontend.quic,
            other => panic!("not a step of this reload: {other:?}"),
        };
        assert!(quic, "the reload touches the TCP side: {change:?}");
    }
    let mut state = before.state.clone();
    let planned = plan::<ValidationError>(&mut state, steps, |_, _| Ok(()));
    assert!(planned.skipped.is_empty(), "{:?}", planned.skipped);
    let tcp = ListenerKey::tcp("127.0.0.1:8443".parse().expect("address"));
    assert_eq!(planned.generation.routes.len(), 1, "only the QUIC table");
    assert!(planned.generation.routes.iter().all(|(key, _)| key.quic));
    planned
        .generation
        .apply_to(&mut state)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(state, after.state);
    assert_eq!(routed(&state, tcp, "a.example.com").as_deref(), Some("web"));
}
