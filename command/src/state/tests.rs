//! Tests of the state's rules, change by change.

use preread_core::routes::Lookup;

use super::*;
use crate::listener_key::ListenerKey;

fn ok(state: &mut ConfigState, kind: RequestType) -> Applied {
    let applied = state.dispatch(&request(kind));
    state.check_invariants();
    match applied {
        Ok(applied) => applied,
        Err(e) => panic!("refused: {e}"),
    }
}

fn changed(state: &mut ConfigState, kind: RequestType) {
    assert_eq!(ok(state, kind), Applied::Changed);
}

fn sample() -> ConfigState {
    let mut s = ConfigState::default();
    changed(
        &mut s,
        RequestType::AddCluster(proto::Cluster {
            cluster_id: "a".into(),
            ..Default::default()
        }),
    );
    changed(
        &mut s,
        RequestType::AddCluster(proto::Cluster {
            cluster_id: "fb".into(),
            ..Default::default()
        }),
    );
    changed(
        &mut s,
        RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: "127.0.0.1:0443".into(),
            default_cluster: Some("fb".into()),
            server_first_timeout: Some(300),
            sni_preread_max_bytes: Some(4096),
            ..Default::default()
        }),
    );
    changed(
        &mut s,
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "a".into(),
            address: "127.0.0.1:443".into(),
            sni: Some("*.Example.COM.".into()),
            alpn: vec!["http/1.1".into(), "h2".into()],
            tags: Default::default(),
            protocol: None,
        }),
    );
    changed(
        &mut s,
        RequestType::AddBackend(proto::Backend {
            cluster_id: "a".into(),
            backend_id: "a-0".into(),
            address: "127.0.0.1:09001".into(),
            weight: None,
            backup: false,
            max_connections: None,
        }),
    );
    s
}

fn refused(state: &mut ConfigState, kind: RequestType) -> ErrorCode {
    let before = state.clone();
    let error = match state.dispatch(&request(kind)) {
        Err(error) => error,
        Ok(applied) => panic!("accepted: {applied:?}"),
    };
    assert_eq!(*state, before, "a refused request changed the state");
    error.code
}

#[test]
fn the_first_exact_sni_of_a_cluster_skips_wildcards_and_other_clusters() {
    let mut s = sample();
    assert_eq!(s.first_exact_sni("a"), None, "only a wildcard so far");
    for (cluster, sni) in [
        ("fb", "b.example.net"),
        ("a", "z.example.com"),
        ("a", "m.example.com"),
    ] {
        changed(
            &mut s,
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: cluster.into(),
                address: "127.0.0.1:443".into(),
                sni: Some(sni.into()),
                alpn: vec![],
                tags: Default::default(),
                protocol: None,
            }),
        );
    }
    assert_eq!(s.first_exact_sni("a"), Some("m.example.com"));
    assert_eq!(s.first_exact_sni("fb"), Some("b.example.net"));
    assert_eq!(s.first_exact_sni("nobody"), None);
}

#[test]
fn a_cluster_keeps_its_health_check_resolved() {
    let mut s = sample();
    changed(
        &mut s,
        RequestType::UpdateCluster(proto::Cluster {
            cluster_id: "a".into(),
            health_check: Some(proto::HealthCheck {
                interval_ms: Some(500),
                ..Default::default()
            }),
            ..Default::default()
        }),
    );
    assert_eq!(
        s.clusters.get("a").and_then(|c| c.health_check),
        Some(proto::HealthCheck {
            kind: proto::HealthCheckKind::Tcp as i32,
            interval_ms: Some(500),
            timeout_ms: Some(500),
            rise: Some(2),
            fall: Some(3),
        })
    );
    s.check_invariants();
}

#[test]
fn a_cluster_is_updated_in_place_and_keeps_its_routes() {
    let mut s = sample();
    let frontends = s.frontends().count();
    let update = |lb: proto::LoadBalancing, pp: proto::ProxyProtocol, id: &str| {
        RequestType::UpdateCluster(proto::Cluster {
            cluster_id: id.into(),
            load_balancing: lb as i32,
            proxy_protocol: pp as i32,
            max_connections_per_ip: 7,
            health_check: None,
            ..proto::Cluster::default()
        })
    };
    use proto::{LoadBalancing as Lb, ProxyProtocol as Pp};
    changed(&mut s, update(Lb::LeastConnections, Pp::Send, "a"));
    assert_eq!(s.frontends().count(), frontends, "the routes stay");
    assert_eq!(
        s.clusters
            .get("a")
            .map(|c| (c.load_balancing, c.max_connections_per_ip)),
        Some((Lb::LeastConnections as i32, 7))
    );
    assert_eq!(
        ok(&mut s, update(Lb::LeastConnections, Pp::Send, "a")),
        Applied::Unchanged
    );
    assert_eq!(
        refused(&mut s, update(Lb::Random, Pp::None, "nope")),
        ErrorCode::NotFound
    );
    // Relay needs every listener that reaches it to expect a header.
    assert_eq!(
        refused(&mut s, update(Lb::Random, Pp::Relay, "a")),
        ErrorCode::RelayWithoutExpectProxy,
        "a frontend of a listener without expect_proxy"
    );
    assert_eq!(
        refused(&mut s, update(Lb::Random, Pp::Relay, "fb")),
        ErrorCode::RelayWithoutExpectProxy,
        "the default_cluster of a listener without expect_proxy"
    );
}

#[test]
fn a_backend_is_updated_in_place_but_never_moved() {
    let mut s = sample();
    let backend = |address: &str, weight| {
        RequestType::UpdateBackend(proto::Backend {
            cluster_id: "a".into(),
            backend_id: "a-0".into(),
            address: address.into(),
            weight: Some(weight),
            backup: true,
            max_connections: None,
        })
    };
    changed(&mut s, backend("127.0.0.1:9001", 250));
    assert_eq!(
        s.backends.get("a-0").map(|b| (b.weight, b.backup)),
        Some((Some(250), true))
    );
    assert_eq!(
        ok(&mut s, backend("127.0.0.1:9001", 250)),
        Applied::Unchanged
    );
    assert_eq!(
        refused(&mut s, backend("127.0.0.1:9002", 250)),
        ErrorCode::BackendConflict
    );
    let mut elsewhere = backend("127.0.0.1:9001", 1);
    if let RequestType::UpdateBackend(b) = &mut elsewhere {
        b.cluster_id = "fb".into();
    }
    assert_eq!(refused(&mut s, elsewhere), ErrorCode::NotFound);
}

#[test]
fn stores_canonical_resolved_values() {
    let s = sample();
    let listener = s.listeners().next().cloned();
    assert_eq!(
        listener,
        Some(proto::TcpListenerConfig {
            address: "127.0.0.1:443".into(),
            expect_proxy: false,
            sni_preread_timeout: Some(5000),
            sni_preread_max_bytes: Some(4096),
            default_cluster: Some("fb".into()),
            server_first_timeout: Some(300),
            front_timeout: Some(60),
            back_timeout: Some(30),
            connect_timeout: Some(3),
            active: Some(true),
            reject_with: Some(proto::RejectWith::Alert as i32),
            max_unrouted_per_ip: Some(0),
            front_timeout_ms: Some(60_000),
            back_timeout_ms: Some(30_000),
            connect_timeout_ms: Some(3_000),
            ..proto::TcpListenerConfig::default()
        })
    );
    let frontend = s.frontends().next();
    assert_eq!(
        frontend.as_ref().and_then(|f| f.sni.as_deref()),
        Some("*.example.com")
    );
    assert_eq!(
        frontend.as_ref().map(|f| f.alpn.clone()),
        Some(vec!["h2".into(), "http/1.1".into()])
    );
    let backend = s.backends().next();
    assert_eq!(
        backend.map(|b| (b.address.as_str(), b.weight)),
        Some(("127.0.0.1:9001", Some(100)))
    );
}

#[test]
fn identical_re_add_is_unchanged() {
    let mut s = sample();
    let before = s.clone();
    for request in s.generate_requests() {
        let kind = request.request_type.clone();
        assert_eq!(s.dispatch(&request), Ok(Applied::Unchanged), "{kind:?}");
    }
    // The same objects written differently are the same objects.
    let again = [
        RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: "127.0.0.1:443".into(),
            default_cluster: Some("fb".into()),
            server_first_timeout: Some(300),
            sni_preread_max_bytes: Some(4096),
            sni_preread_timeout: Some(5000),
            active: Some(true),
            ..Default::default()
        }),
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "a".into(),
            address: "127.0.0.1:00443".into(),
            sni: Some("*.example.com".into()),
            alpn: vec!["h2".into(), "http/1.1".into()],
            tags: Default::default(),
            protocol: None,
        }),
        RequestType::AddBackend(proto::Backend {
            cluster_id: "a".into(),
            backend_id: "a-0".into(),
            address: "127.0.0.1:9001".into(),
            weight: Some(100),
            backup: false,
            max_connections: None,
        }),
        RequestType::ActivateListener(proto::ListenerAddress {
            address: "127.0.0.1:443".into(),
            protocol: None,
        }),
    ];
    for kind in again {
        assert_eq!(ok(&mut s, kind), Applied::Unchanged);
    }
    assert_eq!(s, before);
}

#[test]
fn remove_then_re_add_restores_the_state() {
    let mut s = sample();
    let before = s.clone();
    let frontend = s.frontends().next().unwrap_or_default();
    let backend = s.backends().next().cloned().unwrap_or_default();
    changed(&mut s, RequestType::RemoveTcpFrontend(frontend.clone()));
    assert!(
        s.route_table(&"127.0.0.1:443".parse().unwrap())
            .is_some_and(RouteTable::is_empty)
    );
    changed(
        &mut s,
        RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: backend.cluster_id.clone(),
            backend_id: backend.backend_id.clone(),
            address: "127.0.0.1:9001".into(),
        }),
    );
    changed(
        &mut s,
        RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: "a".into(),
        }),
    );
    assert_ne!(s, before);
    changed(
        &mut s,
        RequestType::AddCluster(proto::Cluster {
            cluster_id: "a".into(),
            ..Default::default()
        }),
    );
    changed(&mut s, RequestType::AddTcpFrontend(frontend));
    changed(&mut s, RequestType::AddBackend(backend));
    assert_eq!(s, before);
}

#[test]
fn activation_and_update() {
    let mut s = sample();
    let at = || proto::ListenerAddress {
        address: "127.0.0.1:443".into(),
        protocol: None,
    };
    assert_eq!(
        ok(&mut s, RequestType::DeactivateListener(at())),
        Applied::Changed
    );
    assert_eq!(
        ok(&mut s, RequestType::DeactivateListener(at())),
        Applied::Unchanged
    );
    // An update without `active` keeps the activation and resets the
    // other unset fields to their defaults.
    let update = proto::TcpListenerConfig {
        address: "127.0.0.1:443".into(),
        expect_proxy: true,
        ..Default::default()
    };
    assert_eq!(
        ok(&mut s, RequestType::UpdateTcpListener(update.clone())),
        Applied::Changed
    );
    assert_eq!(
        ok(&mut s, RequestType::UpdateTcpListener(update)),
        Applied::Unchanged
    );
    let config = s.listeners().next().cloned().unwrap_or_default();
    assert_eq!(config.active, Some(false));
    assert_eq!(config.default_cluster, None);
    assert_eq!(config.sni_preread_max_bytes, Some(65_536));
    assert_eq!(
        ok(&mut s, RequestType::ActivateListener(at())),
        Applied::Changed
    );
}

#[test]
fn preread_config_carries_the_listener() {
    let s = sample();
    let address: ListenerKey = "127.0.0.1:443".parse().unwrap();
    let config = s.preread_config(&address);
    let Some(config) = config else {
        panic!("no config")
    };
    assert_eq!(config.max_bytes, 4096);
    assert_eq!(config.timeout, Duration::from_secs(5));
    assert_eq!(config.default_cluster.as_deref(), Some("fb"));
    assert_eq!(
        config.server_first_timeout,
        Some(Duration::from_millis(300))
    );
    assert!(!config.expect_proxy);
    let lookup = config.routes.lookup(b"x.example.com", [&b"h2"[..]]);
    assert!(
        matches!(lookup, Lookup::Matched { cluster, .. } if &**cluster == "a"),
        "{lookup:?}"
    );
    assert_eq!(s.catch_all(&address), None);
    assert!(s.preread_config(&"127.0.0.1:1".parse().unwrap()).is_none());
}

#[test]
fn generate_requests_rebuilds_the_state() {
    let mut s = sample();
    changed(
        &mut s,
        RequestType::DeactivateListener(proto::ListenerAddress {
            address: "127.0.0.1:443".into(),
            protocol: None,
        }),
    );
    let mut rebuilt = ConfigState::default();
    for request in s.generate_requests() {
        assert_eq!(
            rebuilt.dispatch(&request),
            Ok(Applied::Changed),
            "{request:?}"
        );
        rebuilt.check_invariants();
    }
    assert_eq!(rebuilt, s);
}

#[test]
fn deny_ja4_is_stored_sorted_once_and_reaches_the_decisions() {
    let mut s = sample();
    let address: ListenerKey = "127.0.0.1:443".parse().unwrap();
    let no_lists = s.preread_config(&address).expect("the listener");
    assert!(no_lists.deny_ja4.is_empty());
    let curl = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6";
    let tls12 = "t12d2808h1_d943125447b4_e7e480e5a997";
    changed(
        &mut s,
        RequestType::UpdateCluster(proto::Cluster {
            cluster_id: "a".into(),
            deny_ja4: vec![curl.into(), tls12.into(), curl.into()],
            ..Default::default()
        }),
    );
    assert_eq!(s.clusters["a"].deny_ja4, [tls12, curl]);
    let config = s.preread_config(&address).expect("the listener");
    assert!(!config.deny_ja4.is_empty());
}
