//! One test per code that [`ConfigState::dispatch`] can produce, each
//! reached through `dispatch` and checking that the refusal changed
//! nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::state::{Applied, ConfigState};

fn req(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn listener(address: &str) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        address: address.into(),
        ..Default::default()
    }
}

fn add_listener(config: proto::TcpListenerConfig) -> proto::Request {
    req(RequestType::AddTcpListener(config))
}

fn cluster(id: &str, proxy: proto::ProxyProtocol) -> proto::Request {
    req(RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        proxy_protocol: proxy as i32,
        ..Default::default()
    }))
}

fn frontend(cluster: &str, address: &str, sni: Option<&str>, alpn: &[&str]) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.into(),
        address: address.into(),
        sni: sni.map(Into::into),
        alpn: alpn.iter().map(|p| (*p).to_owned()).collect(),
        tags: Default::default(),
        protocol: None,
    }
}

fn add_frontend(cluster: &str, address: &str, sni: Option<&str>, alpn: &[&str]) -> proto::Request {
    req(RequestType::AddTcpFrontend(frontend(
        cluster, address, sni, alpn,
    )))
}

fn backend(cluster: &str, id: &str, address: &str) -> proto::Backend {
    proto::Backend {
        cluster_id: cluster.into(),
        backend_id: id.into(),
        address: address.into(),
        weight: None,
        backup: false,
        max_connections: None,
    }
}

const L: &str = "127.0.0.1:8443";
const L2: &str = "127.0.0.1:9443";

/// Two listeners (L2 expects PROXY), clusters `a`, `b` and `relay`, an
/// SNI frontend on L and a backend of `a`.
fn base() -> ConfigState {
    let mut state = ConfigState::default();
    for request in [
        cluster("a", proto::ProxyProtocol::None),
        cluster("b", proto::ProxyProtocol::Send),
        cluster("relay", proto::ProxyProtocol::Relay),
        add_listener(listener(L)),
        add_listener(proto::TcpListenerConfig {
            expect_proxy: true,
            ..listener(L2)
        }),
        add_frontend("a", L, Some("a.example.com"), &["h2", "http/1.1"]),
        req(RequestType::AddBackend(backend(
            "a",
            "a-0",
            "127.0.0.1:9001",
        ))),
    ] {
        ok(&mut state, &request);
    }
    state
}

fn ok(state: &mut ConfigState, request: &proto::Request) {
    match state.dispatch(request) {
        Ok(applied) => assert_eq!(applied, Applied::Changed, "{request:?}"),
        Err(e) => panic!("{request:?} refused: {e}"),
    }
    state.check_invariants();
}

/// Dispatches `request`, expects `code`, and checks the state did not
/// change and the message is worth reading.
fn refused(state: &mut ConfigState, request: &proto::Request, code: ErrorCode) -> String {
    let before = state.clone();
    match state.dispatch(request) {
        Ok(applied) => panic!("{request:?} accepted ({applied:?}), expected {code}"),
        Err(e) => {
            assert_eq!(e.code, code, "{e}");
            assert_eq!(*state, before, "a refused request changed the state");
            assert!(e.to_string().starts_with(&format!("{code}: ")), "{e}");
            assert!(e.message.len() > 20, "{e}");
            state.check_invariants();
            e.message
        }
    }
}

#[test]
fn display_is_code_then_message() {
    let e = ValidationError::new(ErrorCode::InvalidAddress, "listener: bad");
    assert_eq!(e.to_string(), "E101: listener: bad");
}

#[test]
fn e101_invalid_address() {
    let mut s = base();
    for bad in [
        "localhost:80",
        "127.0.0.1",
        "127.0.0.1:0",
        "",
        "0127.0.0.1:80",
    ] {
        let m = refused(
            &mut s,
            &add_listener(listener(bad)),
            ErrorCode::InvalidAddress,
        );
        assert!(m.contains("listener"), "{m}");
    }
    refused(
        &mut s,
        &add_frontend("a", "nowhere", Some("x.example.com"), &[]),
        ErrorCode::InvalidAddress,
    );
    for bad in ["db", "db:0", "127.0.0.300:80", "[::1]"] {
        let m = refused(
            &mut s,
            &req(RequestType::AddBackend(backend("a", "a-1", bad))),
            ErrorCode::InvalidAddress,
        );
        assert!(m.contains("name:port") || m.contains("port 0"), "{m}");
    }
    ok(
        &mut s,
        &req(RequestType::AddBackend(backend(
            "a",
            "a-1",
            "DB.internal:5432",
        ))),
    );
    assert_eq!(
        s.backends.get("a-1").map(|b| b.address.as_str()),
        Some("db.internal:5432"),
        "a name is accepted and stored canonical"
    );
    refused(
        &mut s,
        &req(RequestType::RemoveListener(proto::ListenerAddress {
            address: "x".into(),
            protocol: None,
        })),
        ErrorCode::InvalidAddress,
    );
}

#[test]
fn e102_preread_max_bytes_too_small() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            sni_preread_max_bytes: Some(4),
            ..listener("127.0.0.1:1000")
        }),
        ErrorCode::PrereadMaxBytesTooSmall,
    );
    assert!(
        m.contains("127.0.0.1:1000") && m.contains("sni_preread_max_bytes"),
        "{m}"
    );
    ok(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            sni_preread_max_bytes: Some(5),
            ..listener("127.0.0.1:1000")
        }),
    );
}

#[test]
fn max_unrouted_per_ip_is_off_unless_set() {
    let mut s = base();
    ok(&mut s, &add_listener(listener("127.0.0.1:1000")));
    ok(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            max_unrouted_per_ip: Some(4),
            ..listener("127.0.0.1:1001")
        }),
    );
    let limit = |s: &ConfigState, at: &str| {
        let address = at.parse().expect("address");
        s.listener(&address).and_then(|l| l.max_unrouted_per_ip)
    };
    assert_eq!(limit(&s, "127.0.0.1:1000"), Some(0), "unset is off (0)");
    assert_eq!(limit(&s, "127.0.0.1:1001"), Some(4));
}

#[test]
fn e003_unknown_reject_with_and_its_default() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            reject_with: Some(7),
            ..listener("127.0.0.1:1000")
        }),
        ErrorCode::InvalidValue,
    );
    assert!(m.contains("reject_with 7"), "{m}");
    ok(&mut s, &add_listener(listener("127.0.0.1:1000")));
    let address = "127.0.0.1:1000".parse().expect("address");
    assert_eq!(
        s.listener(&address).map(|l| l.reject_with()),
        Some(proto::RejectWith::Alert),
        "unset is the alert"
    );
}

#[test]
fn e103_invalid_timeout() {
    let mut s = base();
    let zero = Some(0);
    for config in [
        proto::TcpListenerConfig {
            sni_preread_timeout: zero,
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            front_timeout: zero,
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            back_timeout: zero,
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            connect_timeout: zero,
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            front_timeout_ms: Some(0),
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            connect_timeout_ms: Some(0),
            ..listener("127.0.0.1:1")
        },
        proto::TcpListenerConfig {
            server_first_timeout: zero,
            default_cluster: Some("a".into()),
            ..listener("127.0.0.1:1")
        },
    ] {
        refused(
            &mut s,
            &add_listener(config.clone()),
            ErrorCode::InvalidTimeout,
        );
        let update = proto::TcpListenerConfig {
            address: L.into(),
            ..config
        };
        refused(
            &mut s,
            &req(RequestType::UpdateTcpListener(update)),
            ErrorCode::InvalidTimeout,
        );
    }
}

/// Seconds (older clients and state files) and milliseconds are one
/// setting: stored as milliseconds alone, equal whichever form came,
/// and refused when both forms say different things.
#[test]
fn e003_connection_timeouts_in_either_form() {
    let resolve = |config: proto::TcpListenerConfig| resolve_listener(&config).map(|r| r.1);
    let seconds = resolve(proto::TcpListenerConfig {
        front_timeout: Some(9),
        back_timeout: Some(8),
        connect_timeout: Some(2),
        ..listener(L)
    });
    let millis = resolve(proto::TcpListenerConfig {
        front_timeout_ms: Some(9_000),
        back_timeout_ms: Some(8_000),
        connect_timeout_ms: Some(2_000),
        ..listener(L)
    });
    assert_eq!(seconds, millis);
    let Ok(resolved) = seconds else {
        panic!("refused: {seconds:?}")
    };
    assert_eq!(
        (resolved.front_timeout, resolved.front_timeout_ms),
        (Some(9), Some(9_000))
    );
    let Ok(finer) = resolve(proto::TcpListenerConfig {
        back_timeout_ms: Some(1_500),
        ..listener(L)
    }) else {
        panic!("1500 ms refused")
    };
    assert_eq!(
        (finer.back_timeout, finer.back_timeout_ms),
        (None, Some(1_500))
    );
    assert_eq!(front_timeout(&resolved), Duration::from_secs(9));
    assert_eq!(back_timeout(&resolved), Duration::from_secs(8));
    assert_eq!(connect_timeout(&resolved), Duration::from_secs(2));
    assert_eq!(
        front_timeout(&proto::TcpListenerConfig {
            front_timeout: Some(7),
            ..listener(L)
        }),
        Duration::from_secs(7)
    );
    assert_eq!(
        connect_timeout(&listener(L)),
        Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS)
    );
    let both = resolve(proto::TcpListenerConfig {
        front_timeout: Some(2),
        front_timeout_ms: Some(2_000),
        ..listener(L)
    });
    assert!(both.is_ok(), "{both:?}");
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            back_timeout: Some(1),
            back_timeout_ms: Some(1_500),
            ..listener("127.0.0.1:2")
        }),
        ErrorCode::InvalidValue,
    );
    assert!(m.contains("as 1s and as 1500ms"), "{m}");
}

#[test]
fn e104_server_first_without_default_cluster() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            server_first_timeout: Some(300),
            ..listener("127.0.0.1:25")
        }),
        ErrorCode::ServerFirstWithoutDefaultCluster,
    );
    assert!(m.contains("default_cluster"), "{m}");
    ok(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            server_first_timeout: Some(300),
            default_cluster: Some("a".into()),
            ..listener("127.0.0.1:25")
        }),
    );
}

#[test]
fn e105_listener_conflict() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            expect_proxy: true,
            ..listener(L)
        }),
        ErrorCode::ListenerConflict,
    );
    assert!(m.contains(L) && m.contains("update"), "{m}");
    assert!(m.contains("expect_proxy false → true"), "{m}");
    // The same listener added inactive while it is active is a conflict too.
    refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            active: Some(false),
            ..listener(L)
        }),
        ErrorCode::ListenerConflict,
    );
}

#[test]
fn e106_unknown_listener() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_frontend("a", "127.0.0.1:7777", Some("a.example.com"), &[]),
        ErrorCode::UnknownListener,
    );
    assert!(m.contains("127.0.0.1:7777"), "{m}");
}

#[test]
fn e201_invalid_sni_pattern() {
    let mut s = base();
    for bad in ["*.com", "a*.example.com", "", "a..b", "é.example.com"] {
        refused(
            &mut s,
            &add_frontend("a", L, Some(bad), &[]),
            ErrorCode::InvalidSniPattern,
        );
    }
    let m = refused(
        &mut s,
        &add_frontend("a", L, Some("*.com"), &[]),
        ErrorCode::InvalidSniPattern,
    );
    assert!(m.contains("cluster `a`") && m.contains("two labels"), "{m}");
}

#[test]
fn e202_invalid_alpn() {
    let mut s = base();
    let long = "x".repeat(256);
    for bad in [&["h2", "h2"][..], &[""], &[long.as_str()]] {
        refused(
            &mut s,
            &add_frontend("a", L, Some("b.example.com"), bad),
            ErrorCode::InvalidAlpn,
        );
    }
}

#[test]
fn e203_alpn_protocol_taken() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_frontend("b", L, Some("A.Example.com."), &["h2", "acme-tls/1"]),
        ErrorCode::AlpnProtocolTaken,
    );
    assert!(m.contains("h2") && m.contains("a.example.com"), "{m}");
    // Disjoint lists on the same name are fine.
    ok(
        &mut s,
        &add_frontend("b", L, Some("a.example.com"), &["acme-tls/1"]),
    );
}

#[test]
fn e204_frontend_conflict() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_frontend("b", L, Some("a.example.com"), &["http/1.1", "h2"]),
        ErrorCode::FrontendConflict,
    );
    assert!(m.contains("cluster `a`") && m.contains("remove"), "{m}");
    // Two frontends without ALPN for one name, to two clusters.
    ok(&mut s, &add_frontend("a", L, Some("c.example.com"), &[]));
    refused(
        &mut s,
        &add_frontend("b", L, Some("c.example.com"), &[]),
        ErrorCode::FrontendConflict,
    );
    // Same cluster, other tags.
    let mut tagged = frontend("a", L, Some("c.example.com"), &[]);
    tagged.tags.insert("owner".into(), "team-x".into());
    refused(
        &mut s,
        &req(RequestType::AddTcpFrontend(tagged)),
        ErrorCode::FrontendConflict,
    );
}

#[test]
fn e205_catch_all_mixed_with_sni() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_frontend("b", L, None, &[]),
        ErrorCode::CatchAllMixedWithSni,
    );
    assert!(m.contains("default_cluster"), "{m}");
    // The reverse: an SNI frontend on a plain-TCP listener.
    ok(&mut s, &add_frontend("b", L2, None, &[]));
    let m = refused(
        &mut s,
        &add_frontend("a", L2, Some("x.example.com"), &[]),
        ErrorCode::CatchAllMixedWithSni,
    );
    assert!(m.contains("default_cluster"), "{m}");
}

#[test]
fn e206_multiple_catch_all() {
    let mut s = base();
    ok(&mut s, &add_frontend("b", L2, None, &[]));
    let m = refused(
        &mut s,
        &add_frontend("a", L2, None, &[]),
        ErrorCode::MultipleCatchAll,
    );
    assert!(m.contains("cluster `b`"), "{m}");
}

#[test]
fn e207_alpn_without_sni() {
    let mut s = base();
    refused(
        &mut s,
        &add_frontend("b", L2, None, &["h2"]),
        ErrorCode::AlpnWithoutSni,
    );
}

#[test]
fn e208_relay_without_expect_proxy() {
    let mut s = base();
    // A frontend tying a relay cluster to a listener without expect_proxy.
    let m = refused(
        &mut s,
        &add_frontend("relay", L, Some("r.example.com"), &[]),
        ErrorCode::RelayWithoutExpectProxy,
    );
    assert!(m.contains("relay") && m.contains("expect_proxy"), "{m}");
    ok(
        &mut s,
        &add_frontend("relay", L2, Some("r.example.com"), &[]),
    );
    // An update dropping expect_proxy under a relay frontend.
    refused(
        &mut s,
        &req(RequestType::UpdateTcpListener(listener(L2))),
        ErrorCode::RelayWithoutExpectProxy,
    );
    // A relay default_cluster needs expect_proxy too.
    refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            default_cluster: Some("relay".into()),
            ..listener("127.0.0.1:1")
        }),
        ErrorCode::RelayWithoutExpectProxy,
    );
}

#[test]
fn e301_invalid_id() {
    let mut s = base();
    let long = "c".repeat(MAX_ID_LEN + 1);
    for bad in ["", "a b", "tab\t", "é", long.as_str()] {
        refused(
            &mut s,
            &cluster(bad, proto::ProxyProtocol::None),
            ErrorCode::InvalidId,
        );
        refused(
            &mut s,
            &req(RequestType::AddBackend(backend("a", bad, "127.0.0.1:1"))),
            ErrorCode::InvalidId,
        );
    }
    ok(
        &mut s,
        &cluster(&"c".repeat(MAX_ID_LEN), proto::ProxyProtocol::None),
    );
}

#[test]
fn e302_unknown_cluster() {
    let mut s = base();
    refused(
        &mut s,
        &add_frontend("nope", L, Some("n.example.com"), &[]),
        ErrorCode::UnknownCluster,
    );
    refused(
        &mut s,
        &req(RequestType::AddBackend(backend(
            "nope",
            "n-0",
            "127.0.0.1:1",
        ))),
        ErrorCode::UnknownCluster,
    );
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            default_cluster: Some("nope".into()),
            ..listener("127.0.0.1:1")
        }),
        ErrorCode::UnknownCluster,
    );
    assert!(m.contains("`nope`") && m.contains("127.0.0.1:1"), "{m}");
}

#[test]
fn e303_cluster_conflict() {
    let mut s = base();
    let m = refused(
        &mut s,
        &cluster("a", proto::ProxyProtocol::Send),
        ErrorCode::ClusterConflict,
    );
    assert!(m.contains("proxy_protocol none → send"), "{m}");
}

#[test]
fn e304_duplicate_backend_id() {
    let mut s = base();
    let m = refused(
        &mut s,
        &req(RequestType::AddBackend(backend(
            "b",
            "a-0",
            "127.0.0.1:9001",
        ))),
        ErrorCode::DuplicateBackendId,
    );
    assert!(m.contains("a-0") && m.contains("cluster `a`"), "{m}");
}

#[test]
fn e305_backend_conflict() {
    let mut s = base();
    refused(
        &mut s,
        &req(RequestType::AddBackend(backend(
            "a",
            "a-0",
            "127.0.0.1:9002",
        ))),
        ErrorCode::BackendConflict,
    );
    refused(
        &mut s,
        &req(RequestType::AddBackend(proto::Backend {
            weight: Some(5),
            ..backend("a", "a-0", "127.0.0.1:9001")
        })),
        ErrorCode::BackendConflict,
    );
}

#[test]
fn e401_not_found() {
    let mut s = base();
    let nowhere = proto::ListenerAddress {
        address: "127.0.0.1:1".into(),
        protocol: None,
    };
    for request in [
        RequestType::RemoveListener(nowhere.clone()),
        RequestType::ActivateListener(nowhere.clone()),
        RequestType::DeactivateListener(nowhere),
        RequestType::UpdateTcpListener(listener("127.0.0.1:1")),
        RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: "nope".into(),
        }),
        RequestType::RemoveTcpFrontend(frontend("a", L, Some("z.example.com"), &[])),
        // The right key, another cluster.
        RequestType::RemoveTcpFrontend(frontend(
            "b",
            L,
            Some("a.example.com"),
            &["h2", "http/1.1"],
        )),
        RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: "a".into(),
            backend_id: "a-9".into(),
            address: "127.0.0.1:9001".into(),
        }),
        // The right id, another address or cluster.
        RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: "a".into(),
            backend_id: "a-0".into(),
            address: "127.0.0.1:9002".into(),
        }),
        RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: "b".into(),
            backend_id: "a-0".into(),
            address: "127.0.0.1:9001".into(),
        }),
    ] {
        refused(&mut s, &req(request), ErrorCode::NotFound);
    }
}

#[test]
fn e402_in_use() {
    let mut s = base();
    ok(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            default_cluster: Some("b".into()),
            ..listener("127.0.0.1:1")
        }),
    );
    let remove = |id: &str| {
        req(RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: id.into(),
        }))
    };
    let m = refused(&mut s, &remove("a"), ErrorCode::InUse);
    assert!(m.contains("a.example.com") && m.contains("a-0"), "{m}");
    let m = refused(&mut s, &remove("b"), ErrorCode::InUse);
    assert!(
        m.contains("127.0.0.1:1") && m.contains("default_cluster"),
        "{m}"
    );
    let m = refused(
        &mut s,
        &req(RequestType::RemoveListener(proto::ListenerAddress {
            address: L.into(),
            protocol: None,
        })),
        ErrorCode::InUse,
    );
    assert!(m.contains("a.example.com"), "{m}");
}

#[test]
fn e403_unsupported_request() {
    let mut s = base();
    for request in [
        RequestType::Status(proto::Status {}),
        RequestType::ListListeners(proto::ListListeners {}),
        RequestType::ListClusters(proto::ListClusters::default()),
        RequestType::ListFrontends(proto::ListFrontends::default()),
        RequestType::ListSources(proto::ListSources {}),
        RequestType::QueryMetrics(proto::QueryMetrics::default()),
        RequestType::QueryRejects(proto::QueryRejects::default()),
        RequestType::SaveState(proto::SaveState { path: "x".into() }),
        RequestType::LoadState(proto::LoadState { path: "x".into() }),
        RequestType::SoftStop(proto::SoftStop {}),
        RequestType::HardStop(proto::HardStop {}),
    ] {
        refused(&mut s, &req(request), ErrorCode::UnsupportedRequest);
    }
    refused(
        &mut s,
        &proto::Request { request_type: None },
        ErrorCode::UnsupportedRequest,
    );
}

#[test]
fn e003_invalid_enum_value() {
    let mut s = base();
    for cluster in [
        proto::Cluster {
            cluster_id: "z".into(),
            load_balancing: 9,
            ..Default::default()
        },
        proto::Cluster {
            cluster_id: "z".into(),
            proxy_protocol: -1,
            ..Default::default()
        },
    ] {
        refused(
            &mut s,
            &req(RequestType::AddCluster(cluster)),
            ErrorCode::InvalidValue,
        );
    }
}

/// Every code `dispatch` can produce has its test above; the list is
/// what the file's tests reach, kept in step with `ErrorCode::ALL`.
#[test]
fn dispatch_codes_are_all_tested() {
    let file_only: BTreeSet<ErrorCode> = [
        ErrorCode::InvalidToml,
        ErrorCode::UnknownKey,
        ErrorCode::StateFileCorrupt,
        ErrorCode::StateFileVersion,
        ErrorCode::StateFileIo,
        ErrorCode::StateFileIntegrity,
        ErrorCode::StateFileEmpty,
        ErrorCode::StateJournalCorrupt,
        // The route sources' own rules, tested in `sources/`.
        ErrorCode::ClusterDeclaredElsewhere,
        ErrorCode::InvalidLabel,
        ErrorCode::LabelsDisagree,
        ErrorCode::AmbiguousListenerPort,
        // `config check`'s reading of the etcd TLS files (config/etcd_files).
        ErrorCode::EtcdTlsFile,
    ]
    .into();
    let source = include_str!("tests.rs");
    for code in ErrorCode::ALL {
        // Warnings come from the config file alone (config::warnings).
        if file_only.contains(&code) || code.is_warning() {
            continue;
        }
        let name = format!("fn {}_", code.as_str().to_ascii_lowercase());
        assert!(
            source.contains(&name),
            "no dispatch test for {code} ({code:?})"
        );
    }
}

fn quic_listener(address: &str) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        protocol: Some(proto::ListenerProtocol::Quic as i32),
        ..listener(address)
    }
}

fn quic_cluster(id: &str) -> proto::Request {
    req(RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        protocol: Some(proto::ListenerProtocol::Quic as i32),
        ..Default::default()
    }))
}

#[test]
fn e107_listener_protocol_setting() {
    let mut s = base();
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            max_flows: Some(10),
            ..listener("127.0.0.1:1")
        }),
        ErrorCode::ListenerProtocolSetting,
    );
    assert!(m.contains("max_flows") && m.contains("quic"), "{m}");
    let m = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            expect_proxy: true,
            ..quic_listener("127.0.0.1:1")
        }),
        ErrorCode::ListenerProtocolSetting,
    );
    assert!(m.contains("expect_proxy") && m.contains("tcp"), "{m}");
    refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            reject_with: Some(proto::RejectWith::Drop as i32),
            ..listener("127.0.0.1:1")
        }),
        ErrorCode::ListenerProtocolSetting,
    );
}

#[test]
fn e209_protocol_mismatch() {
    let mut s = base();
    ok(&mut s, &quic_cluster("q"));
    ok(&mut s, &add_listener(quic_listener("127.0.0.1:2")));
    // A QUIC cluster's frontend where only a TCP listener is, and the
    // reverse.
    let quic_frontend = |address: &str, alpn: &[&str]| {
        req(RequestType::AddTcpFrontend(proto::TcpFrontend {
            protocol: Some(proto::ListenerProtocol::Quic as i32),
            ..frontend("q", address, Some("q.example.com"), alpn)
        }))
    };
    let m = refused(&mut s, &quic_frontend(L, &[]), ErrorCode::ProtocolMismatch);
    assert!(m.contains("tcp listener") && m.contains("`q`"), "{m}");
    refused(
        &mut s,
        &add_frontend("a", "127.0.0.1:2", Some("a.example.com"), &[]),
        ErrorCode::ProtocolMismatch,
    );
    // A request for a QUIC cluster's frontend that does not say QUIC.
    let m = refused(
        &mut s,
        &add_frontend("q", "127.0.0.1:2", Some("q.example.com"), &[]),
        ErrorCode::ProtocolMismatch,
    );
    assert!(m.contains("preread frontend quic"), "{m}");
    refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            default_cluster: Some("a".into()),
            ..quic_listener("127.0.0.1:3")
        }),
        ErrorCode::ProtocolMismatch,
    );
    // A frontend pins its cluster's protocol.
    ok(&mut s, &quic_frontend("127.0.0.1:2", &["h3"]));
    refused(
        &mut s,
        &req(RequestType::UpdateCluster(proto::Cluster {
            cluster_id: "q".into(),
            ..Default::default()
        })),
        ErrorCode::ProtocolMismatch,
    );
}

#[test]
fn e120_access_prefix_not_a_prefix() {
    let mut s = base();
    let message = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            deny: vec!["10.1.2.3/8".into()],
            ..listener("127.0.0.1:9999")
        }),
        ErrorCode::InvalidAccessPrefix,
    );
    assert!(message.contains("write 10.0.0.0/8"), "{message}");
    refused(
        &mut s,
        &req(RequestType::UpdateCluster(proto::Cluster {
            cluster_id: "a".into(),
            allow: vec!["10.0.0.0/40".into()],
            ..Default::default()
        })),
        ErrorCode::InvalidAccessPrefix,
    );
}

#[test]
fn e306_quic_cluster_setting() {
    let mut s = base();
    let m = refused(
        &mut s,
        &req(RequestType::AddCluster(proto::Cluster {
            cluster_id: "q".into(),
            protocol: Some(proto::ListenerProtocol::Quic as i32),
            proxy_protocol: proto::ProxyProtocol::Send as i32,
            ..Default::default()
        })),
        ErrorCode::QuicClusterSetting,
    );
    assert!(m.contains("proxy_protocol"), "{m}");
}

#[test]
fn e125_deny_ja4_not_a_fingerprint() {
    let mut s = base();
    let message = refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            deny_ja4: vec!["t13d1516h2_8DAAF6152771_e5627efa2ab1".into()],
            ..listener("127.0.0.1:9999")
        }),
        ErrorCode::InvalidJa4,
    );
    assert!(message.contains("character 13"), "{message}");
    assert!(message.contains("copy the fingerprint whole"), "{message}");
    refused(
        &mut s,
        &req(RequestType::UpdateCluster(proto::Cluster {
            cluster_id: "a".into(),
            deny_ja4: vec!["t13d1516h2".into()],
            ..Default::default()
        })),
        ErrorCode::InvalidJa4,
    );
}

#[test]
fn e121_connection_rate_not_a_rate() {
    let mut s = base();
    refused(
        &mut s,
        &req(RequestType::AddCluster(proto::Cluster {
            cluster_id: "z".into(),
            connection_rate_per_ip: Some(proto::ConnectionRate {
                rate: 0,
                per_ms: 1_000,
                burst: None,
            }),
            ..Default::default()
        })),
        ErrorCode::InvalidConnectionRate,
    );
}

#[test]
fn e122_ipv6_prefix_past_128() {
    let mut s = base();
    refused(
        &mut s,
        &add_listener(proto::TcpListenerConfig {
            ipv6_prefix: Some(129),
            ..listener("127.0.0.1:9999")
        }),
        ErrorCode::InvalidIpv6Prefix,
    );
}
