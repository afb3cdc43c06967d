use std::time::Instant;

use command::proto::{self, request::RequestType};
use command::state::ConfigState;
use preread_core::rng::Rng;

use super::Registry;

/// What the registry holds: its backends and its clusters' checks.
fn contents(registry: &Registry) -> (Vec<String>, Vec<String>) {
    let mut backends: Vec<String> = registry
        .backends()
        .iter()
        .map(|b| format!("{} {} {}", b.cluster(), b.id(), b.address()))
        .collect();
    backends.sort();
    let mut checks: Vec<String> = registry
        .checked()
        .iter()
        .map(|(plan, backends)| format!("{plan:?} {}", backends.len()))
        .collect();
    checks.sort();
    (backends, checks)
}

/// A random change among two clusters, three backend ids and two names.
fn change(rng: &mut Rng) -> proto::Request {
    let pick =
        |rng: &mut Rng, from: &[&str]| from[rng.below_u64(from.len() as u64) as usize].to_owned();
    let cluster = pick(rng, &["a", "b"]);
    let kind = match rng.below_u64(7) {
        0 => RequestType::AddCluster(proto::Cluster {
            cluster_id: cluster,
            health_check: (rng.below_u64(2) == 0).then(|| proto::HealthCheck {
                kind: proto::HealthCheckKind::Tls as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        1 => RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: cluster,
        }),
        2 | 3 => RequestType::AddBackend(proto::Backend {
            cluster_id: cluster,
            backend_id: pick(rng, &["x", "y", "z"]),
            address: pick(rng, &["127.0.0.1:9000", "127.0.0.1:9001"]),
            ..Default::default()
        }),
        4 => RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: cluster,
            backend_id: pick(rng, &["x", "y", "z"]),
            address: pick(rng, &["127.0.0.1:9000", "127.0.0.1:9001"]),
        }),
        5 => RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: cluster,
            address: "127.0.0.1:8443".into(),
            sni: Some(pick(rng, &["one.example", "two.example"])),
            ..Default::default()
        }),
        _ => RequestType::RemoveTcpFrontend(proto::TcpFrontend {
            cluster_id: cluster,
            address: "127.0.0.1:8443".into(),
            sni: Some(pick(rng, &["one.example", "two.example"])),
            ..Default::default()
        }),
    };
    proto::Request {
        request_type: Some(kind),
    }
}

#[test]
fn a_sync_of_what_changed_leaves_what_a_full_sync_leaves() -> Result<(), String> {
    let now = Instant::now();
    for seed in 0..20 {
        let mut rng = Rng::new(seed);
        let mut state = ConfigState::default();
        let listener = proto::Request {
            request_type: Some(RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: "127.0.0.1:8443".into(),
                ..Default::default()
            })),
        };
        let _added = state.dispatch(&listener).map_err(|e| e.to_string())?;
        let (changed, full) = (Registry::default(), Registry::default());
        for _ in 0..200 {
            let step = change(&mut rng);
            // A worker meets the backend of an add before the state decides,
            // so a refused add leaves one behind for the sync to take away.
            if let Some(RequestType::AddBackend(backend)) = &step.request_type
                && let Ok(address) = command::backend_address::BackendAddress::parse(
                    &backend.backend_id,
                    &backend.address,
                )
            {
                changed.backend(&backend.cluster_id, &backend.backend_id, &address, now);
            }
            let _applied_or_refused = state.dispatch(&step);
            // Only a typed change reaches `sync_changed`; a request with a
            // value the model refuses never becomes one.
            match command::change::Change::from_request(&step) {
                Ok(change) => changed.sync_changed(&state, &[change], now),
                Err(_) => changed.sync(&state, now),
            }
            full.sync(&state, now);
            assert_eq!(contents(&changed), contents(&full), "seed {seed}: {step:?}");
        }
    }
    Ok(())
}
