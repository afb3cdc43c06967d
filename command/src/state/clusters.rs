//! Clusters: their addition, update and removal.
//!
//! Owns: the rules a cluster change must pass against the state (its
//! users still fit it; nothing uses a removed one). Must never: change
//! anything when it refuses.

use super::*;

impl ConfigState {
    pub(super) fn add_cluster(
        &mut self,
        cluster: &proto::Cluster,
    ) -> Result<Applied, ValidationError> {
        let cluster = &resolve_cluster(cluster)?;
        match self.clusters.get(cluster.cluster_id.as_str()) {
            Some(existing) if existing == cluster => Ok(Applied::Unchanged),
            Some(existing) => Err(ValidationError::new(
                ErrorCode::ClusterConflict,
                format!(
                    "cluster `{}` already exists with other settings ({}): change them in place \
                     with `cluster update` (`preread reload` does this for a cluster edited in \
                     the config file)",
                    cluster.cluster_id,
                    cluster_differences(existing, cluster)
                ),
            )),
            None => {
                self.clusters
                    .insert(cluster.cluster_id.as_str().into(), cluster.clone());
                Ok(Applied::Changed)
            }
        }
    }

    /// Changes an existing cluster's settings in place; its frontends,
    /// backends and the listeners that name it stay.
    pub(super) fn update_cluster(
        &mut self,
        cluster: &proto::Cluster,
    ) -> Result<Applied, ValidationError> {
        let cluster = &resolve_cluster(cluster)?;
        let id = &cluster.cluster_id;
        let Some(existing) = self.clusters.get(id.as_str()) else {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no cluster `{id}` to update: add it first (`cluster add`)"),
            ));
        };
        if existing == cluster {
            return Ok(Applied::Unchanged);
        }
        if is_quic_cluster(existing) != is_quic_cluster(cluster) {
            let by_frontend = self
                .frontends
                .iter()
                .find(|(_, f)| *f.cluster == **id)
                .map(|(key, _)| key.to_string());
            let by_default = self
                .listeners
                .iter()
                .find(|(_, l)| l.config.default_cluster.as_deref() == Some(id.as_str()))
                .map(|(address, _)| format!("the default_cluster of listener {address}"));
            if let Some(user) = by_frontend.or(by_default) {
                return Err(ValidationError::new(
                    ErrorCode::ProtocolMismatch,
                    format!(
                        "cluster `{id}`: its protocol cannot change while {user} routes to it: \
                         remove its frontends (and default_cluster uses) first, or declare \
                         another cluster for the other protocol"
                    ),
                ));
            }
        }
        if is_relay(cluster) {
            let by_frontend = self
                .frontends
                .iter()
                .find(|(key, f)| {
                    *f.cluster == **id
                        && self
                            .listeners
                            .get(&key.listener())
                            .is_some_and(|l| !l.config.expect_proxy)
                })
                .map(|(key, _)| key.to_string());
            let by_default = self
                .listeners
                .iter()
                .find(|(_, l)| {
                    l.config.default_cluster.as_deref() == Some(id.as_str())
                        && !l.config.expect_proxy
                })
                .map(|(address, _)| format!("the default_cluster of listener {address}"));
            if let Some(user) = by_frontend.or(by_default) {
                return Err(ValidationError::new(
                    ErrorCode::RelayWithoutExpectProxy,
                    format!(
                        "cluster `{id}`: proxy_protocol relay replays the client's PROXY header,                          but {user} reaches it through a listener that expects none: set                          expect_proxy on that listener first, or keep send or none"
                    ),
                ));
            }
        }
        // The key stays: frontends and route tables share it.
        if let Some(existing) = self.clusters.get_mut(id.as_str()) {
            *existing = cluster.clone();
        }
        Ok(Applied::Changed)
    }

    pub(super) fn remove_cluster(&mut self, id: &str) -> Result<Applied, ValidationError> {
        if !self.clusters.contains_key(id) {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no cluster `{id}`: check `preread cluster list`"),
            ));
        }
        let named = self
            .listeners
            .values()
            .any(|l| l.config.default_cluster.as_deref() == Some(id));
        // The count spares a walk of every frontend and backend; the walk
        // only names the users of a refusal.
        if named || self.users.contains_key(id) {
            let mut users: Vec<String> = self
                .listeners
                .iter()
                .filter(|(_, l)| l.config.default_cluster.as_deref() == Some(id))
                .map(|(address, _)| format!("the default_cluster of listener {address}"))
                .collect();
            users.extend(
                self.frontends
                    .iter()
                    .filter(|(_, f)| &*f.cluster == id)
                    .map(|(key, _)| key.to_string()),
            );
            users.extend(
                self.backends
                    .values()
                    .filter(|b| b.cluster_id == id)
                    .map(|b| format!("backend `{}`", b.backend_id)),
            );
            return Err(ValidationError::new(
                ErrorCode::InUse,
                format!(
                    "cluster `{id}` is still used by {} object(s): {}: remove them (or repoint \
                     the listeners' default_cluster) first",
                    users.len(),
                    some_of(&users)
                ),
            ));
        }
        self.clusters.remove(id);
        Ok(Applied::Changed)
    }
}
