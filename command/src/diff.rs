//! The reload diff: the requests that turn one state into another, and
//! their application to the running state.
//!
//! Owns: [`diff`] (also the state→requests generator, as the diff from the
//! empty state); [`crate::generation::plan`] applies it. Must never: emit a
//! request that `dispatch` would refuse in order, when both states are
//! valid; leave an old route in place while its replacement is added (every
//! removal comes before every addition).

use crate::listener_key::ListenerKey;
use std::collections::{BTreeMap, BTreeSet};

use crate::proto;
use crate::proto::request::RequestType;
use crate::state::{ConfigState, request};
use crate::stored_frontend::StoredFrontend;
use crate::validate::{FrontendKey, is_quic_cluster, is_relay};

/// The state→requests generator lives beside the diff it is, so that the
/// state does not import its own diff.
impl ConfigState {
    /// The requests that rebuild this state from an empty one, in an order
    /// `dispatch` accepts: clusters, listeners (with their activation),
    /// frontends, backends.
    #[must_use]
    pub fn generate_requests(&self) -> Vec<proto::Request> {
        diff(&Self::default(), self)
    }
}

/// The config without its activation, to compare settings alone.
fn settings(config: &proto::TcpListenerConfig) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        active: None,
        ..config.clone()
    }
}

/// The requests that turn `current` into `desired`, in an order
/// [`ConfigState::dispatch`] accepts one after the other:
///
/// 1. remove the frontends and backends that go or change (a backend whose
///    weight or backup flag alone changes is updated in step 5 instead), and
///    those of clusters that go;
/// 2. remove the listeners that go; detach (update without
///    `default_cluster`) the listeners whose default cluster goes;
/// 3. remove the clusters that go, add the new ones, and update in place
///    the ones whose settings changed (except those that become `relay`;
///    one whose protocol changes goes and comes back, as in steps 1 to 5);
/// 4. add the new listeners; update the changed ones (or just activate or
///    deactivate them); then update the clusters that become `relay`, once
///    their listeners expect a PROXY header;
/// 5. add the frontends and backends that are new or changed; update the
///    backends whose weight or backup flag changed.
///
/// A frontend is identified by `(address, sni, alpn)`, so one whose SNI or
/// ALPN changed is removed under its old key before it is added under the
/// new one. A cluster whose settings change is updated in place: its
/// frontends never go missing, so no connection is misrouted meanwhile.
#[must_use]
pub fn diff(current: &ConfigState, desired: &ConfigState) -> Vec<proto::Request> {
    // A cluster whose protocol changes cannot keep its frontends or its
    // listeners' default_cluster (E209): it goes and comes back, with them.
    let reprotocoled = |id: &str| {
        let (now, wanted) = (current.clusters.get(id), desired.clusters.get(id));
        now.zip(wanted)
            .is_some_and(|(now, wanted)| is_quic_cluster(now) != is_quic_cluster(wanted))
    };
    let dirty: BTreeSet<&str> = current
        .clusters
        .keys()
        .filter(|id| !desired.clusters.contains_key(*id) || reprotocoled(id))
        .map(|id| &**id)
        .collect();
    // Present in both with other settings: updated in place.
    let changed: Vec<&proto::Cluster> = desired
        .clusters
        .iter()
        .filter(|&(id, cluster)| {
            current.clusters.get(id).is_some_and(|c| c != cluster) && !reprotocoled(id)
        })
        .map(|(_, cluster)| cluster)
        .collect();
    // Same backend (id, cluster, address), another weight or backup flag.
    let backend_updated = |id: &str, backend: &proto::Backend| {
        current.backends.get(id).is_some_and(|now| {
            now != backend
                && now.cluster_id == backend.cluster_id
                && now.address == backend.address
                && !dirty.contains(backend.cluster_id.as_str())
        })
    };
    let backend_kept = |id: &str, backend: &proto::Backend| {
        current.backends.get(id) == Some(backend)
            && desired.backends.get(id) == Some(backend)
            && !dirty.contains(backend.cluster_id.as_str())
    };
    let mut requests = Vec::new();
    let (frontends_gone, frontends_new) = changed_frontends(current, desired, &dirty);

    for (key, frontend) in frontends_gone {
        requests.push(request(RequestType::RemoveTcpFrontend(
            frontend.to_proto(key),
        )));
    }
    for (id, backend) in &current.backends {
        let updated = desired
            .backends
            .get(id)
            .is_some_and(|wanted| backend_updated(id, wanted));
        if !backend_kept(id, backend) && !updated {
            requests.push(request(RequestType::RemoveBackend(proto::BackendRef {
                cluster_id: backend.cluster_id.clone(),
                backend_id: backend.backend_id.clone(),
                address: backend.address.clone(),
            })));
        }
    }

    // The settings of each kept listener as the requests so far leave them.
    let mut kept: BTreeMap<ListenerKey, proto::TcpListenerConfig> = BTreeMap::new();
    for (address, listener) in &current.listeners {
        if !desired.listeners.contains_key(address) {
            requests.push(request(RequestType::RemoveListener(address.to_proto())));
            continue;
        }
        let mut config = listener.config.clone();
        if config
            .default_cluster
            .as_deref()
            .is_some_and(|id| dirty.contains(id))
        {
            config.default_cluster = None;
            config.server_first_timeout = None;
            requests.push(request(RequestType::UpdateTcpListener(settings(&config))));
        }
        kept.insert(*address, config);
    }

    for id in &dirty {
        requests.push(request(RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: (*id).to_owned(),
        })));
    }
    for (id, cluster) in &desired.clusters {
        if !current.clusters.contains_key(id) || dirty.contains(&**id) {
            requests.push(request(RequestType::AddCluster(cluster.clone())));
        }
    }
    for cluster in changed.iter().filter(|c| !is_relay(c)) {
        requests.push(request(RequestType::UpdateCluster((*cluster).clone())));
    }

    for (address, listener) in &desired.listeners {
        let wanted = &listener.config;
        let Some(now) = kept.get(address) else {
            requests.push(request(RequestType::AddTcpListener(wanted.clone())));
            continue;
        };
        if settings(now) != settings(wanted) {
            requests.push(request(RequestType::UpdateTcpListener(wanted.clone())));
        } else if now.active != wanted.active {
            let at = address.to_proto();
            requests.push(request(if listener.is_active() {
                RequestType::ActivateListener(at)
            } else {
                RequestType::DeactivateListener(at)
            }));
        }
    }

    for cluster in changed.iter().filter(|c| is_relay(c)) {
        requests.push(request(RequestType::UpdateCluster((*cluster).clone())));
    }

    for (key, frontend) in frontends_new {
        requests.push(request(RequestType::AddTcpFrontend(frontend.to_proto(key))));
    }
    for (id, backend) in &desired.backends {
        if backend_updated(id, backend) {
            requests.push(request(RequestType::UpdateBackend(backend.clone())));
        } else if !backend_kept(id, backend) {
            requests.push(request(RequestType::AddBackend(backend.clone())));
        }
    }
    requests
}

/// A frontend as the state keeps it: its key and the rest.
type Stored<'a> = (&'a FrontendKey, &'a StoredFrontend);

/// The frontends to remove (of `current`) and to add (of `desired`), each
/// in key order: all but those equal in both whose cluster stays. One walk
/// over the two sorted maps side by side, so a reload of 100,000 frontends
/// that changes one compares each key once instead of looking it up twice.
fn changed_frontends<'a>(
    current: &'a ConfigState,
    desired: &'a ConfigState,
    dirty: &BTreeSet<&str>,
) -> (Vec<Stored<'a>>, Vec<Stored<'a>>) {
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    let mut now = current.frontends.iter().peekable();
    let mut wanted = desired.frontends.iter().peekable();
    loop {
        match (now.peek(), wanted.peek()) {
            (None, None) => break,
            (Some(&f), None) => {
                gone.push(f);
                now.next();
            }
            (None, Some(&f)) => {
                new.push(f);
                wanted.next();
            }
            (Some(&a), Some(&b)) => match a.0.cmp(b.0) {
                std::cmp::Ordering::Less => {
                    gone.push(a);
                    now.next();
                }
                std::cmp::Ordering::Greater => {
                    new.push(b);
                    wanted.next();
                }
                std::cmp::Ordering::Equal => {
                    if a.1 != b.1 || dirty.contains(&*a.1.cluster) {
                        gone.push(a);
                        new.push(b);
                    }
                    now.next();
                    wanted.next();
                }
            },
        }
    }
    (gone, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Change;
    use crate::codes::ErrorCode;
    use crate::generation::plan;
    use crate::state::Applied;
    use crate::validate::ValidationError;

    fn state(requests: &[RequestType]) -> ConfigState {
        let mut s = ConfigState::default();
        for kind in requests {
            if let Err(e) = s.dispatch(&request(kind.clone())) {
                panic!("{kind:?}: {e}");
            }
        }
        s.check_invariants();
        s
    }

    fn cluster(id: &str, proxy: proto::ProxyProtocol) -> RequestType {
        RequestType::AddCluster(proto::Cluster {
            cluster_id: id.into(),
            proxy_protocol: proxy as i32,
            ..Default::default()
        })
    }

    fn listener(address: &str, expect_proxy: bool, default: Option<&str>) -> RequestType {
        RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: address.into(),
            expect_proxy,
            default_cluster: default.map(Into::into),
            ..Default::default()
        })
    }

    fn frontend(cluster: &str, address: &str, sni: Option<&str>, alpn: &[&str]) -> RequestType {
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: cluster.into(),
            address: address.into(),
            sni: sni.map(Into::into),
            alpn: alpn.iter().map(|p| (*p).to_owned()).collect(),
            tags: Default::default(),
            protocol: None,
        })
    }

    fn backend(cluster: &str, id: &str, address: &str) -> RequestType {
        RequestType::AddBackend(proto::Backend {
            cluster_id: cluster.into(),
            backend_id: id.into(),
            address: address.into(),
            weight: None,
            backup: false,
            max_connections: None,
        })
    }

    /// Applies the diff by dispatch, checking every request is accepted and
    /// changes something, and that the result is `desired`.
    fn converge(current: &ConfigState, desired: &ConfigState) -> Vec<proto::Request> {
        let requests = diff(current, desired);
        let mut s = current.clone();
        for r in &requests {
            assert_eq!(s.dispatch(r), Ok(Applied::Changed), "{r:?}");
            s.check_invariants();
        }
        assert_eq!(&s, desired);
        assert!(diff(&s, desired).is_empty());
        requests
    }

    fn kinds(requests: &[proto::Request]) -> Vec<&'static str> {
        requests
            .iter()
            .map(|r| match &r.request_type {
                Some(RequestType::AddTcpListener(_)) => "add_listener",
                Some(RequestType::UpdateTcpListener(_)) => "update_listener",
                Some(RequestType::RemoveListener(_)) => "remove_listener",
                Some(RequestType::ActivateListener(_)) => "activate",
                Some(RequestType::DeactivateListener(_)) => "deactivate",
                Some(RequestType::AddCluster(_)) => "add_cluster",
                Some(RequestType::RemoveCluster(_)) => "remove_cluster",
                Some(RequestType::AddTcpFrontend(_)) => "add_frontend",
                Some(RequestType::RemoveTcpFrontend(_)) => "remove_frontend",
                Some(RequestType::AddBackend(_)) => "add_backend",
                Some(RequestType::RemoveBackend(_)) => "remove_backend",
                Some(RequestType::UpdateCluster(_)) => "update_cluster",
                Some(RequestType::UpdateBackend(_)) => "update_backend",
                _ => "other",
            })
            .collect()
    }

    const L: &str = "127.0.0.1:8443";

    #[test]
    fn no_change_no_request() {
        let s = state(&[
            cluster("a", proto::ProxyProtocol::None),
            listener(L, false, Some("a")),
        ]);
        assert!(diff(&s, &s).is_empty());
    }

    #[test]
    fn changed_sni_is_removed_under_its_old_key_first() {
        let base = [
            cluster("a", proto::ProxyProtocol::None),
            listener(L, false, None),
        ];
        let old = state(&[
            base[0].clone(),
            base[1].clone(),
            frontend("a", L, Some("old.example.com"), &["h2"]),
        ]);
        let new = state(&[
            base[0].clone(),
            base[1].clone(),
            frontend("a", L, Some("new.example.com"), &["h2"]),
        ]);
        let requests = converge(&old, &new);
        assert_eq!(kinds(&requests), ["remove_frontend", "add_frontend"]);
    }

    #[test]
    fn changed_cluster_is_updated_in_place_and_its_routes_stay() {
        let common = |proxy, lb| {
            vec![
                RequestType::AddCluster(proto::Cluster {
                    load_balancing: lb as i32,
                    ..match cluster("a", proxy) {
                        RequestType::AddCluster(c) => c,
                        _ => proto::Cluster::default(),
                    }
                }),
                cluster("b", proto::ProxyProtocol::None),
                listener(L, true, Some("a")),
                RequestType::UpdateTcpListener(proto::TcpListenerConfig {
                    address: L.into(),
                    expect_proxy: true,
                    default_cluster: Some("a".into()),
                    server_first_timeout: Some(250),
                    ..Default::default()
                }),
                frontend("a", L, Some("a.example.com"), &[]),
                frontend("b", L, Some("b.example.com"), &[]),
                backend("a", "a-0", "127.0.0.1:9001"),
                backend("b", "b-0", "127.0.0.1:9002"),
            ]
        };
        let none = proto::ProxyProtocol::None;
        let old = state(&common(none, proto::LoadBalancing::RoundRobin));
        for new in [
            state(&common(
                proto::ProxyProtocol::Relay,
                proto::LoadBalancing::RoundRobin,
            )),
            state(&common(none, proto::LoadBalancing::LeastConnections)),
        ] {
            let requests = converge(&old, &new);
            assert_eq!(kinds(&requests), ["update_cluster"], "{requests:?}");
        }
    }

    #[test]
    fn a_backend_whose_weight_changes_is_updated_and_one_that_moves_is_re_added() {
        let with = |weight, address: &str| {
            state(&[
                cluster("a", proto::ProxyProtocol::None),
                RequestType::AddBackend(proto::Backend {
                    cluster_id: "a".into(),
                    backend_id: "a-0".into(),
                    address: address.into(),
                    weight: Some(weight),
                    backup: false,
                    max_connections: None,
                }),
            ])
        };
        let old = with(100, "127.0.0.1:9001");
        let heavier = converge(&old, &with(300, "127.0.0.1:9001"));
        assert_eq!(kinds(&heavier), ["update_backend"]);
        let moved = converge(&old, &with(300, "127.0.0.1:9009"));
        assert_eq!(kinds(&moved), ["remove_backend", "add_backend"]);
    }

    #[test]
    fn listener_changes_become_updates_or_activations() {
        let old = state(&[
            cluster("a", proto::ProxyProtocol::None),
            listener(L, false, None),
        ]);
        let mut inactive = old.clone();
        let off = RequestType::DeactivateListener(proto::ListenerAddress {
            address: L.into(),
            protocol: None,
        });
        assert_eq!(inactive.dispatch(&request(off)), Ok(Applied::Changed));
        assert_eq!(kinds(&converge(&old, &inactive)), ["deactivate"]);
        assert_eq!(kinds(&converge(&inactive, &old)), ["activate"]);
        let proxied = state(&[
            cluster("a", proto::ProxyProtocol::None),
            listener(L, true, Some("a")),
        ]);
        assert_eq!(kinds(&converge(&inactive, &proxied)), ["update_listener"]);
        assert_eq!(
            kinds(&converge(&proxied, &ConfigState::default())),
            ["remove_listener", "remove_cluster"]
        );
    }

    #[test]
    fn backend_moving_between_clusters() {
        let base = [
            cluster("a", proto::ProxyProtocol::None),
            cluster("b", proto::ProxyProtocol::None),
        ];
        let old = state(&[
            base[0].clone(),
            base[1].clone(),
            backend("a", "x", "127.0.0.1:1"),
        ]);
        let new = state(&[
            base[0].clone(),
            base[1].clone(),
            backend("b", "x", "127.0.0.1:1"),
        ]);
        assert_eq!(
            kinds(&converge(&old, &new)),
            ["remove_backend", "add_backend"]
        );
    }

    #[test]
    fn reload_skips_what_a_check_refuses_and_retries_it_next_time() {
        let desired = state(&[
            cluster("a", proto::ProxyProtocol::None),
            listener(L, false, None),
            listener("127.0.0.1:9443", false, None),
            frontend("a", L, Some("a.example.com"), &[]),
            frontend("a", "127.0.0.1:9443", Some("a.example.com"), &[]),
        ]);
        let mut current = ConfigState::default();
        // The port 9443 is taken this time.
        let steps = diff(&current, &desired);
        let planned = plan(&mut current, steps, |change, _| match change {
            Change::AddListener { settings, .. } if settings.address.port() == 9443 => Err(
                ValidationError::new(ErrorCode::InvalidAddress, "127.0.0.1:9443 is in use"),
            ),
            _ => Ok(()),
        });
        assert_eq!(current, ConfigState::default(), "planning leaves the state");
        assert_eq!(planned.generation.len(), 3);
        let codes: Vec<_> = planned.skipped.iter().map(|(_, e)| e.code).collect();
        assert_eq!(
            codes,
            [ErrorCode::InvalidAddress, ErrorCode::UnknownListener]
        );
        planned.generation.apply_to(&mut current).expect("commits");
        current.check_invariants();
        // The skipped listener is not in the committed state.
        assert!(
            current
                .listener(&"127.0.0.1:9443".parse().expect("addr"))
                .is_none()
        );
        let steps = diff(&current, &desired);
        let planned = plan::<ValidationError>(&mut current, steps, |_, _| Ok(()));
        assert!(planned.skipped.is_empty());
        assert_eq!(planned.generation.len(), 2);
        planned.generation.apply_to(&mut current).expect("commits");
        assert_eq!(current, desired);
    }
}
