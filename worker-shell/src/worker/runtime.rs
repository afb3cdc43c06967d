//! A worker's own copy of the routing state: listeners with their preread
//! config and routes, clusters with their backends.
//!
//! Owns: applying the routing generations the main thread already
//! validated, typed change by typed change (nothing is parsed here), then installing the route tables they
//! carry, and walking a generation back through its inverses (and the
//! tables before it) when one of its changes cannot apply. Must never:
//! build or change a route table (the main thread's state built the one
//! every worker shares: a generation's tables are snapshots of it), validate
//! policy (that state is the judge) or touch a socket; binding what the
//! listeners say is the event loop's job.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::change::{Change, FrontendSettings, ListenerSettings, QuicSettings};
use command::generation::{Generation, RouteTables};
use command::listener_key::ListenerKey;
use command::proto;
use hashbrown::HashMap;
use preread_core::access::DEFAULT_IPV6_PREFIX;
use preread_core::quic::QuicRejectWith;
use preread_core::routes::{ClusterId, RouteTable};
use preread_core::step::{PrereadListener, RejectWith};
use preread_core::{DenyJa4, PrereadConfig};
use preread_parser::tls::Ja4;

use super::access::AccessPolicy;
use super::backends::ClusterBackends;
use crate::shared::registry::Registry;

/// One listener as the data path needs it.
#[derive(Debug)]
pub struct ListenerRuntime {
    pub address: SocketAddr,
    pub active: bool,
    /// The SNI routes, the preread settings and the catch-all frontend,
    /// handed to the preread step by reference.
    pub preread: PrereadListener,
    pub front_timeout: Duration,
    pub back_timeout: Duration,
    pub connect_timeout: Duration,
    /// Connections one client IP may hold here before routing; 0 is none.
    pub max_unrouted_per_ip: u32,
    /// Who may connect (`allow`, `deny`, `connection_rate_per_ip`);
    /// `None`: everyone.
    pub access: Option<Arc<AccessPolicy>>,
    /// The prefix length an IPv6 source is counted under.
    pub ipv6_prefix: u8,
    /// A QUIC listener's settings (a UDP socket, `super::quic`); `None`
    /// for a TCP listener.
    pub quic: Option<QuicSettings>,
    /// A QUIC listener's `reject_with`.
    pub quic_reject_with: QuicRejectWith,
    /// Its own `deny_ja4` (the preread config holds it with the
    /// clusters' lists).
    pub deny_ja4: Vec<Ja4>,
}

/// Why a change could not be applied here; the main thread rolls back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The change names a cluster this worker does not have.
    UnknownCluster(String),
    /// The change names a listener this worker does not have.
    NoListener(ListenerKey),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownCluster(id) => write!(f, "unknown cluster {id:?}"),
            Self::NoListener(address) => write!(f, "no listener {address} in this worker"),
        }
    }
}

/// Why a generation could not be applied here: which of its changes was
/// refused, and why. The worker took back the changes before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationRefused {
    /// The refused change, from 1.
    pub change: usize,
    /// How many changes the generation holds.
    pub of: usize,
    /// Why.
    pub refusal: Refusal,
}

impl std::fmt::Display for GenerationRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "change {} of {}: {}; the generation was taken back",
            self.change, self.of, self.refusal
        )
    }
}

impl std::error::Error for GenerationRefused {}

/// The routing state of one worker.
#[derive(Debug)]
pub struct Runtime {
    /// A TCP and a QUIC listener may share an address. Looked up several
    /// times per connection: hashed with foldhash (configured keys), as
    /// the metrics registry is.
    pub listeners: HashMap<ListenerKey, ListenerRuntime>,
    pub clusters: HashMap<ClusterId, ClusterBackends>,
    /// Where each cluster and backend finds what the workers share of it.
    registry: Arc<Registry>,
}

/// A listener's `reject_with` in the step's words.
pub fn reject_with(with: proto::RejectWith) -> RejectWith {
    match with {
        proto::RejectWith::Alert => RejectWith::Alert,
        proto::RejectWith::Close => RejectWith::Close,
        proto::RejectWith::Reset => RejectWith::Reset,
        // Refused on a TCP listener (E107): a QUIC listener's setting,
        // which its flows read from the listener's QUIC settings.
        proto::RejectWith::Drop => RejectWith::Close,
    }
}

impl Runtime {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            listeners: HashMap::new(),
            clusters: HashMap::new(),
            registry,
        }
    }

    /// The interned id of a known cluster, so routes share one allocation.
    fn cluster_id(&self, id: &str) -> Result<ClusterId, Refusal> {
        self.clusters
            .get_key_value(id)
            .map(|(key, _)| key.clone())
            .ok_or_else(|| Refusal::UnknownCluster(id.to_owned()))
    }

    /// Sets the listener's settings from `config`; changes nothing when it
    /// refuses (an unknown default cluster).
    fn configure(
        &self,
        listener: &mut ListenerRuntime,
        settings: &ListenerSettings,
    ) -> Result<(), Refusal> {
        let default_cluster = match &settings.default_cluster {
            Some(id) => Some(self.cluster_id(id)?),
            None => None,
        };
        let preread = &mut listener.preread;
        preread.set_cap(settings.preread_max_bytes as usize);
        preread.config.timeout = settings.preread_timeout;
        preread.config.expect_proxy = settings.expect_proxy;
        preread.config.default_cluster = default_cluster;
        preread.config.server_first_timeout = settings.server_first_timeout;
        preread.reject_with = reject_with(settings.reject_with);
        listener.front_timeout = settings.front_timeout;
        listener.back_timeout = settings.back_timeout;
        listener.connect_timeout = settings.connect_timeout;
        listener.max_unrouted_per_ip = settings.max_unrouted_per_ip;
        listener.access = AccessPolicy::of(&settings.access);
        listener.ipv6_prefix = settings.access.ipv6_prefix;
        listener.quic = settings.quic;
        listener.quic_reject_with = match settings.reject_with {
            proto::RejectWith::Drop => QuicRejectWith::Drop,
            _ => QuicRejectWith::Close,
        };
        listener.deny_ja4.clone_from(&settings.access.deny_ja4);
        Ok(())
    }

    fn cluster_mut(&mut self, id: &str) -> Result<&mut ClusterBackends, Refusal> {
        self.clusters
            .get_mut(id)
            .ok_or_else(|| Refusal::UnknownCluster(id.to_owned()))
    }

    fn listener_mut(&mut self, address: ListenerKey) -> Result<&mut ListenerRuntime, Refusal> {
        self.listeners
            .get_mut(&address)
            .ok_or(Refusal::NoListener(address))
    }

    /// Applies every change of `generation`, then routes on its tables; or
    /// none of it: when a change is refused, the ones before it are
    /// undone, last first, and the tables stay as they were.
    pub fn apply_generation(&mut self, generation: &Generation) -> Result<(), GenerationRefused> {
        for (index, change) in generation.changes.iter().enumerate() {
            if let Err(refusal) = self.apply(change) {
                self.undo_first(generation, index);
                return Err(GenerationRefused {
                    change: index + 1,
                    of: generation.len(),
                    refusal,
                });
            }
        }
        self.install(&generation.routes);
        Ok(())
    }

    /// Takes back a generation this runtime applied in full (its sockets
    /// could not be opened).
    pub fn undo_generation(&mut self, generation: &Generation) {
        self.undo_first(generation, generation.len());
        self.install(&generation.routes_before);
    }

    /// Routes each listener of `tables` on its table from now on: a
    /// snapshot that shares its storage with the main thread's. Sessions
    /// that decided keep their route; the next decision sees the table.
    /// A listener this worker does not have (removed by the generation)
    /// has nothing left to route.
    fn install(&mut self, tables: &RouteTables) {
        for (address, table) in tables {
            if let Some(listener) = self.listeners.get_mut(address) {
                listener.preread.config.routes = table.clone();
            }
        }
        self.install_deny_ja4();
    }

    /// Hands every listener's decisions its own `deny_ja4` and every
    /// cluster's, as the generation left them.
    fn install_deny_ja4(&mut self) {
        let clusters: Vec<(ClusterId, &[Ja4])> = (self.clusters.iter())
            .filter(|(_, backends)| !backends.deny_ja4().is_empty())
            .map(|(id, backends)| (id.clone(), backends.deny_ja4()))
            .collect();
        for listener in self.listeners.values_mut() {
            let lists = (clusters.iter()).fold(
                DenyJa4::new(listener.deny_ja4.iter().copied()),
                |lists, (id, list)| lists.with_cluster(id.clone(), list.iter().copied()),
            );
            listener.preread.config.deny_ja4 = lists;
        }
    }

    /// Undoes the first `applied` changes of `generation`, last first.
    fn undo_first(&mut self, generation: &Generation, applied: usize) {
        for undo in generation.undo.iter().take(applied).rev() {
            if let Err(refusal) = self.apply(undo) {
                // The inverses are exact (the command crate's property
                // tests): this is a bug, and the operator must hear of it.
                log::error!(
                    "undoing a change was refused: {refusal}; this worker may route differently \
                     from the state until the proxy restarts"
                );
            }
        }
    }

    /// Whether the TCP listener at `address` should be open.
    pub fn listens(&self, address: &SocketAddr) -> bool {
        self.listeners
            .get(&ListenerKey::tcp(*address))
            .is_some_and(|l| l.active)
    }

    /// The TCP listener at `address`.
    pub fn tcp_listener(&self, address: SocketAddr) -> Option<&ListenerRuntime> {
        self.listeners.get(&ListenerKey::tcp(address))
    }

    /// The QUIC listener at `address`.
    pub fn quic_listener(&self, address: SocketAddr) -> Option<&ListenerRuntime> {
        self.listeners.get(&ListenerKey::quic(address))
    }

    /// The addresses whose TCP listeners should be open.
    pub fn listening(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.listeners
            .values()
            .filter(|l| l.active && l.quic.is_none())
            .map(|l| l.address)
    }

    /// Whether the QUIC listener at `address` should be open.
    pub fn listens_quic(&self, address: &SocketAddr) -> bool {
        self.listeners
            .get(&ListenerKey::quic(*address))
            .is_some_and(|l| l.active)
    }

    /// The addresses whose QUIC listeners should be open.
    pub fn listening_quic(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.listeners
            .values()
            .filter(|l| l.active && l.quic.is_some())
            .map(|l| l.address)
    }

    /// Applies one change.
    fn apply(&mut self, change: &Change) -> Result<(), Refusal> {
        match change {
            Change::AddListener { settings, active } => {
                if self.listeners.contains_key(&settings.key()) {
                    return Ok(());
                }
                let mut listener = ListenerRuntime {
                    address: settings.address,
                    active: *active,
                    preread: PrereadListener::new(PrereadConfig::new(RouteTable::new()), None),
                    front_timeout: Duration::ZERO,
                    back_timeout: Duration::ZERO,
                    connect_timeout: Duration::ZERO,
                    max_unrouted_per_ip: 0,
                    access: None,
                    ipv6_prefix: DEFAULT_IPV6_PREFIX,
                    quic: None,
                    quic_reject_with: QuicRejectWith::Close,
                    deny_ja4: Vec::new(),
                };
                self.configure(&mut listener, settings)?;
                self.listeners.insert(settings.key(), listener);
                Ok(())
            }
            Change::UpdateListener { settings, active } => {
                let address = settings.key();
                let mut listener = self
                    .listeners
                    .remove(&address)
                    .ok_or(Refusal::NoListener(address))?;
                // `configure` changes nothing when it refuses.
                let configured = self.configure(&mut listener, settings);
                if configured.is_ok() {
                    listener.active = active.unwrap_or(listener.active);
                }
                self.listeners.insert(address, listener);
                configured
            }
            Change::RemoveListener(address) => match self.listeners.remove(address) {
                Some(_) => Ok(()),
                None => Err(Refusal::NoListener(*address)),
            },
            Change::ActivateListener(address) => {
                self.listener_mut(*address)?.active = true;
                Ok(())
            }
            Change::DeactivateListener(address) => {
                self.listener_mut(*address)?.active = false;
                Ok(())
            }
            Change::UpdateCluster(cluster) => {
                self.cluster_mut(&cluster.id)?.update_settings(cluster);
                Ok(())
            }
            Change::AddCluster(cluster) => {
                match self.clusters.get_mut(cluster.id.as_str()) {
                    Some(existing) => existing.update_settings(cluster),
                    None => {
                        let id: ClusterId = Arc::from(cluster.id.as_str());
                        let backends = ClusterBackends::new(cluster, &self.registry);
                        self.clusters.insert(id, backends);
                    }
                }
                Ok(())
            }
            Change::RemoveCluster(id) => {
                self.clusters.remove(id.as_str());
                Ok(())
            }
            Change::AddFrontend(frontend) => self.frontend(frontend, true),
            Change::RemoveFrontend(frontend) => self.frontend(frontend, false),
            Change::AddBackend(backend) | Change::UpdateBackend(backend) => {
                self.cluster_mut(&backend.cluster_id)?
                    .add(backend, Instant::now());
                Ok(())
            }
            Change::RemoveBackend(backend) => {
                if let Some(cluster) = self.clusters.get_mut(backend.cluster_id.as_str()) {
                    cluster.remove(&backend.backend_id);
                }
                Ok(())
            }
        }
    }

    /// A frontend without SNI is the listener's catch-all, set here; one
    /// with an SNI is in the route table the generation brings, so only
    /// its listener and (for an add) its cluster are checked here.
    fn frontend(&mut self, frontend: &FrontendSettings, add: bool) -> Result<(), Refusal> {
        let cluster = self.cluster_id(&frontend.cluster_id);
        let listener = self.listener_mut(frontend.listener())?;
        if frontend.sni.is_none() {
            listener.preread.config.catch_all = if add { Some(cluster?) } else { None };
        } else if add {
            cluster?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
