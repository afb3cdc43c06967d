//! The part of a state that concerns some clusters: every listener, those
//! clusters and the ones listeners name as `default_cluster`, and the
//! frontends and backends of those clusters.
//!
//! Owns: [`ConfigState::part`], and the rule that makes it worth having:
//! when two states differ only in the objects of some clusters (the
//! clusters themselves, their frontends, their backends), the diff of
//! their parts on those clusters is the diff of the whole states. A reload
//! that changed one cluster table compares two parts of a hundred routes
//! instead of two states of a hundred thousand. Must never: build an
//! invalid state: a part holds every object its objects refer to, and its
//! route tables exactly its SNI frontends.

use std::collections::BTreeSet;
use std::sync::Arc;

use preread_core::routes::{ClusterId, RouteTable};

use crate::state::{ConfigState, Listener};

impl ConfigState {
    /// The part of the state that concerns `clusters` (see the module
    /// documentation): a valid state of its own.
    pub(crate) fn part(&self, clusters: &BTreeSet<&str>) -> ConfigState {
        let mut part = ConfigState::default();
        for (address, listener) in &self.listeners {
            let listener = Listener {
                config: listener.config.clone(),
                routes: RouteTable::new(),
            };
            part.listeners.insert(*address, listener);
        }
        let named = |id: &str| {
            self.listeners
                .values()
                .any(|l| l.config.default_cluster.as_deref() == Some(id))
        };
        for (id, cluster) in &self.clusters {
            if clusters.contains(&**id) || named(id) {
                part.clusters.insert(id.clone(), cluster.clone());
            }
        }
        // A frontend holds its cluster's interned id: comparing pointers
        // instead of names keeps the walk over every frontend cheap.
        let interned: Vec<&ClusterId> = clusters
            .iter()
            .filter_map(|id| self.clusters.get_key_value(*id))
            .map(|(id, _)| id)
            .collect();
        for (key, stored) in &self.frontends {
            if !interned.iter().any(|id| Arc::ptr_eq(id, &stored.cluster)) {
                continue;
            }
            if let (Some(sni), Some(listener)) = (&key.sni, part.listeners.get_mut(&key.listener()))
            {
                let inserted =
                    listener
                        .routes
                        .insert(sni.clone(), key.alpn.clone(), stored.cluster.clone());
                debug_assert!(
                    inserted.is_ok(),
                    "{key} does not fit a part of its own table"
                );
            }
            part.frontends.insert(key.clone(), stored.clone());
        }
        for (id, backend) in &self.backends {
            if clusters.contains(backend.cluster_id.as_str()) {
                part.backends.insert(id.clone(), backend.clone());
            }
        }
        // The part holds every frontend and backend of its clusters (and
        // none of the others): their counts are the state's.
        part.users = self
            .users
            .iter()
            .filter(|(id, _)| clusters.contains(&***id))
            .map(|(id, count)| (id.clone(), *count))
            .collect();
        part
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::diff;
    use crate::proto;
    use crate::proto::request::RequestType;
    use crate::state::request;

    fn built(kinds: Vec<RequestType>) -> ConfigState {
        let mut state = ConfigState::default();
        for kind in kinds {
            let applied = state.dispatch(&request(kind.clone()));
            assert!(applied.is_ok(), "{kind:?}: {applied:?}");
        }
        state.check_invariants();
        state
    }

    const L: &str = "127.0.0.1:8443";

    fn sample(b_sni: &str, b_weight: u32, with_c: bool) -> ConfigState {
        let cluster = |id: &str| {
            RequestType::AddCluster(proto::Cluster {
                cluster_id: id.into(),
                ..Default::default()
            })
        };
        let frontend = |id: &str, sni: &str| {
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: id.into(),
                address: L.into(),
                sni: Some(sni.into()),
                ..Default::default()
            })
        };
        let backend = |id: &str, weight| {
            RequestType::AddBackend(proto::Backend {
                cluster_id: id.into(),
                backend_id: format!("{id}-0"),
                address: "127.0.0.1:9001".into(),
                weight: Some(weight),
                ..Default::default()
            })
        };
        let mut kinds = vec![
            cluster("a"),
            cluster("b"),
            cluster("fallback"),
            RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: L.into(),
                default_cluster: Some("fallback".into()),
                ..Default::default()
            }),
            frontend("a", "a.example.com"),
            frontend("a", "*.a.example.com"),
            frontend("b", b_sni),
            backend("a", 100),
            backend("b", b_weight),
        ];
        if with_c {
            kinds.extend([
                cluster("c"),
                frontend("c", "c.example.com"),
                backend("c", 1),
            ]);
        }
        built(kinds)
    }

    #[test]
    fn a_part_is_a_valid_state_of_its_clusters_and_their_references() {
        let state = sample("b.example.com", 100, true);
        let part = state.part(&BTreeSet::from(["b"]));
        part.check_invariants();
        let ids: Vec<&str> = part.clusters().map(|c| c.cluster_id.as_str()).collect();
        assert_eq!(ids, ["b", "fallback"], "the default cluster comes along");
        assert_eq!(part.frontends().len(), 1);
        assert_eq!(part.backends().len(), 1);
        assert_eq!(part.listeners().len(), 1);
        assert_eq!(state.part(&BTreeSet::new()).frontends().len(), 0);
    }

    #[test]
    fn the_diff_of_the_parts_is_the_diff_of_the_states() {
        let old = sample("b.example.com", 100, true);
        for (new, scope) in [
            (sample("renamed.example.com", 100, true), vec!["b"]),
            (sample("b.example.com", 7, true), vec!["b"]),
            (sample("b.example.com", 100, false), vec!["c"]),
            (sample("renamed.example.com", 3, false), vec!["b", "c"]),
        ] {
            let scope: BTreeSet<&str> = scope.into_iter().collect();
            let whole = diff(&old, &new);
            assert!(!whole.is_empty());
            assert_eq!(diff(&old.part(&scope), &new.part(&scope)), whole);
            assert_eq!(diff(&new.part(&scope), &old.part(&scope)), diff(&new, &old));
        }
    }
}
