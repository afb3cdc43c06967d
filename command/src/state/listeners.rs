//! Listeners: their addition, update, removal and activation.
//!
//! Owns: the rules a listener change must pass against the state (its
//! frontends and clusters still fit it). Must never: change anything when
//! it refuses.

use super::*;

impl ConfigState {
    pub(super) fn listener_mut(
        &mut self,
        at: &proto::ListenerAddress,
    ) -> Result<(ListenerKey, &mut Listener), ValidationError> {
        let key = ListenerKey::of_request(at)?;
        let other = self.listeners.contains_key(&key.other());
        match self.listeners.get_mut(&key) {
            Some(listener) => Ok((key, listener)),
            None => Err(no_listener(key, other, "check `preread listener list`")),
        }
    }

    /// The frontends of the listener `listener`.
    pub(super) fn frontends_of(
        &self,
        listener: ListenerKey,
    ) -> impl Iterator<Item = (&FrontendKey, &StoredFrontend)> {
        self.frontends
            .range(FrontendKey::first_of(listener)..)
            .take_while(move |(key, _)| key.listener() == listener)
    }

    /// The state rules of a resolved listener config: its default cluster
    /// exists, and no relay cluster is reached without `expect_proxy`.
    pub(super) fn check_listener_references(
        &self,
        address: ListenerKey,
        config: &proto::TcpListenerConfig,
    ) -> Result<(), ValidationError> {
        if let Some(id) = &config.default_cluster {
            let Some(cluster) = self.clusters.get(id.as_str()) else {
                return Err(ValidationError::new(
                    ErrorCode::UnknownCluster,
                    format!(
                        "listener {address}: default_cluster `{id}` does not exist: add the \
                         cluster first, or correct the id"
                    ),
                ));
            };
            if is_quic_cluster(cluster) != address.quic {
                return Err(protocol_mismatch(
                    &format!("default_cluster `{id}`"),
                    address,
                    id,
                ));
            }
            if is_relay(cluster) && !config.expect_proxy {
                return Err(ValidationError::new(
                    ErrorCode::RelayWithoutExpectProxy,
                    format!(
                        "listener {address}: default_cluster `{id}` relays the client's PROXY \
                         header, but the listener does not expect one: set expect_proxy, or \
                         choose a cluster whose proxy_protocol is not relay"
                    ),
                ));
            }
        }
        if !config.expect_proxy {
            let relayed = self
                .frontends_of(address)
                .find(|(_, f)| self.clusters.get(&*f.cluster).is_some_and(is_relay));
            if let Some((key, frontend)) = relayed {
                return Err(ValidationError::new(
                    ErrorCode::RelayWithoutExpectProxy,
                    format!(
                        "listener {address}: {key} routes to cluster `{}`, which relays the \
                         client's PROXY header, so the listener must keep expect_proxy: remove \
                         that frontend first, or keep expect_proxy = true",
                        frontend.cluster
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn add_listener(
        &mut self,
        config: &proto::TcpListenerConfig,
    ) -> Result<Applied, ValidationError> {
        let (address, mut resolved) = resolve_listener(config)?;
        resolved.active = Some(resolved.active.unwrap_or(true));
        if let Some(existing) = self.listeners.get(&address) {
            return if existing.config == resolved {
                Ok(Applied::Unchanged)
            } else {
                Err(ValidationError::new(
                    ErrorCode::ListenerConflict,
                    format!(
                        "listener {address} already exists with other settings ({}): send \
                         update_tcp_listener to change them, or remove it first",
                        listener_differences(&existing.config, &resolved)
                    ),
                ))
            };
        }
        self.check_listener_references(address, &resolved)?;
        self.listeners.insert(
            address,
            Listener {
                config: resolved,
                routes: RouteTable::new(),
            },
        );
        Ok(Applied::Changed)
    }

    pub(super) fn update_listener(
        &mut self,
        config: &proto::TcpListenerConfig,
    ) -> Result<Applied, ValidationError> {
        let (address, mut resolved) = resolve_listener(config)?;
        let Some(existing) = self.listeners.get(&address) else {
            let other = self.listeners.contains_key(&address.other());
            return Err(no_listener(address, other, "add it instead"));
        };
        resolved.active = Some(resolved.active.unwrap_or(existing.is_active()));
        if existing.config == resolved {
            return Ok(Applied::Unchanged);
        }
        self.check_listener_references(address, &resolved)?;
        if let Some(listener) = self.listeners.get_mut(&address) {
            listener.config = resolved;
        }
        Ok(Applied::Changed)
    }

    pub(super) fn remove_listener(
        &mut self,
        at: &proto::ListenerAddress,
    ) -> Result<Applied, ValidationError> {
        let (address, _) = self.listener_mut(at)?;
        let frontends: Vec<String> = self
            .frontends_of(address)
            .map(|(k, _)| k.to_string())
            .collect();
        if !frontends.is_empty() {
            return Err(ValidationError::new(
                ErrorCode::InUse,
                format!(
                    "listener {address} still has {} frontend(s): {}: remove them first",
                    frontends.len(),
                    some_of(&frontends)
                ),
            ));
        }
        self.listeners.remove(&address);
        Ok(Applied::Changed)
    }

    pub(super) fn set_active(
        &mut self,
        at: &proto::ListenerAddress,
        active: bool,
    ) -> Result<Applied, ValidationError> {
        let (_, listener) = self.listener_mut(at)?;
        let same = listener.is_active() == active;
        listener.config.active = Some(active);
        Ok(unchanged_if(same))
    }
}

/// The refusal of a request naming listener `key`, which the state does
/// not hold; `other`: the state holds the other protocol's listener at its
/// address, which the message points to.
pub(super) fn no_listener(key: ListenerKey, other: bool, advice: &str) -> ValidationError {
    let (protocol, address) = (key.protocol_name(), key.address);
    let hint = if other {
        format!(
            " (there is a {} listener there: name its protocol, e.g. `preread listener {} …`)",
            key.other().protocol_name(),
            key.other().protocol_name()
        )
    } else {
        String::new()
    };
    ValidationError::new(
        ErrorCode::NotFound,
        format!("there is no {protocol} listener at {address}{hint}: {advice}"),
    )
}

/// The refusal of a frontend or default cluster (`what`) that would join
/// the listener `address` to cluster `id` of the other protocol.
pub(super) fn protocol_mismatch(what: &str, address: ListenerKey, id: &str) -> ValidationError {
    let (listener_protocol, cluster_protocol) = if address.quic {
        ("quic", "tcp")
    } else {
        ("tcp", "quic")
    };
    ValidationError::new(
        ErrorCode::ProtocolMismatch,
        format!(
            "{what}: listener {} is a {listener_protocol} listener, but cluster `{id}` \
             is a {cluster_protocol} cluster: route a {listener_protocol} listener to clusters \
             with protocol = \"{listener_protocol}\" (one cluster per protocol for the same \
             servers)",
            address.address
        ),
    )
}
