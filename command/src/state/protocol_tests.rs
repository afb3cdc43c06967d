//! A TCP and a QUIC listener at one address (the usual HTTP/3 deployment):
//! each is its own listener, with its own frontends and route table, and
//! every request names the one it means by its protocol.

use preread_core::routes::Lookup;

use super::*;
use crate::listener_key::ListenerKey;
use crate::state_file::{parse_state, render_state};

const AT: &str = "127.0.0.1:8443";
const QUIC: Option<i32> = Some(proto::ListenerProtocol::Quic as i32);

fn tcp_at() -> ListenerKey {
    ListenerKey::tcp(AT.parse().expect("address"))
}

fn quic_at() -> ListenerKey {
    ListenerKey::quic(AT.parse().expect("address"))
}

fn apply(state: &mut ConfigState, kind: RequestType) -> Result<Applied, ValidationError> {
    let before = state.clone();
    let applied = state.dispatch(&request(kind));
    state.check_invariants();
    if applied.is_err() {
        assert_eq!(*state, before, "a refusal changed the state");
    }
    applied
}

fn changed(state: &mut ConfigState, kind: RequestType) {
    assert_eq!(apply(state, kind), Ok(Applied::Changed));
}

fn refused(state: &mut ConfigState, kind: RequestType, code: ErrorCode) -> String {
    match apply(state, kind) {
        Err(error) => {
            assert_eq!(error.code, code, "{error}");
            error.message
        }
        Ok(applied) => panic!("accepted ({applied:?}), expected {code:?}"),
    }
}

fn listener(protocol: Option<i32>) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        address: AT.into(),
        protocol,
        ..Default::default()
    }
}

fn cluster(id: &str, protocol: Option<i32>) -> RequestType {
    RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        protocol,
        ..Default::default()
    })
}

fn frontend(cluster: &str, sni: Option<&str>, protocol: Option<i32>) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.into(),
        address: AT.into(),
        sni: sni.map(Into::into),
        protocol,
        ..Default::default()
    }
}

fn at(protocol: Option<i32>) -> proto::ListenerAddress {
    proto::ListenerAddress {
        address: AT.into(),
        protocol,
    }
}

/// A TCP listener and a QUIC listener at `AT`, clusters `web` (TCP) and
/// `webq` (QUIC), and one frontend each for the same name.
fn both() -> ConfigState {
    let mut s = ConfigState::default();
    changed(&mut s, cluster("web", None));
    changed(&mut s, cluster("webq", QUIC));
    changed(&mut s, RequestType::AddTcpListener(listener(None)));
    changed(&mut s, RequestType::AddTcpListener(listener(QUIC)));
    let name = Some("a.example.com");
    changed(
        &mut s,
        RequestType::AddTcpFrontend(frontend("web", name, None)),
    );
    changed(
        &mut s,
        RequestType::AddTcpFrontend(frontend("webq", name, QUIC)),
    );
    s
}

fn routed(state: &ConfigState, listener: ListenerKey, name: &str) -> Option<String> {
    match state.route_table(&listener)?.lookup(name.as_bytes(), []) {
        Lookup::Matched { cluster, .. } => Some(cluster.to_string()),
        _ => None,
    }
}

#[test]
fn one_address_holds_a_tcp_and_a_quic_listener_each_with_its_routes() {
    let s = both();
    assert_eq!(s.listeners().len(), 2);
    assert!(s.listener(&tcp_at()).is_some_and(|l| l.protocol.is_none()));
    assert!(s.listener(&quic_at()).is_some_and(|l| l.protocol == QUIC));
    // The same name, a cluster per protocol.
    let name = "a.example.com";
    assert_eq!(routed(&s, tcp_at(), name).as_deref(), Some("web"));
    assert_eq!(routed(&s, quic_at(), name).as_deref(), Some("webq"));
    assert_eq!(s.route_table(&tcp_at()).map(RouteTable::len), Some(1));
    assert_eq!(s.route_table(&quic_at()).map(RouteTable::len), Some(1));
    // The listed frontends say their protocol (unset for TCP).
    let protocols: Vec<Option<i32>> = s.frontends().map(|f| f.protocol).collect();
    assert_eq!(protocols, [None, QUIC]);
    // Re-adding either is unchanged, not a clash with the other.
    let mut again = s.clone();
    let re_add = RequestType::AddTcpFrontend(frontend("webq", Some(name), QUIC));
    assert_eq!(apply(&mut again, re_add), Ok(Applied::Unchanged));
    let re_add = RequestType::AddTcpListener(listener(None));
    assert_eq!(apply(&mut again, re_add), Ok(Applied::Unchanged));
}

#[test]
fn update_activation_and_removal_touch_only_the_named_protocol() {
    let mut s = both();
    let tcp_before = s.listener(&tcp_at()).cloned();
    changed(
        &mut s,
        RequestType::UpdateTcpListener(proto::TcpListenerConfig {
            quic_idle_timeout_ms: Some(5_000),
            ..listener(QUIC)
        }),
    );
    assert_eq!(s.listener(&tcp_at()).cloned(), tcp_before);
    assert_eq!(
        s.listener(&quic_at()).and_then(|l| l.quic_idle_timeout_ms),
        Some(5_000)
    );
    changed(&mut s, RequestType::DeactivateListener(at(QUIC)));
    assert_eq!(s.listener(&tcp_at()).and_then(|l| l.active), Some(true));
    assert_eq!(s.listener(&quic_at()).and_then(|l| l.active), Some(false));
    // The TCP listener still has its frontend: in use.
    let m = refused(
        &mut s,
        RequestType::RemoveListener(at(None)),
        ErrorCode::InUse,
    );
    assert!(m.contains("frontend (127.0.0.1:8443"), "{m}");
    assert!(
        !m.contains("quic"),
        "the QUIC frontend is not the TCP listener's: {m}"
    );
    // A frontend is removed from its own protocol only.
    let name = Some("a.example.com");
    changed(
        &mut s,
        RequestType::RemoveTcpFrontend(frontend("web", name, None)),
    );
    assert_eq!(
        routed(&s, quic_at(), "a.example.com").as_deref(),
        Some("webq")
    );
    changed(&mut s, RequestType::RemoveListener(at(None)));
    assert!(s.listener(&tcp_at()).is_none());
    assert!(s.listener(&quic_at()).is_some());
    // Unset names TCP: gone now, and the message points to the QUIC one.
    let m = refused(
        &mut s,
        RequestType::ActivateListener(at(None)),
        ErrorCode::NotFound,
    );
    assert!(
        m.contains("no tcp listener") && m.contains("quic listener there"),
        "{m}"
    );
    let m = refused(
        &mut s,
        RequestType::UpdateTcpListener(listener(None)),
        ErrorCode::NotFound,
    );
    assert!(m.contains("quic listener there"), "{m}");
}

#[test]
fn clash_rules_hold_within_one_protocol_only() {
    let mut s = both();
    changed(&mut s, cluster("other", None));
    changed(&mut s, cluster("otherq", QUIC));
    // The same key in one protocol is a clash.
    let name = Some("a.example.com");
    let m = refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("otherq", name, QUIC)),
        ErrorCode::FrontendConflict,
    );
    assert!(m.contains("quic frontend (127.0.0.1:8443"), "{m}");
    assert!(m.contains("cluster `webq`"), "{m}");
    refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("other", name, None)),
        ErrorCode::FrontendConflict,
    );
    // A catch-all beside SNI frontends is refused in its own listener...
    refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("otherq", None, QUIC)),
        ErrorCode::CatchAllMixedWithSni,
    );
    // ... and fine in a listener of its own protocol that has none.
    changed(
        &mut s,
        RequestType::RemoveTcpFrontend(frontend("web", name, None)),
    );
    changed(
        &mut s,
        RequestType::AddTcpFrontend(frontend("other", None, None)),
    );
    assert_eq!(s.catch_all(&tcp_at()), Some("other"));
    assert_eq!(s.catch_all(&quic_at()), None);
    refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("web", None, None)),
        ErrorCode::MultipleCatchAll,
    );
    assert_eq!(
        routed(&s, quic_at(), "a.example.com").as_deref(),
        Some("webq")
    );
}

#[test]
fn a_frontend_needs_the_listener_of_its_clusters_protocol() {
    let mut s = ConfigState::default();
    changed(&mut s, cluster("web", None));
    changed(&mut s, cluster("webq", QUIC));
    changed(&mut s, RequestType::AddTcpListener(listener(None)));
    // A QUIC frontend where only a TCP listener is.
    let m = refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("webq", Some("a.example.com"), QUIC)),
        ErrorCode::ProtocolMismatch,
    );
    assert!(
        m.contains("is a tcp listener") && m.contains("`webq`"),
        "{m}"
    );
    // A request that does not say its cluster's protocol.
    let m = refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("webq", Some("a.example.com"), None)),
        ErrorCode::ProtocolMismatch,
    );
    assert!(m.contains("preread frontend quic"), "{m}");
    let m = refused(
        &mut s,
        RequestType::RemoveTcpFrontend(frontend("webq", Some("a.example.com"), None)),
        ErrorCode::ProtocolMismatch,
    );
    assert!(m.contains("preread frontend quic"), "{m}");
    // A TCP frontend where only a QUIC listener is.
    changed(&mut s, RequestType::RemoveListener(at(None)));
    changed(&mut s, RequestType::AddTcpListener(listener(QUIC)));
    let m = refused(
        &mut s,
        RequestType::AddTcpFrontend(frontend("web", Some("a.example.com"), None)),
        ErrorCode::ProtocolMismatch,
    );
    assert!(m.contains("is a quic listener"), "{m}");
}

#[test]
fn both_listeners_round_trip_through_the_state_file() {
    let s = both();
    let text = render_state(&s.generate_requests()).expect("renders");
    let loaded = parse_state(&text).expect("loads");
    assert_eq!(loaded, s);
    // Only the QUIC objects' lines name a protocol.
    for line in text.lines().filter(|l| l.contains("\"protocol\"")) {
        assert!(
            line.contains("\"protocol\":1") && (line.contains("webq") || line.contains("quic")),
            "{line}"
        );
    }
}

/// A state file in the form preread wrote before listeners had a protocol
/// (listener and frontend lines and the removals naming only an address):
/// it loads as TCP objects, and the state writes it back line for line.
#[test]
fn a_state_file_from_before_quic_loads_as_tcp() {
    let text = include_str!("../../tests/data/state/before_quic.state");
    let s = parse_state(text).expect("loads");
    assert_eq!(s.listeners().len(), 1);
    assert!(
        s.listener(&tcp_at())
            .is_some_and(|l| l.active == Some(true))
    );
    assert_eq!(
        routed(&s, tcp_at(), "a.example.com").as_deref(),
        Some("web")
    );
    assert_eq!(routed(&s, tcp_at(), "b.example.com"), None);
    assert!(s.frontends().all(|f| f.protocol.is_none()));
    let written = render_state(&s.generate_requests()).expect("renders");
    assert!(!written.contains("\"protocol\""), "{written}");
}
