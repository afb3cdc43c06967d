//! The desired routing state: listeners, clusters, frontends, backends.
//!
//! Owns: [`ConfigState`] and [`ConfigState::dispatch`], the one function
//! that validates and applies a state-changing request, whatever its source
//! (config file, command socket, state-file replay, reload diff). Keeps one
//! `preread_core` [`RouteTable`] per listener, so the SNI/ALPN conflict
//! rules are the core's own; the workers route on snapshots of these very
//! tables (a generation carries them), so the process keeps one copy. A frontend is kept as its key and a
//! `StoredFrontend` (cluster id interned as the cluster map's `Arc`, tags
//! boxed only when present), not as a protobuf message repeating the key in
//! five heap fields; [`ConfigState::frontends`] rebuilds the messages.
//! Must never: change anything when it refuses a request; hold a value that is not canonical (addresses as `SocketAddr`
//! prints them, normalized SNI patterns, sorted ALPN lists, resolved
//! defaults), so equal states compare equal however they were built.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use preread_core::PrereadConfig;
use preread_core::pattern::SniPattern;
use preread_core::routes::{AlpnSet, ClusterId, RouteConflict, RouteTable};

use crate::backend_address::BackendAddress;
use crate::codes::ErrorCode;
use crate::proto;
use crate::proto::request::RequestType;
use crate::spelling::quoted;
use crate::stored_frontend::StoredFrontend;
use crate::validate::{
    DEFAULT_WEIGHT, FrontendKey, ValidationError, cluster_differences, frontend_key, is_relay,
    listener_differences, parse_address, resolve_backend, resolve_cluster, resolve_frontend,
    resolve_listener,
};

/// What an accepted request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Applied {
    /// The state changed: forward the request to the workers, save the state.
    Changed,
    /// The state already held this (an identical re-add, activating an
    /// active listener): nothing to forward.
    Unchanged,
}

/// A listener: its resolved config (`active` always set) and its routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    pub(crate) config: proto::TcpListenerConfig,
    pub(crate) routes: RouteTable,
}

impl Listener {
    pub(crate) fn is_active(&self) -> bool {
        self.config.active == Some(true)
    }
}

/// The desired state of the proxy's routing objects.
///
/// Build it only through [`ConfigState::dispatch`]; compare two with `==`
/// (what [`crate::diff::diff`] makes equal).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigState {
    pub(crate) listeners: BTreeMap<SocketAddr, Listener>,
    /// Keyed by the one `Arc` of each cluster id that every frontend and
    /// route table of the cluster shares.
    pub(crate) clusters: BTreeMap<ClusterId, proto::Cluster>,
    pub(crate) frontends: BTreeMap<FrontendKey, StoredFrontend>,
    /// Keyed by backend id alone: ids are unique across clusters.
    pub(crate) backends: BTreeMap<String, proto::Backend>,
}

// prost derives only `PartialEq` for messages with a map field; the
// messages kept here (listener configs, clusters, backends) hold only
// strings, integers and booleans, which have a total equality.
impl Eq for ConfigState {}

/// A request of this kind.
pub(crate) fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn unchanged_if(same: bool) -> Applied {
    if same {
        Applied::Unchanged
    } else {
        Applied::Changed
    }
}

/// Tags as the config writes them: `{ team = "web" }`, or `{}`.
fn tags_shown(tags: &BTreeMap<String, String>) -> String {
    if tags.is_empty() {
        return "{}".to_owned();
    }
    let pairs: Vec<String> = tags
        .iter()
        .map(|(key, value)| format!("{} = {}", quoted(key), quoted(value)))
        .collect();
    format!("{{ {} }}", pairs.join(", "))
}

/// A backend's weight as the config writes it (unset is the default).
fn weight_shown(weight: Option<u32>) -> String {
    weight.unwrap_or(DEFAULT_WEIGHT).to_string()
}

/// A backend's `max_connections` as the config writes it (unset: no limit).
fn limit_shown(limit: Option<u32>) -> String {
    limit.map_or_else(|| "unset".to_owned(), |n| n.to_string())
}

/// A resolved connection timeout: milliseconds always, and the seconds
/// field exactly when the value is whole seconds that fit it.
fn both_forms_agree(seconds: Option<u32>, millis: Option<u64>) -> bool {
    match (seconds, millis) {
        (Some(seconds), Some(millis)) => u64::from(seconds) * 1_000 == millis,
        (None, Some(millis)) => millis % 1_000 != 0 || millis / 1_000 > u64::from(u32::MAX),
        (_, None) => false,
    }
}

/// Up to three names and a count, for "still used by" messages.
fn some_of(names: &[String]) -> String {
    let mut text = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 3 {
        text.push_str(&format!(" and {} more", names.len() - 3));
    }
    text
}

impl ConfigState {
    /// Validates `request` against the state and applies it: call it for
    /// every state-changing request before forwarding it to the workers.
    ///
    /// Re-adding an identical object is `Ok(Unchanged)`, so a controller may
    /// retry. A refused request changes nothing; the error's code says which
    /// rule refused it. Requests that are not state changes (status, lists,
    /// metrics, save/load, stop) are [`ErrorCode::UnsupportedRequest`].
    ///
    /// `update_tcp_listener` replaces every setting of the listener (unset
    /// optional fields take their defaults, as for an add), except that an
    /// unset `active` keeps the listener's activation.
    /// `remove_tcp_frontend` matches the key `(address, sni, alpn)` and the
    /// cluster (tags are ignored); `remove_backend` matches the cluster, the
    /// backend id and the address.
    pub fn dispatch(&mut self, request: &proto::Request) -> Result<Applied, ValidationError> {
        let Some(kind) = &request.request_type else {
            return Err(ValidationError::new(
                ErrorCode::UnsupportedRequest,
                "the request is empty: send one of the add/update/remove/activate/deactivate \
                 requests",
            ));
        };
        match kind {
            RequestType::AddTcpListener(config) => self.add_listener(config),
            RequestType::UpdateTcpListener(config) => self.update_listener(config),
            RequestType::RemoveListener(at) => self.remove_listener(&at.address),
            RequestType::ActivateListener(at) => self.set_active(&at.address, true),
            RequestType::DeactivateListener(at) => self.set_active(&at.address, false),
            RequestType::AddCluster(cluster) => self.add_cluster(cluster),
            RequestType::UpdateCluster(cluster) => self.update_cluster(cluster),
            RequestType::UpdateBackend(backend) => self.update_backend(backend),
            RequestType::RemoveCluster(cluster) => self.remove_cluster(&cluster.cluster_id),
            RequestType::AddTcpFrontend(frontend) => self.add_frontend(frontend),
            RequestType::RemoveTcpFrontend(frontend) => self.remove_frontend(frontend),
            RequestType::AddBackend(backend) => self.add_backend(backend),
            RequestType::RemoveBackend(backend) => self.remove_backend(backend),
            crate::other_request!() => Err(ValidationError::new(
                ErrorCode::UnsupportedRequest,
                "this request does not change the routing state: the command server answers \
                 it, the state does not apply it",
            )),
        }
    }

    /// The listeners' resolved configs (every optional field set, `active`
    /// included), by address.
    pub fn listeners(&self) -> impl ExactSizeIterator<Item = &proto::TcpListenerConfig> {
        self.listeners.values().map(|l| &l.config)
    }

    /// The listener at `address`, resolved.
    #[must_use]
    pub fn listener(&self, address: &SocketAddr) -> Option<&proto::TcpListenerConfig> {
        self.listeners.get(address).map(|l| &l.config)
    }

    /// The clusters, by id.
    pub fn clusters(&self) -> impl ExactSizeIterator<Item = &proto::Cluster> {
        self.clusters.values()
    }

    /// The cluster `id`, if the state holds it.
    pub fn cluster(&self, id: &str) -> Option<&proto::Cluster> {
        self.clusters.get(id)
    }

    /// The frontends in canonical form (normalized SNI, sorted ALPN), by
    /// `(address, sni, alpn)`. Each is rebuilt from the compact form the
    /// state keeps, so this allocates per frontend.
    pub fn frontends(&self) -> impl ExactSizeIterator<Item = proto::TcpFrontend> {
        self.frontends.iter().map(|(key, f)| f.to_proto(key))
    }

    /// The backends (weight resolved), by backend id.
    pub fn backends(&self) -> impl ExactSizeIterator<Item = &proto::Backend> {
        self.backends.values()
    }

    /// The backends whose id comes after `after` (all of them for
    /// `None`), by backend id.
    pub fn backends_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a proto::Backend> + 'a {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.backends
            .range::<str, _>((from, Bound::Unbounded))
            .map(|(_, backend)| backend)
    }

    /// The first exact SNI (no wildcard) of the frontends routed to
    /// `cluster`, in the order of [`frontends`](Self::frontends): the name
    /// a TLS health check of the cluster's backends asks for.
    #[must_use]
    pub fn first_exact_sni(&self, cluster: &str) -> Option<&str> {
        self.frontends
            .iter()
            .find_map(|(key, stored)| match &key.sni {
                Some(SniPattern::Exact(name)) if *stored.cluster == *cluster => Some(name.as_str()),
                _ => None,
            })
    }

    /// The SNI routes of the listener at `address`.
    #[must_use]
    pub fn route_table(&self, address: &SocketAddr) -> Option<&RouteTable> {
        self.listeners.get(address).map(|l| &l.routes)
    }

    /// Every listener's SNI routes, by address.
    pub fn route_tables(&self) -> impl ExactSizeIterator<Item = (SocketAddr, &RouteTable)> {
        self.listeners
            .iter()
            .map(|(address, listener)| (*address, &listener.routes))
    }

    /// Makes `table`, a snapshot equal to the routes of the listener at
    /// `address`, its routes: the state then shares their storage with the
    /// workers that route on the snapshot instead of keeping an equal copy.
    /// Returns whether there is such a listener (nothing changes without).
    pub(crate) fn adopt_routes(&mut self, address: &SocketAddr, table: &RouteTable) -> bool {
        let Some(listener) = self.listeners.get_mut(address) else {
            return false;
        };
        debug_assert_eq!(
            listener.routes.len(),
            table.len(),
            "{address}: other routes"
        );
        listener.routes = table.clone();
        true
    }

    /// The cluster of the listener's frontend without SNI, if it has one: the
    /// worker then proxies every connection there without prereading.
    #[must_use]
    pub fn catch_all(&self, address: &SocketAddr) -> Option<&str> {
        self.frontends
            .get(&FrontendKey::first_of(*address))
            .map(|f| &*f.cluster)
    }

    /// What the core needs for the listener at `address`: its routes, cap,
    /// timeout, PROXY expectation, default cluster and server-first timeout.
    /// The shell still lowers `max_bytes` to what its buffers hold. A
    /// listener with a [`catch_all`](Self::catch_all) frontend has empty
    /// routes here: check `catch_all` first, it takes every connection.
    #[must_use]
    pub fn preread_config(&self, address: &SocketAddr) -> Option<PrereadConfig> {
        let listener = self.listeners.get(address)?;
        let config = &listener.config;
        let ms = |value: Option<u32>| value.map(|ms| Duration::from_millis(u64::from(ms)));
        let mut preread = PrereadConfig::new(listener.routes.clone());
        if let Some(max) = config.sni_preread_max_bytes {
            preread.max_bytes = usize::try_from(max).unwrap_or(usize::MAX);
        }
        if let Some(timeout) = ms(config.sni_preread_timeout) {
            preread.timeout = timeout;
        }
        preread.expect_proxy = config.expect_proxy;
        preread.default_cluster = config.default_cluster.as_deref().map(Arc::from);
        preread.server_first_timeout = ms(config.server_first_timeout);
        Some(preread)
    }

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
        let mut tables: BTreeMap<SocketAddr, RouteTable> = BTreeMap::new();
        for (key, stored) in &self.frontends {
            let listener = self.listeners.get(&key.address);
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
            if let (Some(listener), Some(cluster)) = (listener, cluster) {
                debug_assert!(
                    listener.config.expect_proxy || !is_relay(cluster),
                    "{key}: relay cluster without expect_proxy"
                );
            }
            match &key.sni {
                Some(sni) => {
                    let table = tables.entry(key.address).or_default();
                    let inserted =
                        table.insert(sni.clone(), key.alpn.clone(), stored.cluster.clone());
                    debug_assert!(inserted.is_ok(), "{key}: {inserted:?}");
                }
                None => debug_assert_eq!(key.alpn, AlpnSet::Any, "{key}: ALPN without SNI"),
            }
        }
        for (address, listener) in &self.listeners {
            let config = &listener.config;
            debug_assert_eq!(config.address, address.to_string(), "listener address");
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
    }

    fn listener_mut(
        &mut self,
        address: &str,
    ) -> Result<(SocketAddr, &mut Listener), ValidationError> {
        let parsed = parse_address("listener", address)?;
        match self.listeners.get_mut(&parsed) {
            Some(listener) => Ok((parsed, listener)),
            None => Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no listener at {parsed}: check `preread listener list`"),
            )),
        }
    }

    /// The frontends of the listener at `address`.
    fn frontends_of(
        &self,
        address: SocketAddr,
    ) -> impl Iterator<Item = (&FrontendKey, &StoredFrontend)> {
        self.frontends
            .range(FrontendKey::first_of(address)..)
            .take_while(move |(key, _)| key.address == address)
    }

    /// The state rules of a resolved listener config: its default cluster
    /// exists, and no relay cluster is reached without `expect_proxy`.
    fn check_listener_references(
        &self,
        address: SocketAddr,
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

    fn add_listener(
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
                        "a listener at {address} already exists with other settings ({}): send \
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

    fn update_listener(
        &mut self,
        config: &proto::TcpListenerConfig,
    ) -> Result<Applied, ValidationError> {
        let (address, mut resolved) = resolve_listener(config)?;
        let Some(existing) = self.listeners.get(&address) else {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no listener at {address} to update: add it instead"),
            ));
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

    fn remove_listener(&mut self, address: &str) -> Result<Applied, ValidationError> {
        let (address, _) = self.listener_mut(address)?;
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

    fn set_active(&mut self, address: &str, active: bool) -> Result<Applied, ValidationError> {
        let (_, listener) = self.listener_mut(address)?;
        let same = listener.is_active() == active;
        listener.config.active = Some(active);
        Ok(unchanged_if(same))
    }

    fn add_cluster(&mut self, cluster: &proto::Cluster) -> Result<Applied, ValidationError> {
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
    fn update_cluster(&mut self, cluster: &proto::Cluster) -> Result<Applied, ValidationError> {
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
        if is_relay(cluster) {
            let by_frontend = self
                .frontends
                .iter()
                .find(|(key, f)| {
                    *f.cluster == **id
                        && self
                            .listeners
                            .get(&key.address)
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

    fn remove_cluster(&mut self, id: &str) -> Result<Applied, ValidationError> {
        if !self.clusters.contains_key(id) {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no cluster `{id}`: check `preread cluster list`"),
            ));
        }
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
        if !users.is_empty() {
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

    fn add_frontend(&mut self, frontend: &proto::TcpFrontend) -> Result<Applied, ValidationError> {
        let key = frontend_key(frontend)?;
        let id = &frontend.cluster_id;
        let Some(listener) = self.listeners.get(&key.address) else {
            return Err(ValidationError::new(
                ErrorCode::UnknownListener,
                format!(
                    "{key} of cluster `{id}`: there is no listener at {}: add the listener \
                     first, or correct the address",
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
                    "one frontend per (address, sni, alpn)",
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
            Some(_) => self.catch_all(&key.address).map(|other| {
                format!(
                    "{key} of cluster `{id}`: listener {} already sends every connection to \
                     cluster `{other}` through its frontend without sni, so it cannot route by SNI",
                    key.address
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
                    key.address
                ),
            ));
        }
        let interned = interned.clone();
        if let (Some(sni), Some(listener)) = (&key.sni, self.listeners.get_mut(&key.address)) {
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
        self.frontends
            .insert(key, StoredFrontend::new(interned, &frontend.tags));
        Ok(Applied::Changed)
    }

    fn remove_frontend(
        &mut self,
        frontend: &proto::TcpFrontend,
    ) -> Result<Applied, ValidationError> {
        let key = frontend_key(frontend)?;
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
        if let (Some(sni), Some(listener)) = (&key.sni, self.listeners.get_mut(&key.address)) {
            let removed = listener.routes.remove(sni, &key.alpn);
            debug_assert!(removed.is_some(), "{key} was not in the route table");
        }
        self.frontends.remove(&key);
        Ok(Applied::Changed)
    }

    fn add_backend(&mut self, backend: &proto::Backend) -> Result<Applied, ValidationError> {
        let canonical = resolve_backend(backend)?;
        let (id, cluster) = (&canonical.backend_id, &canonical.cluster_id);
        if !self.clusters.contains_key(cluster.as_str()) {
            return Err(ValidationError::new(
                ErrorCode::UnknownCluster,
                format!(
                    "backend `{id}`: cluster `{cluster}` does not exist: add the cluster first"
                ),
            ));
        }
        match self.backends.get(id) {
            Some(existing) if *existing == canonical => Ok(Applied::Unchanged),
            Some(existing) if existing.cluster_id != *cluster => Err(ValidationError::new(
                ErrorCode::DuplicateBackendId,
                format!(
                    "backend id `{id}` is already used by a backend of cluster `{}` ({}): \
                     backend ids are unique across clusters (metrics are named after them), \
                     pick another id such as `{cluster}-{id}`",
                    existing.cluster_id, existing.address
                ),
            )),
            Some(existing) => Err(ValidationError::new(
                ErrorCode::BackendConflict,
                format!(
                    "backend `{id}` of cluster `{cluster}` already exists as {} (weight {}, \
                     backup {}, max_connections {}), not {} (weight {}, backup {}, \
                     max_connections {}): change it in place with `backend update`, or \
                     remove it first, or use another backend_id",
                    existing.address,
                    weight_shown(existing.weight),
                    existing.backup,
                    limit_shown(existing.max_connections),
                    canonical.address,
                    weight_shown(canonical.weight),
                    canonical.backup,
                    limit_shown(canonical.max_connections)
                ),
            )),
            None => {
                self.backends.insert(id.clone(), canonical);
                Ok(Applied::Changed)
            }
        }
    }

    /// Changes an existing backend's weight, backup flag or
    /// `max_connections` in place; its address and cluster are its identity
    /// and stay.
    fn update_backend(&mut self, backend: &proto::Backend) -> Result<Applied, ValidationError> {
        let canonical = resolve_backend(backend)?;
        let (id, cluster) = (&canonical.backend_id, &canonical.cluster_id);
        let Some(existing) = self.backends.get(id).filter(|b| b.cluster_id == *cluster) else {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!(
                    "there is no backend `{id}` in cluster `{cluster}` to update: add it first \
                     (`backend add`)"
                ),
            ));
        };
        if existing.address != canonical.address {
            return Err(ValidationError::new(
                ErrorCode::BackendConflict,
                format!(
                    "backend `{id}` of cluster `{cluster}` is {}, not {}: an update changes the \
                     weight, the backup flag and max_connections only; remove it and add it at \
                     its new address",
                    existing.address, canonical.address
                ),
            ));
        }
        if *existing == canonical {
            return Ok(Applied::Unchanged);
        }
        self.backends.insert(id.clone(), canonical);
        Ok(Applied::Changed)
    }

    fn remove_backend(&mut self, backend: &proto::BackendRef) -> Result<Applied, ValidationError> {
        let what = format!(
            "backend `{}` of cluster `{}`",
            backend.backend_id, backend.cluster_id
        );
        let address = BackendAddress::parse(&what, &backend.address)?;
        match self.backends.get(&backend.backend_id) {
            Some(existing)
                if existing.cluster_id == backend.cluster_id
                    && existing.address == address.to_string() =>
            {
                self.backends.remove(&backend.backend_id);
                Ok(Applied::Changed)
            }
            Some(existing) => Err(ValidationError::new(
                ErrorCode::NotFound,
                format!(
                    "there is no {what} at {address}: that id belongs to cluster `{}` at {}",
                    existing.cluster_id, existing.address
                ),
            )),
            None => Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no {what}: check `preread cluster list`"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use preread_core::routes::Lookup;

    use super::*;

    fn ok(state: &mut ConfigState, kind: RequestType) -> Applied {
        let applied = state.dispatch(&request(kind));
        state.check_invariants();
        match applied {
            Ok(applied) => applied,
            Err(e) => panic!("refused: {e}"),
        }
    }

    fn changed(state: &mut ConfigState, kind: RequestType) {
        assert_eq!(ok(state, kind), Applied::Changed);
    }

    fn sample() -> ConfigState {
        let mut s = ConfigState::default();
        changed(
            &mut s,
            RequestType::AddCluster(proto::Cluster {
                cluster_id: "a".into(),
                ..Default::default()
            }),
        );
        changed(
            &mut s,
            RequestType::AddCluster(proto::Cluster {
                cluster_id: "fb".into(),
                ..Default::default()
            }),
        );
        changed(
            &mut s,
            RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: "127.0.0.1:0443".into(),
                default_cluster: Some("fb".into()),
                server_first_timeout: Some(300),
                sni_preread_max_bytes: Some(4096),
                ..Default::default()
            }),
        );
        changed(
            &mut s,
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: "a".into(),
                address: "127.0.0.1:443".into(),
                sni: Some("*.Example.COM.".into()),
                alpn: vec!["http/1.1".into(), "h2".into()],
                tags: Default::default(),
            }),
        );
        changed(
            &mut s,
            RequestType::AddBackend(proto::Backend {
                cluster_id: "a".into(),
                backend_id: "a-0".into(),
                address: "127.0.0.1:09001".into(),
                weight: None,
                backup: false,
                max_connections: None,
            }),
        );
        s
    }

    fn refused(state: &mut ConfigState, kind: RequestType) -> ErrorCode {
        let before = state.clone();
        let error = match state.dispatch(&request(kind)) {
            Err(error) => error,
            Ok(applied) => panic!("accepted: {applied:?}"),
        };
        assert_eq!(*state, before, "a refused request changed the state");
        error.code
    }

    #[test]
    fn the_first_exact_sni_of_a_cluster_skips_wildcards_and_other_clusters() {
        let mut s = sample();
        assert_eq!(s.first_exact_sni("a"), None, "only a wildcard so far");
        for (cluster, sni) in [
            ("fb", "b.example.net"),
            ("a", "z.example.com"),
            ("a", "m.example.com"),
        ] {
            changed(
                &mut s,
                RequestType::AddTcpFrontend(proto::TcpFrontend {
                    cluster_id: cluster.into(),
                    address: "127.0.0.1:443".into(),
                    sni: Some(sni.into()),
                    alpn: vec![],
                    tags: Default::default(),
                }),
            );
        }
        assert_eq!(s.first_exact_sni("a"), Some("m.example.com"));
        assert_eq!(s.first_exact_sni("fb"), Some("b.example.net"));
        assert_eq!(s.first_exact_sni("nobody"), None);
    }

    #[test]
    fn a_cluster_keeps_its_health_check_resolved() {
        let mut s = sample();
        changed(
            &mut s,
            RequestType::UpdateCluster(proto::Cluster {
                cluster_id: "a".into(),
                health_check: Some(proto::HealthCheck {
                    interval_ms: Some(500),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        );
        assert_eq!(
            s.clusters.get("a").and_then(|c| c.health_check),
            Some(proto::HealthCheck {
                kind: proto::HealthCheckKind::Tcp as i32,
                interval_ms: Some(500),
                timeout_ms: Some(500),
                rise: Some(2),
                fall: Some(3),
            })
        );
        s.check_invariants();
    }

    #[test]
    fn a_cluster_is_updated_in_place_and_keeps_its_routes() {
        let mut s = sample();
        let frontends = s.frontends().count();
        let update = |lb: proto::LoadBalancing, pp: proto::ProxyProtocol, id: &str| {
            RequestType::UpdateCluster(proto::Cluster {
                cluster_id: id.into(),
                load_balancing: lb as i32,
                proxy_protocol: pp as i32,
                max_connections_per_ip: 7,
                health_check: None,
            })
        };
        use proto::{LoadBalancing as Lb, ProxyProtocol as Pp};
        changed(&mut s, update(Lb::LeastConnections, Pp::Send, "a"));
        assert_eq!(s.frontends().count(), frontends, "the routes stay");
        assert_eq!(
            s.clusters
                .get("a")
                .map(|c| (c.load_balancing, c.max_connections_per_ip)),
            Some((Lb::LeastConnections as i32, 7))
        );
        assert_eq!(
            ok(&mut s, update(Lb::LeastConnections, Pp::Send, "a")),
            Applied::Unchanged
        );
        assert_eq!(
            refused(&mut s, update(Lb::Random, Pp::None, "nope")),
            ErrorCode::NotFound
        );
        // Relay needs every listener that reaches it to expect a header.
        assert_eq!(
            refused(&mut s, update(Lb::Random, Pp::Relay, "a")),
            ErrorCode::RelayWithoutExpectProxy,
            "a frontend of a listener without expect_proxy"
        );
        assert_eq!(
            refused(&mut s, update(Lb::Random, Pp::Relay, "fb")),
            ErrorCode::RelayWithoutExpectProxy,
            "the default_cluster of a listener without expect_proxy"
        );
    }

    #[test]
    fn a_backend_is_updated_in_place_but_never_moved() {
        let mut s = sample();
        let backend = |address: &str, weight| {
            RequestType::UpdateBackend(proto::Backend {
                cluster_id: "a".into(),
                backend_id: "a-0".into(),
                address: address.into(),
                weight: Some(weight),
                backup: true,
                max_connections: None,
            })
        };
        changed(&mut s, backend("127.0.0.1:9001", 250));
        assert_eq!(
            s.backends.get("a-0").map(|b| (b.weight, b.backup)),
            Some((Some(250), true))
        );
        assert_eq!(
            ok(&mut s, backend("127.0.0.1:9001", 250)),
            Applied::Unchanged
        );
        assert_eq!(
            refused(&mut s, backend("127.0.0.1:9002", 250)),
            ErrorCode::BackendConflict
        );
        let mut elsewhere = backend("127.0.0.1:9001", 1);
        if let RequestType::UpdateBackend(b) = &mut elsewhere {
            b.cluster_id = "fb".into();
        }
        assert_eq!(refused(&mut s, elsewhere), ErrorCode::NotFound);
    }

    #[test]
    fn stores_canonical_resolved_values() {
        let s = sample();
        let listener = s.listeners().next().cloned();
        assert_eq!(
            listener,
            Some(proto::TcpListenerConfig {
                address: "127.0.0.1:443".into(),
                expect_proxy: false,
                sni_preread_timeout: Some(5000),
                sni_preread_max_bytes: Some(4096),
                default_cluster: Some("fb".into()),
                server_first_timeout: Some(300),
                front_timeout: Some(60),
                back_timeout: Some(30),
                connect_timeout: Some(3),
                active: Some(true),
                reject_with: Some(proto::RejectWith::Alert as i32),
                max_unrouted_per_ip: Some(0),
                front_timeout_ms: Some(60_000),
                back_timeout_ms: Some(30_000),
                connect_timeout_ms: Some(3_000),
            })
        );
        let frontend = s.frontends().next();
        assert_eq!(
            frontend.as_ref().and_then(|f| f.sni.as_deref()),
            Some("*.example.com")
        );
        assert_eq!(
            frontend.as_ref().map(|f| f.alpn.clone()),
            Some(vec!["h2".into(), "http/1.1".into()])
        );
        let backend = s.backends().next();
        assert_eq!(
            backend.map(|b| (b.address.as_str(), b.weight)),
            Some(("127.0.0.1:9001", Some(100)))
        );
    }

    #[test]
    fn identical_re_add_is_unchanged() {
        let mut s = sample();
        let before = s.clone();
        for request in s.generate_requests() {
            let kind = request.request_type.clone();
            assert_eq!(s.dispatch(&request), Ok(Applied::Unchanged), "{kind:?}");
        }
        // The same objects written differently are the same objects.
        let again = [
            RequestType::AddTcpListener(proto::TcpListenerConfig {
                address: "127.0.0.1:443".into(),
                default_cluster: Some("fb".into()),
                server_first_timeout: Some(300),
                sni_preread_max_bytes: Some(4096),
                sni_preread_timeout: Some(5000),
                active: Some(true),
                ..Default::default()
            }),
            RequestType::AddTcpFrontend(proto::TcpFrontend {
                cluster_id: "a".into(),
                address: "127.0.0.1:00443".into(),
                sni: Some("*.example.com".into()),
                alpn: vec!["h2".into(), "http/1.1".into()],
                tags: Default::default(),
            }),
            RequestType::AddBackend(proto::Backend {
                cluster_id: "a".into(),
                backend_id: "a-0".into(),
                address: "127.0.0.1:9001".into(),
                weight: Some(100),
                backup: false,
                max_connections: None,
            }),
            RequestType::ActivateListener(proto::ListenerAddress {
                address: "127.0.0.1:443".into(),
            }),
        ];
        for kind in again {
            assert_eq!(ok(&mut s, kind), Applied::Unchanged);
        }
        assert_eq!(s, before);
    }

    #[test]
    fn remove_then_re_add_restores_the_state() {
        let mut s = sample();
        let before = s.clone();
        let frontend = s.frontends().next().unwrap_or_default();
        let backend = s.backends().next().cloned().unwrap_or_default();
        changed(&mut s, RequestType::RemoveTcpFrontend(frontend.clone()));
        assert!(
            s.route_table(&"127.0.0.1:443".parse().unwrap())
                .is_some_and(RouteTable::is_empty)
        );
        changed(
            &mut s,
            RequestType::RemoveBackend(proto::BackendRef {
                cluster_id: backend.cluster_id.clone(),
                backend_id: backend.backend_id.clone(),
                address: "127.0.0.1:9001".into(),
            }),
        );
        changed(
            &mut s,
            RequestType::RemoveCluster(proto::ClusterRef {
                cluster_id: "a".into(),
            }),
        );
        assert_ne!(s, before);
        changed(
            &mut s,
            RequestType::AddCluster(proto::Cluster {
                cluster_id: "a".into(),
                ..Default::default()
            }),
        );
        changed(&mut s, RequestType::AddTcpFrontend(frontend));
        changed(&mut s, RequestType::AddBackend(backend));
        assert_eq!(s, before);
    }

    #[test]
    fn activation_and_update() {
        let mut s = sample();
        let at = || proto::ListenerAddress {
            address: "127.0.0.1:443".into(),
        };
        assert_eq!(
            ok(&mut s, RequestType::DeactivateListener(at())),
            Applied::Changed
        );
        assert_eq!(
            ok(&mut s, RequestType::DeactivateListener(at())),
            Applied::Unchanged
        );
        // An update without `active` keeps the activation and resets the
        // other unset fields to their defaults.
        let update = proto::TcpListenerConfig {
            address: "127.0.0.1:443".into(),
            expect_proxy: true,
            ..Default::default()
        };
        assert_eq!(
            ok(&mut s, RequestType::UpdateTcpListener(update.clone())),
            Applied::Changed
        );
        assert_eq!(
            ok(&mut s, RequestType::UpdateTcpListener(update)),
            Applied::Unchanged
        );
        let config = s.listeners().next().cloned().unwrap_or_default();
        assert_eq!(config.active, Some(false));
        assert_eq!(config.default_cluster, None);
        assert_eq!(config.sni_preread_max_bytes, Some(65_536));
        assert_eq!(
            ok(&mut s, RequestType::ActivateListener(at())),
            Applied::Changed
        );
    }

    #[test]
    fn preread_config_carries_the_listener() {
        let s = sample();
        let address: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let config = s.preread_config(&address);
        let Some(config) = config else {
            panic!("no config")
        };
        assert_eq!(config.max_bytes, 4096);
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.default_cluster.as_deref(), Some("fb"));
        assert_eq!(
            config.server_first_timeout,
            Some(Duration::from_millis(300))
        );
        assert!(!config.expect_proxy);
        let lookup = config.routes.lookup(b"x.example.com", [&b"h2"[..]]);
        assert!(
            matches!(lookup, Lookup::Matched { cluster, .. } if &**cluster == "a"),
            "{lookup:?}"
        );
        assert_eq!(s.catch_all(&address), None);
        assert!(s.preread_config(&"127.0.0.1:1".parse().unwrap()).is_none());
    }

    #[test]
    fn generate_requests_rebuilds_the_state() {
        let mut s = sample();
        changed(
            &mut s,
            RequestType::DeactivateListener(proto::ListenerAddress {
                address: "127.0.0.1:443".into(),
            }),
        );
        let mut rebuilt = ConfigState::default();
        for request in s.generate_requests() {
            assert_eq!(
                rebuilt.dispatch(&request),
                Ok(Applied::Changed),
                "{request:?}"
            );
            rebuilt.check_invariants();
        }
        assert_eq!(rebuilt, s);
    }
}
