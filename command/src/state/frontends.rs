//! Frontends: their addition and removal, in the state and in its
//! listener's route table.
//!
//! Owns: the rules a frontend must pass against the state (its listener
//! and cluster exist, its route does not clash). Must never: change
//! anything when it refuses.

use super::listeners::protocol_mismatch;
use super::*;

impl ConfigState {
    pub(super) fn add_frontend(
        &mut self,
        frontend: &proto::TcpFrontend,
    ) -> Result<Applied, ValidationError> {
        let key = frontend_key(frontend)?;
        let id = &frontend.cluster_id;
        let cluster_quic = self.clusters.get(id.as_str()).map(is_quic_cluster);
        if cluster_quic.is_some_and(|quic| quic != key.quic) {
            return Err(frontend_protocol(&key, id));
        }
        let Some(listener) = self.listeners.get(&key.listener()) else {
            if self.listeners.contains_key(&key.listener().other()) {
                return Err(protocol_mismatch(
                    &key.to_string(),
                    key.listener().other(),
                    id,
                ));
            }
            return Err(ValidationError::new(
                ErrorCode::UnknownListener,
                format!(
                    "{key} of cluster `{id}`: there is no {} listener at {}: add the listener \
                     first, or correct the address",
                    key.listener().protocol_name(),
                    key.address
                ),
            ));
        };
        let Some((interned, cluster)) = self.clusters.get_key_value(id.as_str()) else {
            return Err(ValidationError::new(
                ErrorCode::UnknownCluster,
                format!(
                    "{key}: cluster `{id}` does not exist: add the cluster first, or correct the id"
                ),
            ));
        };
        if let Some(existing) = self.frontends.get(&key) {
            if *existing.cluster == *id && *existing.tags() == frontend.tags {
                return Ok(Applied::Unchanged);
            }
            let (code, rule) = if key.sni.is_none() {
                (
                    ErrorCode::MultipleCatchAll,
                    "a listener has at most one frontend without sni",
                )
            } else {
                (
                    ErrorCode::FrontendConflict,
                    "one frontend per (protocol, address, sni, alpn)",
                )
            };
            let detail = if *existing.cluster == *id {
                "other tags"
            } else {
                "another cluster"
            };
            return Err(ValidationError::new(
                code,
                format!(
                    "{key} already exists with {detail} (cluster `{}`, tags {}), so it cannot \
                     route to cluster `{id}` (tags {}): {rule}; remove the existing frontend \
                     first, or give the new one another sni or alpn",
                    existing.cluster,
                    tags_shown(existing.tags()),
                    tags_shown(&frontend.tags)
                ),
            ));
        }
        let mixed = match &key.sni {
            None => (!listener.routes.is_empty()).then(|| {
                format!(
                    "{key} of cluster `{id}`: listener {} already routes by SNI ({} frontend(s)), \
                     so a frontend without sni cannot join it",
                    key.address,
                    listener.routes.len()
                )
            }),
            Some(_) => self.catch_all(&key.listener()).map(|other| {
                format!(
                    "{key} of cluster `{id}`: listener {} already sends every connection to \
                     cluster `{other}` through its frontend without sni, so it cannot route by SNI",
                    key.listener()
                )
            }),
        };
        if let Some(message) = mixed {
            return Err(ValidationError::new(
                ErrorCode::CatchAllMixedWithSni,
                format!(
                    "{message}: to send connections that match no SNI frontend somewhere, set the \
                     listener's default_cluster instead of a frontend without sni, or use \
                     another listener"
                ),
            ));
        }
        if is_relay(cluster) && !listener.config.expect_proxy {
            return Err(ValidationError::new(
                ErrorCode::RelayWithoutExpectProxy,
                format!(
                    "{key}: cluster `{id}` relays the client's PROXY header, but listener {} \
                     does not expect one: set expect_proxy on the listener, or use \
                     proxy_protocol send or none on the cluster",
                    key.listener()
                ),
            ));
        }
        let interned = interned.clone();
        if let (Some(sni), Some(listener)) = (&key.sni, self.listeners.get_mut(&key.listener())) {
            listener
                .routes
                .insert(sni.clone(), key.alpn.clone(), interned.clone())
                .map_err(|conflict| {
                    let code = match conflict {
                        RouteConflict::ProtocolTaken { .. } => ErrorCode::AlpnProtocolTaken,
                        _ => ErrorCode::FrontendConflict,
                    };
                    ValidationError::new(code, format!("{key} of cluster `{id}`: {conflict}"))
                })?;
        }
        self.add_user(&interned);
        self.frontends
            .insert(key, StoredFrontend::new(interned, &frontend.tags));
        Ok(Applied::Changed)
    }

    pub(super) fn remove_frontend(
        &mut self,
        frontend: &proto::TcpFrontend,
    ) -> Result<Applied, ValidationError> {
        let key = frontend_key(frontend)?;
        let cluster = self.clusters.get(frontend.cluster_id.as_str());
        if cluster.is_some_and(|cluster| is_quic_cluster(cluster) != key.quic) {
            return Err(frontend_protocol(&key, &frontend.cluster_id));
        }
        match self.frontends.get(&key) {
            Some(existing) if *existing.cluster == frontend.cluster_id => {}
            Some(existing) => {
                return Err(ValidationError::new(
                    ErrorCode::NotFound,
                    format!(
                        "{key} routes to cluster `{}`, not `{}`: name its own cluster to remove it",
                        existing.cluster, frontend.cluster_id
                    ),
                ));
            }
            None => {
                return Err(ValidationError::new(
                    ErrorCode::NotFound,
                    format!(
                        "there is no {key} (cluster `{}`): check `preread frontend list`",
                        frontend.cluster_id
                    ),
                ));
            }
        }
        if let (Some(sni), Some(listener)) = (&key.sni, self.listeners.get_mut(&key.listener())) {
            let removed = listener.routes.remove(sni, &key.alpn);
            debug_assert!(removed.is_some(), "{key} was not in the route table");
        }
        self.frontends.remove(&key);
        self.drop_user(&frontend.cluster_id);
        Ok(Applied::Changed)
    }
}

/// The refusal of a frontend request whose protocol is not its cluster's
/// (`id`): a frontend routes on the listener of its cluster's protocol.
fn frontend_protocol(key: &FrontendKey, id: &str) -> ValidationError {
    let (said, cluster) = if key.quic {
        ("quic", "tcp")
    } else {
        ("tcp", "quic")
    };
    ValidationError::new(
        ErrorCode::ProtocolMismatch,
        format!(
            "{key}: the request names a {said} frontend, but cluster `{id}` is a {cluster} \
             cluster, and a frontend takes its cluster's protocol: use `preread frontend \
             {cluster} …` (protocol = {cluster} in the request), or another cluster"
        ),
    )
}
