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

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use preread_core::pattern::SniPattern;
use preread_core::routes::{AlpnSet, ClusterId, RouteConflict, RouteTable};
use preread_core::{DenyJa4, PrereadConfig};
use preread_parser::tls::Ja4;

use crate::backend_address::BackendAddress;
use crate::codes::ErrorCode;
use crate::listener_key::ListenerKey;
use crate::proto;
use crate::proto::request::RequestType;
use crate::spelling::quoted;
use crate::stored_frontend::StoredFrontend;
use crate::validate::{
    DEFAULT_WEIGHT, FrontendKey, ValidationError, cluster_differences, frontend_key,
    is_quic_cluster, is_relay, listener_differences, resolve_backend, resolve_cluster,
    resolve_frontend, resolve_listener,
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
    /// A TCP and a QUIC listener may share an address.
    pub(crate) listeners: BTreeMap<ListenerKey, Listener>,
    /// Keyed by the one `Arc` of each cluster id that every frontend and
    /// route table of the cluster shares.
    pub(crate) clusters: BTreeMap<ClusterId, proto::Cluster>,
    pub(crate) frontends: BTreeMap<FrontendKey, StoredFrontend>,
    /// Keyed by backend id alone: ids are unique across clusters.
    pub(crate) backends: BTreeMap<String, proto::Backend>,
    /// How many frontends and backends each cluster has (a cluster with
    /// none is absent): its removal looks here instead of walking every
    /// frontend and backend (at 10,000 clusters, a bulk rewrite removed
    /// 10,000 of them, a walk of 20,000 objects each).
    pub(crate) users: BTreeMap<ClusterId, u32>,
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
    /// Counts a frontend or backend of `cluster`.
    fn add_user(&mut self, cluster: &ClusterId) {
        *self.users.entry(cluster.clone()).or_insert(0) += 1;
    }

    /// Counts a frontend or backend of `cluster` gone.
    fn drop_user(&mut self, cluster: &str) {
        if let Some(count) = self.users.get_mut(cluster) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.users.remove(cluster);
            }
        }
    }

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
            RequestType::RemoveListener(at) => self.remove_listener(at),
            RequestType::ActivateListener(at) => self.set_active(at, true),
            RequestType::DeactivateListener(at) => self.set_active(at, false),
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
    /// included), by address, a TCP listener before a QUIC one.
    pub fn listeners(&self) -> impl ExactSizeIterator<Item = &proto::TcpListenerConfig> {
        self.listeners.values().map(|l| &l.config)
    }

    /// The listener `address`, resolved.
    #[must_use]
    pub fn listener(&self, address: &ListenerKey) -> Option<&proto::TcpListenerConfig> {
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
    /// `(address, protocol, sni, alpn)`. Each is rebuilt from the compact form the
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

    /// The SNI routes of the listener `address`.
    #[must_use]
    pub fn route_table(&self, address: &ListenerKey) -> Option<&RouteTable> {
        self.listeners.get(address).map(|l| &l.routes)
    }

    /// Every listener's SNI routes, by listener.
    pub fn route_tables(&self) -> impl ExactSizeIterator<Item = (ListenerKey, &RouteTable)> {
        self.listeners
            .iter()
            .map(|(address, listener)| (*address, &listener.routes))
    }

    /// Makes `table`, a snapshot equal to the routes of the listener at
    /// `address`, its routes: the state then shares their storage with the
    /// workers that route on the snapshot instead of keeping an equal copy.
    /// Returns whether there is such a listener (nothing changes without).
    pub(crate) fn adopt_routes(&mut self, address: &ListenerKey, table: &RouteTable) -> bool {
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
    pub fn catch_all(&self, address: &ListenerKey) -> Option<&str> {
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
    /// The `deny_ja4` lists a listener's decisions check: its own
    /// (`listener`) and every cluster's. The state holds them validated;
    /// an entry that does not read is left out.
    fn deny_ja4(&self, listener: &[String]) -> DenyJa4 {
        let parsed = |list: &[String]| -> Vec<Ja4> {
            list.iter()
                .filter_map(|text| Ja4::parse(text).ok())
                .collect()
        };
        let clusters = self.clusters.iter().filter(|(_, c)| !c.deny_ja4.is_empty());
        clusters.fold(DenyJa4::new(parsed(listener)), |lists, (id, cluster)| {
            lists.with_cluster(id.clone(), parsed(&cluster.deny_ja4))
        })
    }

    pub fn preread_config(&self, address: &ListenerKey) -> Option<PrereadConfig> {
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
        preread.deny_ja4 = self.deny_ja4(&config.deny_ja4);
        Some(preread)
    }
}

mod backends;
mod clusters;
mod frontends;
mod invariants;
mod listeners;

#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod tests;
