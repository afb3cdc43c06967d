//! The state's invariants, checked in debug builds: what every test
//! asserts after each change.
//!
//! Owns: [`ConfigState::check_invariants`]. Must never: change the state,
//! or cost anything in a release build.

use super::*;

impl ConfigState {
    /// Checks the state's invariants with `debug_assert!` (nothing in
    /// release builds): every reference resolves, every value is
    /// canonical, the route tables hold exactly the SNI frontends, and the
    /// listener-level rules hold. Call it from tests after every change.
    pub fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        for (id, cluster) in &self.clusters {
            debug_assert_eq!(cluster.cluster_id, **id, "cluster under a wrong key");
            debug_assert_eq!(
                resolve_cluster(cluster).as_ref(),
                Ok(cluster),
                "cluster {id} not canonical"
            );
        }
        let mut tables: BTreeMap<ListenerKey, RouteTable> = BTreeMap::new();
        for (key, stored) in &self.frontends {
            let listener = self.listeners.get(&key.listener());
            debug_assert!(listener.is_some(), "{key} on no listener");
            let interned = self.clusters.get_key_value(&*stored.cluster);
            debug_assert!(interned.is_some(), "{key} routes to a missing cluster");
            debug_assert!(
                interned.is_none_or(|(id, _)| Arc::ptr_eq(id, &stored.cluster)),
                "{key}: cluster id not interned"
            );
            let cluster = interned.map(|(_, cluster)| cluster);
            debug_assert!(stored.is_compact(), "{key}: empty tags boxed");
            let frontend = stored.to_proto(key);
            debug_assert!(
                resolve_frontend(&frontend).is_ok_and(|(k, f)| k == *key && f == frontend),
                "{key} not canonical or under a wrong key"
            );
            debug_assert!(frontend.alpn.is_sorted(), "{key} ALPN not sorted");
            debug_assert!(
                cluster.is_none_or(|c| is_quic_cluster(c) == key.quic),
                "{key}: not its cluster's protocol"
            );
            if let (Some(listener), Some(cluster)) = (listener, cluster) {
                debug_assert!(
                    listener.config.expect_proxy || !is_relay(cluster),
                    "{key}: relay cluster without expect_proxy"
                );
            }
            match &key.sni {
                Some(sni) => {
                    let table = tables.entry(key.listener()).or_default();
                    let inserted =
                        table.insert(sni.clone(), key.alpn.clone(), stored.cluster.clone());
                    debug_assert!(inserted.is_ok(), "{key}: {inserted:?}");
                }
                None => debug_assert_eq!(key.alpn, AlpnSet::Any, "{key}: ALPN without SNI"),
            }
        }
        for (address, listener) in &self.listeners {
            let config = &listener.config;
            debug_assert_eq!(
                config.address,
                address.address.to_string(),
                "listener address"
            );
            debug_assert_eq!(
                crate::validate::is_quic_listener(config),
                address.quic,
                "listener {address}: under the other protocol"
            );
            debug_assert!(
                config.active.is_some()
                    && config.sni_preread_timeout.is_some()
                    && config.sni_preread_max_bytes.is_some()
                    && config.front_timeout_ms.is_some()
                    && config.back_timeout_ms.is_some()
                    && config.connect_timeout_ms.is_some()
                    && both_forms_agree(config.front_timeout, config.front_timeout_ms)
                    && both_forms_agree(config.back_timeout, config.back_timeout_ms)
                    && both_forms_agree(config.connect_timeout, config.connect_timeout_ms)
                    && config.reject_with.is_some()
                    && config.max_unrouted_per_ip.is_some(),
                "listener {address} not resolved"
            );
            debug_assert!(
                config.server_first_timeout.is_none() || config.default_cluster.is_some(),
                "listener {address}: server_first_timeout without default_cluster"
            );
            if let Some(id) = &config.default_cluster {
                let cluster = self.clusters.get(id.as_str());
                debug_assert!(
                    cluster.is_some(),
                    "listener {address}: default_cluster missing"
                );
                debug_assert!(
                    config.expect_proxy || !cluster.is_some_and(is_relay),
                    "listener {address}: relay default_cluster without expect_proxy"
                );
            }
            listener.routes.check_invariants();
            let expected = tables.remove(address).unwrap_or_default();
            debug_assert_eq!(
                listener.routes, expected,
                "listener {address}: routes out of date"
            );
            debug_assert!(
                self.catch_all(address).is_none() || listener.routes.is_empty(),
                "listener {address}: catch-all mixed with SNI frontends"
            );
        }
        for (id, backend) in &self.backends {
            debug_assert_eq!(&backend.backend_id, id, "backend under a wrong key");
            debug_assert!(
                self.clusters.contains_key(backend.cluster_id.as_str()),
                "backend {id}: dangling"
            );
            debug_assert_eq!(
                resolve_backend(backend).as_ref(),
                Ok(backend),
                "backend {id}"
            );
        }
        let mut users: BTreeMap<ClusterId, u32> = BTreeMap::new();
        let of_backends = self.backends.values().filter_map(|b| {
            self.clusters
                .get_key_value(b.cluster_id.as_str())
                .map(|(id, _)| id)
        });
        for id in self
            .frontends
            .values()
            .map(|f| &f.cluster)
            .chain(of_backends)
        {
            *users.entry(id.clone()).or_insert(0) += 1;
        }
        debug_assert_eq!(self.users, users, "the users' counts are out of date");
    }
}
