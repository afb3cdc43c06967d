//! Tests of a worker's routing state against generations planned on a real
//! `ConfigState`, as the command server plans them: every worker routes on
//! the state's own table (shared storage, not a copy), a refused change
//! leaves the tables as they were, and a generation taken back reinstalls
//! the tables from before it.

use command::generation::plan;
use command::proto::request::RequestType;
use command::state::ConfigState;
use command::validate::ValidationError;
use preread_core::routes::Lookup;

use super::*;

const AT: &str = "127.0.0.1:8443";

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn cluster(id: &str) -> proto::Request {
    request(RequestType::AddCluster(proto::Cluster {
        cluster_id: id.to_owned(),
        ..Default::default()
    }))
}

fn listener() -> proto::Request {
    request(RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: AT.to_owned(),
        ..Default::default()
    }))
}

fn frontend(cluster: &str, sni: &str) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.to_owned(),
        address: AT.to_owned(),
        sni: Some(sni.to_owned()),
        ..Default::default()
    }
}

fn add(cluster: &str, sni: &str) -> proto::Request {
    request(RequestType::AddTcpFrontend(frontend(cluster, sni)))
}

fn remove(cluster: &str, sni: &str) -> proto::Request {
    request(RequestType::RemoveTcpFrontend(frontend(cluster, sni)))
}

/// Plans `requests` on `state` and commits them, as the command server
/// does once every worker applied the generation.
fn commit(state: &mut ConfigState, requests: Vec<proto::Request>) -> Result<Generation, String> {
    let planned = plan::<ValidationError>(state, requests, |_, _| Ok(()));
    if let Some((request, error)) = planned.skipped.first() {
        return Err(format!("{request:?}: {error}"));
    }
    planned
        .generation
        .apply_to(state)
        .map_err(|e| e.to_string())?;
    state.check_invariants();
    Ok(planned.generation)
}

fn address() -> Result<ListenerKey, String> {
    let address: SocketAddr = AT.parse().map_err(|e| format!("{AT}: {e}"))?;
    Ok(ListenerKey::tcp(address))
}

fn table(runtime: &Runtime) -> Result<&RouteTable, String> {
    let at = address()?;
    Ok(&runtime
        .listeners
        .get(&at)
        .ok_or("no listener in the worker")?
        .preread
        .config
        .routes)
}

fn state_table(state: &ConfigState) -> Result<&RouteTable, String> {
    state
        .route_table(&address()?)
        .ok_or_else(|| "no listener in the state".to_owned())
}

/// The cluster `name` routes to, `None` when unmatched.
fn routed(runtime: &Runtime, name: &str) -> Result<Option<String>, String> {
    Ok(
        match table(runtime)?.lookup(name.as_bytes(), None::<&[u8]>) {
            Lookup::Matched { cluster, .. } => Some(cluster.to_string()),
            _ => None,
        },
    )
}

fn booted(state: &mut ConfigState) -> Result<(Runtime, Runtime), String> {
    let boot = commit(
        state,
        vec![
            cluster("a"),
            listener(),
            add("a", "a.example.com"),
            add("a", "*.example.com"),
        ],
    )?;
    let registry = Arc::new(Registry::default());
    let mut workers = (Runtime::new(registry.clone()), Runtime::new(registry));
    workers
        .0
        .apply_generation(&boot)
        .map_err(|r| r.to_string())?;
    workers
        .1
        .apply_generation(&boot)
        .map_err(|r| r.to_string())?;
    Ok(workers)
}

#[test]
fn every_worker_routes_on_the_state_s_own_table() -> Result<(), String> {
    let mut state = ConfigState::default();
    let (one, two) = &mut booted(&mut state)?;
    for worker in [&*one, &*two] {
        assert!(table(worker)?.same_storage(state_table(&state)?));
        assert_eq!(routed(worker, "a.example.com")?.as_deref(), Some("a"));
        assert_eq!(routed(worker, "x.example.com")?.as_deref(), Some("a"));
    }
    let before = table(one)?.clone();
    let change = commit(
        &mut state,
        vec![
            cluster("b"),
            add("b", "b.example.com"),
            remove("a", "*.example.com"),
        ],
    )?;
    for worker in [&mut *one, &mut *two] {
        worker
            .apply_generation(&change)
            .map_err(|r| r.to_string())?;
        assert!(table(worker)?.same_storage(state_table(&state)?));
        assert_eq!(routed(worker, "b.example.com")?.as_deref(), Some("b"));
        assert_eq!(routed(worker, "x.example.com")?, None);
    }
    // A decision taken on the table from before keeps seeing it whole.
    assert!(matches!(
        before.lookup(b"x.example.com", None::<&[u8]>),
        Lookup::Matched { cluster, .. } if &**cluster == "a"
    ));
    // A generation without route changes leaves the tables alone.
    let backends = commit(
        &mut state,
        vec![request(RequestType::AddBackend(proto::Backend {
            cluster_id: "b".into(),
            backend_id: "b-0".into(),
            address: "127.0.0.1:9001".into(),
            ..Default::default()
        }))],
    )?;
    assert!(backends.routes.is_empty());
    one.apply_generation(&backends).map_err(|r| r.to_string())?;
    assert!(table(one)?.same_storage(state_table(&state)?));
    Ok(())
}

#[test]
fn a_refused_change_leaves_the_tables_as_they_were() -> Result<(), String> {
    let mut state = ConfigState::default();
    let (one, two) = &mut booted(&mut state)?;
    let with_b = commit(&mut state, vec![cluster("b")])?;
    one.apply_generation(&with_b).map_err(|r| r.to_string())?;
    // Worker two never heard of cluster `b`: the route to it is refused
    // there, after the change before it applied.
    let change = commit(
        &mut state,
        vec![remove("a", "*.example.com"), add("b", "b.example.com")],
    )?;
    let before = table(two)?.clone();
    let refused = two.apply_generation(&change).err();
    assert_eq!(
        refused,
        Some(GenerationRefused {
            change: 2,
            of: 2,
            refusal: Refusal::UnknownCluster("b".to_owned()),
        })
    );
    assert!(table(two)?.same_storage(&before));
    assert_eq!(routed(two, "x.example.com")?.as_deref(), Some("a"));
    one.apply_generation(&change).map_err(|r| r.to_string())?;
    assert_eq!(routed(one, "b.example.com")?.as_deref(), Some("b"));
    Ok(())
}

#[test]
fn a_generation_taken_back_reinstalls_the_tables_from_before() -> Result<(), String> {
    let mut state = ConfigState::default();
    let (one, two) = &mut booted(&mut state)?;
    let booted_table = state_table(&state)?.clone();
    let change = commit(&mut state, vec![remove("a", "*.example.com")])?;
    // Its sockets could not be opened: the worker takes it back itself.
    one.apply_generation(&change).map_err(|r| r.to_string())?;
    assert_eq!(routed(one, "x.example.com")?, None);
    one.undo_generation(&change);
    assert_eq!(table(one)?, &booted_table);
    assert_eq!(routed(one, "x.example.com")?.as_deref(), Some("a"));
    // Another worker refused it: the command server sends the inverse.
    two.apply_generation(&change).map_err(|r| r.to_string())?;
    two.apply_generation(&change.inverse())
        .map_err(|r| r.to_string())?;
    assert_eq!(table(two)?, &booted_table);
    assert!(table(two)?.same_storage(table(one)?));
    Ok(())
}

/// HTTP/3 beside TCP: a worker keeps the TCP and the QUIC listener of one
/// address apart, each routing on its own table (a QUIC listener's holds
/// only QUIC clusters' frontends), and a change to one leaves the other.
#[test]
fn a_tcp_and_a_quic_listener_of_one_address_route_apart() -> Result<(), String> {
    let quic = Some(proto::ListenerProtocol::Quic as i32);
    let quic_frontend = |cluster: &str, sni: &str| proto::TcpFrontend {
        protocol: quic,
        ..frontend(cluster, sni)
    };
    let mut state = ConfigState::default();
    let boot = commit(
        &mut state,
        vec![
            cluster("web"),
            request(RequestType::AddCluster(proto::Cluster {
                cluster_id: "webq".to_owned(),
                protocol: quic,
                ..Default::default()
            })),
            listener(),
            request(RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: AT.to_owned(),
                protocol: quic,
                ..Default::default()
            })),
            add("web", "a.example.com"),
            request(RequestType::AddTcpFrontend(quic_frontend(
                "webq",
                "a.example.com",
            ))),
        ],
    )?;
    let mut worker = Runtime::new(Arc::new(Registry::default()));
    worker.apply_generation(&boot).map_err(|r| r.to_string())?;
    let tcp = address()?;
    let quic_key = ListenerKey::quic(tcp.address);
    let clusters = |worker: &Runtime, key: ListenerKey| -> Result<Vec<String>, String> {
        let listener = worker.listeners.get(&key).ok_or("no listener")?;
        Ok(listener
            .preread
            .config
            .routes
            .clusters()
            .map(ToString::to_string)
            .collect())
    };
    assert_eq!(clusters(&worker, tcp)?, ["web"]);
    assert_eq!(clusters(&worker, quic_key)?, ["webq"]);
    assert!(worker.listens(&tcp.address) && worker.listens_quic(&tcp.address));
    // Deactivating the QUIC listener closes its socket only.
    let off = commit(
        &mut state,
        vec![request(RequestType::DeactivateListener(
            proto::ListenerAddress {
                address: AT.to_owned(),
                protocol: quic,
            },
        ))],
    )?;
    worker.apply_generation(&off).map_err(|r| r.to_string())?;
    assert!(worker.listens(&tcp.address) && !worker.listens_quic(&tcp.address));
    // Removing the TCP frontend empties the TCP table alone.
    let gone = commit(&mut state, vec![remove("web", "a.example.com")])?;
    worker.apply_generation(&gone).map_err(|r| r.to_string())?;
    assert!(clusters(&worker, tcp)?.is_empty());
    assert_eq!(clusters(&worker, quic_key)?, ["webq"]);
    Ok(())
}
