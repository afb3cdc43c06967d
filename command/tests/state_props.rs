//! Properties of `ConfigState`, `generate_requests`, `diff`, the inverses
//! of `dispatch_undoable` and generations `plan`ned from a reload (their
//! route tables included, which the committed state shares), over random
//! request sequences.
//!
//! States are built by dispatching random requests over a small universe of
//! addresses, ids, patterns and protocols (so that conflicts, references
//! and re-adds are frequent); refused requests must leave the state
//! unchanged, and `check_invariants` runs after every step.

use std::collections::BTreeMap;

use command::change::Change;
use command::codes::ErrorCode;
use command::diff::diff;
use command::generation::{Planned, plan};
use command::listener_key::ListenerKey;
use command::proto;
use command::proto::request::RequestType;
use command::state::{Applied, ConfigState};
use command::undo::Undoable;
use command::validate::ValidationError;
use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, Lookup};
use proptest::prelude::*;

/// Two spellings of one address, so canonical storage is exercised.
const LISTENERS: &[&str] = &[
    "127.0.0.1:8443",
    "127.0.0.1:08443",
    "[::1]:8443",
    "10.0.0.1:443",
];
const CLUSTERS: &[&str] = &["a", "b", "c", "r"];
const SNIS: &[&str] = &[
    "a.example.com",
    "A.Example.com.",
    "*.example.com",
    "**.example.com",
    "b.example.com",
    "x.test",
];
const PROTOCOLS: &[&str] = &["h2", "http/1.1", "acme-tls/1"];
const BACKEND_IDS: &[&str] = &["b0", "b1", "b2", "b3"];
const BACKEND_ADDRS: &[&str] = &["127.0.0.1:9001", "127.0.0.1:9002", "db.internal:5432"];

fn req(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(list).prop_map(str::to_owned)
}

fn alpn() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(PROTOCOLS, 0..=PROTOCOLS.len())
        .prop_shuffle()
        .prop_map(|names| names.into_iter().map(str::to_owned).collect())
}

fn listener_config() -> impl Strategy<Value = proto::TcpListenerConfig> {
    (
        pick(LISTENERS),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(5)), Just(Some(4096))],
        prop_oneof![3 => Just(None), 1 => Just(Some(100))],
        prop_oneof![2 => Just(None), 1 => pick(CLUSTERS).prop_map(Some)],
        prop_oneof![3 => Just(None), 1 => Just(Some(300))],
        prop_oneof![3 => Just(None), 1 => Just(Some(10))],
        prop_oneof![Just(None), any::<bool>().prop_map(Some)],
        deny(),
    )
        .prop_map(
            |(address, expect_proxy, max, timeout, default, server_first, front, active, deny)| {
                proto::TcpListenerConfig {
                    address,
                    expect_proxy,
                    sni_preread_timeout: timeout,
                    sni_preread_max_bytes: max,
                    default_cluster: default,
                    server_first_timeout: server_first,
                    front_timeout: front,
                    back_timeout: None,
                    connect_timeout: None,
                    active,
                    // Unset: the state resolves them to the defaults.
                    reject_with: None,
                    max_unrouted_per_ip: None,
                    front_timeout_ms: None,
                    back_timeout_ms: None,
                    connect_timeout_ms: None,
                    deny,
                    ..proto::TcpListenerConfig::default()
                }
            },
        )
}

/// Mostly none; else prefixes in other than their canonical form (out
/// of order, repeated, a bare address), which the state stores canonical.
fn deny() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        3 => Just(Vec::new()),
        1 => Just(vec!["2001:db8::/32".to_owned(), "10.0.0.0/8".to_owned(), "10.0.0.0/8".to_owned()]),
        1 => Just(vec!["192.0.2.7".to_owned()]),
    ]
}

fn frontend() -> impl Strategy<Value = proto::TcpFrontend> {
    (
        pick(CLUSTERS),
        pick(LISTENERS),
        prop_oneof![1 => Just(None), 4 => pick(SNIS).prop_map(Some)],
        alpn(),
        prop_oneof![4 => Just(BTreeMap::new()), 1 => Just(BTreeMap::from([("team".to_owned(), "x".to_owned())]))],
        protocol(),
    )
        .prop_map(|(cluster_id, address, sni, alpn, tags, protocol)| {
            // A catch-all with ALPN is refused; keep most catch-alls valid.
            let alpn = if sni.is_none() { Vec::new() } else { alpn };
            proto::TcpFrontend {
                cluster_id,
                address,
                sni,
                alpn,
                tags,
                protocol,
            }
        })
}

/// The `protocol` of a request naming a listener or a frontend: mostly
/// TCP (unset), sometimes QUIC, so that a TCP and a QUIC listener share
/// the universe's addresses.
fn protocol() -> impl Strategy<Value = Option<i32>> {
    prop_oneof![3 => Just(None), 1 => Just(Some(proto::ListenerProtocol::Quic as i32))]
}

fn backend() -> impl Strategy<Value = proto::Backend> {
    (
        pick(CLUSTERS),
        pick(BACKEND_IDS),
        pick(BACKEND_ADDRS),
        prop_oneof![Just(None), Just(Some(1)), Just(Some(100))],
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(0)), Just(Some(2))],
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

fn add_cluster() -> impl Strategy<Value = RequestType> {
    let health_check = prop_oneof![
        Just(None),
        (0..2_i32).prop_map(|kind| Some(proto::HealthCheck {
            kind,
            interval_ms: Some(500),
            timeout_ms: None,
            rise: None,
            fall: Some(2),
        })),
    ];
    let rate = prop_oneof![
        3 => Just(None),
        1 => Just(Some(proto::ConnectionRate { rate: 50, per_ms: 1_000, burst: None })),
    ];
    (
        pick(CLUSTERS),
        0..4_i32,
        0..3_i32,
        health_check,
        rate,
        deny(),
    )
        .prop_map(
            |(cluster_id, lb, pp, health_check, connection_rate_per_ip, allow)| {
                RequestType::AddCluster(proto::Cluster {
                    cluster_id,
                    load_balancing: lb,
                    proxy_protocol: pp,
                    max_connections_per_ip: 0,
                    health_check,
                    allow,
                    connection_rate_per_ip,
                    ..proto::Cluster::default()
                })
            },
        )
}

/// A listener config made a QUIC listener's.
fn quic_listener(config: proto::TcpListenerConfig) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        protocol: Some(proto::ListenerProtocol::Quic as i32),
        quic_idle_timeout_ms: Some(5_000),
        max_flows_per_ip: Some(3),
        ..config
    }
}

/// An add-cluster request made a QUIC cluster's.
fn quic_cluster(request: RequestType) -> RequestType {
    match request {
        RequestType::AddCluster(cluster) => RequestType::AddCluster(proto::Cluster {
            protocol: Some(proto::ListenerProtocol::Quic as i32),
            ..cluster
        }),
        other => other,
    }
}

/// One state-changing request over the universe.
fn request() -> impl Strategy<Value = proto::Request> {
    let address = || {
        (pick(LISTENERS), protocol())
            .prop_map(|(address, protocol)| proto::ListenerAddress { address, protocol })
    };
    let kind = prop_oneof![
        4 => add_cluster(),
        1 => pick(CLUSTERS).prop_map(|cluster_id| RequestType::RemoveCluster(proto::ClusterRef { cluster_id })),
        4 => listener_config().prop_map(RequestType::AddTcpListener),
        // QUIC listeners and clusters, against the same universe: most of
        // their TCP-only settings are refused (E107, E306), and the
        // protocols must agree (E209).
        1 => listener_config().prop_map(|config| RequestType::AddTcpListener(quic_listener(config))),
        1 => add_cluster().prop_map(quic_cluster),
        2 => listener_config().prop_map(RequestType::UpdateTcpListener),
        1 => listener_config().prop_map(|config| RequestType::UpdateTcpListener(quic_listener(config))),
        1 => address().prop_map(RequestType::RemoveListener),
        1 => address().prop_map(RequestType::ActivateListener),
        1 => address().prop_map(RequestType::DeactivateListener),
        8 => frontend().prop_map(RequestType::AddTcpFrontend),
        2 => frontend().prop_map(RequestType::RemoveTcpFrontend),
        4 => backend().prop_map(RequestType::AddBackend),
        2 => backend().prop_map(RequestType::UpdateBackend),
        2 => add_cluster().prop_map(|kind| match kind {
            RequestType::AddCluster(cluster) => RequestType::UpdateCluster(cluster),
            other => other,
        }),
        1 => backend().prop_map(|b| RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: b.cluster_id,
            backend_id: b.backend_id,
            address: b.address,
        })),
    ];
    kind.prop_map(req)
}

/// Dispatches every request; a refused one must change nothing.
fn build(requests: &[proto::Request]) -> ConfigState {
    let mut state = ConfigState::default();
    for request in requests {
        let before = state.clone();
        if state.dispatch(request).is_err() {
            assert_eq!(
                state, before,
                "a refused request changed the state: {request:?}"
            );
        }
        state.check_invariants();
    }
    state
}

/// A random state: some clusters and listeners first, so that most later
/// frontends and backends have something to attach to, then anything.
fn a_state() -> impl Strategy<Value = ConfigState> {
    (
        proptest::collection::vec(add_cluster().prop_map(req), 0..5),
        proptest::collection::vec(
            listener_config().prop_map(|l| req(RequestType::AddTcpListener(l))),
            0..4,
        ),
        proptest::collection::vec(request(), 0..80),
    )
        .prop_map(|(clusters, listeners, requests)| {
            build(&[clusters, listeners, requests].concat())
        })
}

/// Dispatches `requests` in order into `state`, each accepted as a change.
fn apply_all(state: &mut ConfigState, requests: &[proto::Request]) {
    for request in requests {
        let applied = state.dispatch(request);
        assert_eq!(applied, Ok(Applied::Changed), "{request:?}");
        state.check_invariants();
    }
}

fn dispatch(state: &mut ConfigState, kind: RequestType) {
    let request = req(kind);
    if let Err(e) = state.dispatch(&request) {
        panic!("{request:?} refused: {e}");
    }
    state.check_invariants();
}

fn cluster(id: &str) -> RequestType {
    RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        ..Default::default()
    })
}

fn listener(address: &str) -> RequestType {
    RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: address.into(),
        ..Default::default()
    })
}

fn tcp_frontend(cluster: &str, address: &str, sni: &str, alpn: &[&str]) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.into(),
        address: address.into(),
        sni: Some(sni.into()),
        alpn: alpn.iter().map(|p| (*p).to_owned()).collect(),
        tags: BTreeMap::new(),
        protocol: None,
    }
}

/// A reload as the command server runs it, with workers that accept the
/// generation: planned on the running state, which becomes the plan's.
fn reload_ok(current: &mut ConfigState, desired: &ConfigState) -> Planned<ValidationError> {
    let before = current.clone();
    let steps = diff(current, desired);
    let planned = plan(current, steps, |_, _| Ok(()));
    assert_eq!(*current, before, "planning leaves the state as it was");
    assert_same_storage(current, &before);
    for (address, table) in &planned.generation.routes_before {
        let held = before.route_table(address).expect("a listener before");
        assert!(
            table.same_storage(held),
            "{address}: a copy, not the table held"
        );
    }
    assert_routes_of(&planned.generation, &before, desired);
    planned
        .generation
        .apply_to(current)
        .expect("the generation commits");
    current.check_invariants();
    for (address, table) in &planned.generation.routes {
        let committed = current
            .route_table(address)
            .expect("a listener with routes");
        assert!(
            committed.same_storage(table),
            "{address}: the committed state keeps a copy of the workers' routes"
        );
    }
    planned
}

/// Every listener of `a` holds the very table it holds in `b`: `a` is `b`
/// or a clone of it, and no table of it was copied since.
fn assert_same_storage(a: &ConfigState, b: &ConfigState) {
    for (address, table) in a.route_tables() {
        assert!(
            b.route_table(&address)
                .is_some_and(|t| t.same_storage(table)),
            "{address}: the table was copied"
        );
    }
}

/// The typed changes of accepted requests.
fn changes_of(requests: &[proto::Request]) -> Vec<Change> {
    requests
        .iter()
        .map(|request| Change::from_request(request).expect("an accepted request is a change"))
        .collect()
}

/// The generation from `a` to `b` carries `b`'s table for every listener
/// of `b` whose routes differ from `a`'s, and `a`'s table before it for
/// those `a` has: a worker that installs them routes as `b` (or, undone,
/// as `a`) without changing a table itself.
fn assert_routes_of(
    generation: &command::generation::Generation,
    a: &ConfigState,
    b: &ConfigState,
) {
    let empty = preread_core::routes::RouteTable::new();
    let tables = |state: &ConfigState| -> BTreeMap<ListenerKey, preread_core::routes::RouteTable> {
        state
            .route_tables()
            .map(|(address, table)| (address, table.clone()))
            .collect()
    };
    let after: BTreeMap<_, _> = generation.routes.iter().cloned().collect();
    let before: BTreeMap<_, _> = generation.routes_before.iter().cloned().collect();
    assert_eq!(
        after.len(),
        generation.routes.len(),
        "one table per listener"
    );
    for (address, table) in tables(b) {
        let old = a.route_table(&address).unwrap_or(&empty);
        match after.get(&address) {
            Some(carried) => assert_eq!(carried, &table, "{address}: not b's routes"),
            None => assert_eq!(old, &table, "{address}: changed routes not carried"),
        }
    }
    for (address, table) in tables(a) {
        if b.route_table(&address).unwrap_or(&empty) != &table {
            assert_eq!(
                before.get(&address),
                Some(&table),
                "{address}: a's routes not carried"
            );
        }
    }
    for (address, table) in &before {
        assert_eq!(
            a.route_table(address),
            Some(table),
            "{address}: not a's routes"
        );
    }
}

fn addr(text: &str) -> ListenerKey {
    ListenerKey::tcp(text.parse().expect("a test address"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// (a) The generated requests rebuild an equal state from empty.
    #[test]
    fn generate_requests_replays_to_an_equal_state(state in a_state()) {
        let mut rebuilt = ConfigState::default();
        apply_all(&mut rebuilt, &state.generate_requests());
        prop_assert_eq!(&rebuilt, &state);
        // Replayed onto itself, every request is an idempotent re-add.
        for request in state.generate_requests() {
            prop_assert_eq!(rebuilt.dispatch(&request), Ok(Applied::Unchanged));
        }
    }

    /// (b) `diff(a, b)` applied to `a` is accepted request by request and
    /// gives `b`; so does the generation planned from it.
    #[test]
    fn diff_turns_a_into_b(a in a_state(), b in a_state()) {
        let mut state = a.clone();
        apply_all(&mut state, &diff(&a, &b));
        prop_assert_eq!(&state, &b);
        prop_assert!(diff(&b, &b).is_empty());

        let mut current = a.clone();
        let report = reload_ok(&mut current, &b);
        prop_assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        prop_assert_eq!(report.generation.changes, changes_of(&diff(&a, &b)));
        prop_assert_eq!(&current, &b);
    }

    /// (g) A boot's replay is the generated requests, builds the state
    /// from nothing, and its inverse takes it back to nothing.
    #[test]
    fn a_replay_builds_the_state_and_undoes_it(state in a_state()) {
        let generation = command::generation::Generation::replay(&state).expect("all additions");
        prop_assert_eq!(&generation.changes, &changes_of(&state.generate_requests()));
        assert_routes_of(&generation, &ConfigState::default(), &state);
        for (address, table) in &generation.routes {
            prop_assert!(!table.is_empty(), "{}: an empty table carried", address);
            prop_assert!(state.route_table(address).is_some_and(|t| t.same_storage(table)));
        }
        prop_assert!(generation.routes_before.is_empty());
        let mut built = ConfigState::default();
        apply_all(&mut built, &generation.requests());
        prop_assert_eq!(&built, &state);
        apply_all(&mut built, &generation.inverse().requests());
        prop_assert_eq!(&built, &ConfigState::default());
    }

    /// (e) The inverse of every accepted change is accepted on the state
    /// the change produced, as a change, and gives back an equal state.
    /// (h) A typed change round-trips through its request, and the state
    /// it builds is the one the request built: the model loses nothing the
    /// state keeps, and the state accepts what the model writes.
    #[test]
    fn a_change_round_trips_and_builds_the_same_state(state in a_state(), requests in proptest::collection::vec(request(), 1..40)) {
        let mut state = state;
        for request in requests {
            let Ok(change) = Change::from_request(&request) else {
                continue;
            };
            let written = change.to_request();
            prop_assert_eq!(Change::from_request(&written), Ok(change.clone()));
            let mut by_change = state.clone();
            let applied = by_change.dispatch(&written);
            let by_request = state.dispatch(&request);
            prop_assert_eq!(applied.is_ok(), by_request.is_ok(), "{:?}", change);
            prop_assert_eq!(&by_change, &state, "{:?}", change);
        }
    }

    #[test]
    fn every_change_has_an_exact_inverse(state in a_state(), requests in proptest::collection::vec(request(), 1..40)) {
        let mut state = state;
        for request in requests {
            let before = state.clone();
            match state.dispatch_undoable(&request) {
                Err(_) => prop_assert_eq!(&state, &before),
                Ok(Undoable::Unchanged) => prop_assert_eq!(&state, &before),
                Ok(Undoable::Changed { undo }) => {
                    let mut undone = state.clone();
                    prop_assert_eq!(undone.dispatch(&undo), Ok(Applied::Changed), "undo of {:?}", request);
                    undone.check_invariants();
                    prop_assert_eq!(&undone, &before, "undo {:?} of {:?}", undo, request);
                }
            }
        }
    }

    /// (f) A generation's inverse, applied after it, is accepted step by
    /// step and gives back the state it started from; a check that refuses
    /// a change leaves no trace of it in the plan.
    #[test]
    fn a_generation_and_its_inverse_cancel_out(a in a_state(), b in a_state(), refuse in 0..8_usize) {
        let mut seen = 0;
        let mut state = a.clone();
        let planned: Planned<ValidationError> = plan(&mut state, diff(&a, &b), |_, _| {
            seen += 1;
            if seen % 8 == refuse {
                Err(ValidationError::new(ErrorCode::InUse, "refused by the test's check"))
            } else {
                Ok(())
            }
        });
        prop_assert_eq!(&state, &a, "planning leaves the state as it was");
        assert_same_storage(&state, &a);
        let mut planned_on = a.clone();
        apply_all(&mut planned_on, &planned.generation.requests());
        assert_routes_of(&planned.generation, &a, &planned_on);
        assert_routes_of(&planned.generation.inverse(), &planned_on, &a);
        apply_all(&mut state, &planned.generation.requests());
        state.check_invariants();
        let mut back = state.clone();
        apply_all(&mut back, &planned.generation.inverse().requests());
        prop_assert_eq!(&back, &a);
        prop_assert_eq!(planned.generation.inverse().inverse(), planned.generation);
    }

    /// (c) A frontend whose SNI or ALPN changes: after the reload its old
    /// route is gone from the route table, the new one routes.
    #[test]
    fn changed_frontend_leaves_no_old_route(
        base in a_state(),
        old in (pick(SNIS), alpn()),
        new in (pick(SNIS), alpn()),
    ) {
        let pattern = |sni: &str| validate_sni_pattern(sni).expect("a valid test pattern");
        let alpn_set = |names: &[String]| {
            if names.is_empty() { AlpnSet::Any } else { AlpnSet::protocols(names).expect("valid test ALPN") }
        };
        let (old_key, new_key) = ((pattern(&old.0), alpn_set(&old.1)), (pattern(&new.0), alpn_set(&new.1)));
        prop_assume!(old_key != new_key);
        let at = "127.0.0.2:443";
        let with = |sni: &str, alpn: &[String]| {
            let mut state = base.clone();
            dispatch(&mut state, cluster("moved"));
            dispatch(&mut state, listener(at));
            let names: Vec<&str> = alpn.iter().map(String::as_str).collect();
            dispatch(&mut state, RequestType::AddTcpFrontend(tcp_frontend("moved", at, sni, &names)));
            state
        };
        let mut current = with(&old.0, &old.1);
        let desired = with(&new.0, &new.1);
        let report = reload_ok(&mut current, &desired);
        prop_assert!(report.skipped.is_empty());
        prop_assert_eq!(&current, &desired);

        let mut table = current.route_table(&addr(at)).expect("the listener").clone();
        prop_assert_eq!(table.remove(&old_key.0, &old_key.1), None, "old route still there");
        let routed = table.remove(&new_key.0, &new_key.1);
        prop_assert_eq!(routed.as_deref(), Some("moved"));
        prop_assert!(table.is_empty());
        // A client of the old exact name no longer reaches the cluster
        // through it.
        if old_key.0.wildcard().is_empty() && old_key.0 != new_key.0 && new_key.0.wildcard().is_empty() {
            let name = old_key.0.to_string();
            let lookup = current.route_table(&addr(at)).expect("the listener").lookup(name.as_bytes(), []);
            prop_assert!(matches!(lookup, Lookup::SniUnmatched), "{lookup:?}");
        }
    }

    /// (d) The clash cycle: the config wants a frontend that clashes with one
    /// added at runtime. When the runtime frontend cannot be dropped (the
    /// workers refuse its removal), the reload skips the clashing frontend
    /// with its code and applies everything else; once the runtime frontend
    /// is removed, the next reload applies it.
    #[test]
    fn clash_is_skipped_then_applied_once_fixed(old in a_state(), rest in a_state()) {
        let at = "127.0.0.3:443";
        let declare = |state: &mut ConfigState| {
            dispatch(state, cluster("cfg-a"));
            dispatch(state, cluster("cfg-b"));
            dispatch(state, listener(at));
        };
        let wanted = tcp_frontend("cfg-a", at, "clash.example.com", &["h2"]);
        // As the state stores it (ALPN sorted), so the removal the diff emits
        // is recognisable below.
        let runtime = tcp_frontend("cfg-b", at, "clash.example.com", &["h2", "http/1.1"]);

        let mut desired = rest.clone();
        declare(&mut desired);
        dispatch(&mut desired, RequestType::AddTcpFrontend(wanted.clone()));

        let mut current = old.clone();
        declare(&mut current);
        dispatch(&mut current, RequestType::AddTcpFrontend(runtime.clone()));

        let drop_runtime = req(RequestType::RemoveTcpFrontend(runtime.clone()));
        let steps = diff(&current, &desired);
        let drop_runtime = changes_of(&[drop_runtime]);
        let report = plan(&mut current, steps, |change, _| {
            if drop_runtime.contains(change) {
                Err(ValidationError::new(ErrorCode::InUse, "frontend busy"))
            } else {
                Ok(())
            }
        });
        report.generation.apply_to(&mut current).expect("commits");
        current.check_invariants();
        let skipped: Vec<(Option<RequestType>, ErrorCode)> =
            report.skipped.iter().map(|(r, e)| (r.request_type.clone(), e.code)).collect();
        prop_assert_eq!(skipped, vec![
            (Some(RequestType::RemoveTcpFrontend(runtime.clone())), ErrorCode::InUse),
            (Some(RequestType::AddTcpFrontend(wanted.clone())), ErrorCode::AlpnProtocolTaken),
        ]);
        // Everything else applied: the state is the config, minus the
        // clashing frontend, plus the runtime one.
        let mut expected = desired.clone();
        dispatch(&mut expected, RequestType::RemoveTcpFrontend(wanted.clone()));
        dispatch(&mut expected, RequestType::AddTcpFrontend(runtime.clone()));
        prop_assert_eq!(&current, &expected);

        // The operator removes the runtime frontend: the cause is fixed.
        dispatch(&mut current, RequestType::RemoveTcpFrontend(runtime));
        let report = reload_ok(&mut current, &desired);
        prop_assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        prop_assert_eq!(report.generation.changes, changes_of(&[req(RequestType::AddTcpFrontend(wanted))]));
        prop_assert_eq!(&current, &desired);
        let table = current.route_table(&addr(at)).expect("the listener");
        let h2 = table.lookup(b"clash.example.com", [&b"h2"[..]]);
        prop_assert!(matches!(h2, Lookup::Matched { cluster, .. } if &**cluster == "cfg-a"), "{h2:?}");
        let http1 = table.lookup(b"clash.example.com", [&b"http/1.1"[..]]);
        prop_assert!(matches!(http1, Lookup::AlpnUnmatched { .. }), "{http1:?}");
        prop_assert!(reload_ok(&mut current, &desired).generation.is_empty());
    }

    /// With workers that accept everything, a reload resolves the same clash
    /// by itself: the runtime frontend is not in the config, so it is
    /// removed before the config's frontend is added.
    #[test]
    fn reload_replaces_a_clashing_runtime_frontend(old in a_state()) {
        let at = "127.0.0.3:443";
        let mut current = old;
        for kind in [cluster("cfg-a"), cluster("cfg-b"), listener(at)] {
            dispatch(&mut current, kind);
        }
        let mut desired = current.clone();
        dispatch(&mut current, RequestType::AddTcpFrontend(tcp_frontend("cfg-b", at, "clash.example.com", &["h2"])));
        dispatch(&mut desired, RequestType::AddTcpFrontend(tcp_frontend("cfg-a", at, "clash.example.com", &["h2", "http/1.1"])));
        let report = reload_ok(&mut current, &desired);
        prop_assert!(report.skipped.is_empty());
        prop_assert_eq!(report.generation.len(), 2);
        prop_assert_eq!(&current, &desired);
    }
}

/// The universe spells one listener two ways; both are one listener.
#[test]
fn address_spellings_are_one_listener() {
    let mut state = ConfigState::default();
    dispatch(&mut state, listener("127.0.0.1:8443"));
    assert_eq!(
        state.dispatch(&req(listener("127.0.0.1:08443"))),
        Ok(Applied::Unchanged)
    );
    assert_eq!(state.listeners().len(), 1);
}

/// The case proptest found: a listener whose last frontend was removed
/// keeps an emptied table (its storage is still the one the workers
/// hold). Planning its removal takes it away and undoes that by adding
/// the listener back; the table held before the removal must be the one
/// that comes back, not a new empty one.
#[test]
fn planning_a_listener_removal_gives_back_its_emptied_table() {
    let mut a = ConfigState::default();
    dispatch(&mut a, cluster("r"));
    dispatch(&mut a, listener("127.0.0.1:8443"));
    let frontend = tcp_frontend("r", "127.0.0.1:8443", "a.example.com", &[]);
    dispatch(&mut a, RequestType::AddTcpFrontend(frontend.clone()));
    dispatch(&mut a, RequestType::RemoveTcpFrontend(frontend));
    let mut state = a.clone();
    let planned: Planned<ValidationError> =
        plan(&mut state, diff(&a, &ConfigState::default()), |_, _| Ok(()));
    assert_eq!(planned.generation.changes.len(), 2, "{planned:?}");
    assert_eq!(state, a, "planning leaves the state as it was");
    assert_same_storage(&state, &a);
}
