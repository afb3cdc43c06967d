//! The clusters and backends of the process, as every thread shares them:
//! each cluster's per-IP counts and active check, each backend's
//! instances (one per address it resolved to) with their health.
//!
//! Owns: [`Registry`], where workers get (or create) the one
//! [`SharedCluster`] and [`SharedBackend`] of each object they apply, and
//! where the command thread drops the ones the committed state no longer
//! holds ([`Registry::sync`]), sets each cluster's [`CheckPlan`], and finds
//! what `backend list` shows; [`SharedBackend`], its instances swapped
//! whole when a resolution changes them, and a version that tells a worker
//! to take the new set. Must never: be locked on the accept or connect path
//! (workers lock it only while applying a generation, and hold the
//! instances they were given), hold a lock across a syscall, or lose an
//! instance's health when a new resolution still lists its address.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use command::backend_address::BackendAddress;
use command::change::Change;
use command::proto;
use command::state::ConfigState;

use super::admission::PerIp;
use super::health::Checks;
use super::instance::Instance;
use super::rates::SharedRates;

/// What the checker thread does for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPlan {
    pub tls: bool,
    pub interval: Duration,
    pub timeout: Duration,
    pub checks: Checks,
    /// The SNI of a TLS check: the cluster's first exact one, if any.
    pub sni: Option<String>,
}

impl CheckPlan {
    /// The plan of a resolved `health_check`, asking for `sni`.
    #[must_use]
    pub fn of(check: &proto::HealthCheck, sni: Option<&str>) -> Self {
        use command::health_check::{DEFAULT_INTERVAL_MS, DEFAULT_TIMEOUT_MS};
        let ms =
            |v: Option<u32>, default: u32| Duration::from_millis(u64::from(v.unwrap_or(default)));
        Self {
            tls: check.kind == proto::HealthCheckKind::Tls as i32,
            interval: ms(check.interval_ms, DEFAULT_INTERVAL_MS),
            timeout: ms(check.timeout_ms, DEFAULT_TIMEOUT_MS),
            checks: checks_of(check),
            sni: sni.map(str::to_owned),
        }
    }
}

/// The rise and fall of a resolved `health_check`.
#[must_use]
pub fn checks_of(check: &proto::HealthCheck) -> Checks {
    use command::health_check::{DEFAULT_FALL, DEFAULT_RISE};
    Checks {
        rise: check.rise.unwrap_or(DEFAULT_RISE).max(1),
        fall: check.fall.unwrap_or(DEFAULT_FALL).max(1),
    }
}

/// What every worker shares of one cluster.
#[derive(Debug)]
pub struct SharedCluster {
    id: Arc<str>,
    /// Open connections per client address (`max_connections_per_ip`).
    pub per_ip: Arc<PerIp<std::net::IpAddr>>,
    /// The `connection_rate_per_ip` buckets per source, made on the
    /// first connection a rate counts: most clusters have none.
    rates: OnceLock<Arc<SharedRates<std::net::IpAddr>>>,
    check: Mutex<Option<CheckPlan>>,
}

impl SharedCluster {
    /// The cluster's rate buckets, shared by every worker.
    pub fn rates(&self) -> &SharedRates<std::net::IpAddr> {
        self.rates.get_or_init(SharedRates::new)
    }

    #[must_use]
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The cluster's active check, as the committed state says.
    #[must_use]
    pub fn check(&self) -> Option<CheckPlan> {
        lock(&self.check).clone()
    }
}

/// A name's resolution, for the resolver and `backend list`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// When the next resolution is due; `None`: at once.
    pub due: Option<Instant>,
    /// The last resolution failed with this.
    pub error: Option<String>,
}

/// What every worker shares of one backend.
#[derive(Debug)]
pub struct SharedBackend {
    cluster: Arc<str>,
    id: Arc<str>,
    address: BackendAddress,
    instances: RwLock<Arc<[Arc<Instance>]>>,
    /// Bumped after each change of `instances`.
    version: AtomicU64,
    resolution: Mutex<Resolution>,
}

impl SharedBackend {
    fn new(cluster: Arc<str>, id: Arc<str>, address: BackendAddress, now: Instant) -> Self {
        let instances: Arc<[Arc<Instance>]> = match &address {
            BackendAddress::Ip(ip) => Arc::new([Instance::new(
                Arc::clone(&cluster),
                Arc::clone(&id),
                *ip,
                now,
            )]),
            BackendAddress::Name { .. } => Arc::new([]),
        };
        Self {
            cluster,
            id,
            address,
            instances: RwLock::new(instances),
            version: AtomicU64::new(0),
            resolution: Mutex::new(Resolution::default()),
        }
    }

    #[must_use]
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    #[must_use]
    pub fn cluster(&self) -> &Arc<str> {
        &self.cluster
    }

    #[must_use]
    pub fn address(&self) -> &BackendAddress {
        &self.address
    }

    /// Changes whenever [`instances`](Self::instances) does.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The instances now: one for an `ip:port`, one per resolved address
    /// for a name (none before its first resolution).
    #[must_use]
    pub fn instances(&self) -> Arc<[Arc<Instance>]> {
        Arc::clone(
            &self
                .instances
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Takes a resolution's addresses: an address seen before keeps its
    /// instance (its health and connections); a new one starts up.
    /// Returns whether the set changed.
    pub fn set_addresses(&self, addresses: &[SocketAddr], now: Instant) -> bool {
        let mut current = self
            .instances
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(merged) = merge(&current, addresses, |address| {
            Instance::new(
                Arc::clone(&self.cluster),
                Arc::clone(&self.id),
                address,
                now,
            )
        }) else {
            return false;
        };
        *current = merged.into();
        self.version.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// The resolution's state.
    #[must_use]
    pub fn resolution(&self) -> Resolution {
        lock(&self.resolution).clone()
    }

    /// Records a resolution: its error (`None`: it resolved) and when the
    /// next one is due.
    pub fn resolved(&self, error: Option<String>, next: Instant) {
        *lock(&self.resolution) = Resolution {
            due: Some(next),
            error,
        };
    }
}

/// The instances for `addresses` (sorted, without repeats), reusing those
/// of `current` at the same address; `None` when that is `current` itself.
pub fn merge(
    current: &[Arc<Instance>],
    addresses: &[SocketAddr],
    new: impl Fn(SocketAddr) -> Arc<Instance>,
) -> Option<Vec<Arc<Instance>>> {
    let mut wanted: Vec<SocketAddr> = addresses.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let same = wanted.len() == current.len()
        && wanted
            .iter()
            .zip(current)
            .all(|(address, instance)| *address == instance.address());
    if same {
        return None;
    }
    let by_address: HashMap<SocketAddr, &Arc<Instance>> =
        current.iter().map(|i| (i.address(), i)).collect();
    Some(
        wanted
            .into_iter()
            .map(|address| {
                by_address
                    .get(&address)
                    .map_or_else(|| new(address), |kept| Arc::clone(kept))
            })
            .collect(),
    )
}

/// A backend as the registry keys it: an id re-added at another address is
/// another backend.
type BackendKey = (String, String, BackendAddress);

/// Every cluster and backend of the process.
#[derive(Debug, Default)]
pub struct Registry {
    clusters: Mutex<BTreeMap<String, Arc<SharedCluster>>>,
    backends: Mutex<BTreeMap<BackendKey, Arc<SharedBackend>>>,
    /// Bumped whenever the set of backends, instances or checks changes:
    /// the checker thread takes a new list then.
    version: AtomicU64,
    /// The resolver waits here; a new named backend wakes it.
    wake: (Mutex<bool>, Condvar),
}

impl Registry {
    /// The cluster `id`, created on its first mention.
    pub fn cluster(&self, id: &str) -> Arc<SharedCluster> {
        let mut clusters = lock(&self.clusters);
        Arc::clone(clusters.entry(id.to_owned()).or_insert_with(|| {
            Arc::new(SharedCluster {
                id: Arc::from(id),
                per_ip: PerIp::new(),
                rates: OnceLock::new(),
                check: Mutex::new(None),
            })
        }))
    }

    /// The backend `id` of `cluster` at `address`, created on its first
    /// mention; a new named one wakes the resolver.
    pub fn backend(
        &self,
        cluster: &str,
        id: &str,
        address: &BackendAddress,
        now: Instant,
    ) -> Arc<SharedBackend> {
        let key = (cluster.to_owned(), id.to_owned(), address.clone());
        let mut backends = lock(&self.backends);
        if let Some(existing) = backends.get(&key) {
            return Arc::clone(existing);
        }
        let created = Arc::new(SharedBackend::new(
            Arc::from(cluster),
            Arc::from(id),
            address.clone(),
            now,
        ));
        backends.insert(key, Arc::clone(&created));
        drop(backends);
        self.changed();
        if matches!(address, BackendAddress::Name { .. }) {
            self.wake_resolver();
        }
        created
    }

    /// Makes the registry hold exactly the clusters and backends of the
    /// committed `state` (those a refused generation created go, those a
    /// worker has not mentioned yet come), and sets each cluster's check.
    pub fn sync(&self, state: &ConfigState, now: Instant) {
        let wanted: HashSet<&str> = state.clusters().map(|c| c.cluster_id.as_str()).collect();
        lock(&self.clusters).retain(|id, _| wanted.contains(id.as_str()));
        for cluster in state.clusters() {
            self.sync_check(state, cluster);
        }
        let mut keep = HashSet::new();
        for backend in state.backends() {
            let Ok(address) = BackendAddress::parse(&backend.backend_id, &backend.address) else {
                continue;
            };
            self.backend(&backend.cluster_id, &backend.backend_id, &address, now);
            keep.insert((
                backend.cluster_id.clone(),
                backend.backend_id.clone(),
                address,
            ));
        }
        let mut backends = lock(&self.backends);
        let before = backends.len();
        backends.retain(|key, _| keep.contains(key));
        if backends.len() != before {
            drop(backends);
            self.changed();
        }
    }

    /// [`sync`](Self::sync) for what `steps` changed: the clusters they
    /// name, with their checks and backends; the backends are walked once
    /// for all of them (a bulk change names thousands of clusters: a walk
    /// per cluster made it quadratic). A step that names no cluster (a
    /// listener's) syncs everything.
    pub fn sync_changed(&self, state: &ConfigState, changes: &[Change], now: Instant) {
        let mut touched = BTreeSet::new();
        for change in changes {
            match change.cluster() {
                Some(cluster) => touched.insert(cluster),
                None => return self.sync(state, now),
            };
        }
        for id in &touched {
            match state.cluster(id) {
                Some(cluster) => self.sync_check(state, cluster),
                None => {
                    lock(&self.clusters).remove(*id);
                }
            }
        }
        let mut keep = HashSet::new();
        for backend in state.backends() {
            let id = backend.cluster_id.as_str();
            if !touched.contains(id) {
                continue;
            }
            let Ok(address) = BackendAddress::parse(&backend.backend_id, &backend.address) else {
                continue;
            };
            self.backend(id, &backend.backend_id, &address, now);
            keep.insert((id, backend.backend_id.as_str(), address));
        }
        let mut backends = lock(&self.backends);
        let before = backends.len();
        backends.retain(|(cluster, backend, address), _| {
            !touched.contains(cluster.as_str())
                || keep.contains(&(cluster.as_str(), backend.as_str(), address.clone()))
        });
        if backends.len() != before {
            drop(backends);
            self.changed();
        }
    }

    /// Sets the active check of `cluster` as the state declares it.
    fn sync_check(&self, state: &ConfigState, cluster: &proto::Cluster) {
        let shared = self.cluster(&cluster.cluster_id);
        let plan = cluster.health_check.as_ref().map(|check| {
            let sni = (check.kind == proto::HealthCheckKind::Tls as i32)
                .then(|| state.first_exact_sni(&cluster.cluster_id))
                .flatten();
            CheckPlan::of(check, sni)
        });
        let mut current = lock(&shared.check);
        if *current != plan {
            *current = plan;
            drop(current);
            self.changed();
        }
    }

    /// The shared backend of a backend of the state, if the registry holds
    /// it.
    #[must_use]
    pub fn find(&self, backend: &proto::Backend) -> Option<Arc<SharedBackend>> {
        let address = BackendAddress::parse(&backend.backend_id, &backend.address).ok()?;
        let key = (
            backend.cluster_id.clone(),
            backend.backend_id.clone(),
            address,
        );
        lock(&self.backends).get(&key).cloned()
    }

    /// Every backend, in key order.
    #[must_use]
    pub fn backends(&self) -> Vec<Arc<SharedBackend>> {
        lock(&self.backends).values().cloned().collect()
    }

    /// Every cluster with an active check, its plan, and its backends.
    #[must_use]
    pub fn checked(&self) -> Vec<(CheckPlan, Vec<Arc<SharedBackend>>)> {
        let plans: BTreeMap<String, CheckPlan> = lock(&self.clusters)
            .iter()
            .filter_map(|(id, cluster)| Some((id.clone(), cluster.check()?)))
            .collect();
        let mut by_cluster: BTreeMap<String, Vec<Arc<SharedBackend>>> = BTreeMap::new();
        for ((cluster, _, _), backend) in lock(&self.backends).iter() {
            if plans.contains_key(cluster) {
                by_cluster
                    .entry(cluster.clone())
                    .or_default()
                    .push(Arc::clone(backend));
            }
        }
        plans
            .into_iter()
            .map(|(id, plan)| (plan, by_cluster.remove(&id).unwrap_or_default()))
            .collect()
    }

    /// Changes whenever what [`checked`](Self::checked) lists may have.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Marks a change of the backends' instances (a resolution).
    pub fn changed(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Wakes the resolver to look for names due now.
    pub fn wake_resolver(&self) {
        let (woken, condvar) = &self.wake;
        *lock(woken) = true;
        condvar.notify_all();
    }

    /// The resolver's wait: until woken or `timeout` passed.
    pub fn wait_for_names(&self, timeout: Duration) {
        let (woken, condvar) = &self.wake;
        let guard = lock(woken);
        let (mut guard, _) = condvar
            .wait_timeout_while(guard, timeout, |woken| !*woken)
            .unwrap_or_else(PoisonError::into_inner);
        *guard = false;
    }
}

/// Every lock here guards data that each step assigns whole, so a poisoned
/// one (a panic inside a step) is still consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
