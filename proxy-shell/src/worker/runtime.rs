//! A worker's own copy of the routing state: listeners with their preread
//! config and routes, clusters with their backends.
//!
//! Owns: applying the routing generations the main thread already
//! validated, change by change, then installing the route tables they
//! carry, and walking a generation back through its inverses (and the
//! tables before it) when one of its changes cannot apply. Must never:
//! build or change a route table (the main thread's state built the one
//! every worker shares: a generation's tables are snapshots of it), validate
//! policy (that state is the judge) or touch a socket; binding what the
//! listeners say is the event loop's job.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::generation::{Generation, RouteTables};
use command::proto::{self, request::RequestType};
use command::validate::{
    DEFAULT_SNI_PREREAD_MAX_BYTES, DEFAULT_SNI_PREREAD_TIMEOUT_MS, back_timeout, connect_timeout,
    front_timeout,
};
use preread_core::PrereadConfig;
use preread_core::routes::{ClusterId, RouteTable};
use preread_core::step::{PrereadListener, RejectWith};

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
}

/// Why a request could not be applied here; the main thread rolls back.
#[derive(Debug)]
pub struct Refusal(pub String);

/// The routing state of one worker.
#[derive(Debug)]
pub struct Runtime {
    pub listeners: HashMap<SocketAddr, ListenerRuntime>,
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
    }
}

fn parse(what: &str, address: &str) -> Result<SocketAddr, Refusal> {
    address
        .parse()
        .map_err(|_| Refusal(format!("{what} {address:?} is not an ip:port address")))
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
            .ok_or_else(|| Refusal(format!("unknown cluster {id:?}")))
    }

    /// Sets the listener's settings from `config`; changes nothing when it
    /// refuses (an unknown default cluster).
    fn configure(
        &self,
        listener: &mut ListenerRuntime,
        config: &proto::TcpListenerConfig,
    ) -> Result<(), Refusal> {
        let default_cluster = match &config.default_cluster {
            Some(id) => Some(self.cluster_id(id)?),
            None => None,
        };
        let ms =
            |v: Option<u32>, default: u32| Duration::from_millis(u64::from(v.unwrap_or(default)));
        let configured = config
            .sni_preread_max_bytes
            .unwrap_or(DEFAULT_SNI_PREREAD_MAX_BYTES);
        let preread = &mut listener.preread;
        preread.set_cap(configured as usize);
        preread.config.timeout = ms(config.sni_preread_timeout, DEFAULT_SNI_PREREAD_TIMEOUT_MS);
        preread.config.expect_proxy = config.expect_proxy;
        preread.config.default_cluster = default_cluster;
        preread.config.server_first_timeout = config.server_first_timeout.map(|v| ms(Some(v), 0));
        preread.reject_with = reject_with(config.reject_with());
        listener.front_timeout = front_timeout(config);
        listener.back_timeout = back_timeout(config);
        listener.connect_timeout = connect_timeout(config);
        listener.max_unrouted_per_ip = config.max_unrouted_per_ip.unwrap_or(0);
        Ok(())
    }

    fn cluster_mut(&mut self, id: &str) -> Result<&mut ClusterBackends, Refusal> {
        self.clusters
            .get_mut(id)
            .ok_or_else(|| Refusal(format!("unknown cluster {id:?}")))
    }

    fn listener_mut(&mut self, address: &str) -> Result<&mut ListenerRuntime, Refusal> {
        let address = parse("listener", address)?;
        self.listeners
            .get_mut(&address)
            .ok_or_else(|| Refusal(format!("no listener {address} in this worker")))
    }

    /// Applies every change of `generation`, then routes on its tables; or
    /// none of it: when a change is refused, the ones before it are
    /// undone, last first, and the tables stay as they were.
    pub fn apply_generation(&mut self, generation: &Generation) -> Result<(), Refusal> {
        for (index, step) in generation.steps.iter().enumerate() {
            if let Err(refusal) = self.apply(step) {
                self.undo_first(generation, index);
                return Err(Refusal(format!(
                    "change {} of {}: {}; the generation was taken back",
                    index + 1,
                    generation.len(),
                    refusal.0
                )));
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
    }

    /// Undoes the first `applied` changes of `generation`, last first.
    fn undo_first(&mut self, generation: &Generation, applied: usize) {
        for undo in generation.undo.iter().take(applied).rev() {
            if let Err(refusal) = self.apply(undo) {
                // The inverses are exact (the command crate's property
                // tests): this is a bug, and the operator must hear of it.
                log::error!(
                    "undoing a change was refused: {}; this worker may route differently \
                     from the state until the proxy restarts",
                    refusal.0
                );
            }
        }
    }

    /// Whether the listener at `address` should be open.
    pub fn listens(&self, address: &SocketAddr) -> bool {
        self.listeners.get(address).is_some_and(|l| l.active)
    }

    /// The addresses whose listeners should be open.
    pub fn listening(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.listeners
            .values()
            .filter(|l| l.active)
            .map(|l| l.address)
    }

    /// Applies one change.
    fn apply(&mut self, request: &proto::Request) -> Result<(), Refusal> {
        let Some(request_type) = &request.request_type else {
            return Err(Refusal("empty request".into()));
        };
        match request_type {
            RequestType::AddTcpListener(config) => {
                let address = parse("listener", &config.address)?;
                if self.listeners.contains_key(&address) {
                    return Ok(());
                }
                let mut listener = ListenerRuntime {
                    address,
                    active: config.active.unwrap_or(true),
                    preread: PrereadListener::new(PrereadConfig::new(RouteTable::new()), None),
                    front_timeout: Duration::ZERO,
                    back_timeout: Duration::ZERO,
                    connect_timeout: Duration::ZERO,
                    max_unrouted_per_ip: 0,
                };
                self.configure(&mut listener, config)?;
                self.listeners.insert(address, listener);
                Ok(())
            }
            RequestType::UpdateTcpListener(config) => {
                let address = parse("listener", &config.address)?;
                let mut listener = self
                    .listeners
                    .remove(&address)
                    .ok_or_else(|| Refusal(format!("no listener {address} in this worker")))?;
                // `configure` changes nothing when it refuses.
                let configured = self.configure(&mut listener, config);
                if configured.is_ok() {
                    listener.active = config.active.unwrap_or(listener.active);
                }
                self.listeners.insert(address, listener);
                configured
            }
            RequestType::RemoveListener(a) => {
                let address = parse("listener", &a.address)?;
                match self.listeners.remove(&address) {
                    Some(_) => Ok(()),
                    None => Err(Refusal(format!("no listener {address} in this worker"))),
                }
            }
            RequestType::ActivateListener(a) => {
                self.listener_mut(&a.address)?.active = true;
                Ok(())
            }
            RequestType::DeactivateListener(a) => {
                self.listener_mut(&a.address)?.active = false;
                Ok(())
            }
            RequestType::UpdateCluster(cluster) => {
                let existing = self.cluster_mut(&cluster.cluster_id)?;
                existing.update_settings(cluster);
                Ok(())
            }
            RequestType::UpdateBackend(backend) => {
                let cluster = self.cluster_mut(&backend.cluster_id)?;
                cluster.add(backend, Instant::now());
                Ok(())
            }
            RequestType::AddCluster(cluster) => {
                match self.clusters.get_mut(cluster.cluster_id.as_str()) {
                    Some(existing) => existing.update_settings(cluster),
                    None => {
                        let id: ClusterId = Arc::from(cluster.cluster_id.as_str());
                        let backends = ClusterBackends::new(cluster, &self.registry);
                        self.clusters.insert(id, backends);
                    }
                }
                Ok(())
            }
            RequestType::RemoveCluster(c) => {
                self.clusters.remove(c.cluster_id.as_str());
                Ok(())
            }
            RequestType::AddTcpFrontend(frontend) => self.frontend(frontend, true),
            RequestType::RemoveTcpFrontend(frontend) => self.frontend(frontend, false),
            RequestType::AddBackend(backend) => {
                let cluster = self.cluster_mut(&backend.cluster_id)?;
                cluster.add(backend, Instant::now());
                Ok(())
            }
            RequestType::RemoveBackend(backend) => {
                if let Some(cluster) = self.clusters.get_mut(backend.cluster_id.as_str()) {
                    cluster.remove(&backend.backend_id);
                }
                Ok(())
            }
            _ => Err(Refusal("not a state change".into())),
        }
    }

    /// A frontend without SNI is the listener's catch-all, set here; one
    /// with an SNI is in the route table the generation brings, so only
    /// its listener and (for an add) its cluster are checked here.
    fn frontend(&mut self, frontend: &proto::TcpFrontend, add: bool) -> Result<(), Refusal> {
        let cluster = self.cluster_id(&frontend.cluster_id);
        let listener = self.listener_mut(&frontend.address)?;
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
